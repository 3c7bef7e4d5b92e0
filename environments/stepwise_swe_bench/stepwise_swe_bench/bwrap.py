"""The sandbox without a container engine: a fresh bubblewrap sandbox per command.

Each command gets

- a read-only view of the system (``/usr`` and the ``/bin``-style links, a few loader files from
  ``/etc``, the Python environment that runs the tests, the bundle's hidden task files masked)
  and nothing else of the host: no home directory, no ``/root``, no host ``/tmp``;
- the task repository read-write at ``/testbed``, the only writable host path; private ``/proc``
  and ``/dev``, a size-limited tmpfs at ``/tmp`` and ``/dev/shm``; ``/`` and ``/dev`` remounted
  read-only;
- new PID, network, IPC, UTS and cgroup namespaces (no network, not even the host's loopback),
  a cleared environment, no capabilities, ``no_new_privs``, the syscall filter (``seccomp``);
- rlimits (bash's ``ulimit``): address space, file size, open files, no core dumps; its wall
  clock, past which the whole sandbox is killed (``process``).

Who runs this code decides the rest (``sandbox.ENFORCED``):

- root: no user namespace; the command drops to ``SANDBOX_UID`` with ``setpriv`` (capabilities
  and the bounding set cleared), and each episode's commands share a cgroup made with
  cgroup-tools (``cgcreate``, ``cgset``, ``cgexec``): memory with swap, CFS quota, pids. A
  grading copy has a cgroup of its own. Linux never applies RLIMIT_NPROC to root, and one uid
  shared by all episodes would share it, so the pids cgroup is the process cap;
- an ordinary user: bubblewrap in a user namespace (uid 1000 inside) with further user
  namespaces disabled; RLIMIT_NPROC there bounds each command. No cgroup: the episode's memory
  and CPU share are not enforced, and the environment says so when it loads.

The repository is a directory of the host's disk in both: its size is not capped beyond each
file's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import seccomp
from .limits import MIB, SandboxLimits
from .output import CommandResult
from .process import run_process
from .sandbox import WORKDIR, SandboxUnavailable

__all__ = ["SANDBOX_UID", "BwrapSandbox", "cgroup", "hand_over", "remove_tree"]

SANDBOX_UID = 1 << 20
"""As root, sandboxed commands run as this uid and gid (no account on the host uses it)."""
USERNS_ID = 1000
"""uid/gid inside the user namespace of an ordinary user's sandbox."""
_INSTALL_HINT = "install it with `apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`"
_CGROUP_HINT = "as root the episode caps are cgroups made with cgroup-tools: `apt-get install -y cgroup-tools`"
# Loader and timezone files most programs need; nothing else of /etc is visible.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_SETPRIV = "/usr/bin/setpriv"
"""util-linux's setpriv, by absolute path (never looked up on the sandbox's PATH)."""
_CHMOD, _RM = "/bin/chmod", "/bin/rm"
"""coreutils, by absolute path, for host-side cleanup."""
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_CONTROLLERS = "memory,cpu,pids"
_PERIOD_US = 100_000
_ENV = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "agent",
    "LOGNAME": "agent",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "PYTHONDONTWRITEBYTECODE": "1",
    # The visible Python environment is this package's, not the task's: its pytest plugins
    # have no business in the task's test runs (and cost seconds per run).
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
}
HIDDEN = (Path(__file__).resolve().parent / "fixtures",)
"""Host directories never visible in a sandbox: the bundled tasks' gold and test patches. A
regular (wheel) install puts them in site-packages, which the sandbox shows read-only."""


def _privileged() -> bool:
    return os.geteuid() == 0


def cgroup(repo: Path) -> str:
    """The cgroup of ``repo``'s commands (as root): named after its path, so every process that
    opens a sandbox over it joins the same one."""
    return f"stepwise-swe-bench/{hashlib.sha256(str(Path(repo).resolve()).encode()).hexdigest()[:16]}"


