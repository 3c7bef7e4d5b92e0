"""Trainer adapters, one per host: ``prime_rl``, ``torchtitan``, ``trl``, ``tinker`` (docs/<host>.md);
``token_endpoint`` is the token-level ``/inference/v1/generate`` protocol verifiers' train client
talks to.

Each adapter is a seam: host config → an estimator picked by its registered name and configured
by an ``options`` mapping its own config validates (``estimator_from``) → one credit record per
trajectory (``traces.credit.score_group`` or ``credit_group``) → the record laid out where that
host's loss reads it (``traces.credit.lay_out``). Each host module imports its host when it is
imported itself; nothing else in this package imports a host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers_stepwise.estimators import Estimator

__all__ = ["estimator_from"]


def estimator_from(config: Any) -> Estimator:
    """The estimator a host config names: ``config.estimator`` (a registered name) configured
    with ``config.options`` (``get_estimator``, which names an unknown name or option)."""
    from verifiers_stepwise.estimators.registry import get_estimator

    return get_estimator(config.estimator, **config.options)
