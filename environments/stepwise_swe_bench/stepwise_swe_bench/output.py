"""Bounded capture of a command's output, and the record of one command.

Output is consumed while it streams: the first and last halves of a fixed budget are kept, the
middle is counted and dropped, so a command printing a gigabyte costs a few KiB of memory.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["KILLED", "CommandResult", "OutputBuffer", "Termination", "printable"]

Termination = Literal["exit", "timeout", "output_limit"]
KILLED = (137, -9)
"""Exit codes of a command killed by SIGKILL: inside a container (128 + 9), or bwrap itself."""
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

    def result(self, command: str, exit_code: int, termination: Termination, duration_s: float) -> CommandResult:
        """The record of the command whose output this buffer holds."""
        return CommandResult(
            command=command,
            exit_code=exit_code,
            output=self.text(),
            output_bytes=self.total,
            dropped_bytes=self.dropped,
            termination=termination,
            duration_s=round(duration_s, 4),
        )


@dataclass(frozen=True)
class CommandResult:
    """What one command did. ``exit_code`` follows ``subprocess`` (negative: killed by that
    signal), or the shell's 128 + signal inside a container. ``termination`` says who ended it:
    the command itself, the wall-clock limit or the output limit."""

    command: str
    exit_code: int
    output: str
    output_bytes: int
    dropped_bytes: int
    termination: Termination
    duration_s: float

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0 or self.termination == "output_limit"

    def describe(self) -> str:
        """The text a model sees."""
        notes = {
            "exit": f"[exit code {self.exit_code}]",
            "timeout": "[killed: the command exceeded its time limit]",
            "output_limit": "[killed: the command produced too much output]",
        }
        note = notes[self.termination]
        if self.termination == "exit" and self.exit_code in KILLED:
            note = f"[exit code {self.exit_code}: killed by SIGKILL, as at the episode's memory cap]"
        return f"{printable(self.output).rstrip()}\n{note}".lstrip("\n")

    def record(self, max_chars: int = 2000) -> dict[str, Any]:
        """A compact, JSON-ready record for the episode (output shortened to its tail)."""
        record = asdict(self)
        record["output"] = printable(self.output[-max_chars:])
        record["command"] = printable(self.command[:max_chars])
        return record
