"""The in-process ``stepwise-chat`` harness, driven through verifiers' own Agent and Rollout
against the scripted local model server."""

from __future__ import annotations

import json

import openai
import pytest
import verifiers.v1 as vf
from verifiers.v1.interception import InterceptionServer
from verifiers.v1.session import RolloutSession
from verifiers.v1.utils.loaders import harness_class, harness_config_type

from verifiers_stepwise.envs import harness as harness_module
from verifiers_stepwise.envs.harness import (
    ChatSession,
    ModelCallError,
    StepwiseChatConfig,
    StepwiseChatHarness,
    strip_think,
)
from verifiers_stepwise.testing.server import ModelServer, Reply, ToolCallReply, scripted
from verifiers_stepwise.testing.tools import Calculator, CalculatorState

KEY_VAR = "STEPWISE_TEST_API_KEY"

SCRIPT = scripted(
    {
        "Count with me": ["one", "two", "three"],
        "Write a long answer": ["alpha beta gamma delta epsilon"],
        "Flaky": [Reply(content="fine", fault="http_500", times=1)],
        "Broken call": [Reply(fault="http_500")],
        "Add 2 and 3": [
            Reply(
                content="Let me add.",
                tool_calls=[
                    ToolCallReply("calculator_add", {"a": 2, "b": 3}),
                    ToolCallReply("calculator_add", {"a": 1, "b": 1}, id="deny-me"),
                    ToolCallReply("calculator_multiply", {"a": 2, "b": 2}),
                    ToolCallReply("calculator_add", "{not json"),
                    ToolCallReply("calculator_add", "[1, 2]"),
                    ToolCallReply("calculator_divide", {"a": 1, "b": 2}),
                ],
            ),
            Reply(tool_calls=[ToolCallReply("calculator_submit", {"answer": "5"})]),
            "The sum is 5.",
        ],
    }
)


@pytest.fixture(scope="module")
def server():
    with ModelServer(SCRIPT) as s:
        yield s


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


def agent(server: ModelServer, **config) -> vf.Agent:
    harness = {"id": "stepwise-chat", "retry_backoff": 0.0, **config.pop("harness", {})}
    return vf.make_agent(
        vf.AgentConfig(
            harness=harness,
            runtime=vf.SubprocessConfig(),
            model="local-model",
            client=vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            **config,
        )
    )


def task(prompt: str, **data) -> vf.Task:
    return vf.Task(vf.TaskData(prompt=prompt, system_prompt="Be brief.", **data))


def requests_for(server: ModelServer, prompt: str) -> list[dict]:
    return [b for b in server.chat_requests if any(m.get("content") == prompt for m in b["messages"])]


def test_the_harness_id_resolves_through_verifiers_loader():
    assert harness_class("stepwise-chat") is StepwiseChatHarness
    assert harness_config_type("stepwise-chat") is StepwiseChatConfig
    config = vf.AgentConfig(harness={"id": "stepwise-chat", "stream": False})
    assert isinstance(config.harness, StepwiseChatConfig) and config.harness.stream is False


@pytest.mark.parametrize("stream", [True, False])
async def test_multi_turn_exchange_with_usage_accounting(server, stream):
    prompt = f"Count with me ({stream})"
    async with agent(server, harness={"stream": stream}).interaction(task(prompt)) as chat:
        replies = [(await chat.turn()).last_reply]
        replies += [(await chat.turn(m)).last_reply for m in ("next", "next")]
    trace = chat.trace
    assert replies == ["one", "two", "three"]
    assert trace.ok and trace.stop_condition == "user_closed" and not trace.errors
    assert [n.message.role for n in trace.nodes] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    sent = requests_for(server, prompt)
    assert [len(b["messages"]) for b in sent] == [2, 4, 6]
    assert all(b.get("stream", False) is stream for b in sent)
    if stream:
        assert all(b["stream_options"] == {"include_usage": True} for b in sent)
    # Usage: the server counts words; every call's usage reaches the trace.
    words = [sum(len(m["content"].split()) for m in b["messages"]) for b in sent]
    assert [c.usage.prompt_tokens for c in trace.calls] == words
    assert trace.usage.completion_tokens == 3
    assert [c.finish_reason for c in trace.calls] == ["stop"] * 3


async def test_sampling_settings_and_max_tokens_reach_the_model(server):
    sampling = vf.SamplingConfig(temperature=0.3, top_p=0.9, max_tokens=2)
    a = agent(server, sampling=sampling)
    trace = await a.run(task("Write a long answer, please"))
    (body,) = requests_for(server, "Write a long answer, please")
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.9, 2)
    assert trace.assistant_messages[-1].content == "alpha beta"
    assert trace.calls[-1].finish_reason == "length" and trace.is_truncated


