"""Summaries of training runs: a markdown table per task and learning-curve plots.

Episodes to target: the training episodes consumed when the exact success rate first reaches
the target; a seed that never reaches it counts as "more than the budget", so the median is
finite only when more than half of the seeds got there. Signal statistics (``signal.py``) are
taken over each run's learning phase, the steps before it reached the target (all steps when
it never did), and averaged over seeds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from credit_lab.signal import Signal, nanmean
from credit_lab.train import Run

__all__ = [
    "COLUMNS",
    "Row",
    "identical_curves",
    "markdown_table",
    "plot_curves",
    "summarize",
    "wrong_sign_table",
]


COLUMNS = """\
- **episodes to target**: training episodes consumed when the exact success rate first reached
  the target; median over seeds, [fastest–slowest]; `>budget` for a seed that never got there.
- **reached**: seeds that reached the target within the budget.
- **final success**: exact success rate after the last update, mean ± std over seeds.
- **mean success**: the success rate averaged over the whole learning curve (area under it).
- The four signal columns compare each turn's advantage A with the exact advantage
  A* = Q^π − V^π of the action it took, under the task's undiscounted objective, over each
  run's learning phase (before it reached the target) and averaged over seeds:
  - **noise var**: variance of A between turns that made the same decision (same turn, prompt,
    state and action, within one batch); A* is the same for all of them, so this is noise.
  - **grad cos**: cosine between the batch's policy-gradient estimate (the negative gradient of
    the loss, before Adam) and the exact gradient ∇J of the task's objective.
  - **corr(A, A*)**: Pearson correlation over a batch's turns.
  - **wrong sign**: share of Σ|A*| on turns whose A has the opposite sign (by turn below).
