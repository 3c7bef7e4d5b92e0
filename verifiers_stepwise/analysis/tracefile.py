"""Stream ``traces.jsonl`` files into grouped per-turn rewards, in bounded memory.

Each line (an ``Episode.to_record()``, as ``vf-eval`` writes it) is parsed with
``vf.WireEpisode.model_validate_json`` and dropped once its per-turn rewards are taken: per
trajectory only its turn rewards, token counts, place in the file and ids stay in memory, never
the messages or token streams. Groups are ``GroupKey``s, trajectories what ``score_group`` would
score (``credit.scored_turns``), bad input the kinds in ``PROBLEMS``; the rules in full:
docs/vf-stepwise.md.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.traces.credit import MissingTurnRewards, exclusion_reason, scored_turns

if TYPE_CHECKING:
    from verifiers_stepwise.traces.credit import Missing
    from verifiers_stepwise.traces.turns import Reading

__all__ = ["BadInput", "Collected", "Counts", "GroupKey", "Grouped", "PROBLEMS", "Strings", "collect"]

PROBLEMS: dict[str, str] = {
    "malformed": "malformed lines",
    "duplicate": "duplicate episodes",
    "no_group": "episodes without a group or task id",
    "mixed_group": "episodes in a group of another task",
    "no_turn_rewards": "traces without turn rewards",
    "bad_turns": "traces with invalid turns",
}
"""Kinds of bad input, with the plural noun used when counting them."""

_LINE_BITS = 40
_LINE_MASK = (1 << _LINE_BITS) - 1

MAX_KEPT_PROBLEMS = 20
"""Skipped items whose messages are kept for display; the rest are only counted."""


class BadInput(TraceError):
    """An input line or trace that cannot be scored: ``path:line: what``."""


@dataclass(frozen=True)
class GroupKey:
    run: str
    env: str
    by: str
    """The field the id came from: "group.id", "task.key" or "task.hash"."""
    id: str


class Strings:
    """An append-only list of str packed in one buffer: no Python object per item."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("q")

    def append(self, text: str) -> None:
        self.data += text.encode()
        self.ends.append(len(self.data))

    def __getitem__(self, i: int) -> str:
        return self.data[self.ends[i - 1] if i else 0 : self.ends[i]].decode()


@dataclass
class Counts:
    """Every line and trace read: scored (a trajectory), excluded or skipped (``Collected.skipped``)."""

    lines: int = 0
    blank_lines: int = 0
    episodes: int = 0
    traces: int = 0
    trajectories: int = 0
    turns: int = 0
    not_trainable: int = 0
    errored: int = 0
    """Excluded: ``trace.ok`` or ``episode.ok`` false."""


@dataclass
class Collected:
    """Per-turn rewards of every usable trajectory, in read order, plus the accounting."""

    files: list[str] = field(default_factory=list)
    groups: list[GroupKey] = field(default_factory=list)
    # per turn, trajectories one after another in read order
    rewards: array = field(default_factory=lambda: array("d"))
    tokens: array = field(default_factory=lambda: array("q"))
    """Sampled tokens of each turn (0 on eval-client traces, which carry no token ids)."""
    # per trajectory
    lengths: array = field(default_factory=lambda: array("q"))
    group: array = field(default_factory=lambda: array("q"))
    file: array = field(default_factory=lambda: array("q"))
    line: array = field(default_factory=lambda: array("q"))
    agent: array = field(default_factory=lambda: array("q"))
    """Index into ``agents``."""
    episode_ids: Strings = field(default_factory=lambda: Strings())
    trace_ids: Strings = field(default_factory=lambda: Strings())
    agents: list[str] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    skipped: Counter = field(default_factory=Counter)
    """Skipped items by problem kind (see PROBLEMS)."""
    problems: list[str] = field(default_factory=list)
    """The first MAX_KEPT_PROBLEMS skipped items (``path:line: what``)."""
    kinds: Counter = field(default_factory=Counter)
    """Usable traces by the kind of credit they declare (``info["credit_kind"]``; None: none)."""

    def grouped(self) -> Grouped:
        """The trajectories reordered group by group (read order inside a group)."""
        lengths = np.frombuffer(self.lengths, dtype=np.int64)
        group = np.frombuffer(self.group, dtype=np.int64)
        order = np.argsort(group, kind="stable")
        new_lengths = lengths[order]
        starts = np.cumsum(lengths) - lengths
        new_starts = np.cumsum(new_lengths) - new_lengths
        # source position of every turn of the regrouped layout
        turns = np.repeat(starts[order] - new_starts, new_lengths) + np.arange(int(lengths.sum()))
        batch = RaggedBatch(
            np.frombuffer(self.rewards, dtype=np.float64)[turns],
            new_lengths,
            np.bincount(group, minlength=len(self.groups)),
        )
        return Grouped(batch, order, np.frombuffer(self.tokens, dtype=np.int64)[turns])


@dataclass(frozen=True)
class Grouped:
    batch: RaggedBatch
    """Groups in first-seen order, each group's trajectories in read order."""
    order: np.ndarray
    """(n_traj,) read-order index of each trajectory of ``batch``."""
    tokens: np.ndarray
    """(n_turns,) sampled tokens of each turn, in the layout of ``batch.rewards``."""