def _cgroup_values(limits: SandboxLimits) -> list[str]:
    """``cgset -r`` arguments for the episode caps, in cgroup v2's names or v1's."""
    memory, quota = limits.memory_mb * MIB, round(limits.cpus * _PERIOD_US)
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():  # v2
        values = [f"memory.max={memory}", "memory.swap.max=0", f"cpu.max={quota} {_PERIOD_US}"]
    else:
        values = [f"memory.limit_in_bytes={memory}"]
        if Path("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists():  # swap accounted
            values.append(f"memory.memsw.limit_in_bytes={memory}")
        values += [f"cpu.cfs_period_us={_PERIOD_US}", f"cpu.cfs_quota_us={quota}"]
    return [*values, f"pids.max={limits.processes}"]


def _cg(*argv: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise SandboxUnavailable(f"{argv[0]} is missing; {_CGROUP_HINT}") from None
    if done.returncode != 0:
        raise SandboxUnavailable(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}; {_CGROUP_HINT}")


def _make_cgroup(repo: Path, limits: SandboxLimits) -> None:
    name = cgroup(repo)
    _cg("cgcreate", "-g", f"{_CONTROLLERS}:{name}")
    _cg("cgset", *(a for value in _cgroup_values(limits) for a in ("-r", value)), name)


def hand_over(path: Path) -> None:
    """Make ``path`` (recursively) owned by ``SANDBOX_UID`` so commands can write it (root only;
    symlinks re-owned, never followed)."""
    if not _privileged():
        return
    os.lchown(path, SANDBOX_UID, SANDBOX_UID)
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID)


def remove_tree(path: Path) -> None:
    """Delete a tree a command built, and its cgroup: however deep (``shutil.rmtree`` recurses
    in Python), with unreadable directories (given back their owner's permissions first).
    coreutils by absolute path; symlinks are removed, never followed."""
    if _privileged():
        _delete_cgroup(cgroup(path))
    if not (path.exists() or path.is_symlink()):
        return
    if not path.is_symlink():
        subprocess.run([_CHMOD, "-R", "u+rwX", "--", str(path)], capture_output=True, check=False)
    done = subprocess.run([_RM, "-rf", "--one-file-system", "--", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"could not remove {path}: {done.stderr.strip()[-500:]}")


def _delete_cgroup(name: str, wait: float = 10.0) -> None:
    """Delete cgroup ``name`` from each controller. The kernel removes a cgroup only once no
    process is in it, and a sandbox's processes, killed with its PID namespace's init, can still
    be on their way out (longer under load): what the cgroup still lists is killed and the
    deletion retried, for at most ``wait`` seconds, then ``OSError``."""
    root = Path("/sys/fs/cgroup")
    unified = (root / "cgroup.controllers").exists()  # v2: one hierarchy
    places = [root / name] if unified else [root / c / name for c in _CONTROLLERS.split(",")]
    deadline = time.monotonic() + wait
    while True:
        for controller in _CONTROLLERS.split(","):  # one call each: cgdelete 2.0 stops after the first
            subprocess.run(["cgdelete", "-g", f"{controller}:{name}"], capture_output=True, check=False)
        left = [place for place in places if place.exists()]
        if not left:
            return
        if time.monotonic() > deadline:
            raise OSError(f"cgroup {name} still holds processes {wait:g} s after its sandbox ended")
        for place in left:
            try:
                pids = (place / "cgroup.procs").read_text().split()
            except OSError:  # deleted meanwhile
                continue
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)


@functools.cache
def _bwrap() -> tuple[str, frozenset[str]]:
    """The bwrap binary and the options it supports (older releases lack some)."""
    binary = shutil.which("bwrap")
    if binary is None:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so model commands cannot be sandboxed and "
            f"will not run; {_INSTALL_HINT}, or run them in Docker (--env.taskset.task.sandbox.engine docker)"
        )
    usage = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    options = frozenset(word for word in (usage.stdout + usage.stderr).split() if word.startswith("--"))
    if "--seccomp" not in options:
        raise SandboxUnavailable(f"{binary} has no --seccomp option (bubblewrap too old); {_INSTALL_HINT}")
    return binary, options


@functools.cache
def _filter() -> bytes:
    try:
        return seccomp.filter_program()
    except seccomp.FilterUnavailable as error:
        raise SandboxUnavailable(f"model commands will not run without their syscall filter: {error}") from None


