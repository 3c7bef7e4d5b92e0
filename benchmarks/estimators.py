"""Batched returns + advantages (compiled kernels) vs plain Python, same run, same data.

65,536 trajectories of 1–16 turns in groups of 16, gamma 0.9; both aggregations and every
baseline. Prints the median time of each path, the ratio, and turns per second.

    python benchmarks/estimators.py [--trajectories 65536] [--repeats 15]

The plain-Python baseline is the fastest obvious loop (backward recursion, sum/len), not the
O(T²) formula-by-formula reference the tests use, so the ratio is not inflated.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # "one core": no threaded kernels
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from verifiers_stepwise import RaggedBatch, Stepwise  # noqa: E402

BASELINES = ("pooled", "per_turn", "leave_one_out", "trajectory")


def python_returns(rewards: list[float], gamma: float, aggregation: str) -> list[float]:
    out = rewards[:]
    for t in range(len(rewards) - 2, -1, -1):
        later = gamma * out[t + 1]
        out[t] = rewards[t] + later if aggregation == "sum" else max(rewards[t], later)
    return out


def python_center(xs: list[float], eps: float, loo: bool) -> list[float]:
    n = len(xs)
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)
    factor = n / (n - 1) if loo and n > 1 else 1.0
    return [0.0 if std == 0 else factor * (x - mean) / (std + eps) for x in xs]


def python_stepwise(groups: list[list[list[float]]], gamma: float, aggregation: str, baseline: str) -> list:
    out = []
    for group in groups:
        R = [python_returns(t, gamma, aggregation) for t in group]
        if baseline == "trajectory":
            A = python_center([r[0] for r in R], 1e-6, False)
            out.append([[a] * len(r) for a, r in zip(A, R)])
        elif baseline == "per_turn":
            A = [[0.0] * len(r) for r in R]
            for t in range(max(map(len, R))):
                members = [j for j, r in enumerate(R) if len(r) > t]
                for j, a in zip(members, python_center([R[j][t] for j in members], 1e-6, False)):
                    A[j][t] = a
            out.append(A)
        else:
            pooled = python_center([x for r in R for x in r], 1e-6, baseline == "leave_one_out")
            A, k = [], 0
            for r in R:
                A.append(pooled[k : k + len(r)])
                k += len(r)
            out.append(A)
    return out


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=65_536)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=16)
    parser.add_argument("--gamma", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--python-repeats", type=int, default=3)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, args.max_turns + 1, args.trajectories)
    rewards = rng.random(int(lengths.sum()))
    group_sizes = np.full(args.trajectories // args.group_size, args.group_size)
    n_turns = rewards.size
    template = RaggedBatch(rewards, lengths, group_sizes)
    groups = template.split(rewards)

    print(f"{args.trajectories} trajectories, {n_turns} turns, groups of {args.group_size}, gamma {args.gamma}")
    print(f"{'aggregation':<11} {'baseline':<14} {'batched ms':>10} {'python ms':>10} {'ratio':>7} {'Mturns/s':>9}")
    for aggregation in ("sum", "max"):
        for baseline in BASELINES:
            estimator = Stepwise(gamma=args.gamma, aggregation=aggregation, baseline=baseline)

            def batched(estimator: Stepwise = estimator) -> np.ndarray:
                # A fresh batch each time: deriving its index arrays is part of the cost.
                return estimator.batched(RaggedBatch(rewards, lengths, group_sizes))

            def plain(aggregation: str = aggregation, baseline: str = baseline) -> list:
                return python_stepwise(groups, args.gamma, aggregation, baseline)

            check = template.split(batched())
            assert np.allclose(
                [x for g in check for t in g for x in t], [x for g in plain() for t in g for x in t], atol=1e-9
            ), "batched and plain Python disagree"
            fast = median_seconds(batched, args.repeats)
            slow = median_seconds(plain, args.python_repeats)
            print(
                f"{aggregation:<11} {baseline:<14} {fast * 1e3:>10.2f} {slow * 1e3:>10.1f} "
                f"{slow / fast:>6.1f}x {n_turns / fast / 1e6:>9.1f}"
            )


if __name__ == "__main__":
    main()
