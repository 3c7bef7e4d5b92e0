"""Math: per-turn returns and advantage estimators on ragged batches of per-turn rewards.

May import numpy and pydantic only (never verifiers or a trainer). Layers above build on it:
``traces`` (per-turn schema and credit on verifiers traces) → ``envs`` (environments and the
harness) → ``hosts`` (trainer adapters) → ``analysis`` (the ``vf-stepwise`` command).

    ragged      RaggedBatch: groups of trajectories of different lengths, flat float64
    returns     discounted per-turn returns (sum | max | mean), the backward recursion
    baselines   group baselines and normalization (absorbing, pooled, per_turn, leave_one_out, ...)
    base        the Estimator interface and its config base
    stepwise    per-turn returns against a group baseline (Kevin's, with a safe default)
    grpo        trajectory-level GRPO
    turn_credit grpo's trajectory advantage redistributed across its turns, zero-sum
    gigpo       grpo's episode advantage plus a step advantage among turns sharing an anchor state
    registry    discovery by name through the ``verifiers.advantage_estimators`` entry points
"""

from verifiers_stepwise.estimators.base import Estimator, EstimatorConfig, zero_advantage_groups
from verifiers_stepwise.estimators.baselines import Baseline, Scale
from verifiers_stepwise.estimators.gigpo import GiGPO, GiGPOConfig
from verifiers_stepwise.estimators.grpo import GRPO, GRPOConfig
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import Aggregation, discounted_returns, ragged_discounted_returns
from verifiers_stepwise.estimators.stepwise import Stepwise, StepwiseConfig
from verifiers_stepwise.estimators.turn_credit import TurnCredit, TurnCreditConfig

__all__ = [
    "GRPO",
    "Aggregation",
    "Baseline",
    "Estimator",
    "EstimatorConfig",
    "GRPOConfig",
    "GiGPO",
    "GiGPOConfig",
    "RaggedBatch",
    "Scale",
    "Stepwise",
    "StepwiseConfig",
    "TurnCredit",
    "TurnCreditConfig",
    "discounted_returns",
    "ragged_discounted_returns",
    "zero_advantage_groups",
]
