"""Sums with hints: ``a + b =`` answered in up to ``max_turns`` tries.

Each task is ``a + b`` with a in ``a_range`` and b in ``b_range`` (inclusive; by default
[10, 59] and [1, 9], 450 pairs): the ``train`` split holds the pairs whose index, counting a
then b, is not ≡ 0 mod 5 (360 by default), ``test`` the others (90), held out. The prompt is a
completion-style document::

    Sums. A wrong answer gets a hint, then another try.
    23 + 5 = 28
    right.
    41 + 7 = 46
    too low. 41 + 7 = 48
    right.
    ...
    34 + 7 =

A reply's answer is the first integer it states, after its last ``=`` when it restates the sum
(``26 + 4 = 30`` answers 30) — only that one value is read, so a reply that lists several
answers scores as its first, and a decimal (``41.5``) is no integer answer; a reply with none
is wrong. A right answer earns the turn reward 1 and ends the episode; a wrong one earns
``incorrect_reward`` (−1, as DAPO scores a wrong attempt) and the user answers ``too high. 34 +
7 =`` (or ``too low.``, or ``no number.``) and the model tries again. The episode's reward is 1
when its last answer is right. Each wrong try costs, so an episode right at once out-earns one
right later (with 0 for a wrong try both would earn 1, and a group's credit could not prefer
being right sooner). The shots are drawn per task from the training pairs with the
task's own seed, so a task's prompt is the same in every run.

With ``scoring="closeness"`` a turn records a score instead, φ = 1 for the right answer,
``CLOSENESS_WEIGHT · max(0, 1 − |guess − answer| / CLOSENESS_SPAN)`` for a wrong one and 0 for
no number, read as rewards by differences (``TurnResult.score``): a turn earns what it moved
toward the answer, so turn rewards differ within an episode, an unsolved episode that closes in
earns more than one that wanders, and an episode's turn rewards sum to its last answer's score.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field, ValidationInfo, field_validator

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
from verifiers_stepwise.envs.tasksets import CountedTake
from verifiers_stepwise.traces.kinds import CreditKind

__all__ = [
    "SumsConfig",
    "SumsData",
    "SumsEnv",
    "SumsTask",
    "SumsTaskset",
    "SumsTasksetConfig",
    "answer_of",
    "closeness",
]

HEADER = "Sums. A wrong answer gets a hint, then another try.\n"
A_RANGE, B_RANGE = (10, 59), (1, 9)
CLOSENESS_WEIGHT, CLOSENESS_SPAN = 0.5, 10
"""A wrong answer scores at most half a right one, and nothing from ``CLOSENESS_SPAN`` away."""
_FIRST_NUMBER = re.compile(r"\s*(-?\d+)(?!\.?\d)")


def answer_of(reply: str | None) -> int | None:
    """The integer a reply states: the first after its last ``=`` if it has one, else the one it
    opens with (after spaces; ``41.`` is 41, ``41.5`` none), or None."""
    match = _FIRST_NUMBER.match((reply or "").rpartition("=")[2])
    return int(match.group(1)) if match else None


def closeness(guess: int | None, answer: int) -> float:
    """The score φ of a guess (module docstring): 1 when right, less the farther it is, 0 for none."""
    if guess is None:
        return 0.0
    if guess == answer:
        return 1.0
    return CLOSENESS_WEIGHT * max(0.0, 1.0 - abs(guess - answer) / CLOSENESS_SPAN)


def hint(guess: int | None, answer: int) -> str:
    if guess is None:
        return "no number."
    return "too high." if guess > answer else "too low."


def question(a: int, b: int) -> str:
    return f"{a} + {b} ="


def split_pairs(
    split: str, a_range: tuple[int, int] = A_RANGE, b_range: tuple[int, int] = B_RANGE
) -> list[tuple[int, int]]:
    if split not in ("train", "test"):
        raise ValueError(f"stepwise-sums: split must be 'train' or 'test', got {split!r}")
    pairs = [(a, b) for a in range(a_range[0], a_range[1] + 1) for b in range(b_range[0], b_range[1] + 1)]
    return [pair for i, pair in enumerate(pairs) if (i % 5 == 0) == (split == "test")]


def prompt(a: int, b: int, shots: int, rng: random.Random, train: list[tuple[int, int]]) -> str:
    """The header, ``shots`` solved sums from ``train`` (every second one fixed after a hint), the question."""
    lines = [HEADER]
    for k, (x, y) in enumerate(rng.sample(train, shots)):
        if k % 2:
            miss = x + y + rng.choice((-2, -1, 1, 2))
            lines.append(f"{question(x, y)} {miss}\n{hint(miss, x + y)} {question(x, y)} {x + y}\nright.\n")
        else:
            lines.append(f"{question(x, y)} {x + y}\nright.\n")
    return "".join(lines) + question(a, b)


class SumsData(vf.TaskData):
    a: int
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b


class SumsTask(vf.Task[SumsData]):
    @vf.reward
    async def solved(self, task: SumsData, trace: vf.Trace) -> float:
        return float(answer_of(trace.last_reply) == task.answer)


class SumsTasksetConfig(vf.TasksetConfig):
    split: str = "train"
    """``train`` (360 pairs) or ``test`` (90 held-out pairs)."""
    shots: int = Field(4, ge=0, le=16)
    """Solved sums in each prompt."""
    a_range: tuple[int, int] = A_RANGE
    """The first addend's values, lowest and highest (inclusive)."""
    b_range: tuple[int, int] = B_RANGE
    """The second addend's values, lowest and highest (inclusive)."""

    @field_validator("a_range", "b_range")
    @classmethod
    def _ordered(cls, value: tuple[int, int], info: ValidationInfo) -> tuple[int, int]:
        if not 0 <= value[0] <= value[1]:
            raise ValueError(
                f"stepwise-sums: {info.field_name} must be (lowest, highest), 0 <= lowest <= highest; got {value}"
            )
        return value


