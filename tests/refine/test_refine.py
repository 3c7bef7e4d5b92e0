"""The generic refine env (`stepwise-refine`) and its bundled arithmetic taskset, in-process."""

from __future__ import annotations

import math

import pytest
import verifiers.v1 as vf
from stepwise_refine.arithmetic import ArithmeticData, ArithmeticTask, last_number

from verifiers_stepwise import available_environments, get_estimator
from verifiers_stepwise.envs.refine import RefineConfig, RefineEnv, score_so_far
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, scripted
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.turns import read_turns

KEY_VAR = "STEPWISE_TEST_API_KEY"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


async def refine(script, **env) -> vf.Trace:
    with ModelServer(scripted(script)) as server:
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-refine"}, **env},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            limit=1,
        )
        requests = server.chat_requests
    (trace,) = group[0].traces
    return trace, requests


def test_the_bundle_registers_the_env_id_and_resolves_through_verifiers():
    assert available_environments()["stepwise-refine"] == "stepwise_refine"
    assert vf.environment_class("stepwise-refine") is RefineEnv
    assert vf.environment_class("any-taskset", "stepwise-refine") is RefineEnv
    assert vf.env_config_type("stepwise-refine") is RefineConfig


async def test_turns_are_scored_with_the_tasks_own_reward_until_solved():
    trace, requests = await refine({"17 * 23": ["About 400.", "It is 390.", "391"]})
    # each turn's score φ_t describes the answer as it stands: recorded as a score, less the turn
    # cost c of each unsolved turn so far, so a turn earns what it improved, r_t = φ_t − φ_(t−1),
    # less c when it did not solve the task
    c = RefineConfig().turn_cost
    assert c == 0.1
    assert trace.info["turn_scores"] == pytest.approx([1 - 9 / 391 - c, 1 - 1 / 391 - 2 * c, 1.0 - 2 * c])
    assert "turn_rewards" not in trace.info and len(trace.info["turn_nodes"]) == 3
    assert read_turns(trace).rewards == pytest.approx([1 - 9 / 391 - c, 8 / 391 - c, 1 / 391])
    assert trace.reward == 1.0  # the trace's own reward: the final score
    assert trace.rewards["closeness"].score == 1.0  # the close-time score, untouched mid-episode
    assert set(trace.rewards) == {"closeness"} and "judge_calls" not in trace.info
    assert requests[1]["messages"][-1]["content"] == (
        "Your answer scored 0.98; 1.00 counts as solved. Check your work and give an improved answer."
    )


async def test_threshold_and_feedback_are_configurable():
    trace, requests = await refine(
        {"17 * 23": ["380", "391"]},
        threshold=math.inf,
        max_turns=3,
        feedback="Turn {turn}: {score:.3f}, {turns_left} left.",
        turn_cost=0.0,
    )
    assert trace.info["turn_scores"] == pytest.approx([1 - 11 / 391, 1.0, 1.0])  # never "solved"
    assert read_turns(trace).rewards == pytest.approx([1 - 11 / 391, 11 / 391, 0.0])  # a repeat earns 0
    assert [r["messages"][-1]["content"] for r in requests[1:]] == ["Turn 1: 0.972, 2 left.", "Turn 2: 1.000, 1 left."]
    trace, _ = await refine({"17 * 23": ["380", "391"]}, threshold=0.95)
    assert trace.info["turn_scores"] == pytest.approx([1 - 11 / 391])


@pytest.mark.slow
async def test_a_repeated_near_miss_earns_no_more_than_its_first_turn_under_the_default_estimator():
    """The README quickstart's first group (391, 400 ×4, 12, "no idea") as refine traces. Were
    the per-turn scores recorded as rewards, the four near misses 0.98 would sum to 3.9 and the
    default estimator would give them +2.65, +2.18, +1.45, +0.73 and the right answer −0.26.
    Recorded as scores, the right answer's first turn gets the most, and each repeat, which
    improved nothing, only its turn cost c (pushed down)."""
    scripts = [["391"], ["400"] * 4, ["12"] * 4, ["no idea"] * 4]
    traces = [(await refine({"17 * 23": script}))[0] for script in scripts]
    rewards = [read_turns(trace).rewards for trace in traces]
    c = RefineConfig().turn_cost
    assert rewards[1] == pytest.approx([1 - 9 / 391 - c, -c, -c, -c])
    right, near_miss, *_ = get_estimator("stepwise")(rewards)
    assert right[0] > near_miss[0] > 0
    assert all(a < 0 for a in near_miss[1:])


class RuntimeOnlyTask(vf.Task):
    @vf.reward
    async def tests_pass(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        return 1.0


async def test_a_task_whose_rewards_all_need_the_runtime_is_refused():
    trace = TraceBuilder(tokens=False).trace
    with pytest.raises(ValueError, match="task RuntimeOnlyTask has no reward that runs without one"):
        await score_so_far(RuntimeOnlyTask(vf.TaskData(prompt="x")), trace)


async def test_scoring_mid_episode_leaves_the_live_trace_alone():
    b = TraceBuilder(tokens=False)
    b.sample("The answer is 391.")
    task = ArithmeticTask(ArithmeticData(prompt="Compute 17 * 23.", answer=391))
    assert await score_so_far(task, b.trace) == 1.0
    assert b.trace.rewards == {} and b.trace.metrics == {} and b.trace.info == {}


@pytest.mark.parametrize(
    ("text", "number"),
    [("It is 1,024.", 1024.0), ("-3 then 4.5", 4.5), ("no digits", None), ("x=42\n", 42.0)],
)
def test_last_number(text, number):
    assert last_number(text) == number
