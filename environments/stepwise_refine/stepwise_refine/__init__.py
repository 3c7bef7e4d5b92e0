"""Env id ``stepwise-refine``, as verifiers' loader imports it.

``vf-eval stepwise-refine`` runs the bundled arithmetic example; ``vf-eval <taskset> --env.id
stepwise-refine`` wraps any other taskset. The code lives in ``verifiers_stepwise.refine`` and
``verifiers_stepwise.arithmetic``.
"""

from verifiers_stepwise.arithmetic import ArithmeticTaskset
from verifiers_stepwise.refine import RefineEnv

__all__ = ["ArithmeticTaskset", "RefineEnv"]
