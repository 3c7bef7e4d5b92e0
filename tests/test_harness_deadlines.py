"""Deadlines, rate limits and upstream errors in the ``stepwise-chat`` harness, against the
scripted model server: straight (the harness's own behaviour), through verifiers' own
interception server (what a ``vf-eval`` rollout sees), and through the real ``vf-eval``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import verifiers.v1 as vf

from verifiers_stepwise.envs import harness as harness_module
from verifiers_stepwise.envs.harness import ChatSession, ModelCallError, StepwiseChatConfig, StepwiseChatHarness
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import CONTEXT_ERROR, ModelServer, Reply, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval

from .test_env import _many_games, client, guess_env, only_trace  # noqa: F401 - guess_env is a fixture
from .test_harness import agent, api_key, task  # noqa: F401 - api_key is an autouse fixture

SCRIPT = scripted(
    {
        "Never done": [Reply(content="almost there", fault="no_done")],
        "Rate limited": [Reply(content="fine", fault="http_429", times=2)],
        "Too long": [Reply(fault="http_400")],
        "Over the context": [Reply(fault="stream_error")],
        "Busy": [Reply(content="fine", fault="http_429")],
    }
)


async def session_run(server: ModelServer, prompt: str, started: float | None = None, **config):
    """One segment straight against ``server``: its answer, or the ModelCallError raised."""
    data = vf.TaskData(prompt=prompt)
    ctx = vf.ModelContext(model="m", client=vf.EvalClientConfig())
    trace = vf.Trace(task=vf.TraceTask(type="Task", data=data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    if started is not None:
        trace.timing.start = started
    harness = StepwiseChatHarness(StepwiseChatConfig(**{"retry_backoff": 0.0, **config}))
    session = await harness.session(ctx, trace, None, server.base_url, "secret", {}, data)
    try:
        return await session._run(None)
    except ModelCallError as error:
        return error
    finally:
        await session.close()


def requests_for(server: ModelServer, prompt: str) -> int:
    return sum(1 for b in server.chat_requests if b["messages"][-1].get("content") == prompt)


async def test_a_stream_that_never_finishes_ends_at_the_call_deadline():
    """Chunks, then keepalive comments forever: each read answers within request_timeout, so
    only the call's total deadline can end it."""
    with ModelServer(SCRIPT, hang_seconds=30) as server:
        start = time.monotonic()
        error = await session_run(server, "Never done", call_timeout=1.5, request_timeout=0.5, max_retries=3)
        elapsed = time.monotonic() - start
    assert isinstance(error, ModelCallError) and "ran past the call_timeout of 1.5 s" in str(error)
    assert 1.5 <= elapsed < 5 and requests_for(server, "Never done") == 1  # the deadline is not retried


async def test_through_the_interception_a_hung_stream_is_the_rollouts_error_and_the_run_goes_on():
    with ModelServer(SCRIPT, hang_seconds=30) as server:
        start = time.monotonic()
        hung = await agent(server, harness={"call_timeout": 1.5}).run(task("Never done"))
        elapsed = time.monotonic() - start
        after = await agent(server).run(task("Count with me"))
    assert not hung.ok and hung.is_completed and elapsed < 15
    assert "ran past the call_timeout of 1.5 s" in hung.errors[-1].message
    assert after.ok and after.last_reply == "ok"


async def test_no_model_call_starts_after_the_episode_deadline():
    with ModelServer(SCRIPT) as server:
        error = await session_run(server, "Count with me", started=time.time() - 100, episode_timeout=50)
        assert requests_for(server, "Count with me") == 0
    assert isinstance(error, ModelCallError) and "the episode_timeout of 50 s has passed" in str(error)


async def test_a_rate_limit_is_waited_out_as_the_server_asks(monkeypatch):
    """Retry-After is honoured, and a 429 does not use up max_retries (it is bounded by the
    call's deadline instead)."""
    delays = []
    sleep = harness_module.asyncio.sleep

    async def recorded(seconds, *args):
        if seconds:
            delays.append(seconds)
        await sleep(0)

    monkeypatch.setattr(harness_module.asyncio, "sleep", recorded)
    with ModelServer(SCRIPT, retry_after=3) as server:
        result = await session_run(server, "Rate limited", max_retries=0, retry_backoff=0.1)
        assert requests_for(server, "Rate limited") == 3
    assert isinstance(result, vf.ProgramResult) and delays == [3.0, 3.0]


async def test_a_rate_limit_longer_than_the_deadline_ends_the_call_at_once():
    with ModelServer(SCRIPT, retry_after=30) as server:
        start = time.monotonic()
        error = await session_run(server, "Rate limited", call_timeout=5)
        assert time.monotonic() - start < 3 and requests_for(server, "Rate limited") == 1
    assert isinstance(error, ModelCallError) and error.status_code == 429
    assert "waiting 30 s would pass the deadline" in str(error)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_request_error_is_not_retried_and_keeps_its_status_and_message(stream):
    with ModelServer(SCRIPT) as server:
        error = await session_run(server, "Too long", stream=stream, max_retries=3)
        assert requests_for(server, "Too long") == 1
    assert isinstance(error, ModelCallError) and error.status_code == 400 and not error.retryable
    assert "maximum context length" in str(error)


@pytest.mark.parametrize("stream", [True, False])
async def test_through_the_interception_an_upstream_request_error_reaches_the_trace(stream):
    with ModelServer(SCRIPT) as server:
        trace = await agent(server, harness={"stream": stream, "max_retries": 3}).run(task("Too long"))
        assert requests_for(server, "Too long") == 1
    assert not trace.ok
    assert any("400" in e.message and "maximum context length" in e.message for e in trace.errors), trace.errors


