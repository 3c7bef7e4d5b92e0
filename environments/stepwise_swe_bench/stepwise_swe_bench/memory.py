"""The memory cap of an episode: all processes of its commands together, bwrap included.

Where the kernel can enforce it, each repository gets a memory cgroup (``episode_memory``):
resident memory, page cache and tmpfs pages (the sandbox's ``/tmp``, ``/dev/shm``) are charged
to it, and swap too, so swapping is no way around the cap. A command's first process moves
itself into the cgroup before it execs bubblewrap (``join``), so nothing it starts is ever
outside. When the kernel's OOM killer kills one of its processes, the whole command is killed
and recorded as ``memory_limit`` ("killed: the episode's memory cap of N MiB").

- cgroup v1 (a ``memory`` hierarchy, as on this project's CI): a child of this process's own
  memory cgroup, with ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``; root only.
- cgroup v2: a child of the parent of this process's cgroup, where that parent is writable (a
  delegated subtree, e.g. systemd's ``user@UID.service``) and hands the memory controller to its
  children (``cgroup.subtree_control``); ``memory.max``, ``memory.swap.max = 0`` and
  ``memory.oom.group`` (the kernel kills the whole cgroup). Children of our own cgroup would not
  do: a v2 cgroup holding processes cannot hand controllers down.

Elsewhere (an ordinary user without a delegated subtree) ``TreeMemory`` sums the resident sets
of the command's process tree every ``WATCH_INTERVAL_S`` and kills it past the cap. It sees
only what is resident at a check: between two checks a process can allocate more (at most its
own address-space limit, ``memory_mb``, each), and tmpfs pages are not in a resident set (the
sandbox's ``/tmp`` and ``/dev/shm`` are bounded by their own sizes).

A cgroup is named after the process that made it (pid and start time) and kept in a marker
beside the repository (``.<name>.memory``) so the tool server's sandbox joins the same one. It
is removed with the repository (``release``), or when its maker exits; one whose maker is gone
and that holds no process (a crashed run) is removed by the next process that makes one.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .process import Breach
from .proctree import descendants, resident_bytes, start_time

__all__ = [
    "JOIN", "MADE", "PERIOD_US", "PREFIX", "CgroupMemory", "Hierarchy", "TreeMemory", "episode_memory",
    "find_hierarchy", "maker", "own_hierarchy", "quota_us", "release", "remove", "sweep",
]  # fmt: skip

MIB = 1024 * 1024
WATCH_INTERVAL_S = 0.1
"""How often the process-tree watcher (no cgroup) measures."""
_OOM_POLL_S = 0.05
"""How often a cgroup's OOM-kill counter is read while a command runs."""
PREFIX = "stepwise-swe-bench-"
_log = logging.getLogger(__name__)
JOIN = 'echo 0 > "$0" && exec "$@"'
"""sh: move this process into the cgroup whose ``cgroup.procs`` is ``$0``, then exec the rest."""
PERIOD_US = 100_000
"""CFS bandwidth period of an episode's CPU share (``cpu``): its quota is renewed every period."""


def quota_us(cpus: float) -> int:
    """The CPU quota per period for ``cpus`` CPUs (the kernel's minimum is 1 ms)."""
    return max(1000, round(cpus * PERIOD_US))


def _cap_words(cap_mb: int) -> str:
    return f"the episode's memory cap of {cap_mb} MiB"


@dataclass(frozen=True)
class Hierarchy:
    """Where episode cgroups are made."""

    version: Literal[1, 2]
    parent: Path


