"""The ``turn_credit`` estimator: GRPO's trajectory advantage, redistributed across its turns.

After prime-rl PR #3282 (``type = "turn_credit"``, open; read at commit 0d60244): keep each
rollout's GRPO advantage and move credit between its turns, zero-sum, with a weight β.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from verifiers_stepwise.estimators.baselines import baseline_advantages
from verifiers_stepwise.estimators.grpo import GRPO, GRPOConfig
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import Gamma, ragged_discounted_returns

__all__ = ["TurnCredit", "TurnCreditConfig"]


class TurnCreditConfig(GRPOConfig):
    gamma: Gamma = 0.9
    """Discount γ of the per-turn returns that rank turns (prime-rl's turn_credit uses 0.9)."""
    beta: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """Weight β of the redistribution; 0 is exactly ``grpo``."""


class TurnCredit(GRPO):
    """GRPO-preserving per-turn credit.

    For trajectory j of a group, with T_j turns:

        A_j       = grpo's advantage of j                       (trajectory level, as ``GRPO``)
        c_{j,t}   = absorbing-baseline advantage of R_{j,t}     R = Σ_{i≥t} γ^(i−t) r_i; turn t of
                    every trajectory, a stopped one entering with 0 (see ``baselines``)
        A_{j,t}   = A_j + β (c_{j,t} − (1/T_j) Σ_s c_{j,s})

    Properties (tests/test_turn_credit.py): Σ_t A_{j,t} = T_j A_j (the trajectory keeps
    grpo's total, the redistribution is zero-sum); β = 0 or T_j = 1 gives grpo's values exactly;
    identical rollouts get exactly 0; adding a constant to every reward changes nothing when
    all trajectories have the same length. prime-rl's version weights the mean by tokens; this
    one weights every turn equally (a turn is one sample here; token counts are the host's).

    Known limit: a large β can outweigh A_j, so an all-wrong trajectory can get a positive
    turn (docs/estimators.md, "Known biases").
    """

    Config = TurnCreditConfig
    config: TurnCreditConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        c = self.config
        advantages = super().batched(batch)  # A_j
        if c.beta == 0.0 or batch.n_turns == 0:
            return advantages
        returns = ragged_discounted_returns(batch, c.gamma, "sum")
        credit = baseline_advantages(batch, returns, "absorbing", c.scale, c.eps)
        own_mean = np.add.reduceat(credit, batch.trajectory_starts) / batch.lengths
        return advantages + c.beta * (credit - np.repeat(own_mean, batch.lengths))
