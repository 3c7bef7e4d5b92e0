"""Discovery of estimators through the ``verifiers.advantage_estimators`` entry points.

    name = "module:Class"   (a subclass of Estimator), read through ``verifiers_stepwise.plugins``

Any installed distribution can add one; a trainer selects it by name in its own config.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.plugins import registered

if TYPE_CHECKING:
    from verifiers_stepwise.estimators.base import Estimator

__all__ = [
    "ESTIMATOR_GROUP",
    "UnknownEstimator",
    "available_estimators",
    "estimator_class",
    "get_estimator",
]

ESTIMATOR_GROUP = "verifiers.advantage_estimators"


class UnknownEstimator(ConfigError, LookupError):
    """No installed distribution provides an estimator of that name."""


def available_estimators() -> list[str]:
    """Names of every installed estimator, sorted."""
    return list(registered(ESTIMATOR_GROUP))


def estimator_class(name: str) -> type[Estimator]:
    """The class registered under ``name``, imported on demand."""
    from verifiers_stepwise.estimators import Estimator

    entries = registered(ESTIMATOR_GROUP)
    if name not in entries:
        installed = ", ".join(entries) or "none"
        raise UnknownEstimator(f"no advantage estimator named {name!r}; installed: {installed}")
    entry = entries[name]
    cls = EntryPoint(entry.name, entry.value, ESTIMATOR_GROUP).load()
    if not (isinstance(cls, type) and issubclass(cls, Estimator)):
        raise TypeError(
            f"estimator {name!r} ({entry.value} from {entry.distribution}) is not a subclass of "
            f"verifiers_stepwise.Estimator"
        )
    return cls


def get_estimator(name: str, **config: Any) -> Estimator:
    """An estimator instance by registered name, its config validated.

    Raises UnknownEstimator (listing what is installed) for an unknown name and ConfigError
    (naming the field) for a bad config.
    """
    estimator = estimator_class(name)(**config)
    estimator.name = name
    return estimator
