"""``stepwise-dapo-math``: the DAPO-math environment bundle of verifiers-stepwise.

``vf-eval stepwise-dapo-math`` imports this module and reads ``__all__``: the taskset (DAPO
prompt, answer checking, rewards) and the env. Names load on first use, so importing the pure
parts (``stepwise_dapo_math.answers``, ``.shaping``) does not import verifiers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "DapoMathTaskset": "taskset",
    "DapoMathTask": "taskset",
    "DapoMathData": "taskset",
    "DapoMathTasksetConfig": "config",
    "DapoMathTaskConfig": "config",
    "DapoMathEnv": "env",
    "DapoMathEnvConfig": "env",
}

__all__ = ["DapoMathEnv", "DapoMathTaskset"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stepwise_dapo_math' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"stepwise_dapo_math.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from stepwise_dapo_math.config import DapoMathTaskConfig, DapoMathTasksetConfig
    from stepwise_dapo_math.env import DapoMathEnv, DapoMathEnvConfig
    from stepwise_dapo_math.taskset import DapoMathData, DapoMathTask, DapoMathTaskset
