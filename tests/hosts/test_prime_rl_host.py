"""The prime-rl adapter through prime-rl's own code (prime-rl 559b447 + its verifiers a60a606).

Every test here calls prime-rl itself: its config loader and ``rl`` launcher on the TOML of
docs/prime-rl.md, ``build_algorithm``, ``GRPOAlgorithm``, the env server and the orchestrator's
env client, ``trace_to_samples``, ``_prune_zero_advantages`` and ``TrainSink``. They skip
without prime-rl (see tests/hosts/conftest.py: ``STEPWISE_PRIME_RL``), and fail instead under
``STEPWISE_REQUIRE_PRIME_RL=1``, as in .ci/run's prime-rl environment.

prime-rl's train client needs vLLM and a tokenizer, so episodes served over the wire carry no
token ids (eval client); the token-level tests use verifiers traces built with token ids
through verifiers' own commit path (``verifiers_stepwise.testing.traces.TraceBuilder``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest
import verifiers.v1 as vf
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.hosts.conftest import needs_prime_rl
from tests.hosts.prime_rl_episodes import multi_turn, score, single_turn
from verifiers_stepwise import get_estimator, read_credit
from verifiers_stepwise.envs.refine import RefineConfig
from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.hosts.prime_rl import MODULE, StepwiseAlgoConfig, StepwiseAlgorithm, register
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.turns import append_turn, read_turns

pytestmark = needs_prime_rl

ROOT = Path(__file__).resolve().parents[2]
KEY_VAR = "STEPWISE_TEST_API_KEY"


def doc_tomls() -> list[str]:
    """The TOML blocks of docs/prime-rl.md: the rl.toml, then the per-source override."""
    return re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "prime-rl.md").read_text(), re.S)


def documented_rl(**orchestrator) -> dict:
    """docs/prime-rl.md's rl.toml as a dict, ``orchestrator`` keys set on top."""
    rl = tomllib.loads(doc_tomls()[0])
    rl["orchestrator"].update(orchestrator)
    return rl


def loaded(tmp_path: Path, orchestrator: dict):
    """``orchestrator`` through prime-rl's config loader, as the orchestrator process reads it."""
    import tomli_w
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.utils.config import cli

    path = tmp_path / "orchestrator.toml"
    path.write_text(tomli_w.dumps(orchestrator))
    return cli(OrchestratorConfig, args=["@", str(path)])


