"""Sums with hints: ``a + b =`` answered in up to ``max_turns`` tries.

Each task is ``a + b`` with a in [10, 59] and b in [1, 9] (450 pairs: the ``train`` split
holds the 360 whose index is not ≡ 0 mod 5, ``test`` the other 90, held out). The prompt is a
completion-style document::

    Sums. A wrong answer gets a hint, then another try.
    23 + 5 = 28
    right.
    41 + 7 = 46
    too low. 41 + 7 = 48
    right.
    ...
    34 + 7 =

A reply's first number is its answer — only that one value is read, so a reply that lists
several answers scores as its first, and a decimal (``41.5``) is no integer answer; a reply
with none is wrong. A right answer earns the
turn reward 1 and ends the episode; a wrong one earns 0 and the user answers ``too high. 34 + 7
=`` (or ``too low.``, or ``no number.``) and the model tries again. The episode's reward is
1 when its last answer is right. The shots are drawn per task from the training pairs with the
task's own seed, so a task's prompt is the same in every run.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf
from pydantic import Field

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult

__all__ = ["SumsConfig", "SumsData", "SumsEnv", "SumsTask", "SumsTaskset", "SumsTasksetConfig", "answer_of"]

HEADER = "Sums. A wrong answer gets a hint, then another try.\n"
PAIRS = [(a, b) for a in range(10, 60) for b in range(1, 10)]
_FIRST_NUMBER = re.compile(r"\s*(-?\d+)(?!\.?\d)")


def answer_of(reply: str | None) -> int | None:
    """The integer a reply opens with (after spaces; ``41.`` is 41, ``41.5`` none), or None."""
    match = _FIRST_NUMBER.match(reply or "")
    return int(match.group(1)) if match else None


def hint(guess: int | None, answer: int) -> str:
    if guess is None:
        return "no number."
    return "too high." if guess > answer else "too low."


def question(a: int, b: int) -> str:
    return f"{a} + {b} ="


def split_pairs(split: str) -> list[tuple[int, int]]:
    if split not in ("train", "test"):
        raise ValueError(f"stepwise-sums: split must be 'train' or 'test', got {split!r}")
    return [pair for i, pair in enumerate(PAIRS) if (i % 5 == 0) == (split == "test")]


def prompt(a: int, b: int, shots: int, rng: random.Random) -> str:
    """The header, ``shots`` solved training sums (every second one fixed after a hint), the question."""
    lines = [HEADER]
    for k, (x, y) in enumerate(rng.sample(split_pairs("train"), shots)):
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


class SumsTaskset(vf.Taskset[SumsTask, SumsTasksetConfig]):
    def load(self):
        for i, (a, b) in enumerate(split_pairs(self.config.split)):
            rng = random.Random(f"{self.config.split}-{i}")
            data = SumsData(id=f"sums-{self.config.split}-{i}", prompt=prompt(a, b, self.config.shots, rng), a=a, b=b)
            yield SumsTask(data)


class SumsConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(3, ge=1)


class SumsEnv(StepwiseMultiTurnEnv, vf.Env[SumsConfig]):
    config: SumsConfig

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        data: SumsData = task.data  # type: ignore[assignment]  # this env's tasks are SumsTasks
        guess = answer_of(turn.reply)
        if guess == data.answer:
            return TurnResult(reward=1.0)
        return TurnResult(reward=0.0, message=f"{hint(guess, data.answer)} {question(data.a, data.b)}")
