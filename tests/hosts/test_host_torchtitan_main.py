"""torchtitan main's own Verifiers rollouter (PR #4356), run from a stored copy of main's code,
with ``StepwiseVerifiersRollouter`` on top, against real verifiers episodes of this package's envs.

What is main's code, unedited: ``torchtitan/rl/examples/verifiers/{rollouter,data,env_server,
generation_server}.py`` (versions in ``tests/hosts/torchtitan_main/README.md``; the folder is
named by ``STEPWISE_TORCHTITAN_MAIN`` and checked by sha256; without it these tests skip, and
under ``STEPWISE_REQUIRE_TORCHTITAN_MAIN=1``, as in .ci/run's torchtitan-main stage, they fail). What
is a stand-in (``tests/hosts/torchtitan_main/tree/``): the rest of ``torchtitan.rl`` those files
import, as torchtitan 0.3.0's same classes where 0.3.0 has them (rollout types, advantage,
rubric, types, metrics, the sample builder), plus main's ``Rollout.logs`` field, a bare
``Rollouter``/``RolloutWorker`` base, ``RLDataLoader``'s config, ``SamplingConfig`` and
``torchtitan.components.renderer``'s adapter. What is real besides: main's env server (a spawned
verifiers ``serve_env`` process), its aiohttp generation server, verifiers' ``EnvClient`` and
token-level ``TrainClient`` rendering with ``renderers``' Qwen3 renderer, this package's envs,
``StepwiseTrainingSampleBuilder`` and ``score_group``. What is not: torchtitan's vLLM generator
(a scripted ``GenerateFn``) and Qwen3's tokenizer (a byte-level one with its special tokens).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
import verifiers.v1 as vf
from packaging.version import Version
from torchtitan.experiments.rl.renderer import RendererConfig

from tests.hosts.test_host_torchtitan_verifiers import assert_each_turns_advantage_on_its_tokens, planned_completion
from tests.hosts.torchtitan_main import REQUIRE_VAR, child_site, install, stored
from verifiers_stepwise import ConfigError, get_estimator, score_group
from verifiers_stepwise.hosts.torchtitan import TURN_REWARD, check_cli_flags, env_config, turn_advantages
from verifiers_stepwise.testing.tokenizer import qwen3_byte_tokenizer
from verifiers_stepwise.traces.turns import read_turns


def main_builder(**config):
    """Main's ``StepwiseTrainingSampleBuilder`` (its module imports once main's files are installed)."""
    from verifiers_stepwise.hosts.torchtitan.main import StepwiseTrainingSampleBuilder

    return StepwiseTrainingSampleBuilder.Config(**config).build()


FOLDER, MISSING = stored()
if FOLDER is None and os.environ.get(REQUIRE_VAR):  # .ci/run's torchtitan-main stage: no skip
    raise RuntimeError(f"{REQUIRE_VAR} is set but {MISSING}")
pytestmark = pytest.mark.skipif(FOLDER is None, reason=MISSING)

REPO = Path(__file__).resolve().parents[2]
VERIFIERS = version("verifiers")
# stepwise-dapo-math declares verifiers>=0.4 (on 0.3.1 its task data has no id); stepwise-refine
# declares the package's own range, which holds 0.3.1, main's pin
needs_verifiers_0_4 = pytest.mark.skipif(
    Version(VERIFIERS) < Version("0.4"), reason=f"stepwise-dapo-math needs verifiers>=0.4, not {VERIFIERS}"
)


@pytest.fixture(scope="module", autouse=True)
def mains_code():
    undo = install(FOLDER)
    yield
    undo()


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    return qwen3_byte_tokenizer(tmp_path_factory.mktemp("qwen3-bytes"))


@pytest.fixture
def spawned_env_server(tmp_path, monkeypatch):
    """Main's env server spawns a Python that must import main's files too."""
    site = child_site(FOLDER, tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]))


def recipe_rollouter(**source):
    """The rollouter section of main's ``rl_dapo_qwen3_4b_verifiers_8k`` (its config_registry's
    ``_verifiers_math_rollouter_config``: one-call math, the null harness), on the stored
    rollouter's schema; main's math taskset (not stored) is stood in by ``stepwise-refine``'s."""
    from torchtitan.rl.components.data_loader import RLDataLoader
    from torchtitan.rl.examples.verifiers.data import VerifiersTaskSource
    from torchtitan.rl.examples.verifiers.env_server import VerifiersEnvServer
    from torchtitan.rl.examples.verifiers.generation_server import GenerationServer
    from torchtitan.rl.examples.verifiers.rollouter import RewardFromVerifiers, VerifiersRollouter
    from torchtitan.rl.rubric import Rubric
    from verifiers.v1.harnesses.null import NullHarnessConfig

    taskset = vf.resolve_env_config(env_config("stepwise-refine", {})).taskset
    return VerifiersRollouter.Config(
        train_data=RLDataLoader.Config(source=VerifiersTaskSource.Config(verifiers_taskset=taskset, **source)),
        validation_source=VerifiersTaskSource.Config(verifiers_taskset=taskset),
        verifiers_env_server=VerifiersEnvServer.Config(
            environment=vf.SingleAgentEnvConfig(
                agent=vf.AgentConfig(runtime=vf.SubprocessConfig(), max_turns=1, harness=NullHarnessConfig(id="null"))
            ),
            serve=vf.ServeConfig(pool=vf.StaticPoolConfig(num_workers=1), address="tcp://127.0.0.1:0"),
        ),
        rubric=Rubric.Config(reward_fns=[RewardFromVerifiers.Config(weight=1.0)], error_reward=0.0),
        generation_server=GenerationServer.Config(max_rollout_tokens=10240),
    )


