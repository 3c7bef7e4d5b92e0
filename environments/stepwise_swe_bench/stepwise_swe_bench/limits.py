"""The sandbox's caps, one config for both engines; who enforces each is ``sandbox.ENFORCED``.

With Docker every cap is an engine flag (``docker``). With bubblewrap the kernel enforces what
an rlimit or, as root, a cgroup gives (``bwrap``); what neither gives is not enforced, and the
environment says so when it loads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_config import BaseConfig

__all__ = ["Engine", "SandboxLimits"]

MIB = 1024 * 1024
Engine = Literal["docker", "bwrap"]


class SandboxLimits(BaseConfig):
    """Where model commands run and their caps (``--env.taskset.task.sandbox.*``). Sizes in MiB,
    times in seconds; "episode" caps hold all of an episode's commands together."""

    engine: Engine = "docker"
    """``docker``: a container per episode, grading in a fresh one (the bundled tasks run in the
    image ``python -m stepwise_swe_bench.image`` builds). ``bwrap``: bubblewrap over a host
    directory, for machines without an engine (bundled tasks only)."""
    timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit of one command."""
    memory_mb: int = Field(8192, ge=64)
    """Per episode: memory of its processes and of its in-memory writable places, swap off
    (docker; bwrap as root: a memory cgroup)."""
    cpus: float = Field(1.0, gt=0)
    """Per episode: CPUs' worth of time its processes get together (docker; bwrap as root: CFS
    quota of a cpu cgroup)."""
    processes: int = Field(256, gt=0)
    """Per episode: processes and threads (docker; bwrap as root: a pids cgroup; as an ordinary
    user RLIMIT_NPROC, per command)."""
    process_memory_mb: int = Field(4096, gt=0)
    """Per process: address space (RLIMIT_AS; bwrap only, where no cgroup may hold memory)."""
    open_files: int = Field(1024, gt=0)
    """Per process: RLIMIT_NOFILE."""
    file_size_mb: int = Field(256, gt=0)
    """Per file: RLIMIT_FSIZE."""
    disk_mb: int = Field(4096, ge=16)
    """Per episode: size of the repository's file system (docker: a tmpfs at /testbed)."""
    inodes: int = Field(262_144, ge=1024)
    """Per episode: files and directories the repository may hold (docker: the tmpfs's)."""
    tmp_mb: int = Field(512, gt=0)
    """Size of the private /tmp (a tmpfs)."""
    shm_mb: int = Field(64, gt=0)
    """Size of the private /dev/shm (a tmpfs)."""
    output_kept_bytes: int = Field(64 * 1024, gt=0)
    """Output kept for the record: the first and last halves of this many bytes."""
    output_kill_bytes: int = Field(16 * MIB, gt=0)
    """A command producing more output than this is cut off."""

    @model_validator(mode="after")
    def _memory_holds_the_writable_places(self) -> SandboxLimits:
        # With Docker the writable places are tmpfs, charged to the episode's memory: full, they
        # must leave room for the commands, or a full disk would leave the episode unusable.
        held = self.disk_mb + self.tmp_mb + self.shm_mb
        if self.engine == "docker" and held >= self.memory_mb:
            raise ValueError(
                f"sandbox.memory_mb={self.memory_mb} must exceed disk_mb + tmp_mb + shm_mb = {held}: "
                "the writable places are in memory (tmpfs) and count against it"
            )
        return self
