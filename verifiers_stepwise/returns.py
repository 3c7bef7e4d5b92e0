"""Per-turn discounted returns (Kevin, arXiv 2507.11948, section 3).

For one trajectory with turn rewards r_1..r_T and discount γ ∈ [0, 1]:

    sum:  R_t = Σ_{i=t}^{T} γ^(i−t) r_i          (= r_t + γ R_{t+1},        R_T = r_T)
    max:  R_t = max_{i=t..T} γ^(i−t) r_i          (= max(r_t, γ R_{t+1}),   R_T = r_T)

with γ^0 = 1. "sum" is the discounted reward-to-go; "max" credits a turn with the best
discounted score it leads to (Kevin's choice for refinement, where later turns re-score the
same kernel). Rewards may have any sign; note that with γ = 0, max gives max(r_t, 0) for t < T.

The ragged form runs the backward recursion R_t = r_t ⊕ γ R_{t+1} over every trajectory of a
batch in one compiled loop (``kernels.trajectory_returns``); each trajectory only ever reads
its own rewards, so results never depend on neighbouring trajectories or on batch order.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from verifiers_stepwise.ragged import RaggedBatch, RewardError

__all__ = ["Aggregation", "discounted_returns", "ragged_discounted_returns", "check_gamma"]

Aggregation = Literal["sum", "max"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)


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
    from verifiers_stepwise import kernels  # numba: compiled on first use

    gamma = check_gamma(gamma)
    code = kernels.AGGREGATION_CODES[check_aggregation(aggregation)]
    returns = np.empty(batch.n_turns)
    if not kernels.ragged_returns(batch.rewards, batch.lengths, gamma, code, returns):
        raise overflow_error(batch, returns, gamma)
    return returns


def overflow_error(batch: RaggedBatch, returns: np.ndarray, gamma: float) -> RewardError:
    """Names where a return first overflows: in the first trajectory holding a non-finite
    return, its last such turn — the recursion runs backwards, so every earlier turn of that
    trajectory only inherited the infinity. ``returns`` may stop after that trajectory."""
    first = int(np.argmin(np.isfinite(returns)))
    g, j, t = RaggedBatch.locate(first, batch.lengths, batch.group_sizes)
    end = first - t + int(batch.lengths[batch.group_starts[g] + j])
    t += int(np.flatnonzero(~np.isfinite(returns[first:end]))[-1])
    return RewardError(
        f"group {g}, trajectory {j}, turn {t}: the return overflows float64 "
        f"(rewards too large for gamma={gamma})"
    )
