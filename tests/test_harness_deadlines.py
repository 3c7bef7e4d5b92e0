"""Deadlines, rate limits and upstream errors in the ``stepwise-chat`` harness, against the
scripted model server: straight (the harness's own behaviour) and through verifiers' own
interception server (what a ``vf-eval`` rollout sees)."""

from __future__ import annotations

import time

import pytest
import verifiers.v1 as vf

from verifiers_stepwise.envs import harness as harness_module
from verifiers_stepwise.envs.harness import ModelCallError, StepwiseChatConfig, StepwiseChatHarness
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, Reply, scripted

from .test_env import _many_games, client, guess_env, only_trace  # noqa: F401 - guess_env is a fixture
from .test_harness import agent, api_key, task  # noqa: F401 - api_key is an autouse fixture

SCRIPT = scripted(
    {
        "Never done": [Reply(content="almost there", fault="no_done")],
        "Rate limited": [Reply(content="fine", fault="http_429", times=2)],
        "Too long": [Reply(fault="http_400")],
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
