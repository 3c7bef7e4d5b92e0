"""The ``stepwise`` estimator: per-turn discounted returns, then a group baseline (Kevin)."""

from __future__ import annotations

import numpy as np

from verifiers_stepwise.estimators.base import Estimate, Estimator, EstimatorConfig
from verifiers_stepwise.estimators.baselines import Baseline, Scale, baseline_advantages
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import Aggregation, Gamma, ragged_discounted_returns

__all__ = ["Stepwise", "StepwiseConfig"]


class StepwiseConfig(EstimatorConfig):
    scale: Scale = "none"
    """"none": mean-centering only (the default: with the absorbing baseline it keeps the
    expected update a multiple of the true gradient); "std": divide by population std + eps."""
    gamma: Gamma = 1.0
    """Discount γ between turns (1, the default, is the undiscounted objective; Kevin uses 0.4)."""
    aggregation: Aggregation = "sum"
    """"sum": discounted reward-to-go; "max": best discounted future turn reward; "mean":
    discounted mean of the rewards ahead (horizon-aware, so pooled positions compare fairly)."""
    baseline: Baseline = "absorbing"
    """Which returns a turn's return is compared with, all within its group:
    absorbing (turn t of every trajectory, 0 for one that already stopped; the default),
    pooled (every turn of every trajectory; Kevin), per_turn (turn t of the trajectories that
    reached it), leave_one_out (the pool without this turn; RLOO), trajectory (each
    trajectory's first-turn return compared across trajectories, broadcast to its turns)."""


class Stepwise(Estimator):
    """Per-turn discounted returns, then a group baseline (Kevin, arXiv 2507.11948).

    For trajectory j of a group with turn rewards r_{j,1..T_j}:

        R_{j,t} = Σ_{i≥t} γ^(i−t) r_{j,i}    (sum)   or   max_{i≥t} γ^(i−t) r_{j,i}   (max)
        A_{j,t} = (R_{j,t} − mean(X)) / (std(X) + ε)     (scale="std"; R − mean for "none")

    where X is the baseline's comparison set within the group (``baselines``: absorbing, pooled,
    per_turn, leave_one_out, trajectory).

    The default (absorbing, sum, γ 1, scale "none"; chosen by benchmarks/learning.py, see
    docs/estimators.md) passes the three rules there: an all-wrong trajectory in a group where
    one succeeds gets a negative advantage on every turn (rewards ±1 with stop-on-success),
    identical rollouts get exactly 0, and adding a constant to every reward changes nothing
    among trajectories of equal length. Kevin's configuration is ``gamma=0.4,
    baseline="pooled", scale="std"``, safe only with non-negative rewards.

    Known biases (the pooled baseline's positional tilt, per_turn's dependence on who stopped,
    ...), each with the case and test that shows it: docs/estimators.md, "Known biases".
    """

    Config = StepwiseConfig
    config: StepwiseConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        return self.estimate(batch).advantages

    def estimate(self, batch: RaggedBatch) -> Estimate:
        c = self.config
        returns = ragged_discounted_returns(batch, c.gamma, c.aggregation)
        return Estimate(returns, baseline_advantages(batch, returns, c.baseline, c.scale, c.eps))
