"""The episode caps on disk, inodes, memory, open files and CPU share, attacked as a model would (``cap_attacks``), in
both sandbox modes: as root each repository is its own ext4 volume and its commands share a
memory cgroup (the kernel enforces the caps); as an ordinary user, watchers measure each command
and kill it past a cap. Either way the attack stops, the result says which cap, the host keeps
nothing of it, and the sandbox works afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from stepwise_swe_bench import memory
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.memory import CgroupMemory, Hierarchy, TreeMemory, find_hierarchy
from stepwise_swe_bench.volume import make_volume

from .cap_attacks import ATTACKS, CAPS, FAST_WRITERS, MIB, SPINNERS, leftovers, play

NOBODY = 65534
REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
DISK_WORDS = f"the episode's disk cap of {CAPS['disk_mb']} MiB and {CAPS['inodes']} files"
MEMORY_WORDS = f"killed: the episode's memory cap of {CAPS['episode_memory_mb']} MiB"
FILES_WORDS = f"the episode's cap of {CAPS['episode_open_files']} open files"
CPU_WORDS = f"the episode's CPU share of {CAPS['episode_cpus']:g} CPUs: its processes kept running while stopped for it"


def check(results: dict[str, dict], kernel: bool) -> None:
    """``kernel``: the volume and the cgroup enforce the caps (else the watchers)."""
    for name, result in results.items():
        assert (result["volume"], result["cgroup"]) == (kernel, kernel), name
        assert result["after"] == "hello\nx\n", (name, result["after"])  # usable again
        assert result["leftovers"] == [], (name, result["leftovers"])
    check_writers(results, kernel)
    disk, inodes, held, one_file = (results[name] for name in ("disk", "inodes", "deleted_file", "one_file"))
    cap = CAPS["disk_mb"] * MIB
    if kernel:
        for result in (disk, inodes, one_file):
            assert "No space left on device" in result["described"]
            assert f"[{DISK_WORDS} is reached: remove files to write more]" in result["described"]
        assert disk["used_bytes"] <= cap and disk["image_bytes"] <= cap
        assert inodes["used_inodes"] <= CAPS["inodes"]
        assert "No space left on device" in held["described"] and held["image_bytes"] <= cap
    else:
        # The kernel stops each file at what was left under the cap when the command started
        # (RLIMIT_FSIZE): one file, even one deleted but held open, never takes the tree past
        # it; the five files of the disk attack take it to five times the cap at most.
        for result in (held, disk):
            assert "File size limit exceeded" in result["described"], result
        assert held["termination"] == "exit"
        assert disk["used_bytes"] <= 5 * cap, disk["used_bytes"]
        assert DISK_WORDS in disk["described"]  # killed, or noted on its result at its end
        # The count of files has no kernel bound here: the watcher stops it, or, when the loop
        # ends between two walks (as on a loaded CI machine), notes it on the result at its end.
        assert DISK_WORDS in inodes["described"], inodes
        if inodes["termination"] == "disk_limit":
            assert f"[killed: {DISK_WORDS}]" in inodes["described"]
            assert inodes["used_inodes"] < CAPS["inodes"] + 3000, inodes["used_inodes"]
        else:
            assert inodes["termination"] == "exit" and "went past" in inodes["described"], inodes
    mem = results["memory"]
    assert mem["termination"] == "memory_limit" and mem["cap"] == MEMORY_WORDS.removeprefix("killed: ")
    assert f"[{MEMORY_WORDS}]" in mem["described"] and "survived" not in mem["described"]
    if kernel:
        assert mem["memory_peak_bytes"] <= CAPS["episode_memory_mb"] * MIB
    # Open files: counted in both modes (of the cgroup's processes as root, else of the tree).
    opened = results["open_files"]
    assert opened["termination"] == "files_limit" and opened["cap"] == FILES_WORDS, opened
    assert f"[killed: {FILES_WORDS}]" in opened["described"] and "survived" not in opened["described"]
    assert opened["duration_s"] < 5  # not the 10 s it would hold them
    # CPU: the cgroup's CFS quota, or (an ordinary user) the tree stopped while over its share.
    used, wall = map(float, results["spinners"]["output"].split())
    assert results["spinners"]["termination"] == "exit" and used <= CAPS["episode_cpus"] * wall + 0.3, (used, wall)
    # SIGCONT does nothing to a CFS quota; the watcher holds the resumer to the share, or kills it
    # when its processes keep running while held (it got 0.64 CPU-s a second before the check).
    resumer = results["resumer"]
    if resumer["termination"] == "cpu_limit":
        assert not kernel and resumer["described"].endswith(f"[killed: {CPU_WORDS}]"), resumer
    else:
        used, wall = map(float, resumer["output"].split())
        assert resumer["termination"] == "exit" and used <= CAPS["episode_cpus"] * wall + 0.3, (used, wall)


def check_writers(results: dict[str, dict], kernel: bool) -> None:
    """The fast writers (``FAST_WRITERS``) leave at most the cap in the tree, in either mode:
    allocation in one call and io_uring (whose operations the filter would not see) are
    refused, a file written past the cap stops there (the volume is full, or the file-size
    limit is what was left under the cap) and the result says the cap is reached."""
    cap = CAPS["disk_mb"] * MIB
    for name in FAST_WRITERS:
        assert results[name]["used_bytes"] <= cap, (name, results[name])
    for name in ("one_call", "keep_size"):
        assert "-1 Operation not supported" in results[name]["described"], results[name]
    assert "io_uring_setup -1 Function not implemented" in results["io_uring"]["described"]
    one_file = results["one_file"]
    assert ("No space left on device" if kernel else "File size limit exceeded") in one_file["described"]
    assert f"[{DISK_WORDS} is reached: remove files to write more]" in one_file["described"]
    assert one_file["termination"] == "exit", one_file


def test_caps_hold_in_this_processes_mode(tmp_path: Path):
    """As root (the suite's usual user): volume, cgroup, ``setpriv``; as an ordinary user: the
    watchers (the test below then adds nothing)."""
    results = asyncio.run(play(tmp_path, list(ATTACKS)))
    check(results, kernel=ROOT)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ATTACKS)
    assert all(not any((tmp_path / name).iterdir()) for name in ATTACKS)  # nothing left beside


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="the suite already runs as an ordinary user (the test above)")
def test_caps_hold_as_an_ordinary_user():
    """As nobody: bubblewrap in a user namespace, no mount, no writable cgroup: the watchers
    and the file-size limit."""
    check(as_nobody(list(ATTACKS)), kernel=False)


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="the suite already runs as an ordinary user (the test above)")
def test_a_fast_writer_stops_at_the_cap_as_an_ordinary_user():
    """#23: a writer that goes past the cap and exits before the watcher's first sample (one
    ``fallocate`` call) or between two samples left its bytes in the tree; each now stops at
    the cap whatever the timing."""
    check_writers(as_nobody(list(FAST_WRITERS)), kernel=False)


def as_nobody(names: list[str]) -> dict[str, dict]:
    """The results of the attacks ``names`` run as nobody (``cap_attacks.as_ordinary_user``)."""
    root = Path(tempfile.mkdtemp(dir="/tmp"))
    os.chmod(root, 0o755)
    os.chown(root, NOBODY, NOBODY)
    script = (
        "import sys; from pathlib import Path; from tests.swe_bench.cap_attacks import as_ordinary_user; "
        "as_ordinary_user(65534, Path(sys.argv[1]), Path('/usr/bin/python3'), sys.argv[2:])"
    )
    env = {"PATH": os.environ["PATH"]}
    if "PYTHONPATH" in os.environ:  # the code under test, where it is not the installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        child = subprocess.run(
            [sys.executable, "-c", script, str(root), *names],
            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr[-3000:]
        return json.loads(child.stdout)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


CRASH = """
import os, signal, sys
from pathlib import Path
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over
from stepwise_swe_bench.volume import make_volume
repo = Path(sys.argv[1])
assert make_volume(repo, 64, 2048)
hand_over(repo)
sandbox = BwrapSandbox(repo, SandboxLimits(disk_mb=64, inodes=2048))
print(sandbox.memory.path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="volumes and cgroups are root's")
def test_a_crashed_runs_volume_and_cgroup_are_taken_over(tmp_path: Path):
    """A run killed mid-episode leaves its volume mounted and its cgroup; the next process that
    makes a volume and a cgroup removes both."""
    crashed = tmp_path / "crashed" / "repo"
    crashed.parent.mkdir()
    child = subprocess.run([sys.executable, "-c", CRASH, str(crashed)], capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    cgroup = Path(child.stdout.strip())
    assert os.path.ismount(crashed) and cgroup.is_dir()
    fresh = tmp_path / "fresh" / "repo"
    fresh.parent.mkdir()
    assert make_volume(fresh, 64, 2048)
    memory.episode_memory(fresh, 256)
    assert not os.path.ismount(crashed) and not cgroup.exists()
    assert not (crashed.parent / ".repo.img").exists()
    from stepwise_swe_bench.sandbox import remove_tree

    remove_tree(fresh)
    assert leftovers(fresh) == []


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="volumes and cgroups are root's")
def test_a_run_that_exits_without_removing_its_trees_leaves_no_volume_or_cgroup(tmp_path: Path):
    repo = tmp_path / "exited" / "repo"
    repo.parent.mkdir()
    script = CRASH.replace("os.kill(os.getpid(), signal.SIGKILL)", "")
    child = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert not os.path.ismount(repo) and not Path(child.stdout.strip()).exists()
    assert not (repo.parent / ".repo.img").exists()


