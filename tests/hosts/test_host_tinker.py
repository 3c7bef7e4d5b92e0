"""tinker-cookbook adapter, against tinker-cookbook 0.6.1 and tinker 0.38.0's real types.

What is real: ``Transition``/``Trajectory``/``TrajectoryGroup``, ``tinker.Datum`` and
``ModelInput``, tinker-cookbook's own ``compute_advantages``/``assemble_training_data``/
``trajectory_to_data``, the filters in ``rl.train`` and ``train.Config`` parsed by chz. What is
not: ``train.main`` (it needs the Tinker service) is replaced in the CLI test by a coroutine
that records which functions the training loop would call.
"""

from __future__ import annotations

import functools

import chz
import numpy as np
import pytest
import tinker
from hypothesis import given, settings
from hypothesis import strategies as st
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl import data_processing
from tinker_cookbook.rl import train as tinker_train
from tinker_cookbook.rl.types import PARSE_ERROR_MASKED_METRIC_KEY, Trajectory, TrajectoryGroup, Transition

from verifiers_stepwise import ConfigError, get_estimator
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.hosts import tinker as adapter

ACTION = 1_000_000  # action token k of transition t: ACTION + 1000 * t + k


def transition(t: int, ob: list[int], actions: int, reward: float, masked: bool = False) -> Transition:
    return Transition(
        ob=tinker.ModelInput.from_ints(ob),
        ac=TokensWithLogprobs(
            tokens=[ACTION + 1000 * t + k for k in range(actions)],
            maybe_logprobs=[-0.5] * actions,
            sequence_id=f"seq-{t}",
        ),
        reward=reward,
        episode_done=False,
        metrics={PARSE_ERROR_MASKED_METRIC_KEY: 1.0} if masked else {},
    )


def trajectory(steps: list[tuple[float, int, bool, bool]]) -> Trajectory:
    """steps: (reward, action tokens, observation rewrites history, parse-error masked)."""
    transitions, history = [], []
    for t, (reward, actions, breaks, masked) in enumerate(steps):
        ob = [5, 6, 7 + t] if t == 0 or breaks else history + [300 + t]
        transitions.append(transition(t, ob, actions, reward, masked))
        history = ob + transitions[-1].ac.tokens
    return Trajectory(transitions=transitions, final_ob=tinker.ModelInput.from_ints([]))


def group(trajectories: list[Trajectory], final_rewards: list[float]) -> TrajectoryGroup:
    return TrajectoryGroup(
        trajectories_G=trajectories, final_rewards_G=final_rewards, metrics_G=[{} for _ in trajectories]
    )


def datum_fields(datum: tinker.Datum):
    inputs = {key: value.to_numpy().tolist() for key, value in datum.loss_fn_inputs.items()}
    return datum.model_input.to_ints(), inputs, datum.model_input_spans, datum.loss_fn_input_spans


@functools.cache
def estimator(name: str = "stepwise", **options):
    return get_estimator(name, **options)


# -- one transition per trajectory: tinker's own datums ----------------------------------------

dyadic = st.integers(-32, 32).map(lambda k: k / 8)


@settings(max_examples=50, deadline=None)
@given(
    groups=st.lists(
        st.integers(0, 3).flatmap(
            lambda k: st.lists(st.tuples(dyadic, dyadic, st.integers(1, 4)), min_size=2**k, max_size=2**k)
        ),
        min_size=1,
        max_size=3,
    ),
    name=st.sampled_from(["stepwise", "grpo"]),
)
def test_single_turn_datums_equal_tinkers(groups, name):
    # Group sizes 1, 2, 4, 8 and rewards in eighths: tinker's float32 mean is exact, so the
    # comparison can be bit for bit (other sizes differ from tinker's float32 by rounding).
    batch = [
        group([trajectory([(r, n, False, False)]) for r, _, n in spec], [f for _, f, _ in spec]) for spec in groups
    ]
    theirs = data_processing.assemble_training_data(batch, data_processing.compute_advantages(batch))
    advantages = adapter.compute_advantages(batch, estimator=estimator(name, scale="none"))
    ours = adapter.assemble_training_data(batch, advantages)
    assert ours[1] == theirs[1]  # metadata
    assert [datum_fields(d) for d in ours[0]] == [datum_fields(d) for d in theirs[0]]


