"""Learning benchmark: does stepwise credit make a policy learn faster, and when does it hurt?

    python benchmarks/learning.py --out benchmarks/results/learning

Trains a tabular softmax policy by per-turn policy gradient on tasks with a known optimum
(``credit_lab/tasks.py``): a refinement task where every turn is scored (Kevin's setting), the
same task rewarded only on the last turn, a single-turn control, DAPO-style refinement (±1 per
attempt, stop when right), a task where the policy chooses when to submit, and one whose best
path first lowers the score. Every estimator is picked by registered name (``--method
NAME:key=value,...``, repeatable; default: ``credit_lab.methods.DEFAULT_METHODS``, grpo, the old
and new ``stepwise`` defaults and the other baselines, turn_credit) and trained from the same
seeds. Writes ``results.md`` (tables), ``results.json`` (per-seed numbers and mean curves) and
``learning_curves.png`` to ``--out``.

On the single-turn control the advantages of every method are compared with the first
method's on sampled batches; methods whose advantages are bit-for-bit identical must produce
bit-for-bit identical learning curves, and the run fails if they do not.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from credit_lab.control import compare_advantages
from credit_lab.methods import DEFAULT_METHODS, Method
from credit_lab.report import (
    COLUMNS,
    identical_curves,
    markdown_table,
    plot_curves,
    summarize,
    wrong_sign_table,
)
from credit_lab.tasks import TASKS, Task
from credit_lab.train import Run, TrainConfig, train


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for results.md/json and the plot")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument(
        "--method",
        action="append",
        type=Method.parse,
        dest="methods",
        help="estimator as NAME or NAME:key=value,... (repeatable; first one is the reference)",
    )
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 for every method")
    parser.add_argument("--steps", type=int, default=300, help="policy updates per run")
    parser.add_argument("--groups", type=int, default=8, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam learning rate")
    parser.add_argument("--target", type=float, default=0.9, help="success rate to reach")
    args = parser.parse_args(argv)
    args.methods = args.methods or list(DEFAULT_METHODS)
    labels = [m.label for m in args.methods]
    if len(set(labels)) != len(labels):
        parser.error(f"--method given twice: {labels}")
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    return args


def control_check(task: Task, runs: dict[str, list[Run]], methods: list[Method], config: TrainConfig) -> list[str]:
    """Single-turn control: compare advantages with the reference; identical ⇒ identical curves."""
    reference = methods[0]
    lines = []
    for method in methods[1:]:
        agreement = compare_advantages(task, reference.build(), method.build(), config)
        gap = max(float(np.abs(a.success - b.success).max()) for a, b in zip(runs[reference.label], runs[method.label]))
        if agreement.identical:
            if gap != 0.0:
                raise AssertionError(
                    f"{task.name}: {method.label} gives the same advantages as {reference.label} "
                    f"but its learning curve differs by up to {gap}"
                )
            lines.append(f"- `{method.label}`: advantages identical to `{reference.label}`; curves identical.")
        elif agreement.scale is not None:
            lines.append(
                f"- `{method.label}`: advantages = {agreement.scale:.6g} × `{reference.label}`'s; "
                f"largest success-rate gap between the curves {gap:.2e}."
            )
        else:
            lines.append(
                f"- `{method.label}`: advantages differ from `{reference.label}`'s; largest success-rate gap {gap:.2e}."
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # tensors are tiny; threads only add overhead on a shared machine
    args.out.mkdir(parents=True, exist_ok=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    reference = args.methods[0].label

    sections, titles, curves, data = [], {}, {}, {}
    for task_name in args.tasks:
        task = TASKS[task_name]()
        titles[task.name] = f"{task.name}\n{task.summary}"
        runs: dict[str, list[Run]] = {}
        for method in args.methods:
            t0 = time.perf_counter()
            runs[method.label] = [
                train(task, method.build(), TrainConfig(args.steps, args.groups, args.group_size, args.lr, seed))
                for seed in range(args.seeds)
            ]
            print(f"{task.name:12s} {method.label:58s} {time.perf_counter() - t0:6.1f}s", flush=True)
        rows = [summarize(label, r, args.target) for label, r in runs.items()]
        section = [f"## {task.name}: {task.summary}", "", markdown_table(rows, args.target, reference), ""]
        for group in identical_curves(runs):
            section += [
                f"Bit-for-bit identical learning curves on every seed: {', '.join(f'`{m}`' for m in group)}.",
                "",
            ]
        if task.turns > 1:
            section += ["Wrong-sign share by turn (learning phase):", "", wrong_sign_table(rows), ""]
        else:
            config = TrainConfig(args.steps, args.groups, args.group_size, args.lr, seed=0)
            section += ["Control check (advantages on 16 batches from the uniform policy):", ""]
            section += control_check(task, runs, args.methods, config) + [""]
        sections.append("\n".join(section))
        curves[task.name] = {m.short: runs[m.label] for m in args.methods}
        data[task.name] = {
            "summary": task.summary,
            "rows": [row.as_dict() for row in rows],
            "mean_success_curve": {
                label: np.round(np.mean([run.success for run in r], axis=0), 4).tolist() for label, r in runs.items()
            },
        }

    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    n_runs = len(args.tasks) * len(args.methods) * args.seeds
    episodes = args.steps * args.groups * args.group_size
    command = "python benchmarks/learning.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = [
        "# Learning benchmark: per-turn credit against trajectory credit",
        "",
        (
            f"Made by `{command}` "
            f"({n_runs} runs, {wall:.0f} s wall, {cpu:.0f} s CPU, one thread; "
            f"verifiers-stepwise {version('verifiers-stepwise')}, torch {torch.__version__})."
        ),
        "",
        (
            f"Each run trains a tabular softmax policy from uniform for {args.steps} steps of "
            f"{args.groups} prompts × {args.group_size} rollouts ({episodes:,} episodes), one Adam "
            f"step (lr {args.lr}) per batch on −mean over turns of A_t · log π(a_t | s_t), each turn "
            f"its own sample. Seeds 0–{args.seeds - 1}, the same for every estimator. Success rates "
            f"are exact (dynamic programming over the task), not sampled. Target: {args.target:.0%} "
            f"success; `× {reference}` divides the median episodes by `{reference}`'s."
        ),
        "",
    ]
    footer = ["## Columns", "", COLUMNS]
    (args.out / "results.md").write_text("\n".join(header + sections + footer))
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "methods"}
    settings["methods"] = [m.label for m in args.methods]
    (args.out / "results.json").write_text(
        json.dumps(
            {"settings": settings, "wall_seconds": wall, "cpu_seconds": cpu, "tasks": data},
            indent=1,
            allow_nan=False,
        )
    )
    plot_curves(curves, titles, args.target, args.out / "learning_curves.png")
    print(
        f"{n_runs} runs in {wall:.1f} s wall ({cpu:.1f} s CPU); wrote {args.out}/results.md, "
        f"results.json, learning_curves.png"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