async def test_in_an_episode_a_hung_call_is_that_turns_error_and_the_run_goes_on(guess_env, monkeypatch):  # noqa: F811
    """The third model call's stream never finishes (default request settings, keepalives
    flowing): the call_timeout ends it, the two earned turns keep their rewards, the other
    game runs to the end."""
    monkeypatch.setattr(guess_env.GuessTaskset, "load", _many_games)
    script = {f"Game {i}:": ["1", "2", Reply(content="3", fault="no_done")] for i in (3, 4, 5, 6)}
    script["Game 9:"] = ["1", "9"]
    env = {"taskset": {"id": "guess-env"}, "agent": {"harness": {"id": "stepwise-chat", "call_timeout": 2}}}
    start = time.monotonic()
    with ModelServer(scripted(script), hang_seconds=60) as server:
        groups = await run_groups(env, client(server))
    assert time.monotonic() - start < 40
    *hung, clean = [only_trace(g) for g in groups]
    for trace in hung:
        assert not trace.ok and "ran past the call_timeout of 2 s" in trace.errors[-1].message
        assert len(trace.info["turn_rewards"]) == 2  # the turns it earned are kept
    assert clean.ok and clean.info["turn_rewards"] == pytest.approx([0.2, 1.0])


async def test_a_streamed_upstream_error_is_retried_once_without_streaming():
    """Straight: the error event arrives (no status); the plain retry gets the server's 400."""
    with ModelServer(SCRIPT) as server:
        error = await session_run(server, "Over the context", max_retries=3)
        bodies = [b for b in server.chat_requests if b["messages"][-1].get("content") == "Over the context"]
    assert [b.get("stream") for b in bodies] == [True, None]
    assert isinstance(error, ModelCallError) and error.status_code == 400 and CONTEXT_ERROR in str(error)


async def test_through_the_interception_a_streamed_upstream_error_reaches_the_trace_with_its_status():
    """verifiers 0.4.0's interception drops a stream's error event (its account is a 502
    "upstream stream ended before its terminal event"); the plain retry gets the upstream's
    400 relayed, which is the rollout's error, and a 400 is not retried again."""
    with ModelServer(SCRIPT) as server:
        trace = await agent(server, harness={"max_retries": 3}).run(task("Over the context"))
        bodies = [b for b in server.chat_requests if b["messages"][-1].get("content") == "Over the context"]
    assert [b.get("stream") for b in bodies] == [True, None]
    assert not trace.ok and trace.errors[-1].status_code == 400 and CONTEXT_ERROR in trace.errors[-1].message
    assert [c.error.status_code for c in trace.calls if c.error] == [502, 400]


async def test_through_the_interception_a_rate_limit_backs_off_exponentially(monkeypatch):
    """The interception (0.4.0) answers an upstream 429 with its own JSON error and no
    Retry-After, so the harness waits its own back-off, doubling, not a fixed one, until the
    next wait would pass the call's deadline."""
    waits = []
    backoff = ChatSession._backoff

    def recorded(self, retries):
        waits.append(backoff(self, retries))
        return waits[-1]

    monkeypatch.setattr(ChatSession, "_backoff", recorded)
    with ModelServer(SCRIPT, retry_after=30) as server:
        trace = await agent(server, harness={"retry_backoff": 0.05, "call_timeout": 1}).run(task("Busy"))
        assert requests_for(server, "Busy") == 5
    assert not trace.ok and trace.errors[-1].status_code == 429
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8]  # 0.75 s waited; the next 0.8 s would pass 1 s


KEYS = ("17 * 23", "144 / 12", "2 ** 10")


@pytest.mark.slow
def test_vf_eval_upstream_errors_and_rate_limits(tmp_path: Path):
    """The real vf-eval on stepwise-refine's arithmetic: a stream that ends in the upstream's
    error event (as llama.cpp's does past its context), a 429 (Retry-After: 30) that clears after
    three answers, and one that never clears."""
    overflow_key, survivor_key, limited_key = KEYS
    script = scripted(
        {
            overflow_key: [Reply(content="391", fault="stream_error")],
            survivor_key: [Reply(content="12", fault="http_429", times=3)],
            limited_key: [Reply(content="1024", fault="http_429")],
        }
    )
    harness = ["--env.agent.harness.retry-backoff", "0.25", "--env.agent.harness.call-timeout", "6"]
    with ModelServer(script, retry_after=30) as server:
        start = time.monotonic()
        run = run_vf_eval(
            ["stepwise-refine", "-n", "3", "-r", "1", "--env.agent.harness.max-retries", "3", *harness],
            server.base_url,
            output_dir=tmp_path / "outputs",
            env={"HOME": str(tmp_path)},
        )
        elapsed = time.monotonic() - start
        asked = {key: [b for b in server.chat_requests if key in str(b["messages"])] for key in KEYS}
    # the arithmetic set's first three problems, in that order
    overflow, survivor, limited = (e.traces[0] for e in sorted(run.episodes, key=lambda e: e.task.data.idx))
    # the upstream's own status and message, after one plain retry (not max_retries of them)
    assert [b.get("stream") for b in asked[overflow_key]] == [True, None]
    assert overflow.errors[-1].status_code == 400 and CONTEXT_ERROR in overflow.errors[-1].message
    # Retry-After does not pass the interception: the back-off (0.25, 0.5, 1 s) waits, the episode survives
    assert survivor.ok and survivor.info["turn_scores"] == [1.0] and len(asked[survivor_key]) == 4
    # never cleared: waits of 0.25, 0.5, 1, 2 s, then the next (4 s) would pass the 6 s call_timeout
    assert limited.errors[-1].status_code == 429 and len(asked[limited_key]) == 5
    assert elapsed < 60
