"""Group baselines: each return compared with the returns of its group.

For a multiset X of returns (one comparison set) and x ∈ X:

    scale="std":   A(x) = (x − mean(X)) / (std(X) + ε)      population std (ddof = 0)
    scale="none":  A(x) = x − mean(X)                       mean-only (Dr. GRPO)
    leave-one-out: x − (ΣX − x) / (|X| − 1) = |X| / (|X| − 1) · (x − mean(X))   (RLOO; same scale)

Which returns form X is the baseline. In a group of G trajectories k, T_k turns each, with
returns R_{k,t} (t = 0..T_k − 1), turn t of trajectory j is compared with:

    pooled         X = {R_{k,s} : every k, s}                 every turn of the group (Kevin)
    per_turn       X_t = {R_{k,t} : T_k > t}                  turn t of those that reached turn t
    absorbing      X_t = {R̃_{k,t} : every k},                 turn t of all G trajectories, one that
                   R̃_{k,t} = R_{k,t} if T_k > t, else 0       stopped entering with the return of the
                                                              absorbing state it is in (nothing more)
    leave_one_out  X = the pooled set, without R_{j,t}
    trajectory     X = {R_{k,0} : every k}                    first-turn returns; A_{j,t} = A(R_{j,0})

Why "absorbing": per_turn's set X_t holds only the trajectories that went on to turn t, so it
depends on when each chose to stop (a lone survivor gets exactly 0). Absorbing keeps all G
trajectories in every set, a stopped one earning 0 in its absorbing state; with scale="none"
and γ = 1, "sum" the expected update is (G − 1)/G times the true policy gradient, whoever stops
when (docs/estimators.md; tests/test_stopping_bias.py computes it exactly).

A set whose values are all equal gives exactly 0, and a group with a single trajectory has
nothing to be compared with and gives 0 on every turn.

Numerics: each set is computed in units of a power of two 2^e ≥ max|X| (an exact rescaling), so
squares never overflow and std scaling stays finite even for returns near float64's limit.
Sums are numpy's, so permuting the trajectories of a group permutes its advantages up to float
rounding (a few ulp of max|X| / std(X)); groups never affect each other.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from verifiers_stepwise.errors import RewardError
from verifiers_stepwise.estimators.ragged import RaggedBatch

__all__ = ["Baseline", "Scale", "baseline_advantages", "normalize_segments"]

Baseline = Literal["pooled", "per_turn", "absorbing", "leave_one_out", "trajectory"]
Scale = Literal["std", "none"]


def normalize_segments(
    x: np.ndarray, sizes: np.ndarray, scale: Scale, eps: float, leave_one_out: bool = False
) -> np.ndarray:
    """A(x) of the module docstring within each contiguous segment of ``x`` (n,) (``sizes``:
    values per segment, each >= 1); ±inf where x − mean(X) exceeds float64 (scale="none" only)."""
    if x.size == 0:
        return x.copy()
    starts = sizes.cumsum() - sizes
    hi, lo = np.maximum.reduceat(x, starts), np.minimum.reduceat(x, starts)
    # In units of 2^e >= max|X| (an exact rescaling): z = x / 2^e lies in [-1, 1], z² cannot overflow.
    _, e = np.frexp(np.maximum(hi, -lo))
    e_each = e.repeat(sizes)
    z = np.ldexp(x, -e_each)
    mean = np.add.reduceat(z, starts) / sizes  # mean(X) / 2^e
    deviation = z - mean.repeat(sizes)  # (x − mean(X)) / 2^e
    factor = np.repeat(sizes / np.maximum(sizes - 1, 1), sizes) if leave_one_out else 1.0  # |X| / (|X| − 1)
    if scale == "std":
        std = np.sqrt(np.add.reduceat(deviation * deviation, starts) / sizes)  # std(X) / 2^e
        # 0/0 only in all-equal sets, zeroed below; ε / 2^e overflows only when ε ≫ max|X|, and
        # x / inf = 0 is then the right limit
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            advantages = deviation * factor / np.repeat(std + np.ldexp(eps, -e), sizes)  # 2^e cancels
    else:
        with np.errstate(over="ignore"):
            advantages = np.ldexp(deviation * factor, e_each)  # back to units of 1
    advantages[np.repeat(hi == lo, sizes)] = 0.0  # an all-equal set: exactly 0, not rounding noise
    return advantages


def baseline_advantages(
    batch: RaggedBatch, returns: np.ndarray, baseline: Baseline, scale: Scale, eps: float
) -> np.ndarray:
    """(n_turns,) advantages of ``returns`` (n_turns,) against ``baseline`` within each group.

    Raises RewardError naming group, trajectory and turn when an advantage exceeds float64.
    """
    if baseline == "trajectory":
        firsts = returns[batch.trajectory_starts]
        advantages = np.repeat(normalize_segments(firsts, batch.group_sizes, scale, eps), batch.lengths)
    elif baseline == "per_turn":
        advantages = per_turn_advantages(batch, returns, scale, eps)
    elif baseline == "absorbing":
        advantages = absorbing_advantages(batch, returns, scale, eps)
    else:
        advantages = normalize_segments(returns, batch.group_turns, scale, eps, baseline == "leave_one_out")
    advantages[np.repeat(batch.group_sizes == 1, batch.group_turns)] = 0.0
    finite = np.isfinite(advantages)
    if not finite.all():
        loo = ", leave_one_out" if baseline == "leave_one_out" else ""
        raise RewardError(
            f"{batch.where(int(np.argmin(finite)))}: the advantage overflows float64 (returns "
            f"spread too wide for scale={scale!r}{loo})"
        )
    return advantages


def per_turn_advantages(batch: RaggedBatch, returns: np.ndarray, scale: Scale, eps: float) -> np.ndarray:
    """A_{j,t} = A(R_{j,t}; X_t), X_t = {R_{k,t} : T_k > t}: each turn against turn t of the
    trajectories of its group that reached it. Flat (n_turns,) in and out."""
    row = turn_rows(batch)  # (n_turns,) the X_t each turn belongs to
    by_row = np.argsort(row, kind="stable")  # each X_t contiguous, its trajectories in order
    sizes = np.bincount(row)  # |X_t| = #{k : T_k > t}
    advantages = np.empty_like(returns)
    advantages[by_row] = normalize_segments(returns[by_row], sizes, scale, eps)  # A(R_{j,t}; X_t)
    return advantages


def absorbing_advantages(batch: RaggedBatch, returns: np.ndarray, scale: Scale, eps: float) -> np.ndarray:
    """A_{j,t} = A(R_{j,t}; X_t), X_t = {R̃_{k,t} : k = 0..G − 1} for t < L = max_k T_k, with
    R̃_{k,t} = R_{k,t} if T_k > t, else 0: each turn against turn t of every trajectory of its
    group, a stopped one entering with 0. Flat (n_turns,) in and out."""
    # Each group's R̃ as an (L, G) table, row t holding X_t; the tables end to end, row by row.
    sizes = batch.group_sizes.repeat(batch.group_longest)  # (n_rows,) |X_t| = G, t = 0..L − 1
    row_start = sizes.cumsum() - sizes
    cell = row_start[turn_rows(batch)] + batch.trajectory_in_group.repeat(batch.lengths)  # R̃_{k,t}: row t, k
    R_tilde = np.zeros(int(sizes.sum()))  # R̃_{k,t} = 0 where k stopped before t,
    R_tilde[cell] = returns  # R_{k,t} where T_k > t
    return normalize_segments(R_tilde, sizes, scale, eps)[cell]  # A(R_{j,t}; X_t) where T_j > t


def turn_rows(batch: RaggedBatch) -> np.ndarray:
    """(n_turns,) the row of each turn when turn indices t = 0..L − 1 of each group (L its
    longest trajectory) are rows, the groups' rows end to end: Σ(L of earlier groups) + t."""
    first_row = batch.group_longest.cumsum() - batch.group_longest
    return first_row.repeat(batch.group_turns) + batch.turn_index
