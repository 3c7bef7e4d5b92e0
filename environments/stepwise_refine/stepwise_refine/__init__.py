"""Env id ``stepwise-refine``, as verifiers' loader imports it.

``vf-eval stepwise-refine`` runs the bundled arithmetic example (``stepwise_refine.arithmetic``);
``vf-eval <taskset> --env.id stepwise-refine`` wraps any other taskset. The env itself is
``verifiers_stepwise.envs.refine.RefineEnv``.
"""

from stepwise_refine.arithmetic import ArithmeticTaskset
from verifiers_stepwise.envs.refine import RefineEnv

__all__ = ["ArithmeticTaskset", "RefineEnv"]
