"""prime-rl adapter, on verifiers 0.4.0's real ``vf.Episode`` traces (built with token ids).

Where prime-rl imports (.ci/run's prime-rl environment: 559b447 with verifiers a60a606) these
run on its ``Algorithm`` base and compare with its ``GRPOAlgorithm``; the tests of prime-rl's
own machinery are in test_prime_rl_host.py. Without prime-rl (verifiers 0.4, which prime-rl
559b447 cannot run on), the algorithm runs on a stand-in for prime-rl's two base classes
(``tests/hosts/prime_rl_standin.py``) and GRPO is prime-rl's formula written out below.
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path

import pytest
import verifiers.v1 as vf
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.hosts.conftest import REAL_PRIME_RL
from tests.hosts.prime_rl_episodes import multi_turn, score, single_turn
from verifiers_stepwise import get_estimator, read_credit
from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.hosts.prime_rl import StepwiseAlgoConfig, StepwiseAlgorithm, main
from verifiers_stepwise.testing.traces import TraceBuilder


def algorithm(estimator: str = "stepwise", missing: str = "final_turn", **options) -> StepwiseAlgorithm:
    config = StepwiseAlgoConfig(estimator=estimator, options=options, missing=missing)
    return StepwiseAlgorithm(config, policy_pool=None)


STEPWISE_NONE = algorithm(scale="none")
ALGORITHMS: dict = {}  # one algorithm per option set: building looks up the entry points


def node_advantages(episodes: list[vf.Episode]) -> list[list[list[float] | None]]:
    return [[node.advantages for node in e.traces[0].nodes] for e in episodes]


def prime_rl_grpo(episodes: list[vf.Episode]) -> list[vf.Episode]:
    """prime-rl's own GRPO (``GRPOAlgorithm``) where installed, else its formula: rewards
    minus their mean in float32, broadcast to every sampled token (grpo.py, routing.py)."""
    if REAL_PRIME_RL:
        from prime_rl.configs.algorithm import GRPOAlgoConfig
        from prime_rl.orchestrator.algo import GRPOAlgorithm

        asyncio.run(GRPOAlgorithm(GRPOAlgoConfig(), None).finalize_group(episodes))
        return episodes
    import torch

    rewards = torch.tensor([e.traces[0].reward for e in episodes], dtype=torch.float32)
    for episode, advantage in zip(episodes, (rewards - rewards.mean()).tolist()):
        for node in episode.traces[0].nodes:
            if any(node.mask):
                node.advantages = [advantage] * sum(node.mask)
    return episodes


# -- one turn per rollout: prime-rl's GRPO --------------------------------------------------------

dyadic = st.integers(-32, 32).map(lambda k: k / 8)


@settings(max_examples=25, deadline=None)
@given(
    rewards=st.integers(0, 4).flatmap(lambda k: st.lists(dyadic, min_size=2**k, max_size=2**k)),
    tokens=st.integers(1, 5),
)
def test_single_turn_reproduces_prime_rls_grpo(rewards, tokens):
    # Group sizes 1..16 and rewards in eighths: prime-rl's float32 mean is exact, so the
    # comparison is bit for bit.
    theirs = prime_rl_grpo([single_turn(r, tokens) for r in rewards])
    ours = score(STEPWISE_NONE, [single_turn(r, tokens) for r in rewards])
    assert node_advantages(ours) == node_advantages(theirs)


@settings(max_examples=20, deadline=None)
@given(rewards=st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=9))
def test_single_turn_matches_prime_rls_grpo_within_float32(rewards):
    theirs = node_advantages(prime_rl_grpo([single_turn(r) for r in rewards]))
    ours = node_advantages(score(STEPWISE_NONE, [single_turn(r) for r in rewards]))
    for mine, reference in zip(ours, theirs):
        sampled = [(a, b) for a, b in zip(mine, reference) if b is not None]
        assert [a for a, _ in sampled] == [pytest.approx(b, rel=1e-5, abs=1e-4) for _, b in sampled]


# -- several turns: each turn's tokens carry that turn's advantage ----------------------------------


@settings(max_examples=25, deadline=None)
@given(
    groups=st.lists(st.lists(dyadic, min_size=1, max_size=4), min_size=1, max_size=5),
    options=st.sampled_from([{}, {"gamma": 0.9, "baseline": "per_turn"}, {"aggregation": "max", "scale": "none"}]),
)
def test_each_turns_tokens_carry_that_turns_advantage(groups, options):
    algo = ALGORITHMS.setdefault(tuple(options.items()), algorithm(**options))
    episodes = score(algo, [multi_turn(rewards, tool_turn=1) for rewards in groups])
    expected = algo.estimator(groups)
    for episode, values in zip(episodes, expected):
        trace = episode.traces[0]
        for t, nodes in enumerate(trace.info["turn_nodes"]):
            for i in nodes:
                assert trace.nodes[i].advantages == [values[t]] * sum(trace.nodes[i].mask)
        assert all(node.advantages is None for node in trace.nodes if not node.sampled)


def test_trace_without_turn_rewards_scores_its_reward_on_the_last_turn():
    b = TraceBuilder()
    first = b.sample("draft")
    b.add(vf.UserMessage(content="improve it"))
    last = b.sample("final")
    plain = b.episode(reward=1.0)  # no turn_rewards: two sampled nodes, two turns
    other = multi_turn([0.0, 0.5])
    score(algorithm(gamma=1.0), [plain, other])
    expected = get_estimator("stepwise", gamma=1.0)([[0.0, 1.0], [0.0, 0.5]])
    assert plain.traces[0].nodes[first].advantages[0] == expected[0][0]
    assert plain.traces[0].nodes[last].advantages[0] == expected[0][1]

    with pytest.raises(TraceError, match="no turn_rewards"):
        score(algorithm(missing="error"), [single_turn(1.0), single_turn(0.0)])


def test_zero_advantage_turns_carry_exact_zeros():
    # gamma 0, per-turn baseline: turn 0 is equal across the group, turn 1 is not.
    episodes = score(algorithm(gamma=0.0, baseline="per_turn"), [multi_turn([0.5, 1.0]), multi_turn([0.5, 0.0])])
    for episode, sign in zip(episodes, (1, -1)):
        turn0, turn1 = (episode.traces[0].nodes[i] for (i,) in episode.traces[0].info["turn_nodes"])
        assert set(turn0.advantages) == {0.0}
        assert all(a * sign > 0 for a in turn1.advantages)


def test_config_fields_are_validated_by_name():
    with pytest.raises(ValidationError, match="no advantage estimator named 'nope'"):
        StepwiseAlgoConfig(estimator="nope")
    with pytest.raises(ValidationError, match="field 'gamma'"):
        StepwiseAlgoConfig(estimator="stepwise", options={"gamma": 1.5})
    assert StepwiseAlgoConfig(options={"gamma": 0.5}).build_estimator().config.gamma == 0.5  # stepwise's
    assert StepwiseAlgoConfig().build_estimator() is None  # the kind decides
    with pytest.raises(ValidationError, match="GRPO config: field 'gamma': unknown field"):
        StepwiseAlgoConfig(estimator="grpo", options={"gamma": 0.5})
    with pytest.raises(ValidationError, match="missing"):
        StepwiseAlgoConfig(missing="skip")
    assert StepwiseAlgoConfig().type == "stepwise"


def test_a_third_party_estimator_is_picked_by_name(third_party_estimator):
    algo = algorithm(estimator="last-turn-only", bonus=0.5)
    assert isinstance(algo.estimator.inner, third_party_estimator)  # at prime-rl's float32 resolution
    episodes = score(algo, [multi_turn([0.0, 1.0]), multi_turn([0.5])])
    assert [read_credit(e.traces[0]).advantages for e in episodes] == [[0.0, 0.75], [0.25]]


def test_entry_point_wrapper_names_what_it_runs():
    with pytest.raises(SystemExit, match=r"usage: python -m verifiers_stepwise\.hosts\.prime_rl {rl,orchestrator}"):
        main(["trainer"])


def test_no_estimator_named_credits_by_the_kind_the_envs_traces_declare():
    """``estimator`` unset: each group gets its kind's default (refinement: grpo), or stepwise
    for traces that declare none, at prime-rl's float32 resolution as a named one is."""
    by_kind = StepwiseAlgorithm(StepwiseAlgoConfig(), policy_pool=None)
    for kind, name in (("refinement", "grpo"), (None, "stepwise")):
        group = [multi_turn([-1.0, 1.0]), multi_turn([1.0])]
        for episode in group:
            if kind is not None:
                episode.traces[0].info["credit_kind"] = kind
        named = score(algorithm(name), [multi_turn([-1.0, 1.0]), multi_turn([1.0])])
        scored = score(by_kind, group)
        assert [read_credit(e.traces[0]).estimator for e in scored] == [name, name]
        assert node_advantages(scored) == node_advantages(named)


