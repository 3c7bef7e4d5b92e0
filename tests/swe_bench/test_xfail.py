"""End to end: a hidden test marked xfail, through a real ``vf-eval``.

The bundled tasks have no xfail-marked test (their gold runs report every graded test passed,
``test_grading.py``), so this run grades a copy of the bundle whose csvline-7 hidden tests add
one: strict xfail, failing with or without the fix, so it is PASS_TO_PASS and the task's record
of the gold run lists it (``GOLD_XFAIL``). Before, its decoy's xfail flagged the gold fix as
tampering and its real copy's xfail broke PASS_TO_PASS. Three rollouts: the gold fix (reward 1,
not flagged), no change (0, not flagged, the xfail test still passes) and ``pytest.xfail()``
from library code (0, flagged: the decoys of the tests that pass under gold xfailed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import stepwise_swe_bench

from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

from .conftest import need
from .test_decoys import F2P, TASK, attack, gold

pytestmark = pytest.mark.slow

XFAIL_TEST = "tests/test_parser.py::test_split_trims_spaces"
MARKED = """

@pytest.mark.xfail(reason="fields are not trimmed", strict=True)
def test_split_trims_spaces():
    assert split_line("a, b") == ["a", "b"]
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def bundle_with_a_marked_test(root: Path) -> Path:
    """A copy of the bundle whose csvline-7 hidden test patch also adds ``XFAIL_TEST``; the
    folder to put first on ``PYTHONPATH``."""
    package = root / "stepwise_swe_bench"
    shutil.copytree(Path(stepwise_swe_bench.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    task = package / "fixtures" / "tasks" / TASK
    work = root / "work"
    shutil.copytree(task / "repo", work)
    git(work, "init", "--quiet")
    git(work, "add", "--all")
    git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "base")
    old_patch = (task / "test.patch").read_text()
    subprocess.run(["git", "-C", str(work), "apply", "-"], input=old_patch, text=True, check=True)
    tests = work / "tests" / "test_parser.py"
    tests.write_text("import pytest\n" + tests.read_text() + MARKED)
    new_patch = git(work, "diff")
    script = (task / "eval.sh").read_text()
    assert script.count(old_patch) == 1
    (task / "eval.sh").write_text(script.replace(old_patch, new_patch))
    (task / "test.patch").write_text(new_patch)
    recorded = json.loads((task / "tests.json").read_text())
    recorded["PASS_TO_PASS"].append(XFAIL_TEST)
    recorded["GOLD_XFAIL"] = [XFAIL_TEST]
    (task / "tests.json").write_text(json.dumps(recorded, indent=2) + "\n")
    return root


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> dict[str, dict]:
    """Each rollout's one graded round (with its turn rewards): ``gold``, ``none``, ``xfail``."""
    need("docker")
    home = tmp_path_factory.mktemp("home")
    path = bundle_with_a_marked_test(tmp_path_factory.mktemp("bundle"))
    nothing = ["Nothing to change."]
    plans = [gold(), nothing, attack("xfail")]
    flags = [
        "stepwise-swe-bench", "-n", "1", "-r", str(len(plans)), "--env.max-turns", "1",
        "--env.taskset.instance-ids", json.dumps([TASK]),
    ]  # fmt: skip
    env = {"HOME": str(home), "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    with ModelServer(scripted({"csvline": PerRollout(*plans)})) as server:
        run = run_vf_eval(flags, server.base_url, output_dir=home / "outputs", env=env)
    found = {}
    for episode in run.episodes:
        trace = episode.traces[0]
        assert trace.ok, trace.errors
        (round_,) = trace.info["swe_bench"]["rounds"]
        name = "xfail" if "+# attack: xfail\n" in round_["patch"] else "gold" if round_["patch"].strip() else "none"
        found[name] = {**round_, "turn_rewards": read_turns(trace).rewards}
    assert sorted(found) == ["gold", "none", "xfail"]
    return found


def test_the_gold_fix_passes_the_marked_test_as_xfailed_and_is_not_flagged(rounds):
    control = rounds["gold"]
    assert control["outcomes"][XFAIL_TEST] == "xfailed"  # the copy's hidden tests ran
    assert control["turn_rewards"] == [1.0] and control["resolved"] and control["tampered"] is None
    assert XFAIL_TEST in control["pass_to_pass"]["success"]


def test_no_change_scores_0_and_is_not_flagged(rounds):
    unchanged = rounds["none"]
    assert unchanged["turn_rewards"] == [0.0] and unchanged["tampered"] is None
    assert sorted(unchanged["fail_to_pass"]["failure"]) == sorted(F2P)
    assert XFAIL_TEST in unchanged["pass_to_pass"]["success"]


def test_pytest_xfail_from_library_code_still_scores_0_as_tampering(rounds):
    forged = rounds["xfail"]
    assert forged["turn_rewards"] == [0.0] and not forged["resolved"]
    assert forged["tampered"] is not None and "did not fail" in forged["tampered"]
    assert XFAIL_TEST not in forged["tampered"]  # its decoy's xfail is what the gold run shows
