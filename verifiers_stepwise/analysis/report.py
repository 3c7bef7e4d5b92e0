"""Results of ``vf-stepwise advantages``: the report (a ``Report``, printed as rich tables or as
JSON) and the per-turn JSONL file (its fields: docs/vf-stepwise.md, "Per-turn JSONL")."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.analysis.stats import TurnRow, turn_stats
from verifiers_stepwise.analysis.tracefile import PROBLEMS, Collected, Counts, Grouped
from verifiers_stepwise.estimators import Estimator, zero_advantage_groups
from verifiers_stepwise.estimators.base import Estimate

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Config", "ConfigSummary", "Groups", "Report", "number", "render", "summary", "write_turn_rows"]


@dataclass(frozen=True)
class Config:
    """One estimator config on the batch: its label, the estimator, and what it estimated."""

    label: str
    estimator: Estimator
    estimate: Estimate


@dataclass(frozen=True)
class ConfigSummary:
    """What the report says of one config: its fields, groups left without credit, per-turn stats."""

    label: str
    config: dict[str, Any]
    zero_advantage_groups: int
    turns: list[TurnRow]


@dataclass(frozen=True)
class Groups:
    count: int
    by: dict[str, int]
    """How many groups each id field formed (``group.id``, ``task.key``, ``task.hash``)."""
    sizes: dict[int, int]
    """Groups by their number of trajectories, smallest first."""
    singleton: int


@dataclass(frozen=True)
class Report:
    """Everything ``vf-stepwise advantages`` reports; ``--json`` prints it (``dataclasses.asdict``)."""

    files: list[str]
    counts: Counts
    skipped: dict[str, int]
    """Skipped items by kind (``tracefile.PROBLEMS``)."""
    problems: list[str]
    groups: Groups
    estimators: list[ConfigSummary]
    """The main config, and ``--compare``'s when given."""
    sweep: list[ConfigSummary]
    """The main config at each of ``--gammas``."""
    output: Path | None
    plot: Path | None


def summary(
    collected: Collected,
    grouped: Grouped,
    configs: Sequence[Config],
    sweep: Sequence[Config],
    output: Path | None,
    plot: Path | None = None,
) -> Report:
    """Everything the command reports."""
    batch = grouped.batch

    def config_summary(config: Config) -> ConfigSummary:
        return ConfigSummary(
            label=config.label,
            config=config.estimator.config.model_dump(mode="json"),
            zero_advantage_groups=int(zero_advantage_groups(batch, config.estimate.advantages).sum()),
            turns=turn_stats(batch, config.estimate, grouped.tokens),
        )

    sizes = Counter(batch.group_sizes.tolist())
    return Report(
        files=collected.files,
        counts=collected.counts,
        skipped={kind: collected.skipped[kind] for kind in PROBLEMS},
        problems=collected.problems,
        groups=Groups(
            count=batch.n_groups,
            by=dict(Counter(key.by for key in collected.groups)),
            sizes=dict(sorted(sizes.items())),
            singleton=sizes[1],
        ),
        estimators=[config_summary(config) for config in configs],
        sweep=[config_summary(config) for config in sweep],
        output=output,
        plot=plot,
    )


def render(console: Any, report: Report) -> None:
    """Print the report as rich text and tables."""
    _render_counts(console, report)
    tokens = any(row.mean_tokens for entry in report.estimators for row in entry.turns)
    tables, needed = _credit_tables(console, report.estimators, tokens)
    if len(tables) > 1:
        console.print(
            f"(split in {len(tables)}: one table needs {needed} columns, the console has {console.width};"
            " COLUMNS sets it)"
        )
    for table in tables:
        console.print(table)
    if report.sweep:
        columns: list[_Column] = [(name, 0, _SHARED[name]) for name in ("turn", "count")]
        for k, entry in enumerate(report.sweep):
            gamma = entry.config["gamma"]
            columns += [(f"R γ={gamma:g}", k, _STATISTICS[0][1]), (f"A γ={gamma:g}", k, _STATISTICS[1][1])]
        title = f"gamma sweep of {report.estimators[0].label}\nR: mean return, A: mean advantage, per turn index"
        console.print(_turn_table(title, report.sweep, columns))
    if report.output:
        console.print(f"per-turn results: {report.output}", highlight=False)
    if report.plot:
        console.print(f"plot: {report.plot}", highlight=False)


def _render_counts(console: Any, report: Report) -> None:
    """What was read, scored, left out and skipped."""
    counts, groups = report.counts, report.groups
    console.print(
        f"[bold]read[/] {len(report.files)} file(s): {counts.lines:,} lines"
        f" ({counts.blank_lines:,} blank), {counts.episodes:,} episodes, {counts.traces:,} traces"
    )
    by = ", ".join(f"{field} {n:,}" for field, n in groups.by.items())
    sizes = ", ".join(f"{n:,}×{size}" for size, n in groups.sizes.items())
    console.print(
        f"[bold]scored[/] {counts.trajectories:,} trajectories, {counts.turns:,} turns,"
        f" in {groups.count:,} groups (by {by or '-'}; sizes {sizes or '-'})"
    )
    if groups.singleton:
        console.print(f"  {groups.singleton:,} singleton groups: nothing to compare, advantage 0")
    excluded = {
        "traces of untrainable agents": counts.not_trainable,
        "errored traces (left out of their groups, as score_group does)": counts.errored,
    }
    if any(excluded.values()):
        console.print("  " + "; ".join(f"{n:,} {what}" for what, n in excluded.items() if n))
    skipped = [f"{n:,} {PROBLEMS[kind]}" for kind, n in report.skipped.items() if n]
    if skipped:
        console.print(f"[bold yellow]skipped[/] {', '.join(skipped)}")
        for problem in report.problems:
            console.print(f"  {problem}", style="yellow", markup=False, highlight=False)
        total = sum(report.skipped.values())
        if total > len(report.problems):
            console.print(f"  ... and {total - len(report.problems):,} more")


