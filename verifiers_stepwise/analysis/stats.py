"""What an estimator does to a batch of rollouts, summarised per turn index.

The numbers are the estimator's own, from the call every credit record is made with
(``traces.credit.checked_estimate``): its advantages and, for an estimator built on per-turn
returns (``stepwise``), the returns they were taken from. This module arranges them: per turn
index t (0 = first turn) over the trajectories that reached turn t,

    count_t                      trajectories with more than t turns
    mean reward, mean return     means over those trajectories' turn t (no return: None)
    mean and std of advantages   std is the population std (ddof = 0)

which is where a positional bias shows: with a pooled baseline and non-negative rewards, early
turns collect more discounted terms and so get higher advantages though no turn was better.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.base import Estimate
from verifiers_stepwise.estimators.ragged import RaggedBatch

__all__ = ["TurnStats", "describe", "turn_stats", "with_gamma"]


@dataclass(frozen=True)
class TurnStats:
    """Statistics per turn index; every array has one entry per index 0..max_turns-1."""

    count: np.ndarray
    mean_tokens: np.ndarray
    """Sampled tokens of the turn (0 for eval-client traces, which carry no token ids)."""
    mean_reward: np.ndarray
    mean_return: np.ndarray | None
    """None for an estimator not built on per-turn returns."""
    advantage_mean: np.ndarray
    advantage_std: np.ndarray
    advantage_min: np.ndarray
    advantage_max: np.ndarray

    def rows(self) -> list[dict[str, float | int | None]]:
        """One dict per turn index, plain Python numbers (``mean_return`` None without returns)."""
        columns = {f.name: getattr(self, f.name) for f in fields(self)}
        listed = {name: [None] * self.count.size if v is None else v.tolist() for name, v in columns.items()}
        return [{"turn": t, **{name: column[t] for name, column in listed.items()}} for t in range(self.count.size)]


def describe(name: str, estimator: Estimator) -> str:
    """``name(field=value, ...)`` with every config field, defaults included."""
    fields_ = ", ".join(f"{k}={v!r}" for k, v in estimator.config.model_dump().items())
    return f"{name}({fields_})"


def with_gamma(estimator: Estimator, gamma: float) -> Estimator:
    """The same estimator and config with ``gamma`` replaced (validated by the config)."""
    config: dict[str, Any] = estimator.config.model_dump()
    if "gamma" not in config:
        raise ConfigError(f"{type(estimator).__name__} has no gamma to sweep")
    config["gamma"] = gamma
    return type(estimator)(**config)


def turn_stats(batch: RaggedBatch, estimate: Estimate, tokens: np.ndarray) -> TurnStats:
    """Per-turn-index statistics of one estimate over ``batch``.

    Args:
      batch: the rewards the estimate was made from.
      estimate: advantages (and returns, or None), (n_turns,) each, in the layout of ``batch``.
      tokens: (n_turns,) sampled tokens per turn.
    """
    t = batch.turn_index
    n_index = int(batch.lengths.max()) if batch.n_trajectories else 0
    count = np.bincount(t, minlength=n_index)

    def mean(x: np.ndarray) -> np.ndarray:
        return np.bincount(t, weights=x, minlength=n_index) / count

    adv = estimate.advantages
    adv_mean = mean(adv)
    deviation = adv - adv_mean[t]
    adv_min = np.full(n_index, np.inf)
    adv_max = np.full(n_index, -np.inf)
    np.minimum.at(adv_min, t, adv)
    np.maximum.at(adv_max, t, adv)
    return TurnStats(
        count=count,
        mean_tokens=mean(tokens.astype(np.float64)),
        mean_reward=mean(batch.rewards),
        mean_return=None if estimate.returns is None else mean(estimate.returns),
        advantage_mean=adv_mean,
        advantage_std=np.sqrt(mean(deviation * deviation)),
        advantage_min=adv_min,
        advantage_max=adv_max,
    )
