"""Properties N1–N12 of docs/properties.md, the pinned biases, and estimator configs."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests import reference
from tests import strategies as s
from verifiers_stepwise import ConfigError, RaggedBatch, get_estimator, zero_advantage_groups
from verifiers_stepwise.estimators.baselines import turn_rows
from verifiers_stepwise.estimators.grpo import GRPO
from verifiers_stepwise.estimators.stepwise import Stepwise, StepwiseConfig

configs = st.builds(
    dict,
    gamma=s.gamma,
    aggregation=s.aggregation,
    baseline=s.baseline,
    scale=s.scale,
    eps=st.sampled_from([1e-6, 1e-8]),
)


def flat(nested: list[list[float]]) -> list[float]:
    return [x for row in nested for x in row]


def tolerance(group, config) -> float:
    """Rounding bound for advantages: float64 error of the returns over the advantage scale."""
    returns = [r for t in group for r in reference.returns(t, config["gamma"], config["aggregation"])]
    magnitude = max(1.0, max(abs(r) for r in returns)) * max(len(t) for t in group)
    if config["scale"] == "none":
        return 1e-9 * magnitude
    mean = math.fsum(returns) / len(returns)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in returns) / len(returns))
    return 1e-9 * magnitude / (std + config["eps"])


# -- against the reference -------------------------------------------------------------------


@given(s.group(), configs)
def test_stepwise_matches_reference(group, config):
    got = flat(Stepwise(**config)(group))
    want = flat(reference.stepwise(group, **config))
    tol = tolerance(group, config)
    assert all(abs(g - w) <= tol for g, w in zip(got, want)), (got, want)


@given(s.group(), s.scale)
def test_grpo_matches_reference(group, scale):
    got, want = flat(GRPO(scale=scale)(group)), flat(reference.grpo(group, scale))
    tol = tolerance([[sum(t)] for t in group], dict(gamma=1.0, aggregation="sum", scale=scale, eps=1e-6))
    assert all(abs(g - w) <= tol for g, w in zip(got, want))


@given(s.groups(), configs)
def test_batched_equals_one_group_at_a_time(groups, config):
    estimator = Stepwise(**config)
    batch = RaggedBatch.from_groups(groups)
    assert batch.split(estimator.batched(batch)) == [estimator(g) for g in groups]


# -- N1 zero variance, N9 singletons ----------------------------------------------------------


@given(st.integers(1, 8), st.integers(1, 6), s.reward, configs)
def test_n1_zero_variance_group_gives_exact_zeros(n, T, r, config):
    group = [[r] * T for _ in range(n)]
    assume(
        config["baseline"] in ("per_turn", "absorbing", "trajectory")
        or T == 1
        or config["gamma"] == 0.0
        and config["aggregation"] == "sum"
    )
    assert flat(Stepwise(**config)(group)) == [0.0] * (n * T)


@given(st.integers(1, 8), s.trajectory(), s.scale)
def test_n1_identical_trajectories_give_exact_zeros_per_turn_and_trajectory(n, trajectory, scale):
    group = [list(trajectory) for _ in range(n)]
    for baseline in ("per_turn", "absorbing", "trajectory"):
        assert flat(Stepwise(baseline=baseline, scale=scale)(group)) == [0.0] * (n * len(trajectory))
    assert flat(GRPO(scale=scale)(group)) == [0.0] * (n * len(trajectory))


def test_n1_zero_variance_groups_are_flagged_for_dynamic_sampling():
    estimator = Stepwise(baseline="per_turn")
    batch = RaggedBatch.from_groups([[[1.0, 0.0], [1.0, 0.0]], [[1.0], [0.0]], [[5.0, 5.0]]])
    assert zero_advantage_groups(batch, estimator.batched(batch)).tolist() == [True, False, True]


@given(s.trajectory(), configs)
def test_n9_singleton_group_gives_zero(trajectory, config):
    assert Stepwise(**config)([trajectory]) == [[0.0] * len(trajectory)]
    assert GRPO()([trajectory]) == [[0.0] * len(trajectory)]


# -- N2 centering, N3 unit scale --------------------------------------------------------------


@given(s.group(), configs)
def test_n2_centering(group, config):
    assume(config["baseline"] in ("pooled", "leave_one_out") and len(group) > 1)
    advantages = flat(Stepwise(**config)(group))
    assert abs(math.fsum(advantages)) <= len(advantages) * tolerance(group, config)


@given(s.group(), s.gamma, s.aggregation)
def test_n3_unit_scale_with_population_std(group, gamma, aggregation):
    returns = [r for t in group for r in reference.returns(t, gamma, aggregation)]
    mean = math.fsum(returns) / len(returns)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in returns) / len(returns))
    assume(len(group) > 1 and std > 1e-3 * max(1.0, max(abs(r) for r in returns)))
    advantages = np.array(
        flat(Stepwise(gamma=gamma, aggregation=aggregation, baseline="pooled", scale="std", eps=0.0)(group))
    )
    assert advantages.std(ddof=0) == pytest.approx(1.0, abs=1e-9)


def test_n3_two_point_group_is_plus_minus_one():
    assert GRPO(eps=0.0)([[0.0], [1.0]]) == [[-1.0], [1.0]]  # ddof=1 would give ±0.7071


# -- N4 affine invariance and the shift example -----------------------------------------------


std_configs = st.builds(  # the configs N4 speaks of, drawn directly (filtering them out of `configs` trips
    dict,  # hypothesis's filter_too_much health check now and then)
    gamma=s.gamma,
    aggregation=s.aggregation,
    baseline=st.sampled_from(["pooled", "per_turn", "absorbing", "trajectory"]),
    scale=st.just("std"),
)


@given(s.group(), st.floats(0.01, 100.0), st.floats(-100.0, 100.0), std_configs)
def test_n4_affine_invariance_on_same_horizon_values(group, a, b, config):
    """Std-scaled advantages of one value per trajectory (T = 1) ignore a·x + b, a > 0, for every
    baseline but leave_one_out."""
    single = [[t[0]] for t in group]
    transformed = [[a * t[0] + b] for t in group]
    cfg = dict(config, eps=0.0)
    base, moved = flat(Stepwise(**cfg)(single)), flat(Stepwise(**cfg)(transformed))
    spread = max(x[0] for x in single) - min(x[0] for x in single)
    assume(spread > 1e-3 * max(1.0, max(abs(x[0]) for x in single)))
    assert all(abs(x - y) <= 1e-6 for x, y in zip(base, moved))
    negated = flat(Stepwise(**cfg)([[-x[0]] for x in single]))
    assert all(abs(x + y) <= 1e-9 for x, y in zip(base, negated))


@given(s.group(), st.floats(0.01, 100.0), s.gamma, s.aggregation)
def test_n4_mean_only_scales_linearly(group, a, gamma, aggregation):
    cfg = dict(gamma=gamma, aggregation=aggregation, scale="none")
    base = flat(Stepwise(**cfg)(group))
    scaled = flat(Stepwise(**cfg)([[a * r for r in t] for t in group]))
    tol = a * tolerance(group, dict(cfg, eps=1e-6))
    assert all(abs(y - a * x) <= 10 * tol for x, y in zip(base, scaled))


def test_n4_pooled_advantages_are_not_shift_invariant():
    """docs/properties.md N4: γ = 0.4, trajectories [0,0,1],[0,1],[0,0,0]; shift every reward by −1."""
    group = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0, 0.0]]
    shifted = [[r - 1.0 for r in t] for t in group]
    kevin = Stepwise(gamma=0.4, baseline="pooled", scale="std")
    base, moved = kevin(group), kevin(shifted)
    assert max(abs(x - y) for x, y in zip(flat(base), flat(moved))) > 0.5


# -- N5 permutation equivariance and group isolation, N12 determinism --------------------------


@given(s.group(), configs, st.randoms(use_true_random=False))
def test_n5_permuting_trajectories_permutes_advantages_to_float_tolerance(group, config, rnd):
    estimator = Stepwise(**config)
    order = list(range(len(group)))
    rnd.shuffle(order)
    base = estimator(group)
    permuted = estimator([group[i] for i in order])
    tol = tolerance(group, config)
    assert [len(t) for t in permuted] == [len(base[i]) for i in order]
    for got, want in zip(permuted, (base[i] for i in order)):
        assert all(abs(g - w) <= tol for g, w in zip(got, want)), (got, want)


@given(st.integers(2, 8), st.integers(1, 6), s.reward, configs, st.randoms(use_true_random=False))
def test_n1_n5_permuted_identical_values_still_give_exact_zeros(n, T, r, config, rnd):
    group = [[r] * T for _ in range(n)]
    rnd.shuffle(group)
    assert flat(Stepwise(**{**config, "gamma": 0.0, "aggregation": "sum"})(group)) == [0.0] * (n * T)


@given(s.groups(), configs, st.data())
def test_n5_changing_another_group_leaves_this_group_bit_for_bit(groups, config, data):
    assume(len(groups) > 1)
    estimator = Stepwise(**config)
    before = estimator.batched(RaggedBatch.from_groups(groups))
    other = data.draw(st.integers(1, len(groups) - 1))
    changed = [g if k != other else [[r + 1.0 for r in t] for t in g] for k, g in enumerate(groups)]
    after = estimator.batched(RaggedBatch.from_groups(changed))
    n0 = sum(len(t) for t in groups[0])
    assert before[:n0].tolist() == after[:n0].tolist()


def test_n12_same_input_same_bits():
    rng = random.Random(7)
    group = [[rng.uniform(-1, 1) for _ in range(rng.randint(1, 9))] for _ in range(16)]
    runs = {tuple(flat(Stepwise(gamma=0.9)(group))) for _ in range(5)}
    assert len(runs) == 1


# -- N6 single-turn reduction, N7 broadcast equivalence ---------------------------------------


@given(st.lists(s.reward, min_size=1, max_size=16), s.gamma, s.aggregation, s.scale)
def test_n6_single_turn_stepwise_equals_grpo_exactly(rewards, gamma, aggregation, scale):
    group = [[r] for r in rewards]
    want = GRPO(scale=scale)(group)
    for baseline in ("pooled", "per_turn", "absorbing", "trajectory"):
        got = Stepwise(gamma=gamma, aggregation=aggregation, baseline=baseline, scale=scale)(group)
        assert got == want


@given(st.lists(st.tuples(st.integers(1, 8), s.reward), min_size=1, max_size=8), s.scale)
def test_n7_outcome_only_gamma_one_trajectory_baseline_is_grpo(trajectories, scale):
    group = [[0.0] * (T - 1) + [r] for T, r in trajectories]
    stepwise = Stepwise(gamma=1.0, baseline="trajectory", scale=scale)(group)
    grpo = GRPO(scale=scale)(group)
    assert stepwise == grpo
    assert all(len(set(t)) == 1 for t in stepwise)  # every turn gets the trajectory's value


# -- N8 pooled positional bias and the per-turn stopping bias (pinned) -------------------------


def test_n8_kevin_pooled_positional_bias_is_pinned():
    """Equal rewards, yet pooling favours early turns: they sum more discounted terms."""
    A = Stepwise(gamma=0.4, baseline="pooled", scale="std")([[1, 1, 1, 1], [1, 1, 1, 1]])
    assert A[0] == A[1]
    assert A[0] == pytest.approx([0.9392, 0.6756, 0.0165, -1.6313], abs=1e-4)


def test_n8_per_turn_baseline_removes_the_positional_bias():
    assert Stepwise(gamma=0.4, baseline="per_turn")([[1, 1, 1, 1], [1, 1, 1, 1]]) == [[0.0] * 4] * 2


def test_per_turn_and_absorbing_hand_worked():
    """γ 1, sum, mean-only; R = [2, 1] and [0]. X_0 = {2, 0} for both; X_1 = {1} for per_turn
    (the other stopped), {1, 0} for absorbing (it enters with 0)."""
    group = [[1.0, 1.0], [0.0]]
    assert Stepwise(baseline="per_turn")(group) == [[1.0, 0.0], [-1.0]]
    assert Stepwise(baseline="absorbing")(group) == [[1.0, 0.5], [-1.0]]


def test_turn_rows_lay_each_groups_turn_indices_end_to_end():
    batch = RaggedBatch.from_groups([[[1.0, 2.0, 3.0], [4.0]], [[5.0, 6.0], [7.0, 8.0], [9.0]]])
    assert batch.group_longest.tolist() == [3, 2]
    assert batch.trajectory_in_group.tolist() == [0, 1, 0, 1, 2]
    assert turn_rows(batch).tolist() == [0, 1, 2, 0, 3, 4, 3, 4, 3]  # group 1's rows follow group 0's 3


def test_per_turn_baseline_depends_on_when_trajectories_stopped():
    """Turn 2 is compared only with trajectories that lasted that long: when the other
    trajectory stops one turn earlier, the survivor's rewarded turn 2 gets 0 instead of credit."""
    A = Stepwise(gamma=0.4, baseline="per_turn")([[0, 0, 1], [0, 0], [1]])
    B = Stepwise(gamma=0.4, baseline="per_turn")([[0, 0, 1], [0, 0, 0], [1]])
    assert B[0][2] > 0.0 and B[1][2] < 0.0
    assert A[0][2] == 0.0


