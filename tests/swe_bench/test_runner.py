"""The bundled tasks grade with pytest: a missing runner stops the eval at load, and the model is
told the test run's own exit code (issue 23: a user install without pytest scored every round 0
and told the model "exit code 0").

The stand-in for an install without pytest: a venv of the system Python (which has no pytest),
the interpreter the load check and the grading sandbox are pointed at.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from stepwise_swe_bench.fixtures import base_checkout, materialize
from stepwise_swe_bench.grading import feedback, grade, model_patch, recorded_exit_code
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox
from stepwise_swe_bench.taskset import SweBenchTaskset, SweBenchTasksetConfig, TestRunnerMissing


@pytest.fixture(scope="module")
def no_pytest(tmp_path_factory) -> Path:
    """The python of a fresh venv without pytest."""
    venv = tmp_path_factory.mktemp("no-pytest") / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0
    return python


def test_a_missing_test_runner_stops_the_load_naming_it_and_how_to_install_it(no_pytest, monkeypatch):
    config = SweBenchTasksetConfig(id="stepwise-swe-bench")
    assert len(SweBenchTaskset(config).load()) == 5  # this suite's interpreter has pytest
    monkeypatch.setattr(sys, "executable", str(no_pytest))  # what the local sandbox grades with
    with pytest.raises(TestRunnerMissing) as raised:
        SweBenchTaskset(config).load()
    message = str(raised.value)
    assert "pytest" in message and str(no_pytest) in message and "No module named pytest" in message
    assert "pip install ./environments/stepwise_swe_bench" in message
    assert f"{no_pytest} -m pip install pytest" in message


def test_the_feedback_reports_the_test_runs_own_exit_code(tmp_path, no_pytest):
    """Graded in a sandbox whose test environment has no pytest: the eval script exits 0 (its last
    step is a ``git checkout``), the test command 1; the model is told 1."""
    instance = next(i for i in load_instances() if i.instance_id == "stepwise__csvline-7")
    repo = tmp_path / "repo"
    materialize(instance, repo)
    sandbox = BwrapSandbox(repo, SandboxLimits(timeout_s=30), base=base_checkout(instance), python=no_pytest)

    async def round_():
        patch = await model_patch(sandbox, instance.base_commit, timeout_s=60)
        return await grade(instance, sandbox, patch, timeout_s=60, kept_log_bytes=1 << 20)

    result = asyncio.run(round_())
    assert not result.resolved and "No module named pytest" in result.test_output
    assert (result.run["exit_code"], result.test_exit_code) == (0, 1)
    message = feedback(result, round_index=0, rounds_left=1, max_log_chars=500)
    assert "the test command exited with code 1" in message and "exit code 0" not in message


def test_the_exit_code_is_the_eval_scripts_last_marker_not_one_the_code_printed():
    log = ">>>>> Test Exit Code: 0\nTraceback ...\n+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 2\n"
    assert recorded_exit_code(log) == 2
    assert recorded_exit_code("killed before the end") is None
