"""In-process inference: the trainer's own model answering verifiers' train client.

The TRL host needs no inference server: every model call of an episode goes

    the env (in this process) → verifiers' interception server → its token-level TrainClient
      (renderer: ``renderer.TextRenderer`` or ``TurnFormatRenderer``)
      → ``endpoint.BatchingTokenEndpoint`` (``/inference/v1/generate``, one batch per turn of
        the episodes in flight) → ``sampling.ModelSampler`` on the trainer's current weights
        (a LoRA adapter merged out of place for the step)

so the tokens TRL trains on are the tokens the policy sampled; docs/trl.md ("GPU") says how the
same stack runs on a GPU.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import verifiers.v1 as vf

from verifiers_stepwise.hosts.trl.inference.endpoint import BatchingTokenEndpoint, GenerateFn
from verifiers_stepwise.hosts.trl.inference.renderer import FORMATS, renderer_config
from verifiers_stepwise.hosts.trl.inference.sampling import ModelSampler

__all__ = ["LocalInference", "TrainerThreadCalls", "submit"]


class LocalInference:
    """The trainer's model behind verifiers' train client, for one trainer (a context of its own).

    Built in two steps so that the slow part overlaps TRL's set-up: ``LocalInference(tokenizer,
    format)`` saves the tokenizer and starts building the train client's renderer (3-4 s for
    Gemma's 262k tokens) on the rollout loop; ``start(get_model, generate)`` starts the endpoint
    once the trainer holds its model.
    """

    def __init__(self, tokenizer: Any, format: str) -> None:
        renderer_config(format)  # an unknown format fails here, before anything starts
        self.format = format
        self.pad_token_id = tokenizer.pad_token_id
        self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="vf-stepwise-tokenizer-")
        tokenizer.save_pretrained(self._tokenizer_dir.name)
        self._renderer_ready = submit(_renderer_into_pool(self._tokenizer_dir.name, format))
        # Built here too: it checks the tokenizer suits the format before the trainer wraps the model.
        self.stop_token_ids: list[int] = list(FORMATS[format](tokenizer).get_stop_token_ids())
        """The format's stop tokens: a reply closed by one of them ended."""
        self.endpoint: BatchingTokenEndpoint | None = None

    def start(self, get_model: Callable[[], Any], generate: GenerateFn | None = None) -> LocalInference:
        """Serve ``generate`` (default: ``ModelSampler`` on ``get_model()``, the current weights)."""
        sampler = generate or ModelSampler(get_model, self.pad_token_id)
        # One adapter merge for all of a step's rollouts, not one per generation batch.
        self._sampling = sampler.merged if isinstance(sampler, ModelSampler) else contextlib.nullcontext
        self._calls = TrainerThreadCalls(sampler)
        self.endpoint = BatchingTokenEndpoint(self._calls).start()
        return self

    def play(
        self, env: vf.Env, tasks: Sequence[vf.Task], per_task: int, sampling: vf.SamplingConfig
    ) -> list[list[vf.Episode]]:
        """``per_task`` episodes of each task, grouped by task, played by the current model."""
        self._renderer_ready.result()  # a tokenizer the renderer cannot load fails here, named
        with self._sampling():
            return self._calls.serve_until(submit(self._run_groups(env, list(tasks), per_task, sampling)))

    async def _run_groups(
        self, env: vf.Env, tasks: list[vf.Task], per_task: int, sampling: vf.SamplingConfig
    ) -> list[list[vf.Episode]]:
        assert self.endpoint is not None, "start() the inference first"
        endpoint = self.endpoint
        client = vf.TrainClientConfig(
            base_url=endpoint.base_url,
            api_key_var="",  # no key: verifiers 0.4.0's resolve_api_key sends "EMPTY"
            renderer=renderer_config(self.format),
            renderer_model_name=self._tokenizer_dir.name,
        )
        ctx = vf.ModelContext(model="policy", client=client, sampling=sampling)

        async def episode(slot: Any) -> vf.Episode:
            try:
                return await env.run_slot(slot, ctx)
            finally:
                endpoint.episode_done()

        async with env.serving():
            slots = [slot for task in tasks for slot in env.slots(task, per_task)]
            endpoint.episodes(len(slots))  # a generation batch waits for every episode in flight
            flat = await asyncio.gather(*(episode(slot) for slot in slots))
        return [list(flat[k : k + per_task]) for k in range(0, len(flat), per_task)]

    def close(self) -> None:
        """Stop the endpoint (its thread holds the trainer's model) and remove the saved tokenizer."""
        if self.endpoint is not None:
            self.endpoint.stop()
        self._tokenizer_dir.cleanup()


async def _renderer_into_pool(tokenizer_dir: str, format: str) -> None:
    """The train client's renderer, built into verifiers' process-wide ``ElasticRendererPool``
    under the key the client looks it up by (its ``renderer_model_name`` and ``renderer``)."""
    from verifiers.v1.clients.train import ElasticRendererPool

    await ElasticRendererPool(tokenizer_dir, renderer_config(format), multiplex=1).grow()


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def submit(coroutine: Any) -> concurrent.futures.Future:
    """Start ``coroutine`` on the process's one rollout event loop (a daemon thread): renderers
    0.1.12's module-level ``asyncio.Lock`` binds to the first loop that waits on it, so episodes
    on a second loop (``asyncio.run`` per step) fail their model calls."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="vf-stepwise-rollouts", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _LOOP)


class TrainerThreadCalls:
    """The endpoint's generator, run on the trainer's own thread while it waits for rollouts.

    torch on CPU gives each thread that runs operators its own OpenMP team, and once a second
    thread ran the model both ran ~35 % slower (measured in docs/trl.md). So while ``serve_until``
    waits, each batch is handed to the waiting thread; a call made when no one waits (another
    client of the endpoint) runs where it is called.
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