class SumsTaskset(CountedTake, vf.Taskset[SumsTask, SumsTasksetConfig]):
    def load(self) -> Iterator[SumsTask]:
        config = self.config
        train = split_pairs("train", config.a_range, config.b_range)
        if len(train) < config.shots:
            raise ValueError(f"stepwise-sums: shots={config.shots} but the ranges hold {len(train)} training pairs")
        for i, (a, b) in enumerate(split_pairs(config.split, config.a_range, config.b_range)):
            rng = random.Random(f"{config.split}-{i}")
            data = SumsData(id=f"sums-{config.split}-{i}", prompt=prompt(a, b, config.shots, rng, train), a=a, b=b)
            yield SumsTask(data)


class SumsConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(3, ge=1)
    scoring: Literal["solved", "closeness"] = "solved"
    """``solved``: a turn's reward is 1 when right, else ``incorrect_reward`` (``turn_rewards``).
    ``closeness``: a turn's score is its answer's closeness (``turn_scores``, module docstring)."""
    incorrect_reward: float = Field(-1.0, allow_inf_nan=False)
    """A wrong try's reward under ``solved``: −1 as in DAPO; 0 pays only the answer."""
    credit_kind: CreditKind | None = CreditKind.REFINEMENT


class SumsEnv(StepwiseMultiTurnEnv, vf.Env[SumsConfig]):
    config: SumsConfig

    def forfeit(self, task: vf.Task, turns: int) -> float:
        """Tries a limit took away cost what wrong tries cost (a wrong answer's reward each)."""
        return turns * self.config.incorrect_reward if self.config.scoring == "solved" else 0.0

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        data = task.data
        assert isinstance(data, SumsData)  # this env's tasks are SumsTasks
        guess = answer_of(turn.reply)
        right = guess == data.answer
        message = None if right else f"{hint(guess, data.answer)} {question(data.a, data.b)}"
        if self.config.scoring == "closeness":
            return TurnResult(score=closeness(guess, data.answer), message=message)
        return TurnResult(reward=1.0 if right else self.config.incorrect_reward, message=message)
