"""The estimator interface: per-turn rewards of a group in, per-turn advantages out.

    estimator(group) -> list[list[float]]    one group: group[j][t] in, the same ragged shape out
    estimator.batched(batch) -> (n_turns,)   many groups at once, flat float64 (``RaggedBatch``)
    estimator.estimate(batch) -> Estimate    the advantages, with the per-turn returns they were
                                             taken from (``stepwise``) or None

All three run the same code. Conventions (all estimators here): float64; population std
(ddof = 0) plus ``eps`` (default 1e-6); a group whose values are all equal gets advantages
exactly 0; a group with a single trajectory has nothing to compare against and gets 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.estimators.baselines import Scale
from verifiers_stepwise.estimators.ragged import RaggedBatch

__all__ = [
    "Estimate",
    "Estimator",
    "EstimatorConfig",
    "describe_validation_error",
    "zero_advantage_groups",
]


class Estimate(NamedTuple):
    """Flat (n_turns,) arrays of a batch: the advantages, and the returns they came from (or None)."""

    returns: np.ndarray | None
    advantages: np.ndarray


class EstimatorConfig(BaseModel):
    """Base for estimator configs: immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    scale: Scale = "std"
    """"std": divide by population std + eps (GRPO); "none": mean-centering only (Dr. GRPO)."""
    eps: float = Field(1e-6, ge=0.0, allow_inf_nan=False)
    """ε added to the std before dividing."""


class Estimator(ABC):
    """Base class of registered estimators. Subclasses set ``Config`` and ``batched``."""

    Config: ClassVar[type[EstimatorConfig]] = EstimatorConfig
    name: str | None = None
    """The name it was looked up by (``get_estimator`` sets it), which credit records carry."""

    def __init__(self, config: EstimatorConfig | None = None, /, **fields: Any) -> None:
        if config is None:
            try:
                config = self.Config(**fields)
            except ValidationError as e:
                raise ConfigError(describe_validation_error(type(self).__name__, e)) from None
        elif fields or not isinstance(config, self.Config):
            raise ConfigError(f"{type(self).__name__}: pass either a {self.Config.__name__} or keyword fields")
        self.config = config

    @abstractmethod
    def batched(self, batch: RaggedBatch) -> np.ndarray:
        """(n_turns,) float64 advantages for every turn of every group in ``batch``."""

    def estimate(self, batch: RaggedBatch) -> Estimate:
        """The advantages of ``batch`` and, for an estimator built on per-turn returns, those."""
        return Estimate(None, self.batched(batch))

    def __call__(
        self, group: Sequence[Sequence[float]], states: Sequence[Sequence[Hashable | None]] | None = None
    ) -> list[list[float]]:
        """Advantages of one group: ``group[j][t]`` is turn t of trajectory j; ``states[j][t]``,
        when given, the anchor state turn t acted from (a hashable key, None for none), which
        only estimators that group turns by state (``gigpo``) read."""
        batch = RaggedBatch.from_groups([group], None if states is None else [states])
        return batch.split(self.batched(batch))[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


def zero_advantage_groups(batch: RaggedBatch, advantages: np.ndarray) -> np.ndarray:
    """(n_groups,) True where every advantage of the group is exactly 0.

    These groups carry no gradient; trainers with dynamic sampling (DAPO) drop them.
    """
    if batch.n_groups == 0:
        return np.zeros(0, dtype=bool)
    nonzero = np.add.reduceat((advantages != 0.0).astype(np.int64), batch.group_turn_starts)
    return nonzero == 0


def describe_validation_error(owner: str, error: ValidationError) -> str:
    """``owner config: field 'x': message (got value); ...`` for a pydantic error."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "config"
        got = f" (got {item['input']!r})" if item["type"] != "extra_forbidden" else ""
        message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"].removeprefix("Value error, ")
        problems.append(f"field {where!r}: {message}{got}")
    return f"{owner} config: " + "; ".join(problems)
