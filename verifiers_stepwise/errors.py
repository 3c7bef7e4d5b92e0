"""The error vocabulary: every error this package raises names the boundary it crossed.

Five boundaries, one base type each (all ``StepwiseError``), and the builtin each also is, so an
``except ValueError`` written before this module still catches what it caught:

    ConfigError          what a user wrote: estimator options, env and host settings, flags,
                         a name nothing is registered under              (ValueError)
    RewardError          rewards the math cannot take: NaN, ±inf, a ragged shape (ValueError)
    TraceError           a trace that breaks the per-turn schema of docs/schema.md (ValueError)
    HostMismatch         the installed trainer or verifiers is not what an adapter was built
                         against: a missing module, a changed layout  (RuntimeError)
    DependencyMissing    an optional extra is not installed; the message says how (ImportError)

The rest are refinements of these, defined where they are raised (``UnknownEstimator`` is a
``ConfigError``, ``MissingTurnRewards`` a ``TraceError``, ...); docs/contributing.md lists them. A
fault during a rollout (a model call that failed, a grader that crashed) is not raised past the
episode: it is recorded on the trace (verifiers' ``vf.errors``) and the run goes on.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DependencyMissing", "HostMismatch", "RewardError", "StepwiseError", "TraceError"]


class StepwiseError(Exception):
    """Base of every error verifiers-stepwise raises on purpose."""


class ConfigError(StepwiseError, ValueError):
    """A setting a user wrote is invalid; the message names the setting and where it was read."""


class RewardError(StepwiseError, ValueError):
    """A reward batch that cannot be scored: names the value and where it is."""


class TraceError(StepwiseError, ValueError):
    """Per-turn data that disagrees with its trace; names the trace and what disagreed."""


class HostMismatch(StepwiseError, RuntimeError):
    """The installed trainer (or verifiers) differs from what the adapter was built against."""


class DependencyMissing(StepwiseError, ImportError):
    """An optional dependency of a feature is not installed; the message says how to install it."""
