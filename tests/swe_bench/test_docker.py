"""Real SWE-bench instances in verifiers' docker runtime: what would be run.

No docker engine runs here. A stand-in ``docker`` CLI (``fake_docker.py``) records every call and
answers like an engine; verifiers' own ``DockerRuntime`` drives it, so the test reads the exact
``docker`` command lines a user's machine would execute.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf
from stepwise_swe_bench import grading, verdict
from stepwise_swe_bench.box import BoxRef, UnsupportedRuntime, open_sandbox, prepare_box
from stepwise_swe_bench.grading import grade, model_patch
from stepwise_swe_bench.instances import SweInstance, load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.taskset import SweBenchTask, SweBenchTaskConfig, task_data
from verifiers.v1.runtimes import provision_runtime
from verifiers.v1.utils.compile import resolve_runtime_config

BASE = "d16bfe05a744909de4b27f5875fe0d4ed41ce607"
TEST_FILE = "astropy/modeling/tests/test_separable.py"
F2P = [f"{TEST_FILE}::test_separable[compound_model6-result6]", f"{TEST_FILE}::test_separable[compound_model9-result9]"]
P2P = [f"{TEST_FILE}::test_coord_matrix", f"{TEST_FILE}::test_cdot", f"{TEST_FILE}::test_cstack"]
TEST_PATCH = f"""diff --git a/{TEST_FILE} b/{TEST_FILE}
--- a/{TEST_FILE}
+++ b/{TEST_FILE}
@@ -28,6 +28,13 @@
 p1 = models.Polynomial1D(1, name='p1')
