"""End to end: no kernel state shared with the host or between rollouts, and nothing written
outside the repository, through a real ``vf-eval`` (root mode: ``setpriv``, a uid per
repository; the same attacks run in both modes as scenarios of ``test_grading_attacks``).

One run of stepwise__csvline-7 with a CPU share of half a CPU and 4,096 open files per episode,
five rollouts: the gold fix (the control, reward 1); a model that tries every keyring call (a
compiled program, by the native ABI and by ``int 0x80``), writes to ``/``, ``/dev`` and past
``/tmp``'s and ``/dev/shm``'s sizes, and leaves a setuid binary; the gold fix whose library
stores the hidden tests in a key when the tests import it (which, before the filter, a later
eval's model could read); a model that starts eight spinners in sessions of their own; one that
holds 6,000 open files in six processes. Before the run the host puts a key in its own session
keyring, which every process of the eval inherits.
"""

from __future__ import annotations

import ctypes
import json
import platform
from pathlib import Path

import pytest
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.sandbox import UID_BASE

from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, ToolCallReply, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval

from .cap_attacks import ATTACKS, SPINNERS
from .kernel_attacks import (
    KEYRING_PROBE,
    KEYRING_REFUSED,
    KEYRING_STASH,
    KEYRING_STASH_REFUSED,
    SETID,
    WRITABLE,
    WRITABLE_OUTPUT,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the attacks use x86_64 system-call numbers"),
]

TASK = "stepwise__csvline-7"
EPISODE_CPUS, EPISODE_OPEN_FILES = 0.5, 4096
ROLLOUTS = ("probe", "stash", "spin", "files")


def call(name: str, **arguments) -> Reply:
    return Reply(tool_calls=[ToolCallReply(name, arguments)])


def gold_patch() -> str:
    (instance,) = load_instances(instance_ids=[TASK])
    return instance.patch


def gold() -> list:
    return [call("bash", command=f"git apply <<'EOF'\n{gold_patch()}EOF"), call("submit"), "Fixed."]


def probe() -> list:
    commands = [f"# probe\n{KEYRING_PROBE}", WRITABLE, SETID]
    return [*(call("bash", command=c) for c in commands), call("submit"), "Done."]


def stash() -> list:
    apply = f"git apply <<'EOF'\n{gold_patch()}EOF\n"
    apply += f"cat >> csvline/__init__.py <<'EOF_ATTACK'\n{KEYRING_STASH}EOF_ATTACK"
    return [call("bash", command=f"# stash\n{apply}"), call("submit"), "Fixed, and kept a copy."]


def hog(name: str, command: str) -> list:
    return [call("bash", command=f"# {name}\n{command}"), call("submit"), "Done."]


def sandbox_uids_with_keys() -> list[str]:
    """Users in the sandbox uid range that the kernel charges keys to (``/proc/key-users``)."""
    users = (line.split(":")[0].strip() for line in Path("/proc/key-users").read_text().splitlines())
    return [uid for uid in users if UID_BASE <= int(uid) < 2 * UID_BASE]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, dict]:
    """Each rollout's trace info and turn rewards, by ``gold`` or one of ``ROLLOUTS``."""
    libc = ctypes.CDLL(None, use_errno=True)
    secret = b"the host's secret"
    assert libc.syscall(248, b"user", b"host-secret", secret, len(secret), ctypes.c_long(-3)) > 0  # @s
    home = tmp_path_factory.mktemp("home")
    flags = [
        "stepwise-swe-bench", "-n", "1", "-r", str(1 + len(ROLLOUTS)), "--env.max-turns", "1",
        "--env.taskset.instance-ids", json.dumps([TASK]),
        "--env.taskset.task.sandbox.episode-cpus", str(EPISODE_CPUS),
        "--env.taskset.task.sandbox.episode-open-files", str(EPISODE_OPEN_FILES),
    ]  # fmt: skip
    plans = PerRollout(gold(), probe(), stash(), hog("spin", SPINNERS), hog("files", ATTACKS["open_files"]))
    with ModelServer(scripted({"csvline": plans})) as server:
        done = run_vf_eval(flags, server.base_url, output_dir=home / "outputs", env={"HOME": str(home)})
    found = {}
    for episode in done.episodes:
        trace = episode.traces[0]
        assert trace.ok, trace.errors
        calls = trace.info["swe_bench"]["tool_calls"]
        name = next((n for n in ROLLOUTS if calls[0]["input"].startswith(f"# {n}")), "gold")
        found[name] = {**trace.info["swe_bench"], "turn_rewards": trace.info["turn_rewards"]}
    assert sorted(found) == sorted(["gold", *ROLLOUTS])
    return found


def test_the_gold_fix_scores_1_in_the_same_run(run):
    assert run["gold"]["turn_rewards"] == [1.0] and run["gold"]["rounds"][0]["resolved"]


def test_every_keyring_call_is_refused_to_the_models_commands(run):
    outputs = [c["output"] for c in run["probe"]["tool_calls"] if c["tool"] == "bash"]
    # The host's key is not found either: request_key is refused before it could look.
    assert outputs[0].splitlines()[-5:] == KEYRING_REFUSED, outputs[0]
    assert outputs[1] == WRITABLE_OUTPUT
    assert outputs[2].split() == ["6755", "2755"]  # set inside; the repository's volume is nosuid
    assert run["probe"]["turn_rewards"] == [0.0]


def test_the_library_cannot_stash_the_hidden_tests_in_a_key(run):
    (round_,) = run["stash"]["rounds"]
    assert round_["resolved"] and run["stash"]["turn_rewards"] == [1.0]
    assert KEYRING_STASH_REFUSED in round_["test_output"]
    # No key is charged to any sandbox uid: nothing is left for a later eval to read.
    assert sandbox_uids_with_keys() == []


def test_the_episodes_spinners_get_its_cpu_share_only(run):
    (spin,) = run["spin"]["tool_calls"][:1]
    used, wall = map(float, spin["output"].split())
    assert used <= EPISODE_CPUS * wall + 0.3, (used, wall)


def test_the_episodes_open_files_are_capped(run):
    held = run["files"]["tool_calls"][0]
    assert held["termination"] == "files_limit", held
    assert held["cap"] == f"the episode's cap of {EPISODE_OPEN_FILES} open files"
