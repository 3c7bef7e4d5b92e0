"""Environment bundles: the ``verifiers.environments`` entry points, ``env-id = "module"``.

What ``vf-eval env-id`` imports; an installed distribution adds one (docs/writing-envs.md).
Read through ``verifiers_stepwise.plugins``, which caches and refuses a name claimed twice.
"""

from __future__ import annotations

from verifiers_stepwise.plugins import registered

__all__ = ["ENVIRONMENT_GROUP", "available_environments"]

ENVIRONMENT_GROUP = "verifiers.environments"


def available_environments() -> dict[str, str]:
    """Installed environment ids and the module ``vf-eval`` imports for each."""
    return {name: entry.value for name, entry in registered(ENVIRONMENT_GROUP).items()}
