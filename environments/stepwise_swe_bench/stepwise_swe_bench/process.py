"""Run one host process with a wall-clock limit and bounded, streamed output capture.

The process gets its own session (process group); a timeout or an output overflow kills the whole
group with SIGKILL. For a bubblewrap sandbox that group holds bwrap itself, whose death tears
down the sandbox's PID namespace and every process the command started; for Docker it is the
``docker exec`` client, and the command inside stops by its own ``timeout`` (``docker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence

from .output import CommandResult, OutputBuffer, Termination

__all__ = ["run_process"]

_CHUNK = 64 * 1024
_REAP_GRACE_S = 5.0


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


async def _finish(proc: asyncio.subprocess.Process, buffer: OutputBuffer, kill_bytes: int) -> bool:
    """Read the output to EOF and wait for the process; True if it went past ``kill_bytes``."""
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(_CHUNK):
        buffer.feed(chunk)
        if buffer.total > kill_bytes:
            return True
    await proc.wait()
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
    feeder = asyncio.create_task(_feed(proc, stdin)) if stdin is not None else None
    work = asyncio.create_task(_finish(proc, buffer, kill_bytes))
    try:
        done, _ = await asyncio.wait([work], timeout=timeout_s)
        if work in done:
            termination = "output_limit" if work.result() else "exit"
        else:
            work.cancel()
            await asyncio.wait([work])  # its read has stopped before the one below starts
            termination = "timeout"
        if termination != "exit":
            _kill_group(proc)
            # What is left in the pipe is read and dropped (asyncio reaps a process only once
            # its pipes are closed).
            assert proc.stdout is not None
            async with asyncio.timeout(_REAP_GRACE_S):
                while await proc.stdout.read(_CHUNK):
                    pass
                await proc.wait()
    finally:
        work.cancel()
        if proc.returncode is None:
            _kill_group(proc)
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
    assert proc.returncode is not None
    return buffer.result(label, proc.returncode, termination, time.monotonic() - start)
