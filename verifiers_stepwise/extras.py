"""Optional dependencies: a feature whose extra is not installed says which extra to install.

Imports only the standard library, so any layer may use it. A feature module imports its
optional packages inside :func:`requires`::

    with requires("vf-stepwise --plot", "matplotlib", extra="plot"):
        from matplotlib.figure import Figure
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

from verifiers_stepwise.errors import DependencyMissing, HostMismatch

__all__ = ["DIST", "MissingExtra", "TrainerDependencyMissing", "install_command", "requires"]

DIST = "verifiers-stepwise"


class MissingExtra(DependencyMissing):
    """An optional dependency of a feature is not installed; the message says how to install it."""


class TrainerDependencyMissing(HostMismatch):
    """A trainer's own imports need a package that is not installed; ``name`` is that package.

    Not an ImportError on purpose: torchtitan's ConfigManager reports any ImportError raised by
    a ``--module`` as "Cannot import module", which hides which package is missing."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` of this distribution."""
    return f"pip install '{DIST}[{extra}]'"


@contextmanager
def requires(
    feature: str,
    *modules: str,
    extra: str | None = None,
    also: str | None = None,
    trainer: str | None = None,
    gpu_only: Sequence[str] = (),
) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` for one of the top-level ``modules`` raised in the block
    into :class:`MissingExtra` naming ``feature``, the module and what to install:
    ``pip install 'verifiers-stepwise[extra]'``, and ``also`` (for what an extra cannot install,
    e.g. a git-only package). A module missing inside an installed package (``torch.x``)
    propagates unchanged.

    With ``trainer`` (the block imports that trainer's modules), any other missing package the
    trainer needs raises :class:`TrainerDependencyMissing` naming it, and saying so when it is
    one of ``gpu_only`` (installed with the trainer only on a CUDA machine)."""
    try:
        yield
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        # A package that imported, lacking a submodule, is not a missing install.
        installed = isinstance(sys.modules.get(missing), ModuleType)
        if missing in modules and not installed:
            steps = " and ".join(step for step in (extra and install_command(extra), also) if step)
            raise MissingExtra(f"{feature} needs {missing}, which is not installed: {steps}", name=missing) from error
        if trainer is None or missing in ("", trainer, "verifiers_stepwise", *modules):
            raise
        kind = (
            "a GPU-only package, installed with the trainer on a CUDA machine"
            if missing in gpu_only
            else "not installed"
        )
        raise TrainerDependencyMissing(
            f"{trainer} needs {missing!r} ({kind}); it is not installed in this environment", name=missing
        ) from error
