"""Stepwise (turn-level) credit assignment for multi-turn LLM RL on the Verifiers v1 API.

Layers, each importing only those before it:

    estimators   the math: per-turn returns, baselines, estimators and their registry (numpy)
    traces       the per-turn reward schema on verifiers v1 traces; credit written on tokens
    envs         StepwiseMultiTurnEnv, the refine env and the stepwise-chat harness (verifiers)
    hosts        trainer adapters: prime-rl, torchtitan, tinker-cookbook (each imports its host)
    analysis     the ``vf-stepwise`` command
    testing      a scripted model server and trace builders for tests

``errors`` gives every error its boundary (docs/contributing.md) and ``plugins`` reads the entry
points estimators and environment bundles are installed under; they import nothing above them
and every layer may import them. Public names are imported on first use, so ``import verifiers_stepwise``
loads neither numpy, verifiers nor any trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

# public name -> module that defines it
_EXPORTS = {
    "discounted_returns": "estimators.returns",
    "ragged_discounted_returns": "estimators.returns",
    "RaggedBatch": "estimators.ragged",
    "RewardError": "errors",
    "Estimate": "estimators.base",
    "Estimator": "estimators.base",
    "EstimatorConfig": "estimators.base",
    "ConfigError": "errors",
    "StepwiseError": "errors",
    "TraceError": "errors",
    "HostMismatch": "errors",
    "DependencyMissing": "errors",
    "zero_advantage_groups": "estimators.base",
    "Stepwise": "estimators.stepwise",
    "StepwiseConfig": "estimators.stepwise",
    "GRPO": "estimators.grpo",
    "GRPOConfig": "estimators.grpo",
    "GiGPO": "estimators.gigpo",
    "GiGPOConfig": "estimators.gigpo",
    "TurnCredit": "estimators.turn_credit",
    "TurnCreditConfig": "estimators.turn_credit",
    "available_estimators": "estimators.registry",
    "available_environments": "envs.bundles",
    "estimator_class": "estimators.registry",
    "get_estimator": "estimators.registry",
    "UnknownEstimator": "estimators.registry",
    "EntryPointConflict": "plugins",
    "TraceTurns": "traces.turns",
    "TurnSample": "traces.turns",
    "TurnSchemaError": "traces.turns",
    "append_turn": "traces.turns",
    "append_turn_score": "traces.turns",
    "read_turns": "traces.turns",
    "turn_samples": "traces.turns",
    "write_turn_advantages": "traces.turns",
    "score_group": "traces.credit",
    "Credit": "traces.credit",
    "read_credit": "traces.credit",
    "StepwiseMultiTurnEnv": "envs.env",
    "StepwiseMultiTurnEnvConfig": "envs.env",
    "Turn": "envs.env",
    "TurnResult": "envs.env",
    "StepwiseChatConfig": "envs.harness",
    "StepwiseChatHarness": "envs.harness",
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
    from verifiers_stepwise.envs.bundles import available_environments
    from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
    from verifiers_stepwise.envs.harness import StepwiseChatConfig, StepwiseChatHarness
    from verifiers_stepwise.errors import (
        ConfigError,
        DependencyMissing,
        HostMismatch,
        RewardError,
        StepwiseError,
        TraceError,
    )
    from verifiers_stepwise.estimators.base import Estimate, Estimator, EstimatorConfig, zero_advantage_groups
    from verifiers_stepwise.estimators.gigpo import GiGPO, GiGPOConfig
    from verifiers_stepwise.estimators.grpo import GRPO, GRPOConfig
    from verifiers_stepwise.estimators.ragged import RaggedBatch
    from verifiers_stepwise.estimators.registry import (
        UnknownEstimator,
        available_estimators,
        estimator_class,
        get_estimator,
    )
    from verifiers_stepwise.estimators.returns import discounted_returns, ragged_discounted_returns
    from verifiers_stepwise.estimators.stepwise import Stepwise, StepwiseConfig
    from verifiers_stepwise.estimators.turn_credit import TurnCredit, TurnCreditConfig
    from verifiers_stepwise.plugins import EntryPointConflict
    from verifiers_stepwise.traces.credit import Credit, read_credit, score_group
    from verifiers_stepwise.traces.turns import (
        TraceTurns,
        TurnSample,
        TurnSchemaError,
        append_turn,
        append_turn_score,
        read_turns,
        turn_samples,
        write_turn_advantages,
    )