def prime_rl_env() -> dict[str, str]:
    """A subprocess environment that imports the same prime-rl sources as this process."""
    roots = [p for p in sys.path if Path(p, "prime_rl").is_dir()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")]), KEY_VAR: "sk-x"}


def dry_run(tmp_path: Path, rl: dict) -> Path:
    """``python -m verifiers_stepwise.hosts.prime_rl rl @ rl.toml --dry-run``, exactly as
    documented, in a subprocess; returns the configs directory the launcher wrote."""
    import tomli_w

    rl = {"output_dir": str(tmp_path / "out"), **rl}
    (tmp_path / "rl.toml").write_text(tomli_w.dumps(rl))
    run = subprocess.run(
        [sys.executable, "-m", MODULE, "rl", "@", str(tmp_path / "rl.toml"), "--dry-run"],
        env=prime_rl_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (written,) = (tmp_path / "out").rglob("orchestrator.json")
    return written.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def _built(config: str) -> StepwiseAlgorithm:
    from prime_rl.orchestrator.algo import build_algorithm

    register()
    algo = build_algorithm(StepwiseAlgoConfig.model_validate_json(config), None)
    assert isinstance(algo, StepwiseAlgorithm)
    return algo


def built(**config) -> StepwiseAlgorithm:
    """The algorithm prime-rl's ``build_algorithm`` builds from a stepwise config (one per config:
    building looks up the estimator entry points)."""
    return _built(json.dumps(config, sort_keys=True))


def expected_token_advantages(trace: vf.Trace, branch) -> list[float]:
    """Per token of ``branch``: its turn's advantage on sampled tokens, 0 elsewhere."""
    turn_of = {i: t for t, nodes in enumerate(trace.info["turn_nodes"]) for i in nodes}
    values = read_credit(trace).advantages
    index = {id(node): i for i, node in enumerate(trace.nodes)}
    out: list[float] = []
    for node in branch.nodes:
        i = index[id(node)]
        out += (
            [values[turn_of[i]] if sampled else 0.0 for sampled in node.mask]
            if node.sampled
            else [0.0] * len(node.token_ids)
        )
    return out


# -- prime-rl's config loader, build_algorithm and launcher -----------------------------------------


def test_prime_rls_loader_reads_the_documented_toml(tmp_path):
    from prime_rl.configs import algorithm, orchestrator
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.algo import build_algorithm

    register()
    register()  # idempotent
    for module in (algorithm, orchestrator):
        assert get_args(get_args(module.AlgoConfig)[0]).count(StepwiseAlgoConfig) == 1
    config = loaded(tmp_path, documented_rl()["orchestrator"])
    assert isinstance(config.algo, StepwiseAlgoConfig)
    assert config.algo.options == {"gamma": 0.4, "scale": "none"}
    (source,) = config.train.source
    assert source.algo == config.algo  # inherited
    assert config.train.filter_zero_advantages  # prime-rl's default, documented
    assert isinstance(build_algorithm(config.algo, None), StepwiseAlgorithm)

    # The documented per-source override.
    override = tomllib.loads(doc_tomls()[1])["orchestrator"]["train"]["source"]["algo"]
    rl = documented_rl()
    rl["orchestrator"]["train"]["source"][0]["algo"] = override
    (source,) = loaded(tmp_path, rl["orchestrator"]).train.source
    assert source.algo.options == {"gamma": 0.9, "baseline": "per_turn"}
    assert build_algorithm(source.algo, None).estimator.config.gamma == 0.9

    with pytest.raises(ValidationError, match="'stepwise'"):
        OrchestratorConfig.model_validate({"algo": {"type": "stepwize"}})


def test_rl_launcher_dry_run_with_the_documented_toml(tmp_path):
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.utils.config import cli

    configs = dry_run(tmp_path, documented_rl())
    algo = json.loads((configs / "orchestrator.json").read_text())["algo"]
    assert algo["type"] == "stepwise" and algo["options"] == {"gamma": 0.4, "scale": "none"}
    env_server = json.loads((configs / "envs" / "train" / "refine.json").read_text())
    assert env_server["env"]["taskset"]["id"] == "stepwise-refine"
    register()
    assert isinstance(cli(OrchestratorConfig, args=["@", str(configs / "orchestrator.json")]).algo, StepwiseAlgoConfig)


@pytest.mark.slow
def test_orchestrator_starts_as_the_launcher_starts_it(tmp_path, monkeypatch):
    from verifiers_stepwise.hosts import prime_rl

    configs = dry_run(tmp_path, documented_rl())
    # The `rl` launcher runs `orchestrator @ <configs>/orchestrator.json` from PATH, where
    # `python -m verifiers_stepwise.hosts.prime_rl rl` put this shim.
    monkeypatch.setenv("PATH", os.environ["PATH"])
    prime_rl._shim_orchestrator()
    env = {**prime_rl_env(), "PATH": os.environ["PATH"]}
    command = ["orchestrator", "@", str(configs / "orchestrator.json")]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    # It registered `stepwise` and validated the config; on a CPU machine it then stops at
    # prime-rl's GPU stack (weight transfer), which is as far as a run gets here.
    assert run.returncode != 0
    assert "ConfigFileError" not in output and "validation error" not in output, output[-3000:]
    # The import that follows `cli(OrchestratorConfig)` in prime_rl.entrypoints.orchestrator.main:
    assert "import run_orchestrator" in output and "No module named 'modelexpress'" in output, output[-3000:]
    # prime-rl's plain orchestrator (what SLURM / k8s launches run) rejects the same config.
    plain = [sys.executable, "-m", "prime_rl.entrypoints.orchestrator", *command[1:]]
    rejected = subprocess.run(plain, env=env, capture_output=True, text=True, timeout=300)
    assert rejected.returncode != 0 and "'stepwise'" in rejected.stdout + rejected.stderr


# -- prime-rl's env server, over the wire --------------------------------------------------------------


@pytest.mark.slow
def test_env_server_serves_refine_episodes_and_the_first_group_is_scored(tmp_path):
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.algo import build_algorithm
    from prime_rl.orchestrator.envs import Env
    from prime_rl.utils.config import cli

    rl = documented_rl(env_server_base_port=free_port(), group_size=3, batch_size=3)
    rl["orchestrator"]["train"]["source"][0]["serve"] = {"pool": {"type": "static", "num_workers": 1}}
    configs = dry_run(tmp_path, rl)
    # As the launcher starts it: `env-server @ <configs>/envs/train/refine.json` (prime-rl's
    # console script for prime_rl.entrypoints.env_server:main, which is run here directly).
    server = subprocess.Popen(
        [sys.executable, "-m", "prime_rl.entrypoints.env_server", "@", str(configs / "envs" / "train" / "refine.json")],
        env=prime_rl_env(),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "env-server.log", "w"),
    )
    register()
    config = cli(OrchestratorConfig, args=["@", str(configs / "orchestrator.json")])
    (source,) = config.train.source
    script = scripted({"17 * 23": PerRollout(["400", "391"], ["300", "390", "391"], ["391"])})

    async def first_group() -> list[vf.Episode]:
        env = Env(source, config.env_addresses[("train", source.resolved_name)])  # the orchestrator's client
        await asyncio.wait_for(env.start(), 120)  # server health, then the taskset, client-side
        task = next(env.tasks)
        run = dict(
            client=vf.EvalClientConfig(base_url=model.base_url, api_key_var=KEY_VAR),
            model_name="local-model",
            cache_salt=None,
            task_data=task.data.model_dump(mode="json"),
        )
        group = [await asyncio.wait_for(env.run(**run), 120) for _ in range(source.group_size)]
        await env.env_client.close()
        return group

    try:
        with ModelServer(script) as model:
            group = asyncio.run(first_group())
    finally:
        server.terminate()
        server.wait(30)
    assert all(e.ok for e in group), (tmp_path / "env-server.log").read_text()[-3000:]
    scores = sorted((e.traces[0].info["turn_scores"] for e in group), key=len)  # refine records scores
    # solved on the last turn; each turn before it asked for another and cost the env's turn cost
    cost = RefineConfig().turn_cost
    assert [len(r) for r in scores] == [1, 2, 3]
    assert all(r[-1] == pytest.approx(1.0 - cost * (len(r) - 1)) for r in scores)
    algo = build_algorithm(source.algo, None)
    asyncio.run(algo.finalize_group(group))
    credit = [read_credit(e.traces[0]) for e in group]
    expected = get_estimator("stepwise", gamma=0.4, scale="none")([c.rewards for c in credit])
    assert [c.advantages for c in credit] == expected
    assert [c.rewards for c in credit] == [read_turns(e.traces[0]).rewards for e in group]
    assert all(c.reading == "scores" and c.estimator == "stepwise" for c in credit)


# -- prime-rl's trace compiler, zero-advantage filter and training sink ------------------------------


@settings(max_examples=15, deadline=None)
@given(
    groups=st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=4), min_size=2, max_size=4)
)
def test_trace_to_samples_carries_each_turns_advantage(groups):
    from prime_rl.orchestrator.trajectories import trace_to_samples

    episodes = score(built(options={"gamma": 0.9}), [multi_turn(r, tool_turn=1) for r in groups])
    for episode in episodes:
        trace = episode.traces[0]
        (sample,) = trace_to_samples(trace, env_name="refine")
        (branch,) = trace.branches
        assert sample.advantages == expected_token_advantages(trace, branch)
        assert all(a == 0.0 for a, m in zip(sample.advantages, sample.mask) if not m)  # prompt, env, tool


