"""The scripted local model server, driven by the OpenAI SDK and raw HTTP."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict

import httpx
import openai
import pytest

from verifiers_stepwise.testing.server import (
    CONTEXT_ERROR,
    ModelServer,
    PerRollout,
    Reply,
    ToolCallReply,
    scripted,
    spawned,
)
from verifiers_stepwise.testing.vf_eval import run_vf_eval

SCRIPT = scripted(
    {
        "capital of France": [Reply(content="Lyon", reasoning="I think Lyon"), "Paris"],
        "use the tool": [Reply(tool_calls=[ToolCallReply("lookup", {"q": "weather"})]), "sunny"],
        "break": [Reply(content="recovered", fault="http_500", times=1)],
    },
    default="default reply",
)


@pytest.fixture(scope="module")
def server():
    with ModelServer(SCRIPT) as s:
        yield s


def client(server: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def ask(server, prompt, history=(), stream=False, **kwargs):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}, *history]
    if not stream:
        return client(server).chat.completions.create(model="m", messages=messages, **kwargs)
    with client(server).chat.completions.stream(model="m", messages=messages, **kwargs) as events:
        return events.get_final_completion()


@pytest.mark.parametrize("stream", [False, True])
def test_replies_follow_each_conversations_script(server, stream):
    first = ask(server, "What is the capital of France?", stream=stream)
    assert first.choices[0].message.content == "Lyon"
    assert first.choices[0].finish_reason == "stop"
    second = ask(
        server,
        "What is the capital of France?",
        [{"role": "assistant", "content": "Lyon"}, {"role": "user", "content": "No."}],
        stream=stream,
    )
    assert second.choices[0].message.content == "Paris"
    assert ask(server, "Something else", stream=stream).choices[0].message.content == "default reply"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_replies(server, stream):
    reply = ask(server, "Please use the tool", stream=stream)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"q": "weather"}
    assert call.id == "call_0_0"
    assert reply.choices[0].finish_reason == "tool_calls"


def test_non_streaming_reasoning_and_usage(server):
    reply = ask(server, "capital of France, quickly")
    raw = reply.choices[0].message.model_dump()
    assert raw["reasoning_content"] == "I think Lyon"
    assert reply.usage.prompt_tokens == 2 + 4 and reply.usage.completion_tokens == 1 + 3


def test_streams_end_with_done_and_carry_usage_when_asked(server):
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "capital of France"}],
    }
    text = httpx.post(f"{server.base_url}/chat/completions", json=body).text
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks[:-1]) == "I think Lyon"


def test_max_tokens_cuts_the_reply_like_a_provider(server):
    reply = ask(server, "Something else", max_tokens=1)
    assert reply.choices[0].message.content == "default"
    assert reply.choices[0].finish_reason == "length"


def test_a_fault_with_times_fires_then_the_call_is_answered(server):
    with pytest.raises(openai.InternalServerError):
        ask(server, "break it")
    assert ask(server, "break it").choices[0].message.content == "recovered"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("http_500", lambda r: r.status_code == 500 and "scripted fault" in r.json()["error"]["message"]),
        ("malformed_json", lambda r: r.status_code == 200 and _not_json(r.text)),
        ("empty", lambda r: r.status_code == 200 and r.content == b""),
    ],
)
def test_faults(fault, check, stream):
    with ModelServer(scripted({"x": [Reply(fault=fault)]})) as server:
        body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "x"}]}
        assert check(httpx.post(f"{server.base_url}/chat/completions", json=body))


def test_stream_error_fault_is_an_error_event_in_a_200_stream_or_a_400():
    """As llama.cpp answers a request past its context."""
    with ModelServer(scripted({"x": [Reply(fault="stream_error")]})) as server:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        streamed = httpx.post(f"{server.base_url}/chat/completions", json=body)
        plain = httpx.post(f"{server.base_url}/chat/completions", json=body | {"stream": False})
    assert streamed.status_code == 200 and streamed.text.startswith("data: ") and "[DONE]" not in streamed.text
    event = json.loads(streamed.text.removeprefix("data: "))
    assert event["error"]["code"] == 400 and event["error"]["message"] == CONTEXT_ERROR
    assert plain.status_code == 400 and plain.json() == event


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_without_usage_sends_none(stream):
    with ModelServer(usage=False) as server:
        reply = ask(server, "anything", stream=stream, stream_options={"include_usage": True} if stream else None)
    assert reply.usage is None and reply.choices[0].message.content == "ok"


def test_timeout_fault_hangs_until_the_client_gives_up():
    with ModelServer(scripted({"x": [Reply(fault="timeout")]})) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=0.3)


def test_requests_are_recorded_with_headers(server):
    before = len(server.requests)
    ask(server, "Something else", temperature=0.25)
    recorded = server.requests[before]
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["Authorization"] == "Bearer test-key"
    assert recorded.body["temperature"] == 0.25
    assert client(server).models.list().data[0].id == "scripted-model"


def test_per_rollout_plans_follow_the_session_header():
    script = scripted({"x": PerRollout(["a"], ["b", "c"])})
    with ModelServer(script) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}

        def reply(session, history=()):
            payload = {**body, "messages": [*body["messages"], *history]}
            response = httpx.post(
                f"{server.base_url}/chat/completions", json=payload, headers={"X-Session-ID": session}
            )
            return response.json()["choices"][0]["message"]["content"]

        assert [reply("s1"), reply("s2"), reply("s1"), reply("s3")] == ["a", "b", "a", "a"]
        assert reply("s2", [{"role": "assistant", "content": "b"}]) == "c"


def test_an_empty_conversation_script_is_refused():
    with pytest.raises(ValueError, match="conversation 'x' scripts no reply"):
        scripted({"x": []})
    with pytest.raises(ValueError, match="conversation 'y' scripts no reply"):
        scripted({"y": PerRollout(["a"], [])})


def _not_json(text: str) -> bool:
    payload = text.split("\n\n")[0].removeprefix("data: ")
    try:
        json.loads(payload)
    except ValueError:
        return True
    return False


def test_runs_as_its_own_process_until_stdin_closes():
    with spawned("hello there") as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        body = {"model": "m", "messages": [{"role": "user", "content": "anything"}]}
        reply = httpx.post(f"{base_url}/chat/completions", json=body).json()
        assert reply["choices"][0]["message"]["content"] == "hello there"


def _serve(*args: str) -> subprocess.Popen:
    """The documented command, detached from any terminal: stdin closed, as under ``nohup``."""
    return subprocess.Popen(
        [sys.executable, "-m", "verifiers_stepwise.testing.server", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ask(base_url: str, session: str = "s", prompt: str = "anything") -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, headers={"X-Session-ID": session}, timeout=30)
    return reply.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_command_serves_with_stdin_closed_until_a_signal(signum):
    process = _serve("--reply", "42")
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        time.sleep(0.5)  # stdin is at end of file: the server must not take that as its cue to stop
        assert process.poll() is None
        assert _ask(base_url) == "42"
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0, process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_command_honours_port_and_cycles_replies_over_each_prompts_rollouts():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = _serve("--port", str(port), "--reply", "40", "--reply", "42")
    try:
        base_url = process.stdout.readline().strip()
        assert base_url == f"http://127.0.0.1:{port}/v1"
        assert [_ask(base_url, s) for s in ("a", "b", "c", "a", "b")] == ["40", "42", "40", "40", "42"]
        # Rollouts are counted per prompt: another task's first rollout gets the first reply.
        assert [_ask(base_url, s, prompt="task 2") for s in ("d", "a", "d")] == ["40", "42", "40"]
        taken = _serve("--port", str(port))
        assert taken.wait(timeout=60) == 1
        assert f"port {port}" in taken.stderr.read()
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_command_numbers_each_runs_rollouts_from_zero():
    """Runs against one server get the same replies when each has a base URL of its own: the
    rollout count is per run (three rollouts of four replies would shift a second run sharing
    the count), and the unnamed run (``/v1``) counts on its own."""
    process = _serve("--reply", "40", "--reply", "41", "--reply", "42", "--reply", "43")
    try:
        base_url = process.stdout.readline().strip()
        runs = [[_ask(base_url.replace("/v1", f"/run/{run}/v1"), s) for s in ("a", "b", "c")] for run in ("x", "y")]
        assert runs == [["40", "41", "42"]] * 2
        assert [_ask(base_url, s) for s in ("a", "d")] == ["40", "41"]
        assert [_ask(base_url.replace("/v1", "/run/x/v1"), s) for s in ("d", "a")] == ["43", "40"]  # x goes on
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


@pytest.mark.slow
def test_two_named_vf_eval_runs_against_one_server_get_the_same_rewards(tmp_path):
    """As docs/writing-envs.md promises: rollout k of each task gets the k-th reply in every run
    that names itself in its base URL, so each task's rewards repeat (episodes finish in any
    order, so they are compared sorted)."""
    process = _serve("--reply", "391", "--reply", "400", "--reply", "12", "--reply", "no idea")
    try:
        base_url = process.stdout.readline().strip()
        args = ["stepwise-refine", "-n", "2", "-r", "3", "--env.max-turns", "2"]
        runs = [
            run_vf_eval(
                args, base_url.replace("/v1", f"/run/{i}/v1"), output_dir=tmp_path / str(i), env={"HOME": str(tmp_path)}
            )
            for i in (1, 2)
        ]
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
    rewards = []
    for run in runs:
        by_task = defaultdict(list)
        for episode in run.episodes:
            by_task[episode.task.data.idx].append(episode.traces[0].reward)
        rewards.append({idx: sorted(values) for idx, values in by_task.items()})
    assert rewards[0] == rewards[1]
    # 17 * 23 = 391: the replies 391, 400 and 12 (not "no idea": a fourth rollout would get it).
    assert rewards[0][0] == pytest.approx(sorted([1.0, 1 - 9 / 391, 12 / 391]))