def scripted(tokenizer_path, plans):
    """torchtitan main's ``GenerateFn`` (it also takes ``group_id``): rollout j (its seed)
    answers ``plans[j][k]`` on its k-th call."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(prompt_token_ids, *, request_id, group_id, routing_session_id=None, sampling_config=None):
        generate.calls.append((group_id, routing_session_id, sampling_config.seed))
        return planned_completion(tokenizer, stop, plans[sampling_config.seed], prompt_token_ids, request_id)

    generate.calls = []
    return generate


def run_group(config, tokenizer_path, plans, pick):
    """One group of main's rollouter: ``setup_async`` as main's controller calls it, then
    ``run_group_rollouts``; returns the group and the verifiers episodes, by rollout."""
    from torchtitan.components.renderer import from_renderers
    from torchtitan.rl.examples.verifiers.data import VerifiersTaskSource
    from torchtitan.rl.generator import SamplingConfig

    rollouter = config.build()
    sample = next(s for s in VerifiersTaskSource(config.validation_source)._samples if pick(s.verifiers_task_data))
    renderer = RendererConfig(name="qwen3", enable_thinking=False).build(tokenizer_path=tokenizer_path)
    generate = scripted(tokenizer_path, plans)
    episodes = {}

    async def go():
        await rollouter.setup_async(
            tokenizer_config=None, renderer_config=from_renderers(renderer.config), hf_assets_path=str(tokenizer_path)
        )
        client = rollouter._verifiers_env_client
        run = client.run

        async def spy(**kwargs):
            episodes[kwargs["sampling"].seed] = episode = await run(**kwargs)
            return episode

        client.run = spy
        try:
            return await rollouter.run_group_rollouts(
                generate_fn=generate,
                sample=sample,
                group_id=7,
                group_size=len(plans),
                sampling=SamplingConfig(temperature=0.8, top_p=0.95, max_tokens=64, seed=0),
            )
        finally:
            await rollouter.close()

    group = asyncio.run(go())
    episodes = [episodes[j] for j in range(len(plans))]
    assert {group_id for group_id, _, _ in generate.calls} == {7}  # main tags each request with its group
    assert len(generate.calls) == sum(len(read_turns(e.traces[0]).nodes) for e in episodes)
    return group, episodes


@pytest.mark.slow
@needs_verifiers_0_4
def test_dapo_math_refine_through_mains_rollouter(tokenizer_path, spawned_env_server):
    from verifiers_stepwise.hosts.torchtitan.main import StepwiseVerifiersRollouter, stepwise_env_rollouter

    config = stepwise_env_rollouter(
        recipe_rollouter(), taskset="stepwise-dapo-math", env_args={"max_turns": 4}, scale="none"
    )
    assert isinstance(config, StepwiseVerifiersRollouter.Config)
    check_cli_flags(SimpleNamespace(rollouter=config))  # every estimator option is a flag
    assert config.verifiers_env_server.environment.agent.harness.id == "stepwise-chat"  # the env's, not null
    plans = {0: ["Answer: 1", "Answer: 239"], 1: ["Answer: 239"], 2: ["no idea", "Answer: 2", "Answer: 3", "Answer: 4"]}
    group, episodes = run_group(config, tokenizer_path, plans, lambda task: task["answer"] == "239")

    env_rewards = [e.traces[0].info["turn_rewards"] for e in episodes]
    assert env_rewards == [[-1.0, 1.0], [1.0], [-1.0, -1.0, -1.0, -1.0]]
    # main's turns carry each verifiers turn's own reward (main alone: the last turn's trace reward)
    assert [[t.env_rewards[TURN_REWARD] for t in r.turns] for r in group.rollouts] == env_rewards
    assert [r.reward for r in group.rollouts] == [1.0, 1.0, -1.0]  # main's RewardFromVerifiers
    assert all((t.min_policy_version, t.max_policy_version) == (5, 6) for r in group.rollouts for t in r.turns)

    estimator = get_estimator("stepwise", scale="none")
    expected = [c.advantages for c in score_group(episodes, estimator).values()]
    assert [turn_advantages(r) for r in group.rollouts] == expected
    assert expected[0][0] < expected[1][0]  # the wrong first attempt gets less than right at once

    built = main_builder().build_from_group(rollout_group=group)
    assert len(built.training_samples) == 3
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, estimator)


@pytest.mark.slow
def test_refine_through_mains_rollouter_with_gamma(tokenizer_path, spawned_env_server):
    from verifiers_stepwise.hosts.torchtitan.main import stepwise_env_rollouter

    config = stepwise_env_rollouter(
        recipe_rollouter(), taskset="stepwise-refine", env_args={"max_turns": 3}, gamma=0.5, baseline="per_turn"
    )
    plans = {0: ["400", "391"], 1: ["300", "390", "391"], 2: ["391"]}
    refine_task = lambda task: task["prompt"].startswith("Compute 17 * 23")  # noqa: E731
    group, episodes = run_group(config, tokenizer_path, plans, refine_task)
    assert [len(e.traces[0].info["turn_scores"]) for e in episodes] == [2, 3, 1]
    estimator = get_estimator("stepwise", gamma=0.5, baseline="per_turn")
    expected = [c.advantages for c in score_group(episodes, estimator).values()]
    assert [turn_advantages(r) for r in group.rollouts] == expected
    built = main_builder().build_from_group(rollout_group=group)
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, estimator)


def mains_group(episodes, estimator="stepwise", **options):
    """Main's own conversion and advantage step on prebuilt episodes, as main's
    ``_run_single_rollout`` and ``run_group_rollouts`` call them (no env server, no model)."""
    from torchtitan.rl.examples.verifiers.generation_server import VerifiersGenerationMetadata
    from torchtitan.rl.examples.verifiers.rollouter import verifiers_rollout_logs
    from torchtitan.rl.rollout.types import Rollout, RolloutGroup

    from verifiers_stepwise.hosts.torchtitan import stepwise_advantage
    from verifiers_stepwise.hosts.torchtitan.main import stepwise_env_rollouter

    config = stepwise_env_rollouter(recipe_rollouter(), taskset="stepwise-refine")
    rollouter = replace(config, advantage=stepwise_advantage(estimator, **options)).build()
    metadata = VerifiersGenerationMetadata(min_policy_version=2, max_policy_version=2, metrics=[])
    rollouts = []
    for j, episode in enumerate(episodes):
        (trace,) = episode.traces
        turns = rollouter.trace_to_rollout_turns(trace=trace, generation_metadata=metadata, group_id=0, rollout_id=j)
        status = rollouter.rollout_status(verifiers_episode=episode, trace=trace)
        logs = verifiers_rollout_logs(episode, trace)
        rollouts.append(Rollout(group_id=0, rollout_id=j, turns=turns, status=status, logs=logs))
        rollouts[-1].reward = trace.reward  # what main's RewardFromVerifiers returns
    group = RolloutGroup(group_id=0, rollouts=rollouts)
    for rollout, advantage in zip(rollouts, rollouter._advantage_estimator(group), strict=True):
        rollout.advantage = advantage
    return group


@pytest.mark.parametrize("fork", [False, True])
def test_tool_call_turns_and_forks_through_mains_conversion(fork):
    """Main's own ``trace_to_rollout_turns`` on traces with tool calls (a verifiers turn with two
    sampled replies) and forks (a rewritten context): credited by the stepwise rollouter, each
    token carries ``score_group``'s advantage of its verifiers turn."""
    from tests.hosts.test_host_torchtitan_verifiers import tool_episode

    episodes = [tool_episode([0.0, 1.0], fork=fork), tool_episode([0.5]), tool_episode([0.0, 0.0, 1.0], fork=fork)]
    group = mains_group(episodes, gamma=0.9)
    rollouts = group.rollouts
    assert [len(r.turns) for r in rollouts] == [3, 2, 4]  # main: one turn per sampled span
    assert rollouts[0].turns[0].env_messages  # main's conversion keeps the tool result
    expected = [c.advantages for c in score_group(episodes, get_estimator("stepwise", gamma=0.9)).values()]
    assert [turn_advantages(r) for r in rollouts][0] == [expected[0][0], expected[0][0], expected[0][1]]
    builder = main_builder(drop_zero_std_reward_groups=False)
    samples = builder.build_from_group(rollout_group=group).training_samples
    assert len(samples) == (5 if fork else 3)
    assert_each_turns_advantage_on_its_tokens(group, episodes, samples, get_estimator("stepwise", gamma=0.9))


