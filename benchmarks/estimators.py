"""Batched returns + advantages (numpy core) vs plain Python and the previous compiled kernels.

Every aggregation and baseline of ``stepwise`` at gamma 0.9 with std scaling, the default
estimator as shipped (``stepwise``: absorbing, sum, gamma 1, mean-only) and ``gigpo`` at gamma
0.9 with std scaling (each turn's anchor state one of 8, drawn uniformly, so states recur
within a group), one core, on two batches (seed 0), timing ``batched`` on a freshly built
``RaggedBatch`` (validation and the output allocation included): the median wall time, the
fastest, and the median CPU time, which on a shared machine is the honest "time on one core"
(wall time there includes waiting for a core).

1. the budget batch of issue #13: 1,024 groups x 16 trajectories x 1-8 turns, against the
   budget of 20 ms;
2. the batch the compiled (numba) kernels were published at: 65,536 trajectories x 1-16 turns
   in groups of 16, against those published numbers (``COMPILED_MS``, wall time on an idle
   machine, another run; the kernels had no absorbing baseline and no gigpo).

Both against the plain-Python loop in the same run (CPU time).

    python benchmarks/estimators.py [--repeats 15] [--python-repeats 3] [--sizes budget compiled]

The plain-Python baseline is the fastest obvious loop (backward recursion, sum/len), not the
O(T^2) formula-by-formula reference the tests use, so the ratio is not inflated. The first call
in a fresh process (imports included) is measured by ``benchmarks/import_time.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

os.environ.setdefault("OMP_NUM_THREADS", "1")  # "one core": no threaded kernels
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from verifiers_stepwise import Estimator, RaggedBatch
from verifiers_stepwise.estimators.gigpo import GiGPO
from verifiers_stepwise.estimators.stepwise import Stepwise  # noqa: E402

BASELINES = ("pooled", "per_turn", "absorbing", "leave_one_out", "trajectory")
BUDGET_MS = 20.0
ANCHOR_STATES = 8  # gigpo's batch: each turn acted from one of 8 states, so states recur in a group

# The numba kernels this numpy core replaced, as published (README and CHANGELOG before the
# numpy rewrite; numba 0.68.1, same 2-core AMD EPYC machine, idle): 65,536 trajectories of
# 1-16 turns in groups of 16, gamma 0.9, seed 0 -- the "compiled" batch below. Another run's
# numbers: compare them as such, not as a same-run ratio.
COMPILED_MS = {
    ("sum", "pooled"): 4.00,
    ("sum", "per_turn"): 19.3,
    ("sum", "leave_one_out"): 4.00,
    ("sum", "trajectory"): 4.12,
    ("max", "pooled"): 4.05,
    ("max", "per_turn"): 18.7,
    ("max", "leave_one_out"): 3.98,
    ("max", "trajectory"): 4.07,
}


@dataclass(frozen=True)
class Size:
    trajectories: int
    group_size: int
    max_turns: int


SIZES = {"budget": Size(1_024 * 16, 16, 8), "compiled": Size(65_536, 16, 16)}


def python_returns(rewards: list[float], gamma: float, aggregation: str) -> list[float]:
    out = rewards[:]
    for t in range(len(rewards) - 2, -1, -1):
        later = gamma * out[t + 1]
        out[t] = rewards[t] + later if aggregation == "sum" else max(rewards[t], later)
    return out


def python_center(xs: list[float], scale: str, loo: bool = False) -> list[float]:
    n = len(xs)
    mean = sum(xs) / n
    factor = n / (n - 1) if loo and n > 1 else 1.0
    if scale == "none":
        return [factor * (x - mean) for x in xs]
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)
    return [0.0 if std == 0 else factor * (x - mean) / (std + 1e-6) for x in xs]


def python_stepwise(
    groups: list[list[list[float]]], gamma: float, aggregation: str, baseline: str, scale: str = "std"
) -> list:
    out = []
    for group in groups:
        R = [python_returns(t, gamma, aggregation) for t in group]
        if baseline == "trajectory":
            A = python_center([r[0] for r in R], scale)
            out.append([[a] * len(r) for a, r in zip(A, R)])
        elif baseline in ("per_turn", "absorbing"):
            A = [[0.0] * len(r) for r in R]
            for t in range(max(map(len, R))):
                if baseline == "absorbing":  # every trajectory, one that stopped with 0
                    members, values = range(len(R)), [r[t] if len(r) > t else 0.0 for r in R]
                else:
                    members = [j for j, r in enumerate(R) if len(r) > t]
                    values = [R[j][t] for j in members]
                for j, a in zip(members, python_center(values, scale)):
                    if len(R[j]) > t:
                        A[j][t] = a
            out.append(A)
        else:
            pooled = python_center([x for r in R for x in r], scale, baseline == "leave_one_out")
            A, k = [], 0
            for r in R:
                A.append(pooled[k : k + len(r)])
                k += len(r)
            out.append(A)
    return out


def python_gigpo(groups: list[list[list[float]]], states: list[list[list[int]]], gamma: float) -> list:
    """GRPO's episode advantage plus the step advantage among turns of the same anchor state (ω 1)."""
    out = []
    for group, group_states in zip(groups, states):
        episode = python_center([sum(t) for t in group], "std")
        R = [python_returns(t, gamma, "sum") for t in group]
        step_groups: dict[int, list[tuple[int, int]]] = {}
        for j, row in enumerate(group_states):
            for t, state in enumerate(row):
                step_groups.setdefault(state, []).append((j, t))
        A = [[e] * len(r) for e, r in zip(episode, R)]
        for cells in step_groups.values():
            for (j, t), a in zip(cells, python_center([R[j][t] for j, t in cells], "std")):
                A[j][t] += a
        out.append(A)
    return out


