"""The package's promises about itself: lazy import, public API, README, docs and CI agree."""

from __future__ import annotations

import json
import os
import re
import socket
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
    """Shell lines of the fenced block that follows the README line (or heading) starting with ``section``."""
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"^(?:#+ )?{section}.*?\n```bash\n(.*?)```", text, re.S | re.M)
    assert match, f"README has no {section!r} block"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")]


CPU_INDEX = " --index-url https://download.pytorch.org/whl/cpu"


def test_ci_runs_the_readme_install_and_test_commands():
    """Line for line, but for torch's index: CI's machines reach PyPI only and keep torch's CPU
    wheel on local disk (pip's find-links), so CI installs the same version without it."""
    ci = (ROOT / ".ci" / "run").read_text()
    install = [
        line for line in readme_commands("Install for development") if "venv" not in line and "activate" not in line
    ]
    assert install, "README install block is empty"
    for line in install + readme_commands("Run the tests"):
        assert line.replace(CPU_INDEX, "") in ci, f".ci/run does not run the README's {line!r}"


def test_the_dev_install_takes_torch_from_the_cpu_index_as_the_user_install_does():
    """Issue 37: ``pip install torch==2.13.0`` takes PyPI's default build elsewhere: CUDA, with its
    NVIDIA libraries. The dev install names the CPU index, as docs/trl.md's user install does."""
    (torch,) = [line for line in readme_commands("Install for development") if "torch" in line]
    assert torch.startswith(f"pip install torch==2.13.0{CPU_INDEX} && pip install -e ")
    assert f"pip install torch{CPU_INDEX}" in (ROOT / "docs" / "trl.md").read_text()


def test_the_trl_commands_output_dir_is_ignored_by_git():
    """Issue 37: the README's TRL command writes under ``runs/``, which git showed as untracked."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    (output_dir,) = re.findall(r"--output_dir (\S+)", " ".join(readme_commands("## Train a real model")))
    for path in (f"{output_dir}/log_history.json", "outputs/run/traces.jsonl"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert done.returncode == 0, f"git does not ignore {path}"


def test_ci_lints_type_checks_and_removes_its_venv():
    ci = (ROOT / ".ci" / "run").read_text()
    steps = ["ruff check .", "ruff format --check .", "mypy", "lint-imports", "python -m pytest"]
    assert all(f"\n{step}\n" in ci or f" {step}\n" in ci or f" {step} " in ci for step in steps)
    assert [ci.index(step) for step in steps] == sorted(ci.index(step) for step in steps)
    # on exit: the venvs removed and a Docker engine the run started stopped
    assert "trap cleanup EXIT" in ci
    cleanup = ci[ci.index("cleanup() {") : ci.index("trap cleanup EXIT")]
    assert 'rm -rf "$tmp"' in cleanup and 'kill "$dockerd_pid"' in cleanup


def test_the_layer_contract_breaks_on_an_upward_import(tmp_path):
    """``lint-imports`` (CI) keeps this tree's layers and fails a copy where the math imports a host."""
    import shutil

    shutil.copytree(ROOT / "verifiers_stepwise", tmp_path / "verifiers_stepwise")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")

    def lint(cwd: Path) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        lint_imports = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([lint_imports, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True)

    assert lint(tmp_path).returncode == 0
    base = tmp_path / "verifiers_stepwise" / "estimators" / "base.py"
    base.write_text(base.read_text() + "\nimport verifiers_stepwise.hosts.prime_rl  # noqa\n")
    broken = lint(tmp_path)
    assert broken.returncode != 0 and "BROKEN" in broken.stdout
    assert "verifiers_stepwise.estimators.base -> verifiers_stepwise.hosts.prime_rl" in broken.stdout


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


# -- the README and docs/ -------------------------------------------------------------------------

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "environments").glob("*/README.md")])
# Relative links that other branches' files satisfy (issue #13 splits the README among helpers):
# docs/estimators.md (#16), docs/prime-rl.md (#14), docs/torchtitan.md (#15), docs/trl.md (#18), LICENSE (#13 H1).


def test_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_readme_says_what_it_is_first_then_install_quickstart_tests_citation():
    text = (ROOT / "README.md").read_text()
    first = text.split("\n## ", 1)[0]
    assert "stepwise" in first.lower() and "arXiv 2507.11948" in first
    order = ["## Contents", "## Install", "## Quickstart", "## Run the tests", "## Citation"]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)
    assert "2507.11948" in text.split("## Citation", 1)[1] and "@software{" in text


def test_readme_contents_link_every_doc_and_bundle_readme():
    contents = (ROOT / "README.md").read_text().split("## Contents", 1)[1].split("\n## ", 1)[0]
    for path in DOCS:
        if path.name != "README.md" or path.parent != ROOT:
            assert f"]({path.relative_to(ROOT).as_posix()})" in contents, f"{path} is not in the README's contents"


