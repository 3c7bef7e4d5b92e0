"""The CPU share of an episode. Where cgroups are writable, all processes of its commands
together get at most ``episode_cpus`` CPUs' worth of time, throttled by the kernel's CFS
bandwidth control (never killed for it), so one episode's spinners, in as many sessions or
processes as it may start, cannot slow another episode's commands or grading by more than that
share. Sibling episode cgroups have equal weight, so under contention each gets the same part
of what is left.

The cgroup, as for the memory cap (``memory``; the same cgroup's marker and lifetime rules):

- cgroup v1 (a ``cpu`` hierarchy, as on this project's CI): a child of this process's own cpu
  cgroup, ``cpu.cfs_quota_us = episode_cpus * cpu.cfs_period_us``; a command's first process
  joins it as it joins the memory cgroup (``join``);
- cgroup v2: a process is in one cgroup only, so the cap is ``cpu.max`` on the episode's memory
  cgroup, where its parent hands the cpu controller down too (``memory.CgroupMemory``).

Elsewhere (an ordinary user without a delegated subtree) ``TreeCpu`` watches each command's
process tree and stops it (SIGSTOP) while it is over its share, then lets it go on (SIGCONT),
which is what CFS bandwidth control does to a cgroup's tasks: per command, not per episode, and
its bound is what the tree runs between two measures; a command that keeps its own stopped
processes running is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path

from . import memory
from .process import Breach
from .proctree import cpu_seconds, tree

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


_HOLD_POLL_S = 0.05
"""How often a held tree is listed again: processes forked as the stop went out are stopped then."""
_RESUMES = 3
"""Polls that may find a stopped process of a held tree running again before the command is
killed: one is the kernel's (it continues an orphaned process group), more are the tree's own."""
_STOPPED = "TtZX"
"""States of a process that does not run (stopped, traced, ended)."""


class TreeCpu:
    """No cgroup: one command's process tree held to ``cpus`` CPUs' worth of time as it runs.

    Every ``memory.WATCH_INTERVAL_S`` the tree's CPU time (``cpu_seconds``: its processes' and
    the children they waited for) since the last measure is charged against a budget that grows
    by ``cpus`` times the wall time (at most one interval's worth saved up, so an idle command
    cannot bank a burst). A tree in debt is held: stopped (SIGSTOP) for as long as its share
    takes to pay the debt back, then continued (SIGCONT); throttled, not killed. While held it
    is listed every ``_HOLD_POLL_S`` and whatever runs in it is stopped again (a process forked
    as the stop went out). Only something in the tree can continue a process seen stopped (the
    kernel aside, once, for an orphaned process group), and that is the one way around the
    hold: a command whose stopped processes run again at ``_RESUMES`` polls, or whose held tree
    uses more than its share plus one interval, is killed (``cpu_limit``).

    What it cannot see: the CPU time of children reaped without a wait (a parent that ignores
    SIGCHLD) is added to no process, so short-lived children of such a parent go uncounted.
    """

    blocking = True
    interval_s: float | None = memory.WATCH_INTERVAL_S

    def __init__(self, cpus: float) -> None:
        self.cpus = cpus
        self.root: int | None = None
        self.used = 0.0
        self.at = 0.0
        self.budget = 0.0
        self.held: list[int] = []
        self.seen_stopped: set[int] = set()
        self.resumes = 0
        self.held_at = self.held_used = self.until = 0.0
        self._lock = threading.Lock()  # a cancelled watch's thread may still be measuring

    def start(self, pid: int) -> None:
        self.root, self.at = pid, time.monotonic()

    def breach(self, running: bool) -> Breach | None:
        with self._lock:
            if not running or self.root is None:
                self._release()
                return None
            stats, now = tree(self.root), time.monotonic()
            pids, used = list(stats), cpu_seconds(stats.values())
            if self.held:
                return self._hold({pid: fields[0] for pid, fields in stats.items()}, used, now)
            refill = self.cpus * (now - self.at)
            self.budget = min(self.budget + refill, self.cpus * memory.WATCH_INTERVAL_S) - max(0.0, used - self.used)
            self.used, self.at = used, now
            if self.budget < 0:
                pause = -self.budget / self.cpus
                _signal(pids, signal.SIGSTOP)
                self.held, self.held_at, self.held_used, self.until = pids, now, used, now + pause
                # The pause pays the debt: the next measure counts from its end.
                self.budget, self.at = 0.0, now + pause
                self.interval_s = _HOLD_POLL_S
            return None

    def _hold(self, state: dict[int, str], used: float, now: float) -> Breach | None:
        """``state``: each process of the tree and its state (field 3 of stat(5))."""
        if any(state.get(pid, "Z") not in _STOPPED for pid in self.seen_stopped):
            self.resumes += 1
        if (
            self.resumes >= _RESUMES
            or used - self.held_used > self.cpus * (now - self.held_at) + memory.WATCH_INTERVAL_S
        ):
            return Breach(
                "cpu_limit",
                f"the episode's CPU share of {self.cpus:g} CPUs: its processes kept running while stopped for it",
            )
        self.seen_stopped = {pid for pid, s in state.items() if s in "Tt"}
        _signal([pid for pid, s in state.items() if s not in _STOPPED], signal.SIGSTOP)
        self.held = sorted({*self.held, *state})
        if now >= self.until:  # what ran while held is charged at the next measure
            self._release()
        return None

    def _release(self) -> None:
        _signal(self.held, signal.SIGCONT)
        self.held, self.seen_stopped = [], set()
        self.interval_s = memory.WATCH_INTERVAL_S


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
