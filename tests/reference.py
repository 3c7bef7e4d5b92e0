"""Plain-Python reference for the return and advantage math, written from the formulas.

Deliberately naive: direct sums (no recursion), math.fsum for means and variances, explicit
loops. The tests check the vectorized package against it; the benchmark times it.
"""

from __future__ import annotations

import math


def returns(rewards: list[float], gamma: float, aggregation: str = "sum") -> list[float]:
    """sum: R_t = Σ_{i≥t} γ^(i−t) r_i;  max: R_t = max_{i≥t} γ^(i−t) r_i;
    mean: Σ_{i≥t} γ^(i−t) r_i / Σ_{i≥t} γ^(i−t)."""
    T = len(rewards)
    terms = [[gamma ** (i - t) * rewards[i] for i in range(t, T)] for t in range(T)]
    if aggregation == "sum":
        return [math.fsum(ts) for ts in terms]
    if aggregation == "mean":
        return [math.fsum(ts) / math.fsum(gamma ** (i - t) for i in range(t, T)) for t, ts in enumerate(terms)]
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
    if baseline in ("per_turn", "absorbing"):
        return per_index(R, scale, eps, absorbing=baseline == "absorbing")
    pooled = center([x for r in R for x in r], scale, eps, baseline == "leave_one_out")
    out, k = [], 0
    for r in R:
        out.append(pooled[k : k + len(r)])
        k += len(r)
    return out


def grpo(group: list[list[float]], scale: str = "std", eps: float = 1e-6) -> list[list[float]]:
    totals = center([math.fsum(trajectory) for trajectory in group], scale, eps)
    return [[a] * len(trajectory) for a, trajectory in zip(totals, group)]


def per_index(R: list[list[float]], scale: str, eps: float, absorbing: bool) -> list[list[float]]:
    """Center turn t's returns over the trajectories that reached t, or (absorbing) over every
    trajectory, one that stopped before t counting as 0."""
    out = [[0.0] * len(r) for r in R]
    for t in range(max(len(r) for r in R)):
        members = [j for j, r in enumerate(R) if len(r) > t or absorbing]
        values = [R[j][t] if len(R[j]) > t else 0.0 for j in members]
        for j, a in zip(members, center(values, scale, eps)):
            if len(R[j]) > t:
                out[j][t] = a
    return out


def turn_credit(
    group: list[list[float]], gamma: float = 0.9, beta: float = 1.0, scale: str = "std", eps: float = 1e-6
) -> list[list[float]]:
    """A_{j,t} = grpo_j + β (c_{j,t} − mean_s c_{j,s}), c the absorbing per-turn advantages."""
    trajectory = grpo(group, scale, eps)
    if len(group) == 1:
        return trajectory
    credit = per_index([returns(t, gamma) for t in group], scale, eps, absorbing=True)
    out = []
    for a, c in zip(trajectory, credit):
        mean = math.fsum(c) / len(c)
        out.append([a[0] + beta * (x - mean) for x in c])
    return out


def gigpo(
    group: list[list[float]],
    states: list[list[object]],
    gamma: float = 0.95,
    omega: float = 1.0,
    scale: str = "std",
    eps: float = 1e-6,
) -> list[list[float]]:
    """A_{j,t} = grpo_j + ω A^S_{j,t}: A^S centers R_{j,t} over every turn of the group with the
    same anchor state (None: no state, A^S = 0)."""
    episode = grpo(group, scale, eps)
    if len(group) == 1:
        return episode
    R = [returns(trajectory, gamma) for trajectory in group]
    step_groups: dict[object, list[tuple[int, int]]] = {}
    for j, row in enumerate(states):
        for t, state in enumerate(row):
            if state is not None:
                step_groups.setdefault(state, []).append((j, t))
    step = [[0.0] * len(trajectory) for trajectory in group]
    for cells in step_groups.values():
        for (j, t), a in zip(cells, center([R[j][t] for j, t in cells], scale, eps)):
            step[j][t] = a
    return [[e + omega * a for e, a in zip(es, ss)] for es, ss in zip(episode, step)]