@pytest.mark.skipif(not ROOT, reason="volumes are root's")
def test_a_volume_is_a_mount_point_with_the_caps(tmp_path: Path):
    repo = tmp_path / "repo"
    assert make_volume(repo, 64, 2048)
    try:
        stats = os.statvfs(repo)
        assert 2048 <= stats.f_files < 2048 + 1024  # mkfs rounds up to whole block groups
        assert 50 * MIB < stats.f_blocks * stats.f_frsize <= 64 * MIB
        assert list(repo.iterdir()) == []  # no lost+found in the model's /testbed
        options = next(line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f" {repo} " in line)
        assert "nosuid" in options and "nodev" in options
    finally:
        from stepwise_swe_bench.sandbox import remove_tree

        remove_tree(repo)
    assert leftovers(repo) == [] and not os.path.ismount(repo)


def test_the_caps_are_validated():
    SandboxLimits(disk_mb=16, inodes=4096)
    with pytest.raises(ValueError, match=r"sandbox.inodes=262144 do not fit a volume of sandbox.disk_mb=16"):
        SandboxLimits(disk_mb=16, inodes=262_144)
    for bad in ({"disk_mb": 8}, {"inodes": 10}, {"episode_memory_mb": 32}):
        with pytest.raises(ValueError):
            SandboxLimits(**bad)
    defaults = SandboxLimits()
    assert (defaults.disk_mb, defaults.inodes, defaults.episode_memory_mb) == (4096, 262_144, 8192)