def test_mains_rollouter_lays_out_each_traces_one_credit_record():
    """The walk of a turn's reward through main's rollouter: score_group's record of each trace,
    anchor states included (gigpo is not grpo here), laid out on main's turns."""
    from tests.hosts.test_host_torchtitan_verifiers import tool_episode

    episodes = [tool_episode([0.0, 1.0]), tool_episode([0.5]), tool_episode([0.0, 0.0, 1.0])]
    for episode in episodes:
        trace = episode.traces[0]
        trace.info["turn_states"] = ["start", *(f"s{t}" for t in range(1, len(trace.info["turn_rewards"])))]
    group = mains_group(episodes, estimator="gigpo")
    records = list(score_group(episodes, "gigpo").values())
    assert all(r.estimator == "gigpo" for r in records)
    per_span = [turn_advantages(r) for r in group.rollouts]
    assert per_span[0] == [records[0].advantages[0], records[0].advantages[0], records[0].advantages[1]]
    assert [r.advantages for r in records] != get_estimator("grpo")([r.rewards for r in records])
    assert [[t.env_rewards["turn_index"] for t in r.turns] for r in group.rollouts][0] == [0.0, 0.0, 1.0]


def test_a_task_cap_is_applied_with_head_and_refused_at_config_time_with_take():
    """Main's task source caps a taskset with ``Taskset.head``, which verifiers 0.4.0 renamed
    ``take``: there main's own source fails at build, and the stepwise rollouter refuses the cap
    when configured, naming the ways round it. On verifiers 0.3.1 (main's pin) the cap works."""
    from torchtitan.rl.examples.verifiers.data import VerifiersTaskSource
    from verifiers.v1.taskset import Taskset

    from verifiers_stepwise.hosts.torchtitan.main import stepwise_env_rollouter

    base = recipe_rollouter(num_tasks=5)
    if hasattr(Taskset, "head"):
        capped = stepwise_env_rollouter(base, taskset="stepwise-refine")
        assert len(VerifiersTaskSource(capped.train_data.source)) == 5
        return
    with pytest.raises(AttributeError, match="head"):
        VerifiersTaskSource(base.train_data.source)
    with pytest.raises(ConfigError, match=r"train_data\.source\.num_tasks = 5: .*Taskset\.head.*verifiers 0\.3\.1"):
        stepwise_env_rollouter(base, taskset="stepwise-refine")
    limited = stepwise_env_rollouter(recipe_rollouter(), taskset="stepwise-dapo-math", env_args={"taskset.limit": 5})
    assert len(VerifiersTaskSource(limited.train_data.source)) == 5


