"""Group baselines: each return compared with the returns of its group.

For a multiset X of returns (one comparison set) and x ∈ X:

    scale="std":   A(x) = (x − mean(X)) / (std(X) + ε)      population std (ddof = 0)
    scale="none":  A(x) = x − mean(X)                       mean-only (Dr. GRPO)
    leave-one-out: x − (ΣX − x) / (|X| − 1) = |X| / (|X| − 1) · (x − mean(X))   (RLOO; same scale)

Which returns form X is the baseline:

    pooled         every turn of every trajectory of the group (Kevin)
    per_turn       turn t of the trajectories of the group that reached turn t
    absorbing      turn t of every trajectory of the group; one that stopped before t enters
                   with R = 0, the return of the absorbing state it is in (nothing more earned)
    leave_one_out  the pooled set, without x
    trajectory     each trajectory's first-turn return; its advantage goes on all of its turns

Why "absorbing": with per_turn the turn-t set holds only trajectories that went on to turn t,
so its size, mean and std depend on when each trajectory chose to stop, itself included (a lone
survivor gets exactly 0, a set of two gets ±1 whatever the stakes). With absorbing, every set
has all G trajectories of the group and a stopped trajectory contributes what it still earns, 0:
the return of the episode read as an MDP with an absorbing terminal state. With scale="none"
the advantage is (G − 1)/G · (R_{j,t} − mean_{k≠j} R_{k,t}): the baseline is built from the
other trajectories only, which do not depend on this one's actions, so for γ = 1 and "sum" the
expected update is (G − 1)/G times the true policy gradient, whoever stops when (computed
exactly on a stopping task in tests/test_stopping_bias.py).

A set whose values are all equal gives exactly 0, and a group with a single trajectory has
nothing to be compared with and gives 0 on every turn.

Numerics: each set is computed in units of a power of two 2^e ≥ max|X| (an exact rescaling), so
squares never overflow and std scaling stays finite even for returns near float64's limit.
Sums are numpy's, so permuting the trajectories of a group permutes its advantages up to float
rounding (a few ulp of max|X| / std(X)); groups never affect each other.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from verifiers_stepwise.estimators.ragged import RaggedBatch, RewardError

__all__ = ["BASELINES", "Baseline", "SCALES", "Scale", "baseline_advantages", "normalize_segments"]

Baseline = Literal["pooled", "per_turn", "absorbing", "leave_one_out", "trajectory"]
Scale = Literal["std", "none"]
BASELINES: tuple[str, ...] = get_args(Baseline)
SCALES: tuple[str, ...] = get_args(Scale)


def normalize_segments(
    x: np.ndarray, sizes: np.ndarray, scale: Scale, eps: float, leave_one_out: bool = False
) -> np.ndarray:
    """A(x) of the module docstring within each contiguous segment of ``x``.

    Args:
      x: (n,) finite values, segment after segment.
      sizes: (n_segments,) values per segment, each >= 1, summing to n.
      scale, eps, leave_one_out: as in the module docstring.

    Returns:
      (n,) advantages; ±inf where x − mean(X) exceeds float64 (only possible with scale="none").
    """
    if x.size == 0:
        return x.copy()
    starts = np.cumsum(sizes) - sizes
    hi, lo = np.maximum.reduceat(x, starts), np.minimum.reduceat(x, starts)
    # 2^e >= max|X|, so z = x / 2^e lies in [-1, 1] and z² cannot overflow.
    _, e = np.frexp(np.maximum(hi, -lo))
    e_each = np.repeat(e, sizes)
    z = np.ldexp(x, -e_each)
    deviation = z - np.repeat(np.add.reduceat(z, starts) / sizes, sizes)
    factor = np.repeat(sizes / np.maximum(sizes - 1, 1), sizes) if leave_one_out else 1.0
    if scale == "std":
        std = np.sqrt(np.add.reduceat(deviation * deviation, starts) / sizes)
        # 0/0 only in all-equal sets, zeroed below; ε / 2^e overflows only when ε ≫ max|X|, and x / inf = 0
        # is then the right limit
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            advantages = deviation * factor / np.repeat(std + np.ldexp(eps, -e), sizes)
    else:
        with np.errstate(over="ignore"):
            advantages = np.ldexp(deviation * factor, e_each)
    advantages[np.repeat(hi == lo, sizes)] = 0.0
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
        # Make each (group, turn index) set contiguous, normalize, and put the values back.
        longest = np.maximum.reduceat(batch.lengths, batch.group_starts) if batch.n_groups else batch.lengths
        key = np.repeat(np.cumsum(longest) - longest, batch.group_turns) + batch.turn_index
        order = np.argsort(key, kind="stable")
        advantages = np.empty_like(returns)
        advantages[order] = normalize_segments(returns[order], np.bincount(key), scale, eps)
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


def absorbing_advantages(batch: RaggedBatch, returns: np.ndarray, scale: Scale, eps: float) -> np.ndarray:
    """(n_turns,) advantages against the absorbing per-turn baseline (module docstring).

    Pads each group to a (L_g, G_g) table, L_g its longest trajectory, laid out index by index:
    cell (t, j) holds R_{j,t} when trajectory j has turn t and 0 (its absorbing state) when it
    stopped earlier; each row is normalized and the real turns are read back.
    """
    if batch.n_turns == 0:
        return returns.copy()
    longest = np.maximum.reduceat(batch.lengths, batch.group_starts)  # (n_groups,)
    table = longest * batch.group_sizes  # (n_groups,) cells per group
    first_cell = np.cumsum(table) - table
    j_in_group = np.arange(batch.n_trajectories) - np.repeat(batch.group_starts, batch.group_sizes)
    group_of_turn = batch.group_of_turn
    cell = (
        first_cell[group_of_turn]
        + batch.turn_index * batch.group_sizes[group_of_turn]
        + np.repeat(j_in_group, batch.lengths)
    )
    padded = np.zeros(int(table.sum()))
    padded[cell] = returns
    rows = np.repeat(batch.group_sizes, longest)  # (Σ L_g,) every row has G_g cells
    return normalize_segments(padded, rows, scale, eps)[cell]
