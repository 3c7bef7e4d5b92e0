"""Deprecated (0.4): moved to ``verifiers_stepwise.hosts.torchtitan.config_registry``; this name re-exports it."""

import warnings

from verifiers_stepwise.hosts.torchtitan.config_registry import *  # noqa: F403
from verifiers_stepwise.hosts.torchtitan.config_registry import __all__  # noqa: F401

warnings.warn(
    "verifiers_stepwise.hosts.torchtitan_recipes is deprecated: use verifiers_stepwise.hosts.torchtitan.config_registry"
    " (--module verifiers_stepwise.hosts.torchtitan)",
    DeprecationWarning,
    stacklevel=2,
)
