"""Results of ``vf-stepwise advantages``: the summary (as a dict and as rich tables) and the
per-turn JSONL file.

JSONL: one object per turn of every scored trajectory, groups in first-seen order, each
group's trajectories in read order:

    file, line          where the episode is (line numbers from 1)
    episode, trace      the episode's and the trace's ids
    agent, group        the trace's agent name; the group index (0-based, first seen first)
    group_by, group_id  the field the group was formed by and its value (see tracefile)
    turn, turns         turn index t (0-based) and the trajectory's number of turns T
    reward, tokens      r_t and the turn's sampled tokens (0 without token ids)
    return, advantage   R_t and A_t of the main estimator config
    compare_return, compare_advantage   the same for ``--compare``, when given
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verifiers_stepwise.analysis.stats import Credit, turn_stats
from verifiers_stepwise.analysis.tracefile import PROBLEMS, Collected, Grouped
from verifiers_stepwise.estimators import zero_advantage_groups

__all__ = ["number", "render", "summary", "write_turn_rows"]


def summary(
    collected: Collected,
    grouped: Grouped,
    credits: list[Credit],
    sweep: list[Credit],
    output: Path | None,
    plot: Path | None = None,
) -> dict[str, Any]:
    """Everything the command reports, as plain JSON-able values."""
    batch = grouped.batch
    sizes = Counter(batch.group_sizes.tolist())

    def config_summary(credit: Credit) -> dict[str, Any]:
        stats = turn_stats(batch, credit, grouped.tokens)
        return {
            "label": credit.label,
            "config": credit.estimator.config.model_dump(mode="json"),
            "returns": {"gamma": credit.gamma, "aggregation": credit.aggregation},
            "zero_advantage_groups": int(zero_advantage_groups(batch, credit.advantages).sum()),
            "turns": stats.rows(),
        }

    return {
        "files": collected.files,
        "counts": {
            "lines": collected.counts["lines"],
            "blank_lines": collected.counts["blank_lines"],
            "episodes": collected.counts["episodes"],
            "traces": collected.counts["traces"],
            "trajectories": batch.n_trajectories,
            "turns": batch.n_turns,
            "not_trainable": collected.counts["not_trainable"],
            "errored": collected.counts["errored"],
        },
        "skipped": {kind: collected.skipped[kind] for kind in PROBLEMS},
        "problems": [str(p) for p in collected.problems],
        "groups": {
            "count": batch.n_groups,
            "by": dict(Counter(key.by for key in collected.groups)),
            "sizes": {str(size): n for size, n in sorted(sizes.items())},
            "singleton": sizes.get(1, 0),
        },
        "estimators": [config_summary(credit) for credit in credits],
        "sweep": [config_summary(credit) for credit in sweep],
        "output": str(output) if output is not None else None,
        "plot": str(plot) if plot is not None else None,
    }


def render(console: Any, report: dict[str, Any]) -> None:
    """Print the summary as rich text and tables."""
    from rich.table import Table

    counts, groups = report["counts"], report["groups"]
    console.print(
        f"[bold]read[/] {len(report['files'])} file(s): {counts['lines']:,} lines"
        f" ({counts['blank_lines']:,} blank), {counts['episodes']:,} episodes,"
        f" {counts['traces']:,} traces"
    )
    by = ", ".join(f"{field} {n:,}" for field, n in groups["by"].items())
    sizes = ", ".join(f"{n:,}×{size}" for size, n in groups["sizes"].items())
    console.print(
        f"[bold]scored[/] {counts['trajectories']:,} trajectories, {counts['turns']:,} turns,"
        f" in {groups['count']:,} groups (by {by or '-'}; sizes {sizes or '-'})"
    )
    if groups["singleton"]:
        singleton = groups["singleton"]
        console.print(f"  {singleton:,} singleton groups: nothing to compare, advantage 0")
    excluded = []
    if counts["not_trainable"]:
        excluded.append(f"{counts['not_trainable']:,} traces of untrainable agents")
    if counts["errored"]:
        excluded.append(f"{counts['errored']:,} errored traces (left out of their groups, as score_group does)")
    if excluded:
        console.print("  " + "; ".join(excluded))
    skipped = [f"{n:,} {PROBLEMS[kind]}" for kind, n in report["skipped"].items() if n]
    if skipped:
        console.print(f"[bold yellow]skipped[/] {', '.join(skipped)}")
        for problem in report["problems"]:
            console.print(f"  [yellow]{problem}[/]", markup=False, highlight=False)
        total = sum(report["skipped"].values())
        if total > len(report["problems"]):
            console.print(f"  ... and {total - len(report['problems']):,} more")

    tokens = any(row["mean_tokens"] for e in report["estimators"] for row in e["turns"])
    tables, needed = _credit_tables(console, report["estimators"], tokens)
    if len(tables) > 1:
        console.print(
            f"(split in {len(tables)}: one table needs {needed} columns, the console has {console.width};"
            " COLUMNS sets it)"
        )
    for table in tables:
        console.print(table)

    if report["sweep"]:
        sweep = report["sweep"]
        table = Table(
            title=f"gamma sweep of {report['estimators'][0]['label']}\n"
            "R: mean return, A: mean advantage, per turn index",
            title_justify="left",
        )
        table.add_column("turn", justify="right")
        table.add_column("count", justify="right")
        for entry in sweep:
            gamma = entry["returns"]["gamma"]
            table.add_column(f"R γ={gamma:g}", justify="right")
            table.add_column(f"A γ={gamma:g}", justify="right")
        for t, row in enumerate(sweep[0]["turns"]):
            cells = []
            for entry in sweep:
                cells += [number(entry["turns"][t]["mean_return"]), number(entry["turns"][t]["advantage_mean"], "+")]
            table.add_row(str(t), f"{row['count']:,}", *cells)
        console.print(table)
    if report["output"]:
        console.print(f"per-turn results: {report['output']}", highlight=False)
    if report["plot"]:
        console.print(f"plot: {report['plot']}", highlight=False)


_CREDIT_COLUMNS = (
    ("mean return", "mean_return", ""),
    ("mean adv", "advantage_mean", "+"),
    ("std adv", "advantage_std", ""),
    ("min adv", "advantage_min", "+"),
    ("max adv", "advantage_max", "+"),
)
"""Each config's per-turn columns: header, row key, sign format."""


