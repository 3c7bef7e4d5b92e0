"""What an estimator does to a batch of rollouts, summarised per turn index.

The numbers are the estimator's own (``traces.credit.checked_estimate``): its advantages and,
for an estimator built on per-turn returns, the returns. Per turn index t (0 = first turn) over
the trajectories that reached turn t,

    count_t                      trajectories with more than t turns
    mean reward, mean return     means over those trajectories' turn t (no return: None)
    mean and std of advantages   std is the population std (ddof = 0)

which is where a positional bias shows: with a pooled baseline and non-negative rewards, early
turns collect more discounted terms and so get higher advantages though no turn was better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.base import Estimate
from verifiers_stepwise.estimators.ragged import RaggedBatch

__all__ = ["TurnRow", "describe", "turn_stats", "with_gamma"]


@dataclass(frozen=True)
class TurnRow:
    """The statistics of one turn index, plain Python numbers."""

    turn: int
    count: int
    mean_tokens: float
    """Sampled tokens of the turn (0 for eval-client traces, which carry no token ids)."""
    mean_reward: float
    mean_return: float | None
    """None for an estimator not built on per-turn returns."""
    advantage_mean: float
    advantage_std: float
    advantage_min: float
    advantage_max: float


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


def turn_stats(batch: RaggedBatch, estimate: Estimate, tokens: np.ndarray) -> list[TurnRow]:
    """Per-turn-index statistics, one row per index, of an estimate made from ``batch`` and of
    ``tokens``, the (n_turns,) sampled tokens per turn in ``batch``'s layout."""
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
    columns = [
        count,
        mean(tokens.astype(np.float64)),
        mean(batch.rewards),
        None if estimate.returns is None else mean(estimate.returns),
        adv_mean,
        np.sqrt(mean(deviation * deviation)),
        adv_min,
        adv_max,
    ]
    listed = [[None] * n_index if column is None else column.tolist() for column in columns]
    return [TurnRow(index, *values) for index, values in enumerate(zip(*listed))]
