"""Where model commands run: the ``Sandbox`` interface and its local bubblewrap backend.

Every command the model issues (and every grading run) goes through a ``Sandbox``. Locally that is
``BwrapSandbox``: a fresh bubblewrap sandbox per command with

- a read-only view of the system (``/usr`` and the ``/bin``-style links, a few loader files from
  ``/etc``, the Python environment that runs the tests) and nothing else of the host: no home
  directory, no ``/root``, no host ``/tmp``;
- the task repository bound read-write at ``/testbed``, the only writable host path;
- a private ``/tmp`` and ``/dev/shm`` (size-limited tmpfs), private ``/proc`` and ``/dev``; the
  sandbox's ``/`` and ``/dev`` (bubblewrap's own, unbounded tmpfs) remounted read-only, so the
  repository, ``/tmp`` and ``/dev/shm`` are the only writable places and each is capped;
- new PID, network, IPC, UTS and cgroup namespaces: no network at all (a loopback that is not the
  host's, so a server on the host's 127.0.0.1 is unreachable), no view of host processes;
- a cleared environment (no host variables, so no secrets), no capabilities, no_new_privs;
- a seccomp filter refusing the kernel keyring calls, and a fresh session keyring (``keyring``);
- rlimits on CPU time, address space, processes, file size and open files (``limits``), a
  wall-clock timeout that kills the whole sandbox, and streamed, capped output (``process``).

Two ways to get an unprivileged sandboxed process, chosen by who runs this code:

- an ordinary user: bubblewrap in a new user namespace (``--unshare-user``; uid 1000 inside,
  the user outside), with further user namespaces disabled where bwrap supports it;
- root: Linux never applies RLIMIT_NPROC to root, so a fork bomb would be unbounded. Bubblewrap
  runs privileged (no user namespace) and the command drops to an unprivileged host uid/gid
  with ``setpriv`` (all capabilities and the bounding set cleared, no_new_privs) before it
  starts. Each live repository gets a uid no other one holds (``sandbox_identity``, claimed in
  a root-only directory): RLIMIT_NPROC is counted per uid, so with a shared uid a fork bomb in
  one episode would starve the commands of every other episode running beside it. The
  repository is handed to its uid (``hand_over``).

Verifiers' own ``Runtime`` is the box a rollout lives in; it also hosts trusted framework processes
(tool servers, the state channel on the interception server at 127.0.0.1) that need the network.
The sandbox wraps only the untrusted part, the model's commands. In a container runtime the
container is the boundary and ``container.RuntimeSandbox`` runs the commands there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from . import cpu, keyring, memory, openfiles, volume
from .limits import SandboxLimits, grading_limits, shell_prelude
from .output import CommandResult
from .process import Guard, run_process
from .rundir import root_only_dir

__all__ = [
    "Bind",
    "BwrapSandbox",
    "Sandbox",
    "SandboxUnavailable",
    "WORKDIR",
    "hand_over",
    "remove_tree",
    "sandbox_identity",
]

WORKDIR = "/testbed"
"""Where the repository appears to commands (as in the official SWE-bench images)."""
UID_BASE = 1 << 20
"""As root, sandboxed commands run as a uid/gid in UID_BASE..2*UID_BASE-1 (ids no account on
the host uses), one per live repository: claimed at first use (``sandbox_identity``, starting
at a hash of the path), given back when its tree is removed (``remove_tree``)."""
USERNS_ID = 1000
"""uid/gid inside the user namespace of an ordinary user's sandbox."""
_INSTALL_HINT = "install it with `apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`"
# Loader and timezone files most programs need; nothing else of /etc is visible.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_SETPRIV = "/usr/bin/setpriv"
"""util-linux's setpriv, by absolute path (never looked up on the sandbox's PATH)."""
_CHMOD, _RM = "/bin/chmod", "/bin/rm"
"""coreutils, by absolute path, for host-side cleanup."""
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
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


class SandboxUnavailable(RuntimeError):
    """Model commands cannot be sandboxed here, so they are not run at all."""


