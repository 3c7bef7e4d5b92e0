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

Elsewhere (an ordinary user without a delegated subtree) ``TreeCpu`` watches each command's
process tree and stops it (SIGSTOP) while it is over its share, then lets it go on (SIGCONT),
which is what CFS bandwidth control does to a cgroup's tasks; its bound is what the tree runs
between two measures, and a command that continues its own stopped processes is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from . import memory
from .process import Breach
from .proctree import cpu_seconds, descendants

__all__ = ["CgroupCpu", "TreeCpu", "episode_cpu", "release"]

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


_HOLD_POLL_S = 0.01
"""How often a stopped tree is listed again while it is held."""
_SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1)


class TreeCpu:
    """No cgroup: one command's process tree held to ``cpus`` CPUs' worth of time as it runs.

    Every ``memory.WATCH_INTERVAL_S`` the tree's CPU time (``cpu_seconds``) since the last
    measure is charged against a budget that grows by ``cpus`` times the wall time (at most one
    interval's worth saved up, so an idle command cannot bank a burst). A tree in debt is
    stopped (SIGSTOP) for as long as its share takes to pay the debt back, then continued
    (SIGCONT): throttled, not killed. While it is held the tree is listed every
    ``_HOLD_POLL_S``: a process forked before the stop reached its parent is stopped then, and
    one of the stopped processes running again can only have been continued from inside the tree
    (nothing outside its PID namespace but this watcher signals it), the one way around the
    throttle: the command is killed (``cpu_limit``).
    """

    blocking = True
    interval_s: float | None = memory.WATCH_INTERVAL_S

    def __init__(self, cpus: float) -> None:
        self.cpus = cpus
        self.root: int | None = None
        self.used = 0.0
        self.at = 0.0
        self.budget = 0.0
        self.held: set[int] = set()
        self.until = 0.0
        self.throttled_s = 0.0
        """How long the tree was held, in all."""

    def start(self, pid: int) -> None:
        self.root, self.at = pid, time.monotonic()

    def breach(self, running: bool) -> Breach | None:
        if not running or self.root is None:
            self._release()
            return None
        pids, now = descendants(self.root), time.monotonic()
        if self.held:
            return self._hold(pids, now)
        used = cpu_seconds(pids)
        refill = self.cpus * (now - self.at)
        self.budget = min(self.budget + refill, self.cpus * memory.WATCH_INTERVAL_S) - max(0.0, used - self.used)
        self.used, self.at = used, now
        if self.budget < 0:
            pause = -self.budget / self.cpus
            self.held = set(pids)
            _signal(pids, signal.SIGSTOP)
            # The pause pays the debt: the next measure counts from its end.
            self.budget, self.at, self.until = 0.0, now + pause, now + pause
            self.throttled_s += pause
            self.interval_s = _HOLD_POLL_S
        return None

    def _hold(self, pids: list[int], now: float) -> Breach | None:
        if any(pid in self.held and _continued(pid) for pid in pids):
            return Breach(
                "cpu_limit",
                f"the episode's CPU share of {self.cpus:g} CPUs, whose processes it continued while they were stopped",
            )
        fresh = [pid for pid in pids if pid not in self.held]
        _signal(fresh, signal.SIGSTOP)
        self.held.update(fresh)
        if now >= self.until:
            self._release()
        return None

    def _release(self) -> None:
        _signal(list(self.held), signal.SIGCONT)
        self.held = set()
        self.interval_s = memory.WATCH_INTERVAL_S


def _continued(pid: int) -> bool:
    """Whether ``pid``, sent SIGSTOP, runs with no stop pending: a SIGCONT reached it (which
    also discards a stop not yet acted on)."""
    try:
        status = dict(
            line.split(":", 1)
            for line in open(f"/proc/{pid}/status", encoding="utf-8").read().splitlines()
            if ":" in line
        )
    except OSError:  # gone
        return False
    state = status["State"].split()[0]
    if state in ("T", "t", "Z", "X"):
        return False
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return not pending & _SIGSTOP_BIT


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
