"""The package's promises about itself: lazy import, public API, README and CI agree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import verifiers_stepwise

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "numpy",
    "matplotlib",
    "torch",
    "verifiers",
    "pydantic",
    "datasets",
    "prime_rl",
    "torchtitan",
    "tinker_cookbook",
)


def test_import_loads_no_heavy_module():
    code = f"import sys, json, verifiers_stepwise; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_every_public_name_resolves():
    for name in verifiers_stepwise.__all__:
        assert getattr(verifiers_stepwise, name) is not None


def readme_commands(section: str) -> list[str]:
    """Shell lines of the fenced block that follows the README line starting with ``section``."""
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"^{section}.*?\n```bash\n(.*?)```", text, re.S | re.M)
    assert match, f"README has no {section!r} block"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_ci_runs_the_readme_install_and_test_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    install = [
        line for line in readme_commands("Install for development") if "venv" not in line and "activate" not in line
    ]
    assert install, "README install block is empty"
    for line in install + readme_commands("Run the tests"):
        assert line in ci, f".ci/run does not run the README's {line!r}"


def test_ci_lints_type_checks_and_removes_its_venv():
    ci = (ROOT / ".ci" / "run").read_text()
    steps = ["ruff check .", "ruff format --check .", "mypy", "python -m pytest"]
    assert all(f"\n{step}\n" in ci or f" {step}\n" in ci for step in steps)
    assert [ci.index(step) for step in steps] == sorted(ci.index(step) for step in steps)
    assert "trap 'rm -rf " in ci


def test_changelog_has_an_unreleased_section():
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()


def test_changelog_releases_this_version_and_repeats_no_heading():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert versions and versions[0] == verifiers_stepwise.__version__
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        headings = re.findall(r"^### (.+)$", section, re.M)
        assert len(headings) == len(set(headings)), section.splitlines()[0]


@pytest.mark.slow
def test_the_wheel_ships_py_typed_the_license_and_a_lean_core(tmp_path):
    """Built as pip builds it (hatchling in an isolated build environment)."""
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)]
    result = subprocess.run(build, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("verifiers_stepwise-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"verifiers_stepwise-{verifiers_stepwise.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "verifiers_stepwise/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    assert f"\nVersion: {verifiers_stepwise.__version__}\n" in metadata
    core = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [line for line in core if re.search(r"\b(torch|numba|datasets|matplotlib)\b", line)]


def test_readme_starts_with_install_then_test():
    text = (ROOT / "README.md").read_text()
    assert text.index("Install") < text.index("Run the tests") < text.index("\n## ")


def test_readme_core_examples_run():
    """The Python blocks of the README's core sections run as written."""
    text = (ROOT / "README.md").read_text()
    for section in ("## Returns and advantages", "## Estimator registry"):
        body = text.split(section, 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```python\n(.*?)```", body, re.S):
            exec(compile(block, f"README {section}", "exec"), {})
