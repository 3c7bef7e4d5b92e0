"""Resource limits for one model command, and the shell prelude that applies them.

The limits are applied *inside* the sandbox, by bash's ``ulimit`` builtin right before the command
is exec'd, so the same prelude works in the bubblewrap sandbox and in a container runtime. Hard and
soft limits are set together: an unprivileged process cannot raise a hard limit again.

RLIMIT_NPROC is counted per real uid. Linux exempts the host's root user from it, so a sandbox
must never run as host root (see ``sandbox.BwrapSandbox``); inside a user namespace the count
covers only that sandbox's processes.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator
from pydantic_config import BaseConfig

__all__ = ["SandboxLimits", "grading_limits", "shell_prelude"]

MIB = 1024 * 1024


class SandboxLimits(BaseConfig):
    """Per-command limits, and three caps per episode (disk, inodes, memory). Sizes in MiB,
    times in seconds."""

    timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit; on expiry the whole process tree is killed."""
    cpu_s: int = Field(120, gt=0)
    """RLIMIT_CPU per process (SIGXCPU, then SIGKILL)."""
    memory_mb: int = Field(4096, gt=0)
    """RLIMIT_AS per process (virtual address space)."""
    processes: int = Field(256, gt=0)
    """RLIMIT_NPROC: processes and threads the sandbox user may hold at once."""
    file_size_mb: int = Field(256, gt=0)
    """RLIMIT_FSIZE: largest file a process may write."""
    open_files: int = Field(1024, gt=0)
    """RLIMIT_NOFILE."""
    tmp_mb: int = Field(512, gt=0)
    """Size of the private /tmp (a tmpfs; bubblewrap sandbox only)."""
    shm_mb: int = Field(64, gt=0)
    """Size of the private /dev/shm (a tmpfs; bubblewrap sandbox only)."""
    output_kept_bytes: int = Field(64 * 1024, gt=0)
    """Output kept for the record: the first and last halves of this many bytes."""
    output_kill_bytes: int = Field(16 * MIB, gt=0)
    """A command producing more output than this is killed."""
    disk_mb: int = Field(4096, ge=16)
    """Per episode: total size of the repository's file system (bubblewrap sandbox only). As
    root, the repository is its own ext4 volume of this size; otherwise a command whose writes
    take the tree past it is killed (``volume``)."""
    inodes: int = Field(262_144, ge=1024)
    """Per episode: files and directories the repository may hold (as ``disk_mb``)."""
    episode_memory_mb: int = Field(8192, ge=64)
    """Per episode: resident memory of every process of the episode's commands together (a
    memory cgroup, swap included; else a watcher of the process tree, ``memory``; bubblewrap
    sandbox only)."""
    episode_open_files: int = Field(16_384, gt=0)
    """Per episode: open files of its running processes together (counted while each command
    runs, ``openfiles``; bubblewrap sandbox only). The kernel's bound is ``processes`` times
    ``open_files``."""
    episode_cpus: float = Field(1.0, gt=0)
    """Per episode: CPUs' worth of time the episode's commands get together, throttled beyond
    (a cpu cgroup where cgroups are writable, else per command by stopping its process tree
    while it is over: ``cpu``; bubblewrap sandbox only)."""

    @model_validator(mode="after")
    def _inodes_fit(self) -> SandboxLimits:
        # ext4 keeps 256 bytes per inode: the inode tables may take at most half the volume.
        if self.inodes * 256 > self.disk_mb * MIB // 2:
            raise ValueError(
                f"sandbox.inodes={self.inodes} do not fit a volume of sandbox.disk_mb={self.disk_mb}: "
                f"at most {self.disk_mb * MIB // 512} inodes, or raise disk_mb"
            )
        return self


def grading_limits(limits: SandboxLimits, timeout_s: float) -> SandboxLimits:
    """Limits of a grading run: a test process may use CPU for as long as the run may last."""
    return limits.model_copy(update={"cpu_s": max(limits.cpu_s, math.ceil(timeout_s))})


def shell_prelude(limits: SandboxLimits, file_bytes: int | None = None) -> str:
    """What bash runs before every command: enter the directory given as ``$2`` (given back its
    owner's permissions first: an earlier ``chmod 000 .`` must not lock every later command
    out), then set the limits; files of at most ``file_bytes`` where that is less than
    ``file_size_mb`` (rounded down to KiB). ``ulimit`` units (bash, non-POSIX mode): -t seconds,
    -v and -f KiB, -u and -n counts. Core dumps are disabled. Exits 125 if either step fails."""
    file_kib = limits.file_size_mb * 1024 if file_bytes is None else min(limits.file_size_mb * 1024, file_bytes // 1024)
    return (
        'chmod u+rwx -- "$2" 2>/dev/null; cd -- "$2" || exit 125; '
        f"ulimit -H -S -c 0 -t {limits.cpu_s} -v {limits.memory_mb * 1024} "
        f"-f {file_kib} -u {limits.processes} -n {limits.open_files} "
        "|| exit 125"
    )
