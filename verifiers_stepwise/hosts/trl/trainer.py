"""``StepwiseGRPOTrainer``: TRL's ``GRPOTrainer`` on verifiers episodes with per-turn credit.

Per generation batch (checked against TRL 1.16.0, ``trl/trainer/grpo_trainer.py``):

    TRL samples task rows, each repeated num_generations times (one group per task)
      → rollout_func: the env runs every episode in-process; each model call goes
        interception server → verifiers TrainClient (TurnFormatRenderer) → BatchingTokenEndpoint →
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
import concurrent.futures
import contextlib
import os
import queue
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import verifiers.v1 as vf

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "torch", "datasets", "trl", extra="trl"):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.hosts.trl.endpoint import BatchingTokenEndpoint, GenerateFn
from verifiers_stepwise.hosts.trl.model import contiguous_output_embeddings
from verifiers_stepwise.hosts.trl.renderer import FORMATS, renderer_config
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
    """TRL's train (or eval) dataset: one row per task, ``prompt`` (its text, for TRL's logs) and ``task_index``."""
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
      processing_class: the tokenizer.
      format: how conversations become tokens: ``"text"`` (a plain document, replies end at a
        newline: for base models and completion-style envs such as ``stepwise-sums``) or
        ``"turns"`` (Gemma's chat turns; the tokenizer must hold its turn tokens). See
        ``hosts.trl.renderer``.
      generate: the token endpoint's generator; default ``ModelSampler`` on the trainer's model
        (tests inject faults here).
      eval_env: the env of TRL's evaluation (``args.eval_strategy``), given like ``env``, e.g. the
        same env on a held-out split; its tasks are the eval dataset, each played
        ``num_generations_eval`` times. TRL logs their mean reward as ``eval_reward``.
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
        estimator: str | Estimator = "stepwise",
        options: Mapping[str, Any] | None = None,
        format: str = "text",
        generate: GenerateFn | None = None,
        eval_env: Mapping[str, Any] | vf.Env | None = None,
        **kwargs: Any,
    ) -> None:
        if "train_dataset" in kwargs or "eval_dataset" in kwargs:
            raise ConfigError("StepwiseGRPOTrainer: the datasets are the envs' tasks; pass env= and eval_env=")
        self.env = _load(env)
        self.tasks = list(self.env.taskset)
        self.eval_env = None if eval_env is None else _load(eval_env)
        self.eval_tasks = [] if self.eval_env is None else list(self.eval_env.taskset)
        self.estimator = get_estimator(estimator, **(options or {})) if isinstance(estimator, str) else estimator
        self.last_batch: Batch | None = None
        self.format = format
        renderer_config(format)  # an unknown format fails here, before the model is wrapped
        self._rows: list[dict] = []
        self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="vf-stepwise-tokenizer-")
        if processing_class is not None:  # else TRL loads it: built after, below
            self._build_renderer(processing_class)
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
        # Building the renderer here also checks the tokenizer suits the format before step 1.
        renderer = getattr(import_module("verifiers_stepwise.hosts.trl.renderer"), FORMATS[format])(self._tokenizer)
        self.eos_token_ids = sorted({*self.eos_token_ids, *renderer.get_stop_token_ids()})
        if processing_class is None:
            self._build_renderer(self._tokenizer)
        sampler = generate or ModelSampler(
            lambda: self.accelerator.unwrap_model(self.model), self._tokenizer.pad_token_id
        )
        # One adapter merge for all of a step's rollouts, not one per generation batch.
        self._sampling = sampler.merged if isinstance(sampler, ModelSampler) else contextlib.nullcontext
        self._calls = TrainerThreadCalls(sampler)
        self.endpoint = BatchingTokenEndpoint(self._calls, model="policy").start()

    def _build_renderer(self, tokenizer: Any) -> None:
        """Save ``tokenizer`` for the train client, whose renderer loads it (3-4 s for Gemma's
        262k tokens), and start building that renderer on the rollout loop's thread: while TRL
        wraps the model, not in front of step 1's first turn."""
        tokenizer.save_pretrained(self._tokenizer_dir.name)
        self._renderer_ready = _submit(_renderer_into_pool(self._tokenizer_dir.name, self.format))

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
        # TRL's completion log (--log_completions, its "Advantage" column) shows what is trained:
        # each episode's mean per-token advantage over its sampled tokens, not TRL's sequence one.
        logged: Any = self._logs["advantages"]  # TRL's deque of the latest generation_batch_size floats
        kept = samples[max(0, len(samples) - len(logged)) :]  # an eval batch can be larger
        for k, sample in enumerate(kept, start=len(logged) - len(kept)):
            sampled = [a for a, m in zip(sample.advantages, sample.env_mask) if m]
            logged[k] = sum(sampled) / len(sampled) if sampled else 0.0
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
        env, tasks = (self.env, self.tasks) if self._training() else (self.eval_env, self.eval_tasks)
        indices = [row["task_index"] for row in self._rows]
        groups = _consecutive_groups(indices, self._group_size())
        episodes = self.run_episodes([tasks[indices[start]] for start, _ in groups], self._group_size(), env=env)
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

    def run_episodes(
        self, tasks: Sequence[vf.Task], per_task: int, env: vf.Env | None = None
    ) -> list[list[vf.Episode]]:
        """``per_task`` episodes of each task played by the current model, grouped by task.

        ``env`` (default: the training env) may be another env, e.g. a held-out split to
        evaluate on; the episodes are not scored for credit and train nothing.
        """
        self._renderer_ready.result()  # a tokenizer the renderer cannot load fails here, named
        with self._sampling():
            return self._calls.serve_until(_submit(self._run_groups(env or self.env, list(tasks), per_task)))

    async def _run_groups(self, env: vf.Env, tasks: list[vf.Task], per_task: int) -> list[list[vf.Episode]]:
        os.environ.setdefault(API_KEY_VAR, "local")
        client = vf.TrainClientConfig(
            base_url=self.endpoint.base_url,
            api_key_var=API_KEY_VAR,
            renderer=renderer_config(self.format),
            renderer_model_name=self._tokenizer_dir.name,
        )
        sampling = vf.SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_completion_length,
        )
        ctx = vf.ModelContext(model="policy", client=client, sampling=sampling)

        async def episode(slot: Any) -> vf.Episode:
            try:
                return await env.run_slot(slot, ctx)
            finally:
                self.endpoint.episode_done()

        async with env.serving():
            slots = [slot for task in tasks for slot in env.slots(task, per_task)]
            self.endpoint.episodes(len(slots))  # a generation batch waits for every episode in flight
            flat = await asyncio.gather(*(episode(slot) for slot in slots))
        return [list(flat[k : k + per_task]) for k in range(0, len(flat), per_task)]

    # -- metrics ------------------------------------------------------------------------------

    def _log_turns(self, samples: Sequence[EpisodeSample]) -> None:
        metrics = self._metrics["train" if self._training() else "eval"]
        scored = [s for s in samples if s.excluded is None]
        metrics["episodes/errored"].append(1 - len(scored) / len(samples))
        if not scored:
            return
        metrics["turns/mean"].append(sum(len(s.credit.rewards) for s in scored) / len(scored))
        rewards = [r for s in scored for r in s.credit.rewards]
        advantages = [a for s in scored for a in s.credit.advantages]
        if rewards:
            metrics["turn_rewards/mean"].append(sum(rewards) / len(rewards))
        if advantages:
            metrics["turn_advantages/mean"].append(sum(advantages) / len(advantages))
            metrics["turn_advantages/abs_mean"].append(sum(map(abs, advantages)) / len(advantages))
        for t in range(max(len(s.credit.rewards) for s in scored)):
            at_t = [s.credit.rewards[t] for s in scored if len(s.credit.rewards) > t]
            metrics[f"turn_rewards/turn_{t}"].append(sum(at_t) / len(at_t))

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
        loader = (
            "from peft import AutoPeftModelForCausalLM as Model"
            if peft
            else "from transformers import AutoModelForCausalLM as Model"
        )
        env_id = getattr(self.env.config.taskset, "id", None) or type(self.env.taskset).__name__
        card = f"""# {model_name or output.name}

{"A LoRA adapter on" if peft else "A fine-tune of"} `{base}`, trained with TRL's `GRPOTrainer` by
verifiers-stepwise's TRL host on the verifiers env `{env_id}`, credited per turn by the estimator
`{self.estimator!r}`; conversations in the `{self.format}` format (`verifiers_stepwise.hosts.trl.renderer`).

## Quick start (run in this folder)

```python
import torch
from transformers import AutoTokenizer
{loader}

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
        """Stop the token endpoint and remove the saved tokenizer. Its thread holds the trainer
        (the sampler reads the current model), so the model is freed only after this."""
        self.endpoint.stop()
        self._tokenizer_dir.cleanup()


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _load(env: Mapping[str, Any] | vf.Env) -> vf.Env:
    return env if isinstance(env, vf.Env) else vf.load_environment(vf.resolve_env_config(dict(env)))


async def _renderer_into_pool(tokenizer_dir: str, format: str) -> None:
    """The train client's renderer, built into verifiers' process-wide ``ElasticRendererPool``
    under the key the client looks it up by (its ``renderer_model_name`` and ``renderer``)."""
    from verifiers.v1.clients.train import ElasticRendererPool

    await ElasticRendererPool(tokenizer_dir, renderer_config(format), multiplex=1).grow()


def _submit(coroutine: Any) -> concurrent.futures.Future:
    """Start ``coroutine`` on the process's one rollout event loop (a daemon thread).

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
    return asyncio.run_coroutine_threadsafe(coroutine, _LOOP)


