"""Stepwise (turn-level) credit assignment for multi-turn LLM RL on the Verifiers v1 API.

Layers ``estimators`` → ``traces`` → ``envs`` → ``analysis`` → ``hosts`` → ``testing``, each
importing only those before it (docs/contributing.md, "Layers"). Public names are imported on
first use, so ``import verifiers_stepwise`` loads neither numpy, verifiers nor any trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

# module -> the public names it defines: what the README and docs/ use
_MODULES = {
    "errors": ("ConfigError", "DependencyMissing", "HostMismatch", "RewardError", "StepwiseError", "TraceError"),
    "estimators.base": ("Estimator", "EstimatorConfig", "zero_advantage_groups"),
    "estimators.ragged": ("RaggedBatch",),
    "estimators.registry": ("available_estimators", "get_estimator"),
    "estimators.returns": ("discounted_returns",),
    "traces.credit": ("Credit", "lay_out", "read_credit", "score_group", "write_credit"),
    "envs.bundles": ("available_environments",),
    "envs.env": ("StepwiseMultiTurnEnv", "StepwiseMultiTurnEnvConfig", "TurnResult"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'verifiers_stepwise' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"verifiers_stepwise.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from verifiers_stepwise.envs.bundles import available_environments
    from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, TurnResult
    from verifiers_stepwise.errors import (
        ConfigError,
        DependencyMissing,
        HostMismatch,
        RewardError,
        StepwiseError,
        TraceError,
    )
    from verifiers_stepwise.estimators.base import Estimator, EstimatorConfig, zero_advantage_groups
    from verifiers_stepwise.estimators.ragged import RaggedBatch
    from verifiers_stepwise.estimators.registry import available_estimators, get_estimator
    from verifiers_stepwise.estimators.returns import discounted_returns
    from verifiers_stepwise.traces.credit import Credit, lay_out, read_credit, score_group, write_credit
