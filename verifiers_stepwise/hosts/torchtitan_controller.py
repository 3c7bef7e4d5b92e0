"""Deprecated (0.4): moved to ``verifiers_stepwise.hosts.torchtitan.controller``; this name re-exports it."""

import warnings

from verifiers_stepwise.hosts.torchtitan.controller import *  # noqa: F403
from verifiers_stepwise.hosts.torchtitan.controller import __all__  # noqa: F401

warnings.warn(
    "verifiers_stepwise.hosts.torchtitan_controller is deprecated: use verifiers_stepwise.hosts.torchtitan.controller",
    DeprecationWarning,
    stacklevel=2,
)