@functools.cache
def _python_prefixes(python: Path) -> tuple[Path, ...]:
    """Directories an interpreter needs: its environment and, for a venv, the base install.
    Paths under /usr are visible anyway."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        # Compared unresolved, since a venv's python is a symlink to its base interpreter.
        out = [sys.prefix, sys.base_prefix]
    else:
        script = "import sys; print(sys.prefix); print(sys.base_prefix)"
        out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout.split()
    prefixes: list[Path] = []
    for raw in out:
        prefix = Path(raw).resolve()
        if not prefix.is_relative_to("/usr") and prefix not in prefixes:
            prefixes.append(prefix)
    return tuple(prefixes)


def _masked(prefixes: Sequence[Path]) -> tuple[str, ...]:
    """The ``HIDDEN`` directories inside what the sandbox shows; each gets an empty read-only
    tmpfs over it."""
    shown = [Path("/usr"), *(Path("/") / n for n in _TOP_LEVEL if not (Path("/") / n).is_symlink()), *prefixes]
    return tuple(str(h) for h in HIDDEN if h.is_dir() and any(h.is_relative_to(p) for p in shown))


def _parents(dest: str) -> list[str]:
    """Ancestors of a mount point, outermost first (bwrap would create them 0700 as root)."""
    return [str(p) for p in reversed(PurePosixPath(dest).parents) if str(p) != "/"]


@dataclass(frozen=True)
class BwrapCommand:
    """A bwrap command line: ``argv`` runs the command; ``fds`` are the data files it reads."""

    argv: list[str]
    fds: list[int]


class BwrapSandbox:
    """A bubblewrap sandbox over one repository directory (see the module docstring)."""

    workdir = WORKDIR

    def __init__(
        self,
        repo: Path,
        limits: SandboxLimits | None = None,
        *,
        python: Path | None = None,
        base: Path | None = None,
    ) -> None:
        """``repo``: the host directory bound at ``/testbed``. ``python``: the interpreter whose
        environment is visible read-only and first on PATH (default: this one). ``base``: a
        trusted checkout of the base commit that ``pristine`` copies (None: it cannot grade)."""
        self.repo = Path(repo).resolve()
        if not self.repo.is_dir():
            raise NotADirectoryError(f"sandbox repository {self.repo} is not a directory")
        self.limits = limits or SandboxLimits(engine="bwrap")
        self.binary, self._options = _bwrap()
        self._filter = _filter()
        self.python = Path(python or sys.executable)
        self._path = f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin"
        self.python_prefixes = _python_prefixes(self.python)
        self.base = base
        self._masked = _masked(self.python_prefixes)
        self.privileged = _privileged()
        self._check()

    @classmethod
    def create(
        cls, repo: Path, limits: SandboxLimits, *, python: Path | None = None, base: Path | None = None
    ) -> BwrapSandbox:
        """A sandbox over ``repo`` for a new episode: as root, its cgroup made first."""
        if _privileged():
            _make_cgroup(repo, limits)
        return cls(repo, limits, python=python, base=base)

    # -- command line -------------------------------------------------------------------------

    def _namespaces(self) -> list[str]:
        common = ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if self.privileged:
            # No user namespace: its only uid would map to root. setpriv drops to SANDBOX_UID.
            return [
                "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", *common,
                "--cap-drop", "ALL",
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
            ]  # fmt: skip
        disable = ["--disable-userns"] if "--disable-userns" in self._options else []
        return [
            "--unshare-all", "--unshare-user", *disable, *common,
            "--uid", str(USERNS_ID), "--gid", str(USERNS_ID),
        ]  # fmt: skip

    def _prelude(self) -> str:
        """bash, before the command: enter ``$2`` (given back its owner's permissions first: an
        earlier ``chmod 000 .`` must not lock later commands out), then the rlimits. ``ulimit``
        units: -v and -f KiB, -u and -n counts. As root the pids cgroup bounds processes."""
        limits = self.limits
        processes = "" if self.privileged else f" -u {limits.processes}"
        return (
            'chmod u+rwx -- "$2" 2>/dev/null; cd -- "$2" || exit 125; '
            f"ulimit -H -S -c 0 -v {limits.process_memory_mb * 1024} -f {limits.file_size_mb * 1024} "
            f"-n {limits.open_files}{processes} || exit 125"
        )

    def _inner(self, command: str, chdir: str) -> list[str]:
        drop = [
            _SETPRIV, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
            "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        ]  # fmt: skip
        shell = ["/bin/bash", "-c", f'{self._prelude()}; exec /bin/bash -c "$1"', "sandbox", command, chdir]
        return [*(drop if self.privileged else []), *shell]

    def _identity_files(self) -> dict[str, bytes]:
        uid = SANDBOX_UID if self.privileged else USERNS_ID
        return {
            "/etc/passwd": f"root:x:0:0:root:/root:/bin/bash\nagent:x:{uid}:{uid}:agent:/tmp:/bin/bash\n".encode(),
            "/etc/group": f"root:x:0:\nagent:x:{uid}:\n".encode(),
            "/etc/hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
        }

    @contextlib.contextmanager
    def command(
        self, command: str, files: Mapping[str, bytes] | None = None, chdir: str = WORKDIR
    ) -> Iterator[BwrapCommand]:
        """The full command line for ``command`` with read-only data ``files`` (path inside ->
        content, passed through memfds that are closed on exit)."""
        fds: list[int] = []
        try:
            argv = [self.binary, *self._namespaces(), "--seccomp", str(self._memfd(self._filter, fds))]
            argv += ["--ro-bind", "/usr", "/usr"]
            for name in _TOP_LEVEL:
                top = Path("/") / name
                if top.is_symlink():
                    argv += ["--symlink", os.readlink(top), str(top)]
                elif top.is_dir():
                    argv += ["--ro-bind", str(top), str(top)]
            argv += ["--perms", "0755", "--dir", "/etc"]
            argv += [a for name in _ETC for a in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")]
            argv += ["--proc", "/proc", "--dev", "/dev"]
            for dest, size_mb in (("/tmp", self.limits.tmp_mb), ("/dev/shm", self.limits.shm_mb)):
                size = ["--size", str(size_mb * MIB)] if "--size" in self._options else []
                argv += ["--perms", "1777", *size, "--tmpfs", dest]
            for dest, data in {**self._identity_files(), **(files or {})}.items():
                argv += ["--perms", "0444", "--ro-bind-data", str(self._memfd(data, fds)), dest]
            made: set[str] = set()
            for source, dest, option in (
                *((p, str(p), "--ro-bind") for p in self.python_prefixes),
                (self.repo, WORKDIR, "--bind"),
            ):
                for parent in _parents(dest):
                    if parent not in made and parent != "/tmp" and not parent.startswith("/usr"):
                        made.add(parent)
                        argv += ["--perms", "0755", "--dir", parent]
                argv += [option, str(source), dest]
            for hidden in self._masked:
                argv += ["--tmpfs", hidden, "--remount-ro", hidden]
            # Last, once every mount point on them exists; not recursive: /dev/shm stays writable.
            argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
            argv += ["--chdir", "/", "--clearenv", "--setenv", "PATH", self._path]
            argv += [a for key, value in _ENV.items() for a in ("--setenv", key, value)]
            argv += ["--", *self._inner(command, chdir)]
            if self.privileged:
                argv = ["cgexec", "-g", f"{_CONTROLLERS}:{cgroup(self.repo)}", *argv]
            yield BwrapCommand(argv, fds)
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def _memfd(data: bytes, fds: list[int]) -> int:
        """A memfd holding ``data``, read from its start, recorded in ``fds`` to be closed."""
        fd = os.memfd_create("sandbox-data")
        fds.append(fd)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    # -- running ------------------------------------------------------------------------------

    def _check(self) -> None:
        """One trivial sandboxed command per process and configuration (outside any cgroup), so
        an unusable bubblewrap fails loudly at setup rather than on the model's first command."""
        key = (self.binary, self.python_prefixes, self.privileged)
        if key in _WORKING:
            return
        with self.command("true", chdir="/") as cmd:
            argv = cmd.argv[3:] if self.privileged else cmd.argv  # without cgexec
            probe = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=cmd.fds, env={})
        if probe.returncode != 0:
            raise SandboxUnavailable(
                "bubblewrap is installed but cannot create a sandbox here "
                f"({probe.stderr.strip() or f'exit code {probe.returncode}'}); unprivileged "
                "user namespaces may be disabled (sysctl user.max_user_namespaces, "
                "kernel.unprivileged_userns_clone, or an AppArmor restriction), so model "
                "commands will not run"
            )
        _WORKING.add(key)

    async def _run(
        self,
        command: str,
        *,
        files: Mapping[str, bytes] | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        kept_bytes: int | None = None,
        label: str | None = None,
    ) -> CommandResult:
        with self.command(command, files) as cmd:
            return await run_process(
                cmd.argv,
                label=label or command,
                timeout_s=timeout_s or self.limits.timeout_s,
                kept_bytes=kept_bytes or self.limits.output_kept_bytes,
                kill_bytes=self.limits.output_kill_bytes,
                stdin=stdin,
                pass_fds=cmd.fds,
                env={},
            )

    async def run(
        self, command: str, *, stdin: bytes | None = None, timeout_s: float | None = None, kept_bytes: int | None = None
    ) -> CommandResult:
        return await self._run(command, stdin=stdin, timeout_s=timeout_s, kept_bytes=kept_bytes)

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        return await self._run(
            "bash /eval.sh",
            files={"/eval.sh": script.encode()},
            stdin=stdin,
            timeout_s=timeout_s,
            kept_bytes=kept_bytes,
            label="grading script",
        )

    @contextlib.asynccontextmanager
    async def pristine(self) -> AsyncIterator[BwrapSandbox]:
        """A copy of ``base`` (host-side: it is trusted) beside the repository, handed to the
        sandbox user, with a cgroup of its own; deleted on exit. The model's repository is not
        read."""
        if self.base is None:
            raise RuntimeError(f"the sandbox over {self.repo} has no base checkout to grade in")
        base = self.base
        copy = self.repo.parent / f".grading-{uuid.uuid4().hex[:12]}"

        def make() -> BwrapSandbox:
            shutil.copytree(base, copy, symlinks=True)
            hand_over(copy)
            return BwrapSandbox.create(copy, self.limits, python=self.python)

        try:
            yield await asyncio.to_thread(make)
        finally:
            await asyncio.to_thread(remove_tree, copy)


_WORKING: set[tuple] = set()
"""Sandbox configurations that passed ``BwrapSandbox._check`` in this process."""
