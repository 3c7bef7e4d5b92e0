"""Per-turn-index distributions of returns and advantages, one column per estimator config.

Each panel is a box plot per turn index (box: quartiles, whiskers: 5th to 95th percentile,
outliers not drawn) with the means joined by a line, so a drift of the mean advantage across
turn indices, the positional bias of a baseline, shows at a glance. Configs share the y axis of
each row. Rendered with matplotlib's Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from verifiers_stepwise.analysis.stats import Credit
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.extras import requires

with requires("vf-stepwise --plot", "matplotlib", extra="plot"):
    from matplotlib.figure import Figure

__all__ = ["plot_credit"]


def plot_credit(path: Path, batch: RaggedBatch, credits: list[Credit]) -> None:
    """Write a PNG (or any format matplotlib infers from the suffix) to ``path``."""
    index = batch.turn_index
    n_index = int(batch.lengths.max())
    order = np.argsort(index, kind="stable")
    counts = np.bincount(index, minlength=n_index)
    cuts = np.cumsum(counts)[:-1]
    positions = np.arange(n_index)
    labels = [f"{t}\nn={n:,}" for t, n in zip(positions, counts)]

    fig = Figure(figsize=(1.0 + 5.0 * len(credits), 7.5), layout="constrained")
    axes = fig.subplots(2, len(credits), sharex=True, sharey="row", squeeze=False)
    for column, credit in enumerate(credits):
        rows = (
            (credit.returns, f"return R_t (γ={credit.gamma:g}, {credit.aggregation})", "tab:blue"),
            (credit.advantages, "advantage A_t", "tab:red"),
        )
        for row, (values, name, color) in enumerate(rows):
            ax = axes[row][column]
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
        axes[0][column].set_title(textwrap.fill(credit.label, 55), fontsize="medium")
        axes[1][column].set_xticks(positions, labels)
        axes[1][column].set_xlabel("turn index")
    fig.suptitle(f"{batch.n_trajectories:,} trajectories in {batch.n_groups:,} groups", fontsize="medium")
    fig.savefig(path, dpi=110)