_Cell = Callable[[TurnRow], str]
_Column = tuple[str, int, _Cell]
"""A table column: header, which config's rows, and the cell of a row."""

_SHARED: dict[str, _Cell] = {
    "turn": lambda row: str(row.turn),
    "count": lambda row: f"{row.count:,}",
    "tokens": lambda row: f"{row.mean_tokens:.1f}",
    "mean reward": lambda row: number(row.mean_reward),
}
"""The columns every config shares."""
_STATISTICS: tuple[tuple[str, _Cell], ...] = (
    ("mean return", lambda row: number(row.mean_return)),
    ("mean adv", lambda row: number(row.advantage_mean, "+")),
    ("std adv", lambda row: number(row.advantage_std)),
    ("min adv", lambda row: number(row.advantage_min, "+")),
    ("max adv", lambda row: number(row.advantage_max, "+")),
)
"""Each config's per-turn statistics, in table order."""


def _turn_table(title: str | None, entries: Sequence[ConfigSummary], columns: Sequence[_Column]) -> Any:
    """One row per turn index (count, tokens and reward do not depend on the config)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for t in range(len(entries[0].turns)):
        table.add_row(*(cell(entries[k].turns[t]) for _, k, cell in columns))
    return table


def _credit_tables(console: Any, entries: Sequence[ConfigSummary], tokens: bool) -> tuple[list[Any], int]:
    """The per-turn tables, and the width one table of every statistic needs: that one table
    where the console is wide enough, else the statistics in order over as few tables as fit
    (rich would cut numbers short to fit one)."""

    def width(table: Any) -> int:
        return int(console.measure(table, options=console.options.update_width(1 << 16)).minimum)  # unclamped

    needed = width(_credit_table(entries, tokens, _STATISTICS, first=True))
    parts = [[_STATISTICS[0]]]  # one part, the whole table, where it fits
    for statistic in _STATISTICS[1:]:
        if width(_credit_table(entries, tokens, [*parts[-1], statistic], first=len(parts) == 1)) <= console.width:
            parts[-1].append(statistic)
        else:
            parts.append([statistic])
    return [_credit_table(entries, tokens, part, first=i == 0) for i, part in enumerate(parts)], needed


def _credit_table(
    entries: Sequence[ConfigSummary], tokens: bool, statistics: Sequence[tuple[str, _Cell]], first: bool
) -> Any:
    """The per-turn table of ``statistics``, each main column beside ``--compare``'s; the
    ``first`` table has the title and the columns the configs share, a later one only the turn."""

    def zeros(entry: ConfigSummary) -> str:
        return f"{entry.zero_advantage_groups:,} groups with all advantages 0"

    if len(entries) == 1:
        tags, title = [""], f"{entries[0].label}\n{zeros(entries[0])}"
    else:
        tags = ["\nmain", "\ncompare"]
        title = "\n".join(f"{tag.strip()}: {e.label}\n  {zeros(e)}" for tag, e in zip(tags, entries))
    shared = [name for name in _SHARED if name != "tokens" or tokens] if first else ["turn"]
    columns = [(name, 0, _SHARED[name]) for name in shared]
    columns += [(header + tag, k, cell) for header, cell in statistics for k, tag in enumerate(tags)]
    return _turn_table(title if first else None, entries, columns)


def number(value: float | None, sign: str = "") -> str:
    """Four decimals, as in the tables; a value that rounds to zero prints as 0, never -0; "-"
    for none (the mean return of an estimator not built on returns)."""
    return "-" if value is None else f"{round(value, 4) + 0.0:{sign}.4f}"


def write_turn_rows(path: Path, collected: Collected, grouped: Grouped, configs: Sequence[Config]) -> None:
    """Write the per-turn JSONL file a trajectory at a time: no Python float per turn of the
    whole run is held in memory."""
    batch = grouped.batch
    per_turn: list[tuple[str, np.ndarray | None]] = [("reward", batch.rewards), ("tokens", grouped.tokens)]
    for prefix, config in zip(("", "compare_"), configs):
        per_turn += [(prefix + "return", config.estimate.returns), (prefix + "advantage", config.estimate.advantages)]
    starts, ends = batch.trajectory_starts.tolist(), batch.trajectory_ends.tolist()
    with path.open("w", encoding="utf-8") as f:
        for j, (source, group) in enumerate(zip(grouped.order.tolist(), batch.group_of_trajectory.tolist())):
            start, end = starts[j], ends[j]
            key = collected.groups[group]
            head = json.dumps(
                {
                    "file": collected.files[collected.file[source]],
                    "line": collected.line[source],
                    "episode": collected.episode_ids[source],
                    "trace": collected.trace_ids[source],
                    "agent": collected.agents[collected.agent[source]],
                    "group": group,
                    "group_by": key.by,
                    "group_id": key.id,
                }
            )[:-1]
            columns = [(name, values[start:end].tolist() if values is not None else None) for name, values in per_turn]
            for t in range(end - start):
                # Numbers are finite floats and ints: repr() is exactly what json writes.
                numbers = "".join(
                    f', "{name}": {"null" if column is None else repr(column[t])}' for name, column in columns
                )
                f.write(f'{head}, "turn": {t}, "turns": {end - start}{numbers}}}\n')