def test_switched_training_module_builds_tinkers_datums():
    batch = [group([trajectory([(r, 2, False, False)]) for r in (0.0, 1.0, 1.0, 0.5)], [0.0, 0.0, 0.5, 0.0])]
    theirs = tinker_train.assemble_training_data(batch, tinker_train.compute_advantages(batch))
    with adapter.use_estimator("stepwise", scale="none"):
        ours = tinker_train.assemble_training_data(batch, tinker_train.compute_advantages(batch))
    assert [datum_fields(d) for d in ours[0]] == [datum_fields(d) for d in theirs[0]]
    assert any(any(d.loss_fn_inputs["advantages"].to_numpy()) for d in ours[0])


@settings(max_examples=30, deadline=None)
@given(rewards=st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=8))
def test_single_turn_advantages_match_tinker_within_float32(rewards):
    # tinker centres in float32, the core in float64; both ship float32.
    batch = [group([trajectory([(r, 1, False, False)]) for r in rewards], [0.0] * len(rewards))]
    (theirs,) = data_processing.compute_advantages(batch)
    (ours,) = adapter.compute_advantages(batch, estimator=estimator(scale="none"))
    assert [a for (a,) in ours] == pytest.approx(theirs.tolist(), rel=1e-5, abs=1e-4)


# -- several transitions: each action token carries its transition's advantage --------------------

step = st.tuples(dyadic, st.integers(0, 3), st.booleans(), st.booleans())


@settings(max_examples=60, deadline=None)
@given(
    spec=st.lists(st.tuples(st.lists(step, min_size=1, max_size=5), dyadic), min_size=1, max_size=5),
    options=st.sampled_from([{}, {"gamma": 0.9, "baseline": "per_turn"}, {"aggregation": "max"}]),
)
def test_every_action_token_carries_its_transitions_advantage(spec, options):
    batch = [group([trajectory(steps) for steps, _ in spec], [final for _, final in spec])]
    advantages = adapter.compute_advantages(batch, estimator=estimator(**options))
    data, metadata = adapter.assemble_training_data(batch, advantages)
    (expected,) = advantages

    seen = {}
    for datum, where in zip(data, metadata):
        j = where["traj_idx"]
        targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
        values = datum.loss_fn_inputs["advantages"].to_numpy()
        mask = datum.loss_fn_inputs["mask"].to_numpy()
        assert values.dtype == np.float32
        for token, value, trained in zip(targets.tolist(), values.tolist(), mask.tolist()):
            if token < ACTION:
                assert value == 0.0 and trained == 0.0  # observation tokens
                continue
            t = (token - ACTION) // 1000
            _, _, _, masked = spec[j][0][t]
            assert value == (0.0 if masked else np.float32(expected[j][t]))
            assert trained == (0.0 if masked else 1.0)
            seen[j, t] = seen.get((j, t), 0) + 1
    # every action token is a target exactly once (observations are never empty here)
    assert seen == {(j, t): n for j, (steps, _) in enumerate(spec) for t, (_, n, _, _) in enumerate(steps) if n}


def test_turn_rewards_add_the_final_reward_to_the_last_transition():
    g = group(
        [
            trajectory([(0.25, 1, False, False), (0.5, 1, False, False)]),
            Trajectory(transitions=[], final_ob=tinker.ModelInput.from_ints([])),
        ],
        [1.0, -1.0],
    )
    assert adapter.turn_rewards(g) == [[0.25, 1.5], [-1.0]]
    assert [sum(r) for r in adapter.turn_rewards(g)] == g.get_total_rewards()


