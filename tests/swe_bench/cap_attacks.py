"""Attacks on the episode caps, as a model would make them (commands in its sandbox), shared by
the in-process test (root: a volume, a memory cgroup, ``setpriv``) and a child process run as
an ordinary user (bubblewrap in a user namespace: the watchers). Each attack runs in its own
repository, then ``echo`` shows the sandbox still works, then the repository is removed and
what is left of it (mounts, loop devices, images, cgroups) listed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

MIB = 1024 * 1024
FALLOCATE = (
    "python3 -c 'import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]\n"
    'fd = os.open("big", os.O_CREAT | os.O_WRONLY)\n'
    "done = libc.fallocate(fd, {mode}, 0, 200 * 1024 * 1024)\n"
    'print(done, os.strerror(ctypes.get_errno()) if done else "allocated")\'; echo rc=$?'
)
"""200 MiB in one ``fallocate`` call (``mode``: its flags), then exit."""
CAPS = {"disk_mb": 64, "inodes": 2048, "episode_memory_mb": 256, "episode_open_files": 4096, "episode_cpus": 0.5}
# name -> command; every one of them goes past a cap, or opens a way past one.
ATTACKS = {
    # 1 GiB in five files, each under the 256 MiB per-file limit.
    "disk": "for i in 1 2 3 4 5; do dd if=/dev/zero of=fill$i bs=1M count=205 status=none; echo rc=$?; done",
    "inodes": "for i in $(seq 5000); do : > e$i || { echo stopped at $i; break; }; done",
    # Six processes of ~200 MB each (the per-process address space allows 4 GiB).
    "memory": (
        "python3 -c 'import os, time\n"
        "for _ in range(6):\n"
        "    if os.fork() == 0:\n"
        "        b = bytearray(200 * 1024 * 1024); time.sleep(5); os._exit(0)\n"
        "for _ in range(6): os.wait()'; echo survived"
    ),
    # 6,000 open files in six processes of their own sessions, each under the 1,024 per process.
    "open_files": (
        "python3 -c 'import os, time\n"
        "for _ in range(6):\n"
        "    if os.fork() == 0:\n"
        '        os.setsid(); held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1000)]; time.sleep(10)\n'
        "        os._exit(0)\n"
        "for _ in range(6): os.wait()'; echo survived"
    ),
    # Space the tree does not show: a file deleted while a process keeps writing it.
    "deleted_file": "exec 3> hidden; rm hidden; for i in 1 2 3 4 5; do head -c 200M /dev/zero >&3; done; echo wrote",
    # 200 MiB in one system call, then exit: done within microseconds of the interpreter's start,
    # faster than any sampling, and under the 256 MiB per-file limit.
    "one_call": FALLOCATE.format(mode=0),
    # The same past the file's end (FALLOC_FL_KEEP_SIZE): blocks no file-size limit counts.
    "keep_size": FALLOCATE.format(mode=1),
    # 200 MiB written to one file at the page cache's speed (under the 256 MiB per-file limit).
    "one_file": "head -c 200M /dev/zero > big; echo rc=$?",
    # io_uring's operations (a fallocate among them) are no system calls the filter sees.
    "io_uring": (
        "python3 -c 'import ctypes, os\n"
        "params = ctypes.create_string_buffer(120)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        'print("io_uring_setup", libc.syscall(425, 4, params), os.strerror(ctypes.get_errno()))\''
    ),
}
FAST_WRITERS = ("one_call", "keep_size", "one_file", "io_uring")
"""The attacks on the disk cap that a watcher's sampling cannot stop in time (#23)."""