def _credit_tables(console: Any, entries: list[dict[str, Any]], tokens: bool) -> tuple[list[Any], int]:
    """The per-turn tables, and the width one table of every statistic needs: that one table
    where the console is wide enough, else the statistics in order over as few tables as fit
    (rich would cut numbers short to fit one), so each statistic of ``--compare``'s two configs
    stays side by side, numbers whole, down to about 60 columns."""

    def width(table: Any) -> int:
        return int(console.measure(table, options=console.options.update_width(1 << 16)).minimum)  # unclamped

    whole = _credit_table(entries, tokens, _CREDIT_COLUMNS, first=True)
    needed = width(whole)
    if needed <= console.width:
        return [whole], needed
    parts = [[_CREDIT_COLUMNS[0]]]
    for column in _CREDIT_COLUMNS[1:]:
        if width(_credit_table(entries, tokens, [*parts[-1], column], first=len(parts) == 1)) <= console.width:
            parts[-1].append(column)
        else:
            parts.append([column])
    return [_credit_table(entries, tokens, columns, first=i == 0) for i, columns in enumerate(parts)], needed


def _credit_table(
    entries: list[dict[str, Any]], tokens: bool, columns: Sequence[tuple[str, str, str]], first: bool
) -> Any:
    """The per-turn table of ``columns`` for the main config, or for it and ``--compare``'s side
    by side: each statistic's column for the main config beside the compared one's, so a turn
    index's numbers line up on one row. The ``first`` table has the title and the columns the
    configs share (turn, count, tokens, mean reward) once; a later one only the turn."""
    from rich.table import Table

    def returns(entry: dict[str, Any]) -> str:
        spec = entry["returns"]
        return (
            f"returns: γ={spec['gamma']:g}, {spec['aggregation']};"
            f" {entry['zero_advantage_groups']:,} groups with all advantages 0"
        )

    if len(entries) == 1:
        tags, title = [""], f"{entries[0]['label']}\n{returns(entries[0])}"
    else:
        tags = ["\nmain", "\ncompare"]
        title = "\n".join(f"{tag.strip()}: {e['label']}\n  {returns(e)}" for tag, e in zip(tags, entries))
    table = Table(title=title if first else None, title_justify="left")
    shared = ("turn", "count", *(("tokens",) if tokens else ()), "mean reward") if first else ("turn",)
    for name in shared:
        table.add_column(name, justify="right")
    for header, _, _ in columns:
        for tag in tags:
            table.add_column(header + tag, justify="right")
    for t, row in enumerate(entries[0]["turns"]):  # count, tokens and reward do not depend on the config
        cells = [str(row["turn"]), f"{row['count']:,}", *((f"{row['mean_tokens']:.1f}",) if tokens else ())]
        table.add_row(
            *(cells + [number(row["mean_reward"])] if first else cells[:1]),
            *(number(e["turns"][t][key], sign) for _, key, sign in columns for e in entries),
        )
    return table


def number(value: float, sign: str = "") -> str:
    """Four decimals, as in the tables; a value that rounds to zero prints as 0, never -0."""
    return f"{round(value, 4) + 0.0:{sign}.4f}"


def write_turn_rows(path: Path, collected: Collected, grouped: Grouped, credits: list[Credit]) -> None:
    """Write the per-turn JSONL file (format in the module docstring).

    Arrays become Python numbers a chunk of trajectories at a time, so the file of a large run
    is written without a Python float per turn of the whole run in memory.
    """
    batch = grouped.batch
    per_turn = [("reward", batch.rewards), ("tokens", grouped.tokens)]
    for prefix, credit in zip(("", "compare_"), credits):
        per_turn += [(prefix + "return", credit.returns), (prefix + "advantage", credit.advantages)]
    ends = batch.trajectory_ends
    with path.open("w", encoding="utf-8") as f:
        for lo in range(0, batch.n_trajectories, _CHUNK):
            hi = min(lo + _CHUNK, batch.n_trajectories)
            first = int(ends[lo] - batch.lengths[lo])
            columns = [(name, values[first : ends[hi - 1]].tolist()) for name, values in per_turn]
            turn = 0
            for j in range(lo, hi):
                source = int(grouped.order[j])
                group = int(batch.group_of_trajectory[j])
                key = collected.groups[group]
                length = int(batch.lengths[j])
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
                for t in range(length):
                    # Numbers are finite floats and ints: repr() is exactly what json writes.
                    values = "".join(f', "{name}": {column[turn]!r}' for name, column in columns)
                    f.write(f'{head}, "turn": {t}, "turns": {length}{values}}}\n')
                    turn += 1


_CHUNK = 4096
"""Trajectories converted to Python numbers at once when writing rows."""
