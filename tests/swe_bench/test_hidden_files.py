"""The hidden tests and reference fixes of the bundled tasks are never readable in a sandbox.

A regular install (``pip install`` of the bundle's wheel) puts ``fixtures/tasks/*/gold.patch``
and ``test.patch`` in site-packages, which every bubblewrap sandbox shows read-only (the test
environment's Python; a Docker container holds no fixtures at all). The stand-in for that
install: a venv of the system Python whose site-packages holds a copy of the package as the
wheel lays it out (``stepwise_swe_bench/`` with its data; no build backend is installed
offline). The probe imports that copy (first on ``PYTHONPATH``) and opens a sandbox whose test
environment is that venv. Both bubblewrap modes: as this user and, when that is root, as an
ordinary user (privileges dropped after the imports, as the suite's own
interpreter may live where that user cannot read).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import stepwise_swe_bench
from stepwise_swe_bench.bwrap import hand_over

NOBODY = 65534
PROBE = r"""
import asyncio, json, os, sys
import concurrent.futures.thread  # asyncio.to_thread's lazy import: nobody cannot read this Python
from pathlib import Path
import stepwise_swe_bench
from stepwise_swe_bench import seccomp
from stepwise_swe_bench.bwrap import HIDDEN, BwrapSandbox, remove_tree
from stepwise_swe_bench.limits import SandboxLimits
seccomp.filter_program()  # its lazy import, cached

package = Path(stepwise_swe_bench.__file__).parent
assert HIDDEN == (package / "fixtures",), (HIDDEN, package)
if sys.argv[3] == "ordinary":
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
repo = Path(sys.argv[1])
sandbox = BwrapSandbox.create(repo, SandboxLimits(engine="bwrap"), python=Path(sys.argv[2]))
command = (
    f"find / -xdev \\( -name gold.patch -o -name test.patch -o -name eval.sh \\) 2>/dev/null; "
    f"find {package} -name '*.patch' 2>/dev/null; cat {package}/fixtures/tasks/*/gold.patch; "
    f"ls {package}/fixtures; echo x > {package}/fixtures/x; ls {package}"
)
result = asyncio.run(sandbox.run(command))
if os.geteuid() == 0:
    remove_tree(repo)  # and its cgroup
print(json.dumps({"output": result.output, "package": str(package)}))
"""


def wheel_install(root: Path) -> tuple[Path, Path]:
    """The venv holding the installed copy: its python and its site-packages."""
    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    source = Path(stepwise_swe_bench.__file__).parent
    shutil.copytree(source, site / "stepwise_swe_bench", ignore=shutil.ignore_patterns("__pycache__"))
    return venv / "bin" / "python", site


@pytest.mark.parametrize("user", ["this", "ordinary"])
def test_installed_fixtures_are_hidden_in_the_sandbox(user: str):
    if user == "ordinary" and os.geteuid() != 0:
        pytest.skip("the suite already runs as an ordinary user (the other case)")
    root = Path(tempfile.mkdtemp(dir="/tmp"))  # readable by an ordinary user, unlike pytest's
    os.chmod(root, 0o755)
    try:
        python, site = wheel_install(root)
        repo = root / "repo"
        repo.mkdir()
        if user == "ordinary":
            os.chown(repo, NOBODY, NOBODY)
        else:
            hand_over(repo)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, str(repo), str(python), user],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-3000:]
        result = json.loads(probe.stdout)
        assert any((Path(result["package"]) / "fixtures" / "tasks").glob("*/gold.patch"))  # installed ...
    finally:
        shutil.rmtree(root)
    output = result["output"]
    found = [line for line in output.splitlines() if line.endswith((".patch", "eval.sh"))]
    assert found == [] and "diff --git" not in output  # ... and not seen
    assert "gold.patch': No such file or directory" in output and "Read-only file system" in output
    assert "bwrap.py" in output and "grading.py" in output  # the rest of the package is mounted
