"""turn_credit and the horizon-aware returns against tests/reference.py, and their properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests import reference
from tests import strategies as s
from verifiers_stepwise import RaggedBatch
from verifiers_stepwise.estimators.grpo import GRPO
from verifiers_stepwise.estimators.stepwise import Stepwise
from verifiers_stepwise.estimators.turn_credit import TurnCredit

beta = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 4.0]), st.floats(0.0, 10.0))
configs = st.builds(dict, gamma=s.gamma, beta=beta, scale=s.scale)
small = st.floats(-10.0, 10.0, allow_nan=False)  # magnitudes where the tolerances below are simple


def flat(nested):
    return [x for row in nested for x in row]


def equal_lengths(draw_rewards=small, max_size: int = 6):
    return st.integers(1, 6).flatmap(
        lambda T: st.lists(st.lists(draw_rewards, min_size=T, max_size=T), min_size=1, max_size=max_size)
    )


@given(s.group(small), configs)
def test_turn_credit_matches_reference(group, config):
    got, want = flat(TurnCredit(**config)(group)), flat(reference.turn_credit(group, **config))
    assert all(abs(g - w) <= 1e-6 * (1 + config["beta"]) * max(1.0, abs(w)) for g, w in zip(got, want)), (got, want)


@given(s.group(small), configs)
def test_grpo_preservation_and_zero_sum(group, config):
    """Σ_t A_{j,t} = T_j · grpo_j: the redistribution between turns sums to zero per trajectory."""
    grpo = GRPO(scale=config["scale"])(group)
    for got, want in zip(TurnCredit(**config)(group), grpo):
        assert math.fsum(got) == pytest.approx(len(want) * want[0], abs=1e-6 * (1 + config["beta"]))


@given(s.group(), s.gamma, s.scale)
def test_beta_zero_is_grpo_bit_for_bit(group, gamma, scale):
    assert TurnCredit(gamma=gamma, beta=0.0, scale=scale)(group) == GRPO(scale=scale)(group)


@given(st.lists(s.reward, min_size=1, max_size=12), configs)
def test_single_turn_reduces_to_grpo_exactly(rewards, config):
    group = [[r] for r in rewards]
    assert TurnCredit(**config)(group) == GRPO(scale=config["scale"])(group)


@given(st.integers(1, 6), s.trajectory(small), configs)
def test_identical_rollouts_get_exact_zeros(n, trajectory, config):
    group = [list(trajectory) for _ in range(n)]
    assert flat(TurnCredit(**config)(group)) == [0.0] * (n * len(trajectory))


@given(equal_lengths(), st.floats(-5.0, 5.0), configs)
def test_shift_invariance_at_equal_lengths(group, c, config):
    assume(len(group) > 1)
    base = flat(TurnCredit(**config)(group))
    moved = flat(TurnCredit(**config)([[r + c for r in t] for t in group]))
    spread = max(map(abs, flat(group))) + abs(c) + 1.0
    tol = 1e-6 * spread * len(group[0]) * (1 + config["beta"])
    if config["scale"] == "std":
        tol /= 1e-3  # std-scaled: a tiny spread of returns magnifies rounding; bound it below
        totals = [sum(t) for t in group]
        assume(max(totals) - min(totals) > 1e-2 or max(totals) == min(totals))
    assert all(abs(x - y) <= tol for x, y in zip(base, moved))


@given(s.groups(small), configs, st.data())
def test_group_isolation(groups, config, data):
    assume(len(groups) > 1)
    estimator = TurnCredit(**config)
    before = estimator.batched(RaggedBatch.from_groups(groups))
    k = data.draw(st.integers(1, len(groups) - 1))
    changed = [g if i != k else [[r + 1.0 for r in t] for t in g] for i, g in enumerate(groups)]
    after = estimator.batched(RaggedBatch.from_groups(changed))
    n0 = sum(len(t) for t in groups[0])
    assert before[:n0].tolist() == after[:n0].tolist()


@given(st.integers(1, 6), st.integers(1, 6), s.reward, configs)
def test_zero_variance_group_gives_exact_zeros(n, T, r, config):
    assert flat(TurnCredit(**config)([[r] * T for _ in range(n)])) == [0.0] * (n * T)


@given(s.trajectory(small), configs)
def test_singleton_group_gives_zero(trajectory, config):
    assert TurnCredit(**config)([trajectory]) == [[0.0] * len(trajectory)]


# -- horizon-aware ("mean") returns ------------------------------------------------------------


@given(s.group(small), st.floats(-5.0, 5.0), s.gamma)
def test_mean_returns_make_pooled_shift_invariant_at_any_lengths(group, c, gamma):
    """R̄_t shifts by exactly c, whatever the position or length; pooled mean-only then ignores it."""
    cfg = dict(gamma=gamma, aggregation="mean", baseline="pooled", scale="none")
    base = flat(Stepwise(**cfg)(group))
    moved = flat(Stepwise(**cfg)([[r + c for r in t] for t in group]))
    assert all(abs(x - y) <= 1e-9 * (20.0 + abs(c)) * 8 for x, y in zip(base, moved))


def test_mean_returns_remove_the_pooled_positional_bias_of_equal_rewards():
    assert Stepwise(aggregation="mean", baseline="pooled")([[1, 1, 1, 1], [1, 1, 1, 1]]) == [[0.0] * 4] * 2
