"""The torchtitan recipes: CLI overrides through torchtitan's own ConfigManager, turn caps,
the credit check and the report of a missing GPU-only dependency.

``ConfigManager`` (torchtitan 0.3.0) is real; what it parses here is the recipes' rollouter
section (``tests/hosts/titan_sections.py``, built by the recipes' own functions), because a
recipe's full ``Controller.Config`` needs vLLM and Monarch. ``parse`` is ``parse_args`` without
its last step (``_validate_config`` checks the model checkpoint path, a Controller field).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from types import SimpleNamespace

import pytest
import tyro
from torchtitan.config.manager import ConfigManager, custom_registry
from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder
from torchtitan.experiments.rl.rollout.advantage import AdvantageEstimator

from verifiers_stepwise import ConfigError
from verifiers_stepwise.extras import TrainerDependencyMissing, requires
from verifiers_stepwise.hosts.torchtitan import (
    GPU_ONLY,
    check_cli_flags,
    check_credit,
    stepwise_advantage,
    with_stepwise_advantage,
)
from verifiers_stepwise.hosts.torchtitan.release import StepwiseTrainingSampleBuilder
from verifiers_stepwise.hosts.torchtitan.verifiers import VerifiersRollouter

SECTIONS = ["--module", "tests.hosts.titan_sections"]


def parse(*argv: str):
    loaded, args = ConfigManager()._load_config([*SECTIONS, *argv])
    return tyro.cli(type(loaded), args=args, default=loaded, registry=custom_registry)


def test_estimator_options_and_env_args_override_the_verifiers_recipe():
    config = parse(
        "--config", "verifiers_rollouter", "--advantage.options.gamma", "0.9",
        "--advantage.options.baseline", "per_turn", "--env_args.max_turns", "6", "--taskset", "stepwise-refine",
    )  # fmt: skip
    assert isinstance(config, VerifiersRollouter.Config) and config.taskset == "stepwise-refine"
    assert config.env_args == {"max_turns": 6}
    estimator = config.advantage.build().estimator.config
    assert (estimator.gamma, estimator.baseline, estimator.scale) == (0.9, "per_turn", "none")


def test_max_attempts_sets_the_turn_cap_of_the_native_recipe():
    # the env ends the episode at its last attempt; torchtitan's own turn cap stays unset
    config = parse("--config", "native_rollouter", "--message_env.max_attempts", "6")
    assert (config.message_env.max_attempts, config.token_env.max_num_turns) == (6, None)
    assert parse("--config", "native_rollouter").token_env.max_num_turns is None
    assert parse("--config", "native_rollouter", "--advantage.options.gamma", "0.8").advantage.options["gamma"] == 0.8


def test_a_turn_cap_apart_from_the_attempts_is_refused_not_reset(capsys):
    """Regression (#25): --token_env.max_num_turns 3 was silently reset to max_attempts (4).
    tyro reports the config's ConfigError as a parse error (exit 2) with its message."""
    with pytest.raises(SystemExit) as exit:
        parse("--config", "native_rollouter", "--token_env.max_num_turns", "3")
    assert exit.value.code == 2
    printed = " ".join(capsys.readouterr().err.replace("│", " ").split())
    assert "set --rollouter.message_env.max_attempts 3 instead" in printed
    config = parse("--config", "native_rollouter", "--token_env.max_num_turns", "3", "--message_env.max_attempts", "3")
    assert (config.message_env.max_attempts, config.token_env.max_num_turns) == (3, 3)


@pytest.mark.parametrize("attempts", ["6", "2"])
def test_a_turn_cap_equal_to_the_default_attempts_is_refused_too(capsys, attempts):
    """Regression (#25): a cap of 4 (the default attempts) beside other attempts was still reset
    to the attempts without a word: it could not be told from no cap."""
    with pytest.raises(SystemExit) as exit:
        parse("--config", "native_rollouter", "--token_env.max_num_turns", "4", "--message_env.max_attempts", attempts)
    assert exit.value.code == 2
    printed = " ".join(capsys.readouterr().err.replace("│", " ").split())
    assert f"token_env.max_num_turns 4 differs from message_env.max_attempts {attempts}" in printed
    assert "set --rollouter.message_env.max_attempts 4 instead" in printed


def controller(advantage, builder):
    """The two fields of a ``Controller.Config`` that ``check_credit`` reads."""
    return SimpleNamespace(
        rollouter=SimpleNamespace(advantage=advantage), async_loop=SimpleNamespace(training_sample_builder=builder)
    )


def test_a_stepwise_advantage_with_torchtitans_builder_is_a_config_error():
    stepwise = VerifiersRollouter.Config(taskset="stepwise-refine").advantage
    with pytest.raises(ConfigError, match="broadcast|StepwiseTrainingSampleBuilder"):
        check_credit(controller(stepwise, TrainingSampleBuilder.Config()))
    with pytest.raises(ConfigError, match="StepwiseAdvantage"):
        check_credit(controller(AdvantageEstimator.Config(), StepwiseTrainingSampleBuilder.Config()))
    check_credit(controller(stepwise, StepwiseTrainingSampleBuilder.Config()))
    check_credit(controller(AdvantageEstimator.Config(), TrainingSampleBuilder.Config()))


@dataclasses.dataclass(kw_only=True, slots=True)
class StandInControllerConfig:
    """A stand-in for torchtitan's ``Controller.Config`` (whose module imports vLLM): the two
    fields the checks read, and a ``__post_init__`` of its own, as torchtitan's has."""

    rollouter: object
    async_loop: object
    posted: bool = False

    def __post_init__(self) -> None:
        self.posted = True


@dataclasses.dataclass
class AsyncLoop:
    training_sample_builder: object


def test_stepwise_controller_checks_the_config_whenever_it_is_built():
    """``stepwise_controller`` is a subclass of the config's own class (either layout's), whose
    ``__post_init__`` runs the base's, then ``check_credit`` and ``check_cli_flags``: also when
    the config is built again (torchtitan's ``ConfigManager`` applying the CLI), and pickled."""
    import pickle

    from verifiers_stepwise.hosts.torchtitan import stepwise_controller

    rollouter = VerifiersRollouter.Config(taskset="stepwise-refine")
    paired = StandInControllerConfig(rollouter=rollouter, async_loop=AsyncLoop(StepwiseTrainingSampleBuilder.Config()))
    checked = stepwise_controller(paired)
    assert isinstance(checked, StandInControllerConfig) and checked.posted
    assert pickle.loads(pickle.dumps(checked)).rollouter.taskset == "stepwise-refine"
    with pytest.raises(ConfigError, match="set async_loop.training_sample_builder=StepwiseTrainingSampleBuilder"):
        dataclasses.replace(checked, async_loop=AsyncLoop(TrainingSampleBuilder.Config()))  # the CLI's override
    with pytest.raises(ConfigError, match="set async_loop.training_sample_builder"):
        stepwise_controller(dataclasses.replace(paired, async_loop=AsyncLoop(TrainingSampleBuilder.Config())))


def test_stepwise_advantage_on_torchtitans_dapo_rollouter_takes_its_flags_once_wrapped():
    """Regression (#25): on torchtitan's own DAPO-Math rollouter, whose ``advantage`` is annotated
    ``AdvantageEstimator.Config``, tyro rejected ``--advantage.options.*``. Wrapped by
    ``with_stepwise_advantage`` they parse; unwrapped, the recipe check names the wrapper."""
    import pickle

    from torchtitan.experiments.rl.examples.dapo_math.env import DapoMathEnv
    from torchtitan.experiments.rl.examples.dapo_math.rollouter import DapoMathRollouter

    config = parse("--config", "dapo_rollouter_with_stepwise", "--advantage.options.gamma", "0.9")
    assert isinstance(config, DapoMathRollouter.Config) and config._owner is DapoMathRollouter
    assert (config.advantage.options["gamma"], config.advantage.options["scale"]) == (0.9, "none")
    assert pickle.loads(pickle.dumps(config)) == config  # torchtitan may ship configs to other processes

    bare = DapoMathRollouter.Config(message_env=DapoMathEnv.Config(), advantage=stepwise_advantage())
    checked = SimpleNamespace(rollouter=bare, async_loop=SimpleNamespace(training_sample_builder=None))
    with pytest.raises(ConfigError, match=r"no --rollouter\.advantage\.options\.\* flags.*with_stepwise_advantage"):
        check_cli_flags(checked)
    checked.rollouter = with_stepwise_advantage(bare)
    check_cli_flags(checked)
    assert checked.rollouter.advantage == bare.advantage  # its options kept
    for recipe in ("verifiers_rollouter", "native_rollouter"):  # the recipes' own rollouters pass
        check_cli_flags(SimpleNamespace(rollouter=parse("--config", recipe)))


@pytest.mark.skipif(all(importlib.util.find_spec(name) for name in GPU_ONLY), reason="GPU stack installed")
@pytest.mark.parametrize("recipe", ["rl_stepwise_dapo_qwen3_4b_math", "rl_stepwise_verifiers_dapo_qwen3_4b_math"])
def test_the_real_recipe_names_the_missing_dependency(recipe):
    # The module imports (no "Cannot import module"); calling the recipe loads torchtitan's
    # trainer, whose first missing import here is cloudpickle or a GPU-only package.
    with pytest.raises(TrainerDependencyMissing, match="not installed in this environment") as missing:
        ConfigManager()._load_config(["--module", "verifiers_stepwise.hosts.torchtitan", "--config", recipe])
    assert importlib.util.find_spec(missing.value.name) is None
    assert repr(missing.value.name) in str(missing.value)


_LOAD_THE_RECIPE = """
from torchtitan.config.manager import ConfigManager
args = ["--module", "verifiers_stepwise.hosts.torchtitan"]
args += ["--config", "rl_stepwise_verifiers_dapo_qwen3_4b_math"]
ConfigManager()._load_config(args)
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM installed")
def test_on_a_cpu_box_the_recipe_module_names_the_gpu_package_not_cannot_import_module():
    """Outside these tests (no conftest), importing the recipe module runs torchtitan RL's
    ``__init__``, which imports vLLM's stack (here triton is the first missing); torchtitan's
    loader would report that ImportError as "Cannot import module"."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LOAD_THE_RECIPE], capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    prefix = "verifiers_stepwise.extras.TrainerDependencyMissing: torchtitan needs "
    assert any(last.startswith(f"{prefix}{name!r} (a GPU-only package") for name in GPU_ONLY), last
    assert "Cannot import module" not in done.stderr


def test_trainer_imports_names_what_is_missing_and_passes_the_trainers_own_errors():
    def trainer_imports(trainer: str, gpu_only):
        return requires("a trainer module", trainer, extra="torchtitan", trainer=trainer, gpu_only=gpu_only)

    with pytest.raises(TrainerDependencyMissing, match="'vllm' \\(a GPU-only package") as missing:
        with trainer_imports("torchtitan", gpu_only=GPU_ONLY):
            raise ModuleNotFoundError("No module named 'vllm.engine'", name="vllm.engine")
    assert missing.value.name == "vllm" and not isinstance(missing.value, ImportError)
    with pytest.raises(TrainerDependencyMissing, match="'cloudpickle' \\(not installed\\)"):
        with trainer_imports("torchtitan", gpu_only=GPU_ONLY):
            raise ModuleNotFoundError("No module named 'cloudpickle'", name="cloudpickle")
    with pytest.raises(ModuleNotFoundError):  # a torchtitan layout change is torchtitan's error
        with trainer_imports("torchtitan", gpu_only=GPU_ONLY):
            import torchtitan.no_such_module  # noqa: F401


_NO_RL = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("torchtitan.experiments", "torchtitan.rl")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
import verifiers_stepwise.hosts.torchtitan.release
"""


def test_a_torchtitan_without_either_rl_layout_is_named():
    """A torchtitan with neither RL package (0.3.0's nor main's) is named, with the install."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _NO_RL], capture_output=True, text=True, timeout=240, cwd=repo)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("verifiers_stepwise.extras.TrainerDependencyMissing: ")
    assert "torchtitan.experiments.rl (torchtitan 0.3.0) or torchtitan.rl (torchtitan main)" in last
    assert "pip install 'verifiers-stepwise[torchtitan]'" in last
