"""Bounded capture of a command's output, and the record of one command.

Output is consumed while it streams: the first and last halves of a fixed budget are kept, the
middle is counted and dropped, so a command printing a gigabyte costs a few KiB of memory.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["CommandResult", "OutputBuffer", "Termination", "printable"]

Termination = Literal["exit", "timeout", "output_limit", "memory_limit", "disk_limit", "files_limit", "cpu_limit"]
# ANSI escape sequences (OSC, CSI, two-byte ESC forms), then C0/C1 controls other than \t, \n.
_CONTROL = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def printable(text: str) -> str:
    """``text`` without terminal escapes and control characters (tabs and newlines stay):
    what a model and a record may be shown. ``CommandResult.output`` itself stays exact."""
    return _CONTROL.sub("", text)


class OutputBuffer:
    """Keeps the first ``kept // 2`` and the last ``kept - kept // 2`` bytes fed to it."""

    def __init__(self, kept: int) -> None:
        self._head_cap = kept // 2
        self._tail_cap = kept - self._head_cap
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail_len - len(self._tail[0]) >= self._tail_cap:
            self._tail_len -= len(self._tail.popleft())

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - min(self._tail_len, self._tail_cap)

    def text(self) -> str:
        tail = b"".join(self._tail)[-self._tail_cap :] if self._tail_cap else b""
        head = bytes(self._head).decode(errors="replace")
        if not self.dropped:
            return (bytes(self._head) + tail).decode(errors="replace")
        return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail.decode(errors='replace')}"

    def result(
        self, command: str, exit_code: int, termination: Termination, duration_s: float, cap: str | None = None
    ) -> CommandResult:
        """The record of the command whose output this buffer holds."""
        return CommandResult(
            command=command,
            exit_code=exit_code,
            output=self.text(),
            output_bytes=self.total,
            dropped_bytes=self.dropped,
            termination=termination,
            duration_s=round(duration_s, 4),
            cap=cap,
        )


@dataclass(frozen=True)
class CommandResult:
    """What one command did. ``exit_code`` follows ``subprocess``: negative = killed by that
    signal. ``termination`` says who ended it: the command itself, the wall-clock limit, the
    output limit, or an episode cap (memory, disk); ``cap`` names that cap in words, or one the
    command ran into without being killed (a full volume)."""

    command: str
    exit_code: int
    output: str
    output_bytes: int
    dropped_bytes: int
    termination: Termination
    duration_s: float
    cap: str | None = None

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0 or self.termination == "output_limit"

    def describe(self) -> str:
        """The text a model sees."""
        notes = {
            "exit": f"[exit code {self.exit_code}]",
            "timeout": "[killed: the command exceeded its time limit]",
            "output_limit": "[killed: the command produced too much output]",
            "memory_limit": f"[killed: {self.cap}]",
            "disk_limit": f"[killed: {self.cap}]",
            "files_limit": f"[killed: {self.cap}]",
            "cpu_limit": f"[killed: {self.cap}]",
        }
        note = notes[self.termination]
        if self.cap is not None and self.termination == "exit":
            note += f"\n[{self.cap}]"
        return f"{printable(self.output).rstrip()}\n{note}".lstrip("\n")

    def record(self, max_chars: int = 2000) -> dict[str, Any]:
        """A compact, JSON-ready record for the episode (output shortened to its tail)."""
        record = asdict(self)
        record["output"] = printable(self.output[-max_chars:])
        record["command"] = printable(self.command[:max_chars])
        return record
