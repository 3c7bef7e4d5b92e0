"""The ``grpo`` estimator: trajectory-level GRPO, the reference stepwise credit is measured against."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from verifiers_stepwise.estimators.base import Estimator, EstimatorConfig
from verifiers_stepwise.estimators.baselines import baseline_advantages
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import ragged_discounted_returns

__all__ = ["GRPO", "GRPOConfig"]


class GRPOConfig(EstimatorConfig):
    pass


class GRPO(Estimator):
    """Trajectory-level GRPO.

        G_j = Σ_t r_{j,t}      A_{j,t} = (G_j − mean_k G_k) / (std_k G_k + ε)   for every t

    (mean-only with scale="none", as prime-rl and tinker-cookbook do). With one turn per
    trajectory it equals ``Stepwise`` bit-for-bit for every gamma and aggregation and every
    baseline but leave_one_out (which scales deviations by n/(n − 1)).
    """

    Config: ClassVar[type[GRPOConfig]] = GRPOConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        # G_j is the undiscounted return of the first turn, compared across trajectories.
        returns = ragged_discounted_returns(batch, 1.0, "sum")
        return baseline_advantages(batch, returns, "trajectory", self.config.scale, self.config.eps)
