"""Run an environment's episodes in-process against a model endpoint, grouped by task.

``run_groups`` takes the same path ``vf-eval`` takes for each rollout (``env.serving()``,
``env.slots``, ``env.run_slot``), without the CLI around it, so tests can read the live
``vf.Episode``\\ s; ``env_server`` runs them through verifiers' env server instead, as a
trainer's orchestrator does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.serve import EnvClient, EnvServer

from verifiers_stepwise.envs.compat import TAKE

__all__ = ["env_server", "run_groups"]


async def run_groups(
    config: vf.EnvConfig | Mapping[str, Any],
    client: vf.ClientConfig,
    *,
    model: str = "local-model",
    rollouts: int = 1,
    limit: int | None = None,
    sampling: vf.SamplingConfig | None = None,
) -> list[list[vf.Episode]]:
    """``rollouts`` episodes of each task (the first ``limit`` tasks), one group per task, with
    the model behind ``client`` (e.g. ``vf.EvalClientConfig(base_url=server.base_url, ...)``).

    ``config`` is the ``[env]`` block, e.g. ``{"taskset": {"id": "guess-env"}, "max_turns": 3}``;
    it is narrowed to the env's own config class as the CLI would.
    """
    env = vf.load_environment(vf.resolve_env_config(config if isinstance(config, vf.EnvConfig) else dict(config)))
    ctx = vf.ModelContext(model=model, client=client, sampling=sampling or vf.SamplingConfig())
    tasks = list(getattr(env.taskset, TAKE)(limit) if limit is not None else env.taskset)
    async with env.serving():
        slots = [env.slots(task, rollouts) for task in tasks]
        episodes = await asyncio.gather(*(env.run_slot(slot, ctx) for group in slots for slot in group))
    return [list(episodes[i * rollouts : (i + 1) * rollouts]) for i in range(len(tasks))]


@contextlib.asynccontextmanager
async def env_server(config: vf.EnvConfig) -> AsyncIterator[EnvClient]:
    """verifiers' env server (``verifiers.v1.serve``) for ``config`` on a free loopback port in
    this event loop, and a client that has seen it start (``client.run(...)`` runs an episode);
    both stop with the block."""
    server = EnvServer(config, address="tcp://127.0.0.1:0")
    serving = asyncio.create_task(server.run())
    client = EnvClient(server.address)
    try:
        await client.wait_for_server_startup(timeout=60, interval=0.2)
        yield client
    finally:
        await client.close()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
