"""The SWE-bench environment: rounds of tool use, each graded by swebench, one reward per round.

A round is one environment turn of ``StepwiseMultiTurnEnv``: the model works through its tools
(``toolset``) until it answers without a tool call (``submit`` tells it to). The environment then
grades the model's diff on a fresh checkout (``grading``), records the round, and either ends the
episode (resolved, last round, or budget used up) or sends the failing tests and a summary of the
test log (never the hidden tests) as the next round's user message. The grade describes the
repository after the round, so it is the turn's score φ_t (``trace.info["turn_scores"]``), read
as the reward r_t = φ_t − φ_prev: a round earns what it changed, and a partial fix kept unchanged
through later rounds is paid once, not once per round.
"""

from __future__ import annotations

import verifiers.v1 as vf
from pydantic import Field

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
from verifiers_stepwise.traces.kinds import CreditKind

from .grading import PatchError, RewardMode, RoundGrade, feedback, grade, model_patch, round_score
from .taskset import SWE_INFO, SweBenchTask

__all__ = ["SweBenchEnv", "SweBenchEnvConfig"]

MAX_RECORDED_PATCH = 200_000
"""Characters of a round's diff kept on the trace (the whole diff is graded)."""


class SweBenchEnvConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(3, ge=1)
    """Rounds per episode (``--env.max-turns``): graded attempts at the issue."""
    credit_kind: CreditKind | None = CreditKind.REFINEMENT
    turn_cost: float = Field(0.1, ge=0.0, allow_inf_nan=False)
    """Charged on each unresolved round (``StepwiseMultiTurnEnvConfig``), so that resolving in
    the first round earns more than in the last."""
    reward: RewardMode = "resolved"
    """What a round scores: swebench's resolved verdict (1/0), or partial credit (the share of
    FAIL_TO_PASS tests that pass, 0 if any PASS_TO_PASS test breaks)."""
    feedback_log_chars: int = Field(3000, ge=0)
    """How much of the end of the failure summary (the test log's error lines, without the
    hidden tests) the model sees after an unresolved round."""


class SweBenchEnv(StepwiseMultiTurnEnv, vf.Env[SweBenchEnvConfig]):
    config: SweBenchEnvConfig

    async def env_response(self, task: SweBenchTask, turn: Turn) -> TurnResult:
        trace, state = turn.trace, turn.trace.state
        record: dict = {"round": turn.index, "submitted": state.submitted, "steps": state.round_steps}
        rounds = trace.info.setdefault(SWE_INFO, {}).setdefault("rounds", [])
        try:
            sandbox = task.sandbox(trace)
            try:
                patch = await model_patch(
                    sandbox, task.data.instance.base_commit, timeout_s=task.config.grading_timeout_s
                )
            except PatchError as error:  # the model broke its own git repository: its round
                patch, result = "", RoundGrade("RESOLVED_NO", False, False, rejected=str(error))
            else:
                result = await grade(
                    task.data.instance,
                    sandbox,
                    patch,
                    timeout_s=task.config.grading_timeout_s,
                    kept_log_bytes=task.config.grading_log_bytes,
                )
        except Exception as error:  # noqa: BLE001 - the round is lost, the episode is kept
            rounds.append(record | {"resolved": False, "score": 0.0, "error": repr(error)[:2000]})
            return TurnResult(score=0.0)
        score = round_score(result, self.config.reward)
        graded = {"resolved": result.resolved, "score": score, "patch": patch[:MAX_RECORDED_PATCH]}
        rounds.append(record | graded | result.record())
        if result.resolved or turn.last or state.exhausted():
            return TurnResult(score=score)
        state.start_round(turn.index + 1)
        message = feedback(
            result,
            round_index=turn.index,
            rounds_left=self.config.max_turns - turn.index - 1,
            max_log_chars=self.config.feedback_log_chars,
        )
        return TurnResult(score=score, message=message)
