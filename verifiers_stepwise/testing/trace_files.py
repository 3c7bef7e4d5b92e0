"""Verifiers v1 episodes with per-turn rewards, and ``traces.jsonl`` files of them.

For tests, benchmarks and demos of ``vf-stepwise``: each trace is grown with
:class:`~verifiers_stepwise.testing.traces.TraceBuilder` (with or without token ids, as a train
or an eval client records it), each turn recorded with
:func:`~verifiers_stepwise.traces.turns.append_turn`; a file holds one ``Episode.to_record()`` a
line, as ``vf-eval`` writes them. Checked against verifiers 0.4.0.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["make_episode", "write_episodes", "write_large_traces"]


def make_episode(
    turn_rewards: Sequence[float],
    *,
    task: int = 0,
    group: str | None = None,
    run: str | None = None,
    agent: str = "agent",
    trainable: bool = True,
    tokens: bool = False,
    tokens_per_call: int = 3,
    calls_per_turn: int = 1,
    reply_chars: int = 64,
    ok: bool = True,
) -> Any:
    """One single-agent episode whose trace took ``len(turn_rewards)`` turns.

    Turn t (after the first) starts with a feedback user message; a turn with
    ``calls_per_turn`` > 1 is a tool loop (assistant tool call, tool result, ...) ending in a
    plain reply, and all its model calls are that turn's sampled nodes.

    Args:
      turn_rewards: r_1..r_T, recorded as the trace's ``turn_rewards``.
      task: the task row index; the task key and hash are the content hash of the row, as
        ``vf-eval`` records them, so episodes of one task share them.
      group: a consumer group id (``episode.group.id``); None leaves the episode ungrouped,
        like ``vf-eval`` output.
      run: an eval run id stamped on the episode (``episode.run``), as ``vf-eval`` does.
      tokens: True records token ids, masks and logprobs (train client), ``tokens_per_call``
        sampled tokens per model call; False records none (eval client).
      ok: False marks the trace and the episode errored (a model-server fault).
    """
    import verifiers.v1 as vf
    from verifiers.v1.task import task_key

    from verifiers_stepwise.testing.traces import TraceBuilder
    from verifiers_stepwise.traces.turns import append_turn

    builder = TraceBuilder(prompt=f"Solve task {task}.", tokens=tokens)
    for t, reward in enumerate(turn_rewards):
        if t:
            feedback = f"Turn {t - 1} scored {turn_rewards[t - 1]}. Again."
            builder.add(vf.UserMessage(content=feedback))
        nodes = []
        for c in range(calls_per_turn - 1):
            call = vf.ToolCall(id=f"call-{t}-{c}", name="run", arguments="{}")
            nodes.append(builder.sample(None, tool_calls=[call], n_tokens=tokens_per_call))
            builder.add(vf.ToolMessage(tool_call_id=call.id, content="ok"))
        reply = f"Attempt {t}: " + "x" * reply_chars
        nodes.append(builder.sample(reply, n_tokens=tokens_per_call))
        append_turn(builder.trace, reward, nodes)

    trace = builder.trace
    data = trace.task.data.model_copy(update={"idx": task})
    key = task_key(data.model_dump(mode="json", exclude_none=True))
    trace.task = vf.TraceTask(type="DemoTask", data=data, key=key, hash=key)
    trace.agent = vf.AgentInfo(config=vf.AgentConfig(), name=agent, trainable=trainable)
    if turn_rewards:
        trace.record_reward("final_turn", turn_rewards[-1])
    trace.is_completed = True
    trace.ok = ok
    if not ok:
        trace.errors.append(vf.Error(type="ProviderError", message="upstream returned HTTP 500"))
    return vf.Episode(
        env=vf.EnvInfo(id="stepwise-demo"),
        task=trace.task,
        group=vf.GroupInfo(id=group) if group is not None else None,
        run=vf.EvalRunInfo(id=run) if run is not None else None,
        ok=ok,
        traces=[trace],
    )


def write_episodes(path: Path | str, episodes: Iterable[Any]) -> Path:
    """Write episodes as ``traces.jsonl`` lines (``Episode.to_record()``); returns the path."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for episode in episodes:
            f.write(json.dumps(episode.to_record()) + "\n")
    return path


def write_large_traces(
    path: Path | str,
    *,
    target_bytes: int,
    rollouts: int = 8,
    max_turns: int = 6,
    tokens: bool = False,
    interleave: int = 64,
) -> dict[str, int]:
    """Write a traces file of about ``target_bytes``, fast enough for gigabytes.

    One real episode per turn count 1..``max_turns`` is built with :func:`make_episode` (300
    tokens a call, 1500-character replies) and turned into a record once; each line then writes
    that record with its own episode id, trace id, task key and turn rewards. Every task gets
    ``rollouts`` episodes (the last block may be cut short by the size), and each block of
    ``interleave`` tasks is interleaved line by line (as concurrent rollouts finish), so a
    group's episodes are spread over the file. Rewards are random multiples of 0.25 that tend
    to rise with the turn.

    Returns ``{"episodes": n, "bytes": size, "turns": total turns}``.
    """
    rng = random.Random(0)
    records = [
        make_episode([0.0] * n_turns, tokens=tokens, tokens_per_call=300, reply_chars=1500).to_record()
        for n_turns in range(1, max_turns + 1)
    ]
    written = episodes = turns = 0
    with Path(path).open("w", encoding="utf-8") as f:
        while written < target_bytes:
            block, position = divmod(episodes, interleave * rollouts)
            task = interleave * block + position % interleave
            n_turns = rng.randint(1, max_turns)
            skill = rng.random()
            record = records[n_turns - 1]
            trace = record["traces"][0]
            record["id"], trace["id"] = f"ep{episodes:010d}", f"tr{episodes:010d}"
            trace["info"]["turn_rewards"] = [
                min(1.0, round(4 * skill * rng.random() + t / max_turns) / 4) for t in range(n_turns)
            ]
            for task_info in (record["task"], trace["task"]):
                task_info["key"] = task_info["hash"] = f"task-{task:08d}"
            line = json.dumps(record) + "\n"
            f.write(line)
            written += len(line)
            episodes += 1
            turns += n_turns
    return {"episodes": episodes, "bytes": written, "turns": turns}
