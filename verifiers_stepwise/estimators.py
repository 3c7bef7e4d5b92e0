"""Advantage estimators: per-turn rewards of a group in, per-turn advantages out.

An estimator is called on one group (all trajectories sampled for one prompt):

    estimator(group: Sequence[Sequence[float]]) -> list[list[float]]      same ragged shape

and, for trainers, on many groups at once with ``estimator.batched(batch: RaggedBatch)``,
flat (n_turns,) float64 in and out. Both paths run the same code.

Conventions (all estimators here): float64; population std (ddof = 0) plus ``eps`` (default
1e-6); a group whose values are all equal gets advantages exactly 0; a group with a single
trajectory has nothing to compare against and gets 0 everywhere.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from verifiers_stepwise.ragged import RaggedBatch, RewardError
from verifiers_stepwise.returns import Aggregation, overflow_error

__all__ = [
    "Baseline",
    "ConfigError",
    "Estimator",
    "EstimatorConfig",
    "GRPO",
    "GRPOConfig",
    "Scale",
    "Stepwise",
    "StepwiseConfig",
    "zero_advantage_groups",
]

Baseline = Literal["pooled", "per_turn", "leave_one_out", "trajectory"]
Scale = Literal["std", "none"]


class ConfigError(ValueError):
    """An estimator configuration that failed validation; names the estimator and field."""


class EstimatorConfig(BaseModel):
    """Base for estimator configs: immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    scale: Scale = "std"
    """"std": divide by population std + eps (GRPO); "none": mean-centering only (Dr. GRPO)."""
    eps: float = Field(1e-6, ge=0.0, allow_inf_nan=False)
    """ε added to the std before dividing."""


class StepwiseConfig(EstimatorConfig):
    gamma: float = Field(0.4, ge=0.0, le=1.0, allow_inf_nan=False)
    """Discount γ between turns (Kevin uses 0.4)."""
    aggregation: Aggregation = "sum"
    """"sum": discounted reward-to-go; "max": best discounted future turn reward."""
    baseline: Baseline = "pooled"
    """Which returns a turn's return is compared with, all within its group:
    pooled (every turn of every trajectory; Kevin), per_turn (the same turn index only),
    leave_one_out (the pool without this turn; RLOO), trajectory (each trajectory's first-turn
    return compared across trajectories and broadcast to all of its turns)."""


class GRPOConfig(EstimatorConfig):
    pass


