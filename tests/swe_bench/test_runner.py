"""The bundled tasks grade with pytest: in Docker the image's, in bubblewrap the interpreter's
that runs ``vf-eval``, where a missing runner stops the eval at load; the model is told the test
run's own exit code (issue 23: a user install without pytest scored every round 0 and told the
model "exit code 0").

The stand-in for an install without pytest: a venv of the system Python (which has no pytest),
the interpreter the load check and the bubblewrap sandbox are pointed at.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf
from stepwise_swe_bench.bwrap import BwrapSandbox
from stepwise_swe_bench.fixtures import base_checkout, materialize
from stepwise_swe_bench.grading import feedback, grade, model_patch, recorded_exit_code
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.taskset import SweBenchTaskset, SweBenchTasksetConfig, TestRunnerMissing

from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, ToolCallReply, scripted

from .conftest import need


@pytest.fixture(scope="module")
def no_pytest(tmp_path_factory) -> Path:
    """The python of a fresh venv without pytest."""
    venv = tmp_path_factory.mktemp("no-pytest") / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0
    return python


def test_a_missing_test_runner_stops_the_load_naming_it_and_how_to_install_it(no_pytest, monkeypatch):
    config = SweBenchTasksetConfig(id="stepwise-swe-bench", task={"sandbox": {"engine": "bwrap"}})
    assert len(SweBenchTaskset(config).load()) == 5  # this suite's interpreter has pytest
    monkeypatch.setattr(sys, "executable", str(no_pytest))  # what the local sandbox grades with
    with pytest.raises(TestRunnerMissing) as raised:
        SweBenchTaskset(config).load()
    message = str(raised.value)
    assert "pytest" in message and str(no_pytest) in message and "No module named pytest" in message
    assert "pip install ./environments/stepwise_swe_bench" in message
    assert f"{no_pytest} -m pip install pytest" in message


def test_the_feedback_reports_the_test_runs_own_exit_code(tmp_path, no_pytest):
    """Graded in a sandbox whose test environment has no pytest: the test command, run in a
    sandbox call of its own, exits 1 (the whole eval script exited 0: its last step is a
    ``git checkout``); the model is told 1."""
    instance = next(i for i in load_instances() if i.instance_id == "stepwise__csvline-7")
    repo = tmp_path / "repo"
    materialize(instance, repo)
    limits = SandboxLimits(engine="bwrap", timeout_s=30)
    sandbox = BwrapSandbox.create(repo, limits, base=base_checkout(instance), python=no_pytest)

    async def round_():
        patch = await model_patch(sandbox, instance.base_commit, timeout_s=60)
        return await grade(instance, sandbox, patch, timeout_s=60, kept_log_bytes=1 << 20)

    result = asyncio.run(round_())
    assert not result.resolved and "No module named 'pytest'" in result.test_output
    assert (result.run["exit_code"], result.test_exit_code) == (1, 1)
    message = feedback(result, round_index=0, rounds_left=1, max_log_chars=500)
    assert "the test command exited with code 1" in message and "exit code 0" not in message


def test_the_exit_code_is_the_eval_scripts_last_marker_not_one_the_code_printed():
    log = ">>>>> Test Exit Code: 0\nTraceback ...\n+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 2\n"
    assert recorded_exit_code(log) == 2
    assert recorded_exit_code("killed before the end") is None


def gold(instance) -> list:
    """A model that applies the instance's gold patch with ``bash``, then submits."""
    command = f"git apply <<'EOF'\n{instance.patch}EOF"
    return [Reply(tool_calls=[ToolCallReply("bash", {"command": command})]),
            Reply(tool_calls=[ToolCallReply("submit", {})]), "Fixed."]  # fmt: skip


README_FLAGS = ["-n", "5", "-r", "4", "--env.max-turns", "3", "--env.reward", "partial", "--no-push"]
"""The bundle README's offline command's flags (``test_the_readme_shows_the_command_run_here``)."""


def test_the_readme_shows_the_command_run_here():
    readme = (Path(__file__).resolve().parents[2] / "environments" / "stepwise_swe_bench" / "README.md").read_text()
    assert "pip install . ./environments/stepwise_swe_bench\n" in readme
    assert "--client.api-key-var KEY_VAR \\\n  " + " ".join(README_FLAGS) + "\n" in readme


@pytest.mark.slow
def test_a_user_install_grades_the_offline_tasks_and_stops_at_load_without_pytest(tmp_path):
    """The bundle README's install (``pip install . ./environments/stepwise_swe_bench`` from a
    checkout, into a fresh venv: not the development install) and its offline command as written
    (all five bundled tasks in Docker, 4 rollouts each, 3 rounds, partial reward), against the
    local scripted model: per task two rollouts apply the gold patch (1 in their first round),
    two change nothing (0 in each of 3 rounds), every round graded by pytest. Then pytest
    uninstalled and the command run in bubblewrap, which grades with that install's
    interpreter: it stops before any episode, naming pytest."""
    need("docker")
    root = Path(__file__).resolve().parents[2]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = [venv / "bin" / "pip", "install", "-q", str(root), str(root / "environments" / "stepwise_swe_bench")]
    subprocess.run(install, check=True, capture_output=True, timeout=1800)
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LOCAL_KEY": "sk-local"}
    env |= {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}  # and no PYTHONPATH: the venv's own code

    def vf_eval(server: ModelServer, out: Path, *flags: str) -> subprocess.CompletedProcess:
        command = [venv / "bin" / "vf-eval", "stepwise-swe-bench", "-m", "local-model", "--client.base-url"]
        command += [server.base_url, "--client.api-key-var", "LOCAL_KEY", *README_FLAGS, *flags]
        return subprocess.run(command + ["--no-rich", "-o", str(out)], env=env, capture_output=True, text=True,
                               timeout=900)  # fmt: skip

    instances = load_instances()
    assert len(instances) == 5
    plans = {i.problem_statement.splitlines()[0]: PerRollout(gold(i), ["I changed nothing."]) for i in instances}
    with ModelServer(scripted(plans)) as server:
        graded = vf_eval(server, tmp_path / "graded")
        assert graded.returncode == 0, graded.stderr[-3000:]
        (traces,) = (tmp_path / "graded").glob("*/traces.jsonl")
        episodes = [vf.WireEpisode.model_validate_json(line) for line in traces.read_text().splitlines()]
        by_task: dict[str, list[list[float]]] = {}
        for episode in episodes:
            (trace,) = episode.traces
            assert trace.ok, trace.errors
            rounds = trace.info["swe_bench"]["rounds"]
            assert all("No module named pytest" not in r["test_output"] and r["tampered"] is None for r in rounds)
            assert all(r["test_exit_code"] == 1 for r in rounds)  # the decoys fail in every honest run
            by_task.setdefault(trace.task.data.id, []).append([r["score"] for r in rounds])
        assert {task: sorted(rewards) for task, rewards in by_task.items()} == {
            i.instance_id: [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0], [1.0]] for i in instances
        }

        subprocess.run([venv / "bin" / "pip", "uninstall", "-q", "-y", "pytest"], check=True, timeout=300)
        stopped = vf_eval(server, tmp_path / "stopped", "--env.taskset.task.sandbox.engine", "bwrap")
    assert stopped.returncode != 0 and not list((tmp_path / "stopped").glob("*/traces.jsonl"))
    assert "TestRunnerMissing" in stopped.stderr and "cannot run it (" in stopped.stderr
    assert f"`{venv / 'bin'}/python" in stopped.stderr and " -m pip install pytest`" in stopped.stderr
