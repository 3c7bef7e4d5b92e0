"""``StepwiseGRPOTrainer``: TRL's ``GRPOTrainer`` on verifiers episodes with per-turn credit.

Per generation batch (checked against TRL 1.16.0, ``trl/trainer/grpo_trainer.py``):

    TRL samples task rows, each repeated num_generations times (one group per task)
      → rollout_func: the env runs every episode in-process; each model call goes
        interception server → verifiers TrainClient (TurnFormatRenderer) → TokenEndpoint →
        ModelSampler on the trainer's current model, so trained tokens = sampled tokens
      → score_group(group, estimator) per task: per-turn rewards → per-turn advantages on nodes
      → prompt_ids / completion_ids / logprobs / env_mask (env tokens leave the loss) + extras
    TRL computes its own sequence-level GRPO advantages from the episode rewards and all of its
    metrics; this subclass then replaces ``advantages`` with the per-token ones, shape
    (batch, completion tokens), which ``GRPOTrainer._compute_loss`` uses as they are.

Logged besides TRL's metrics: ``turns/mean``, ``turn_rewards/mean``, ``turn_rewards/turn_<t>``,
``turn_advantages/mean``, ``turn_advantages/abs_mean``, ``episodes/errored``. The latest batch
is kept on ``trainer.last_batch`` (episodes, samples and TRL's own advantages), which is how the tests
compare the two.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import verifiers.v1 as vf

from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "torch", "datasets", "trl", extra="trl"):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.hosts.trl.endpoint import GenerateFn, TokenEndpoint
from verifiers_stepwise.hosts.trl.renderer import END_OF_TURN, renderer_config
from verifiers_stepwise.hosts.trl.rollout import EpisodeSample, score_groups
from verifiers_stepwise.hosts.trl.sampling import ModelSampler

__all__ = ["Batch", "StepwiseGRPOTrainer", "episode_reward", "task_rows"]

API_KEY_VAR = "VF_STEPWISE_TRL_KEY"
"""The env var the train client reads its (unused) key from; set here so none must be exported."""


@dataclass(frozen=True)
class Batch:
    """One generation batch: what the episodes gave and what TRL made of their rewards."""

    episodes: list[vf.Episode]
    """The scored episodes, one per sample (their nodes carry the advantages)."""
    samples: list[EpisodeSample]
    trl_advantages: torch.Tensor
    """TRL's own sequence-level advantages (batch,), computed before they are replaced."""
    advantages: torch.Tensor
    """The per-token advantages trained on (batch, completion tokens)."""


def episode_reward(prompts: Any, completions: Any, episode_reward: Sequence[float | None], **_: Any) -> list:
    """TRL reward function: the episode's trace reward, carried from ``rollout_func``."""
    return list(episode_reward)


def task_rows(tasks: Sequence[vf.Task]) -> Dataset:
    """TRL's train dataset: one row per task, ``prompt`` (its text, for TRL's logs) and ``task_index``."""
    return Dataset.from_list([{"prompt": _prompt_text(task), "task_index": i} for i, task in enumerate(tasks)])


