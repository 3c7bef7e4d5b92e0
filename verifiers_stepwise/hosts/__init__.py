"""Trainer adapters: one short module per host trainer.

    prime_rl     prime-rl's orchestrator ``Algorithm`` (``[orchestrator.algo] type = "stepwise"``)
    torchtitan   torchtitan RL (a subpackage): its advantage component and training-sample
                 builder; ``verifiers``, a torchtitan 0.3.0 rollouter that runs verifiers envs;
                 ``main``, the same credit for torchtitan main's own Verifiers rollouter;
                 ``config_registry``, its recipes (``--module verifiers_stepwise.hosts.torchtitan``)
    tinker       tinker-cookbook's ``compute_advantages`` / ``assemble_training_data``
    trl          TRL's ``GRPOTrainer`` on verifiers episodes run in-process (a subpackage)

``token_endpoint`` is the token-level ``/inference/v1/generate`` protocol verifiers' train
client talks to, with the generator injected (the TRL host's batching endpoint speaks it too).

Each adapter is a seam: host config → an estimator picked by its registered name (so any
installed estimator works on every host), configured by an ``options`` mapping that the
estimator's own config validates (``estimator_from``) → one credit record per trajectory
(``traces.credit.score_group`` or ``credit_group``) → the record laid out where that host's loss
reads it (``traces.credit.lay_out``). May import every layer below it (``analysis`` draws the
TRL command's reward curve). Nothing in this package imports a host at import time; each host
module imports its host when it is imported itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers_stepwise.estimators import Estimator

__all__ = ["estimator_from"]


def estimator_from(config: Any) -> Estimator:
    """The estimator a host config names: ``config.estimator`` (a registered name) configured
    with ``config.options``. An unknown name raises UnknownEstimator listing what is installed;
    an option the estimator does not have, or a bad value, raises ConfigError naming it."""
    from verifiers_stepwise.estimators.registry import get_estimator

    return get_estimator(config.estimator, **config.options)
