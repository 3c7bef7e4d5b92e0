"""Per-turn wall time of a 4-turn episode: the in-process ``stepwise-chat`` harness against the
built-in ``null`` harness, in the same run, against a local server that answers instantly.

    pip install -e ".[bench]"          # uv, which the null harness runs its program with
    python benchmarks/harness_turns.py [--episodes 10] [--null-episodes 4] [--json out.json]

The env is ``stepwise-refine`` on the bundled arithmetic taskset with ``threshold=inf``,
``max_turns=4`` and no turn cost, so every episode takes exactly four turns scored 0; only ``--env.agent.harness.id``
differs. The model server runs in its own process. The null harness needs ``uv`` and, on its
first episode, the package index (its program's dependencies are installed once); that
episode is reported separately as warm-up and not timed. Each harness also gets one untimed
warm-up episode.

A turn's wall time is one harness segment, from handing the harness the user's message (for
the first turn: the end of rollout setup) to the env seeing the model's reply; the episode's
wall time is ``Env.run_episode`` whole (runtime, setup, four turns, scoring, teardown).
Medians are reported, and the ratio null / stepwise-chat. Targets: ≤ 50 ms per turn, ≥ 60×.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import verifiers.v1 as vf

from verifiers_stepwise.envs.env import Turn, TurnResult
from verifiers_stepwise.envs.refine import RefineConfig, RefineEnv
from verifiers_stepwise.testing.server import spawned

TURNS = 4
KEY_VAR = "STEPWISE_BENCH_API_KEY"


class TimedRefine(RefineEnv):
    """The refine env, stamping when each turn's reply reaches it and when it hands the next
    message back, so segment times are measured where the env sees them."""

    def __init__(self, config: RefineConfig) -> None:
        super().__init__(config)
        self.segments: dict[str, list[float]] = {}
        self._resumed: dict[str, float] = {}

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        now = time.time()
        trace_id = turn.trace.id
        start = self._resumed.get(trace_id, turn.trace.timing.agent.start)
        self.segments.setdefault(trace_id, []).append(now - start)
        result = await super().env_response(task, turn)
        self._resumed[trace_id] = time.time()
        return result


async def measure(harness: str, base_url: str, episodes: int) -> dict:
    config = RefineConfig(
        taskset={"id": "stepwise-refine"},
        threshold=math.inf,
        max_turns=TURNS,
        turn_cost=0.0,
        agent={"harness": {"id": harness}, "runtime": {"type": "subprocess"}},
    )
    env = TimedRefine(config)
    ctx = vf.ModelContext(
        model="local-model",
        client=vf.EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR),
        sampling=vf.SamplingConfig(),
    )
    task = next(iter(env.taskset))
    walls, turns = [], []
    async with env.serving():
        started = time.perf_counter()
        warmup = await env.run_episode(task, ctx)
        warmup_s = time.perf_counter() - started
        _check(harness, warmup)
        for _ in range(episodes):
            started = time.perf_counter()
            episode = await env.run_episode(task, ctx)
            walls.append(time.perf_counter() - started)
            _check(harness, episode)
            turns += env.segments[episode.traces[0].id]
    return {
        "harness": harness,
        "episodes": episodes,
        "warmup_episode_s": warmup_s,
        "turn_median_ms": 1000 * statistics.median(turns),
        "turn_min_ms": 1000 * min(turns),
        "turn_max_ms": 1000 * max(turns),
        "episode_median_s": statistics.median(walls),
        "episode_per_turn_median_ms": 1000 * statistics.median(walls) / TURNS,
    }


def _check(harness: str, episode: vf.Episode) -> None:
    """Both harnesses must play the same episode: ok, four scored turns, one node each."""
    (trace,) = episode.traces
    if not episode.ok or trace.info.get("turn_scores") != [0.0] * TURNS:  # refine records scores
        raise SystemExit(f"{harness}: unexpected episode (ok={episode.ok}, errors={trace.errors}, info={trace.info})")
    if [len(nodes) for nodes in trace.info["turn_nodes"]] != [1] * TURNS:
        raise SystemExit(f"{harness}: unexpected turn nodes {trace.info['turn_nodes']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10, help="timed episodes for stepwise-chat")
    parser.add_argument("--null-episodes", type=int, default=4, help="timed episodes for null")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if shutil.which("uv") is None and not Path(sys.executable).with_name("uv").exists():
        raise SystemExit("the null harness needs uv: pip install -e '.[bench]' (or pip install uv)")
    os.environ[KEY_VAR] = "sk-local"
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    with spawned("0") as base_url:
        fast = asyncio.run(measure("stepwise-chat", base_url, args.episodes))
        null = asyncio.run(measure("null", base_url, args.null_episodes))
    ratio_turn = null["turn_median_ms"] / fast["turn_median_ms"]
    ratio_episode = null["episode_median_s"] / fast["episode_median_s"]
    print(
        f"{'harness':<14} {'turn median':>12} {'turn min..max':>18} {'episode median':>15}"
        f" {'episode/turn':>13} {'warm-up':>9}"
    )
    for r in (fast, null):
        print(
            f"{r['harness']:<14} {r['turn_median_ms']:>9.1f} ms {r['turn_min_ms']:>8.1f}..{r['turn_max_ms']:<7.1f}"
            f" {r['episode_median_s']:>13.3f} s {r['episode_per_turn_median_ms']:>10.1f} ms"
            f" {r['warmup_episode_s']:>7.2f} s"
        )
    print(f"null / stepwise-chat: {ratio_turn:.0f}x per turn, {ratio_episode:.0f}x per episode")
    print(
        f"targets: stepwise-chat turn <= 50 ms: {'met' if fast['turn_median_ms'] <= 50 else 'MISSED'}; "
        f">= 60x per turn: {'met' if ratio_turn >= 60 else 'MISSED'}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"stepwise_chat": fast, "null": null, "ratio_turn": ratio_turn, "ratio_episode": ratio_episode},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
