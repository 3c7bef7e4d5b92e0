"""A rollout's shared state: where the repository is, the step and time budget, the record.

It lives on ``trace.state`` in the environment's process and is pulled and pushed by the tool
server around every tool call (verifiers' state channel), so both sides see the same counters.
``trace.state`` is not serialized; the task copies the record into ``trace.info`` at the end.
"""

from __future__ import annotations

import math
import time
from typing import Any

import verifiers.v1 as vf
from pydantic import BaseModel, Field

from .box import BoxRef

__all__ = ["Budget", "SweBenchState"]

MAX_RECORDS = 400


class Budget(BaseModel):
    """Step and time limits of a round and of the episode. A step is one tool call."""

    max_steps_per_round: int = Field(default=40, ge=1)
    max_steps: int = Field(default=120, ge=1)
    round_timeout_s: float = Field(default=900.0, gt=0)
    episode_timeout_s: float = Field(default=3600.0, gt=0)
    tool_output_chars: int = Field(default=12_000, ge=200)
    """Longest tool result the model sees (the middle of longer ones is cut)."""


class SweBenchState(vf.State):
    box: BoxRef | None = None
    budget: Budget = Budget()
    round: int = 0
    round_steps: int = 0
    steps: int = 0
    round_deadline: float = math.inf
    episode_deadline: float = math.inf
    submitted: bool = False
    """Whether the model called ``submit`` in the current round."""
    records: list[dict[str, Any]] = Field(default_factory=list)
    """One entry per tool call: what was asked and how it ended (output shortened)."""

    def start_round(self, index: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.round, self.round_steps, self.submitted = index, 0, False
        self.round_deadline = now + self.budget.round_timeout_s

    def refusal(self, now: float | None = None) -> str | None:
        """Why the next tool call must not run, or None. Counts the call as a step."""
        now = time.time() if now is None else now
        self.steps += 1
        self.round_steps += 1
        if self.exhausted(now):
            return (
                "The episode's step or time budget is used up; this call was not run. "
                "Reply without a tool call to finish."
            )
        if self.round_steps > self.budget.max_steps_per_round or now > self.round_deadline:
            return (
                "This round's step or time budget is used up; this call was not run. "
                "Call `submit` (or reply without a tool call) to have your work graded."
            )
        return None

    def exhausted(self, now: float | None = None) -> bool:
        """The episode is over budget (a refused call was already answered)."""
        now = time.time() if now is None else now
        return self.steps > self.budget.max_steps or now > self.episode_deadline

    def record(self, entry: dict[str, Any]) -> None:
        self.records.append({"round": self.round, **entry})
        if len(self.records) > MAX_RECORDS:
            # Keep the first half and the most recent ones.
            del self.records[MAX_RECORDS // 2]
