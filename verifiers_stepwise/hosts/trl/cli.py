"""``python -m verifiers_stepwise.hosts.trl``: train a policy on a verifiers env with TRL's GRPO.

    python -m verifiers_stepwise.hosts.trl --env-id stepwise-refine --estimator stepwise \\
        --env-args '{"max_turns": 3}' --options '{"gamma": 1.0}' \\
        --max_steps 3 --per_device_train_batch_size 4 --num_generations 4 --max_completion_length 24

TRL's conventions: ``TrlParser`` over this module's ``HostArguments`` and TRL's own
``GRPOConfig`` (every GRPOConfig field is a flag; ``--config file.yaml`` works as in TRL's
scripts). ``--env-args`` is the env's ``[env]`` block as JSON (fields of the env's config, e.g.
``max_turns``, ``threshold``; ``taskset`` fields under ``"taskset"``), ``--options`` the
estimator's config as JSON, ``--eval-env-args`` what TRL's evaluation (``--eval_strategy``)
changes in that config, e.g. ``'{"taskset": {"split": "test"}}'`` for held-out tasks. With no
``--model`` the default real LM is loaded (``hosts.trl.model``). A GPU is used when present
(TRL's defaults, bf16 included); without one the run defaults to ``--use_cpu true --bf16
false``; ``--logging_steps`` defaults to 1, ``--lora_dropout`` to 0 and
``--gradient_checkpointing`` to false (see ``main``).
TRL shows its progress bar and saves checkpoints under ``--output_dir`` as it always does; at
the end the model is saved there and the reward curve is drawn to
``<output_dir>/reward_curve.png`` (the per-step log to ``log_history.json``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.extras import requires
from verifiers_stepwise.hosts import options_json
from verifiers_stepwise.hosts.trl.model import DEFAULT_MODEL

__all__ = ["HostArguments", "main", "plot_rewards"]


@dataclass
class HostArguments:
    env_id: str = field(default="stepwise-refine", metadata={"help": "verifiers env id (taskset id) to train on"})
    env_args: str = field(default="{}", metadata={"help": "JSON: the env's config fields, e.g. '{\"max_turns\": 3}'"})
    estimator: str = field(default="stepwise", metadata={"help": "registered advantage estimator name"})
    options: str = field(
        default="{}", metadata={"help": "JSON: the estimator's config fields, e.g. '{\"gamma\": 0.9}'"}
    )
    format: str = field(
        default="text",
        metadata={
            "help": "conversation tokens: 'text' (a plain document, for base models) or 'turns' (Gemma's chat turns)"
        },
    )
    eval_env_args: str = field(
        default="",
        metadata={
            "help": "JSON laid over --env-args for TRL's evaluation (--eval_strategy), e.g. "
            '\'{"taskset": {"split": "test"}}\''
        },
    )
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={"help": f"a local transformers model; default {DEFAULT_MODEL!r}, the Gemma 3 270M GGUF from PyPI"},
    )


def main(argv: Sequence[str] | None = None) -> Any:
    """Parse, train, save, plot; returns the trainer."""
    with requires("verifiers_stepwise.hosts.trl", "torch", "trl", extra="trl"):
        import torch
        from trl import GRPOConfig, ModelConfig, TrlParser, get_peft_config

    from verifiers_stepwise.hosts.trl.model import bfloat16_slowdown, load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    parser = TrlParser((HostArguments, GRPOConfig, ModelConfig))  # type: ignore[arg-type]  # dataclasses, as HfArgumentParser takes
    if not torch.cuda.is_available():
        # TRL defaults to bf16, which transformers refuses without an accelerator unless told
        # use_cpu; explicit flags still win.
        parser.set_defaults(use_cpu=True, bf16=False)
    parser.set_defaults(logging_steps=1)  # one point per step on the reward curve (TRL: 10)
    # LoRA without dropout: the sampler generates with the adapters merged (no dropout), so with
    # TRL's 0.05 the trained logprobs would not be those of the policy that sampled (TRL: 0.05).
    # No gradient checkpointing: a 270M LoRA run fits without it, and it recomputes every
    # forward (TRL: on).
    parser.set_defaults(lora_dropout=0.0, gradient_checkpointing=False)
    # A checkpoint holds the weights (a LoRA run's: the adapter) but not the optimizer state,
    # which is twice a full model's size (3.1 GB for Gemma); --save_only_model false keeps it.
    parser.set_defaults(save_only_model=True)
    host, training, model_args = parser.parse_args_and_config(args=list(argv) if argv is not None else None)
    env = _merged({"taskset": {"id": host.env_id}}, _json(host.env_args, "--env-args"))
    eval_env = _merged(env, _json(host.eval_env_args, "--eval-env-args")) if host.eval_env_args else None
    if eval_env is None and training.eval_strategy != "no":
        raise SystemExit(
            f"--eval_strategy {training.eval_strategy.value}: name the held-out tasks with --eval-env-args"
        )
    options = _json(host.options, "--options")
    if model_args.dtype == "bfloat16" and not torch.cuda.is_available() and (slowdown := bfloat16_slowdown()) > 4:
        print(
            f"warning: --dtype bfloat16 on this CPU runs a matmul {slowdown:.0f}x slower than float32 "
            "(no bfloat16 instructions: AVX512-BF16 or AMX); --dtype float32 trains several times faster here",
            file=sys.stderr,
        )
    model, tokenizer = load_model(host.model, model_args.dtype)  # --dtype, as TRL spells it
    trainer = StepwiseGRPOTrainer(
        model,
        env,
        args=training,
        processing_class=tokenizer,
        estimator=host.estimator,
        options=options,
        format=host.format,
        eval_env=eval_env,
        peft_config=get_peft_config(model_args),  # --use_peft --lora_r ... as in TRL's scripts; None without
    )
    try:
        trainer.train()
    finally:
        trainer.close()
    output = Path(training.output_dir)
    trainer.save_model(str(output))
    trainer.create_model_card()
    (output / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    plot = plot_rewards(
        trainer.state.log_history, output / "reward_curve.png", title=f"{host.env_id} · {host.estimator}"
    )
    print(f"reward curve: {plot}")
    return trainer


SMOOTHING = 5
"""Steps in the reward plot's trailing mean."""