def python_blocks(path: Path, after: str | None = None) -> list[str]:
    text = path.read_text()
    if after is not None:
        text = text[text.index(after) :]
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize(
    "doc, after", [("README.md", None), ("docs/schema.md", None), ("docs/writing-envs.md", "## Test helpers")]
)
def test_doc_examples_run(doc, after):
    """These pages' Python blocks run as written (their asserts state what the text claims)."""
    blocks = python_blocks(ROOT / doc, after)
    assert blocks
    for block in blocks:
        exec(compile(block, doc, "exec"), {})


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a markdown file's headings (lowercased, punctuation dropped, spaces to -)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_in_readme_and_docs_resolves():
    broken = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(ROOT)}: {target}"
            if not file.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(sorted(set(broken)))


def test_every_documented_vf_eval_names_its_model_server_and_does_not_push():
    """Issue 37: stepwise-sums' README showed ``vf-eval stepwise-sums --env.taskset.split test``,
    which went to vf-eval's default remote model (90/90 ProviderError) and then tried to push its
    traces (an error asking for an API key). Every ``vf-eval`` of a shell block in the docs names
    the endpoint it runs against and keeps its traces local."""
    bad = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S):
            for command in re.sub(r"\\\n", " ", block).splitlines():
                if command.strip().startswith("vf-eval") and not {"--client.base-url", "--no-push"} <= set(
                    command.split()
                ):
                    bad.append(f"{doc.relative_to(ROOT)}: {command.strip()}")
    assert not bad, "vf-eval lines without --client.base-url or --no-push:\n" + "\n".join(bad)


@pytest.mark.parametrize("guide", ["prime-rl", "torchtitan", "tinker"])
def test_each_trainer_guide_says_where_to_get_this_package_before_installing_it(guide):
    """Issue 37: none named where to get this package (not on PyPI; no clone URL is known) before
    its first ``pip install``. Each says, first: a checkout of this repository, or wheels built
    in one (the README's wheel route)."""
    text = " ".join((ROOT / "docs" / f"{guide}.md").read_text().split())
    first_install = text.index('install -e "$STEPWISE') if guide != "tinker" else text.index('install "$STEPWISE')
    before = text[:first_install]
    assert "verifiers-stepwise is not on PyPI" in before and "checkout of this repository" in before
    assert "pip wheel --no-deps ." in before
    assert "# your checkout of this repository" in text[:first_install]


def test_tests_named_in_the_docs_exist():
    defined = {m for path in (ROOT / "tests").rglob("*.py") for m in re.findall(r"def (test_\w+)", path.read_text())}
    missing = []
    for doc in DOCS:
        for span in re.findall(r"`([^`\n]+)`", doc.read_text()):
            match = re.fullmatch(r"(tests/[\w/]+\.py)(?:::(test_\w+))?|(test_\w+)", span)
            if not match:
                continue
            file, name = match.group(1), match.group(2) or match.group(3)
            if file and not (ROOT / file).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {file}")
            if name and name not in defined:
                missing.append(f"{doc.relative_to(ROOT)}: {name}")
    assert not missing, "docs name tests that do not exist:\n" + "\n".join(missing)


@pytest.mark.slow
def test_readme_quickstart_runs_as_written(tmp_path):
    """The quickstart's shell block, run by bash on a free port: the server starts, vf-eval writes
    a run, vf-stepwise prints the table the README shows, the server stops on `kill`."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    script = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```\n(read 1 file.*?)```", section, re.S).group(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert "8000" in script
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "200",
    }
    bash = ["bash", "-e", "-c", script.replace("8000", str(port)) + "\nwait $!  # the server's exit status"]
    result = subprocess.run(bash, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    printed = "\n".join(line.rstrip() for line in result.stdout.splitlines())
    for line in shown.splitlines():  # vf-eval's last line has no newline: vf-stepwise's first line follows it
        assert line.rstrip() in printed, f"not printed: {line!r}\n" + result.stdout[-3000:]
    # The per-turn rows back the README's reading of them.
    (rows_file,) = tmp_path.glob("outputs/*/traces.advantages.jsonl")
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    by_trace: dict[str, list[dict]] = {}
    for row in rows:
        by_trace.setdefault(row["episode"], []).append(row)
    assert "no estimator named; credit kind refinement -> grpo()" in result.stderr
    # The near miss 400 repeated four times: its score 0.98 counts once, as the first turn's gain,
    # and every turn that asked for another costs 0.1; grpo gives all four turns one advantage.
    near_miss = [t for t in by_trace.values() if [round(r["reward"], 2) for r in t] == [0.88, -0.1, -0.1, -0.1]]
    right_at_once = [
        t
        for t in by_trace.values()
        if [r["reward"] for r in t] == [1.0] and t[0]["group_id"] == near_miss[0][0]["group_id"]
    ]
    assert [round(r["advantage"], 2) for r in near_miss[0]] == [0.62] * 4
    assert round(right_at_once[0][0]["advantage"], 2) == 1.32
