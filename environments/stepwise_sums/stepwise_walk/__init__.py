"""Env id ``stepwise-walk``: reach a target by steps of 1 to 9, rewarded only on arrival.

Rollouts of a task pass through the same positions, so turns of different rollouts act from
the same state: the setting of ``gigpo``'s step advantage (``benchmarks/credit_suite.py``).
"""

from stepwise_walk.walk import WalkEnv, WalkTaskset

__all__ = ["WalkEnv", "WalkTaskset"]
