"""docs/torchtitan.md's "Run it", command by command.

Every command of the guide's shell blocks (a line, or lines joined by a trailing backslash) is in
exactly one of the tables below: run here as written (in a fresh directory, ``STEPWISE`` set to
this checkout, this interpreter first on ``PATH``, and no test import shim: a subprocess sees
torchtitan as a user's shell does), provided by this test's environment, or not run, with the
reason. On a machine without torchtitan's GPU stack the run commands stop where the guide says.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from verifiers_stepwise.hosts.torchtitan import GPU_ONLY

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "torchtitan.md"

CHECK = 'python -c "import verifiers_stepwise.hosts.torchtitan.config_registry"'
TRAIN = (
    "python -m torchtitan.experiments.rl.train --module verifiers_stepwise.hosts.torchtitan"
    " --config rl_stepwise_verifiers_dapo_qwen3_4b_math --hf_assets_path checkpoints/Qwen3-4B-Base"
)
INSTALL = 'pip install -e "$STEPWISE[torchtitan]" -e "$STEPWISE/environments/stepwise_dapo_math"'
RUN = (CHECK, TRAIN)
PROVIDED = {
    "export STEPWISE=/path/to/verifiers-stepwise": "STEPWISE is set to this checkout",
    INSTALL: ".ci/run installs both (test_the_install_is_what_ci_installs)",
}
NOT_RUN = {"hf download Qwen/Qwen3-4B-Base --local-dir checkpoints/Qwen3-4B-Base": "network, 8 GB"}


def run_it() -> str:
    text = GUIDE.read_text()
    start = text.index("## Run it\n")
    return text[start : text.index("\n## ", start + 1)]


def commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", run_it(), re.S)
    joined = [re.sub(r"\s*\\\n\s*", " ", block) for block in blocks]  # bash reads these as one line
    return [line.strip() for block in joined for line in block.splitlines() if line.strip()]


def gpu_stack_missing() -> bool:
    return any(importlib.util.find_spec(name) is None for name in GPU_ONLY)


def test_every_command_of_the_guide_is_accounted_for():
    found = commands()
    assert sorted(found) == sorted([*RUN, *PROVIDED, *NOT_RUN]), set(found) ^ {*RUN, *PROVIDED, *NOT_RUN}


def test_the_install_is_what_ci_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "torchtitan==0.3.0" in extras["torchtitan"]
    assert any("torchtitan" in dev for dev in extras["dev"])  # .ci/run: pip install -e ".[dev]"
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in ci and "environments/stepwise_dapo_math" in ci
    assert importlib.metadata.version("torchtitan") == "0.3.0"
    assert importlib.util.find_spec("stepwise_dapo_math") is not None


def test_the_layout_adds_up_to_eight_gpus():
    """torchtitan's recipe (which the stepwise one keeps) read from its source: it imports vLLM."""
    spec = importlib.util.find_spec("torchtitan")
    assert spec is not None and spec.submodule_search_locations
    source = Path(spec.submodule_search_locations[0], "experiments/rl/examples/dapo_math/config_registry.py")
    text = source.read_text()
    (generators,) = map(int, re.findall(r"num_generators=(\d+)", text))
    trainer_tp, generator_tp = map(int, re.findall(r"tensor_parallel_degree=(\d+)", text))
    assert set(re.findall(r"data_parallel_\w*degree=(\d+)", text)) == {"1"}
    assert (trainer_tp, generators, generator_tp) == (2, 6, 1)
    assert trainer_tp + generators * generator_tp == 8
    assert "**one node with 8 NVIDIA GPUs**, one TP=2 trainer (2 GPUs) and six TP=1 vLLM generators" in " ".join(
        run_it().split()
    )


@pytest.mark.slow
@pytest.mark.skipif(not gpu_stack_missing(), reason="torchtitan's GPU stack is installed: nothing stops on CPU")
def test_the_guides_commands_stop_at_a_gpu_only_package_as_written(tmp_path):
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "STEPWISE": str(ROOT),
    }
    outputs = {}
    for command in RUN:
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode != 0, command
        outputs[command] = done.stderr.strip().splitlines()[-1]
    prefix = "verifiers_stepwise.extras.TrainerDependencyMissing: torchtitan needs "
    assert any(outputs[CHECK].startswith(f"{prefix}{name!r} (a GPU-only package") for name in GPU_ONLY), outputs
    missing = re.fullmatch(r"ModuleNotFoundError: No module named '([\w.]+)'", outputs[TRAIN])
    assert missing and missing[1].split(".")[0] in GPU_ONLY, outputs