class StepwiseGRPOTrainer(GRPOTrainer):
    """GRPO on a verifiers env's episodes, credited per turn by a registered estimator.

    Args:
      model: a transformers causal LM (or a name TRL loads).
      env: the ``[env]`` block as ``vf-eval`` reads it, e.g. ``{"taskset": {"id": "stepwise-refine"},
        "max_turns": 3}``, or a loaded ``vf.Env``.
      estimator, options: a registered estimator name and its config fields (``hosts.estimator_from``).
      args: TRL's ``GRPOConfig``. ``temperature``, ``top_p`` and ``max_completion_length`` (per model
        call) become the episodes' sampling settings.
      processing_class: the tokenizer; it must hold Gemma's turn tokens (``TurnFormatRenderer``).
      generate: the token endpoint's generator; default ``ModelSampler`` on the trainer's model
        (tests inject faults here).
      kwargs: further ``GRPOTrainer`` arguments (callbacks, peft_config, ...); the dataset is the
        env's tasks (``task_rows``), the reward is the episode's (``episode_reward``).
    """

    def __init__(
        self,
        model: Any,
        env: Mapping[str, Any] | vf.Env,
        *,
        args: GRPOConfig,
        processing_class: Any,
        estimator: str | Estimator = "stepwise",
        options: Mapping[str, Any] | None = None,
        generate: GenerateFn | None = None,
        **kwargs: Any,
    ) -> None:
        self.env = env if isinstance(env, vf.Env) else vf.load_environment(vf.resolve_env_config(dict(env)))
        self.tasks = list(self.env.taskset)
        self.estimator = get_estimator(estimator, **(options or {})) if isinstance(estimator, str) else estimator
        self.last_batch: Batch | None = None
        self._rows: list[dict] = []
        super().__init__(
            model=model,
            reward_funcs=[episode_reward],
            args=args,
            train_dataset=task_rows(self.tasks),
            processing_class=processing_class,
            rollout_func=self._rollout,
            **kwargs,
        )
        # A reply closed by the turn format's <end_of_turn> ended, for TRL's clipped_ratio and
        # mask_truncated_completions too (TRL only knows the model's eos ids).
        end_of_turn = self._tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if end_of_turn not in self.eos_token_ids:
            self.eos_token_ids = [*self.eos_token_ids, end_of_turn]
        self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="vf-stepwise-tokenizer-")
        self._tokenizer.save_pretrained(self._tokenizer_dir.name)
        sampler = generate or ModelSampler(
            lambda: self.accelerator.unwrap_model(self.model), self._tokenizer.pad_token_id
        )
        self.endpoint = TokenEndpoint(sampler, model="policy").start()

    # -- generation ---------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._rows = inputs
        output = super()._generate_and_score_completions(inputs)
        samples: list[EpisodeSample] = [row["episode_sample"] for row in inputs]
        advantages = torch.zeros(output["completion_ids"].shape, dtype=torch.float32, device=self.accelerator.device)
        for i, sample in enumerate(samples):
            advantages[i, : len(sample.advantages)] = torch.tensor(sample.advantages, dtype=torch.float32)
        self.last_batch = Batch(
            [row["episode"] for row in inputs], samples, output["advantages"].detach().cpu(), advantages.detach().cpu()
        )
        output["advantages"] = advantages
        self._log_turns(samples)
        return output

    def _training(self) -> bool:
        assert self.model is not None  # GRPOTrainer always holds its model
        return bool(self.model.training)

    def _group_size(self) -> int:
        """Rollouts per task: TRL's ``num_generations``, or ``num_generations_eval`` in evaluation."""
        size = self.num_generations if self._training() else self.num_generations_eval
        assert size is not None  # GRPOTrainer.__init__ sets both
        return size

    def _rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        """TRL's ``rollout_func``: ``prompts`` are ``self._rows``' prompts, each task's repeated."""
        indices = [row["task_index"] for row in self._rows]
        groups = _consecutive_groups(indices, self._group_size())
        episodes = _run(self._run_groups([self.tasks[indices[start]] for start, _ in groups], groups))
        samples = score_groups(episodes, self.estimator, self._tokenizer.pad_token_id)
        return {
            "prompt_ids": [s.prompt_ids for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "logprobs": [s.logprobs for s in samples],
            "env_mask": [s.env_mask for s in samples],
            "episode_reward": [s.reward for s in samples],
            "episode_sample": samples,
            "episode": [episode for group in episodes for episode in group],
        }

    async def _run_groups(self, tasks: list[vf.Task], groups: list[tuple[int, int]]) -> list[list[vf.Episode]]:
        os.environ.setdefault(API_KEY_VAR, "local")
        client = vf.TrainClientConfig(
            base_url=self.endpoint.base_url,
            api_key_var=API_KEY_VAR,
            renderer=renderer_config(),
            renderer_model_name=self._tokenizer_dir.name,
        )
        sampling = vf.SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_completion_length,
        )
        ctx = vf.ModelContext(model="policy", client=client, sampling=sampling)
        async with self.env.serving():
            slots = [self.env.slots(task, end - start) for task, (start, end) in zip(tasks, groups)]
            flat = await asyncio.gather(*(self.env.run_slot(slot, ctx) for group in slots for slot in group))
        out, k = [], 0
        for start, end in groups:
            out.append(list(flat[k : k + end - start]))
            k += end - start
        return out

    # -- metrics ------------------------------------------------------------------------------

    def _log_turns(self, samples: Sequence[EpisodeSample]) -> None:
        metrics = self._metrics["train" if self._training() else "eval"]
        scored = [s for s in samples if s.excluded is None]
        metrics["episodes/errored"].append(1 - len(scored) / len(samples))
        if not scored:
            return
        metrics["turns/mean"].append(sum(len(s.turn_rewards) for s in scored) / len(scored))
        rewards = [r for s in scored for r in s.turn_rewards]
        advantages = [a for s in scored for a in s.turn_advantages]
        if rewards:
            metrics["turn_rewards/mean"].append(sum(rewards) / len(rewards))
        if advantages:
            metrics["turn_advantages/mean"].append(sum(advantages) / len(advantages))
            metrics["turn_advantages/abs_mean"].append(sum(map(abs, advantages)) / len(advantages))
        for t in range(max(len(s.turn_rewards) for s in scored)):
            at_t = [s.turn_rewards[t] for s in scored if len(s.turn_rewards) > t]
            metrics[f"turn_rewards/turn_{t}"].append(sum(at_t) / len(at_t))

    def close(self) -> None:
        """Stop the token endpoint and remove the saved tokenizer. Its thread holds the trainer
        (the sampler reads the current model), so the model is freed only after this."""
        self.endpoint.stop()
        self._tokenizer_dir.cleanup()


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _run(coroutine: Any) -> Any:
    """Run ``coroutine`` on the process's one rollout event loop (a daemon thread) and wait.

    One loop for every step and every trainer, because the libraries under the train client
    keep asyncio state across calls: renderers 0.1.12 guards its context-length lookup with a
    module-level ``asyncio.Lock``, which binds to the first loop that waits on it, so episodes
    on a second loop (``asyncio.run`` per step) fail their model calls.
    """
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="vf-stepwise-rollouts", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _LOOP).result()


def _consecutive_groups(indices: Sequence[int], size: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ``size`` equal task indices (TRL's RepeatSampler order)."""
    if size < 1 or len(indices) % size:
        raise ValueError(f"{len(indices)} rows do not split into groups of {size} (num_generations)")
    groups = []
    for start in range(0, len(indices), size):
        run = set(indices[start : start + size])
        if len(run) != 1:
            raise ValueError(f"rows {start}..{start + size - 1} hold tasks {sorted(run)}, not one task's group")
        groups.append((start, start + size))
    return groups


def _prompt_text(task: vf.Task) -> str:
    prompt = task.data.prompt
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    return "\n".join(m.content if isinstance(m.content, str) else str(m.content) for m in prompt if m.content)
