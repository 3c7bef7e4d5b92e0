"""What an estimator does to a batch of rollouts, summarised per turn index.

The numbers come from the core, never from a copy of its math: returns from
``ragged_discounted_returns``, advantages from ``Estimator.batched``. This module arranges them:
per turn index t (0 = first turn) over the trajectories that reached turn t,

    count_t                      trajectories with more than t turns
    mean reward, mean return     means over those trajectories' turn t
    mean and std of advantages   std is the population std (ddof = 0)

which is where a positional bias shows: with a pooled baseline and non-negative rewards, early
turns collect more discounted terms and so get higher advantages though no turn was better.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from verifiers_stepwise.errors import ConfigError, RewardError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import ragged_discounted_returns

__all__ = [
    "Credit",
    "TurnStats",
    "credit",
    "describe",
    "returns_setting",
    "turn_stats",
    "with_gamma",
]


@dataclass(frozen=True)
class Credit:
    """Per-turn returns and advantages of one estimator config, in the batch's layout."""

    label: str
    estimator: Estimator
    gamma: float
    aggregation: str
    returns: np.ndarray
    """(n_turns,) R_t with ``gamma`` and ``aggregation``."""
    advantages: np.ndarray
    """(n_turns,) ``estimator.batched(batch)``."""


@dataclass(frozen=True)
class TurnStats:
    """Statistics per turn index; every array has one entry per index 0..max_turns-1."""

    count: np.ndarray
    mean_tokens: np.ndarray
    """Sampled tokens of the turn (0 for eval-client traces, which carry no token ids)."""
    mean_reward: np.ndarray
    mean_return: np.ndarray
    advantage_mean: np.ndarray
    advantage_std: np.ndarray
    advantage_min: np.ndarray
    advantage_max: np.ndarray

    def rows(self) -> list[dict[str, float | int]]:
        """One dict per turn index, plain Python numbers."""
        names = [f.name for f in fields(self)]
        columns = [getattr(self, name).tolist() for name in names]
        return [
            {"turn": t, **{name: column[t] for name, column in zip(names, columns)}} for t in range(self.count.size)
        ]


def describe(name: str, estimator: Estimator) -> str:
    """``name(field=value, ...)`` with every config field, defaults included."""
    fields = ", ".join(f"{k}={v!r}" for k, v in estimator.config.model_dump().items())
    return f"{name}({fields})"


def returns_setting(estimator: Estimator) -> tuple[float, str]:
    """(gamma, aggregation) of the returns reported for an estimator.

    Its config's own ``gamma`` and ``aggregation`` when it has them; otherwise γ = 1 and "sum"
    (the undiscounted reward-to-go, whose first turn is the trajectory total GRPO compares).
    """
    config = estimator.config
    return float(getattr(config, "gamma", 1.0)), str(getattr(config, "aggregation", "sum"))


def credit(label: str, estimator: Estimator, batch: RaggedBatch) -> Credit:
    """Returns and advantages of ``estimator`` on ``batch``.

    Raises RewardError when returns overflow, or when the estimator (possibly a third-party
    one) gives anything but one finite advantage per turn, naming where.
    """
    gamma, aggregation = returns_setting(estimator)
    advantages = np.asarray(estimator.batched(batch), dtype=np.float64)
    if advantages.shape != (batch.n_turns,):
        raise RewardError(f"{label}: batched() returned shape {advantages.shape}, expected ({batch.n_turns},)")
    finite = np.isfinite(advantages)
    if not finite.all():
        i = int(np.argmin(finite))
        g, j, t = RaggedBatch.locate(i, batch.lengths, batch.group_sizes)
        raise RewardError(
            f"{label}: advantage {float(advantages[i])!r} of group {g}, trajectory {j}, turn {t} is not finite"
        )
    return Credit(
        label=label,
        estimator=estimator,
        gamma=gamma,
        aggregation=aggregation,
        returns=ragged_discounted_returns(batch, gamma, aggregation),  # type: ignore[arg-type]
        advantages=advantages,
    )


def with_gamma(estimator: Estimator, gamma: float) -> Estimator:
    """The same estimator and config with ``gamma`` replaced (validated by the config)."""
    fields: dict[str, Any] = estimator.config.model_dump()
    if "gamma" not in fields:
        raise ConfigError(f"{type(estimator).__name__} has no gamma to sweep")
    fields["gamma"] = gamma
    return type(estimator)(**fields)


def turn_stats(batch: RaggedBatch, credit: Credit, tokens: np.ndarray) -> TurnStats:
    """Per-turn-index statistics of one credit assignment over ``batch``.

    Args:
      batch: the rewards the credit was computed on.
      credit: returns and advantages, (n_turns,) each, in the layout of ``batch``.
      tokens: (n_turns,) sampled tokens per turn.
    """
    t = batch.turn_index
    n_index = int(batch.lengths.max()) if batch.n_trajectories else 0
    count = np.bincount(t, minlength=n_index)

    def mean(x: np.ndarray) -> np.ndarray:
        return np.bincount(t, weights=x, minlength=n_index) / count

    adv = credit.advantages
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
        mean_return=mean(credit.returns),
        advantage_mean=adv_mean,
        advantage_std=np.sqrt(mean(deviation * deviation)),
        advantage_min=adv_min,
        advantage_max=adv_max,
    )
