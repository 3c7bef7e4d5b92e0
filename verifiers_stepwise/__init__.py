"""Stepwise (turn-level) credit assignment for multi-turn LLM RL on the Verifiers v1 API.

Public names are imported on first use, so ``import verifiers_stepwise`` loads neither numpy,
torch, verifiers nor any trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "discounted_returns": "returns",
    "ragged_discounted_returns": "returns",
    "RaggedBatch": "ragged",
    "RewardError": "ragged",
    "Estimator": "estimators",
    "EstimatorConfig": "estimators",
    "ConfigError": "estimators",
    "Stepwise": "estimators",
    "StepwiseConfig": "estimators",
    "GRPO": "estimators",
    "GRPOConfig": "estimators",
    "zero_advantage_groups": "estimators",
    "available_estimators": "registry",
    "available_environments": "registry",
    "estimator_class": "registry",
    "get_estimator": "registry",
    "UnknownEstimator": "registry",
    "EntryPointConflict": "registry",
    "TraceTurns": "turns",
    "TurnSample": "turns",
    "TurnSchemaError": "turns",
    "append_turn": "turns",
    "read_turns": "turns",
    "turn_samples": "turns",
    "write_turn_advantages": "turns",
    "score_group": "credit",
    "StepwiseMultiTurnEnv": "env",
    "StepwiseMultiTurnEnvConfig": "env",
    "Turn": "env",
    "TurnResult": "env",
    "StepwiseChatConfig": "harness",
    "StepwiseChatHarness": "harness",
}

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
    from verifiers_stepwise.estimators import (
        GRPO,
        ConfigError,
        Estimator,
        EstimatorConfig,
        GRPOConfig,
        Stepwise,
        StepwiseConfig,
        zero_advantage_groups,
    )
    from verifiers_stepwise.ragged import RaggedBatch, RewardError
    from verifiers_stepwise.registry import (
        EntryPointConflict,
        UnknownEstimator,
        available_environments,
        available_estimators,
        estimator_class,
        get_estimator,
    )
    from verifiers_stepwise.returns import discounted_returns, ragged_discounted_returns
    from verifiers_stepwise.credit import score_group
    from verifiers_stepwise.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
    from verifiers_stepwise.harness import StepwiseChatConfig, StepwiseChatHarness
    from verifiers_stepwise.turns import (
        TraceTurns,
        TurnSample,
        TurnSchemaError,
        append_turn,
        read_turns,
        turn_samples,
        write_turn_advantages,
    )
