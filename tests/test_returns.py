"""Properties S1–S11 (sum) and M1–M7 (max) of docs/properties.md, plus validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import reference
from tests import strategies as s
from verifiers_stepwise import ConfigError, RaggedBatch, RewardError, discounted_returns
from verifiers_stepwise.estimators.returns import ragged_discounted_returns


def magnitude(rewards: list[float]) -> float:
    return sum(abs(r) for r in rewards)


# -- against the reference -------------------------------------------------------------------


@given(s.trajectory(), s.gamma, s.aggregation)
def test_matches_reference(rewards, gamma, aggregation):
    got = discounted_returns(rewards, gamma, aggregation)
    want = reference.returns(rewards, gamma, aggregation)
    assert all(s.close(g, w, magnitude(rewards)) for g, w in zip(got, want))


@given(s.groups(), s.gamma, s.aggregation)
def test_ragged_equals_one_trajectory_at_a_time(groups, gamma, aggregation):
    batch = RaggedBatch.from_groups(groups)
    flat = ragged_discounted_returns(batch, gamma, aggregation).tolist()
    one_by_one = [r for g in groups for t in g for r in discounted_returns(t, gamma, aggregation)]
    assert flat == one_by_one  # bit-for-bit: no trajectory sees its neighbours


# -- sum: S1–S11 ------------------------------------------------------------------------------


@given(s.trajectory(), s.gamma)
def test_s1_terminal_and_s2_recursion(rewards, gamma):
    R = discounted_returns(rewards, gamma)
    assert R[-1] == rewards[-1]
    for t in range(len(rewards) - 1):
        assert s.close(R[t], rewards[t] + gamma * R[t + 1], magnitude(rewards))


@given(s.trajectory())
def test_s3_gamma_zero_is_immediate_reward(rewards):
    assert discounted_returns(rewards, 0.0) == rewards


@given(s.trajectory())
def test_s4_gamma_one_is_reward_to_go(rewards):
    R = discounted_returns(rewards, 1.0)
    for t in range(len(rewards)):
        assert s.close(R[t], math.fsum(rewards[t:]), magnitude(rewards))


@given(st.data(), s.gamma, s.reward, s.reward)
def test_s5_linearity(data, gamma, a, b):
    r1 = data.draw(s.trajectory())
    r2 = data.draw(st.lists(s.reward, min_size=len(r1), max_size=len(r1)))
    combined = discounted_returns([a * x + b * y for x, y in zip(r1, r2)], gamma)
    R1, R2 = discounted_returns(r1, gamma), discounted_returns(r2, gamma)
    scale = (abs(a) + 1) * magnitude(r1) + (abs(b) + 1) * magnitude(r2) + abs(a) * abs(b)
    for c, x, y in zip(combined, R1, R2):
        assert s.close(c, a * x + b * y, scale * 1e3)


@given(s.trajectory(), s.gamma, s.reward)
def test_s6_constant_shift_adds_horizon_dependent_amount(rewards, gamma, c):
    R = discounted_returns(rewards, gamma)
    shifted = discounted_returns([r + c for r in rewards], gamma)
    T = len(rewards)
    for t in range(T):
        horizon = math.fsum(gamma**k for k in range(T - t))
        assert s.close(shifted[t] - R[t], c * horizon, magnitude(rewards) + abs(c) * T)


def test_s6_shift_is_not_constant_across_turns():
    R = discounted_returns([0.0, 0.0, 0.0], 0.5)
    shifted = discounted_returns([1.0, 1.0, 1.0], 0.5)
    assert [b - a for a, b in zip(R, shifted)] == [1.75, 1.5, 1.0]


@given(st.data(), s.gamma)
def test_s7_monotone(data, gamma):
    r = data.draw(s.trajectory())
    bumps = data.draw(st.lists(s.nonnegative_reward, min_size=len(r), max_size=len(r)))
    R = discounted_returns(r, gamma)
    R2 = discounted_returns([x + d for x, d in zip(r, bumps)], gamma)
    assert all(b >= a - 1e-9 * (magnitude(r) + sum(bumps)) for a, b in zip(R, R2))


@given(s.trajectory(s.nonnegative_reward), s.gamma)
def test_s7_nonnegative_rewards_bound_returns_below(rewards, gamma):
    R = discounted_returns(rewards, gamma)
    for t in range(len(rewards)):
        assert R[t] >= rewards[t]
        if t + 1 < len(rewards):
            assert R[t] >= gamma * R[t + 1] - 1e-12 * magnitude(rewards)


@given(s.trajectory(), s.gamma)
def test_s8_bounds(rewards, gamma):
    lo, hi = min(rewards), max(rewards)
    R = discounted_returns(rewards, gamma)
    T = len(rewards)
    for t in range(T):
        S = math.fsum(gamma**k for k in range(T - t))
        slack = 1e-9 * max(1.0, magnitude(rewards))
        assert lo * S - slack <= R[t] <= hi * S + slack
        if gamma < 1:
            assert abs(R[t]) <= max(abs(r) for r in rewards) / (1 - gamma) + slack


@given(st.integers(1, 20), s.reward, s.gamma)
def test_s9_outcome_only(T, final, gamma):
    R = discounted_returns([0.0] * (T - 1) + [final], gamma)
    for t in range(T):
        assert s.close(R[t], gamma ** (T - 1 - t) * final, abs(final))


@given(s.reward, s.gamma, s.aggregation)
def test_s10_single_turn(r, gamma, aggregation):
    assert discounted_returns([r], gamma, aggregation) == [r]


@given(s.groups(), st.data(), s.gamma, s.aggregation)
def test_s11_independence(groups, data, gamma, aggregation):
    """Changing another trajectory's rewards leaves this one's returns bit-for-bit unchanged."""
    batch = RaggedBatch.from_groups(groups)
    before = ragged_discounted_returns(batch, gamma, aggregation)
    i = data.draw(st.integers(0, batch.n_turns - 1))
    rewards = batch.rewards.copy()
    rewards[i] = data.draw(s.reward)
    after = ragged_discounted_returns(RaggedBatch(rewards, batch.lengths, batch.group_sizes), gamma, aggregation)
    ends = batch.trajectory_ends
    j = int(np.searchsorted(ends, i, side="right"))
    others = np.ones(batch.n_turns, dtype=bool)
    others[ends[j] - batch.lengths[j] : ends[j]] = False
    assert np.array_equal(before[others], after[others])


def test_s11_observation_turns_do_not_reset_the_return():
    """verl #7278: tool/observation turns carry reward 0; they must not cut the running return.

    Rewards live only on model turns, so an observation between turns is nothing to the math:
    the outcome reward still reaches the first turn, discounted by the number of model turns.
    """
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]


# -- max: M1–M7 -------------------------------------------------------------------------------


@given(s.trajectory(), s.gamma)
def test_m1_recursion(rewards, gamma):
    M = discounted_returns(rewards, gamma, "max")
    assert M[-1] == rewards[-1]
    for t in range(len(rewards) - 1):
        assert s.close(M[t], max(rewards[t], gamma * M[t + 1]), magnitude(rewards))


@given(s.trajectory(), s.gamma)
def test_m2_at_least_immediate(rewards, gamma):
    M = discounted_returns(rewards, gamma, "max")
    assert all(m >= r for m, r in zip(M, rewards))


@given(s.trajectory())
def test_m3_gamma_zero(rewards):
    M = discounted_returns(rewards, 0.0, "max")
    assert M[:-1] == [max(r, 0.0) for r in rewards[:-1]] and M[-1] == rewards[-1]


def test_m3_gamma_zero_differs_from_immediate_for_negative_rewards():
    assert discounted_returns([-1.0, -1.0], 0.0, "max") == [0.0, -1.0]


@given(s.trajectory())
def test_m4_gamma_one_is_suffix_maximum(rewards):
    M = discounted_returns(rewards, 1.0, "max")
    assert M == [max(rewards[t:]) for t in range(len(rewards))]
    assert all(a >= b for a, b in zip(M, M[1:]))


@given(s.trajectory(s.nonnegative_reward), s.gamma)
def test_m5_nonnegative_bounds_and_sum_dominates(rewards, gamma):
    M = discounted_returns(rewards, gamma, "max")
    R = discounted_returns(rewards, gamma, "sum")
    for t in range(len(rewards)):
        assert rewards[t] <= M[t] <= max(rewards[t:])
        assert M[t] <= R[t] + 1e-12 * magnitude(rewards)


@given(s.trajectory(), s.gamma, st.floats(0.0, 1e3))
def test_m6_positive_homogeneity(rewards, gamma, a):
    M = discounted_returns(rewards, gamma, "max")
    Ma = discounted_returns([a * r for r in rewards], gamma, "max")
    assert all(s.close(x, a * y, a * magnitude(rewards)) for x, y in zip(Ma, M))


def test_m6_not_shift_equivariant():
    M = discounted_returns([0.0, 1.0], 0.5, "max")
    shifted = discounted_returns([1.0, 2.0], 0.5, "max")
    assert [b - a for a, b in zip(M, shifted)] != [1.0, 1.0]


@given(st.data(), s.gamma)
def test_m7_monotone(data, gamma):
    r = data.draw(s.trajectory())
    bumps = data.draw(st.lists(s.nonnegative_reward, min_size=len(r), max_size=len(r)))
    M = discounted_returns(r, gamma, "max")
    M2 = discounted_returns([x + d for x, d in zip(r, bumps)], gamma, "max")
    assert all(b >= a for a, b in zip(M, M2))


# -- hand-worked tables -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "gamma", "aggregation", "expected"),
    [
        ([1, 1, 1, 1], 0.4, "sum", [1.624, 1.56, 1.4, 1.0]),  # Kevin's positional-bias example
        ([1, 1, 1, 1], 0.4, "max", [1.0, 1.0, 1.0, 1.0]),
        ([0, 0, 1], 0.5, "sum", [0.25, 0.5, 1.0]),
        ([0, 0, 1], 0.5, "max", [0.25, 0.5, 1.0]),
        ([0.2, 0.9, 0.1], 0.5, "sum", [0.675, 0.95, 0.1]),
        ([0.2, 0.9, 0.1], 0.5, "max", [0.45, 0.9, 0.1]),
        ([1, -1, 1], 1.0, "sum", [1.0, 0.0, 1.0]),
        ([1, -1, 1], 1.0, "max", [1.0, 1.0, 1.0]),
        ([-1, -1, 1], 0.4, "max", [0.16, 0.4, 1.0]),
    ],
)
def test_hand_worked(rewards, gamma, aggregation, expected):
    assert discounted_returns(rewards, gamma, aggregation) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=25)
@given(st.floats(4e307, 1.7e308))
def test_huge_rewards_overflowing_the_return_are_an_error(r):
    # The turn named is where the backward recursion first overflows: the latest one.
    later, overflows = r, 0
    for t in (3, 2, 1, 0):
        later = r + later
        if math.isinf(later):
            overflows = max(overflows, t)
    with pytest.raises(RewardError, match=f"group 0, trajectory 0, turn {overflows}: the return overflows"):
        discounted_returns([r] * 5, 1.0)


def test_overflow_names_the_turn_whose_return_overflows_not_those_that_inherit_it():
    # R_0 = -1.7e308 + 0.4 R_1 is finite in exact arithmetic; R_1 = 1.7e308 + 0.4 · 1.7e308 is not.
    with pytest.raises(RewardError, match="group 0, trajectory 0, turn 1: the return overflows"):
        discounted_returns([-1.7e308, 1.7e308, 1.7e308], 0.4)


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [-0.1, 1.5, float("nan"), float("inf"), "0.4", None, True])
def test_gamma_outside_unit_interval(gamma):
    with pytest.raises(ConfigError, match=r"gamma must be a number in \[0, 1\], got"):
        discounted_returns([1.0], gamma)


def test_unknown_aggregation():
    with pytest.raises(ConfigError, match=r"aggregation must be one of \('sum', 'max', 'mean'\), got 'median'"):
        discounted_returns([1.0], 0.5, "median")


def test_empty_trajectory():
    with pytest.raises(RewardError, match="trajectory 0: a trajectory needs at least one turn"):
        discounted_returns([], 0.5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_reward_names_the_turn(bad):
    with pytest.raises(RewardError, match=rf"group 0, trajectory 0, turn 2: reward {bad!r} is not finite"):
        discounted_returns([0.0, 1.0, bad], 0.5)


def test_non_finite_reward_in_a_batch_names_group_trajectory_and_turn():
    groups = [[[0.0], [1.0, 2.0]], [[1.0], [0.0, 0.0, float("nan")]]]
    with pytest.raises(RewardError, match="group 1, trajectory 1, turn 2: reward nan is not finite"):
        RaggedBatch.from_groups(groups)


def test_rewards_whose_sum_overflows_are_still_accepted():
    """Finiteness is proved by a finite sum; a sum that overflows must fall back, not reject."""
    batch = RaggedBatch.from_groups([[[1.7e308, 1.7e308], [-1.7e308]]])
    assert batch.rewards.tolist() == [1.7e308, 1.7e308, -1.7e308]


def test_none_reward_is_not_a_number_rather_than_nan():
    with pytest.raises(RewardError, match="group 0, trajectory 0, turn 1: reward None is not a number"):
        RaggedBatch.from_groups([[[0.0, None]]])


def test_non_number_reward():
    with pytest.raises(RewardError, match="group 0, trajectory 1, turn 0: reward 'high' is not a number"):
        RaggedBatch.from_groups([[[1.0], ["high"]]])


def test_inconsistent_flat_arrays():
    with pytest.raises(RewardError, match="lengths sum to 3 turns but rewards hold 2"):
        RaggedBatch(np.zeros(2), np.array([1, 2]), np.array([2]))
    with pytest.raises(RewardError, match="group_sizes sum to 3 trajectories but lengths describe 2"):
        RaggedBatch(np.zeros(3), np.array([1, 2]), np.array([3]))
    with pytest.raises(RewardError, match="group 0, trajectory 1: a trajectory needs at least one turn"):
        RaggedBatch(np.zeros(1), np.array([1, 0]), np.array([2]))
    with pytest.raises(RewardError, match="group 1: a group needs at least one trajectory"):
        RaggedBatch(np.zeros(1), np.array([1]), np.array([1, 0]))