# -- N10 is a property of credit writing (tests/test_credit.py); N11 extremes ------------------


@given(
    st.lists(
        st.lists(st.floats(-1e300, 1e300, allow_nan=False) | st.floats(-1e-300, 1e-300), min_size=1, max_size=4),
        min_size=1,
        max_size=6,
    ),
    s.baseline,
    s.scale,
)
def test_n11_finite_for_huge_and_tiny_magnitudes(group, baseline, scale):
    advantages = flat(Stepwise(gamma=0.0, baseline=baseline, scale=scale)(group))
    assert all(math.isfinite(a) for a in advantages)


def test_n11_huge_rewards_std_scaled():
    A = Stepwise(gamma=0.0, scale="std", eps=0.0)([[1e300], [-1e300]])
    assert A == [[1.0], [-1.0]]


# -- configs and errors -----------------------------------------------------------------------


def test_default_is_the_undiscounted_mean_only_absorbing_baseline():
    config = get_estimator("stepwise").config
    assert config == StepwiseConfig(gamma=1.0, aggregation="sum", baseline="absorbing", scale="none", eps=1e-6)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (dict(gamma=1.2), "field 'gamma': gamma must be a number in [0, 1], got 1.2 (got 1.2)"),
        (dict(gamma=float("nan")), "field 'gamma'"),
        (dict(aggregation="median"), "field 'aggregation': Input should be 'sum', 'max' or 'mean'"),
        (dict(baseline="global"), "field 'baseline'"),
        (dict(scale="mad"), "field 'scale'"),
        (dict(eps=-1.0), "field 'eps'"),
        (dict(gama=0.5), "field 'gama': unknown field"),
    ],
)
def test_bad_config_names_the_field(config, message):
    with pytest.raises(ConfigError, match=r"^Stepwise config: .*" + _escape(message)):
        get_estimator("stepwise", **config)


