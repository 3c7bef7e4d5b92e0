"""Run one host process with a wall-clock limit and bounded, streamed output capture.

The process gets its own session (process group); a timeout or an output overflow kills the whole
group with SIGKILL. For a bubblewrap sandbox that group holds bwrap itself, whose death tears
down the sandbox's PID namespace and with it every process the command started, including ones
that left the group with ``setsid``.

``guards`` watch the episode's caps while the command runs (``memory``, ``volume``): each is
polled every ``interval_s`` (in a thread if it walks a tree or /proc) and once after the
command ended; a breach while it runs kills the group like a timeout does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .output import CommandResult, OutputBuffer, Termination

__all__ = ["Breach", "Guard", "run_process"]

_CHUNK = 64 * 1024
_REAP_GRACE_S = 5.0


@dataclass(frozen=True)
class Breach:
    """A cap a command ran into: ``cap`` says which, in words the model and the records see.
    ``termination`` is ``exit`` for a cap that was only reached (a full volume), not enforced
    by killing."""

    termination: Termination
    cap: str


class Guard(Protocol):
    """One cap of the episode, watched while a command runs."""

    blocking: bool
    """Measuring takes long enough (a walk of a tree or of /proc) to leave the event loop for a
    thread."""
    interval_s: float | None
    """How long until it is measured again while the command runs (None: only after it
    ended); read before each wait, so a guard may adapt it."""

    def start(self, pid: int) -> None:
        """The command's process (the session leader: bwrap) has started."""
        ...

    def breach(self, running: bool) -> Breach | None:
        """The cap the command went past, if it did (``running``: it has not ended yet)."""
        ...


async def _measure(guard: Guard, running: bool) -> Breach | None:
    return await asyncio.to_thread(guard.breach, running) if guard.blocking else guard.breach(running)


async def _watch(guard: Guard) -> Breach:
    while True:
        await asyncio.sleep(guard.interval_s or 0)
        found = await _measure(guard, True)
        if found is not None and found.termination != "exit":
            return found


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    # A command that never reads its input must not fail the run.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


async def _drain(stream: asyncio.StreamReader, buffer: OutputBuffer, kill_after: int) -> bool:
    """Read to EOF; True if the output went past ``kill_after`` bytes (reading stops there)."""
    while chunk := await stream.read(_CHUNK):
        buffer.feed(chunk)
        if buffer.total > kill_after:
            return True
    return False


async def run_process(
    argv: Sequence[str],
    *,
    label: str,
    timeout_s: float,
    kept_bytes: int,
    kill_bytes: int,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
    env: dict[str, str] | None = None,
    guards: Sequence[Guard] = (),
) -> CommandResult:
    """Run ``argv`` (stdout and stderr merged) and describe the outcome. ``label`` is what the
    record calls the command. Cancellation kills the process group too."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
        env=env,
    )
    buffer = OutputBuffer(kept_bytes)
    termination: Termination = "exit"
    breach: Breach | None = None
    assert proc.stdout is not None
    feeder = asyncio.create_task(_feed(proc, stdin)) if stdin is not None else None
    for guard in guards:
        guard.start(proc.pid)
    watchers = [asyncio.create_task(_watch(g)) for g in guards if g.interval_s is not None]
    work = asyncio.create_task(_finish(proc, buffer, kill_bytes))
    try:
        done, _ = await asyncio.wait([work, *watchers], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            termination = "output_limit" if work.result() else "exit"
        else:
            work.cancel()
            await asyncio.wait([work])  # its read has stopped before the one below starts
            tripped = [w.result() for w in watchers if w in done]
            breach = tripped[0] if tripped else None
            termination = breach.termination if breach else "timeout"
        if termination != "exit":
            _kill_group(proc)
            # Killing bwrap ends the sandbox, so the pipe reaches EOF; what is left in it is
            # read and dropped (asyncio reaps a process only once its pipes are closed).
            async with asyncio.timeout(_REAP_GRACE_S):
                while await proc.stdout.read(_CHUNK):
                    pass
                await proc.wait()
    finally:
        for task in (work, *watchers):
            task.cancel()
        if proc.returncode is None:
            _kill_group(proc)
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
    assert proc.returncode is not None
    if termination == "exit":
        # A cap hit in the last moments (the OOM killer's victim was the last process), or only
        # reached (a full volume).
        for guard in guards:
            if (breach := await _measure(guard, False)) is not None:
                termination = breach.termination
                break
    cap = breach.cap if breach is not None else None
    return buffer.result(label, proc.returncode, termination, time.monotonic() - start, cap)


async def _finish(proc: asyncio.subprocess.Process, buffer: OutputBuffer, kill_bytes: int) -> bool:
    """Read the output to EOF and wait for the process; True if it went past ``kill_bytes``."""
    assert proc.stdout is not None
    if await _drain(proc.stdout, buffer, kill_bytes):
        return True
    await proc.wait()
    return False
