"""Red team: the refine env's reward and the per-turn credit path, attacked through model replies.

Each test sends what a model could write (to the parser, or as scripted replies through the
env) and asserts it earns no more than it should, ends in bounded time, or is a recorded error.
Properties of the design (the score in the feedback) are pinned as such; the bundle's README
says what to do about them.
"""

from __future__ import annotations

import math
import re
import time

import pytest
import verifiers.v1 as vf
from stepwise_refine.arithmetic import ArithmeticData, ArithmeticTask, last_number
from stepwise_swe_bench.env import SweBenchEnvConfig
from stepwise_swe_bench.state import Budget

from verifiers_stepwise import get_estimator
from verifiers_stepwise.envs.env import StepwiseMultiTurnEnvConfig
from verifiers_stepwise.envs.refine import score_so_far
from verifiers_stepwise.errors import RewardError, TraceError
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ChatCall, ModelServer, Reply, ToolCallReply, scripted
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.turns import append_turn

KEY_VAR = "STEPWISE_REFINE_ATTACK_KEY"
TOOL_CALL = Reply(tool_calls=[ToolCallReply("calculator", {"expression": "17 * 23"})])


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


async def refine(plan, **env) -> vf.Trace:
    with ModelServer(scripted({"17 * 23": plan})) as server:
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-refine"}, **env},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            limit=1,
        )
    (trace,) = group[0].traces
    return trace


async def closeness(reply: str, answer: float = 391) -> float:
    b = TraceBuilder(tokens=False)
    b.sample(reply)
    return await score_so_far(ArithmeticTask(ArithmeticData(prompt="Compute it.", answer=answer)), b.trace)


# --- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "number"),
    [
        ("1,2", 2.0),  # was 12: every comma was dropped, so a list read as one number
        ("3,9,1", 1.0),  # was 391
        ("It is 1,024.", 1024.0),
        ("1,000,000", 1_000_000.0),
        ("390, 391 or 392", 392.0),
        ("３９１", 391.0),  # full-width digits are digits
    ],
)
def test_commas_group_thousands_only(reply, number):
    assert last_number(reply) == number


async def test_a_list_or_a_range_is_not_the_right_answer():
    for reply in ("3,9,1", "390, 391, 392", "391 or 392", "390-392", "between 390 and 392"):
        assert await closeness(reply) < 1.0, reply
    assert await closeness("3,9,1") == pytest.approx(1 / 391)  # it reads as 1, was 391 (solved)


async def test_huge_numbers_and_huge_replies_score_zero_in_bounded_time():
    assert await closeness("9" * 400) == 0.0  # float("9" * 400) is inf: 1 − inf clamps to 0
    assert await closeness("-" + "9" * 400) == 0.0
    start = time.perf_counter()
    assert await closeness("1," * 500_000 + "x") == 1.0 - 390 / 391  # 1 MB: the last number is 1
    assert await closeness(("9" * 999 + ".") * 1000) == 0.0
    assert time.perf_counter() - start < 15.0


# --- the env ---------------------------------------------------------------------------------


async def test_a_model_that_only_calls_tools_ends_at_the_call_cap():
    """Was: with ``agent.max_turns`` unset nothing capped model calls, so a model answering
    every call with a tool call never ended its turn. Now the run's calls are capped at
    ``max_turns × max_calls_per_turn`` (64): 2 turns, 128 calls, then stop ``max_turns``."""
    trace = await refine([TOOL_CALL], max_turns=2)
    assert trace.stop_condition == "max_turns" and trace.num_turns == 128 and trace.ok
    # its one scored turn asked for another (the turn cost c) and forfeited one (c again)
    assert trace.info["turn_scores"] == pytest.approx([-0.2]) and trace.info["forfeited_turns"] == 1


def test_the_call_cap_follows_the_turns_and_yields_to_an_explicit_one():
    assert StepwiseMultiTurnEnvConfig(max_turns=3).agent.max_turns == 192
    assert StepwiseMultiTurnEnvConfig(max_turns=3, max_calls_per_turn=2).agent.max_turns == 6
    assert StepwiseMultiTurnEnvConfig(max_turns=3, agent={"max_turns": 100}).agent.max_turns == 100
    # the cap never cuts the SWE bundle's own budgets (a step is a tool call, plus the reply)
    budget, swe = Budget(), SweBenchEnvConfig()
    assert swe.agent.max_turns >= budget.max_steps + swe.max_turns
    assert swe.max_calls_per_turn > budget.max_steps_per_round


async def test_the_feedback_score_is_an_oracle_for_the_answer():
    """Design property: the feedback states the turn's score, and closeness is invertible, so
    a model can read the answer off the feedback instead of computing it: reply x = 300 below
    the answer y, read s = x / y, answer x / s. (With the default two decimals the read is
    coarser, and a second probe narrows it.) A refine task whose feedback must not leak the
    answer needs a feedback message without ``{score}``."""

    def from_feedback(call: ChatCall) -> str:
        score = float(re.search(r"scored (\d+\.\d+)", call.messages[-1]["content"]).group(1))
        return str(round(300 / score))

    trace = await refine(["300", from_feedback], feedback="Your answer scored {score:.4f}.", turn_cost=0.0)
    assert trace.info["turn_scores"] == pytest.approx([300 / 391, 1.0])


def test_quitting_does_not_pay_when_rewards_are_not_negative():
    """The base env's forfeit is 0: with closeness rewards (≥ 0) a stopped rollout already gives
    up what later turns would earn, so the absorbing baseline ranks it below one that went on."""
    quit_early, went_on = get_estimator("stepwise")([[0.5], [0.5, 0.5, 0.5]])
    assert quit_early[0] < went_on[0]


# --- the credit path: non-finite and overflowing rewards --------------------------------------


class EchoTask(vf.Task):
    """A reward the reply controls directly: the number it writes (as a careless task might)."""

    @vf.reward
    async def echoed(self, trace: vf.Trace) -> float:
        return float(trace.last_reply)


@pytest.mark.parametrize("reply", ["nan", "inf", "-inf", "1e999"])
async def test_a_non_finite_turn_reward_is_an_error_naming_the_turn_never_credit(reply):
    b = TraceBuilder(tokens=False)
    b.sample(reply)
    score = await score_so_far(EchoTask(vf.TaskData(prompt="x")), b.trace)
    assert not math.isfinite(score)
    with pytest.raises(TraceError, match="turn 0 reward .* is not a finite number"):
        append_turn(b.trace, score, [b.trace.nodes.index(b.trace.nodes[-1])])
    assert "turn_rewards" not in b.trace.info


def test_finite_rewards_whose_return_overflows_are_an_error_not_inf_credit():
    with pytest.raises(RewardError, match="turn 0: the return overflows float64"):
        get_estimator("stepwise")([[1e308, 1e308], [0.0]])
