"""Trainer adapters: one short module per host trainer.

    prime_rl     prime-rl's orchestrator ``Algorithm`` (``[orchestrator.algo] type = "stepwise"``)
    torchtitan   torchtitan RL's advantage component and training-sample builder
    tinker       tinker-cookbook's ``compute_advantages`` / ``assemble_training_data``

Each adapter only translates shapes: host rollouts → per-turn rewards ``groups[g][j][t]`` →
an estimator picked by its registered name (so any installed estimator works on every host) →
per-turn advantages written where that host's loss reads them. Nothing in this package imports
a host at import time; each host module imports its host when it is imported itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers_stepwise.estimators import Estimator

__all__ = ["ESTIMATOR_FIELDS", "build_estimator", "estimator_from", "score_turns"]

ESTIMATOR_FIELDS = ("gamma", "aggregation", "baseline", "scale", "eps")
"""The estimator options every host config offers, each defaulting to None."""


def build_estimator(name: str, **options: Any) -> Estimator:
    """The estimator registered as ``name``, configured with the options that are set.

    Host configs give every estimator option the default None, meaning "the estimator's own
    default", so one host config serves every registered estimator. An option the estimator
    does not have raises ConfigError naming it; an unknown name raises UnknownEstimator listing
    what is installed.
    """
    from verifiers_stepwise.registry import get_estimator

    return get_estimator(name, **{key: value for key, value in options.items() if value is not None})


def estimator_from(config: Any) -> Estimator:
    """The estimator a host config names: ``config.estimator`` configured with the
    ``ESTIMATOR_FIELDS`` that are set and the third-party fields in ``config.options``."""
    fields = {name: getattr(config, name) for name in ESTIMATOR_FIELDS}
    return build_estimator(config.estimator, **fields, **config.options)


def score_turns(
    estimator: Estimator, groups: Sequence[Sequence[Sequence[float]]]
) -> list[list[list[float]]]:
    """Per-turn advantages ``[g][j][t]`` of per-turn rewards ``groups[g][j][t]``, all groups at once."""
    from verifiers_stepwise.ragged import RaggedBatch

    batch = RaggedBatch.from_groups(groups)
    return batch.split(estimator.batched(batch))