class Sandbox(Protocol):
    """Runs untrusted commands against one task repository."""

    workdir: str
    """The repository's path as commands see it."""

    async def run(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        kept_bytes: int | None = None,
        scratch_only: bool = False,
    ) -> CommandResult:
        """Run a bash command in ``workdir``; the limits' defaults unless overridden.
        ``scratch_only``: a trusted command that writes ``/tmp`` only, never the repository (the
        diff reader), so a full repository leaves it the whole per-file limit."""
        ...

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        """Run a trusted grading script (bash) in ``workdir``, under grading limits, keeping
        up to ``kept_bytes`` of its log; ``stdin`` is its input (a pipe, or a staged file
        removed before the script starts: readable once)."""
        ...

    def pristine(self) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        """A sandbox over a fresh copy of the task repository at its base commit (nothing of
        this one's), removed on exit: where a round is graded."""
        ...


def sandbox_identity(repo: Path) -> tuple[int, int]:
    """Host (uid, gid) that commands in the sandbox of ``repo`` run as: as root, the uid claimed
    for ``repo`` (on first use), else this user's."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    marker = _uid_marker(repo)
    try:
        uid = int(marker.read_text())
    except FileNotFoundError:
        uid = _claim_uid(repo)
        marker.write_text(str(uid))
    return uid, uid


def _uid_marker(repo: Path) -> Path:
    """Where a repository's uid is kept: beside it, outside what its sandbox can see."""
    repo = Path(repo).resolve()
    return repo.parent / f".{repo.name}.uid"


@functools.cache
def _uid_claims() -> Path:
    """Root's directory of claimed uids, one file per uid naming its repository."""
    return root_only_dir("stepwise-swe-bench-uids")


def _claim_uid(repo: Path) -> int:
    """A uid no live repository holds: UID_BASE + the path's hash, or the next free one after
    it. A claim whose repository is gone (a crashed run) is taken over."""
    repo = Path(repo).resolve()
    claims = _uid_claims()
    start = zlib.crc32(str(repo).encode()) % UID_BASE
    for k in range(UID_BASE):
        uid = UID_BASE + (start + k) % UID_BASE
        claim = claims / str(uid)
        for _ in range(2):  # once more after removing a stale claim
            try:
                fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                holder = Path(claim.read_text(errors="replace") or "/")
                if holder.exists() or holder == repo:
                    break
                claim.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as out:
                out.write(str(repo))
            return uid
    raise SandboxUnavailable(f"no free sandbox uid in {UID_BASE}..{2 * UID_BASE - 1}")


def _release_uid(repo: Path) -> None:
    """Give back ``repo``'s uid (its tree is being removed)."""
    marker = _uid_marker(repo)
    try:
        uid = marker.read_text()
    except FileNotFoundError:
        return
    claim = _uid_claims() / uid
    with contextlib.suppress(FileNotFoundError):
        if claim.read_text() == str(Path(repo).resolve()):
            claim.unlink()
    marker.unlink(missing_ok=True)


def hand_over(path: Path, repo: Path | None = None) -> None:
    """Make ``path`` (recursively) owned by the identity of ``repo``'s sandbox (``path``'s own
    by default) so commands can write it. Only root needs this. Symlinks are re-owned, never
    followed."""
    if os.geteuid() != 0:
        return
    uid, gid = sandbox_identity(repo or path)
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), uid, gid)


def remove_tree(path: Path) -> None:
    """Delete a tree a command built: however deep (``shutil.rmtree`` recurses in Python and
    raises ``RecursionError`` near 1,000 levels), with read-only or unreadable directories
    (given back their owner's permissions first). coreutils by absolute path; symlinks are
    removed, never followed; other file systems mounted inside are left alone. The episode's
    cgroup and volume (``path`` as its mount point) go with it."""
    memory.release(path)
    cpu.release(path)
    volume.release(path)
    if os.geteuid() == 0:
        _release_uid(path)
    if not (path.exists() or path.is_symlink()):
        return
    with contextlib.suppress(OSError):
        path.rmdir()  # empty (an unmounted volume's mount point): no processes to start
        return
    if not path.is_symlink():
        subprocess.run([_CHMOD, "-R", "u+rwX", "--", str(path)], capture_output=True, check=False)
    done = subprocess.run([_RM, "-rf", "--one-file-system", "--", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"could not remove {path}: {done.stderr.strip()[-500:]}")


@functools.cache
def _bwrap() -> tuple[str, frozenset[str]]:
    """The bwrap binary and the options it supports (older releases lack some)."""
    binary = shutil.which("bwrap")
    if binary is None:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so model commands cannot be sandboxed and "
            f"will not run locally; {_INSTALL_HINT}, or run the environment in a container "
            "runtime (--env.agent.runtime.type docker)"
        )
    usage = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    options = frozenset(word for word in (usage.stdout + usage.stderr).split() if word.startswith("--"))
    if "--seccomp" not in options:
        raise SandboxUnavailable(f"{binary} has no --seccomp option (bubblewrap too old); {_INSTALL_HINT}")
    return binary, options


