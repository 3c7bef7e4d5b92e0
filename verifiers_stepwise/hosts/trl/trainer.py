"""``StepwiseGRPOTrainer``: TRL's ``GRPOTrainer`` on verifiers episodes with per-turn credit.

Per generation batch: TRL's rows → episodes (``inference.LocalInference``) → records
(``score_group``) → samples (``rollout.episode_sample``) → TRL's loss. docs/trl.md ("How it
works") draws the path, its two detours round TRL 1.16.0's seam (each marked where taken) and
the metrics logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

import verifiers.v1 as vf

from verifiers_stepwise.errors import ConfigError, HostMismatch
from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "torch", "datasets", "trl", extra="trl"):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.hosts.trl.inference import LocalInference
from verifiers_stepwise.hosts.trl.inference.endpoint import GenerateFn
from verifiers_stepwise.hosts.trl.inference.model import contiguous_output_embeddings
from verifiers_stepwise.hosts.trl.rollout import EpisodeSample, score_groups
from verifiers_stepwise.traces.kinds import estimator_for
from verifiers_stepwise.traces.turns import Reading

__all__ = ["Batch", "StepwiseGRPOTrainer", "episode_reward", "task_rows"]


@dataclass(frozen=True)
class Batch:
    """One generation batch: what the episodes gave and what TRL made of their rewards."""

    episodes: list[vf.Episode]
    """The played episodes, one per sample."""
    samples: list[EpisodeSample]
    """Each episode laid out for TRL, with its credit record (``sample.credit``)."""
    trl_advantages: torch.Tensor | None = None
    """TRL's own sequence-level advantages (batch,), computed before they are replaced."""
    advantages: torch.Tensor | None = None
    """The per-token advantages trained on (batch, completion tokens)."""


def episode_reward(prompts: Any, completions: Any, episode_reward: Sequence[float | None], **_: Any) -> list:
    """TRL reward function: the episode's trace reward, carried from ``rollout_func``."""
    return list(episode_reward)


def task_rows(tasks: Sequence[vf.Task]) -> Dataset:
    """TRL's train (or eval) dataset: one row per task, ``prompt`` (its text, for TRL's logs) and ``task_index``."""
    return Dataset.from_list([{"prompt": _prompt_text(task), "task_index": i} for i, task in enumerate(tasks)])


