"""Red team: every way found to raise a round's reward without the fix, tried as a model would
(commands in its sandbox, then a graded round), in both sandbox modes. Each must score 0 with
the reason recorded, or leave the hidden tests out of what the model sees; honest fixes that
also leave odd traces (unreadable files, a locked workdir, a forging git config) still resolve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .grading_attacks import SCENARIOS, play
from .kernel_attacks import KEYRING_REFUSED, KEYRING_STASH_REFUSED, WRITABLE_OUTPUT

NOBODY = 65534
REPO_ROOT = Path(__file__).resolve().parents[2]
REJECTED = {
    "root_conftest": "conftest.py is a pytest conftest.py",
    "package_conftest": "slugs/conftest.py is a pytest conftest.py",
    "pytest_ini_plugin": "pytest.ini is a pytest configuration file",
    "pyproject_pytest_table": "pyproject.toml changes pytest's configuration",
    "setup_cfg_section": "setup.cfg changes pytest's configuration",
    "tox_ini_section": "tox.ini changes pytest's configuration",
    "shadow_pytest": "adds the top-level importable name 'pytest'",
    "shadow_pytest_package": "adds the top-level importable name '_pytest'",
    "shadow_stdlib": "adds the top-level importable name 'unittest'",
    "shadow_compiled": "is a compiled module",
    "new_top_level_package": "adds the top-level importable name 'helpers'",
    "compiled_in_package": "slugs/slugify.abi3.so is a compiled module",
    "metadata_case": "PASSALL-1.0.DIST-INFO/METADATA is package metadata",
    "sitecustomize": "sitecustomize.py is an interpreter start-up hook",
    "path_hook": "evil.pth is package metadata or a path hook",
    "plugin_entry_point": "passall-1.0.dist-info/entry_points.txt is package metadata",
    "unchecked_pyc": "tests/__pycache__/test_slugify.cpython-311.pyc",
    "symlink": "link.py is a symbolic link",
    "new_test_module": "tests/test_mine.py is in the tests",
    "hidden_test_edit": "tests/test_slugify.py is a file the hidden tests change",
}
NOT_GRADED_AS_FIXED = ["ignored_conftest", "git_hook", "leak_through_exception", "terminal_escapes"]
TAMPERED = {
    "decoy_xfail": "did not fail",
    "decoy_report_patch": "did not fail",
    "decoy_always_equal": "did not fail",
    "decoy_markers": "printed 2 reports",
    "decoy_exit_hook": "exit status was forged",
    "decoy_exit_mid_run": "ended without the grader's report",
    "decoy_rerun": "exit status was forged",
}
KILLED_BY_A_CAP = {"fix_that_exhausts_memory": "memory_limit"}
FIXES = [name for name, (_, fix) in SCENARIOS.items() if fix and name not in KILLED_BY_A_CAP]


def check(results: dict[str, dict]) -> None:
    for name, expected in REJECTED.items():
        result = results[name]
        assert result["reward"] == 0.0 and not result["resolved"], name
        assert result["rejected"] and expected in result["rejected"], (name, result["rejected"])
        assert "was not graded" in result["feedback"] and expected in result["feedback"], name
    for name in NOT_GRADED_AS_FIXED:
        result = results[name]
        assert result["reward"] == 0.0 and result["rejected"] is None, (name, result["rejected"])
    for name, why in TAMPERED.items():
        result = results[name]
        assert result["reward"] == 0.0 and result["rejected"] is None, (name, result["rejected"])
        assert result["tampered"] and why in result["tampered"], (name, result["tampered"])
        assert "scored 0" in result["feedback"], name
    for name in ("decoy_exit_hook", "decoy_rerun"):
        assert results[name]["test_exit_code"] == 0, name  # recorded, not trusted
    for name in FIXES:
        result = results[name]
        assert result["resolved"] and result["reward"] == 1.0, (name, result["rejected"], result["test_output"][-500:])
    for name, termination in KILLED_BY_A_CAP.items():
        result = results[name]
        assert result["reward"] == 0.0 and not result["resolved"] and result["rejected"] is None, name
        assert result["run"]["termination"] == termination and result["run"]["cap"], (name, result["run"])
        assert (
            f"could not be run or their output could not be read (killed: {result['run']['cap']}" in result["feedback"]
        )
    # Left out of the diff: what git ignores, and what the hook would have written at grading.
    assert "b/conftest.py" not in results["ignored_conftest"]["patch"]
    assert "b/conftest.py" not in results["git_hook"]["patch"]
    # Forging the recorded diff with git's external diff driver: the real diff is recorded.
    assert results["fix_diff_external"]["patch"] == results["fix"]["patch"] != ""
    assert "slugify.cpython" in results["fix_with_bytecode_left"]["outputs"][1]  # it was written
    assert "__pycache__" not in results["fix_with_bytecode_left"]["patch"]
    # The hidden tests reached the log through the model's own exception, never the feedback.
    leak = results["leak_through_exception"]
    assert any(line in leak["test_output"] for line in leak["hidden_lines"])
    assert not [line for line in leak["hidden_lines"] if line in leak["feedback"]]
    assert "RuntimeError" in leak["feedback"]
    escapes = results["terminal_escapes"]["feedback"]
    assert "RuntimeError" in escapes and "\x1b" not in escapes and "\x00" not in escapes and "\x07" not in escapes
    # Kernel state: every keyring call refused, by both ABIs, from the model's command and from
    # the library at grading (the fix still resolves, listed in FIXES).
    assert results["fix_keyring_probe"]["outputs"][0].splitlines()[-5:] == KEYRING_REFUSED
    assert KEYRING_STASH_REFUSED in results["fix_keyring_stash"]["test_output"]
    assert results["fix_writes_outside"]["outputs"] == [WRITABLE_OUTPUT]
    assert results["fix_setid_left"]["outputs"][0].split() == ["6755", "2755"]  # set, inside
    setid = results["fix_setid_left"]["setid"]
    if setid["nosuid"] is None:  # a directory of the host's file system: cleared after the command
        assert setid["found"] == [], setid
    else:  # the repository's own volume, mounted nosuid: the bits take effect nowhere
        assert setid["nosuid"] and setid["found"] == ["planted", "sgid"], setid
    deep = results["fix_with_deep_tree"]
    assert deep["outputs"] == ["built\n"] and "d/" * 999 + "d/f.txt" in deep["patch"]
    for name, result in results.items():
        assert result["after"] == "still usable\n", name
        assert result["removed"], name  # cleanup survives what the attack left (1,000 levels, chmod 000)


@pytest.mark.slow
def test_grading_attacks_fail_in_the_bubblewrap_sandbox(tmp_path: Path):
    """As this process's user: as root, bubblewrap without a user namespace and ``setpriv``."""
    import asyncio

    check(asyncio.run(play(tmp_path, list(SCENARIOS))))


