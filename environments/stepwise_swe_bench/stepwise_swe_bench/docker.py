"""The sandbox is a Docker container: one per episode, a fresh one per grading run.

``DockerSandbox.start`` runs the image with every cap an engine flag (``run_argv``): no network,
no capabilities, ``no-new-privileges``, the engine's default seccomp profile, a read-only root,
the writable places as sized tmpfs (``/testbed``, ``/tmp``, ``/dev/shm``: the disk is bounded by
memory), memory with swap off, a CPU quota, a pids limit, ``nofile``, ``fsize`` and ``core``
rlimits, an init process that reaps orphans, and an unprivileged user. The repository is then
streamed into ``/testbed`` as a tar archive: the bundled task's template from the host, or an
official image's own ``/testbed`` (read through a created, never started, container of it,
since the tmpfs hides it in a running one).

Every command is one ``docker exec`` of bash in ``/testbed``, under coreutils ``timeout`` (the
client is killed a little later) with its output cut inside the container at
``output_kill_bytes`` (``head -c``, so a runaway command never ships more), stderr merged into
stdout; the exit status is the command's. What a command leaves running in its process group is
killed when it ends, as a bubblewrap sandbox ends with its command; a process that starts a
session of its own (``setsid``) lives on in the episode's container, within its caps. The container
is removed (``docker rm -f``) when its episode or its grading run ends, and by this process at
exit for any it started and did not remove.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence

from .limits import MIB, SandboxLimits
from .output import CommandResult
from .process import run_process
from .sandbox import WORKDIR, SandboxUnavailable

__all__ = ["LABEL", "USER", "DockerSandbox", "engine_check", "run_argv"]

LABEL = "stepwise-swe-bench"
"""Every container this bundle starts carries this label (``docker ps --filter label=...``)."""
USER = "1000:1000"
"""Who the commands run as inside the container."""
_GRACE_S = 10.0
"""How long past a command's timeout the client is given before it is killed."""
# $1 = command, $2 = timeout (s), $3 = bytes read before the command is cut off. The workdir is
# given back its owner's permissions first (an earlier ``chmod 000 .`` must not lock later
# commands out). ``timeout`` leads a process group of its own: what the command left running in
# it (``cmd &``, a fork bomb) is killed when it ends; the command's input is fd 3 (a background
# job's would be /dev/null).
_WRAPPER = (
    f"chmod u+rwx {WORKDIR} 2>/dev/null; cd {WORKDIR} || exit 125; "
    '{ timeout -k 5 "$2" /bin/bash -c "$1" 2>&1 <&3 & t=$!; wait "$t"; s=$?; kill -KILL -- "-$t" 2>/dev/null; '
    'exit "$s"; } 3<&0 | head -c "$3"; exit "${PIPESTATUS[0]}"'
)
_STARTED: set[str] = set()
"""Containers this process started and has not removed yet."""


def engine_check() -> None:
    """Raise ``SandboxUnavailable`` unless a Docker engine answers."""
    try:
        done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    except FileNotFoundError:
        done = None
    if done is None or done.returncode != 0:
        why = "the docker CLI is not installed" if done is None else done.stderr.strip()[-300:]
        raise SandboxUnavailable(
            f"no Docker engine answers ({why}): install and start one (`apt-get install -y docker.io && "
            "dockerd &` as root), or run the bundled tasks in bubblewrap (--env.taskset.task.sandbox.engine bwrap)"
        )


def run_argv(name: str, image: str, limits: SandboxLimits) -> list[str]:
    """The ``docker run`` of a sandbox container (it idles until removed)."""
    nofile, fsize = limits.open_files, limits.file_size_mb * MIB
    uid = USER.split(":")[0]
    return [
        "docker", "run", "--detach", "--name", name, "--label", LABEL, "--init",
        "--network", "none", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
        "--tmpfs", f"{WORKDIR}:exec,size={limits.disk_mb}m,nr_inodes={limits.inodes},uid={uid},gid={uid},mode=0755",
        "--tmpfs", f"/tmp:exec,size={limits.tmp_mb}m,mode=1777", "--shm-size", f"{limits.shm_mb}m",
        "--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m",
        "--cpus", f"{limits.cpus:g}", "--pids-limit", str(limits.processes),
        "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"fsize={fsize}:{fsize}", "--ulimit", "core=0:0",
        "--user", USER, "--env", "HOME=/tmp", "--workdir", WORKDIR,
        "--entrypoint", "sleep", image, "infinity",
    ]  # fmt: skip