V1_MOUNTS = "35 30 0:32 / {mount} rw,relatime shared:9 - cgroup cgroup rw,memory\n"
V2_MOUNTS = "30 25 0:27 / {mount} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n"


def test_the_cgroup_hierarchy_is_chosen_from_proc(tmp_path: Path):
    """cgroup v2 cannot be exercised here (its memory controller is bound to v1): the choice is
    made from stand-ins of /proc/self/cgroup, /proc/self/mountinfo and the hierarchy's files."""
    v1 = tmp_path / "v1"
    (v1 / "process_api" / "abc").mkdir(parents=True)
    mounts = V1_MOUNTS.format(mount=v1)
    assert find_hierarchy("4:memory:/process_api/abc\n0::/\n", mounts) == Hierarchy(1, v1 / "process_api" / "abc")
    # A delegated v2 subtree: our cgroup's parent hands memory down and is writable.
    v2 = tmp_path / "v2"
    parent = v2 / "user.slice" / "user@1000.service" / "app.slice"
    (parent / "run-1.scope").mkdir(parents=True)
    (parent / "cgroup.procs").write_text("")
    path = "0::/user.slice/user@1000.service/app.slice/run-1.scope\n"
    (parent / "cgroup.subtree_control").write_text("cpu pids\n")
    assert find_hierarchy(path, V2_MOUNTS.format(mount=v2)) is None  # memory not handed down
    (parent / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert find_hierarchy(path, V2_MOUNTS.format(mount=v2)) == Hierarchy(2, parent)
    # v1's memory hierarchy wins where both exist; a process in the v2 root uses the root.
    both = mounts + V2_MOUNTS.format(mount=v2)
    assert find_hierarchy("4:memory:/process_api/abc\n" + path, both).version == 1
    (v2 / "cgroup.subtree_control").write_text("memory\n")
    (v2 / "cgroup.procs").write_text("")
    assert find_hierarchy("0::/\n", V2_MOUNTS.format(mount=v2)) == Hierarchy(2, v2)
    # Nothing usable: the watcher.
    assert find_hierarchy("0::/x\n", "") is None


def test_a_v2_cgroup_gets_the_cap_swap_off_and_group_oom(tmp_path: Path):
    """On a stand-in v2 parent (plain files: cannot be exercised here) a cgroup is made with
    ``memory.max``, ``memory.swap.max = 0`` and ``memory.oom.group``; a command joins it before
    bubblewrap starts; its OOM kills are read from ``memory.events``."""
    real_mkdir = Path.mkdir

    def mkdir_with_files(self: Path, *args, **kwargs) -> None:  # the kernel makes these files
        real_mkdir(self, *args, **kwargs)
        (self / "memory.swap.max").write_text("max")
        (self / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
        (self / "cpu.max").write_text("max 100000")  # the parent hands the cpu controller down

    from unittest import mock

    with mock.patch.object(Path, "mkdir", mkdir_with_files):
        cgroup = CgroupMemory.make(Hierarchy(2, tmp_path), 256, cpus=0.5)
    assert (cgroup.path / "cpu.max").read_text() == "50000 100000"  # the episode's CPU share
    assert cgroup.path.parent == tmp_path and cgroup.path.name.startswith(f"stepwise-swe-bench-{os.getpid()}-")
    assert (cgroup.path / "memory.max").read_text() == str(256 * MIB)
    assert (cgroup.path / "memory.swap.max").read_text() == "0"
    assert (cgroup.path / "memory.oom.group").read_text() == "1"
    assert cgroup.oom_kills() == 1
    assert cgroup.join(["bwrap", "x"])[:2] == ["/bin/sh", "-c"] and cgroup.join(["bwrap", "x"])[-3:] == [
        str(cgroup.path / "cgroup.procs"),
        "bwrap",
        "x",
    ]


def test_without_a_cgroup_the_process_tree_is_watched(tmp_path: Path, monkeypatch):
    """Where no hierarchy is usable (also as root, forced here) the resident sets of the command's
    processes are summed and the command killed past the cap."""
    from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over, remove_tree

    monkeypatch.setattr(memory, "own_hierarchy", lambda controller="memory": None)
    repo = tmp_path / "repo"
    repo.mkdir()
    hand_over(repo)
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=30, **CAPS))
    assert isinstance(sandbox.memory, TreeMemory)
    result = asyncio.run(sandbox.run(ATTACKS["memory"]))
    assert result.termination == "memory_limit" and f"[{MEMORY_WORDS}]" in result.describe()
    assert asyncio.run(sandbox.run("echo ok")).output == "ok\n"
    remove_tree(repo)