def ordinary_user_python(root: Path) -> Path:
    """A venv of the system Python holding pytest and its dependencies: an ordinary user's test
    environment (this suite's own interpreter lives under /root, which other users cannot read)."""
    import importlib.util
    import shutil

    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    for module in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / origin.parent.name)
        else:
            shutil.copy(origin, site / origin.name)
        for metadata in origin.parent.parent.glob(f"{module}-*.dist-info") if origin.name == "__init__.py" else ():
            shutil.copytree(metadata, site / metadata.name)
    return venv / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the suite already runs as an ordinary user (the test above)")
def test_grading_attacks_fail_in_the_user_namespace_sandbox():
    """As an ordinary user (nobody): bubblewrap in a user namespace."""
    root = Path(tempfile.mkdtemp(dir="/tmp"))
    os.chmod(root, 0o755)
    workdir = root / "attacks"
    workdir.mkdir()
    os.chown(workdir, NOBODY, NOBODY)
    python = ordinary_user_python(root)
    script = (
        "import sys; from pathlib import Path; from tests.swe_bench.grading_attacks import as_ordinary_user; "
        "as_ordinary_user(65534, Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])"
    )
    warm_up = Path(tempfile.mkdtemp())
    env = {"PATH": os.environ["PATH"], "HOME": str(workdir), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    if "PYTHONPATH" in os.environ:  # the code under test, where it is not the installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        child = subprocess.run(
            [sys.executable, "-c", script, str(warm_up), str(workdir), str(python), *SCENARIOS],
            capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr[-3000:]
        check(json.loads(child.stdout))
    finally:
        subprocess.run(["rm", "-rf", str(root), str(warm_up)], check=True)
