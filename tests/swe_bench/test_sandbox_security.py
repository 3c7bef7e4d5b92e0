"""Each attack is a command a model could send; each must fail safely, be recorded, and leave
the sandbox usable for the next command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over, sandbox_identity

from .conftest import loopback_server

NOBODY = 65534


def run(sandbox: BwrapSandbox, command: str, **kwargs):
    return asyncio.run(sandbox.run(command, **kwargs))


def still_usable(sandbox: BwrapSandbox) -> None:
    result = run(sandbox, "cat hello.txt")
    assert (result.exit_code, result.output) == (0, "hello\n")


def test_writes_outside_the_workdir_fail(sandbox: BwrapSandbox, repo: Path, tmp_path: Path):
    outside = tmp_path / "outside.txt"
    venv_file = Path(os.__file__).parent / "pwned.txt"
    result = run(
        sandbox,
        f"echo pwned > {outside}; echo pwned > ../pwned; echo pwned > /usr/pwned; "
        f"echo pwned > {venv_file}; echo pwned > /etc/pwned; ln -s {outside} link; "
        "echo pwned > link; echo done",
    )
    assert result.exit_code == 0 and result.output.endswith("done\n")
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert not outside.exists() and not venv_file.exists()
    assert not Path("/usr/pwned").exists() and not Path("/etc/pwned").exists()
    # The symlink points into the sandbox's own view, where that path does not exist.
    assert (repo / "link").is_symlink() and not outside.exists()
    still_usable(sandbox)


def test_host_loopback_server_is_unreachable(sandbox: BwrapSandbox):
    with loopback_server() as (port, accepted):
        result = run(
            sandbox,
            f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"; "
            f"echo x > /dev/tcp/127.0.0.1/{port}; echo x > /dev/tcp/10.0.0.1/80; "
            'python -c "import socket; print(socket.if_nameindex())"',
        )
    assert not accepted
    assert "Connection refused" in result.output
    assert "Network is unreachable" in result.output
    assert "(1, 'lo')" in result.output and "eth" not in result.output
    still_usable(sandbox)


def test_host_environment_secrets_are_invisible(sandbox: BwrapSandbox, monkeypatch):
    secret = "sk-test-7f3a9c1e5b"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("SWE_BENCH_DB_PASSWORD", secret)
    result = run(
        sandbox,
        f"env; cat /proc/{os.getpid()}/environ; cat /proc/*/environ; ls /proc | head -20; ls ~ /root; cat /etc/shadow",
    )
    assert secret not in result.output
    # A fresh PID namespace: the host's processes (this one included) are not there.
    pids = asyncio.run(sandbox.run("ls /proc")).output.split()
    assert max(int(p) for p in pids if p.isdigit()) < 20
    still_usable(sandbox)


@pytest.mark.slow
def test_fork_bomb_is_contained(repo: Path):
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=4, processes=64))
    before = sandbox_processes(repo)
    start = time.monotonic()
    result = run(sandbox, ":(){ :|:& };:; sleep 30")
    assert result.termination == "timeout"
    assert time.monotonic() - start < 15
    assert "Resource temporarily unavailable" in result.output
    # Nothing of the bomb survives the sandbox.
    time.sleep(0.2)
    assert sandbox_processes(repo) - before == set()
    still_usable(sandbox)


def test_infinite_loop_is_killed_at_the_time_limit(sandbox: BwrapSandbox):
    start = time.monotonic()
    result = run(sandbox, "while :; do :; done", timeout_s=1.5)
    assert result.termination == "timeout" and result.exit_code < 0
    assert 1.5 <= time.monotonic() - start < 8
    assert "time limit" in result.describe()
    still_usable(sandbox)


@pytest.mark.slow
def test_cpu_time_limit_kills_a_busy_process(repo: Path):
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=30, cpu_s=1))
    result = run(sandbox, "while :; do :; done")
    assert result.termination == "exit" and result.exit_code in (128 + 9, 128 + 24)
    assert result.duration_s < 15


def test_a_gigabyte_of_output_is_capped_while_streaming(sandbox: BwrapSandbox):
    result = run(sandbox, "head -c 1G /dev/zero | tr '\\0' x; echo never")
    assert result.termination == "output_limit"
    assert result.output_bytes <= sandbox.limits.output_kill_bytes + 64 * 1024
    assert len(result.output) < sandbox.limits.output_kept_bytes + 200
    assert "bytes of output omitted" in result.output and "never" not in result.output
    still_usable(sandbox)


def test_file_size_and_memory_limits(repo: Path):
    sandbox = BwrapSandbox(repo, SandboxLimits(file_size_mb=1, memory_mb=512))
    big = run(sandbox, "head -c 5M /dev/zero > big.bin; echo status=$?")
    assert (repo / "big.bin").stat().st_size == 1024 * 1024
    assert "status=153" in big.output  # 128 + SIGXFSZ
    memory = run(sandbox, 'python -c "b = bytearray(2 * 1024**3)"')
    assert memory.exit_code != 0 and "MemoryError" in memory.output


@pytest.mark.skipif(os.geteuid() != 0, reason="ordinary users' sandboxes are bounded by their own uid")
@pytest.mark.slow
def test_a_fork_bomb_does_not_starve_another_sandbox(tmp_path: Path):
    """RLIMIT_NPROC counts per uid: each repository's sandbox has its own, so one episode's
    fork bomb leaves a concurrent episode free to start processes."""
    repos = [tmp_path / "bomb", tmp_path / "work"]
    for repo in repos:
        repo.mkdir()
        hand_over(repo)
    bomb, work = (BwrapSandbox(r, SandboxLimits(timeout_s=4, processes=64)) for r in repos)
    assert sandbox_identity(repos[0]) != sandbox_identity(repos[1])

    async def both():
        attack = asyncio.create_task(bomb.run(":(){ :|:& };:; sleep 30"))
        await asyncio.sleep(1.0)  # the bomb has filled its process budget by now
        busy = await work.run("for i in $(seq 20); do /bin/true || echo FAILED; done; echo ok")
        return await attack, busy

    attack, busy = asyncio.run(both())
    assert attack.termination == "timeout"
    assert busy.exit_code == 0 and busy.output == "ok\n", busy.output


def test_commands_run_unprivileged(sandbox: BwrapSandbox, repo: Path):
    result = run(sandbox, "touch made.txt; id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status")
    assert "0000000000000000" in result.output and "NoNewPrivs:\t1" in result.output
    if os.geteuid() == 0:
        assert (repo / "made.txt").stat().st_uid == sandbox_identity(repo)[0] != NOBODY


def sandbox_processes(repo: Path) -> set[int]:
    """Host pids owned by the uid the sandbox of ``repo`` runs commands as."""
    uid = sandbox_identity(repo)[0]
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid:
                found.add(int(proc.name))
        except FileNotFoundError:
            continue
    return found


UNPRIVILEGED_CHILD = r"""
import asyncio, json, os, sys
import concurrent.futures.thread  # asyncio.to_thread's lazy import: nobody cannot read this Python
from pathlib import Path

