"""Group baselines: center each value by its segment's mean, optionally divide by the std.

A segment is a contiguous slice of a flat float64 array (a group's pooled turns, one turn index
of a group, a group's trajectory returns). For a segment X = {x_1..x_n}:

    mean-only (Dr. GRPO):   A_i = x_i − mean(X)
    std-scaled (GRPO):      A_i = (x_i − mean(X)) / (std(X) + ε)
    leave-one-out (RLOO):   baseline b_i = (Σ_j x_j − x_i) / (n − 1),  so
                            x_i − b_i = n/(n − 1) · (x_i − mean(X))

std is the population std (ddof = 0). A segment whose values are all equal (a single value
included) gives exactly 0.

Sums are exact, hence independent of the order of the segment's values: each segment is scaled
by a power of two so its largest magnitude is just below 2^B, B = 62 − bit_length(n); values
are truncated to integers and added in int64, which cannot round or overflow. The one
truncation per value is below 2^−B of the segment's largest magnitude: about float64's own
spacing there for segments of up to 512 values. Shuffling trajectories therefore shuffles
advantages bit-for-bit, and no segment's result depends on another segment. Working in these
scaled units also keeps squares of huge rewards finite.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["Scale", "center"]

Scale = Literal["std", "none"]

# Powers of two beyond float64's exponent range are clamped: a segment whose largest value is
# below 2^-960 (~1e-289) is treated on a coarser grid, which only ever rounds it towards 0.
_MIN_EXPONENT = -960


def _unit_exponent(magnitude: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(n_seg,) u with magnitude · 2^u < 2^B, B = 62 − bit_length(n), as high as possible."""
    _, exponent = np.frexp(magnitude)  # magnitude < 2^exponent
    headroom = 62 - np.frexp(counts.astype(np.float64))[1]  # n values below 2^B sum below 2^62
    return headroom - np.maximum(exponent, _MIN_EXPONENT)


def _exact_sums(z: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(n_seg,) Σ trunc(z) per segment, |z| < 2^B so every partial sum is an exact int64."""
    return np.add.reduceat(z.astype(np.int64), starts).astype(np.float64)


def center(
    x: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    *,
    scale: Scale,
    eps: float,
    leave_one_out: bool = False,
) -> np.ndarray:
    """Advantages of every value against its own segment.

    Args:
      x: (n,) float64 finite values, segments laid out contiguously.
      starts: (n_seg,) first index of each segment; segments tile ``x`` in order.
      counts: (n_seg,) length of each segment, each >= 1.
      scale: "std" divides by (population std + eps); "none" only centers.
      eps: ε added to the std, in the units of ``x``.
      leave_one_out: baseline is the mean of the other n − 1 values (RLOO).

    Returns:
      (n,) float64 advantages in the layout of ``x``.
    """
    if x.size == 0:
        return x.copy()
    hi = np.maximum.reduceat(x, starts)
    lo = np.minimum.reduceat(x, starts)
    constant = hi == lo
    # z = x · 2^u: exact (a power of two), |z| < 2^B.
    u = _unit_exponent(np.maximum(hi, -lo), counts)
    z = x * np.repeat(np.ldexp(1.0, u), counts)
    mean = _exact_sums(z, starts) / counts
    mean[constant] = np.ldexp(hi, u)[constant]  # all values equal: deviations exactly 0
    deviation = z - np.repeat(mean, counts)

    factor = np.ldexp(1.0, -u)  # back to the units of x
    if scale == "std":
        # Rounding is monotone, so the extreme deviations bound all of them exactly.
        widest = np.maximum(np.ldexp(hi, u) - mean, mean - np.ldexp(lo, u))
        v = _unit_exponent(widest * widest, counts)
        squares = deviation * deviation
        squares *= np.repeat(np.ldexp(1.0, v), counts)
        variance = np.ldexp(_exact_sums(squares, starts), -v) / counts
        denominator = np.sqrt(variance) + np.ldexp(eps, u)  # u <= 1021: ε·2^u stays finite
        denominator[constant] = 1.0  # deviations are exactly 0 there; no 0/0 with eps = 0
        factor = 1.0 / denominator
    if leave_one_out:
        factor = factor * (counts / np.maximum(counts - 1, 1))
    deviation *= np.repeat(factor, counts)
    return deviation