class Estimator(ABC):
    """Base class of registered estimators. Subclasses set ``Config`` and ``batched``."""

    Config: ClassVar[type[EstimatorConfig]] = EstimatorConfig

    def __init__(self, config: EstimatorConfig | None = None, /, **fields: Any) -> None:
        if config is None:
            try:
                config = self.Config(**fields)
            except ValidationError as e:
                raise ConfigError(_describe(type(self).__name__, e)) from None
        elif fields or not isinstance(config, self.Config):
            raise ConfigError(
                f"{type(self).__name__}: pass either a {self.Config.__name__} or keyword fields"
            )
        self.config = config

    @abstractmethod
    def batched(self, batch: RaggedBatch) -> np.ndarray:
        """(n_turns,) float64 advantages for every turn of every group in ``batch``."""

    def __call__(self, group: Sequence[Sequence[float]]) -> list[list[float]]:
        """Advantages of one group: ``group[j][t]`` is turn t of trajectory j."""
        batch = RaggedBatch.from_groups([group])
        return batch.split(self.batched(batch))[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


class Stepwise(Estimator):
    """Per-turn discounted returns, then a group baseline (Kevin, arXiv 2507.11948).

    For trajectory j of a group with turn rewards r_{j,1..T_j}:

        R_{j,t} = Σ_{i≥t} γ^(i−t) r_{j,i}    (sum)   or   max_{i≥t} γ^(i−t) r_{j,i}   (max)
        A_{j,t} = (R_{j,t} − mean(X)) / (std(X) + ε)     (scale="std"; R − mean for "none")

    where X depends on the baseline: pooled = {R_{k,s}} over all trajectories k and turns s;
    per_turn = {R_{k,t} : T_k > t}; leave_one_out = the pool without R_{j,t}
    (baseline (ΣX − R_{j,t}) / (|X| − 1), scaled by the pool's std); trajectory =
    {R_{k,1}} with A_{j,t} = A_{j,1} for every t.

    Known biases (both pinned by tests, see the README): the pooled baseline favours early
    turns when rewards are non-negative, since earlier turns add more discounted terms
    (rewards 1,1,1,1 with γ = 0.4 give returns 1.624, 1.56, 1.4, 1.0 and nonzero advantages
    though no turn was better); the per_turn baseline for turn t only averages trajectories
    that lasted past t, so it depends on when each trajectory stopped, which the policy chooses.
    """

    Config = StepwiseConfig
    config: StepwiseConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        c = self.config
        return _advantages(batch, c.gamma, c.aggregation, c.baseline, c.scale, c.eps)


class GRPO(Estimator):
    """Trajectory-level GRPO, the reference stepwise credit is measured against.

        G_j = Σ_t r_{j,t}      A_{j,t} = (G_j − mean_k G_k) / (std_k G_k + ε)   for every t

    (mean-only with scale="none", as prime-rl and tinker-cookbook do). With one turn per
    trajectory it equals ``Stepwise`` bit-for-bit for every gamma and aggregation and every
    baseline but leave_one_out (which scales deviations by n/(n − 1)).
    """

    Config = GRPOConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        # G_j is the undiscounted return of the first turn, compared across trajectories.
        return _advantages(batch, 1.0, "sum", "trajectory", self.config.scale, self.config.eps)


def _advantages(
    batch: RaggedBatch, gamma: float, aggregation: Aggregation, baseline: Baseline, scale: Scale, eps: float
) -> np.ndarray:
    """(n_turns,) advantages, one compiled pass per group (``kernels.group_advantages``)."""
    from verifiers_stepwise import kernels  # numba: compiled on first use

    advantages = np.empty(batch.n_turns)
    problem, g = kernels.group_advantages(
        batch.rewards,
        batch.lengths,
        batch.group_sizes,
        gamma,
        kernels.AGGREGATION_CODES[aggregation],
        kernels.BASELINE_CODES[baseline],
        scale == "std",
        eps,
        advantages,
    )
    if problem != kernels.FINITE:
        # Earlier groups' advantages were checked finite; later groups are unwritten.
        written = advantages[: int(batch.group_turn_starts[g] + batch.group_turns[g])]
        if problem == kernels.RETURN_OVERFLOW:
            raise overflow_error(batch, written, gamma)
        g, j, t = RaggedBatch.locate(int(np.argmin(np.isfinite(written))), batch.lengths, batch.group_sizes)
        raise RewardError(
            f"group {g}, trajectory {j}, turn {t}: the advantage overflows float64 (returns "
            f"spread too wide for scale={scale!r}{', leave_one_out' if baseline == 'leave_one_out' else ''})"
        )
    return advantages


def zero_advantage_groups(batch: RaggedBatch, advantages: np.ndarray) -> np.ndarray:
    """(n_groups,) True where every advantage of the group is exactly 0.

    These groups carry no gradient; trainers with dynamic sampling (DAPO) drop them.
    """
    if batch.n_groups == 0:
        return np.zeros(0, dtype=bool)
    nonzero = np.add.reduceat((advantages != 0.0).astype(np.int64), batch.group_turn_starts)
    return nonzero == 0


def _describe(estimator: str, error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "config"
        got = f" (got {item['input']!r})" if item["type"] != "extra_forbidden" else ""
        message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        problems.append(f"field {where!r}: {message}{got}")
    return f"{estimator} config: " + "; ".join(problems)
