"""docs/torchtitan.md's "Run it", command by command.

Every command of the guide's shell blocks (a line, or lines joined by a trailing backslash) is in
exactly one of the tables below: run here as written (in a fresh directory, ``STEPWISE`` set to
this checkout, and no test import shim: a subprocess sees torchtitan as a user's shell does),
provided by this test's environment, or not run, with the reason. Step 1's install runs in a
fresh venv that sees this environment's packages (a .pth adding its site directory), so it
installs the two packages there and changes nothing here; the later commands run in that venv.
On a machine without torchtitan's GPU stack the run commands stop where the guide says.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
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
    "  # needs the 8 GPUs and steps 1 to 3"
)
INSTALL = 'pip install -e "$STEPWISE[torchtitan]" -e "$STEPWISE/environments/stepwise_dapo_math"'
RUN = (INSTALL, CHECK, TRAIN)
PROVIDED = {"export STEPWISE=/path/to/verifiers-stepwise  # your checkout of this repository": "this checkout"}
GPU_STACK = "CUDA-only wheels and nightlies from outside PyPI"
NOT_RUN = {
    "hf download Qwen/Qwen3-4B-Base --local-dir checkpoints/Qwen3-4B-Base": "network, 8 GB",
    "uv pip install torchmonarch  # GPU machine only, as are the next three lines": GPU_STACK,
    'uv pip install --no-deps "git+https://github.com/meta-pytorch/torchstore.git@main" && '
    "uv pip install pygtrie portpicker": GPU_STACK,
    "uv pip install flash-attn-3 --extra-index-url=https://download.pytorch.org/whl/test/cu130  "
    "# H100/H200; older GPUs use FA2, bundled with torch": GPU_STACK,
    "uv pip install torch torchvision vllm torchcomms --pre --extra-index-url "
    "https://download.pytorch.org/whl/nightly/cu130 --index-strategy unsafe-best-match": GPU_STACK,
}


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


@pytest.fixture(scope="module")
def user_env(tmp_path_factory) -> tuple[dict[str, str], Path]:
    """Step 1 as written, in a fresh venv over this environment: its shell environment and its
    site-packages."""
    venv = tmp_path_factory.mktemp("guide") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "zz_outer.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env["STEPWISE"] = str(ROOT)
    done = subprocess.run(
        ["bash", "-c", INSTALL], cwd=venv.parent, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return env, Path(purelib)


@pytest.mark.slow
def test_the_install_runs_as_written_and_brings_nothing_ci_lacks(user_env):
    """The extra pins torchtitan 0.3.0; the install puts both packages, editable from this checkout,
    in the venv and nothing else: CI's environment holds every dependency step 1 asks for."""
    assert (
        "torchtitan==0.3.0"
        in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["torchtitan"]
    )
    installed = {
        dist.name.replace("_", "-"): dist for dist in importlib.metadata.distributions(path=[str(user_env[1])])
    }
    assert set(installed) - {"pip", "setuptools"} == {"verifiers-stepwise", "stepwise-dapo-math"}, set(installed)
    for name, folder in (
        ("verifiers-stepwise", ROOT),
        ("stepwise-dapo-math", ROOT / "environments/stepwise_dapo_math"),
    ):
        url = json.loads(installed[name].read_text("direct_url.json") or "{}")
        assert url == {"dir_info": {"editable": True}, "url": folder.as_uri()}, url


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
def test_the_guides_commands_stop_at_a_gpu_only_package_as_written(tmp_path, user_env):
    outputs = {}
    for command in (CHECK, TRAIN):
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=user_env[0], capture_output=True, text=True, timeout=300
        )
        assert done.returncode != 0, command
        outputs[command] = done.stderr.strip().splitlines()[-1]
    prefix = "verifiers_stepwise.extras.TrainerDependencyMissing: torchtitan needs "
    assert any(outputs[CHECK].startswith(f"{prefix}{name!r} (a GPU-only package") for name in GPU_ONLY), outputs
    missing = re.fullmatch(r"ModuleNotFoundError: No module named '([\w.]+)'", outputs[TRAIN])
    assert missing and missing[1].split(".")[0] in GPU_ONLY, outputs