class StepwiseGRPOTrainer(GRPOTrainer):
    """GRPO on a verifiers env's episodes, credited per turn by a registered estimator.

    Args:
      model: a transformers causal LM (or a name TRL loads).
      env: the ``[env]`` block as ``vf-eval`` reads it, e.g. ``{"taskset": {"id": "stepwise-refine"},
        "max_turns": 3}``, or a loaded ``vf.Env``.
      args: TRL's ``GRPOConfig``. ``temperature``, ``top_p`` and ``max_completion_length`` (per model
        call) become the episodes' sampling settings.
      processing_class: the tokenizer.
      estimator, options: a registered estimator name and its config fields, or an ``Estimator``;
        None (the default): the one measured best for the env's kind of credit
        (``config.credit_kind``, ``traces.kinds``), said on stderr; ``stepwise`` if options are given.
      reading: how ``trace.info["turn_rewards"]`` is read, "rewards" or "scores" (``score_group``).
      format: how conversations become tokens, ``"text"`` or ``"turns"`` (``inference.renderer.FORMATS``).
      generate: the token endpoint's generator; default ``ModelSampler`` on the trainer's model
        (tests inject faults here).
      eval_env: the env of TRL's evaluation (``args.eval_strategy``), given like ``env``, e.g. the
        same env on a held-out split; TRL logs its episodes' mean reward as ``eval_reward``.
      kwargs: further ``GRPOTrainer`` arguments (callbacks, peft_config, ...); the datasets are the
        envs' tasks (``task_rows``), the reward is the episode's (``episode_reward``).
    """

    def __init__(
        self,
        model: Any,
        env: Mapping[str, Any] | vf.Env,
        *,
        args: GRPOConfig,
        processing_class: Any,
        estimator: str | Estimator | None = None,
        options: Mapping[str, Any] | None = None,
        reading: Reading = "rewards",
        format: str = "text",
        generate: GenerateFn | None = None,
        eval_env: Mapping[str, Any] | vf.Env | None = None,
        **kwargs: Any,
    ) -> None:
        if "train_dataset" in kwargs or "eval_dataset" in kwargs:
            raise ConfigError("StepwiseGRPOTrainer: the datasets are the envs' tasks; pass env= and eval_env=")
        self.reading = reading
        self.env = _load(env)
        if estimator is None and not options:  # the env's kind of credit decides, and says so
            estimator = estimator_for(getattr(self.env.config, "credit_kind", None))
        if estimator is None or isinstance(estimator, str):  # options alone configure stepwise
            estimator = get_estimator(estimator or "stepwise", **(options or {}))
        self.estimator = estimator
        self.tasks = list(self.env.taskset)
        self.eval_env = None if eval_env is None else _load(eval_env)
        self.eval_tasks = [] if self.eval_env is None else list(self.eval_env.taskset)
        self.format = format
        # Started before TRL wraps the model: the train client's renderer builds meanwhile.
        self.inference = LocalInference(processing_class, format)
        self.last_batch: Batch | None = None
        super().__init__(
            model=model,
            reward_funcs=[episode_reward],
            args=args,
            train_dataset=task_rows(self.tasks),
            eval_dataset=None if self.eval_env is None else task_rows(self.eval_tasks),
            processing_class=processing_class,
            rollout_func=self._rollout,
            **kwargs,
        )
        contiguous_output_embeddings(self.accelerator.unwrap_model(self.model))  # bf16 on CPU: see there
        # A reply closed by the format's stop tokens (a newline, <end_of_turn>) ended, for TRL's
        # clipped_ratio and mask_truncated_completions too (TRL only knows the model's eos ids).
        self.eos_token_ids = sorted({*self.eos_token_ids, *self.inference.stop_token_ids})
        self.inference.start(lambda: self.accelerator.unwrap_model(self.model), generate)

    # -- generation ---------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        # TRL hands rollout_func the prompts only, not these rows: play the rows' tasks here
        # (last_batch) and let rollout_func hand TRL what they gave.
        self.last_batch = played = self._play([row["task_index"] for row in inputs])
        output = super()._generate_and_score_completions(inputs)
        # TRL computed sequence-level GRPO advantages from the episode rewards (it has no hook
        # for them); the loss trains on the per-token ones laid out from the credit records.
        advantages = torch.zeros(output["completion_ids"].shape, dtype=torch.float32, device=self.accelerator.device)
        for i, sample in enumerate(played.samples):
            advantages[i, : len(sample.advantages)] = torch.tensor(sample.advantages, dtype=torch.float32)
        trl_advantages, output["advantages"] = output["advantages"], advantages
        self.last_batch = replace(played, trl_advantages=trl_advantages.detach().cpu(), advantages=advantages.cpu())
        self._log(played.samples)
        return output

    def _play(self, task_indices: list[int]) -> Batch:
        """The batch of TRL rows ``task_indices``: episodes played, credited and laid out."""
        training = self._training()
        env, tasks = (self.env, self.tasks) if training else (self.eval_env, self.eval_tasks)
        size = self.num_generations if training else self.num_generations_eval
        assert env is not None and size is not None  # GRPOTrainer checks eval_strategy has a dataset
        groups = self.run_episodes([tasks[i] for i in _group_tasks(task_indices, size)], size, env=env)
        samples = score_groups(groups, self.estimator, self.inference.pad_token_id, reading=self.reading)
        return Batch([episode for group in groups for episode in group], samples)

    def _rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        """TRL's ``rollout_func``: the fields of the batch ``_generate_and_score_completions`` played."""
        assert self.last_batch is not None and len(self.last_batch.samples) == len(prompts)
        samples = self.last_batch.samples
        return {
            "prompt_ids": [s.prompt_ids for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "logprobs": [s.logprobs for s in samples],
            "env_mask": [s.env_mask for s in samples],
            "episode_reward": [s.reward for s in samples],
        }

    def run_episodes(
        self, tasks: Sequence[vf.Task], per_task: int, env: vf.Env | None = None
    ) -> list[list[vf.Episode]]:
        """``per_task`` episodes of each task played by the current model, grouped by task.

        ``env`` (default: the training env) may be another env, e.g. a held-out split to
        evaluate on; the episodes are not credited and train nothing.
        """
        sampling = vf.SamplingConfig(
            temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_completion_length
        )
        return self.inference.play(env or self.env, tasks, per_task, sampling)

    def _training(self) -> bool:
        assert self.model is not None  # GRPOTrainer always holds its model
        return bool(self.model.training)

    # -- metrics ------------------------------------------------------------------------------

    def _log(self, samples: Sequence[EpisodeSample]) -> None:
        """The host's metrics, read from the records the loss trains on, and TRL's completion
        log's "Advantage" column: each episode's mean per-token advantage over its sampled tokens."""
        logged: Any = self._logs["advantages"]  # TRL's deque of the latest generation_batch_size floats
        kept = samples[max(0, len(samples) - len(logged)) :]  # an eval batch can be larger
        for k, sample in enumerate(kept, start=len(logged) - len(kept)):
            logged[k] = fmean([a for a, m in zip(sample.advantages, sample.env_mask) if m] or [0.0])
        metrics = self._metrics["train" if self._training() else "eval"]
        records = [s.credit for s in samples if s.credit.excluded is None]
        metrics["episodes/errored"].append(1 - len(records) / len(samples))
        for name, value in _turn_metrics(records).items():
            metrics[name].append(value)

    def create_model_card(  # type: ignore[override]  # TRL's BaseTrainer signature
        self, model_name: str | None = None, dataset_name: str | None = None, tags: Any = None
    ) -> None:
        """``<output_dir>/README.md``: what was trained on what, and a quick start that loads this folder.

        Replaces TRL's card, whose quick start loads a hub id (``None`` for a local run) and
        whose base model is a local path's ``None``.
        """
        if not self.is_world_process_zero():
            return
        assert self.model is not None  # GRPOTrainer always holds its model
        output = Path(str(self.args.output_dir))
        base = getattr(self.model.config, "_name_or_path", "") or "unknown"
        peft = hasattr(self.model, "peft_config")
        loader = "peft import AutoPeftModelForCausalLM" if peft else "transformers import AutoModelForCausalLM"
        env_id = getattr(self.env.config.taskset, "id", None) or type(self.env.taskset).__name__
        card = f"""# {model_name or output.name}

{"A LoRA adapter on" if peft else "A fine-tune of"} `{base}`, trained with TRL's `GRPOTrainer` by
verifiers-stepwise's TRL host on the verifiers env `{env_id}`, credited per turn by the estimator
`{self.estimator!r}`; conversations in the `{self.format}` format (`verifiers_stepwise.hosts.trl.inference.renderer`).

## Quick start (run in this folder)

```python
import torch
from transformers import AutoTokenizer
from {loader} as Model

model, tokenizer = Model.from_pretrained("."), AutoTokenizer.from_pretrained(".")
prompt = "Sums. A wrong answer gets a hint, then another try.\\n12 + 5 = 17\\nright.\\n31 + 4 ="
ids = tokenizer(prompt, return_tensors="pt")
out = model.generate(**ids, max_new_tokens=4, do_sample=False)
print(tokenizer.decode(out[0, ids["input_ids"].shape[1]:]))
```
"""
        output.mkdir(parents=True, exist_ok=True)
        (output / "README.md").write_text(card)

    def close(self) -> None:
        """Stop the in-process inference (its endpoint's thread holds the model) and remove its files."""
        self.inference.close()


def _turn_metrics(records: Sequence[Any]) -> dict[str, float]:
    """Per-turn metrics of the scored episodes' credit records (none when every episode errored)."""
    if not records:
        return {}
    rewards = [r for record in records for r in record.rewards]
    advantages = [a for record in records for a in record.advantages]
    metrics = {"turns/mean": fmean(len(record.rewards) for record in records)}
    if rewards:
        metrics["turn_rewards/mean"] = fmean(rewards)
    if advantages:
        metrics["turn_advantages/mean"] = fmean(advantages)
        metrics["turn_advantages/abs_mean"] = fmean(map(abs, advantages))
    for t in range(max(len(record.rewards) for record in records)):
        metrics[f"turn_rewards/turn_{t}"] = fmean(record.rewards[t] for record in records if len(record.rewards) > t)
    return metrics


def _load(env: Mapping[str, Any] | vf.Env) -> vf.Env:
    return env if isinstance(env, vf.Env) else vf.load_environment(vf.resolve_env_config(dict(env)))


def _group_tasks(task_indices: Sequence[int], size: int) -> list[int]:
    """The task of each group of ``size`` rows: TRL's ``RepeatSampler`` puts a task's rows one
    after another. Raises HostMismatch when the rows are not in that order."""
    tasks = list(task_indices[::size])
    if size < 1 or list(task_indices) != [task for task in tasks for _ in range(size)]:
        raise HostMismatch(
            f"TRL's rows {list(task_indices)} are not groups of {size} rows of one task each (num_generations); "
            "TRL's RepeatSampler changed, update verifiers_stepwise.hosts.trl.trainer"
        )
    return tasks


def _prompt_text(task: vf.Task) -> str:
    prompt = task.data.prompt
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    return "\n".join(m.content if isinstance(m.content, str) else str(m.content) for m in prompt if m.content)
