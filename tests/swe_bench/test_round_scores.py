"""A round's grade describes the repository after it, so the env records it as the turn's score:
a partial fix kept through later rounds is paid once (regression: ``reward="partial"`` recorded
each round's FAIL_TO_PASS share as its reward, so two rounds at half the tests summed to one
resolved instance)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import stepwise_swe_bench.env as swe_env
from stepwise_swe_bench.env import SweBenchEnv, SweBenchEnvConfig
from stepwise_swe_bench.grading import RoundGrade

from verifiers_stepwise.traces.turns import score_differences

HALF = RoundGrade(
    "RESOLVED_PARTIAL",
    resolved=False,
    log_parsed=True,
    fail_to_pass={"success": ["t::a"], "failure": ["t::b"]},
)


class State:
    submitted, round_steps = True, 1

    def exhausted(self) -> bool:
        return False

    def start_round(self, index: int) -> None:
        pass


def rounds(monkeypatch, mode: str, grades: list[RoundGrade]) -> list:
    """``env_response``'s verdicts on one round per grade, as the env returns them."""
    queue = list(grades)

    async def patch(*args, **kwargs) -> str:
        return "diff --git a/x b/x\n"

    async def grade(*args, **kwargs) -> RoundGrade:
        return queue.pop(0)

    monkeypatch.setattr(swe_env, "model_patch", patch)
    monkeypatch.setattr(swe_env, "grade", grade)
    env = SimpleNamespace(config=SweBenchEnvConfig(reward=mode, max_turns=len(grades)))
    task = SimpleNamespace(
        sandbox=lambda trace: None,
        data=SimpleNamespace(instance=SimpleNamespace(base_commit="abc")),
        config=SimpleNamespace(grading_timeout_s=60, grading_log_bytes=1 << 16),
    )
    trace = SimpleNamespace(info={}, state=State())
    return [
        asyncio.run(
            SweBenchEnv.env_response(  # type: ignore[arg-type]
                env, task, SimpleNamespace(index=i, trace=trace, last=i == len(grades) - 1)
            )
        )
        for i in range(len(grades))
    ]


@pytest.mark.parametrize("mode", ["resolved", "partial"])
def test_rounds_are_recorded_as_scores(monkeypatch, mode):
    results = rounds(monkeypatch, mode, [HALF, HALF])
    assert all(r.reward is None for r in results)
    share = 0.5 if mode == "partial" else 0.0
    assert [r.score for r in results] == [share, share]
    assert score_differences([r.score for r in results]) == [share, 0.0]  # paid once


def test_breaking_a_partial_fix_costs_what_it_earned(monkeypatch):
    broken = RoundGrade("RESOLVED_NO", resolved=False, log_parsed=True)
    results = rounds(monkeypatch, "partial", [HALF, broken])
    assert score_differences([r.score for r in results]) == [0.5, -0.5]
