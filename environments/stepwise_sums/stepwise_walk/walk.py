"""A walk to a target: each turn the model names a step of 1 to 9 and the env adds it.

Each task is a start s in 10–59 and a distance d in 2–11 to the target s + d (``train``: the
400 pairs whose index is not ≡ 0 mod 5; ``test``: the other 100, held out). The prompt is a
document for a base model to continue: a few finished walks, then the task's::

    Walk to the target: each step adds 1 to 9.
    from 23 to 31: 23 + 8
    at 31. reached.
    from 40 to 50: 40 + 7
    at 47. 47 + 3
    at 50. reached.

    from 34 to 41: 34 +

A reply's first integer is its step. The env adds a step of 1 to 9 and answers ``at 38. 38 +``;
arriving at the target or passing it ends the episode; a reply with no step of 1 to 9 moves
nothing (``a step is 1 to 9. 34 +``). The reward is sparse: the turn that arrives earns 1,
every other turn 0, so a walk earns 1 exactly when it reaches the target within ``max_turns``
steps. Measured on the untrained Gemma 3 270M (temperature 1.0, 2 shots, 3 steps, 120 held-out
episodes): 0.225 reached.

Different rollouts of a task pass through the same positions (34 + 3 + 4 and 34 + 4 + 3 both
stand at 41 after two steps; every rollout starts at 34), so a turn's anchor state
(``turn_state``, what ``gigpo`` groups turns by) is the position it steps from: the
environment's whole state, since the target is the task's.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import verifiers.v1 as vf
from pydantic import Field

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
from verifiers_stepwise.envs.tasksets import CountedTake
from verifiers_stepwise.traces.kinds import CreditKind

__all__ = ["WalkConfig", "WalkData", "WalkEnv", "WalkTask", "WalkTaskset", "WalkTasksetConfig", "position", "step_of"]

HEADER = "Walk to the target: each step adds 1 to 9.\n"
STARTS, DISTANCES = (10, 59), (2, 11)
_FIRST_NUMBER = re.compile(r"\s*(-?\d+)(?!\.?\d)")


def step_of(reply: str | None) -> int | None:
    """The step a reply opens with (its first integer, after spaces) if it is 1 to 9, else None."""
    match = _FIRST_NUMBER.match(reply or "")
    step = int(match.group(1)) if match else None
    return step if step is not None and 1 <= step <= 9 else None


def position(start: int, replies: list[str]) -> int:
    """Where a walk from ``start`` stands after ``replies`` (a reply with no step moves nothing)."""
    return start + sum(step_of(reply) or 0 for reply in replies)


def split_walks(split: str) -> list[tuple[int, int]]:
    if split not in ("train", "test"):
        raise ValueError(f"stepwise-walk: split must be 'train' or 'test', got {split!r}")
    walks = [(s, d) for s in range(STARTS[0], STARTS[1] + 1) for d in range(DISTANCES[0], DISTANCES[1] + 1)]
    return [walk for i, walk in enumerate(walks) if (i % 5 == 0) == (split == "test")]


def finished_walk(start: int, distance: int, rng: random.Random) -> str:
    """A walk that reaches its target in one or two steps: a first step drawn at random from
    those that leave at most 9 to go, then the exact rest."""
    lines, at, target = [f"from {start} to {start + distance}: {start} +"], start, start + distance
    while at < target:
        step = rng.randint(max(1, target - at - 9), min(9, target - at)) if at == start else target - at
        at += step
        lines[-1] += f" {step}"
        lines.append(f"at {at}. " + ("reached." if at == target else f"{at} +"))
    return "\n".join(lines) + "\n"


class WalkData(vf.TaskData):
    start: int
    target: int


class WalkTask(vf.Task[WalkData]):
    @vf.reward
    async def reached(self, task: WalkData, trace: vf.Trace) -> float:
        replies = [str(message.content or "") for message in trace.assistant_messages]
        return float(position(task.start, replies) == task.target)


class WalkTasksetConfig(vf.TasksetConfig):
    split: str = "train"
    """``train`` (400 walks) or ``test`` (100 held-out walks)."""
    shots: int = Field(2, ge=0, le=8)
    """Finished walks in each prompt, drawn from the training walks with the task's own seed."""


class WalkTaskset(CountedTake, vf.Taskset[WalkTask, WalkTasksetConfig]):
    def load(self) -> Iterator[WalkTask]:
        config = self.config
        train = split_walks("train")
        for i, (start, distance) in enumerate(split_walks(config.split)):
            rng = random.Random(f"walk-{config.split}-{i}")
            shots = "".join(finished_walk(s, d, rng) for s, d in rng.sample(train, config.shots))
            prompt = HEADER + shots + f"\nfrom {start} to {start + distance}: {start} +"
            yield WalkTask(WalkData(id=f"walk-{config.split}-{i}", prompt=prompt, start=start, target=start + distance))


class WalkConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(3, ge=1)
    """Steps before the walk gives up (a distance of 10 or 11 takes two)."""
    credit_kind: CreditKind | None = CreditKind.STATES


class WalkEnv(StepwiseMultiTurnEnv, vf.Env[WalkConfig]):
    config: WalkConfig

    def turn_state(self, task: vf.Task, index: int, trace: vf.Trace, message: str | vf.Messages | None) -> int:
        data = task.data
        assert isinstance(data, WalkData)  # this env's tasks are WalkTasks
        return position(data.start, [str(m.content or "") for m in trace.assistant_messages])

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        data = task.data
        assert isinstance(data, WalkData)
        at = position(data.start, [str(m.content or "") for m in turn.trace.assistant_messages])
        if at == data.target:
            return TurnResult(reward=1.0, message=None)
        if at > data.target:
            return TurnResult(reward=0.0, message=None)
        moved = step_of(turn.reply) is not None
        return TurnResult(reward=0.0, message=f"{'at ' + str(at) if moved else 'a step is 1 to 9'}. {at} +")
