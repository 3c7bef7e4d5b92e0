"""Learning with a real model: TRL's GRPO with ``grpo`` vs the default ``stepwise`` credit.

    python benchmarks/trl_learning.py --out benchmarks/results/trl_learning            # full run
    python benchmarks/trl_learning.py --out /tmp/trl_small --steps 2 --seeds 0 --tasks 1 # reduced

Policy: Gemma 3 270M from PyPI (``hosts.trl.model``; ``--model`` for another local model),
trained by ``StepwiseGRPOTrainer`` on ``stepwise-refine`` over this module's echo taskset
(env id ``trl-learning``): "Say the word X." — a turn scores 1 when its reply contains X,
else 0; an unsolved turn gets the refine env's feedback and another try, up to ``--max-turns``.
A base model that tends to echo its prompt solves it sometimes, so groups carry signal: at
temperature 1.0 (TRL's default, this script's too) 0–50 % of episodes at the start; at 0.7 it
solves 75–100 % untrained and the task saturates within two steps.
Each estimator starts from the same weights with the same seeds and budget; per step we record
the episode reward (mean), success (final turn solved) and wall time; the spread is over seeds.
Writes ``results.md``, ``results.json`` and ``curves.png`` to ``--out``.

Sizing for 60 minutes of this 2-core CPU: 4 episodes per step (1 task × 4 generations) × 2
turns × 8 tokens. Measured here while the machine was shared (load 7–18): 26–108 s per step,
about 50 s on average, so 2 estimators × 3 seeds × 10 steps ≈ 60 × 50 s ≈ 50 min plus 6 model
loads from the cache (~12 s each); on an idle machine (the issue measured ~10 tokens/s
unbatched) it should take well under that.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import verifiers.v1 as vf

__all__ = ["EchoTaskset"]

WORDS = ("apple", "river", "green", "seven", "house", "cloud", "tiger", "piano")


class EchoData(vf.TaskData):
    word: str


class EchoTask(vf.Task[EchoData]):
    @vf.reward
    async def said_it(self, task: EchoData, trace: vf.Trace) -> float:
        return float(re.search(rf"\b{task.word}\b", (trace.last_reply or "").lower()) is not None)


class EchoTaskset(vf.Taskset[EchoTask]):
    def load(self):
        for i, word in enumerate(WORDS):
            yield EchoTask(EchoData(id=f"echo-{i}", prompt=f"Say the word {word}.", word=word))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--estimators", nargs="+", default=["grpo", "stepwise"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=1, help="tasks per step (each with --generations episodes)")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens per model call")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (TRL's loss uses the same)"
    )
    parser.add_argument("--model", default=None, help="local transformers model (default: the PyPI Gemma)")
    return parser.parse_args(argv)


def run_one(args: argparse.Namespace, estimator: str, seed: int) -> dict:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from verifiers_stepwise.hosts.trl.model import DEFAULT_MODEL, load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    model, tokenizer = load_model(args.model or DEFAULT_MODEL)
    config = GRPOConfig(
        output_dir=str(args.out / f"{estimator}-{seed}"),
        per_device_train_batch_size=args.tasks * args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        max_steps=args.steps,
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
    env = {"id": "stepwise-refine", "taskset": {"id": "trl-learning"}, "max_turns": args.max_turns}
    steps: list[dict] = []

    class Record(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            samples = trainer.last_batch.samples
            rewards = [s.reward for s in samples if s.reward is not None]
            steps.append(
                {
                    "reward": sum(rewards) / len(rewards) if rewards else float("nan"),
                    "success": sum((s.reward or 0.0) >= 1.0 for s in samples) / len(samples),
                    "seconds": time.perf_counter() - self.start,
                }
            )
            print(f"  {estimator} seed {seed} step {len(steps)}: {steps[-1]}", flush=True)

    trainer = StepwiseGRPOTrainer(model, env, args=config, processing_class=tokenizer, estimator=estimator)
    trainer.add_callback(Record())
    try:
        trainer.train()
    finally:
        trainer.close()
    return {"estimator": estimator, "seed": seed, "steps": steps}


def summarize(runs: list[dict]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per estimator and metric: (mean, std over seeds) per step."""
    import numpy as np

    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for estimator in dict.fromkeys(r["estimator"] for r in runs):
        mine = [r["steps"] for r in runs if r["estimator"] == estimator]
        out[estimator] = {}
        for metric in ("reward", "success", "seconds"):
            values = np.array([[step[metric] for step in steps] for steps in mine], dtype=float)
            out[estimator][metric] = list(zip(np.nanmean(values, 0).tolist(), np.nanstd(values, 0).tolist()))
    return out


def write(args: argparse.Namespace, runs: list[dict], wall: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/trl_learning.py " + " ".join(sys.argv[1:])
    (args.out / "results.json").write_text(
        json.dumps(
            {"command": command, "args": {k: str(v) for k, v in vars(args).items()}, "wall_s": wall, "runs": runs},
            indent=1,
        )
    )
    lines = [
        f"`{command}` — {len(args.seeds)} seed(s), {args.steps} steps, {args.tasks * args.generations} episodes "
        f"per step, wall {wall:.0f} s",
        "",
        "| estimator | step | reward (mean ± std) | success (mean ± std) | s/step |",
        "|---|---|---|---|---|",
    ]
    for estimator, metrics in summary.items():
        for step, ((r, rs), (s, ss), (t, _)) in enumerate(
            zip(metrics["reward"], metrics["success"], metrics["seconds"]), start=1
        ):
            lines.append(f"| {estimator} | {step} | {r:.3f} ± {rs:.3f} | {s:.3f} ± {ss:.3f} | {t:.0f} |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for estimator, metrics in summary.items():
        for axis, metric in zip(axes, ("reward", "success")):
            mean = [m for m, _ in metrics[metric]]
            std = [s for _, s in metrics[metric]]
            x = range(1, len(mean) + 1)
            axis.plot(x, mean, marker="o", label=estimator)
            axis.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
            axis.set_xlabel("step")
            axis.set_title(metric)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(args.out / "curves.png", dpi=120)
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # env id trl-learning is this module
    start = time.perf_counter()
    runs = [run_one(args, estimator, seed) for seed in args.seeds for estimator in args.estimators]
    write(args, runs, time.perf_counter() - start)


if __name__ == "__main__":
    main()
