"""The CPU share of an episode: all processes of its commands together get at most
``episode_cpus`` CPUs' worth of time, throttled by the kernel's CFS bandwidth control (never
killed for it), so one episode's spinners, in as many sessions or processes as it may start,
cannot slow another episode's commands or grading by more than that share. Sibling episode
cgroups have equal weight, so under contention each gets the same part of what is left.

Where cgroups are writable, as for the memory cap (``memory``; the same cgroup's marker and
lifetime rules):

- cgroup v1 (a ``cpu`` hierarchy, as on this project's CI): a child of this process's own cpu
  cgroup, ``cpu.cfs_quota_us = episode_cpus * cpu.cfs_period_us``; a command's first process
  joins it as it joins the memory cgroup (``join``);
- cgroup v2: a process is in one cgroup only, so the cap is ``cpu.max`` on the episode's memory
  cgroup, where its parent hands the cpu controller down too (``memory.CgroupMemory``).

Elsewhere (an ordinary user without a delegated subtree) nothing bounds the share beyond the
per-process CPU time (RLIMIT_CPU) and the process limit: see the bundle README.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from pathlib import Path

from . import memory

__all__ = ["CgroupCpu", "episode_cpu", "release"]

_log = logging.getLogger(__name__)


class CgroupCpu:
    """The v1 cpu cgroup of one repository's commands."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, parent: Path, cpus: float) -> CgroupCpu:
        memory.sweep(parent)
        path = parent / f"{memory.PREFIX}{memory.maker()}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        try:
            (path / "cpu.cfs_period_us").write_text(str(memory.PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(memory.quota_us(cpus)))
        except BaseException:
            path.rmdir()
            raise
        memory.MADE.add(path)
        return cls(path)

    def join(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this cgroup."""
        return ["/bin/sh", "-c", memory.JOIN, str(self.path / "cgroup.procs"), *argv]


def _marker(repo: Path) -> Path:
    return repo.parent / f".{repo.name}.cpu"


def episode_cpu(repo: Path, cpus: float) -> CgroupCpu | None:
    """The v1 cpu cgroup of ``repo``'s commands (made on first use), or None: no v1 cpu
    hierarchy we may write (on v2 the memory cgroup carries the cap)."""
    marker = _marker(repo)
    with contextlib.suppress(FileNotFoundError):
        path = Path(marker.read_text())
        if path.is_dir():
            return CgroupCpu(path)
    hierarchy = memory.own_hierarchy("cpu")
    if hierarchy is None or hierarchy.version != 1:
        return None
    try:
        cgroup = CgroupCpu.make(hierarchy.parent, cpus)
    except OSError as error:
        _log.warning("no cpu cgroup for %s (%s): its CPU share is not capped", repo, error)
        return None
    marker.write_text(str(cgroup.path))
    return cgroup


def release(repo: Path) -> None:
    """Remove ``repo``'s cpu cgroup (its tree is being removed)."""
    marker = _marker(repo)
    try:
        path = Path(marker.read_text())
    except FileNotFoundError:
        return
    memory.remove(path)
    marker.unlink(missing_ok=True)