SPINNERS = """python3 -c '
import os, time
start = time.monotonic()
for _ in range(8):  # each in a session of its own, as an attack would
    if os.fork() == 0:
        os.setsid()
        while time.monotonic() - start < 3:
            pass
        os._exit(0)
for _ in range(8):
    os.wait()
used = os.times()
print(used.children_user + used.children_system, time.monotonic() - start)'"""
"""Eight spinners for 3 s; prints the CPU seconds they used and the wall seconds."""
ATTACKS["spinners"] = SPINNERS
# Against a watcher that stops the tree: a process that forks a fresh child every moment, each
# continuing (SIGCONT) every process it may signal, so one forked between the watcher's listing
# of the tree and its stopping of it lets everything go on.
ATTACKS["resumer"] = SPINNERS.replace(
    "for _ in range(8):\n    os.wait()",
    "if os.fork() == 0:\n"
    "    while time.monotonic() - start < 3:\n"
    "        pid = os.fork()\n"
    "        if pid == 0:\n"
    "            os.kill(-1, 18)\n"  # SIGCONT
    "            os._exit(0)\n"
    "        os.waitpid(pid, 0)\n"
    "    os._exit(0)\n"
    "for _ in range(9):\n    os.wait()",
)


def leftovers(repo: Path) -> list[str]:
    """What of the episode's caps is still on the host after its repository was removed."""
    found = []
    mounts = Path("/proc/self/mountinfo").read_text()
    if f" {repo} " in mounts:
        found.append(f"mount at {repo}")
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if str(repo.parent) in backing.read_text():
                found.append(f"{backing.parent.parent.name} on {backing.read_text().strip()}")
    found += [str(p) for p in repo.parent.glob(f".{repo.name}.*")]  # image, cgroup and uid markers
    for record in Path("/run/stepwise-swe-bench-volumes").glob("*") if os.geteuid() == 0 else ():
        if str(repo) in record.read_text():
            found.append(str(record))
    if repo.exists():
        found.append(str(repo))
    return found


async def attack(workdir: Path, name: str, python: Path | None = None) -> dict:
    from stepwise_swe_bench.limits import SandboxLimits
    from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over, remove_tree
    from stepwise_swe_bench.volume import make_volume, tree_usage

    repo = workdir / name / "repo"
    repo.parent.mkdir(parents=True)
    volume = make_volume(repo, CAPS["disk_mb"], CAPS["inodes"])
    repo.mkdir(exist_ok=True)
    (repo / "hello.txt").write_text("hello\n")
    hand_over(repo)
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=30, **CAPS), python=python)
    cgroup = getattr(sandbox.memory, "path", None)
    result = await sandbox.run(ATTACKS[name])
    used = tree_usage(repo)
    peak = 0
    if cgroup is not None:
        peak = (
            int((cgroup / "memory.max_usage_in_bytes").read_text())
            if (cgroup / "memory.max_usage_in_bytes").exists()
            else 0
        )
    # Two commands: as an ordinary user, one that starts at the cap may remove files but write none.
    await sandbox.run("rm -f fill* e* big")
    after = await sandbox.run("echo x > after.txt && cat hello.txt after.txt")
    image = repo.parent / f".{repo.name}.img"
    image_bytes = image.stat().st_blocks * 512 if image.exists() else 0
    remove_tree(repo)
    return {
        "volume": volume,
        "cgroup": cgroup is not None,
        "termination": result.termination,
        "exit_code": result.exit_code,
        "cap": result.cap,
        "described": result.describe()[-400:],
        "duration_s": result.duration_s,
        "used_bytes": used[0],
        "used_inodes": used[1],
        "image_bytes": image_bytes,
        "memory_peak_bytes": peak,
        "output": result.output[-400:],
        "after": after.output,
        "leftovers": leftovers(repo),
    }


async def play(workdir: Path, names: list[str], python: Path | None = None) -> dict[str, dict]:
    return {name: await attack(workdir, name, python) for name in names}


def as_ordinary_user(uid: int, workdir: Path, python: Path, names: list[str]) -> None:
    """Run the attacks as ``uid`` and print their results as JSON (imported first: this
    interpreter may live where ``uid`` cannot read)."""
    import concurrent.futures.thread  # noqa: F401 - asyncio.to_thread's lazy import

    import stepwise_swe_bench.limits
    import stepwise_swe_bench.sandbox
    import stepwise_swe_bench.volume  # noqa: F401
    from stepwise_swe_bench import keyring

    keyring.filter_program()  # its lazy imports (pyseccomp, ctypes.util), cached
    keyring.fresh_session_keyring()

    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    print(json.dumps(asyncio.run(play(workdir, names, python))))