import pytest
from stepwise_swe_bench import keyring
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox
keyring.filter_program(), keyring.fresh_session_keyring()  # their lazy imports, cached
repo = Path(sys.argv[1])
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=4, processes=32), python=Path("/usr/bin/python3"))
async def main():
    results = {}
    for name, command in {
        "identity": "id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status; echo hi > made.txt",
        "outside": "echo x > /usr/x; echo x > /tmp/../etc/x; echo rc=$?",
        "fork_bomb": ":(){ :|:& };:; sleep 30",
        "nested_userns": "unshare --user true; echo rc=$?",
    }.items():
        result = await sandbox.run(command)
        results[name] = [result.termination, result.output]
    print(json.dumps(results))
asyncio.run(main())
"""


@pytest.mark.slow
def test_ordinary_user_sandbox_uses_a_user_namespace(tmp_path: Path):
    """The path every non-root user takes: bwrap in a new user namespace. Here it is exercised
    by dropping to an unprivileged uid first (a no-op drop when the suite is not root)."""
    import json
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0:
        repo = tmp_path
    else:
        repo = Path(tempfile.mkdtemp(dir="/tmp"))
        os.chmod(repo, 0o755)
        os.chown(repo, NOBODY, NOBODY)
    script = (
        UNPRIVILEGED_CHILD
        if os.geteuid() == 0
        else UNPRIVILEGED_CHILD.replace(
            "os.setgroups([])\nos.setresgid(65534, 65534, 65534)\nos.setresuid(65534, 65534, 65534)\n", ""
        )
    )
    try:
        child = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        results = json.loads(child.stdout)
    finally:
        if repo != tmp_path:
            subprocess.run(["rm", "-rf", str(repo)], check=True)
    identity = results["identity"][1]
    assert identity.splitlines()[0] == "1000"  # the uid inside the namespace
    assert "CapEff:\t0000000000000000" in identity and "NoNewPrivs:\t1" in identity
    assert "Read-only file system" in results["outside"][1]
    assert results["fork_bomb"][0] == "timeout"
    assert "Resource temporarily unavailable" in results["fork_bomb"][1]
    assert "rc=1" in results["nested_userns"][1], results["nested_userns"]


def test_the_sandbox_sees_only_what_is_listed(sandbox: BwrapSandbox):
    etc = run(sandbox, "ls -A /etc").output.split()
    assert set(etc) <= {
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "alternatives",
        "localtime",
        "passwd",
        "group",
        "hosts",
    }
    assert {"passwd", "group", "hosts"} <= set(etc)
    names = {
        line.split("=", 1)[0] for line in run(sandbox, "env -0 | tr '\\0' '\\n'").output.splitlines() if "=" in line
    }
    assert names - {"PWD", "OLDPWD", "SHLVL", "_"} == {  # set by bash itself
        "PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "PAGER", "GIT_PAGER",
        "PYTHONDONTWRITEBYTECODE", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    }  # fmt: skip
    # Besides the system directories, only mount points of the bound Python environment.
    top = set(run(sandbox, "ls -A /").output.split())
    system = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "etc", "proc", "testbed", "tmp", "usr"}
    assert {"testbed", "tmp", "usr", "etc", "proc", "dev"} <= top
    assert top - system <= {prefix.parts[1] for prefix in sandbox.python_prefixes}


def test_missing_bubblewrap_refuses_with_install_instructions(repo: Path, monkeypatch, tmp_path: Path):
    from stepwise_swe_bench import sandbox as module

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    module._bwrap.cache_clear()
    try:
        with pytest.raises(module.SandboxUnavailable) as error:
            BwrapSandbox(repo)
    finally:
        module._bwrap.cache_clear()
    assert "apt-get install -y bubblewrap" in str(error.value) and "will not run" in str(error.value)


def test_a_python_environment_under_tmp_is_usable(repo: Path, tmp_path: Path):
    """The sandbox's /tmp is its own; a test environment that lives under the host's /tmp (as
    CI's does) is still mounted and reachable."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    sandbox = BwrapSandbox(repo, python=venv / "bin" / "python")
    result = run(sandbox, "python -c 'import sys; print(sys.prefix)'")
    assert (result.exit_code, result.output.strip()) == (0, str(venv))


def test_the_running_interpreter_prefixes_are_known_without_starting_it():
    """The usual case (tool servers run on the env's own Python) asks no subprocess, and
    finds what asking that interpreter finds."""
    import subprocess
    import sys
    from unittest import mock

    from stepwise_swe_bench import sandbox as module

    asked = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    resolved = (Path(raw).resolve() for raw in asked)
    expected = tuple(dict.fromkeys(p for p in resolved if not p.is_relative_to("/usr")))
    with mock.patch.object(module.subprocess, "run", side_effect=AssertionError("started a subprocess")):
        assert module._python_prefixes.__wrapped__(Path(sys.executable)) == expected


def test_dev_shm_is_private_and_bounded(repo: Path):
    """bwrap's own /dev is an unbounded tmpfs; /dev/shm gets a size-limited one."""
    sandbox = BwrapSandbox(repo, SandboxLimits(shm_mb=8))
    result = run(sandbox, "head -c 20M /dev/zero > /dev/shm/fill; echo rc=$?; du -sm /dev/shm | cut -f1")
    assert "No space left on device" in result.output and "rc=1" in result.output
    assert result.output.split()[-1] == "8"
    still_usable(sandbox)


def test_the_privilege_drop_is_by_absolute_path(sandbox: BwrapSandbox):
    """A ``setpriv`` earlier on the sandbox's PATH (the test environment's bin comes first) is
    never the one that drops privileges."""
    with sandbox.command("true", []) as cmd:
        inner = cmd.argv[cmd.argv.index("--") + 1 :]
    if sandbox.privileged:
        assert inner[0] == "/usr/bin/setpriv"
    assert "setpriv" not in inner[1:] and inner[inner.index("/bin/bash") :][:2] == ["/bin/bash", "-c"]


@pytest.mark.skipif(os.geteuid() != 0, reason="ordinary users' sandboxes all run as that user")
def test_live_repositories_never_share_a_uid(tmp_path: Path):
    """Uids were crc32(path) % 2^20: two of 256 concurrent episodes collided with probability
    ~0.03, and then one's fork bomb starved the other. Two paths that collide get two uids."""
    import hashlib
    import zlib

    from stepwise_swe_bench.sandbox import UID_BASE, _uid_claims, remove_tree

    seen: dict[int, Path] = {}
    for i in range(100_000):  # names with random bits: CRC32 is affine, so r0, r1, ... may never collide
        path = (tmp_path / hashlib.sha256(str(i).encode()).hexdigest()[:16]).resolve()
        bucket = zlib.crc32(str(path).encode()) % UID_BASE
        if bucket in seen:
            first, second = seen[bucket], path
            break
        seen[bucket] = path
    for path in (first, second):
        path.mkdir()
        hand_over(path)
    (uid_a, _), (uid_b, _) = sandbox_identity(first), sandbox_identity(second)
    assert uid_a == UID_BASE + bucket and uid_b != uid_a
    assert (first.stat().st_uid, second.stat().st_uid) == (uid_a, uid_b)
    assert BwrapSandbox(second).uid == uid_b  # another process (the tool server) finds the same uid
    # Removing a tree gives its uid back; a claim whose repository vanished is taken over.
    remove_tree(second)
    assert not (_uid_claims() / str(uid_b)).exists()
    subprocess.run(["rm", "-rf", str(first), str(first.parent / f".{first.name}.uid")], check=True)
    second.mkdir()
    hand_over(second)
    assert sandbox_identity(second)[0] == uid_a
    remove_tree(second)


KEYRING_OF_THE_COMMAND = (
    'python3 -c "import ctypes, os; l = ctypes.CDLL(None, use_errno=True); '
    "print(l.syscall(250, 0, ctypes.c_long(-3), 0), "  # KEYCTL_GET_KEYRING_ID of @s
    "l.syscall(250, 11, ctypes.c_long(-3), 0, 0), "  # KEYCTL_READ of @s: the bytes of its key ids
    'os.strerror(ctypes.get_errno()))"'
)


def test_the_keyring_calls_are_refused(sandbox: BwrapSandbox):
    result = run(sandbox, KEYRING_OF_THE_COMMAND)
    assert result.output.split() == ["-1", "-1", "Operation", "not", "permitted"]
    still_usable(sandbox)


def test_each_command_has_a_fresh_empty_session_keyring(repo: Path, monkeypatch):
    """The second layer on its own (the filter swapped for one that allows every call): the
    command's session keyring is not the host's, holds nothing, and is another one each time."""
    import ctypes

    import pyseccomp
    from stepwise_swe_bench import sandbox as sandbox_module

    allow = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    program = os.memfd_create("allow")
    with open(program, "rb") as file:
        allow.export_bpf(file)
        file.seek(0)
        allow_all = file.read()
    monkeypatch.setattr(sandbox_module, "_seccomp", lambda: allow_all)
    libc = ctypes.CDLL(None, use_errno=True)
    host = libc.syscall(250, 0, ctypes.c_long(-3), 1)
    secret = b"host-secret"
    assert libc.syscall(248, b"user", b"host-secret", secret, len(secret), ctypes.c_long(-3)) > 0
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=20))
    seen = [run(sandbox, KEYRING_OF_THE_COMMAND).output.split() for _ in range(2)]
    # Its own keyring (another serial than the host's), empty (0 bytes of key ids to read).
    assert [s[1] for s in seen] == ["0", "0"], seen
    assert len({host, int(seen[0][0]), int(seen[1][0])}) == 3, (host, seen)


