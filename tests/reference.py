"""Plain-Python reference for the return and advantage math, written from the formulas.

Deliberately naive: direct sums (no recursion), math.fsum for means and variances, explicit
loops. The tests check the vectorized package against it; the benchmark times it.
"""

from __future__ import annotations

import math


def returns(rewards: list[float], gamma: float, aggregation: str = "sum") -> list[float]:
    """sum: R_t = Σ_{i≥t} γ^(i−t) r_i;  max: R_t = max_{i≥t} γ^(i−t) r_i."""
    T = len(rewards)
    terms = [[gamma ** (i - t) * rewards[i] for i in range(t, T)] for t in range(T)]
    if aggregation == "sum":
        return [math.fsum(ts) for ts in terms]
    return [max(ts) for ts in terms]


def center(xs: list[float], scale: str, eps: float, leave_one_out: bool = False) -> list[float]:
    """(x − mean) / (pstdev + eps), or x − mean; RLOO scales deviations by n / (n − 1)."""
    n = len(xs)
    if all(x == xs[0] for x in xs):
        return [0.0] * n
    mean = math.fsum(xs) / n
    deviations = [x - mean for x in xs]
    if leave_one_out:
        deviations = [d * n / (n - 1) for d in deviations]
    if scale == "none":
        return deviations
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / n)
    return [d / (std + eps) for d in deviations]


def stepwise(
    group: list[list[float]],
    gamma: float = 0.4,
    aggregation: str = "sum",
    baseline: str = "pooled",
    scale: str = "std",
    eps: float = 1e-6,
) -> list[list[float]]:
    if len(group) == 1:
        return [[0.0] * len(group[0])]
    R = [returns(trajectory, gamma, aggregation) for trajectory in group]
    if baseline == "trajectory":
        firsts = center([r[0] for r in R], scale, eps)
        return [[a] * len(r) for a, r in zip(firsts, R)]
    if baseline == "per_turn":
        out = [[0.0] * len(r) for r in R]
        for t in range(max(len(r) for r in R)):
            members = [j for j, r in enumerate(R) if len(r) > t]
            for j, a in zip(members, center([R[j][t] for j in members], scale, eps)):
                out[j][t] = a
        return out
    pooled = center([x for r in R for x in r], scale, eps, baseline == "leave_one_out")
    out, k = [], 0
    for r in R:
        out.append(pooled[k : k + len(r)])
        k += len(r)
    return out


def grpo(group: list[list[float]], scale: str = "std", eps: float = 1e-6) -> list[list[float]]:
    totals = center([math.fsum(trajectory) for trajectory in group], scale, eps)
    return [[a] * len(trajectory) for a, trajectory in zip(totals, group)]
