"""Compiled loops behind returns and advantages: one pass over each group, in cache.

Everything here is compiled by numba (checked with numba 0.68.1) on first use and cached on
disk. The kernels live in one file on purpose: numba's disk cache of a function is invalidated
only by edits to the file that defines it, so kernels that call each other stay together.

Layout (see ``RaggedBatch``): ``rewards`` (n_turns,) float64 concatenated group by group,
trajectory by trajectory; ``lengths`` (n_traj,) int64 >= 1; ``group_sizes`` (n_groups,) int64 >= 1.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# Codes the compiled kernels take instead of strings.
SUM, MAX = 0, 1
POOLED, PER_TURN, LEAVE_ONE_OUT, TRAJECTORY = 0, 1, 2, 3
AGGREGATION_CODES = {"sum": SUM, "max": MAX}
BASELINE_CODES = {"pooled": POOLED, "per_turn": PER_TURN, "leave_one_out": LEAVE_ONE_OUT, "trajectory": TRAJECTORY}

# What ``group_advantages`` found.
FINITE, RETURN_OVERFLOW, ADVANTAGE_OVERFLOW = range(3)

# What ``batch_problem`` found.
CONSISTENT, EMPTY_TRAJECTORY, EMPTY_GROUP, TRAJECTORY_COUNT, TURN_COUNT, NOT_FINITE = range(6)

# Powers of two beyond float64's exponent range are clamped: a segment whose largest value is
# below 2^-960 (~1e-289) is treated on a coarser grid, which only ever rounds it towards 0.
_MIN_EXPONENT = -960

_jit = njit(cache=True, nogil=True)


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _sum_in_any_order(x: np.ndarray) -> float:
    """Σ x, added in whatever order vectorizes; only used to learn whether it is finite."""
    total = 0.0
    for i in range(x.size):
        total += x[i]
    return total


@_jit
def batch_problem(rewards: np.ndarray, lengths: np.ndarray, group_sizes: np.ndarray) -> tuple[int, int]:
    """The first inconsistency of a ragged batch and where it is, or (CONSISTENT, 0):
    (EMPTY_TRAJECTORY, j) lengths[j] < 1; (EMPTY_GROUP, g) group_sizes[g] < 1;
    (TRAJECTORY_COUNT, Σ group_sizes) ≠ n_traj; (TURN_COUNT, Σ lengths) ≠ n_turns;
    (NOT_FINITE, i) rewards[i] is NaN or infinite.

    One compiled call, because trainers build a batch per group, where numpy's per-call cost
    would dominate. A NaN or infinity makes the sum non-finite, so a finite sum proves every
    reward finite; an overflowing sum only sends us to the element-wise search.
    """
    if lengths.size and lengths.min() < 1:  # a vectorized pass; the search only on failure
        return EMPTY_TRAJECTORY, np.argmin(lengths >= 1)
    if group_sizes.size and group_sizes.min() < 1:
        return EMPTY_GROUP, np.argmin(group_sizes >= 1)
    if group_sizes.sum() != lengths.size:
        return TRAJECTORY_COUNT, group_sizes.sum()
    if lengths.sum() != rewards.size:
        return TURN_COUNT, lengths.sum()
    if not np.isfinite(_sum_in_any_order(rewards)):
        for i in range(rewards.size):
            if not np.isfinite(rewards[i]):
                return NOT_FINITE, i
    return CONSISTENT, 0


@_jit
def trajectory_returns(r: np.ndarray, gamma: float, aggregation: int, out: np.ndarray) -> tuple[float, float]:
    """Returns of one trajectory, r and out (T,), by the backward recursion

        sum:  R_T = r_T,   R_t = r_t + γ R_{t+1}
        max:  R_T = r_T,   R_t = max(r_t, γ R_{t+1})

    and their (min, max), which baselines need and which cost nothing here: the loop waits on
    the recursion anyway.
    """
    later = r[r.size - 1]
    out[r.size - 1] = later
    lo = hi = later
    for t in range(r.size - 2, -1, -1):
        discounted = gamma * later
        later = max(r[t], discounted) if aggregation == MAX else r[t] + discounted
        out[t] = later
        lo = min(lo, later)
        hi = max(hi, later)
    return lo, hi


@_jit
def ragged_returns(rewards: np.ndarray, lengths: np.ndarray, gamma: float, aggregation: int, out: np.ndarray) -> bool:
    """``trajectory_returns`` for every trajectory of a flat batch; out (n_turns,).
    Whether every return is finite (with finite rewards only an overflow makes one ±inf)."""
    finite = True
    start = 0
    for length in lengths:
        stop = start + length
        lo, hi = trajectory_returns(rewards[start:stop], gamma, aggregation, out[start:stop])
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = False
        start = stop
    return finite


@_jit
def _headroom(n: int) -> int:
    """B = 62 − bit_length(n): n integers below 2^B in magnitude sum below 2^62."""
    return 62 - math.frexp(float(n))[1]


@_jit
def _unit_exponent(magnitude: float, n: int) -> int:
    """u with magnitude · 2^u < 2^B, as high as possible (magnitude > 0)."""
    return _headroom(n) - max(math.frexp(magnitude)[1], _MIN_EXPONENT)


@_jit
def center(x: np.ndarray, lo: float, hi: float, std: bool, eps: float, leave_one_out: bool) -> bool:
    """x (n,) finite, lo = min(x), hi = max(x) ← advantages of x against its own mean, in place:

        mean-only (Dr. GRPO):   A_i = x_i − mean(X)
        std-scaled (GRPO):      A_i = (x_i − mean(X)) / (std(X) + ε)       population std
        leave-one-out (RLOO):   x_i − (Σ_j x_j − x_i) / (n − 1) = n/(n − 1) · (x_i − mean(X))

    All-equal values (a single value included) give exactly 0. Returns whether every advantage
    is finite: without std scaling, x_i − mean(X) can exceed float64 when X spans nearly its
    whole range.

    Sums are exact, hence independent of the order of the values: x is scaled by a power of
    two 2^u so its largest magnitude is just below 2^B, B = 62 − bit_length(n); values are
    truncated to integers and added in int64, which cannot round or overflow. The one
    truncation per value is below 2^−B of the largest magnitude: about float64's own spacing
    there for up to 512 values. Shuffling trajectories therefore shuffles advantages
    bit-for-bit. Working in these scaled units also keeps squares of huge rewards finite.
    """
    n = x.size
    if hi == lo:
        x[:] = 0.0
        return True
    u = _unit_exponent(max(hi, -lo), n)
    unit = math.ldexp(1.0, u)  # exact: z = x · 2^u only moves the exponent
    total = 0
    for value in x:
        total += np.int64(value * unit)
    mean = total / n
    factor = math.ldexp(1.0, -u)  # back to the units of x
    if std:
        # Rounding is monotone, so the extreme deviations bound all of them exactly.
        widest = max(hi * unit - mean, mean - lo * unit)
        v = _unit_exponent(widest * widest, n)
        square_unit = math.ldexp(1.0, v)
        squares = 0
        for value in x:
            deviation = value * unit - mean
            squares += np.int64(deviation * deviation * square_unit)
        variance = math.ldexp(float(squares), -v) / n
        factor = 1.0 / (math.sqrt(variance) + math.ldexp(eps, u))  # u <= 1021: ε·2^u finite
    if leave_one_out:
        factor *= n / (n - 1)
    for i in range(n):
        x[i] = (x[i] * unit - mean) * factor
    # Rounding is monotone, so the advantages of hi and lo bound all others.
    return math.isfinite((hi * unit - mean) * factor) and math.isfinite((lo * unit - mean) * factor)


@_jit
def group_advantages(
    rewards: np.ndarray,
    lengths: np.ndarray,
    group_sizes: np.ndarray,
    gamma: float,
    aggregation: int,
    baseline: int,
    std: bool,
    eps: float,
    out: np.ndarray,
) -> tuple[int, int]:
    """Per-turn advantages of every group into out (n_turns,): returns, then the baseline.

    Returns (FINITE, -1), or (RETURN_OVERFLOW, g) / (ADVANTAGE_OVERFLOW, g) for the first group
    g whose returns / advantages overflow float64; out then holds g's returns / advantages, and
    later groups are left unwritten. A group with one trajectory gets 0 everywhere.
    """
    widest = group_sizes.max() if group_sizes.size else 0
    picked = np.empty(widest)  # one value per trajectory: its first turn, or turn t
    starts = np.empty(widest + 1, dtype=np.int64)  # flat start of each trajectory, then the end
    trajectory = start = 0
    for g in range(group_sizes.size):
        size = group_sizes[g]
        starts[0] = start
        lo, hi, longest = np.inf, -np.inf, 0
        for j in range(size):
            length = lengths[trajectory + j]
            longest = max(longest, length)
            starts[j + 1] = starts[j] + length
            first, stop = starts[j], starts[j + 1]
            low, high = trajectory_returns(rewards[first:stop], gamma, aggregation, out[first:stop])
            lo, hi = min(lo, low), max(hi, high)
        trajectory += size
        start = starts[size]
        returns = out[starts[0] : start]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return RETURN_OVERFLOW, g
        finite = True
        if size == 1:
            returns[:] = 0.0  # no peers: its turns would only be compared with each other
        elif baseline == POOLED or baseline == LEAVE_ONE_OUT:
            finite = center(returns, lo, hi, std, eps, baseline == LEAVE_ONE_OUT)
        elif baseline == TRAJECTORY:
            lo, hi = np.inf, -np.inf
            for j in range(size):
                picked[j] = out[starts[j]]
                lo, hi = min(lo, picked[j]), max(hi, picked[j])
            finite = center(picked[:size], lo, hi, std, eps, False)
            for j in range(size):
                out[starts[j] : starts[j + 1]] = picked[j]
        else:  # PER_TURN: turn t against turn t of the trajectories that reached it
            for t in range(longest):
                m, lo, hi = 0, np.inf, -np.inf
                for j in range(size):
                    if starts[j] + t < starts[j + 1]:
                        picked[m] = out[starts[j] + t]
                        lo, hi = min(lo, picked[m]), max(hi, picked[m])
                        m += 1
                finite &= center(picked[:m], lo, hi, std, eps, False)
                m = 0
                for j in range(size):
                    if starts[j] + t < starts[j + 1]:
                        out[starts[j] + t] = picked[m]
                        m += 1
        if not finite:
            return ADVANTAGE_OVERFLOW, g
    return FINITE, -1