async def test_token_caps_stop_the_exchange_without_an_error(server):
    async with agent(server, max_output_tokens=1).interaction(task("Count with me (capped)")) as chat:
        first = await chat.turn()
        refused = await chat.turn("next")
    assert first.last_reply == "one" and refused.terminated
    assert chat.trace.stop_condition == "max_output_tokens"
    assert chat.trace.ok and chat.trace.is_truncated and not chat.trace.errors


async def test_a_transient_server_error_is_retried(server):
    trace = await agent(server).run(task("Flaky call"))
    assert trace.ok and trace.last_reply == "fine"
    first, retry = [r for r in server.requests if r.body and r.body["messages"][-1]["content"] == "Flaky call"]
    assert first.headers["x-stainless-retry-count"] == "0"  # the SDK's first attempt: not a retry
    assert retry.headers["x-stainless-retry-count"] == "1"
    assert len(trace.calls) == 2 and trace.calls[0].error.status_code == 500


async def test_a_persistent_server_error_is_recorded_on_the_trace(server):
    trace = await agent(server, harness={"max_retries": 1}).run(task("Broken call"))
    assert not trace.ok and trace.stop_condition == "provider_error"
    assert trace.errors[-1].type == "ProviderError" and trace.errors[-1].status_code == 500
    assert len(requests_for(server, "Broken call")) == 2


class CalculatorTask(vf.Task[vf.TaskData, CalculatorState]):
    @classmethod
    def toolsets(cls, config):
        return [Calculator(vf.ToolsetConfig())]

    @vf.reward
    async def submitted(self, trace) -> float:
        return float(trace.state.submitted == "5")

    @vf.intercept
    async def policy(self, request: vf.Request) -> vf.Request | None:
        """The rollout's tool gate denies the call with id "deny-me" before it runs."""
        last = request.messages[-1]
        if isinstance(last, vf.ToolMessage) and last.tool_call_id == "deny-me":
            request.messages[-1] = last.model_copy(update={"content": "denied by policy"})
            return request
        return None


@pytest.mark.slow
async def test_tool_calls_run_against_the_tasks_mcp_servers(server):
    """One rollout (MCP servers take seconds to start): a tool loop against the task's MCP
    toolset, with the shared state channel, the tool gate, disabled, unknown and malformed
    calls answered in the conversation instead of crashing it."""
    trace = await agent(server, harness={"disabled_tools": ["calculator_multiply"]}).run(
        CalculatorTask(vf.TaskData(prompt="Add 2 and 3", system_prompt="Use tools."))
    )
    assert trace.ok, trace.errors
    assert trace.last_reply == "The sum is 5."
    assert [n.message.role for n in trace.nodes] == [
        "system",
        "user",
        "assistant",
        *["tool"] * 6,
        "assistant",
        "tool",
        "assistant",
    ]
    results = [(n.message.name, n.message.content) for n in trace.nodes if n.message.role == "tool"]
    assert results[:2] == [("calculator_add", "5"), ("calculator_add", "denied by policy")]
    assert results[2] == ("calculator_multiply", "error: unknown tool 'calculator_multiply'")
    assert results[3][1].startswith("error: invalid JSON in tool arguments")
    assert results[4] == ("calculator_add", "error: tool arguments must be a JSON object, got list")
    assert results[5] == ("calculator_divide", "error: unknown tool 'calculator_divide'")
    assert results[6] == ("calculator_submit", "submitted")
    requests = requests_for(server, "Add 2 and 3")
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {"calculator_add", "calculator_submit"}
    assert requests[1]["messages"][4]["content"] == "denied by policy"  # what the model saw
    assert trace.rewards["submitted"].score == 1.0  # the submit tool wrote the shared state


async def test_launch_and_resume_work_without_a_rollout(server):
    """The Harness contract itself: launch on the prompt, resume on the trace's branch."""
    harness = StepwiseChatHarness(StepwiseChatConfig(stream=False))
    data = vf.TaskData(prompt="Count with me (direct)", system_prompt="Be brief.")
    ctx = vf.ModelContext(
        model="local-model", client=vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR)
    )
    trace = vf.Trace(task=vf.TraceTask(type="Task", data=data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    async with InterceptionServer() as interception:
        async with interception.acquire(RolloutSession(ctx=ctx, trace=trace)) as (base_url, secret, _):
            endpoint = f"{base_url}/v1"
            result = await harness.launch(ctx, trace, None, endpoint, secret, {}, data)
            assert result.exit_code == 0
            await harness.resume(ctx, trace, None, endpoint, secret, {}, data, [vf.UserMessage(content="go on")])
    assert [m.content for m in trace.assistant_messages] == ["one", "two"]
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "user", "assistant"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>plan it</think>The answer is 4.", "The answer is 4."),
        ("<think>a</think> x <think>b</think>y", "x y"),
        ("reasoning whose tag was in the template</think>\n42", "42"),
        ("Answer: 4 <think>cut off mid-thought", "Answer: 4"),
        ("No reasoning here.", "No reasoning here."),
        (None, None),
    ],
)
def test_strip_think(content, expected):
    message = vf.AssistantMessage(
        content=content,
        reasoning_content="hidden",
        provider_state=[{"type": "reasoning.text", "text": "hidden"}],
        tool_calls=[vf.ToolCall(id="c", name="f", arguments=json.dumps({"x": 1}))],
    )
    stripped = strip_think(message)
    assert stripped.content == expected
    assert stripped.reasoning_content is None and stripped.provider_state is None
    assert stripped.tool_calls == message.tool_calls


