"""Deprecated (0.4): moved to ``verifiers_stepwise.hosts.torchtitan.verifiers``; this name re-exports it."""

import warnings

from verifiers_stepwise.hosts.torchtitan.verifiers import *  # noqa: F403
from verifiers_stepwise.hosts.torchtitan.verifiers import __all__  # noqa: F401

warnings.warn(
    "verifiers_stepwise.hosts.torchtitan_verifiers is deprecated: use verifiers_stepwise.hosts.torchtitan.verifiers",
    DeprecationWarning,
    stacklevel=2,
)