def _docker(*argv: str, stdin: int | None = None) -> str:
    done = subprocess.run(["docker", *argv], stdin=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SandboxUnavailable(f"docker {argv[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


@functools.cache
def _image_source(image: str) -> str:
    """A created (never started) container of ``image``, whose ``/testbed`` is read with
    ``docker cp`` (once per image and process; removed at exit)."""
    name = f"stepwise-swe-bench-source-{uuid.uuid4().hex[:12]}"
    _docker("create", "--name", name, "--label", LABEL, image, "true")  # never run: an image may name no command
    _STARTED.add(name)
    return name


def _remove(name: str) -> None:
    subprocess.run(["docker", "rm", "--force", "--volumes", name], capture_output=True, check=False)
    _STARTED.discard(name)


@atexit.register
def _remove_all() -> None:
    for name in list(_STARTED):
        _remove(name)


class DockerSandbox:
    """A ``Sandbox`` over one container (see the module docstring). ``source`` is the host
    command whose standard output is the repository as a tar archive; None: the image's own
    ``/testbed``."""

    workdir = WORKDIR

    def __init__(self, container: str, image: str, limits: SandboxLimits, source: Sequence[str] | None) -> None:
        self.container, self.image, self.limits, self.source = container, image, limits, source

    @classmethod
    def start(cls, image: str, limits: SandboxLimits, source: Sequence[str] | None = None) -> DockerSandbox:
        """A new container of ``image`` with the repository in ``/testbed`` (blocking: call it in
        a thread)."""
        name = f"stepwise-swe-bench-{uuid.uuid4().hex[:16]}"
        _STARTED.add(name)
        try:
            _docker(*run_argv(name, image, limits)[1:])
            argv = list(source) if source is not None else ["docker", "cp", f"{_image_source(image)}:{WORKDIR}/.", "-"]
            producer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                _docker("exec", "-i", name, "tar", "-x", "-C", WORKDIR, stdin=producer.stdout.fileno())  # type: ignore[union-attr]
            finally:
                _, errors = producer.communicate()
            if producer.returncode != 0:
                raise SandboxUnavailable(f"{shlex.join(argv)} failed: {errors.decode(errors='replace')[-500:]}")
        except BaseException:
            _remove(name)
            raise
        return cls(name, image, limits, source)

    def remove(self) -> None:
        """Remove the container (blocking)."""
        _remove(self.container)

    async def _exec(
        self, command: str, *, stdin: bytes | None, timeout_s: float, kept_bytes: int, label: str, user: str = USER
    ) -> CommandResult:
        kill = self.limits.output_kill_bytes
        argv = [
            "docker", "exec", *(["-i"] if stdin is not None else []), "--user", user, "--workdir", "/", self.container,
            "/bin/bash", "-c", _WRAPPER, "sandbox", command, f"{timeout_s:g}", str(kill + 1),
        ]  # fmt: skip
        result = await run_process(
            argv, label=label, timeout_s=timeout_s + _GRACE_S, kept_bytes=kept_bytes, kill_bytes=kill, stdin=stdin
        )
        if result.termination == "exit" and result.exit_code in (124, 137) and result.duration_s >= timeout_s:
            return dataclasses.replace(result, exit_code=-9, termination="timeout")
        return result

    async def run(
        self, command: str, *, stdin: bytes | None = None, timeout_s: float | None = None, kept_bytes: int | None = None
    ) -> CommandResult:
        return await self._exec(
            command,
            stdin=stdin,
            timeout_s=timeout_s or self.limits.timeout_s,
            kept_bytes=kept_bytes or self.limits.output_kept_bytes,
            label=command,
        )

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        # Written by root (without capabilities, as every process here): bash reads a script as
        # it runs it, and the code under test, which runs as the sandbox's user, cannot change
        # or remove what comes after its own test command.
        path = f"/tmp/stepwise-eval-{uuid.uuid4().hex}.sh"
        written = await self._exec(
            f"cat > {path} && chmod 0444 {path}",
            stdin=script.encode(),
            timeout_s=self.limits.timeout_s,
            kept_bytes=self.limits.output_kept_bytes,
            label="grading script",
            user="0",
        )
        if written.exit_code != 0:
            return written
        return await self._exec(
            f"bash {path}", stdin=stdin, timeout_s=timeout_s, kept_bytes=kept_bytes, label="grading script"
        )

    @contextlib.asynccontextmanager
    async def pristine(self) -> AsyncIterator[DockerSandbox]:
        """A new container of the same image and repository source; removed on exit."""
        fresh = await asyncio.to_thread(DockerSandbox.start, self.image, self.limits, self.source)
        try:
            yield fresh
        finally:
            await asyncio.to_thread(fresh.remove)