def test_branching_traces_through_trace_to_samples():
    from prime_rl.orchestrator.trajectories import trace_to_samples

    def forked(rewards: list[float]) -> vf.Episode:
        # Turn 1's context rewrites turn 0's reply (as exclude_think does): the graph forks.
        b = TraceBuilder()
        first = b.sample("draft <think>long</think> 40", n_tokens=4)
        append_turn(b.trace, rewards[0], [first])
        b.context[-1] = vf.AssistantMessage(content="draft 40")
        b.add(vf.UserMessage(content="try again"))
        append_turn(b.trace, rewards[1], [b.sample("41", n_tokens=2)])
        return b.episode(reward=rewards[-1])

    episodes = score(built(options={"gamma": 0.5}), [forked([0.0, 1.0]), forked([0.5, 0.0])])
    for episode in episodes:
        trace = episode.traces[0]
        samples = trace_to_samples(trace, env_name="refine")
        assert len(samples) == len(trace.branches) == 2
        trained: dict[int, list[float]] = {}
        for sample, branch in zip(samples, trace.branches):
            expected = expected_token_advantages(trace, branch)
            assert sample.advantages == expected
            at = 0
            for node in branch.nodes:
                span = range(at, at + len(node.token_ids))
                at += len(node.token_ids)
                if any(sample.mask[k] for k in span):
                    assert id(node) not in trained  # a shared node trains in one branch only
                    trained[id(node)] = [sample.advantages[k] for k in span if sample.mask[k]]
        values = read_credit(trace).advantages
        for t, (i,) in enumerate(trace.info["turn_nodes"]):
            assert trained[id(trace.nodes[i])] == [values[t]] * sum(trace.nodes[i].mask)


