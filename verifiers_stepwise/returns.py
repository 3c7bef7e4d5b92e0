"""Per-turn discounted returns (Kevin, arXiv 2507.11948, section 3).

For one trajectory with turn rewards r_1..r_T and discount γ ∈ [0, 1]:

    sum:  R_t = Σ_{i=t}^{T} γ^(i−t) r_i          (= r_t + γ R_{t+1},        R_T = r_T)
    max:  R_t = max_{i=t..T} γ^(i−t) r_i          (= max(r_t, γ R_{t+1}),   R_T = r_T)

with γ^0 = 1. "sum" is the discounted reward-to-go; "max" credits a turn with the best
discounted score it leads to (Kevin's choice for refinement, where later turns re-score the
same kernel). Rewards may have any sign; note that with γ = 0, max gives max(r_t, 0) for t < T.

The ragged form computes every trajectory of a batch at once with a log-depth (Hillis–Steele)
scan over the flat array: after the pass with offset k, each R_t holds the aggregate of its
next 2k turns, so ⌈log2 T_max⌉ vectorized passes replace the loop over turns. Each entry only
ever combines finite values of its own trajectory (others enter multiplied by exactly 0 or are
ignored by fmax), so results never depend on neighbouring trajectories or on batch order.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Literal

import numpy as np

from verifiers_stepwise.ragged import RaggedBatch, RewardError

__all__ = ["Aggregation", "discounted_returns", "ragged_discounted_returns", "check_gamma"]

Aggregation = Literal["sum", "max"]
AGGREGATIONS: tuple[str, ...] = ("sum", "max")


def check_gamma(gamma: float) -> float:
    """Discounts live in [0, 1]; anything else, NaN included, is a configuration error."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0.0 <= gamma <= 1.0:
        raise RewardError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


def check_aggregation(aggregation: str) -> str:
    if aggregation not in AGGREGATIONS:
        raise RewardError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    return aggregation


def discounted_returns(
    rewards: Sequence[float], gamma: float, aggregation: Aggregation = "sum"
) -> list[float]:
    """Per-turn returns R_1..R_T of one trajectory; see the module docstring for the formulas.

    Args:
      rewards: r_1..r_T, T >= 1, finite.
      gamma: discount γ in [0, 1].
      aggregation: "sum" (discounted reward-to-go) or "max" (best discounted future score).

    Returns:
      [R_1, ..., R_T] as float64 values.
    """
    if len(rewards) == 0:
        raise RewardError("trajectory 0: a trajectory needs at least one turn")
    batch = RaggedBatch.from_groups([[rewards]])
    return ragged_discounted_returns(batch, gamma, aggregation).tolist()


def ragged_discounted_returns(
    batch: RaggedBatch, gamma: float, aggregation: Aggregation = "sum"
) -> np.ndarray:
    """Returns for every turn of a ragged batch.

    Args:
      batch: rewards (n_turns,) with their trajectory lengths; groups play no role here.
      gamma: discount γ in [0, 1].
      aggregation: "sum" or "max".

    Returns:
      (n_turns,) float64, R_t in the same flat layout as ``batch.rewards``.
    """
    gamma = check_gamma(gamma)
    check_aggregation(aggregation)
    returns = batch.rewards.copy()
    n = returns.size
    if n == 0:
        return returns
    remaining = batch.turns_remaining
    longest = int(remaining.max())
    shifted = np.empty(n)
    reaches = np.empty(n, dtype=bool)
    gate = np.empty(n) if aggregation == "max" else None
    k = 1
    # Masked ufuncs (where=) are ~10x slower than plain ones, so the "same trajectory" test is
    # applied arithmetically: sum multiplies the shifted term by 0/1, max adds 0/NaN and uses
    # fmax, which ignores NaN. Overflow is reported below with its location.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        while k <= longest:  # ⌈log2 T_max⌉ passes, each over the whole batch
            m = n - k
            # R_t ← R_t ⊕ γ^k R_{t+k}, only where turn t+k belongs to the same trajectory.
            np.greater_equal(remaining[:m], k, out=reaches[:m])
            np.multiply(returns[k:], gamma**k, out=shifted[:m])
            if gate is None:
                np.multiply(shifted[:m], reaches[:m], out=shifted[:m])
                np.add(returns[:m], shifted[:m], out=returns[:m])
            else:
                np.divide(0.0, reaches[:m], out=gate[:m])  # 0 where reached, NaN elsewhere
                np.add(shifted[:m], gate[:m], out=shifted[:m])
                np.fmax(returns[:m], shifted[:m], out=returns[:m])
            k *= 2
    if not np.isfinite(returns).all():
        # An overflow is ±inf in its own trajectory; 0·inf leaks NaN only into neighbours.
        bad = np.isinf(returns) if np.isinf(returns).any() else ~np.isfinite(returns)
        i = int(np.argmax(bad))
        g, j, t = RaggedBatch.locate(i, batch.lengths, batch.group_sizes)
        raise RewardError(
            f"group {g}, trajectory {j}, turn {t}: the return overflows float64 "
            f"(rewards too large for gamma={gamma})"
        )
    return returns
