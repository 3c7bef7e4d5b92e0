"""How good is a per-turn advantage as a learning signal? Measured against the exact one.

For every turn sample of a training batch we know the estimator's advantage A and the true
advantage A* = Q^π − V^π of the action taken (``exact.true_advantages``: under the policy that
sampled the batch and the task's undiscounted objective J). Per step:

    noise var   within-cell variance of A, cells = (turn, prompt, state, action). A* is a
                function of the cell, so what varies inside a cell is noise: the same decision
                credited differently because of what the other turns of its episode did (with
                B ≤ P, as by default, a batch holds one group per prompt: no cell spans
                groups). Pooled over steps: Σ (A − cell mean)² / Σ (cell size − 1). Every
                default method std-normalizes within a group, so the units are comparable.
    corr        Pearson correlation of A and A* over the batch's turn samples.
    wrong sign  Σ |A*| over samples with sign(A) = −sign(A*), A ≠ 0, divided by Σ |A*| over
                samples with A ≠ 0: how much of the true signal the estimate pushes backwards.
                Also kept per turn index, which shows where in the episode credit goes wrong.
    grad cos    cosine between the update direction ĝ = −∇_θ loss and the exact ∇_θ J
                (``exact.return_gradient``): what the batch's advantages do to the policy.
                A baseline that depends only on the turn shifts signs (corr, wrong sign) but
                leaves E[ĝ] alone; this column sees only what reaches the update.

corr and grad cos are means over steps, leaving out steps where they are undefined (all
advantages 0); noise var and wrong sign are ratios of sums pooled over steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Signal", "SignalTrace"]


@dataclass(frozen=True)
class Signal:
    noise_var: float
    corr: float
    wrong_sign: float
    grad_cos: float
    wrong_sign_by_turn: tuple[float, ...]


def nanmean(values: list[float]) -> float:
    """Mean of the finite values; nan when there are none (and no warning)."""
    a = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


@dataclass
class SignalTrace:
    """Per-step signal statistics of one training run."""

    square_noise: list[float] = field(default_factory=list)
    dof: list[int] = field(default_factory=list)
    corr: list[float] = field(default_factory=list)
    backwards: list[np.ndarray] = field(default_factory=list)
    """per step, (T,) Σ |A*| of samples pushed the wrong way, by turn"""
    weight: list[np.ndarray] = field(default_factory=list)
    """per step, (T,) Σ |A*| of samples with A ≠ 0, by turn"""
    grad_cos: list[float] = field(default_factory=list)

    def add(
        self,
        advantages: np.ndarray,
        true: np.ndarray,
        cells: np.ndarray,
        turns: np.ndarray,
        update: torch.Tensor,
        gradient: torch.Tensor,
        n_turns: int,
    ) -> None:
        """One step: flat A, A*, integer cell keys and turn indices (all (n,), played turns
        only); the update direction and ∇J (same shape); T, the task's turn limit."""
        _, cell, size = np.unique(cells, return_inverse=True, return_counts=True)
        mean = np.bincount(cell, weights=advantages) / size
        self.square_noise.append(float(((advantages - mean[cell]) ** 2).sum()))
        self.dof.append(int(advantages.size - size.size))

        varies = advantages.std() > 0 and true.std() > 0
        self.corr.append(float(np.corrcoef(advantages, true)[0, 1]) if varies else float("nan"))
        weight = np.abs(true) * (advantages != 0)
        backwards = weight * (np.sign(advantages) == -np.sign(true))
        self.weight.append(np.bincount(turns, weights=weight, minlength=n_turns))
        self.backwards.append(np.bincount(turns, weights=backwards, minlength=n_turns))
        norms = float(update.norm() * gradient.norm())
        self.grad_cos.append(float((update * gradient).sum()) / norms if norms > 0 else float("nan"))

    def summary(self, steps: int | None = None) -> Signal:
        """Over the first ``steps`` steps (all when None)."""
        s = slice(0, steps)
        if not self.dof[s]:  # no steps in the window (the target was met before any update)
            nan = float("nan")
            return Signal(nan, nan, nan, nan, ())
        dof = sum(self.dof[s])
        backwards = np.sum(self.backwards[s], axis=0)
        weight = np.sum(self.weight[s], axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            by_turn = backwards / weight
        return Signal(
            noise_var=sum(self.square_noise[s]) / dof if dof else float("nan"),
            corr=nanmean(self.corr[s]),
            wrong_sign=float(backwards.sum() / weight.sum()) if weight.sum() > 0 else float("nan"),
            grad_cos=nanmean(self.grad_cos[s]),
            wrong_sign_by_turn=tuple(float(v) for v in by_turn),
        )
