"""The open files of an episode: how many its running processes hold together.

No kernel limit counts open files per group of processes: RLIMIT_NOFILE (``open_files``) is per
process, so the kernel's bound for an episode is ``processes`` times it (256 x 1024 by default:
a tenth of this project's machine's ``fs.file-max``, enough for a few episodes to empty the
host's file table). ``OpenFiles`` counts what the episode holds while each command runs, every
``WATCH_INTERVAL_S``, and kills the command past ``episode_open_files`` (``files_limit``): the
processes are those of the episode's cgroup (every command of the episode, where cgroups are
writable), else the command's process tree. Its bound is what is opened between two counts; the
kernel's product above bounds the peak.
"""

from __future__ import annotations

import os
from pathlib import Path

from .process import Breach
from .proctree import descendants

__all__ = ["OpenFiles", "WATCH_INTERVAL_S", "open_files"]

WATCH_INTERVAL_S = 0.1


def open_files(pids: list[int]) -> int:
    """Open file descriptors of ``pids`` together (threads share their process's table)."""
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:  # gone
            continue
    return total


class OpenFiles:
    """One command under the episode's open-file cap."""

    blocking = True
    interval_s: float | None = WATCH_INTERVAL_S

    def __init__(self, cap: int, procs: Path | None = None) -> None:
        """``procs``: the episode cgroup's ``cgroup.procs`` (None: the command's tree)."""
        self.cap, self.procs = cap, procs
        self.root: int | None = None
        self.peak = 0

    def start(self, pid: int) -> None:
        self.root = pid

    def _pids(self) -> list[int]:
        if self.procs is not None:
            try:
                return [int(p) for p in self.procs.read_text().split()]
            except OSError:
                return []
        return descendants(self.root) if self.root is not None else []

    def breach(self, running: bool) -> Breach | None:
        if not running:
            return None  # its processes are gone, and their files with them
        self.peak = max(self.peak, open_files(self._pids()))
        if self.peak > self.cap:
            return Breach("files_limit", f"the episode's cap of {self.cap} open files")
        return None
