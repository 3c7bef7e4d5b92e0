"""Deprecated (0.4): moved to ``verifiers_stepwise.hosts.torchtitan.main``; this name re-exports it."""

import warnings

from verifiers_stepwise.hosts.torchtitan.main import *  # noqa: F403
from verifiers_stepwise.hosts.torchtitan.main import __all__  # noqa: F401

warnings.warn(
    "verifiers_stepwise.hosts.torchtitan_main is deprecated: use verifiers_stepwise.hosts.torchtitan.main",
    DeprecationWarning,
    stacklevel=2,
)