def plot_rewards(log_history: Sequence[dict], path: Path, title: str = "") -> Path:
    """Episode reward and per-turn reward (mean per step) against the training step, and the
    evaluation's episode reward where TRL evaluated (at step 0 with ``--eval_on_start true``: the
    untrained model)."""
    with requires("the TRL host's reward plot", "matplotlib", extra="trl"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

    steps = [entry for entry in log_history if "reward" in entry]
    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    for key, label in (("reward", "episode reward"), ("turn_rewards/mean", "turn reward (mean)")):
        points = [(entry["step"], entry[key]) for entry in steps if key in entry]
        if points:
            (line,) = axis.plot(*zip(*points), marker="o", markersize=3, alpha=0.45, label=label)
            # A step's few episodes make a noisy point; the trailing mean shows the trend.
            x, y = zip(*points)
            trailing = [sum(y[max(0, k - SMOOTHING + 1) : k + 1]) / len(y[max(0, k - SMOOTHING + 1) : k + 1])
                        for k in range(len(y))]  # fmt: skip
            axis.plot(x, trailing, color=line.get_color(), label=f"{label}, mean of last {SMOOTHING} steps")
    held_out = [(entry["step"], entry["eval_reward"]) for entry in log_history if "eval_reward" in entry]
    if held_out:
        axis.plot(*zip(*held_out), color="black", marker="s", linestyle="--", label="evaluation episode reward")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("step")
    axis.set_ylabel("reward")
    axis.set_title(title)
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8, frameon=False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _merged(base: dict, extra: dict) -> dict:
    """``base`` with ``extra`` laid over it, table by table: ``--env-args '{"taskset": {"shots":
    2}}'`` sets one field of the taskset and keeps its ``id``."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _json(text: str, flag: str) -> dict:
    try:
        return options_json(text, flag)
    except ConfigError as error:
        raise SystemExit(str(error)) from None
