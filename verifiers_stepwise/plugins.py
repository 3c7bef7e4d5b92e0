"""Python entry points, the one way this package finds what is installed.

Two groups, read with ``importlib.metadata``:

    verifiers.advantage_estimators    name = "module:Class"   (``estimators.registry``)
    verifiers.environments            env-id = "module"        (``envs.bundles``; what ``vf-eval env-id`` imports)

Any installed distribution can add to either group; two claiming one name is an error that
names both, never a silent pick. A group is read again only when ``sys.path`` or one of its
directories changes (an install does), not for every estimator a trainer looks up. Imports
nothing of this package but ``errors``, so every layer may use it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from verifiers_stepwise.errors import ConfigError

__all__ = ["EntryPointConflict", "Registered", "registered"]


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


def registered(group: str) -> dict[str, Registered]:
    """The entries of ``group`` by name, sorted; raises EntryPointConflict on a name claimed twice."""
    state = _installed_state()
    cached = _cache.get(group)
    if cached is None or cached[0] != state:
        _cache[group] = cached = (state, _scan(group))
    return cached[1]


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
    return ep.dist.metadata["Name"] if ep.dist is not None else "<unknown distribution>"
