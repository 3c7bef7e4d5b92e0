"""Environment bundles: the ``verifiers.environments`` entry points, ``env-id = "module"``.

What ``vf-eval env-id`` imports; an installed distribution adds one (docs/writing-envs.md).
Read through ``verifiers_stepwise.plugins``, which caches and refuses a name claimed twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.plugins import registered

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["ENVIRONMENT_GROUP", "available_environments", "resolve_env"]

ENVIRONMENT_GROUP = "verifiers.environments"


def available_environments() -> dict[str, str]:
    """Installed environment ids and the module ``vf-eval`` imports for each."""
    return {name: entry.value for name, entry in registered(ENVIRONMENT_GROUP).items()}


def resolve_env(block: Mapping[str, Any], where: str) -> vf.EnvConfig:
    """The env an ``[env]`` block names, resolved by verifiers (its taskset imported, every field
    validated) without loading its tasks; a ConfigError of one line naming ``where`` when the
    taskset id is not installed or a field is wrong."""
    import verifiers.v1 as vf
    from pydantic import ValidationError

    from verifiers_stepwise.estimators.base import describe_validation_error

    try:
        return vf.resolve_env_config(dict(block))
    except ValidationError as error:
        raise ConfigError(f"{where}: {describe_validation_error(error.title, error)}") from None
    except ImportError as error:
        installed = ", ".join(available_environments()) or "none"
        raise ConfigError(f"{where}: {error} (installed environment bundles: {installed})") from None
