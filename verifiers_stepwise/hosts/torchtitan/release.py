"""torchtitan 0.3.0's layout (``torchtitan.experiments.rl``, the release on PyPI): its
``StepwiseTrainingSampleBuilder``. torchtitan main moved the RL package to ``torchtitan.rl``:
there use ``hosts.torchtitan.main``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifiers_stepwise.errors import HostMismatch
from verifiers_stepwise.extras import TrainerDependencyMissing, install_command
from verifiers_stepwise.hosts.torchtitan import StepwiseSamples, requires_torchtitan

LAYOUT = "torchtitan.experiments.rl"


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.release"):
    try:
        from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder
        from torchtitan.experiments.rl.observability import metrics
    except ModuleNotFoundError as error:
        if error.name not in ("torchtitan.experiments", LAYOUT):
            raise  # 0.3.0's RL package is there but misses something: name that, not the layout
        if _installed("torchtitan.rl"):
            raise HostMismatch(
                f"verifiers_stepwise.hosts.torchtitan.release is for torchtitan 0.3.0 ({LAYOUT}); this torchtitan "
                "has main's layout (torchtitan.rl): use verifiers_stepwise.hosts.torchtitan.main "
                "(StepwiseTrainingSampleBuilder, StepwiseVerifiersRollouter)"
            ) from None
        raise TrainerDependencyMissing(
            f"verifiers_stepwise.hosts.torchtitan needs torchtitan's RL package, at {LAYOUT} (torchtitan 0.3.0) "
            f"or torchtitan.rl (torchtitan main); the installed torchtitan has neither: "
            f"{install_command('torchtitan')} installs 0.3.0",
            name=LAYOUT,
        ) from None

__all__ = ["LAYOUT", "StepwiseTrainingSampleBuilder"]


class StepwiseTrainingSampleBuilder(StepwiseSamples, TrainingSampleBuilder):
    """``AsyncLoopConfig.training_sample_builder`` on torchtitan 0.3.0 (``StepwiseSamples``)."""

    metrics = metrics

    @dataclass(kw_only=True, slots=True)
    class Config(StepwiseSamples.Config, TrainingSampleBuilder.Config):
        pass
