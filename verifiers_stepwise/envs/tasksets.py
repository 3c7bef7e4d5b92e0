"""A taskset that says when vf-eval's ``-n`` asks for more tasks than it holds.

``-n`` means "at most" to vf-eval (a large one is the usual way to say "all of them"), and
verifiers' ``Taskset.take`` stops quietly when the tasks run out: ``-n 64 -r 8`` on three tasks
runs 24 episodes where 512 were expected, without a word. ``CountedTake`` keeps the meaning and
adds the word, on stderr through ``warnings`` (a logger may have no handler under vf-eval).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from verifiers_stepwise.envs.compat import TAKE, VIEW

__all__ = ["CountedTake", "warn_fewer"]


class CountedTake:
    """Mixin for a ``vf.Taskset`` (put it first): ``take(n)`` warns when fewer than n tasks come
    (``head(n)`` on verifiers before 0.4, which calls it that: ``compat.TAKE``)."""

    def take(self, num_tasks: int) -> Any:
        def counted(tasks: Iterator[Any]) -> Iterator[Any]:
            count = 0
            for task in tasks:
                count += 1
                yield task
            if count < num_tasks:
                warn_fewer("-n", num_tasks, count, self.source(), "after the selection")

        return getattr(getattr(super(), TAKE)(num_tasks), VIEW)(counted)

    if TAKE == "head":
        head = take

    def source(self) -> str:
        """What the tasks come from, as the warning names it."""
        return f"taskset {self.config.id!r}"  # type: ignore[attr-defined]  # a vf.Taskset's


def warn_fewer(flag: str, requested: int, available: int, source: str, after: str) -> None:
    """Say that ``flag`` asked for more tasks than ``source`` holds (``after`` what filtering)."""
    warnings.warn(
        f"{flag} {requested}: {source} has only {available} problems {after}, so {available} are run",
        stacklevel=3,
    )