def find_hierarchy(self_cgroup: str, mountinfo: str, controller: str = "memory") -> Hierarchy | None:
    """The hierarchy episode cgroups of ``controller`` go in, from ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo`` (see the module docstring), or None."""
    v1: dict[str, tuple[str, Path]] = {}
    v2: tuple[str, Path] | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        if kind[0] == "cgroup" and controller in kind[2].split(","):
            v1[controller] = (fields[3], Path(fields[4]))
        elif kind[0] == "cgroup2":
            v2 = (fields[3], Path(fields[4]))
    for line in self_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") and controller in v1:
            parent = _under(*v1[controller], path)
            if parent is not None and os.access(parent, os.W_OK):
                return Hierarchy(1, parent)
        if number == "0" and not controllers and v2 is not None:
            own = _under(*v2, path)
            if own is None:
                continue
            parent = own if path == "/" else own.parent
            try:
                delegated = controller in (parent / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if delegated and os.access(parent, os.W_OK) and os.access(parent / "cgroup.procs", os.W_OK):
                return Hierarchy(2, parent)
    return None


def _under(root: str, mount: Path, path: str) -> Path | None:
    """Where the cgroup ``path`` is, given a hierarchy's mount (``root``: the part mounted)."""
    if not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    return mount / path[len(root) :].lstrip("/")


def _read(path: Path) -> str:
    with open(path) as file:
        return file.read()


def maker() -> str:
    return f"{os.getpid()}-{start_time(os.getpid())}"


def _maker_alive(name: str) -> bool:
    pid, start = name.removeprefix(PREFIX).split("-")[:2]
    return pid.isdigit() and start_time(int(pid)) == start


class CgroupMemory:
    """The cgroup of one repository's commands."""

    def __init__(self, path: Path, version: Literal[1, 2], cap_mb: int) -> None:
        self.path, self.version, self.cap_mb = path, version, cap_mb

    @classmethod
    def make(cls, hierarchy: Hierarchy, cap_mb: int, cpus: float | None = None) -> CgroupMemory:
        """``cpus``: on v2, the episode's CPU share (``cpu.max``) where the cpu controller is
        handed down too (v1 has a cpu hierarchy of its own: ``cpu``)."""
        sweep(hierarchy.parent)
        path = hierarchy.parent / f"{PREFIX}{maker()}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        cap = str(cap_mb * MIB)
        try:
            if hierarchy.version == 1:
                (path / "memory.limit_in_bytes").write_text(cap)
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(cap)
            else:
                (path / "memory.max").write_text(cap)
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                (path / "memory.oom.group").write_text("1")
                if cpus is not None and (path / "cpu.max").exists():
                    (path / "cpu.max").write_text(f"{quota_us(cpus)} {PERIOD_US}")
        except BaseException:
            path.rmdir()
            raise
        MADE.add(path)
        return cls(path, hierarchy.version, cap_mb)

    def join(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this cgroup."""
        return ["/bin/sh", "-c", JOIN, str(self.path / "cgroup.procs"), *argv]

    def oom_kills(self) -> int:
        events = self.path / ("memory.oom_control" if self.version == 1 else "memory.events")
        for line in _read(events).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def guard(self) -> CgroupGuard:
        return CgroupGuard(self)


class CgroupGuard:
    """One command under a cgroup: did the OOM killer act while it ran?"""

    blocking = False
    interval_s: float | None = _OOM_POLL_S

    def __init__(self, cgroup: CgroupMemory) -> None:
        self.cgroup = cgroup
        self.before = cgroup.oom_kills()

    def start(self, pid: int) -> None:
        pass

    def breach(self, running: bool) -> Breach | None:
        if self.cgroup.oom_kills() > self.before:
            return Breach("memory_limit", _cap_words(self.cgroup.cap_mb))
        return None


class TreeMemory:
    """No cgroup: the summed resident set of the command's processes, measured as it runs."""

    blocking = True
    interval_s: float | None = WATCH_INTERVAL_S

    def __init__(self, cap_mb: int) -> None:
        self.cap_mb = cap_mb
        self.root: int | None = None
        self.peak = 0
        """The largest sum seen (bytes)."""

    def join(self, argv: list[str]) -> list[str]:
        return argv

    def guard(self) -> TreeMemory:
        return TreeMemory(self.cap_mb)

    def start(self, pid: int) -> None:
        self.root = pid

    def breach(self, running: bool) -> Breach | None:
        if not running or self.root is None:
            return None  # its processes are gone
        self.peak = max(self.peak, resident_bytes(descendants(self.root)))
        return Breach("memory_limit", _cap_words(self.cap_mb)) if self.peak > self.cap_mb * MIB else None


MADE: set[Path] = set()
"""Cgroups this process made: those still there and empty at exit (a sandbox whose tree was
never removed) are removed then."""


@atexit.register
def _remove_made() -> None:
    mine = f"{PREFIX}{maker()}-"  # not a forked child's: the cgroups are its parent's
    for path in MADE:
        with contextlib.suppress(OSError):
            if not path.name.startswith(mine):
                continue
            if not _read(path / "cgroup.procs").split():
                path.rmdir()


def _marker(repo: Path) -> Path:
    return repo.parent / f".{repo.name}.memory"


def episode_memory(repo: Path, cap_mb: int, cpus: float | None = None) -> CgroupMemory | TreeMemory:
    """The memory cap of ``repo``'s commands: its cgroup (made on first use; on v2 also capping
    the CPU share at ``cpus``), or a watcher."""
    marker = _marker(repo)
    with contextlib.suppress(FileNotFoundError):
        version, path = _read(marker).split(" ", 1)
        if Path(path).is_dir():
            return CgroupMemory(Path(path), 1 if version == "1" else 2, cap_mb)
    hierarchy = own_hierarchy()
    if hierarchy is None:
        return TreeMemory(cap_mb)
    try:
        cgroup = CgroupMemory.make(hierarchy, cap_mb, cpus)
    except OSError as error:
        _log.warning("no memory cgroup for %s (%s): the memory cap is enforced by a watcher", repo, error)
        return TreeMemory(cap_mb)
    marker.write_text(f"{cgroup.version} {cgroup.path}")
    return cgroup


def own_hierarchy(controller: str = "memory") -> Hierarchy | None:
    """Where this process's episode cgroups of ``controller`` go (``find_hierarchy``), or None."""
    try:
        return find_hierarchy(_read(Path("/proc/self/cgroup")), _read(Path("/proc/self/mountinfo")), controller)
    except OSError:
        return None


def remove(path: Path) -> None:
    """rmdir a cgroup, first killing what is left in it (a command's last processes may take
    a moment to go after bwrap died)."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            with contextlib.suppress(OSError):
                for pid in _read(path / "cgroup.procs").split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.02)
    path.rmdir()


def sweep(parent: Path) -> None:
    """Remove episode cgroups whose maker is gone and that hold no process."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(PREFIX) and not _maker_alive(entry.name):
                with contextlib.suppress(OSError):
                    if not _read(entry / "cgroup.procs").split():
                        entry.rmdir()


def release(repo: Path) -> None:
    """Remove ``repo``'s cgroup (its tree is being removed)."""
    marker = _marker(repo)
    try:
        _version, path = _read(marker).split(" ", 1)
    except FileNotFoundError:
        return
    remove(Path(path))
    marker.unlink(missing_ok=True)
