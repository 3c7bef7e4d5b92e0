"""Verifiers v1 episodes with per-turn rewards, and ``traces.jsonl`` files of them.

For tests, benchmarks and demos of ``vf-stepwise``: every episode is built from verifiers' own
types (``vf.Episode``, ``vf.Trace``, ``vf.MessageNode``) and written with ``Episode.to_record()``,
one JSON object a line, so the files read back with ``vf.WireEpisode.model_validate_json`` exactly
like the ones ``vf-eval`` writes. Checked against verifiers 0.4.0.

A trace's message graph is a chain: system, user, then per turn its model calls (a turn with
several calls is a tool loop: assistant tool call, tool result, ..., final assistant reply),
then a feedback user message before the next turn. The per-turn reward schema is the package's
(``trace.info["turn_rewards"]``, ``trace.info["turn_nodes"]``).
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
    env: str = "stepwise-demo",
    agent: str = "agent",
    trainable: bool = True,
    tokens_per_call: int = 0,
    calls_per_turn: int = 1,
    reply_chars: int = 64,
    turn_nodes: bool = True,
    ok: bool = True,
) -> Any:
    """One single-agent episode whose trace has ``len(turn_rewards)`` turns.

    Args:
      turn_rewards: r_1..r_T written to ``trace.info["turn_rewards"]`` as given.
      task: the task row index; the task key is ``f"task-{task}"``.
      group: a consumer group id (``episode.group.id``); None leaves the episode ungrouped,
        like ``vf-eval`` output.
      run: an eval run id stamped on the episode (``episode.run``), as ``vf-eval`` does.
      tokens_per_call: 0 gives eval-client nodes (no token ids); n > 0 gives train-client
        nodes: 2 scaffold tokens then n sampled tokens with logprobs on every model call.
      calls_per_turn: model calls per turn (> 1 is a tool loop inside one turn).
      turn_nodes: write the explicit turn -> sampled nodes mapping; False leaves the default
        (each sampled node is one turn), which needs ``calls_per_turn == 1``.
    """
    import verifiers.v1 as vf

    data = vf.TaskData(idx=task, prompt=f"Solve task {task}.")
    task_info = vf.TraceTask(type="DemoTask", data=data, key=f"task-{task}", hash=f"hash-{task}")
    nodes: list[vf.MessageNode] = []

    def add(message: Any, *, sampled: bool = False) -> int:
        n = tokens_per_call if sampled else (3 if tokens_per_call else 0)
        scaffold = 2 if sampled and tokens_per_call else 0
        nodes.append(
            vf.MessageNode(
                parent=len(nodes) - 1 if nodes else None,
                message=message,
                sampled=sampled,
                token_ids=list(range(10, 10 + scaffold + n)),
                mask=[False] * scaffold + [sampled] * n,
                logprobs=[-0.5] * n if sampled else [],
            )
        )
        return len(nodes) - 1

    add(vf.SystemMessage(content="You are a careful solver."))
    add(vf.UserMessage(content=f"Solve task {task}."))
    mapping: list[list[int]] = []
    for t in range(len(turn_rewards)):
        if t:
            add(vf.UserMessage(content=f"Turn {t} scored {turn_rewards[t - 1]}; try again."))
        sampled: list[int] = []
        for c in range(calls_per_turn - 1):
            call = vf.ToolCall(id=f"call-{t}-{c}", name="run", arguments="{}")
            sampled.append(add(vf.AssistantMessage(content=None, tool_calls=[call]), sampled=True))
            add(vf.ToolMessage(tool_call_id=call.id, content="ok"))
        reply = f"Attempt {t}: " + "x" * reply_chars
        sampled.append(add(vf.AssistantMessage(content=reply), sampled=True))
        mapping.append(sampled)

    info: dict[str, Any] = {"turn_rewards": list(turn_rewards)}
    if turn_nodes:
        info["turn_nodes"] = mapping
    elif calls_per_turn != 1:
        raise ValueError("without turn_nodes every sampled node is a turn: use calls_per_turn=1")
    trace = vf.Trace(
        task=task_info,
        agent=vf.AgentInfo(
            config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name=agent, trainable=trainable
        ),
        nodes=nodes,
        info=info,
        is_completed=True,
        ok=ok,
    )
    if turn_rewards:
        trace.record_reward("final_turn", turn_rewards[-1])
    if not ok:
        trace.errors.append(vf.Error(type="ProviderError", message="upstream returned HTTP 500"))
    return vf.Episode(
        env=vf.EnvInfo(id=env),
        task=task_info,
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


# Stand-ins substituted per line in a record serialised once per turn count.
_SLOTS = {"episode": "@EPISODE@", "trace": "@TRACE@", "key": "@KEY@", "rewards": "@REWARDS@"}


def write_large_traces(
    path: Path | str,
    *,
    target_bytes: int,
    rollouts: int = 8,
    max_turns: int = 6,
    tokens_per_call: int = 0,
    reply_chars: int = 1500,
    seed: int = 0,
) -> dict[str, int]:
    """Write a traces file of about ``target_bytes``, fast enough for gigabytes.

    One real episode per turn count 1..``max_turns`` is built with :func:`make_episode` and
    serialised once; each line then substitutes its own episode id, trace id, task key and
    turn rewards into that record. Every task gets ``rollouts`` episodes (the last block may
    be cut short by the size);
    each block of 64 tasks is interleaved line by line (as concurrent rollouts finish), so a
    group's episodes are spread over the file. Rewards are random multiples of 0.25 that tend
    to rise with the turn.

    Returns ``{"episodes": n, "bytes": size, "turns": total turns}``.
    """
    rng = random.Random(seed)
    templates = []
    for n_turns in range(1, max_turns + 1):
        record = make_episode(
            [0.0] * n_turns, tokens_per_call=tokens_per_call, reply_chars=reply_chars
        ).to_record()
        record["id"] = _SLOTS["episode"]
        trace = record["traces"][0]
        trace["id"] = _SLOTS["trace"]
        trace["info"]["turn_rewards"] = _SLOTS["rewards"]
        for task in (record["task"], trace["task"]):
            task["key"] = _SLOTS["key"]
        templates.append(json.dumps(record).replace(f'"{_SLOTS["rewards"]}"', _SLOTS["rewards"]))

    written = episodes = turns = 0
    with Path(path).open("w", encoding="utf-8") as f:
        while written < target_bytes:
            block, position = divmod(episodes, 64 * rollouts)
            task = 64 * block + position % 64
            n_turns = rng.randint(1, max_turns)
            skill = rng.random()
            rewards = [
                min(1.0, round(4 * skill * rng.random() + t / max_turns) / 4) for t in range(n_turns)
            ]
            line = (
                templates[n_turns - 1]
                .replace(_SLOTS["episode"], f"ep{episodes:010d}")
                .replace(_SLOTS["trace"], f"tr{episodes:010d}")
                .replace(_SLOTS["key"], f"task-{task}")
                .replace(_SLOTS["rewards"], json.dumps(rewards))
                + "\n"
            )
            f.write(line)
            written += len(line)
            episodes += 1
            turns += n_turns
    return {"episodes": episodes, "bytes": written, "turns": turns}