def collect(
    paths: Iterable[Path | str],
    *,
    skip_bad: bool = False,
    missing: Missing = "final_turn",
    progress: Callable[[int], None] | None = None,
    reading: Reading = "rewards",
) -> Collected:
    """Read traces files one line at a time and gather their per-turn rewards by group.

    Line numbers restart in each file; ``skip_bad`` skips and counts bad input instead of
    raising :class:`BadInput`; ``missing`` and ``reading`` are ``credit.scored_turns``'s (as
    ``score_group`` applies them); ``progress`` is called with the byte count of every line.
    """
    reader = _Reader(skip_bad, missing, reading)
    for path in paths:
        reader.read(Path(path), progress)
    reader.out.groups = list(reader.group_index)  # dicts keep insertion order: index order
    reader.out.agents = list(reader.agent_index)
    return reader.out


class _Reader:
    def __init__(self, skip_bad: bool, missing: Missing, reading: Reading) -> None:
        self.skip_bad = skip_bad
        self.missing = missing
        self.reading = reading
        self.out = Collected()
        self.group_index: dict[GroupKey, int] = {}
        self.agent_index: dict[str, int] = {}
        self.group_task: dict[GroupKey, tuple[str | None, int]] = {}
        self.seen_episodes: dict[str, int] = {}
        """episode id -> where it was read. A place in the input ("here") is one int, the file
        index and the line number packed (a str per episode would be the most memory held)."""

    def where(self, here: int) -> str:
        return f"{self.out.files[here >> _LINE_BITS]}:{here & _LINE_MASK}"

    def problem(self, kind: str, here: int, message: str) -> None:
        problem = f"{self.where(here)}: {message}"
        if not self.skip_bad:
            raise BadInput(problem)
        self.out.skipped[kind] += 1
        if len(self.out.problems) < MAX_KEPT_PROBLEMS:
            self.out.problems.append(problem)

    def read(self, path: Path, progress: Callable[[int], None] | None) -> None:
        import verifiers.v1 as vf
        from pydantic import ValidationError

        out = self.out
        file_index = len(out.files)
        out.files.append(str(path))
        with path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if progress is not None:
                    progress(len(line))
                out.counts.lines += 1
                if line.isspace():
                    out.counts.blank_lines += 1
                    continue
                here = file_index << _LINE_BITS | number
                try:
                    episode = vf.WireEpisode.model_validate_json(line)
                except ValidationError as e:
                    self.problem("malformed", here, _describe(e))
                    continue
                out.counts.episodes += 1
                self.episode(episode, here)

    def episode(self, episode: Any, here: int) -> None:
        first = self.seen_episodes.setdefault(episode.id, here)
        if first != here:
            self.problem("duplicate", here, f"episode {episode.id!r} was already read at {self.where(first)}")
            key = None
        else:
            key = self.task_group(episode, here)
        if key is None:  # its traces are counted, none scored
            self.out.counts.traces += len(episode.traces)
            return
        for position in range(len(episode.traces)):
            self.trace(episode, position, key, here)

    def task_group(self, episode: Any, here: int) -> GroupKey | None:
        """The episode's group, or None after reporting why it has none."""
        run = episode.run.id if episode.run is not None else ""
        env = episode.env.id
        task = episode.task.key or episode.task.hash
        if episode.group is None:
            if task:
                return GroupKey(run, env, "task.key" if episode.task.key else "task.hash", task)
            self.problem(
                "no_group",
                here,
                "episode has no group.id and its task has no key or hash, so it cannot be grouped",
            )
            return None
        if not episode.group.id:
            self.problem("no_group", here, "episode.group.id is empty")
            return None
        key = GroupKey(run, env, "group.id", episode.group.id)
        first_task, first_here = self.group_task.setdefault(key, (task, here))
        if first_task != task:
            self.problem(
                "mixed_group",
                here,
                f"group {episode.group.id!r} mixes tasks: task {task!r} here, "
                f"{first_task!r} at {self.where(first_here)}",
            )
            return None
        return key

    def trace(self, episode: Any, position: int, key: GroupKey, here: int) -> None:
        out = self.out
        trace = episode.traces[position]
        out.counts.traces += 1
        if not trace.agent.trainable:
            out.counts.not_trainable += 1
            return
        if exclusion_reason(episode, trace) is not None:
            out.counts.errored += 1
            return
        try:
            turns, _ = scored_turns(trace, self.missing, self.reading)
        except MissingTurnRewards:
            message = (
                "has no info['turn_rewards'] (was it made by a stepwise environment? --missing final_turn "
                "scores its trace reward as the last turn's, as score_group does by default)"
            )
            self.problem("no_turn_rewards", here, f"{_name(trace, position)} {message}")
            return
        except TraceError as e:
            self.problem("bad_turns", here, f"{_name(trace, position)}: {e}")
            return
        group = self.group_index.setdefault(key, len(self.group_index))
        agent = self.agent_index.setdefault(trace.agent.name, len(self.agent_index))
        out.rewards.extend(turns.rewards)
        out.tokens.extend(sum(trace.nodes[i].mask.count(True) for i in nodes) for nodes in turns.nodes)
        out.lengths.append(len(turns.rewards))
        out.counts.trajectories += 1
        out.counts.turns += len(turns.rewards)
        out.group.append(group)
        out.file.append(here >> _LINE_BITS)
        out.line.append(here & _LINE_MASK)
        out.agent.append(agent)
        out.episode_ids.append(episode.id)
        out.trace_ids.append(trace.id)
        out.kinds[(trace.info or {}).get("credit_kind")] += 1


def _name(trace: Any, position: int) -> str:
    return f"trace {position} (agent {trace.agent.name!r})"


def _describe(error: Any) -> str:
    """One line for a pydantic ValidationError: the first problem, and how many more."""
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['ctx']['error']})"
    where = ".".join(str(part) for part in first["loc"]) or "record"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"not a verifiers episode record: {where}: {first['msg']}{more}"
