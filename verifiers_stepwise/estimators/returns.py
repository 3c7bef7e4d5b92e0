"""Per-turn discounted returns (Kevin, arXiv 2507.11948, section 3).

For one trajectory with turn rewards r_1..r_T and discount γ ∈ [0, 1]:

    sum:  R_t = Σ_{i=t}^{T} γ^(i−t) r_i          (= r_t + γ R_{t+1},        R_T = r_T)
    max:  R_t = max_{i=t..T} γ^(i−t) r_i          (= max(r_t, γ R_{t+1}),   R_T = r_T)
    mean: R̄_t = R_t(sum) / Σ_{k=0}^{T−t} γ^k      (the discounted *mean* of the rewards ahead)

with γ^0 = 1. "sum" is the discounted reward-to-go; "max" credits a turn with the best
discounted score it leads to (Kevin's choice for refinement, where later turns re-score the
same kernel). Rewards may have any sign; note that with γ = 0, max gives max(r_t, 0) for t < T.

"mean" is horizon-aware: a turn near the end averages over as many (discounted) rewards as a
turn near the start, so returns of different positions are comparable. Adding c to every reward
adds exactly c to every R̄_t whatever the position or length (for "sum" it adds c·Σ_k γ^k, which
grows with the turns left), so a pooled baseline over "mean" returns ignores constant shifts.

The ragged form runs the backward recursion as a reverse scan over "steps before the end",
vectorized across trajectories (as rlax's ``discounted_returns`` scans over time): step k
updates, in every trajectory longer than k, the turn k steps before its last. Each trajectory
only reads its own rewards, so results never depend on its neighbours or on batch order.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Annotated, Literal, get_args

import numpy as np
from pydantic import AfterValidator

from verifiers_stepwise.errors import ConfigError, RewardError
from verifiers_stepwise.estimators.ragged import RaggedBatch

__all__ = ["Aggregation", "Gamma", "check_gamma", "discounted_returns", "ragged_discounted_returns"]

Aggregation = Literal["sum", "max", "mean"]
_AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)


def check_gamma(gamma: float) -> float:
    """Discounts live in [0, 1]; anything else, NaN included, is a configuration error (the one
    rule for γ: these functions and every estimator config, through ``Gamma``)."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


Gamma = Annotated[float, AfterValidator(check_gamma)]
"""An estimator config's γ field, checked by ``check_gamma``."""


def _check_aggregation(aggregation: str) -> Aggregation:
    if aggregation not in _AGGREGATIONS:
        raise ConfigError(f"aggregation must be one of {_AGGREGATIONS}, got {aggregation!r}")
    return aggregation  # type: ignore[return-value]


def discounted_returns(rewards: Sequence[float], gamma: float, aggregation: Aggregation = "sum") -> list[float]:
    """[R_1, ..., R_T] of one trajectory's finite rewards r_1..r_T (T >= 1), as float64 values."""
    return ragged_discounted_returns(RaggedBatch.from_groups([[rewards]]), gamma, aggregation).tolist()


def ragged_discounted_returns(batch: RaggedBatch, gamma: float, aggregation: Aggregation = "sum") -> np.ndarray:
    """(n_turns,) R_t of every turn of ``batch``, in the flat layout of ``batch.rewards``
    (groups play no role here)."""
    gamma = check_gamma(gamma)
    use_max = _check_aggregation(aggregation) == "max"
    returns = batch.rewards.copy()  # R_T = r_T; earlier turns hold r_t until their step
    if batch.n_trajectories:
        by_length = np.argsort(-batch.lengths, kind="stable")
        ahead = batch.trajectory_ends[by_length] - 1  # (n_traj,) the last turns, longest trajectory first
        longer_than = (batch.n_trajectories - np.bincount(batch.lengths).cumsum()).tolist()  # [k]: #(T > k)
        with np.errstate(over="ignore"):  # an overflow is reported below, with where it is
            for n in longer_than[1:-1]:  # step k = 1 .. max T − 1: the n trajectories longer than k
                turns = ahead[:n] - 1  # the turn k steps before the end; ahead[:n] holds the turn after it
                later = gamma * returns[ahead[:n]]
                returns[turns] = np.maximum(returns[turns], later) if use_max else returns[turns] + later
                ahead = turns
    finite = np.isfinite(returns)
    if not finite.all():
        raise _overflow_error(batch, finite, gamma)
    if aggregation == "mean":
        # Σ_{k=0}^{T−t} γ^k is the sum return of all-ones rewards (the same scan, no cancellation near γ = 1).
        ones = RaggedBatch(np.ones_like(batch.rewards), batch.lengths, batch.group_sizes)
        returns /= ragged_discounted_returns(ones, gamma, "sum")
    return returns


def _overflow_error(batch: RaggedBatch, finite: np.ndarray, gamma: float) -> RewardError:
    """Names the last non-finite turn of the first trajectory holding one: the recursion runs
    backwards, so every earlier turn of that trajectory only inherited the infinity."""
    first = int(np.argmin(finite))
    trajectory = int(np.searchsorted(batch.trajectory_ends, first, side="right"))
    end = int(batch.trajectory_ends[trajectory])
    turn = first + int(np.flatnonzero(~finite[first:end])[-1])
    return RewardError(f"{batch.where(turn)}: the return overflows float64 (rewards too large for gamma={gamma})")