def test_grpo_has_no_gamma():
    with pytest.raises(ConfigError, match="field 'gamma': unknown field"):
        get_estimator("grpo", gamma=0.5)


def test_config_object_or_fields_not_both():
    with pytest.raises(ConfigError, match="pass either a StepwiseConfig or keyword fields"):
        Stepwise(StepwiseConfig(), gamma=0.5)
    assert Stepwise(StepwiseConfig(gamma=0.5)).config.gamma == 0.5


def test_empty_group_is_an_error():
    with pytest.raises(ValueError, match="group 0: a group needs at least one trajectory"):
        Stepwise()([])


@pytest.mark.parametrize("baseline", ["pooled", "per_turn", "absorbing", "leave_one_out", "trajectory"])
def test_overflowing_return_in_a_later_group_names_it(baseline):
    groups = [[[0.0, 1.0], [1.0]], [[1.0], [0.0, 1.5e308, 1.5e308]], [[2.0], [3.0]]]
    # turn 1 is where 1.5e308 + 1.5e308 overflows; turn 0 only inherits it
    with pytest.raises(ValueError, match="group 1, trajectory 1, turn 1: the return overflows float64"):
        Stepwise(gamma=1.0, baseline=baseline).batched(RaggedBatch.from_groups(groups))


def test_overflow_is_named_in_its_own_group_not_in_an_earlier_one():
    groups = [
        [[1.7e308], [-1.7e308], [-1.7e308]],  # finite returns; mean-only advantages overflow
        [[1.7e308, 1.7e308], [0.0]],  # this return overflows
    ]
    # Mean-only: group 0's advantages overflow, and that is what is named when alone; returns are
    # checked before advantages, so with group 1 present its return overflow is named.
    with pytest.raises(ValueError, match="group 0, trajectory 0, turn 0: the advantage overflows float64"):
        Stepwise(gamma=1.0, scale="none").batched(RaggedBatch.from_groups(groups[:1]))
    with pytest.raises(ValueError, match="group 1, trajectory 0, turn 0: the return overflows float64"):
        Stepwise(gamma=1.0, scale="none").batched(RaggedBatch.from_groups(groups))
    # Std-scaled: group 0 is fine, with advantages as large as float64 allows nearby; group 1's
    # return overflow must not be blamed on them.
    with pytest.raises(ValueError, match="group 1, trajectory 0, turn 0: the return overflows float64"):
        Stepwise(gamma=1.0, scale="std").batched(RaggedBatch.from_groups(groups))


@pytest.mark.parametrize("baseline", ["pooled", "per_turn", "absorbing", "leave_one_out", "trajectory"])
def test_advantages_beyond_float64_are_an_error_not_infinities(baseline):
    group = [[1.7e308], [-1.7e308], [-1.7e308]]
    with pytest.raises(ValueError, match="the advantage overflows float64"):
        Stepwise(scale="none", baseline=baseline)(group)
    assert np.isfinite(Stepwise(scale="std", baseline=baseline)(group)).all()


def test_empty_batch():
    batch = RaggedBatch.from_groups([])
    assert Stepwise().batched(batch).size == 0 and GRPO().batched(batch).size == 0


def _escape(text: str) -> str:
    import re

    return re.escape(text)
