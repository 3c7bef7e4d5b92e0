"""Red team: every way found to raise a round's reward without the fix, tried as a model would
(commands in its sandbox, then a graded round), in every mode: Docker, bubblewrap as root, and
bubblewrap as an ordinary user. Each must score 0 with the reason recorded, or leave the hidden
tests out of what the model sees; honest fixes that also leave odd traces (unreadable files, a
locked workdir, a forging git config, a full disk) still resolve."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from stepwise_swe_bench.output import KILLED

from .conftest import NOBODY, as_nobody, need, ordinary_user_python
from .grading_attacks import SCENARIOS, VERDICT_FLAGGED, VERDICT_PAYLOADS, play
from .kernel_attacks import KEYRING_REFUSED, KEYRING_STASH_REFUSED, WRITABLE_OUTPUT

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
    **{f"verdict_{name}": "(passed)" for name in VERDICT_FLAGGED},
}
BLOCKED = [f"verdict_{name}" for name in VERDICT_PAYLOADS if name not in VERDICT_FLAGGED]
"""Their tell says nothing now: they score 0 as a wrong fix does."""
MEMORY_HOG = "fix_that_exhausts_memory"
FIXES = [name for name, (_, fix) in SCENARIOS.items() if fix and name != MEMORY_HOG]


def check(results: dict[str, dict], memory_cap: bool) -> None:
    """``memory_cap``: the mode holds the episode's memory (Docker, bubblewrap as root)."""
    for name, expected in REJECTED.items():
        result = results[name]
        assert result["score"] == 0.0 and not result["resolved"], name
        assert result["rejected"] and expected in result["rejected"], (name, result["rejected"])
        assert "was not graded" in result["feedback"] and expected in result["feedback"], name
    for name in NOT_GRADED_AS_FIXED:
        result = results[name]
        assert result["score"] == 0.0 and result["rejected"] is None, (name, result["rejected"])
    for name in BLOCKED:
        result = results[name]
        assert result["score"] == 0.0 and result["rejected"] is None and result["tampered"] is None, name
        assert result["fail_to_pass"]["failure"], name
    for name, why in TAMPERED.items():
        result = results[name]
        assert result["score"] == 0.0 and result["rejected"] is None, (name, result["rejected"])
        assert result["tampered"] and why in result["tampered"], (name, result["tampered"])
        assert "scored 0" in result["feedback"], name
    for name in ("decoy_exit_hook", "decoy_rerun"):
        assert results[name]["test_exit_code"] == 0, name  # recorded, not trusted
    for name in FIXES:
        result = results[name]
        assert result["resolved"] and result["score"] == 1.0, (name, result["rejected"], result["test_output"][-500:])
    hog = results[MEMORY_HOG]
    assert hog["score"] == 0.0 and not hog["resolved"] and hog["rejected"] is None and hog["tampered"] is None
    if memory_cap:  # killed at the cap: no verdict
        assert hog["run"]["exit_code"] in KILLED and not hog["outcomes"], hog["run"]
        assert "could not be run or their output could not be read (killed by SIGKILL" in hog["feedback"]
    else:  # the address space limit: a MemoryError at import, the tests fail
        assert "MemoryError" in hog["test_output"]
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
    assert results["fix_setid_left"]["outputs"][0].split() == ["6755", "2755"]  # set, on a nosuid mount
    deep = results["fix_with_deep_tree"]
    assert deep["outputs"] == ["built\n"] and "d/" * 999 + "d/f.txt" in deep["patch"]
    for name, result in results.items():
        assert result["after"] == "still usable\n", name
        assert result["left"] == [], name  # cleanup survives what the attack left (1,000 levels, chmod 000)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["docker", "bwrap"])
def test_grading_attacks_fail(tmp_path: Path, engine: str):
    """In Docker, and in bubblewrap as this process's user (root here: ``setpriv``, cgroups)."""
    need(engine)
    check(asyncio.run(play(tmp_path, list(SCENARIOS), engine)), memory_cap=engine == "docker" or os.geteuid() == 0)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the suite already runs as an ordinary user (the test above)")
def test_grading_attacks_fail_as_an_ordinary_user():
    """In bubblewrap as an ordinary user (``nobody``): a user namespace, rlimits."""
    root = Path(tempfile.mkdtemp(dir="/tmp"))
    os.chmod(root, 0o755)
    workdir = root / "attacks"
    workdir.mkdir()
    os.chown(workdir, NOBODY, NOBODY)
    python = ordinary_user_python(root)
    script = (
        "import sys; from pathlib import Path; from tests.swe_bench.grading_attacks import as_ordinary_user; "
        "as_ordinary_user(drop, Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])"
    )
    warm_up = Path(tempfile.mkdtemp())
    try:
        check(json.loads(as_nobody(script, str(warm_up), str(workdir), str(python), *SCENARIOS)), memory_cap=False)
    finally:
        subprocess.run(["rm", "-rf", str(root), str(warm_up)], check=True)