def test_grpo_fields_a_run_wide_check_reads():
    config = StepwiseAlgoConfig()
    assert (config.length_weighted_baseline, config.loss_aggregation) == (False, "token")
    with pytest.raises(ValidationError, match="loss_aggregation"):
        StepwiseAlgoConfig(loss_aggregation="prompt")
    with pytest.raises(ValidationError, match="length_weighted_baseline"):
        StepwiseAlgoConfig(length_weighted_baseline=True)


def test_every_test_docs_prime_rl_names_exists():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = set(re.findall(r"\b(test_\w+)`", (root / "docs" / "prime-rl.md").read_text()))
    defined = {m for p in (root / "tests").rglob("test_*.py") for m in re.findall(r"def (test_\w+)", p.read_text())}
    assert named and named <= defined, named - defined


@pytest.mark.slow
def test_required_prime_rl_that_does_not_import_fails_the_run(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "STEPWISE_PRIME_RL": str(tmp_path), "STEPWISE_REQUIRE_PRIME_RL": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--co",
        "tests/hosts/test_prime_rl_host.py",
    ]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert f"STEPWISE_PRIME_RL={tmp_path} is not a prime-rl checkout" in run.stdout + run.stderr
    env.pop("STEPWISE_REQUIRE_PRIME_RL")  # without it: a skip that names the variable to set
    run = subprocess.run([*command[:-2], "-rs", command[-1]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "SKIPPED" in run.stdout and "STEPWISE_PRIME_RL=" in run.stdout


def test_gigpo_gets_the_recorded_anchor_states():
    """score_group hands ``turn_states`` to the estimator, through the float32-resolution wrapper."""
    rewards, states = [[0.0, 1.0], [0.0, 0.0, 1.0]], [["s0", "s1"], ["s0", "s0", "s1"]]
    episodes = [multi_turn(r) for r in rewards]
    for episode, row in zip(episodes, states):
        episode.traces[0].info["turn_states"] = row
    score(algorithm("gigpo", scale="none"), episodes)
    got = [read_credit(e.traces[0]).advantages for e in episodes]
    assert got == get_estimator("gigpo", scale="none")(rewards, states)
    assert got[1][0] < 0 < got[0][0]  # grpo would give 0: both rollouts succeed


def pr_3282_layout(scores: list[float | None]) -> vf.Episode:
    """A trace as an env written for prime-rl PR #3282 leaves it: ``turn_rewards`` holds one
    state score per sampled turn (None: unscored) and there is no ``turn_nodes``."""
    episode = multi_turn([0.0] * len(scores))
    info = episode.traces[0].info
    del info["turn_nodes"]
    info["turn_rewards"] = scores
    return episode


def test_pr_3282s_layout_needs_an_explicit_reading():
    unmarked = pr_3282_layout([0.5, 1.0])
    with pytest.raises(TraceError, match=f'trace {unmarked.traces[0].id}: .*reading = "scores"'):
        score(algorithm(), [unmarked, multi_turn([0.0, 1.0])])
    # This package's traces record turn_nodes and are read as rewards without the setting.
    (ours,) = score(algorithm(), [multi_turn([0.5, 1.0])])
    assert read_credit(ours.traces[0]).reading == "rewards"

    def scored(reading: str, scores: list[float | None]) -> tuple[str | None, list[float]]:
        config = StepwiseAlgoConfig(reading=reading)
        (episode,) = score(StepwiseAlgorithm(config, policy_pool=None), [pr_3282_layout(scores)])
        credit = read_credit(episode.traces[0])
        return credit.reading, credit.rewards

    assert scored("scores", [0.5, 1.0]) == ("scores", [0.5, 0.5])  # by differences, from 0
    assert scored("scores", [None, 1.0]) == ("scores", [0.0, 1.0])  # None: unscored
    assert scored("rewards", [0.5, 1.0]) == ("rewards", [0.5, 1.0])
    with pytest.raises(ValidationError, match="reading"):
        StepwiseAlgoConfig(reading="potentials")

    # docs/prime-rl.md's setting for moving from #3282 reads the same trace as scores.
    docs = (Path(__file__).resolve().parents[2] / "docs" / "prime-rl.md").read_text()
    moving = docs[docs.index("### Moving from prime-rl PR #3282") :]
    (block,) = re.findall(r"```toml\n(.*?)```", moving[: moving.index("\n### ")], re.S)
    config = StepwiseAlgoConfig.model_validate(tomllib.loads(block)["orchestrator"]["algo"])
    assert (config.estimator, config.reading, config.options) == ("turn_credit", "scores", {"gamma": 0.9, "beta": 1.0})
    (episode,) = score(StepwiseAlgorithm(config, policy_pool=None), [pr_3282_layout([None, 1.0])])
    assert read_credit(episode.traces[0]).rewards == [0.0, 1.0]
