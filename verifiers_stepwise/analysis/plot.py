"""The figures: credit per turn index (``vf-stepwise --plot``) and a training run's reward curve.

Both render with matplotlib's Agg canvas (no display, no pyplot state); matplotlib comes with
the ``plot`` extra (and the ``trl`` extra).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from verifiers_stepwise.analysis.report import Config
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.extras import requires

with requires("vf-stepwise --plot (and the TRL command's reward curve)", "matplotlib", extra="plot"):
    from matplotlib.figure import Figure

__all__ = ["SMOOTHING", "plot_credit", "plot_reward_curve"]


def plot_credit(path: Path, batch: RaggedBatch, configs: Sequence[Config]) -> None:
    """Write to ``path`` (a PNG, or the format matplotlib infers from the suffix) the
    per-turn-index distributions of returns and advantages, one column per config: a box plot
    per turn index (box: quartiles, whiskers: 5th to 95th percentile, outliers not drawn) with
    the means joined by a line; configs share each row's y axis, and a config without returns
    leaves its returns panel empty."""
    index = batch.turn_index
    n_index = int(batch.lengths.max())
    order = np.argsort(index, kind="stable")
    counts = np.bincount(index, minlength=n_index)
    cuts = np.cumsum(counts)[:-1]
    positions = np.arange(n_index)
    labels = [f"{t}\nn={n:,}" for t, n in zip(positions, counts)]

    fig = Figure(figsize=(1.0 + 5.0 * len(configs), 7.5), layout="constrained")
    axes = fig.subplots(2, len(configs), sharex=True, sharey="row", squeeze=False)
    for column, config in enumerate(configs):
        rows = (
            (config.estimate.returns, "return R_t", "tab:blue"),
            (config.estimate.advantages, "advantage A_t", "tab:red"),
        )
        for row, (values, name, color) in enumerate(rows):
            ax = axes[row][column]
            if values is None:
                ax.text(0.5, 0.5, "no per-turn returns", ha="center", transform=ax.transAxes)
                continue
            per_turn = np.split(values[order], cuts)
            ax.boxplot(
                per_turn,
                positions=positions,
                whis=(5, 95),
                showfliers=False,
                widths=0.6,
                patch_artist=True,
                boxprops={"facecolor": color, "alpha": 0.25},
                medianprops={"color": "black"},
            )
            ax.plot(positions, [v.mean() for v in per_turn], "o-", color=color, label="mean")
            if row == 1:
                ax.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
            ax.set_ylabel(name)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(loc="best", fontsize="small")
        axes[0][column].set_title(textwrap.fill(config.label, 55), fontsize="medium")
        axes[1][column].set_xticks(positions, labels)
        axes[1][column].set_xlabel("turn index")
    fig.suptitle(f"{batch.n_trajectories:,} trajectories in {batch.n_groups:,} groups", fontsize="medium")
    fig.savefig(path, dpi=110)


SMOOTHING = 5
"""Steps in the reward curve's trailing mean."""


def plot_reward_curve(log_history: Sequence[dict], path: Path, title: str = "") -> Path:
    """Episode reward and per-turn reward (mean per step) against the training step, and the
    evaluation's episode reward where the trainer evaluated (at step 0 with TRL's
    ``--eval_on_start true``: the untrained model). Returns ``path``."""
    from matplotlib.ticker import MaxNLocator

    steps = [entry for entry in log_history if "reward" in entry]
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    axis = fig.subplots()
    for key, label in (("reward", "episode reward"), ("turn_rewards/mean", "turn reward (mean)")):
        points = [(entry["step"], entry[key]) for entry in steps if key in entry]
        if points:
            x, y = zip(*points)
            (line,) = axis.plot(x, y, marker="o", markersize=3, alpha=0.45, label=label)
            # A step's few episodes make a noisy point; the trailing mean shows the trend.
            trailing = [np.mean(y[max(0, k - SMOOTHING + 1) : k + 1]) for k in range(len(y))]
            axis.plot(x, trailing, color=line.get_color(), label=f"{label}, mean of last {SMOOTHING} steps")
    held_out = [(entry["step"], entry["eval_reward"]) for entry in log_history if "eval_reward" in entry]
    if held_out:
        axis.plot(*zip(*held_out), color="black", marker="s", linestyle="--", label="evaluation episode reward")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("step")
    axis.set_ylabel("reward")
    axis.set_title(title)
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