def test_the_runtime_folder_is_the_owners_alone(tmp_path: Path):
    from types import SimpleNamespace

    from stepwise_swe_bench.box import prepare_box
    from stepwise_swe_bench.instances import load_instances
    from stepwise_swe_bench.sandbox import remove_tree

    (instance,) = load_instances(instance_ids=["stepwise__slugs-21"])
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o755)
    runtime = SimpleNamespace(type="subprocess", info=SimpleNamespace(id=str(folder)))
    ref, _ = asyncio.run(prepare_box(runtime, instance, SandboxLimits()))
    try:
        assert (folder.stat().st_mode & 0o777) == 0o700
    finally:
        remove_tree(Path(ref.repo))


def test_past_the_key_quota_a_thread_keeps_its_last_fresh_keyring(monkeypatch, caplog):
    """An ordinary user's key quota (200 keys) can run out while many commands hold their
    keyrings: the thread's last fresh keyring is used (warned once); never the host's."""
    import errno
    import threading

    from stepwise_swe_bench import keyring

    class Libc:
        answers = [7, -1, -1]  # a serial, then EDQUOT twice

        def syscall(self, *args):
            return self.answers.pop(0)

    monkeypatch.setattr(keyring, "_keyctl", lambda: (Libc(), 250))
    monkeypatch.setattr(keyring.ctypes, "get_errno", lambda: errno.EDQUOT)

    def in_a_thread(calls: int) -> list:
        """What ``calls`` keyring joins in a new thread ended with (None: no error)."""
        ended: list = []

        def run() -> None:
            try:
                for _ in range(calls):
                    keyring.fresh_session_keyring()
                ended.append(None)
            except OSError as error:
                ended.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return ended

    assert in_a_thread(3) == [None]
    warned = [r.message for r in caplog.records if "key quota reached" in r.message]
    assert warned == ["key quota reached: sandboxed commands of this thread share its last session keyring"]
    Libc.answers = [-1]  # a thread that never joined a fresh keyring: refused, and said where
    (error,) = in_a_thread(1)
    assert "KEYCTL_JOIN_SESSION_KEYRING) before a sandbox" in str(error)


def test_without_libseccomp_commands_are_refused_with_how_to_install_it(monkeypatch):
    import sys

    from stepwise_swe_bench import keyring
    from stepwise_swe_bench import sandbox as sandbox_module

    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # not installed
    with pytest.raises(keyring.KeyringUnavailable, match="pyseccomp is not installed"):
        keyring._libseccomp()

    def no_library() -> bytes:
        raise keyring.KeyringUnavailable("libseccomp is not installed (Unable to find libseccomp); install it ...")

    monkeypatch.setattr(keyring, "filter_program", no_library)
    with pytest.raises(sandbox_module.SandboxUnavailable, match="without their syscall filter: libseccomp is not"):
        sandbox_module._seccomp.__wrapped__()
