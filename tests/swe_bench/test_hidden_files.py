"""The hidden tests and reference fixes of the bundled tasks are never readable in a sandbox.

A regular install (``pip install`` of the bundle's wheel) puts ``fixtures/tasks/*/gold.patch``
and ``test.patch`` in site-packages, which every sandbox shows read-only (the test environment's
Python). The stand-in for that install: a venv of the system Python whose site-packages holds a
copy of the package as the wheel lays it out (``stepwise_swe_bench/`` with its data; no build
backend is installed offline), with this suite's dependencies on a ``.pth`` line. Both sandbox
modes: as this user and, when that is root, as an ordinary user (bubblewrap in a user namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest
import stepwise_swe_bench
from stepwise_swe_bench.sandbox import hand_over

NOBODY = 65534
PROBE = r"""
import asyncio, json, sys
from pathlib import Path
import stepwise_swe_bench
from stepwise_swe_bench.sandbox import HIDDEN, BwrapSandbox

package = Path(stepwise_swe_bench.__file__).parent
assert HIDDEN == (package / "fixtures",), (HIDDEN, package)
sandbox = BwrapSandbox(Path(sys.argv[1]))
command = (
    f"find / -xdev \\( -name gold.patch -o -name test.patch -o -name eval.sh \\) 2>/dev/null; "
    f"find {package} -name '*.patch' 2>/dev/null; cat {package}/fixtures/tasks/*/gold.patch; "
    f"ls {package}/fixtures; echo x > {package}/fixtures/x; ls {package}"
)
result = asyncio.run(sandbox.run(command))
print(json.dumps({"output": result.output, "package": str(package)}))
"""


def wheel_install(root: Path) -> Path:
    """The venv holding the installed copy; its python."""
    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    source = Path(stepwise_swe_bench.__file__).parent
    shutil.copytree(source, site / "stepwise_swe_bench", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "suite-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


@pytest.mark.parametrize("user", ["this", "ordinary"])
def test_installed_fixtures_are_hidden_in_the_sandbox(user: str):
    if user == "ordinary" and os.geteuid() != 0:
        pytest.skip("the suite already runs as an ordinary user (the other case)")
    root = Path(tempfile.mkdtemp(dir="/tmp"))  # readable by an ordinary user, unlike pytest's
    os.chmod(root, 0o755)
    try:
        python = wheel_install(root)
        repo = root / "repo"
        repo.mkdir()
        drop = []
        if user == "ordinary":
            os.chown(repo, NOBODY, NOBODY)
            drop = ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        else:
            hand_over(repo)
        probe = subprocess.run(
            [*drop, str(python), "-c", PROBE, str(repo)], capture_output=True, text=True, timeout=120, env={}
        )
        assert probe.returncode == 0, probe.stderr[-3000:]
        result = json.loads(probe.stdout)
        assert any((Path(result["package"]) / "fixtures" / "tasks").glob("*/gold.patch"))  # installed ...
    finally:
        shutil.rmtree(root)
    output = result["output"]
    found = [line for line in output.splitlines() if line.endswith((".patch", "eval.sh"))]
    assert found == [] and "diff --git" not in output  # ... and not seen
    assert "gold.patch': No such file or directory" in output and "Read-only file system" in output
    assert "sandbox.py" in output and "grading.py" in output  # the rest of the package is mounted
