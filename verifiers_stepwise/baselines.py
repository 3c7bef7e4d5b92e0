"""Group baselines: center each value by its segment's mean, optionally divide by the std.

A segment is a contiguous slice of a flat float64 array (a group's pooled turns, one turn index
of a group, a group's trajectory returns). For a segment X = {x_1..x_n}:

    mean-only (Dr. GRPO):   A_i = x_i − mean(X)
    std-scaled (GRPO):      A_i = (x_i − mean(X)) / (std(X) + ε)
    leave-one-out (RLOO):   baseline b_i = (Σ_j x_j − x_i) / (n − 1),  so
                            x_i − b_i = n/(n − 1) · (x_i − mean(X))

std is the population std (ddof = 0). A segment whose values are all equal (a single value
included) gives exactly 0.

Sums are exact, hence independent of the order of the segment's values: values are scaled by
a power of two so the segment's largest magnitude is below 1 (which also keeps squares of huge
rewards finite), rounded to multiples of 2^−B with B = 62 − bit_length(n) and added as int64
integers, which cannot round. The one rounding per value is at most 2^−(B+1) of the segment's
largest magnitude: below float64's own spacing there for segments of up to 512 values. Shuffling trajectories
therefore shuffles advantages bit-for-bit, and nothing depends on other segments.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["Scale", "center"]

Scale = Literal["std", "none"]


def _exact_sums(v: np.ndarray, starts: np.ndarray, counts: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """(n_seg,) Σ v per segment, given |v| < 2^exponent on each segment.

    Each v is rounded to a multiple of 2^(exponent − B), B = 62 − bit_length(n), and the
    resulting integers are added in int64, which is exact and so independent of order.
    """
    bits = 62 - np.frexp(counts.astype(np.float64))[1]
    q = np.ldexp(v, np.repeat(bits - exponent, counts))
    np.rint(q, out=q)
    total = np.add.reduceat(q.astype(np.int64), starts).astype(np.float64)
    return np.ldexp(total, exponent - bits)


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
    _, exponent = np.frexp(np.maximum(hi, -lo))  # max |x| < 2^exponent
    exponent_each = np.repeat(exponent, counts)
    # Work on y = x / 2^exponent (|y| < 1, exact): squares of huge rewards stay finite.
    y = np.ldexp(x, -exponent_each)
    hi, lo = np.ldexp(hi, -exponent), np.ldexp(lo, -exponent)
    zero = np.zeros_like(exponent)
    mean = _exact_sums(y, starts, counts, zero) / counts
    constant = hi == lo
    mean[constant] = hi[constant]  # all values equal: every deviation is exactly 0
    deviation = y - np.repeat(mean, counts)

    if scale == "std":
        # Rounding is monotone, so the extreme deviations bound every deviation exactly.
        widest = np.maximum(hi - mean, mean - lo)
        _, square_exponent = np.frexp(widest * widest)
        variance = _exact_sums(deviation * deviation, starts, counts, square_exponent) / counts
        denominator = np.sqrt(variance) + np.ldexp(eps, -exponent)
    if leave_one_out:
        deviation *= np.repeat(counts / np.maximum(counts - 1, 1), counts)
    if scale == "std":
        deviation /= np.repeat(denominator, counts)
        return deviation
    return np.ldexp(deviation, exponent_each)