def test_example_by_hand_and_provenance_kept():
    g = group(
        [trajectory([(0.0, 2, False, False), (1.0, 1, False, False)]), trajectory([(1.0, 1, False, False)])], [0.0, 0.0]
    )
    advantages = adapter.compute_advantages([g], estimator=estimator(gamma=0.5, scale="none", baseline="pooled"))
    # returns [0.5, 1] and [1]; pooled mean 5/6
    assert advantages[0] == [pytest.approx([0.5 - 5 / 6, 1 - 5 / 6]), pytest.approx([1 - 5 / 6])]
    data, _ = adapter.assemble_training_data([g], advantages)
    a, b = np.float32(advantages[0][0][0]), np.float32(advantages[0][0][1])
    # ob [5,6,7] + actions (2) + ob delta [301] + action (1); targets drop the first token
    assert data[0].loss_fn_inputs["advantages"].to_numpy().tolist() == [0.0, 0.0, a, a, 0.0, b]
    reference, _ = data_processing.assemble_training_data([g], [[1.0, 1.0]])
    assert data[0].loss_fn_input_spans == reference[0].loss_fn_input_spans is not None


# -- filters, switching, errors -------------------------------------------------------------------


def equal_totals_with_credit() -> TrajectoryGroup:
    return group(
        [trajectory([(0.0, 1, False, False), (1.0, 1, False, False)]), trajectory([(1.0, 1, False, False)])], [0.0, 0.0]
    )


def no_credit() -> TrajectoryGroup:
    return group([trajectory([(1.0, 1, False, False)])] * 3, [0.0] * 3)


def train_config(**overrides) -> tinker_train.Config:
    return chz.Blueprint(tinker_train.Config).make_from_argv(TRAIN_ARGV + [f"{k}={v}" for k, v in overrides.items()])


TRAIN_ARGV = [
    "model_name=Qwen/Qwen3-8B",
    "recipe_name=stepwise-test",
    "learning_rate=1e-5",
    "max_tokens=64",
    "log_path=unused",
    "dataset_builder=tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder",
    "dataset_builder.batch_size=4",
    "dataset_builder.n_batches=2",
    "dataset_builder.group_size=2",
    "dataset_builder.model_name_for_tokenizer=Qwen/Qwen3-8B",
    "dataset_builder.renderer_name=qwen3",
]


def test_constant_total_groups_with_credit_are_kept():
    config = train_config(remove_constant_reward_groups=True)
    kept, dropped = equal_totals_with_credit(), no_credit()
    assert tinker_train.drop_constant_reward_group(kept, config, None) is None  # tinker drops it
    assert tinker_train.remove_constant_reward_groups([kept, dropped]) == [kept]
    with adapter.use_estimator("stepwise"):
        assert tinker_train.drop_constant_reward_group(kept, config, None) is kept
        assert tinker_train.drop_constant_reward_group(dropped, config, None) is None
        assert tinker_train.remove_constant_reward_groups([kept, dropped]) == [kept]
        assert tinker_train.remove_constant_reward_groups([dropped]) == [dropped]  # never empty
    off = train_config(remove_constant_reward_groups=False)
    with adapter.use_estimator("stepwise"):
        assert tinker_train.drop_constant_reward_group(dropped, off, None) is dropped


def test_use_estimator_rebinds_and_restores():
    names = [
        "compute_advantages",
        "assemble_training_data",
        "remove_constant_reward_groups",
        "drop_constant_reward_group",
    ]
    before = {name: getattr(tinker_train, name) for name in names}
    with pytest.raises(RuntimeError, match="boom"):
        with adapter.use_estimator("grpo", scale="std") as chosen:
            assert chosen.config.scale == "std"
            assert all(getattr(tinker_train, name) is not before[name] for name in names)
            raise RuntimeError("boom")
    assert {name: getattr(tinker_train, name) for name in names} == before


def test_bad_estimator_config_fails_before_rebinding():
    before = tinker_train.compute_advantages
    with pytest.raises(ConfigError, match="field 'gamma'"):
        with adapter.use_estimator("grpo", gamma=0.5):
            pass
    assert tinker_train.compute_advantages is before


