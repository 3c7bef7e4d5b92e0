"""Run an environment's episodes in-process against a model endpoint, grouped by task.

The same path ``vf-eval`` takes for each rollout (``env.serving()``, ``env.slots``,
``env.run_slot``), without the CLI around it, so tests can read the live ``vf.Episode``\\ s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import verifiers.v1 as vf

__all__ = ["run_groups"]


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
    tasks = list(env.taskset.take(limit) if limit is not None else env.taskset)
    async with env.serving():
        slots = [env.slots(task, rollouts) for task in tasks]
        episodes = await asyncio.gather(*(env.run_slot(slot, ctx) for group in slots for slot in group))
    return [list(episodes[i * rollouts : (i + 1) * rollouts]) for i in range(len(tasks))]