"""


@dataclass(frozen=True)
class Row:
    method: str
    seeds: int
    budget: int
    """Training episodes per run."""
    episodes_to_target: tuple[float, ...]
    """Per seed; inf where the target was never reached."""
    final_success: tuple[float, ...]
    mean_success: tuple[float, ...]
    """Per seed, the success rate averaged over the learning curve (area under it)."""
    signal: Signal

    @property
    def median_episodes(self) -> float:
        return float(np.median(self.episodes_to_target))

    @property
    def reached(self) -> int:
        return sum(math.isfinite(e) for e in self.episodes_to_target)

    def as_dict(self) -> dict:
        """Plain JSON data; inf (never reached) and nan (undefined) become None."""
        data = asdict(self) | {"median_episodes": self.median_episodes, "reached": self.reached}
        return _finite(data)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def summarize(method: str, runs: Sequence[Run], target: float) -> Row:
    """One table row from the runs (one per seed) of a method on a task."""
    episodes = tuple(float(e) if (e := run.episodes_to(target)) is not None else math.inf for run in runs)
    signals = [run.signal.summary(run.steps_to(target)) for run in runs]
    per_turn = [s.wrong_sign_by_turn for s in signals if s.wrong_sign_by_turn]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a turn no seed measured stays nan
        by_turn = np.nanmean(per_turn, axis=0) if per_turn else []
    signal = Signal(
        noise_var=nanmean([s.noise_var for s in signals]),
        corr=nanmean([s.corr for s in signals]),
        wrong_sign=nanmean([s.wrong_sign for s in signals]),
        grad_cos=nanmean([s.grad_cos for s in signals]),
        wrong_sign_by_turn=tuple(float(v) for v in by_turn),
    )
    return Row(
        method=method,
        seeds=len(runs),
        budget=int(runs[0].episodes[-1]),
        episodes_to_target=episodes,
        final_success=tuple(float(run.success[-1]) for run in runs),
        mean_success=tuple(float(run.success.mean()) for run in runs),
        signal=signal,
    )


def _episodes(value: float, budget: int) -> str:
    return f"{value:,.0f}" if math.isfinite(value) else f">{budget:,}"


def _number(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "–"


def markdown_table(rows: Sequence[Row], target: float, reference: str) -> str:
    """The main table of one task; ``reference`` is the method the ratio column divides by."""
    ref = next((r for r in rows if r.method == reference), None)
    lines = [
        (
            f"| estimator | episodes to {target:.0%} (median [min–max]) | × {reference} | reached "
            "| final success | mean success | noise var | grad cos | corr(A, A*) | wrong sign |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spread = (
            f"{_episodes(r.median_episodes, r.budget)} "
            f"[{_episodes(min(r.episodes_to_target), r.budget)}–{_episodes(max(r.episodes_to_target), r.budget)}]"
        )
        ratio = (
            r.median_episodes / ref.median_episodes
            if ref is not None and math.isfinite(r.median_episodes) and math.isfinite(ref.median_episodes)
            else math.nan
        )
        final = f"{np.mean(r.final_success):.3f} ± {np.std(r.final_success):.3f}"
        s = r.signal
        lines.append(
            f"| `{r.method}` | {spread} | {_number(ratio)} | {r.reached}/{r.seeds} | {final} "
            f"| {np.mean(r.mean_success):.3f} | {_number(s.noise_var, 3)} | {_number(s.grad_cos)} "
            f"| {_number(s.corr)} | {_number(s.wrong_sign)} |"
        )
    return "\n".join(lines)


def wrong_sign_table(rows: Sequence[Row]) -> str:
    """Wrong-sign share by turn index, the column that says where credit goes wrong."""
    turns = max(len(r.signal.wrong_sign_by_turn) for r in rows)
    lines = [
        "| estimator | " + " | ".join(f"turn {t + 1}" for t in range(turns)) + " |",
        "|---|" + "---|" * turns,
    ]
    for r in rows:
        lines.append(f"| `{r.method}` | " + " | ".join(_number(v) for v in r.signal.wrong_sign_by_turn) + " |")
    return "\n".join(lines)


def identical_curves(runs: dict[str, Sequence[Run]]) -> list[list[str]]:
    """Groups (2 or more) of methods whose success curves are bit-for-bit equal on every seed."""
    groups: list[list[str]] = []
    for method, method_runs in runs.items():
        for group in groups:
            if all(np.array_equal(a.success, b.success) for a, b in zip(runs[group[0]], method_runs)):
                group.append(method)
                break
        else:
            groups.append([method])
    return [g for g in groups if len(g) > 1]


def plot_curves(curves: dict[str, dict[str, Sequence[Run]]], titles: dict[str, str], target: float, path: Path) -> None:
    """One panel per task: mean exact success over seeds against episodes, min–max shaded.

    Methods are numbered in the legend; a panel notes which numbers drew the very same curve
    (on top of each other, so only the last one drawn is visible).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(curves)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 4.4), squeeze=False, sharey=True)
    styles = ["-", "--", "-.", ":"]
    for ax, task in zip(axes[0], tasks):
        number = {method: i + 1 for i, method in enumerate(curves[task])}
        for method, runs in curves[task].items():
            i = number[method] - 1
            success = np.stack([run.success for run in runs])
            episodes = runs[0].episodes
            label = f"[{i + 1}] {method}"
            line = ax.plot(episodes, success.mean(0), styles[i % len(styles)], lw=1.6, label=label)[0]
            ax.fill_between(episodes, success.min(0), success.max(0), color=line.get_color(), alpha=0.12, lw=0)
        same = ["=".join(f"[{number[m]}]" for m in group) for group in identical_curves(curves[task])]
        if same:
            ax.text(0.98, 0.03, "same curve: " + ", ".join(same), transform=ax.transAxes, ha="right", fontsize=8)
        ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.set_title(titles[task], fontsize=9)
        ax.set_xlabel("training episodes")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact success rate")
    axes[0][0].set_ylim(0, 1.02)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=72)
    plt.close(fig)
