"""A command's process tree as the host sees it in ``/proc``: what the watchers of the episode
caps measure where the kernel cannot enforce them (``memory``, ``volume``).

Every process of a sandboxed command descends from its bwrap process on the host: bwrap's PID
namespace reparents orphans (``setsid``, double forks) to the namespace's init, bwrap's child.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

__all__ = ["cpu_seconds", "descendants", "open_deleted_files", "resident_bytes", "start_time", "tree"]

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:  # gone, or not ours to read
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks after boot, field 22 of stat(5)), or None when it is
    gone: with the pid, an identity no later process can take over."""
    fields = _stat_fields(str(pid))
    return None if fields is None else fields[19]


def tree(root: int) -> dict[int, list[str]]:
    """``root`` and every process below it, now, each with the fields of its stat (one pass over
    ``/proc``); empty once ``root`` is gone."""
    fields_of: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(name)) is not None:
            fields_of[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    found, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in fields_of:
            found[pid] = fields_of[pid]
            stack.extend(children.get(pid, ()))
    return found


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, now (one pass over ``/proc``)."""
    return list(tree(root)) or [root]


def resident_bytes(pids: list[int]) -> int:
    """The summed resident set of ``pids`` (pages shared between them count once per process,
    so this overstates, never understates, what they hold)."""
    total = 0
    for pid in pids:
        fields = _stat_fields(str(pid))
        if fields is not None:
            total += int(fields[21]) * _PAGE  # rss, field 24 of stat(5)
    return total


def cpu_seconds(stats: Iterable[list[str]]) -> float:
    """The CPU time of the processes whose stat fields (``tree``) are ``stats`` and of the
    children they reaped (user and system, fields 14-17 of stat(5)): a process that ends moves
    its time to the one that waits for it."""
    return sum(int(field) for fields in stats for field in fields[11:15]) / _TICK


def open_deleted_files(pids: Sequence[int], device: int) -> Iterator[os.stat_result]:
    """Files on ``device`` that ``pids`` hold open after they were deleted: invisible to a walk
    of the tree, still taking space until closed."""
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if info.st_dev == device and info.st_nlink == 0:
                yield info