@pytest.mark.parametrize("content", ["  Plain answer, no reasoning.\n", "", None])
def test_strip_think_leaves_a_message_without_reasoning_as_it_is(content):
    """It used to strip whitespace, so ``exclude_think`` forked a branch on traces that had no
    reasoning at all."""
    message = vf.AssistantMessage(content=content)
    assert strip_think(message) is message


async def test_exclude_think_keeps_the_current_turns_reasoning_through_its_tool_loop(server):
    prompt = "Think, then call a tool"
    script = scripted(
        {
            prompt: [
                Reply(content="<think>call it</think>", reasoning="plan A", tool_calls=[ToolCallReply("lookup", {})]),
                Reply(content="<think>done</think>first answer", reasoning="plan B"),
                "second answer",
            ]
        }
    )
    with ModelServer(script) as local:
        async with agent(local, harness={"exclude_think": True}).interaction(task(prompt)) as chat:
            await chat.turn()
            await chat.turn("again")
        first, within, later = local.chat_requests
    tool_loop = within["messages"]
    assert tool_loop[2]["reasoning_content"] == "plan A"  # same turn: kept
    assert tool_loop[2]["content"] == "<think>call it</think>"
    assert tool_loop[3]["content"] == "error: unknown tool 'lookup'"
    earlier = [m for m in later["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in earlier] == ["", "first answer"]  # later turn: stripped
    assert all("reasoning_content" not in m for m in earlier)


async def test_one_session_serves_every_turn_of_a_rollout(server, monkeypatch):
    opened = []
    original = ChatSession.__init__

    def counting(self, *args, **kwargs):
        opened.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ChatSession, "__init__", counting)
    async with agent(server).interaction(task("Count with me (one session)")) as chat:
        for message in (None, "next", "next"):
            await chat.turn(message)
    assert len(opened) == 1


async def test_retries_back_off_exponentially(server, monkeypatch):
    """The failed stream is retried plain after ``retry_backoff``; the SDK retries the plain
    request after its own back-off, which doubles (jittered)."""
    ours, sdks = [], []

    def recorder(delays):
        async def no_wait(seconds, *args):
            if seconds:  # the event loop's own sleep(0) yields are not back-offs
                delays.append(seconds)

        return no_wait

    monkeypatch.setattr(harness_module.asyncio, "sleep", recorder(ours))
    monkeypatch.setattr(openai._base_client.anyio, "sleep", recorder(sdks))
    trace = await agent(server, harness={"retry_backoff": 0.2, "max_retries": 3}).run(task("Broken call, backing off"))
    assert not trace.ok and len(requests_for(server, "Broken call, backing off")) == 4
    assert ours == [0.2] and len(sdks) == 2 and sdks[1] > sdks[0] > 0


async def test_request_timeout_bounds_a_model_call():
    with ModelServer(scripted({"Hang": [Reply(fault="timeout")]}), hang_seconds=30) as local:
        trace = await agent(local, harness={"request_timeout": 0.5, "max_retries": 0}).run(task("Hang"))
    assert not trace.ok and trace.stop_condition == "harness_error"
    assert "ReadTimeout" in trace.errors[-1].message


@pytest.mark.parametrize(
    ("fault", "stream", "message", "streamed"),
    [
        # cut short: it may have been committed, so it is retried unchanged (the replay guard keys on the body)
        ("empty", True, r"the model stream ended before its last chunk", [True, True]),
        ("malformed_json", False, "malformed completion from the interception endpoint", [None, None]),
        # answered with a failure: nothing was committed, and a plain retry gets the upstream's status
        ("http_500", True, "scripted fault: internal server error", [True, None]),
    ],
)
async def test_broken_answers_from_the_endpoint_raise_after_the_retries(fault, stream, message, streamed):
    """Straight against the model server, without an interception in between."""
    data = vf.TaskData(prompt=f"fault {fault}")
    ctx = vf.ModelContext(model="m", client=vf.EvalClientConfig())
    trace = vf.Trace(task=vf.TraceTask(type="Task", data=data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    harness = StepwiseChatHarness(StepwiseChatConfig(stream=stream, max_retries=1, retry_backoff=0.0))
    with ModelServer(scripted({"fault": [Reply(fault=fault)]})) as local:
        session = await harness.session(ctx, trace, None, local.base_url, "secret", {}, data)
        with pytest.raises(ModelCallError, match=message):
            await session._run(None)
        await session.close()
        assert [body.get("stream") for body in local.chat_requests] == streamed  # the first try and one retry
