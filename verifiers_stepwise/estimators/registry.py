"""Discovery of estimators and environment bundles through Python entry points.

Two groups, read with ``importlib.metadata``:

    verifiers.advantage_estimators    name = "module:Class"   (a subclass of Estimator)
    verifiers.environments            env-id = "module"        (what ``vf-eval env-id`` imports)

Any installed distribution can add to either group; no code here changes. Two distributions
claiming one name is an error that names both, never a silent pick.

Reading every distribution's metadata takes milliseconds, which a trainer resolving an
estimator by name for every group would pay again and again; so a group's entries are cached
and read again only when ``sys.path`` or the modification time of one of its directories
changes (installing or removing a distribution changes its directory), so a package installed
while the process runs is still seen on the next call.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError

if TYPE_CHECKING:
    from verifiers_stepwise.estimators.base import Estimator

__all__ = [
    "ENVIRONMENT_GROUP",
    "ESTIMATOR_GROUP",
    "EntryPointConflict",
    "UnknownEstimator",
    "available_environments",
    "available_estimators",
    "estimator_class",
    "get_estimator",
]

ESTIMATOR_GROUP = "verifiers.advantage_estimators"
ENVIRONMENT_GROUP = "verifiers.environments"


class UnknownEstimator(ConfigError, LookupError):
    """No installed distribution provides an estimator of that name."""


class EntryPointConflict(ConfigError, RuntimeError):
    """Two installed distributions register the same name in one group (an install to fix)."""


@dataclass(frozen=True)
class Registered:
    name: str
    value: str
    distribution: str


_cache: dict[str, tuple[tuple, dict[str, Registered]]] = {}


def _installed_state() -> tuple:
    """What a change to the installed distributions changes: sys.path and its directories' mtimes."""
    state: list[tuple[str, int | None]] = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def _registered(group: str) -> dict[str, Registered]:
    state = _installed_state()
    cached = _cache.get(group)
    if cached is not None and cached[0] == state:
        return cached[1]
    found = _scan(group)
    _cache[group] = (state, found)
    return found


def _scan(group: str) -> dict[str, Registered]:
    found: dict[str, Registered] = {}
    for ep in entry_points(group=group):
        entry = Registered(ep.name, ep.value, _distribution(ep))
        seen = found.get(ep.name)
        if seen is not None and seen != entry:
            raise EntryPointConflict(
                f"{group}: {ep.name!r} is registered twice, as {seen.value!r} by "
                f"{seen.distribution!r} and as {entry.value!r} by {entry.distribution!r}; "
                f"uninstall one of them"
            )
        found[ep.name] = entry
    return dict(sorted(found.items()))


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else "<unknown distribution>"


def available_estimators() -> list[str]:
    """Names of every installed estimator, sorted."""
    return list(_registered(ESTIMATOR_GROUP))


def available_environments() -> dict[str, str]:
    """Installed environment ids and the module ``vf-eval`` imports for each."""
    return {name: entry.value for name, entry in _registered(ENVIRONMENT_GROUP).items()}


def estimator_class(name: str) -> type[Estimator]:
    """The class registered under ``name``, imported on demand."""
    from verifiers_stepwise.estimators import Estimator

    registered = _registered(ESTIMATOR_GROUP)
    if name not in registered:
        installed = ", ".join(registered) or "none"
        raise UnknownEstimator(f"no advantage estimator named {name!r}; installed: {installed}")
    entry = registered[name]
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
