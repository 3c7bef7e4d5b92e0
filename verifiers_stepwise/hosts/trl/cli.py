"""``python -m verifiers_stepwise.hosts.trl``: train a policy on a verifiers env with TRL's GRPO.

    python -m verifiers_stepwise.hosts.trl --env-id stepwise-refine --estimator stepwise \\
        --env-args '{"max_turns": 3}' --options '{"gamma": 1.0}' \\
        --max_steps 3 --per_device_train_batch_size 4 --num_generations 4 --max_completion_length 24

A blueprint and ``main``, with TRL's conventions (``TrlParser`` over ``HostArguments``, TRL's
``GRPOConfig`` and ``ModelConfig``): ``blueprint(argv)`` checks every name and option before
anything loads, so a typo is one line (``error: ...``, exit status 1); ``main(argv)`` then loads
the model, trains, saves and draws the reward curve. The flags and the host's defaults for TRL's
are in docs/trl.md ("Install and train").
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from verifiers.v1.utils.generic import deep_merge

from verifiers_stepwise.analysis.flags import options_json
from verifiers_stepwise.envs.bundles import resolve_env
from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import UnknownEstimator, get_estimator
from verifiers_stepwise.extras import requires
from verifiers_stepwise.hosts.trl.inference.model import DEFAULT_MODEL
from verifiers_stepwise.traces.turns import Reading

__all__ = ["HostArguments", "Run", "blueprint", "main"]


@dataclass
class HostArguments:
    env_id: str = field(default="stepwise-refine", metadata={"help": "verifiers env id (taskset id) to train on"})
    env_args: str = field(default="{}", metadata={"help": "JSON: the env's config fields, e.g. '{\"max_turns\": 3}'"})
    estimator: str | None = field(
        default=None,
        metadata={"help": "registered advantage estimator name (default: the one for the env's kind of credit)"},
    )
    options: str = field(
        default="{}", metadata={"help": "JSON: the estimator's config fields, e.g. '{\"gamma\": 0.9}'"}
    )
    reading: str = field(
        default="rewards",
        metadata={"help": "how trace.info['turn_rewards'] is read: 'rewards' or 'scores' (by differences)"},
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


@dataclass(frozen=True)
class Run:
    """What a command line asks for, every name and option checked; nothing loaded yet."""

    host: HostArguments
    training: Any
    """TRL's ``GRPOConfig``."""
    model: Any
    """TRL's ``ModelConfig`` (``--dtype``, LoRA)."""
    env: dict[str, Any]
    eval_env: dict[str, Any] | None
    estimator: Estimator | None
    """None: the default for the env's kind of credit (``traces.kinds``)."""


def blueprint(argv: Sequence[str] | None = None) -> Run:
    """The run ``argv`` asks for, with the host's defaults for TRL's flags; ConfigError naming
    the flag for an unknown env id, estimator, option, reading or format, or bad JSON."""
    with requires("verifiers_stepwise.hosts.trl", "torch", "trl", extra="trl"):
        import torch
        from trl import GRPOConfig, ModelConfig, TrlParser

    parser = TrlParser((HostArguments, GRPOConfig, ModelConfig))  # type: ignore[arg-type]  # dataclasses, as HfArgumentParser takes
    # The host's defaults for TRL's flags (explicit flags win; docs/trl.md says why each): a reward
    # curve point a step, LoRA without dropout (the sampler generates with the adapters merged, so
    # TRL's 0.05 would train logprobs of a policy that did not sample), no gradient checkpointing,
    # checkpoints without the optimizer state, and without a GPU no bf16, which transformers
    # refuses on a CPU unless told use_cpu.
    parser.set_defaults(logging_steps=1, lora_dropout=0.0, gradient_checkpointing=False, save_only_model=True)
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)
    with warnings.catch_warnings():
        # TRL 1.16 defaults gradient_checkpointing, which transformers 5 calls a deprecated alias of
        # activation_checkpointing: it warns at every parse, whatever the command line says.
        warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)
        host, training, model = parser.parse_args_and_config(args=list(argv) if argv is not None else None)
    # Laid over table by table, as verifiers lays a config over its defaults: ``--env-args '{"taskset":
    # {"shots": 2}}'`` sets one field of the taskset and keeps its ``id``.
    env = deep_merge({"taskset": {"id": host.env_id}}, options_json(host.env_args, "--env-args"))
    eval_env = deep_merge(env, options_json(host.eval_env_args, "--eval-env-args")) if host.eval_env_args else None
    if eval_env is None and training.eval_strategy != "no":
        raise ConfigError(
            f"--eval_strategy {training.eval_strategy.value}: name the held-out tasks with --eval-env-args"
        )
    if host.reading not in get_args(Reading):
        raise ConfigError(f"--reading {host.reading!r}: choose one of {list(get_args(Reading))}")
    from verifiers_stepwise.hosts.trl.inference.renderer import renderer_config

    try:
        renderer_config(host.format)
    except ConfigError as error:
        raise ConfigError(f"--format: {error}") from None
    options = options_json(host.options, "--options")
    try:  # neither named nor configured: the env's kind of credit decides; --options alone: stepwise
        estimator = (
            None if host.estimator is None and not options else get_estimator(host.estimator or "stepwise", **options)
        )
    except UnknownEstimator as error:
        raise ConfigError(f"--estimator: {error}") from None
    except ConfigError as error:
        raise ConfigError(f"--options: {error}") from None
    resolve_env(env, f"--env-id {host.env_id!r} with --env-args")
    if eval_env is not None:
        resolve_env(eval_env, "--eval-env-args")
    return Run(host, training, model, env, eval_env, estimator)


def main(argv: Sequence[str] | None = None) -> Any:
    """Check the command line (``blueprint``), then load the model, train, save and plot; returns
    the trainer. What the command line gets wrong ends the command as one line, ``error: ...``."""
    try:
        run = blueprint(argv)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    from trl import get_peft_config

    from verifiers_stepwise.analysis.plot import plot_reward_curve
    from verifiers_stepwise.hosts.trl.inference.model import load_model
    from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

    _warn_if_bfloat16_is_slow(run.model.dtype)
    model, tokenizer = load_model(run.host.model, run.model.dtype)  # --dtype, as TRL spells it
    trainer = StepwiseGRPOTrainer(
        model,
        run.env,
        args=run.training,
        processing_class=tokenizer,
        estimator=run.estimator,
        reading=run.host.reading,  # type: ignore[arg-type]  # checked by blueprint
        format=run.host.format,
        eval_env=run.eval_env,
        peft_config=get_peft_config(run.model),  # --use_peft --lora_r ... as in TRL's scripts; None without
    )
    try:
        trainer.train()
    finally:
        trainer.close()
    output = Path(run.training.output_dir)
    trainer.save_model(str(output))
    trainer.create_model_card()
    (output / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    title = f"{run.host.env_id} · {trainer.estimator.name or type(trainer.estimator).__name__}"
    print(f"reward curve: {plot_reward_curve(trainer.state.log_history, output / 'reward_curve.png', title)}")
    return trainer


def _warn_if_bfloat16_is_slow(dtype: str | None) -> None:
    import torch

    from verifiers_stepwise.hosts.trl.inference.model import bfloat16_slowdown

    if dtype == "bfloat16" and not torch.cuda.is_available() and (slowdown := bfloat16_slowdown()) > 4:
        print(
            f"warning: --dtype bfloat16 on this CPU runs a matmul {slowdown:.0f}x slower than float32 "
            "(no bfloat16 instructions: AVX512-BF16 or AMX); --dtype float32 trains several times faster here",
            file=sys.stderr,
        )
