"""A tiny offline arithmetic taskset: the refine env's bundled example (``vf-eval stepwise-refine``).

Eight problems shipped in this module. The reward gives partial credit for near misses so a
refinement loop has something to improve on:

    closeness = max(0, 1 − |x − y| / max(1, |y|))        x: the reply's last number, y: the answer

(1 exactly when the answer is right, 0 when there is no number). A comma counts as a thousands
separator only between a digit and a group of exactly three (``1,024``); ``1,2`` is two numbers,
not 12.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import verifiers.v1 as vf

from verifiers_stepwise.envs.tasksets import CountedTake

__all__ = ["ArithmeticData", "ArithmeticTask", "ArithmeticTaskset", "PROBLEMS", "last_number"]

PROBLEMS: tuple[tuple[str, float], ...] = (
    ("17 * 23", 391),
    ("144 / 12", 12),
    ("2 ** 10", 1024),
    ("15% of 240", 36),
    ("the square root of 1764", 42),
    ("7! / 5!", 42),
    ("the sum of the integers from 1 to 20", 210),
    ("1000 - 7 * 13", 909),
)

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators ignored), or None."""
    numbers = _NUMBER.findall(_THOUSANDS.sub("", text))
    return float(numbers[-1]) if numbers else None


class ArithmeticData(vf.TaskData):
    answer: float


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.reward
    async def closeness(self, task: ArithmeticData, trace: vf.Trace) -> float:
        guess = last_number(trace.last_reply)
        if guess is None:
            return 0.0
        return max(0.0, 1.0 - abs(guess - task.answer) / max(1.0, abs(task.answer)))


class ArithmeticTaskset(CountedTake, vf.Taskset[ArithmeticTask]):
    def load(self) -> Iterator[ArithmeticTask]:
        for i, (expression, answer) in enumerate(PROBLEMS):
            yield ArithmeticTask(
                ArithmeticData(
                    id=f"arithmetic-{i}",
                    prompt=f"Compute {expression}. End your reply with the number.",
                    answer=answer,
                )
            )
