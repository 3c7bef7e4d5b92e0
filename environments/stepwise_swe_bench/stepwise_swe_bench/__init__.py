"""Env id ``stepwise-swe-bench``: SWE-bench as rounds of tool use, one reward per round.

``vf-eval stepwise-swe-bench`` runs the bundled offline tasks with every model command in a
bubblewrap sandbox; ``--env.taskset.source verified --env.agent.runtime.type docker`` runs
SWE-bench Verified in the official per-instance images. See the bundle's README.md.
"""

from .env import SweBenchEnv
from .taskset import SweBenchTaskset

__all__ = ["SweBenchEnv", "SweBenchTaskset"]
