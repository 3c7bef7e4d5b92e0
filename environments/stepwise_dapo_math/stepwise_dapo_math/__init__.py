"""``stepwise-dapo-math``: the DAPO-math environment bundle of verifiers-stepwise.

``vf-eval stepwise-dapo-math`` imports this module and reads ``__all__``: the taskset (DAPO
prompt, answer checking, rewards) and the env. Both load on first access, so the pure parts
(``stepwise_dapo_math.answers``, ``.shaping``, ``.symbolic`` — imported by every math-verify
worker process) never import verifiers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["DapoMathEnv", "DapoMathTaskset"]


def __getattr__(name: str) -> Any:
    if name == "DapoMathEnv":
        from stepwise_dapo_math.env import DapoMathEnv

        return DapoMathEnv
    if name == "DapoMathTaskset":
        from stepwise_dapo_math.taskset import DapoMathTaskset

        return DapoMathTaskset
    raise AttributeError(f"module 'stepwise_dapo_math' has no attribute {name!r}")


if TYPE_CHECKING:
    from stepwise_dapo_math.env import DapoMathEnv
    from stepwise_dapo_math.taskset import DapoMathTaskset