+
+cm_4d_expected = (np.array([False, False, True, True]),
+                  np.array([[True,  True,  False, False],
+                            [True,  True,  False, False],
+                            [False, False, True,  False],
+                            [False, False, False, True]]))
"""
# The shape of a SWE-bench (swebench 5) eval script.
EVAL_SCRIPT = f"""#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
git status
git -c core.fileMode=false diff {BASE}
git checkout {BASE} {TEST_FILE}
git apply -v - <<'EOF_114329324912'
{TEST_PATCH}EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA {TEST_FILE}
: '>>>>> End Test Output'
git checkout {BASE} {TEST_FILE}
"""
ROW = {
    "instance_id": "astropy__astropy-12907",
    "repo": "astropy/astropy",
    "base_commit": BASE,
    "problem_statement": (
        "Modeling's `separability_matrix` does not compute separability correctly for nested CompoundModels"
    ),
    "version": "4.3",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n",
    "test_patch": TEST_PATCH,
    "FAIL_TO_PASS": json.dumps(F2P),
    "PASS_TO_PASS": json.dumps(P2P),
    "eval_script": EVAL_SCRIPT,
    "log_parser": "parse_log_pytest",
    "eval_type": "pass_and_fail",
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
}
KEY = b"k" * 32
IMAGE = "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
TEST_LOG = "".join(
    [
        "+ : '>>>>> Start Test Output'\n",
        "+ pytest -rA astropy/modeling/tests/test_separable.py\n",
        "============================= test session starts ==============================\n",
        *(f"PASSED {test}\n" for test in [*P2P, *F2P]),
        "============================== 5 passed in 0.31s ===============================\n",
        "+ SWEBENCH_TEST_EXIT_CODE=0\n",
        "+ : '>>>>> End Test Output'\n",
    ]
)


@pytest.fixture
def docker(tmp_path: Path, monkeypatch) -> Path:
    """Put the stand-in ``docker`` first on PATH; return the directory of its records."""
    records = tmp_path / "docker"
    records.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "docker"
    cli.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name("fake_docker.py")} "$@"\n')
    cli.chmod(0o755)
    log = tmp_path / "test.log"
    log.write_text(TEST_LOG)
    # The test call's output: the grader's report for a plan made with a known key, the real
    # copies passed and the decoys failed (no pytest runs in the stand-in).
    plan = verdict.make_plan([*F2P, *P2P], secret=KEY)
    monkeypatch.setattr(grading, "make_plan", lambda tests: verdict.make_plan(tests, secret=KEY))
    outcomes = {**dict.fromkeys(plan.real_names(), "passed"), **dict.fromkeys(plan.decoy_names(), "failed")}
    report = tmp_path / "report.log"
    report.write_text(f"collected 10 items\n{verdict.VERDICT_MARK} {json.dumps(outcomes)}\n")
    monkeypatch.setenv("FAKE_DOCKER_VERDICT_LOG", str(report))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_DIR", str(records))
    monkeypatch.setenv("FAKE_DOCKER_HEAD", BASE)
    monkeypatch.setenv("FAKE_DOCKER_EVAL_LOG", str(log))
    return records


def calls(records: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in (records / "calls.jsonl").read_text().splitlines()]


def test_the_instance_decides_the_image_and_workdir(tmp_path: Path):
    row = {k: v for k, v in ROW.items()}
    path = tmp_path / "verified.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (instance,) = load_instances(str(path))  # no image column: swebench's derived name
    assert instance.image == IMAGE
    task = SweBenchTask(task_data(instance), SweBenchTaskConfig())
    config = resolve_runtime_config(vf.DockerConfig(), task)  # verifiers' own resolution
    assert (config.image, config.workdir) == (IMAGE, "/testbed")
    # No network for the model's commands: verifiers' framework-only policy.
    assert config.network_restricted and (config.allow, config.block) == ([], ["*"])
    with pytest.raises(ValueError, match="docker"):
        resolve_runtime_config(vf.SubprocessConfig(), task)


async def test_commands_and_grading_in_the_official_image(docker: Path):
    instance = SweInstance.from_row({**ROW, "image": IMAGE}, "test rows")
    task = SweBenchTask(task_data(instance), SweBenchTaskConfig())
    limits = SandboxLimits(timeout_s=45, output_kill_bytes=1024 * 1024)
    config = resolve_runtime_config(vf.DockerConfig(), task)
    async with provision_runtime(config) as runtime:
        box, sandbox = await prepare_box(runtime, instance, limits)
        # What a rollout does after task setup: cut the container's network.
        await runtime.prepare_execution(["http://127.0.0.1:9/v1"])
        command = await sandbox.run("grep -n separability_matrix astropy/modeling/separable.py")
        patch = await model_patch(sandbox, instance.base_commit, timeout_s=60)
        result = await grade(instance, sandbox, patch, timeout_s=600, kept_log_bytes=1 << 20)
        # The tool server's view: it borrows the container by id.
        async with open_sandbox(BoxRef.model_validate_json(box.model_dump_json())) as tools:
            borrowed = await tools.run("git status")
    argvs = calls(docker)

    # Two containers of the image: the model's, and a fresh one where its diff is graded.
    run, grader_run = [a for a in argvs if a[:1] == ["run"] and "--detach" in a]
    container, grader = (r[r.index("--name") + 1] for r in (run, grader_run))
    assert container != grader
    for started in (run, grader_run):
        assert started[started.index("--entrypoint") + 1] == "sleep" and started[-2:] == [IMAGE, "infinity"]
        assert {"NET_ADMIN", "NET_RAW"} <= {started[i + 1] for i, a in enumerate(started) if a == "--cap-drop"}
        # The engine's default seccomp profile stays on: it refuses add_key, request_key and
        # keyctl (the container's counterpart of the bubblewrap sandbox's filter).
        assert "--privileged" not in started and not any("seccomp" in a or "unconfined" in a for a in started)
    cuts = [a for a in argvs if a[:1] == ["run"] and "NET_ADMIN" in a and "--cap-add" in a]
    for name in (container, grader):  # neither may reach the network
        (cut,) = [c for c in cuts if f"container:{name}" in c]
        assert "iptables -A OUTPUT -j REJECT" in " ".join(cut)
    assert box.kind == "docker" and box.repo == "/testbed" and box.container == "f" * 12

    def sandboxed(argv: list[str]) -> list[str] | None:
        """The command line of a sandboxed command: exec ... --workdir /testbed <c> /bin/bash -c."""
        if argv[:1] != ["exec"] or "/bin/bash" not in argv:
            return None
        return argv[argv.index("/bin/bash") :]

    execs = [(a, sandboxed(a)) for a in argvs if sandboxed(a)]
    user_commands = [inner[4] for _, inner in execs]
    assert user_commands[:2] == ["git rev-parse HEAD", "grep -n separability_matrix astropy/modeling/separable.py"]
    outer, inner = execs[1]
    assert outer[outer.index("--workdir") + 1] == "/testbed" and container in outer
    wrapper = inner[2]
    assert "ulimit -H -S -c 0 -t 120 -v 4194304" in wrapper and "timeout -k 5" in wrapper
    assert inner[5:] == ["/testbed", "45", str(1024 * 1024 + 1)]
    assert command.exit_code == 0 and command.output == f"ran: {user_commands[1]}\n"

    # Grading: the instance's eval script, split in two (``verdict``), is written into the
    # container and run there: its set-up, then the test command with the plan on its stdin,
    # staged in a file that is removed once opened; the report is judged.
    split = verdict.split_eval_script(instance.test_spec().eval_script)
    files = {p.name: p for p in (docker / "files").iterdir()}
    scripts = {p.read_text(): name for name, p in files.items() if name.startswith("stepwise-eval-")}
    assert sorted(scripts) == sorted([split.setup, split.command])
    assert "git apply" in split.setup and "python -c" in split.command
    (staged,) = [name for name in files if name.startswith("stepwise-stdin-")]
    assert json.loads(files[staged].read_text())["tests"] == list(verdict.make_plan([*F2P, *P2P], secret=KEY).tests)
    setup, test = scripts[split.setup], scripts[split.command]
    grading_calls = {
        "setup": f"bash /tmp/{setup}; status=$?; rm -f /tmp/{setup}; exit $status",
        "test": f"{{ rm -f /tmp/{staged}; bash /tmp/{test}; status=$?; rm -f /tmp/{test}; exit $status\n}} "
        f"< /tmp/{staged}",
    }
    for command in grading_calls.values():
        ((grading_exec, graded),) = [(outer, inner) for outer, inner in execs if inner[4] == command]
        assert grader in grading_exec and container not in grading_exec
        assert "ulimit -H -S -c 0 -t 600 " in graded[2]  # a test process may use the whole run's CPU
        assert graded[5:7] == ["/testbed", "600"]
    assert result.resolved and result.status == "RESOLVED_FULL" and result.tampered is None
    assert sorted(result.fail_to_pass["success"]) == sorted(F2P)

    # The tool server reached the same container by its id.
    assert borrowed.output == "ran: git status\n"
    assert any(a[:1] == ["exec"] and "f" * 12 in a and "git status" in a for a in argvs)
    assert ["rm", "--force", container] in argvs and ["rm", "--force", grader] in argvs


async def test_runtimes_that_cannot_host_the_tools_are_refused():
    instance = SweInstance.from_row({**ROW, "image": IMAGE}, "test rows")

    class Remote:
        type = "modal"

    class Local:
        type = "subprocess"

    with pytest.raises(UnsupportedRuntime, match="'modal' runtime cannot host"):
        await prepare_box(Remote(), instance, SandboxLimits())
    with pytest.raises(UnsupportedRuntime, match="use a container runtime"):
        await prepare_box(Local(), instance, SandboxLimits())
    assert load_instances()[0].image is None  # bundled tasks run locally
