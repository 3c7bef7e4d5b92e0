"""The DAPO-math env: standard DAPO in one turn, a refine loop with per-turn rewards in more.

Built on ``verifiers_stepwise.StepwiseMultiTurnEnv``. Each turn the model's reply is scored
exactly as a single-turn DAPO response (:meth:`DapoMathTask.score_reply`); that score is the
turn's reward in ``trace.info["turn_rewards"]``. A correct answer ends the episode; a wrong or
missing one is answered with ``wrong_message`` / ``missing_message`` and the model tries
again, up to ``max_turns`` turns.

* ``max_turns = 1`` (the default) is standard DAPO: one response, reward ±1 (plus the
  overlong term when enabled), one turn reward equal to the trace reward.
* ``max_turns = k > 1`` is the refine mode: turn rewards r_1..r_T (T ≤ k), each turn's own
  correctness, for the stepwise estimator (``verifiers_stepwise.traces.credit.score_group``).

Stalling and quitting do not pay: the task has no tools, so a turn is one model call
(``max_calls_per_turn = 1``) and a reply made of tool calls ends the run at the call cap; a run
that a limit ends early (the call cap, ``--env.agent.max-output-tokens``, the agent's timeout)
scores every attempt it did not make as ``incorrect_reward``, charged to the turn that hit the
limit (``StepwiseMultiTurnEnv.forfeit``). Without that, under the default estimator a rollout
that stopped after one wrong answer would get positive credit next to rollouts that kept
trying and failed.

The trace-level rewards (``correct``, ``overlong_penalty``) score the last reply, so a trace's
reward says whether the episode ended solved. ``trace.info["dapo_turns"]`` keeps, per turn, the
scored node, the extracted answer, its reward terms and metrics; the trace-level reward reuses
the last entry instead of verifying the same reply again.
"""

from __future__ import annotations

import verifiers.v1 as vf
from pydantic import Field, model_validator

from stepwise_dapo_math.taskset import DAPO_TURNS, DapoMathTask
from verifiers_stepwise.envs.env import (
    StepwiseMultiTurnEnv,
    StepwiseMultiTurnEnvConfig,
    Turn,
    TurnResult,
)
from verifiers_stepwise.traces.kinds import CreditKind

__all__ = ["DapoMathEnv", "DapoMathEnvConfig"]

WRONG = (
    "Your answer is incorrect. Try again: solve the problem step by step and put your final "
    'answer on its own line after "Answer:".'
)
MISSING = 'I could not find a final answer. Put your final answer on its own line after "Answer:".'


class DapoMathEnvConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(1, ge=1)
    """Attempts per problem (``--env.max-turns``): 1 is standard DAPO, more is the refine mode."""
    max_calls_per_turn: int = Field(1, ge=1)
    """One model call per attempt: the task has no tools, so a tool call ends the run."""
    wrong_message: str = WRONG
    """What the model is told after a wrong answer."""
    missing_message: str = MISSING
    """What the model is told when no answer could be extracted."""

    @model_validator(mode="after")
    def _kind_of_credit(self) -> DapoMathEnvConfig:
        """One attempt is paid at its end (outcome); several are retries (refinement)."""
        if "credit_kind" not in self.model_fields_set:
            self.credit_kind = CreditKind.OUTCOME if self.max_turns == 1 else CreditKind.REFINEMENT
        return self


class DapoMathEnv(StepwiseMultiTurnEnv, vf.Env[DapoMathEnvConfig]):
    config: DapoMathEnvConfig

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        if not isinstance(task, DapoMathTask):
            raise TypeError(f"{type(self).__name__} plays DapoMathTask tasks, got {type(task).__name__}")
        score, record = await task.score_last_reply(turn.trace, turn.reply)
        turn.trace.info.setdefault(DAPO_TURNS, []).append(record)
        if score.correct:
            return TurnResult(score.reward)
        retry = self.config.missing_message if score.extracted is None else self.config.wrong_message
        return TurnResult(score.reward, retry)

    def forfeit(self, task: vf.Task, turns: int) -> float:
        """Attempts a limit cut off count as wrong: stopping must not beat trying."""
        if not isinstance(task, DapoMathTask):
            raise TypeError(f"{type(self).__name__} plays DapoMathTask tasks, got {type(task).__name__}")
        return turns * task.config.incorrect_reward