@dataclass(frozen=True)
class Config:
    """One row: the estimator, its plain-Python loop, and the labels it is printed with."""

    estimator: str
    aggregation: str
    baseline: str
    batched: Estimator
    plain: Callable[[list, list], list]  # (groups, states) -> advantages, nested as groups


def configs(gamma: float) -> list[Config]:
    rows = [
        Config(
            "stepwise",
            aggregation,
            baseline,
            Stepwise(gamma=gamma, aggregation=aggregation, baseline=baseline, scale="std"),
            lambda groups, _, a=aggregation, b=baseline: python_stepwise(groups, gamma, a, b),
        )
        for aggregation in ("sum", "max")
        for baseline in BASELINES
    ]
    default = Stepwise()  # absorbing, sum, gamma 1, mean-only
    c = default.config
    rows.append(
        Config(
            "default",
            c.aggregation,
            c.baseline,
            default,
            lambda groups, _: python_stepwise(groups, c.gamma, c.aggregation, c.baseline, c.scale),
        )
    )
    rows.append(
        Config(
            "gigpo",
            "sum",
            "anchor states",
            GiGPO(gamma=gamma, scale="std"),
            lambda groups, states: python_gigpo(groups, states, gamma),
        )
    )
    return rows


def timings_ms(fn, repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU time (ms) of each of ``repeats`` calls, after one warm-up call. On a shared
    machine wall time includes waiting for a core; CPU time is the time on one core."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        start, used = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - used) * 1e3)
    return wall, cpu


def fresh_batched(
    estimator: Estimator, rewards: np.ndarray, lengths: np.ndarray, group_sizes: np.ndarray, states: np.ndarray
):
    """A fresh batch each time: validating it and deriving its index arrays is part of the cost."""
    return estimator.batched(RaggedBatch(rewards, lengths, group_sizes, states))


def run(name: str, size: Size, gamma: float, repeats: int, python_repeats: int) -> list[dict]:
    """Time every configuration on one batch; print a table and return its rows."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, size.max_turns + 1, size.trajectories)
    rewards = rng.random(int(lengths.sum()))
    states = rng.integers(0, ANCHOR_STATES, rewards.size)  # read by gigpo only
    group_sizes = np.full(size.trajectories // size.group_size, size.group_size)
    template = RaggedBatch(rewards, lengths, group_sizes)
    groups = template.split(rewards)
    group_states = template.split(states)
    print(
        f"\n{name}: {group_sizes.size} groups x {size.group_size} trajectories x 1-{size.max_turns} turns "
        f"= {rewards.size} turns, gamma {gamma}"
    )
    against = f"budget {BUDGET_MS:.0f} ms (cpu)" if name == "budget" else "compiled ms, cpu ratio"
    print(
        f"{'estimator':<9} {'aggregation':<11} {'baseline':<14} {'wall ms':>8} {'(min)':>7} {'cpu ms':>7}  "
        f"{against:<22} "
        f"{'python ms':>9} {'vs py':>6}"
    )
    rows = []
    for config in configs(gamma):
        batched = partial(fresh_batched, config.batched, rewards, lengths, group_sizes, states)
        plain = partial(config.plain, groups, group_states)
        check = template.split(batched())
        assert np.allclose(
            [x for g in check for t in g for x in t], [x for g in plain() for t in g for x in t], atol=1e-9
        ), f"batched and plain Python disagree: {config.estimator} {config.aggregation} {config.baseline}"
        wall, cpu = timings_ms(batched, repeats)
        fast, best, on_core = statistics.median(wall), min(wall), statistics.median(cpu)
        slow = statistics.median(timings_ms(plain, python_repeats)[1])
        compiled = COMPILED_MS.get((config.aggregation, config.baseline)) if config.estimator == "stepwise" else None
        if name == "budget":
            verdict = "within" if on_core <= BUDGET_MS else "OVER"
        elif compiled is None:
            verdict = "(none published)"
        else:
            verdict = f"{compiled:6.2f}  {on_core / compiled:4.1f}x"
        print(
            f"{config.estimator:<9} {config.aggregation:<11} {config.baseline:<14} {fast:>8.2f} {best:>7.2f} "
            f"{on_core:>7.2f}  {verdict:<22} {slow:>9.1f} {slow / on_core:>5.0f}x"
        )
        rows.append(
            {
                "estimator": config.estimator,
                "aggregation": config.aggregation,
                "baseline": config.baseline,
                "numpy_ms": on_core,
                "wall_ms": fast,
                "python_ms": slow,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["budget", "compiled"])
    parser.add_argument("--trajectories", type=int, help="override the trajectory count of every size (smoke runs)")
    parser.add_argument("--gamma", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--python-repeats", type=int, default=3)
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"numpy core, one core (load average {load}); medians of wall and CPU time, fastest wall time")
    print(f"budget: CPU time <= {BUDGET_MS:.0f} ms; compiled: the numba kernels' published ms, numpy CPU / compiled")
    print("vs py: plain Python / numpy, CPU time, same run")
    for name in args.sizes:
        size = SIZES[name]
        if args.trajectories:
            size = Size(args.trajectories, size.group_size, size.max_turns)
        run(name, size, args.gamma, args.repeats, args.python_repeats)


if __name__ == "__main__":
    main()
