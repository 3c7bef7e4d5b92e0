"""Env id ``stepwise-swe-bench``: SWE-bench as rounds of tool use, one reward per round.

``vf-eval stepwise-swe-bench`` runs the bundled offline tasks with every model command in the
episode's Docker container (``--env.taskset.task.sandbox.engine bwrap``: a bubblewrap sandbox);
``--env.taskset.source verified`` runs SWE-bench Verified in the official per-instance images.
See the bundle's README.md.

The exports load on first use, so the tool server (``python -m stepwise_swe_bench.toolset``)
imports its own modules only, not the environment and its grading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .env import SweBenchEnv
    from .taskset import SweBenchTaskset

__all__ = ["SweBenchEnv", "SweBenchTaskset"]


def __getattr__(name: str) -> Any:
    if name == "SweBenchEnv":
        from .env import SweBenchEnv

        return SweBenchEnv
    if name == "SweBenchTaskset":
        from .taskset import SweBenchTaskset

        return SweBenchTaskset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