def test_a_cgroup_that_cannot_be_made_falls_back_to_the_watcher_and_says_so(tmp_path: Path, monkeypatch, caplog):
    def refuse(*args) -> CgroupMemory:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(memory, "own_hierarchy", lambda controller="memory": Hierarchy(1, tmp_path))
    monkeypatch.setattr(CgroupMemory, "make", refuse)
    with caplog.at_level("WARNING", logger="stepwise_swe_bench.memory"):
        cap = memory.episode_memory(tmp_path / "repo", 256)
    assert isinstance(cap, TreeMemory) and "enforced by a watcher" in caplog.text


@pytest.mark.skipif(not ROOT, reason="volumes are root's")
def test_volumes_made_at_once_are_all_recorded_and_removed(tmp_path: Path):
    """Rollouts set up in threads: a sweep running beside another volume's set-up once took
    its record (no image yet) for a crashed run's and dropped it, leaving a mount nobody
    removed."""
    from concurrent.futures import ThreadPoolExecutor

    from stepwise_swe_bench.sandbox import remove_tree

    repos = [tmp_path / f"r{i}" / "repo" for i in range(6)]
    for repo in repos:
        repo.parent.mkdir()
    for _ in range(3):
        with ThreadPoolExecutor(len(repos)) as pool:
            assert all(pool.map(lambda repo: make_volume(repo, 64, 2048), repos))
        for repo in repos:
            remove_tree(repo)
            assert leftovers(repo) == [], leftovers(repo)