def test_a_third_party_estimator_is_picked_by_name(third_party_estimator):
    g = group(
        [trajectory([(0.0, 1, False, False), (1.0, 1, False, False)]), trajectory([(0.5, 1, False, False)])], [0.0, 0.0]
    )
    with adapter.use_estimator("last-turn-only", bonus=0.5) as chosen:
        assert isinstance(chosen, third_party_estimator)
        assert tinker_train.compute_advantages([g]) == [[[0.0, 0.75], [0.25]]]


def test_cli_runs_tinkers_training_loop_with_the_estimator(monkeypatch):
    calls = {}

    async def fake_main(config):  # tinker's loop needs the service; record what it would use
        batch = [equal_totals_with_credit()]
        calls["config"] = config
        calls["advantages"] = tinker_train.compute_advantages(batch)

    monkeypatch.setattr(tinker_train, "main", fake_main)
    argv = ["estimator=stepwise", "options.gamma=0.5", "options.scale=none", "options.baseline=pooled"]
    argv += [f"train.{arg}" for arg in TRAIN_ARGV]
    adapter.main(chz.Blueprint(adapter.CLIConfig).make_from_argv(argv))
    assert isinstance(calls["config"], tinker_train.Config)
    assert calls["advantages"][0] == [pytest.approx([0.5 - 5 / 6, 1 - 5 / 6]), pytest.approx([1 - 5 / 6])]
    assert tinker_train.compute_advantages is data_processing.compute_advantages  # restored
    with pytest.raises(Exception, match="aggregation"):
        config = chz.Blueprint(adapter.CLIConfig).make_from_argv(
            ["options.aggregation=median", *(f"train.{a}" for a in TRAIN_ARGV)]
        )
        adapter.main(config)


def test_use_estimator_takes_a_configured_instance():
    chosen = estimator("grpo", scale="none")
    with adapter.use_estimator(chosen) as active:
        assert active is chosen
        assert tinker_train.compute_advantages([no_credit()]) == [[[0.0], [0.0], [0.0]]]
    with pytest.raises(TypeError, match="options configure an estimator name"):
        with adapter.use_estimator(chosen, gamma=0.5):
            pass


# -- one credit record per trajectory, made once per group ---------------------------------------


class CountingEstimator(Estimator):
    """``stepwise`` (mean-only), counting how often it estimates."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.calls = get_estimator("stepwise", scale="none"), 0

    def batched(self, batch):
        self.calls += 1
        return self.inner.batched(batch)


def test_the_filter_and_the_datums_lay_out_one_record_per_trajectory():
    config = train_config(remove_constant_reward_groups=True)
    g = equal_totals_with_credit()
    counting = CountingEstimator()
    with adapter.use_estimator(counting):
        assert tinker_train.drop_constant_reward_group(g, config, None) is g  # credits the group
        assert tinker_train.remove_constant_reward_groups([g]) == [g]
        advantages = tinker_train.compute_advantages([g])
        data, _ = tinker_train.assemble_training_data([g], advantages)
    assert counting.calls == 1  # the filters and the training data read the same records
    records = adapter.group_credit(g, counting)
    assert [c.rewards for c in records] == adapter.turn_rewards(g)
    assert {(c.estimator, c.reading, c.nodes, c.excluded) for c in records} == {("counting", "rewards", None, None)}
    assert advantages == [[c.advantages for c in records]]
    assert all(a is c.advantages for a, c in zip(advantages[0], records))  # laid out, not copied
    assert len(data) == 2  # one datum per trajectory


def test_a_group_is_credited_alone_whatever_it_is_batched_with():
    a, b = equal_totals_with_credit(), no_credit()
    chosen = estimator("stepwise", gamma=0.5)
    alone = adapter.compute_advantages([group(a.trajectories_G, a.final_rewards_G)], estimator=chosen)
    assert adapter.compute_advantages([b, a], estimator=chosen)[1] == alone[0]