class TrainerThreadCalls:
    """The endpoint's generator, run on the trainer's own thread while it waits for rollouts.

    torch on CPU gives each thread that runs operators its own OpenMP team: once generation ran
    on the endpoint's worker thread, the model's operators on both threads ran ~35 % slower on
    2 cores (Gemma 3 270M, LoRA, bf16: a 4 × 6-token generate 640 → 880 ms, and the training
    thread's forward and backward after it slower too), however idle the other thread was. So
    while ``serve_until`` waits, each batch is handed to the waiting thread; a call made when
    no one waits (another client of the endpoint) runs where it is called.
    """

    def __init__(self, generate: GenerateFn) -> None:
        self.generate = generate
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._serving = False

    def __call__(self, requests: Any) -> Any:
        if not self._serving:
            return self.generate(requests)
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((requests, done))
        return done.result()

    def serve_until(self, future: concurrent.futures.Future) -> Any:
        """Run the queued calls on this thread until ``future`` is done; its result."""
        self._serving = True
        future.add_done_callback(lambda _: self._jobs.put(None))
        try:
            while (job := self._jobs.get()) is not None:
                self._answer(*job)
        finally:
            self._serving = False
            while not self._jobs.empty():  # a call that queued as serving ended
                job = self._jobs.get()
                if job is not None:
                    self._answer(*job)
        return future.result()

    def _answer(self, requests: Any, done: concurrent.futures.Future) -> None:
        try:
            done.set_result(self.generate(requests))
        except BaseException as error:  # the endpoint answers its requests with it
            done.set_exception(error)


def _consecutive_groups(indices: Sequence[int], size: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ``size`` equal task indices (TRL's RepeatSampler order)."""
    if size < 1 or len(indices) % size:
        raise ConfigError(f"{len(indices)} rows do not split into groups of {size} (num_generations)")
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
