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

Each adapter only translates shapes: host rollouts → per-turn rewards ``groups[g][j][t]`` →
an estimator picked by its registered name (so any installed estimator works on every host),
configured by an ``options`` mapping that the estimator's own config validates →
per-turn advantages written where that host's loss reads them. May import every layer but
``analysis``. Nothing in this package imports a host at import time; each host module imports
its host when it is imported itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers_stepwise.estimators import Estimator

__all__ = ["estimator_from", "options_json"]


def estimator_from(config: Any) -> Estimator:
    """The estimator a host config names: ``config.estimator`` (a registered name) configured
    with ``config.options``. An unknown name raises UnknownEstimator listing what is installed;
    an option the estimator does not have, or a bad value, raises ConfigError naming it."""
    from verifiers_stepwise.estimators.registry import get_estimator

    return get_estimator(config.estimator, **config.options)


def options_json(text: str, flag: str = "--options") -> dict[str, Any]:
    """The estimator options a command line gives as one JSON object (``'{"gamma": 0.9}'``), the
    spelling of the TRL host's and ``vf-stepwise``'s ``--options``; ConfigError naming ``flag``
    when it is not JSON or not an object. The fields are validated by the estimator's config."""
    import json

    from verifiers_stepwise.errors import ConfigError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{flag}: not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: must be a JSON object, got {text!r}")
    return value