def test_training_sink_drops_only_zero_advantage_turns(tmp_path):
    from prime_rl.orchestrator.train_sink import TrainSink
    from prime_rl.orchestrator.types import Progress

    config = loaded(tmp_path, documented_rl()["orchestrator"])
    assert config.train.filter_zero_advantages
    algo = built(options={"gamma": 0.0, "baseline": "per_turn"})  # turn 0 equal across the group
    source = SimpleNamespace(config=SimpleNamespace(group_size=2), algorithm=algo, sampling_args={"temperature": 1.0})
    sink = TrainSink(
        config,
        tokenizer=None,
        train_envs=SimpleNamespace(get=lambda name: source),
        mm_token_type_ids_mapping=None,
        progress=Progress(),
        batch_size=2,
        token_batch_size=None,
    )

    def arrived(episode: vf.Episode, group: str) -> vf.Episode:
        return episode.model_copy(update={"env": vf.EnvInfo(name="refine"), "group": vf.GroupInfo(id=group)})

    async def batches(groups: dict[str, list[vf.Episode]]) -> list:
        return [await sink.add(arrived(e, g)) for g, episodes in groups.items() for e in episodes]

    # All four traces share turn 0's reward, so turn 0 carries 0 everywhere.
    groups = {
        "flat": [multi_turn([0.5, 1.0]), multi_turn([0.5, 1.0])],
        "mixed": [multi_turn([0.5, 1.0]), multi_turn([0.5, 0.0])],
    }
    *_, batch = asyncio.run(batches(groups))
    assert batch is not None and len(batch.samples) == 2  # the flat group shipped nothing
    for sample in batch.samples:
        trained = [w != 0.0 for w, m in zip(sample.rl_weights, sample.mask) if m]
        advantages = [a for a, m in zip(sample.advantages, sample.mask) if m]
        assert trained == [a != 0.0 for a in advantages]
        assert trained == [False] * 2 + [True] * 3  # turn 0 (2 tokens) out, turn 1 (3 tokens) in


# -- GRPO equivalence, the reading applied --------------------------------------------

grpo_rewards = st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]), min_size=2, max_size=8)


@settings(max_examples=40, deadline=None)
@given(rewards=grpo_rewards)
def test_single_turn_equals_prime_rls_grpo_with_exact_zeros(rewards):
    from prime_rl.configs.algorithm import GRPOAlgoConfig
    from prime_rl.orchestrator.algo import build_algorithm

    grpo = score(build_algorithm(GRPOAlgoConfig(), None), [single_turn(r) for r in rewards])
    ours = score(built(options={"scale": "none"}), [single_turn(r) for r in rewards])
    for theirs, mine in zip(grpo, ours):
        (a,) = {*theirs.traces[0].nodes[-1].advantages}
        (b,) = {*mine.traces[0].nodes[-1].advantages}
        assert b == pytest.approx(a, abs=1e-6)
        if a == 0.0:
            assert b == 0.0  # GRPO's zeros stay zeros; its float32 noise on equal rewards (6e-8 for
            # [0.9, 0.9, 0.9]) is 0 here, as the exact difference is


def test_the_middle_of_a_tenths_group_is_exactly_zero_as_in_grpo():
    from prime_rl.orchestrator.train_sink import _prune_zero_advantages
    from prime_rl.orchestrator.trajectories import trace_to_samples

    episodes = score(built(options={"scale": "none"}), [single_turn(r) for r in (0.1, 0.2, 0.3)])
    kept = [any(_prune_zero_advantages(s) for s in trace_to_samples(e.traces[0])) for e in episodes]
    assert kept == [True, False, True]
    assert episodes[1].traces[0].nodes[-1].advantages == [0.0] * 3


def test_the_reading_applied_is_recorded_and_none_fails():
    by_scores = multi_turn([0.0, 1.0])  # as stepwise-refine records its turns
    by_scores.traces[0].info["turn_scores"] = by_scores.traces[0].info.pop("turn_rewards")
    scored = score(built(), [multi_turn([0.0, 1.0]), single_turn(1.0), by_scores])
    readings = [read_credit(e.traces[0]).reading for e in scored]
    assert readings == ["rewards", "final_turn", "scores"]
    # An env written for prime-rl PR #3282's reading: per-turn scores, None for an unscored turn.
    pr_3282 = multi_turn([0.0, 1.0])
    pr_3282.traces[0].info["turn_rewards"] = [None, 1.0]
    with pytest.raises(TraceError, match=pr_3282.traces[0].id):
        score(built(), [pr_3282, multi_turn([0.0, 0.5])])
