"""Where model commands run: the ``Sandbox`` interface, and who enforces each cap in each mode.

Every command the model issues, and every grading step, goes through a ``Sandbox``: a Docker
container (``docker.DockerSandbox``, a container per episode and one per grading run) or, on a
machine without an engine, a bubblewrap sandbox per command over a host directory
(``bwrap.BwrapSandbox``). ``ENFORCED`` says, per mode, what holds each cap; a cap no kernel
mechanism or tool holds in a mode is listed as not enforced there, and the taskset says so when
it loads (``unenforced``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Literal, Protocol

from .limits import Engine
from .output import CommandResult

__all__ = ["ENFORCED", "WORKDIR", "Mode", "Sandbox", "SandboxUnavailable", "mode", "unenforced"]

WORKDIR = "/testbed"
"""Where the repository appears to commands (as in the official SWE-bench images)."""

Mode = Literal["docker", "bwrap-root", "bwrap-user"]
NOT_ENFORCED = "not enforced"
ENFORCED: dict[str, dict[Mode, str]] = {
    "memory_mb": {
        "docker": "the container's memory cgroup (--memory, --memory-swap: swap off), tmpfs pages included",
        "bwrap-root": "a memory cgroup (cgroup-tools), swap included",
        "bwrap-user": NOT_ENFORCED + " (each process's address space only: process_memory_mb)",
    },
    "cpus": {
        "docker": "CFS quota of the container's cpu cgroup (--cpus)",
        "bwrap-root": "CFS quota of a cpu cgroup (cgroup-tools)",
        "bwrap-user": NOT_ENFORCED + " (each command's wall clock only: timeout_s)",
    },
    "processes": {
        "docker": "the container's pids cgroup (--pids-limit)",
        "bwrap-root": "a pids cgroup (cgroup-tools)",
        "bwrap-user": "RLIMIT_NPROC in each command's user namespace: per command, not per episode",
    },
    "disk_mb": {
        "docker": "the size of the tmpfs at /testbed (--tmpfs), counted in memory_mb",
        "bwrap-root": NOT_ENFORCED + " (the repository is a host directory: each file file_size_mb)",
        "bwrap-user": NOT_ENFORCED + " (the repository is a host directory: each file file_size_mb)",
    },
    "inodes": {
        "docker": "nr_inodes of the tmpfs at /testbed",
        "bwrap-root": NOT_ENFORCED,
        "bwrap-user": NOT_ENFORCED,
    },
    "process_memory_mb": {
        "docker": "not set (memory_mb holds the container)",
        "bwrap-root": "RLIMIT_AS",
        "bwrap-user": "RLIMIT_AS",
    },
    "open_files": {"docker": "RLIMIT_NOFILE (--ulimit)", "bwrap-root": "RLIMIT_NOFILE", "bwrap-user": "RLIMIT_NOFILE"},
    "file_size_mb": {"docker": "RLIMIT_FSIZE (--ulimit)", "bwrap-root": "RLIMIT_FSIZE", "bwrap-user": "RLIMIT_FSIZE"},
    "tmp_mb": {"docker": "tmpfs size (--tmpfs)", "bwrap-root": "tmpfs size", "bwrap-user": "tmpfs size"},
    "shm_mb": {"docker": "tmpfs size (--shm-size)", "bwrap-root": "tmpfs size", "bwrap-user": "tmpfs size"},
    "timeout_s": {
        "docker": "coreutils timeout in the container, the docker client killed past it",
        "bwrap-root": "the sandbox killed (its PID namespace ends with bwrap)",
        "bwrap-user": "the sandbox killed (its PID namespace ends with bwrap)",
    },
}
"""Each cap of ``SandboxLimits``, per mode: what enforces it (the README's table)."""


class SandboxUnavailable(RuntimeError):
    """Model commands cannot be sandboxed here, so they are not run at all."""


def mode(engine: Engine) -> Mode:
    """The mode ``engine`` runs in for this process's user."""
    if engine == "docker":
        return "docker"
    return "bwrap-root" if os.geteuid() == 0 else "bwrap-user"


def unenforced(engine: Engine) -> list[str]:
    """The caps this process's mode does not enforce, in words (said when the taskset loads)."""
    here = mode(engine)
    return [f"{cap}: {by[here]}" for cap, by in ENFORCED.items() if by[here].startswith(NOT_ENFORCED)]


class Sandbox(Protocol):
    """Runs untrusted commands against one task repository."""

    workdir: str
    """The repository's path as commands see it."""

    async def run(
        self, command: str, *, stdin: bytes | None = None, timeout_s: float | None = None, kept_bytes: int | None = None
    ) -> CommandResult:
        """Run a bash command in ``workdir``; the limits' defaults unless overridden."""
        ...

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        """Run a trusted grading script (bash) in ``workdir``, keeping up to ``kept_bytes`` of
        its log; ``stdin`` is its input (a pipe: readable once)."""
        ...

    def pristine(self) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        """A sandbox over a fresh copy of the task repository at its base commit (nothing of
        this one's), removed on exit: where a round is graded."""
        ...