@pytest.mark.skipif(not ROOT, reason="the cpu cgroup is root's (v1 here)")
def test_the_episodes_cpu_share_throttles_its_spinners(tmp_path: Path):
    """Eight spinners in eight sessions get half a CPU together, not the machine; the cgroup is
    removed with the repository."""
    from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over, remove_tree

    repo = tmp_path / "repo"
    assert make_volume(repo, 64, 2048)
    hand_over(repo)
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=20, disk_mb=64, inodes=2048, episode_cpus=0.5))
    assert sandbox.cpu is not None
    cgroup = sandbox.cpu.path
    assert (cgroup / "cpu.cfs_quota_us").read_text().strip() == "50000"
    used, wall = map(float, asyncio.run(sandbox.run(SPINNERS)).output.split())
    assert used <= 0.5 * wall + 0.3, (used, wall)
    throttled = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
    assert int(throttled["nr_throttled"]) > 0
    remove_tree(repo)
    assert not cgroup.exists() and leftovers(repo) == []


FORKS = """python3 -c '
import os, subprocess, sys, time
start = time.monotonic()
for _ in range(40):  # one after another, each waited for
    subprocess.run([sys.executable, "-c", "sum(range(3 * 10**6))"], check=True)
used = os.times()
print(used.children_user + used.children_system, time.monotonic() - start)'"""
"""Forty short processes in a row; prints the CPU seconds they used and the wall seconds."""


def test_without_a_cgroup_an_honest_forking_command_is_throttled_not_killed(tmp_path: Path, monkeypatch):
    """The CPU watcher of an ordinary user (``cpu.TreeCpu``), here forced on: a command that
    starts forty short processes in a row (so some are forked as a stop goes out), and one that
    starts four that compute together, each end on their own within the share: held, not killed."""
    from stepwise_swe_bench import cpu
    from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over

    monkeypatch.setattr(cpu, "episode_cpu", lambda repo, cpus: None)  # no cpu cgroup, as for nobody
    repo = tmp_path / "repo"
    repo.mkdir()
    hand_over(repo)
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=60, episode_cpus=0.5))
    assert not sandbox.cpu_capped
    forks = asyncio.run(sandbox.run(FORKS))
    used, wall = map(float, forks.output.split())
    assert forks.termination == "exit" and used <= 0.5 * wall + 0.3, (used, wall)
    four = SPINNERS.replace("range(8)", "range(4)")
    result = asyncio.run(sandbox.run(four))
    used, wall = map(float, result.output.split())
    assert result.termination == "exit" and used <= 0.5 * wall + 0.3, (used, wall)