@functools.cache
def _seccomp() -> bytes:
    """The keyring filter's program, or why model commands cannot run."""
    try:
        return keyring.filter_program()
    except keyring.KeyringUnavailable as error:
        raise SandboxUnavailable(f"model commands will not run locally without their syscall filter: {error}") from None


@dataclass(frozen=True)
class Bind:
    source: Path
    dest: str
    writable: bool = False


@functools.cache
def _python_prefixes(python: Path) -> tuple[Path, ...]:
    """Directories an interpreter needs: its environment and, for a venv, the base install.
    Paths under /usr are visible anyway."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        # This interpreter (the usual case: tool servers run on the env's own): nothing to ask.
        # Compared unresolved, since a venv's python is a symlink to its base interpreter.
        out = [sys.prefix, sys.base_prefix]
    else:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    prefixes: list[Path] = []
    for raw in out:
        prefix = Path(raw).resolve()
        if not prefix.is_relative_to("/usr") and prefix not in prefixes:
            prefixes.append(prefix)
    return tuple(prefixes)


HIDDEN = (Path(__file__).resolve().parent / "fixtures",)
"""Host directories never visible in a sandbox: the bundled tasks' gold and test patches. A
regular (wheel) install puts them in site-packages, which the sandbox shows read-only."""


def _masked(prefixes: Sequence[Path]) -> tuple[str, ...]:
    """The ``HIDDEN`` directories inside what the sandbox shows (``/usr``, the top-level system
    directories, the Python prefixes); each gets an empty read-only tmpfs over it."""
    shown = [Path("/usr"), *(Path("/") / n for n in _TOP_LEVEL if not (Path("/") / n).is_symlink()), *prefixes]
    return tuple(str(h) for h in HIDDEN if h.is_dir() and any(h.is_relative_to(p) for p in shown))


def _parents(dest: str) -> list[str]:
    """Ancestors of a mount point, outermost first (bwrap would create them 0700 as root)."""
    return [str(p) for p in reversed(PurePosixPath(dest).parents) if str(p) != "/"]


@dataclass(frozen=True)
class BwrapCommand:
    """A bwrap command line: ``argv`` runs ``inner`` in the sandbox; ``fds`` are the data-file
    descriptors it reads at startup."""

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
        scratch: Path | None = None,
        base: Path | None = None,
    ) -> None:
        """``repo``: the host directory bound at ``/testbed``. ``python``: the interpreter whose
        environment is visible read-only and first on PATH (default: this one). ``scratch``:
        host directory for throwaway grading copies (default: ``repo``'s parent). ``base``: a
        trusted checkout of the base commit that ``pristine`` copies (None: it cannot grade)."""
        self.repo = Path(repo).resolve()
        if not self.repo.is_dir():
            raise NotADirectoryError(f"sandbox repository {self.repo} is not a directory")
        self.limits = limits or SandboxLimits()
        self.binary, self._options = _bwrap()
        self._filter = _seccomp()
        interpreter = Path(python or sys.executable)
        self.python = interpreter
        self._path = f"{interpreter.parent}:/usr/local/bin:/usr/bin:/bin"
        self.python_prefixes = _python_prefixes(interpreter)
        """Directories of the test environment's Python, visible read-only."""
        self._system = [Bind(p, str(p)) for p in self.python_prefixes]
        self.scratch = Path(scratch or self.repo.parent)
        self.base = base
        self._masked = _masked(self.python_prefixes)
        self.privileged = os.geteuid() == 0
        self.uid, self.gid = sandbox_identity(self.repo) if self.privileged else (USERNS_ID, USERNS_ID)
        self._check()
        self.memory = memory.episode_memory(self.repo, self.limits.episode_memory_mb, self.limits.episode_cpus)
        """The episode's memory cap: the repository's cgroup, or a watcher of each command."""
        self.cpu = cpu.episode_cpu(self.repo, self.limits.episode_cpus)
        """The episode's CPU share on cgroup v1 (None: on v2 the memory cgroup's, or none)."""

    # -- command line -------------------------------------------------------------------------

    def _namespaces(self) -> list[str]:
        common = ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if self.privileged:
            # No user namespace: its only uid would map to root. setpriv drops to self.uid.
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

    def _inner(self, command: str, chdir: str, limits: SandboxLimits, file_bytes: int | None) -> list[str]:
        """bash with the limits applied (files of at most ``file_bytes``, if given), in
        ``chdir``, then ``command``; as root, after dropping to the repository's uid (so the
        directory is entered as its owner)."""
        drop = [
            _SETPRIV, f"--reuid={self.uid}", f"--regid={self.gid}",
            "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        ]  # fmt: skip
        shell = ["/bin/bash", "-c", f'{shell_prelude(limits, file_bytes)}; exec /bin/bash -c "$1"']
        return [*(drop if self.privileged else []), *shell, "sandbox", command, chdir]

    def _identity_files(self) -> dict[str, bytes]:
        uid = self.uid
        return {
            "/etc/passwd": (f"root:x:0:0:root:/root:/bin/bash\nagent:x:{uid}:{uid}:agent:/tmp:/bin/bash\n").encode(),
            "/etc/group": f"root:x:0:\nagent:x:{uid}:\n".encode(),
            "/etc/hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
        }

    @contextlib.contextmanager
    def command(
        self,
        command: str,
        binds: Sequence[Bind],
        files: Mapping[str, bytes] | None = None,
        chdir: str = WORKDIR,
        limits: SandboxLimits | None = None,
        file_bytes: int | None = None,
    ) -> Iterator[BwrapCommand]:
        """The full command line for ``command`` with ``binds`` and read-only data ``files``
        (path inside -> content, passed through memfds that are closed on exit), under
        ``limits`` (default: the sandbox's), its files of at most ``file_bytes`` (if given)."""
        limits = limits or self.limits
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
            # bwrap's /dev is an unbounded tmpfs: /tmp and /dev/shm get size-limited ones.
            for dest, size_mb in (("/tmp", self.limits.tmp_mb), ("/dev/shm", self.limits.shm_mb)):
                size = ["--size", str(size_mb * 1024 * 1024)] if "--size" in self._options else []
                argv += ["--perms", "1777", *size, "--tmpfs", dest]
            for dest, data in {**self._identity_files(), **(files or {})}.items():
                argv += ["--perms", "0444", "--ro-bind-data", str(self._memfd(data, fds)), dest]
            made: set[str] = set()
            for bind in (*self._system, *binds):
                for parent in _parents(bind.dest):
                    # /usr and /tmp exist already; anything below /usr is read-only.
                    if parent not in made and parent != "/tmp" and not parent.startswith("/usr"):
                        made.add(parent)
                        argv += ["--perms", "0755", "--dir", parent]
                option = "--bind" if bind.writable else "--ro-bind"
                argv += [option, str(bind.source), bind.dest]
            for hidden in self._masked:
                argv += ["--tmpfs", hidden, "--remount-ro", hidden]
            # Last, once every mount point on them exists; not recursive: /dev/shm stays writable.
            argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
            argv += ["--chdir", "/", "--clearenv", "--setenv", "PATH", self._path]
            argv += [a for key, value in _ENV.items() for a in ("--setenv", key, value)]
            yield BwrapCommand([*argv, "--", *self._inner(command, chdir, limits, file_bytes)], fds)
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
        """One trivial sandboxed command per process and configuration, so an unusable
        bubblewrap fails loudly at setup rather than on the model's first command."""
        key = (self.binary, tuple(self._system), self.privileged)
        if key in _WORKING:
            return
        with self.command("true", [], chdir="/") as cmd:
            keyring.fresh_session_keyring()
            probe = subprocess.run(cmd.argv, capture_output=True, text=True, check=False, pass_fds=cmd.fds, env={})
        if probe.returncode != 0:
            raise SandboxUnavailable(
                "bubblewrap is installed but cannot create a sandbox here "
                f"({probe.stderr.strip() or f'exit code {probe.returncode}'}); unprivileged "
                "user namespaces may be disabled (sysctl user.max_user_namespaces, "
                "kernel.unprivileged_userns_clone, or an AppArmor restriction), so model "
                "commands will not run locally"
            )
        _WORKING.add(key)

    async def _run(
        self,
        command: str,
        binds: Sequence[Bind],
        *,
        files: Mapping[str, bytes] | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        kept_bytes: int | None = None,
        label: str | None = None,
        limits: SandboxLimits | None = None,
        scratch_only: bool = False,
    ) -> CommandResult:
        limits = limits or self.limits
        guards, room = await self._guards(limits)
        with self.command(command, binds, files, limits=limits, file_bytes=None if scratch_only else room) as cmd:
            # run_process creates the process before it first awaits: nothing else can run in
            # this thread between the two, so the keyring is this command's alone.
            keyring.fresh_session_keyring()
            argv = self.memory.join(cmd.argv)
            return await run_process(
                self.cpu.join(argv) if self.cpu is not None else argv,
                label=label or command,
                timeout_s=timeout_s or self.limits.timeout_s,
                kept_bytes=kept_bytes or self.limits.output_kept_bytes,
                kill_bytes=self.limits.output_kill_bytes,
                stdin=stdin,
                pass_fds=cmd.fds,
                env={},
                guards=guards,
            )

    async def _guards(self, limits: SandboxLimits) -> tuple[list[Guard], int | None]:
        """The episode caps over one command: memory (the cgroup's OOM kills, or the process
        tree's resident sets), disk (the repository's volume, or a walk of its tree), open
        files (of the cgroup's processes, or of the tree's) and, where no cgroup holds it, the
        CPU share; and the command's file-size limit
        that goes with the disk cap (None: the volume's size bounds it)."""
        if os.path.ismount(self.repo):
            disk: volume.VolumeGuard | volume.TreeWatch = volume.VolumeGuard(self.repo, limits.disk_mb, limits.inodes)
        else:
            disk = await asyncio.to_thread(volume.TreeWatch, self.repo, limits.disk_mb, limits.inodes)
        procs = self.memory.path / "cgroup.procs" if isinstance(self.memory, memory.CgroupMemory) else None
        guards: list[Guard] = [self.memory.guard(), disk, openfiles.OpenFiles(limits.episode_open_files, procs)]
        if not self.cpu_capped:
            guards.append(cpu.TreeCpu(limits.episode_cpus))
        return guards, disk.room

    @property
    def cpu_capped(self) -> bool:
        """Whether a cgroup holds the episode to its CPU share (v1's cpu cgroup, or ``cpu.max``
        on v2's memory cgroup); else each command's tree is throttled by ``cpu.TreeCpu``."""
        if self.cpu is not None:
            return True
        return isinstance(self.memory, memory.CgroupMemory) and (self.memory.path / "cpu.max").exists()

    async def run(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        kept_bytes: int | None = None,
        scratch_only: bool = False,
    ) -> CommandResult:
        binds = [Bind(self.repo, WORKDIR, writable=True)]
        return await self._run(
            command, binds, stdin=stdin, timeout_s=timeout_s, kept_bytes=kept_bytes, scratch_only=scratch_only
        )

    async def evaluate(
        self, script: str, *, timeout_s: float, kept_bytes: int, stdin: bytes | None = None
    ) -> CommandResult:
        return await self._run(
            "bash /eval.sh",
            [Bind(self.repo, WORKDIR, writable=True)],
            files={"/eval.sh": script.encode()},
            stdin=stdin,
            timeout_s=timeout_s,
            kept_bytes=kept_bytes,
            label="grading script",
            limits=grading_limits(self.limits, timeout_s),
        )

    @contextlib.asynccontextmanager
    async def pristine(self) -> AsyncIterator[BwrapSandbox]:
        """A copy of ``base`` (host-side: it is trusted) under ``scratch``, on a volume of its own
        (so a full repository cannot starve grading), owned by its own sandbox identity, as a
        sandbox; deleted on exit. The model's repository is not read."""
        if self.base is None:
            raise RuntimeError(f"the sandbox over {self.repo} has no base checkout to grade in")
        base = self.base
        copy = self.scratch / f".grading-{uuid.uuid4().hex[:12]}"

        def make() -> BwrapSandbox:
            volume.make_volume(copy, self.limits.disk_mb, self.limits.inodes)
            shutil.copytree(base, copy, symlinks=True, dirs_exist_ok=True)
            hand_over(copy)
            return BwrapSandbox(copy, self.limits, python=self.python, scratch=self.scratch)

        try:
            yield await asyncio.to_thread(make)
        finally:
            await asyncio.to_thread(remove_tree, copy)


_WORKING: set[tuple] = set()
"""Sandbox configurations that passed ``BwrapSandbox._check`` in this process."""
