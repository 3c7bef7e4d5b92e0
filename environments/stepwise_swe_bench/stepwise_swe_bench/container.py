"""Model commands in a container runtime (docker, podman): the container is the sandbox.

Each command is one ``Runtime.run`` (``docker exec``) of a bash wrapper that enters the workdir,
applies the same ``ulimit`` limits as the local sandbox, runs the command under coreutils
``timeout`` (which signals the command's whole process group), merges stderr into stdout and
stops reading after ``output_kill_bytes`` (``head -c``; the writer then dies of SIGPIPE), so a
runaway command never ships more than that out of the container. The command's exit status goes
to stderr, apart from its output.

Grading never runs in the model's container: there the model is root and could have changed
anything (site-packages, git, a stash of the hidden tests from an earlier round). ``pristine``
starts a fresh container from the same image, with the same network policy, where the model's
diff is applied and the instance's eval script runs, as the official harness does; it is removed
afterwards.
"""

from __future__ import annotations

import contextlib
import shlex
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .limits import SandboxLimits, grading_limits, shell_prelude
from .output import CommandResult, OutputBuffer, Termination
from .sandbox import WORKDIR

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["RuntimeSandbox"]

_STATUS = "__stepwise_swe_bench_status"
# $1 = command, $2 = workdir, $3 = timeout (s), $4 = bytes read before the command is cut off.
_RUN = f'timeout -k 5 "$3" /bin/bash -c "$1" 2>&1 | head -c "$4"; echo "{_STATUS} ${{PIPESTATUS[0]}}" >&2'


class RuntimeSandbox:
    """``Sandbox`` over a started verifiers ``Runtime`` whose box is a container."""

    def __init__(self, runtime: vf.Runtime, limits: SandboxLimits | None = None, workdir: str = WORKDIR) -> None:
        self.runtime = runtime
        self.limits = limits or SandboxLimits()
        self.workdir = workdir

    def argv(self, command: str, timeout_s: float, read_bytes: int, limits: SandboxLimits | None = None) -> list[str]:
        """What ``Runtime.run`` executes in the container for ``command``."""
        wrapper = f"{shell_prelude(limits or self.limits)}; {_RUN}"
        return [
            "/bin/bash", "-c", wrapper, "sandbox",
            command, self.workdir, f"{timeout_s:g}", str(read_bytes),
        ]  # fmt: skip

    async def _run(
        self,
        command: str,
        *,
        stdin: bytes | None,
        timeout_s: float,
        kept_bytes: int,
        label: str,
        limits: SandboxLimits | None = None,
    ) -> CommandResult:
        staged = None
        if stdin is not None:
            staged = f"/tmp/stepwise-stdin-{uuid.uuid4().hex}"
            await self.runtime.write(staged, stdin)
            # Removed once open: what the command reads cannot be read again by what it runs.
            command = f"{{ rm -f {staged}; {command}\n}} < {staged}"
        kill = self.limits.output_kill_bytes
        start = time.monotonic()
        result = await self.runtime.run(self.argv(command, timeout_s, kill + 1, limits), {})
        duration = time.monotonic() - start
        status_lines = [line for line in result.stderr.splitlines() if line.startswith(f"{_STATUS} ")]
        exit_code = int(status_lines[-1].split()[1]) if status_lines else result.exit_code
        data = result.stdout.encode()
        buffer = OutputBuffer(kept_bytes)
        buffer.feed(data[:kill])
        termination: Termination
        if len(data) > kill:
            termination = "output_limit"
        elif exit_code in (124, 137) and duration >= timeout_s:
            termination = "timeout"
        else:
            termination = "exit"
        return buffer.result(label, exit_code if termination == "exit" else -9, termination, duration)

    async def run(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        kept_bytes: int | None = None,
        scratch_only: bool = False,  # the container's file-size limit does not follow the disk cap
    ) -> CommandResult:
        return await self._run(
            command,
            stdin=stdin,
            timeout_s=timeout_s or self.limits.timeout_s,
            kept_bytes=kept_bytes or self.limits.output_kept_bytes,
            label=command,
        )

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        path = f"/tmp/stepwise-eval-{uuid.uuid4().hex}.sh"
        await self.runtime.write(path, script.encode())
        return await self._run(
            f"bash {shlex.quote(path)}; status=$?; rm -f {shlex.quote(path)}; exit $status",
            stdin=stdin,
            timeout_s=timeout_s,
            kept_bytes=kept_bytes,
            label="grading script",
            limits=grading_limits(self.limits, timeout_s),
        )

    @contextlib.asynccontextmanager
    async def pristine(self) -> AsyncIterator[RuntimeSandbox]:
        """A new container from this one's image and configuration, its network cut as the
        model's is (no framework routes); removed on exit."""
        fresh = type(self.runtime)(self.runtime.config)
        try:
            await fresh.start()
            await fresh.prepare_execution([])
            yield RuntimeSandbox(fresh, self.limits, workdir=self.workdir)
        finally:
            await fresh.stop()
