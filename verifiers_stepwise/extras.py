"""Optional dependencies: a feature whose extra is not installed says which extra to install.

Imports only the standard library, so any layer may use it. A feature module imports its
optional packages inside :func:`requires`::

    with requires("vf-stepwise --plot", "matplotlib", extra="plot"):
        from matplotlib.figure import Figure
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DIST", "MissingExtra", "install_command", "requires"]

DIST = "verifiers-stepwise"


class MissingExtra(ImportError):
    """An optional dependency of a feature is not installed; the message says how to install it."""


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` of this distribution."""
    return f"pip install '{DIST}[{extra}]'"


@contextmanager
def requires(feature: str, *modules: str, extra: str | None = None, also: str | None = None) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` for one of the top-level ``modules`` raised in the block
    into :class:`MissingExtra` naming ``feature``, the module and what to install:
    ``pip install 'verifiers-stepwise[extra]'``, and ``also`` (for what an extra cannot install,
    e.g. a git-only package). Any other import error (a module missing deeper inside an installed
    package, say) propagates unchanged."""
    try:
        yield
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in modules:
            raise
        steps = " and ".join(step for step in (extra and install_command(extra), also) if step)
        raise MissingExtra(f"{feature} needs {missing}, which is not installed: {steps}", name=missing) from error
