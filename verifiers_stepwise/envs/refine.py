"""The generic refine env (env id ``stepwise-refine``): any v1 taskset as a refinement loop.

After each model turn the trace so far is scored with the task's own ``@vf.reward`` functions
(and its configured judges). That score describes the episode's state, so it is recorded as the
turn's score φ_t (``trace.info["turn_scores"]``), read as the reward r_t = φ_t − φ_prev: a turn
earns what it improved, and repeating a near miss earns nothing after its first turn (recorded
as rewards, four near misses of 0.98 would sum to 3.9 and out-earn one right answer). A turn scoring at least
``threshold`` solves the task and ends the episode; otherwise the model gets ``feedback`` and
tries again, up to ``max_turns`` turns:

    vf-eval <taskset id> --env.id stepwise-refine --env.max-turns 4 --env.threshold 1.0

Scoring mid-episode happens on a copy of the trace, so the trace's own rewards stay the ones
the rollout computes when it closes (on the final turn). The runtime is not available
between turns, so rewards that need it (a ``runtime`` parameter without default) are skipped
for the per-turn score; a task with no other reward is refused with an error. The task's
``@vf.stop`` predicates still apply (a single-turn task stays single-turn).
"""

from __future__ import annotations

import verifiers.v1 as vf
from pydantic import Field

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
from verifiers_stepwise.traces.kinds import CreditKind

__all__ = ["RefineConfig", "RefineEnv", "score_so_far"]


class RefineConfig(StepwiseMultiTurnEnvConfig):
    credit_kind: CreditKind | None = CreditKind.REFINEMENT
    turn_cost: float = Field(0.1, ge=0.0, allow_inf_nan=False)
    """Charged on each unsolved turn (``StepwiseMultiTurnEnvConfig``): scores say how good the
    answer is, not how soon, so without it [1.0] and [0.0, 1.0] would earn the same."""
    threshold: float = 1.0
    """A turn whose score reaches this solves the task and ends the episode (``inf``: never)."""
    feedback: str = Field(
        "Your answer scored {score:.2f}; {threshold:.2f} counts as solved. Check your work and give an improved answer."
    )
    """The user message after an unsolved turn; ``{score}``, ``{threshold}``, ``{turn}`` (1-based)
    and ``{turns_left}`` are filled in."""


class RefineEnv(StepwiseMultiTurnEnv, vf.Env[RefineConfig]):
    config: RefineConfig

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        score = await score_so_far(task, turn.trace)
        if score >= self.config.threshold:
            return TurnResult(score=score)
        message = self.config.feedback.format(
            score=score,
            threshold=self.config.threshold,
            turn=turn.index + 1,
            turns_left=self.config.max_turns - turn.index - 1,
        )
        return TurnResult(score=score, message=message)


async def score_so_far(task: vf.Task, trace: vf.Trace) -> float:
    """The task's weighted reward ``Σ score·weight`` for the trace as it stands.

    Scored on a copy whose rewards, metrics and info start empty; the judges' usage and call
    records are carried back to the live trace.
    """
    scratch = trace.model_copy(update={"rewards": {}, "metrics": {}, "info": {}, "extra_usage": []})
    await task.score(scratch)
    trace.extra_usage.extend(scratch.extra_usage)
    if judge_calls := scratch.info.get("judge_calls"):
        trace.info.setdefault("judge_calls", []).extend(judge_calls)
    if not scratch.rewards:
        raise ValueError(
            f"stepwise-refine scores each turn without the runtime, and task "
            f"{type(task).__name__} has no reward that runs without one"
        )
    return scratch.reward