def test_the_estimator_is_picked_by_name_in_a_recipe_not_on_the_recipes_command_line():
    """What the guide says of the estimator's name: the recipes' flags list every field of
    ``stepwise``'s config, so ``--rollouter.advantage.estimator`` keeps ``stepwise`` and another
    name is refused when the rollouter builds its advantage; ``stepwise_advantage(NAME)`` in a
    recipe of your own picks any estimator, and its fields are then the flags."""
    from tests.hosts.test_host_torchtitan_cli import parse
    from verifiers_stepwise import ConfigError, get_estimator
    from verifiers_stepwise.hosts.torchtitan import stepwise_advantage

    assert parse("--config", "verifiers_rollouter", "--advantage.estimator", "stepwise").advantage.build()
    refused = parse("--config", "verifiers_rollouter", "--advantage.estimator", "gigpo").advantage
    with pytest.raises(ConfigError, match="GiGPO config: field 'aggregation': unknown field"):
        refused.build()
    assert "`ConfigError: GiGPO config: field 'aggregation': unknown field; …`" in " ".join(GUIDE.read_text().split())
    own = stepwise_advantage("gigpo", scale="none")
    assert own.build().estimator.name == "gigpo"
    assert set(own.options) == set(get_estimator("gigpo").config.model_dump()) and own.options["scale"] == "none"


def test_the_healthy_runs_metric_names_are_the_ones_torchtitan_logs():
    """Every metric "What a healthy run prints" names comes out of torchtitan 0.3.0's own code:
    its console's default keys, the rollout metrics it computes (for training and validation)
    and reduces, and the builder's on a group kept and a group dropped; the DAPO recipe's
    validation keys are read from its source (importing it needs vLLM)."""
    from torchtitan.experiments.rl.controller_metrics import compute_rollout_metrics
    from torchtitan.experiments.rl.observability.metrics import MetricsProcessor

    from tests.hosts.test_host_torchtitan import TurnSpec, builder, component, make_group, score

    right_later = make_group(0, [([TurnSpec(-1.0), TurnSpec(1.0)], 1.0), ([TurnSpec(1.0)], 1.0)])
    alike = make_group(1, [([TurnSpec(1.0), TurnSpec(0.0)], 0.0)] * 3)
    kept = builder().build_from_group(rollout_group=score(right_later, component()))
    dropped = builder().build_from_group(rollout_group=score(alike, component(baseline="per_turn")))
    rollouts = [*right_later.rollouts, *alike.rollouts]
    metrics = [*compute_rollout_metrics("rollout", rollouts), *compute_rollout_metrics("validation", rollouts)]
    logged = set(MetricsProcessor._aggregate_metrics([*metrics, *kept.metrics, *dropped.metrics]))
    console = set(MetricsProcessor.Config().console_log_keys_train)
    spec = importlib.util.find_spec("torchtitan")
    assert spec is not None and spec.submodule_search_locations
    recipe = Path(spec.submodule_search_locations[0], "experiments/rl/examples/dapo_math/config_registry.py")
    text = GUIDE.read_text()
    section = text[text.index("### What a healthy run prints") : text.index("## Verifiers envs on torchtitan")]
    named = {*re.findall(r"`([a-z_]+(?:/[\w@]+)+)`", section), *re.findall(r"([a-z_]+(?:/[\w@]+)+): <x>", section)}
    named = {n for n in named if not n.startswith(("experiments/", "outputs/"))}
    assert len(named) >= 12, named
    unknown = {n for n in named if n not in logged | console and f'"{n}"' not in recipe.read_text()}
    assert not unknown, f"the guide names metrics torchtitan does not log: {unknown}"