_MAIN_LAYOUT = """
import importlib, sys
import tests.hosts.conftest  # torchtitan 0.3.0's RL package without its vLLM __init__
from tests.hosts.torchtitan_main import install
install(sys.argv[1])
# main's names resolve (stand-ins alias 0.3.0's modules): load them, then hide 0.3.0's layout
for name in ("examples.verifiers.rollouter", "components.training_sample_builder", "observability.metrics"):
    importlib.import_module(f"torchtitan.rl.{name}")
for name in [n for n in sys.modules if n.startswith("torchtitan.experiments")]:
    del sys.modules[name]

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "torchtitan.experiments" or name.startswith("torchtitan.experiments."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
import verifiers_stepwise.hosts.torchtitan.main as main
builder = main.StepwiseTrainingSampleBuilder.__mro__[2]  # after the class itself and StepwiseSamples
print(main.LAYOUT, builder.__module__, main.StepwiseVerifiersRollouter.__mro__[1].__module__)
try:
    import verifiers_stepwise.hosts.torchtitan.verifiers
except Exception as error:
    print(type(error).__name__, error)
"""


def test_the_adapter_imports_on_mains_layout():
    """With ``torchtitan.experiments`` gone and ``torchtitan.rl`` present (main's layout), the
    adapter and main's bridge import from ``torchtitan.rl``; the 0.3.0 rollouter names the bridge."""
    done = subprocess.run(
        [sys.executable, "-c", _MAIN_LAYOUT, str(FOLDER)], capture_output=True, text=True, timeout=240, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    layout, refusal = done.stdout.strip().splitlines()[-2:]
    assert layout.split() == [
        "torchtitan.rl",
        "torchtitan.experiments.rl.components.training_sample_builder",  # the stand-in aliases 0.3.0's
        "torchtitan.rl.examples.verifiers.rollouter",
    ]
    assert refusal.startswith("HostMismatch ") and "use verifiers_stepwise.hosts.torchtitan.main" in refusal


_ON_0_3_1 = """
import sys, verifiers
assert verifiers.__version__ == "0.3.1", verifiers.__version__
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[1], "-k", "not verifiers_0_3_1"]))
"""


@pytest.mark.slow
def test_mains_rollouter_on_verifiers_0_3_1(tmp_path):
    """This file's tests again, on verifiers 0.3.1 (torchtitan main's pin) from PyPI: a venv
    that holds verifiers 0.3.1 and what it needs at other versions, in front of this one's
    packages (a .pth file adding their site directory, editable installs included), so everything
    else is as here. stepwise-dapo-math skips there (its own metadata needs verifiers>=0.4);
    stepwise-refine runs."""
    import sysconfig
    import venv

    target = tmp_path / "venv-verifiers-0.3.1"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    Path(site, "zz_outer_environment.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    pip = subprocess.run(
        [python, "-m", "pip", "install", "-q", "verifiers==0.3.1"], capture_output=True, text=True, timeout=900
    )
    if pip.returncode != 0:
        pytest.skip(f"pip could not install verifiers 0.3.1 (no package index here?): {pip.stderr[-500:]}")
    done = subprocess.run([python, "-c", _ON_0_3_1, __file__], capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("6 passed, 1 skipped"), summary  # all but stepwise-dapo-math, which skips
