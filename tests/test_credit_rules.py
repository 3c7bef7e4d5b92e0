"""The three rules of docs/estimators.md, pinned for the shipped defaults and for each estimator.

1. An all-wrong trajectory in a group where some trajectory succeeds gets a negative advantage
   on every turn (DAPO refine: reward −1 per wrong attempt, +1 for the right one, which ends
   the episode; a wrong trajectory runs to the turn limit K).
2. Identical rollouts get exactly zero advantage.
3. Among trajectories of equal length, adding a constant to every reward changes nothing.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests import strategies as s
from verifiers_stepwise import get_estimator

KEVIN = {"gamma": 0.4, "baseline": "pooled", "scale": "std"}
"""Kevin's configuration, the package default before issue #16."""

SAFE = {
    "stepwise (default)": {},
    "stepwise γ=0.4 std": {"gamma": 0.4, "scale": "std"},
    "grpo": None,
    "turn_credit (default)": "turn_credit",
}


def build(name: str):
    config = SAFE[name]
    if config is None:
        return get_estimator("grpo")
    if isinstance(config, str):
        return get_estimator(config)
    return get_estimator("stepwise", **config)


@st.composite
def dapo_refine_group(draw):
    """K turns at most; each rollout solves at attempt k (k wrong attempts first) or never."""
    K = draw(st.integers(1, 6))
    solved_at = draw(st.lists(st.one_of(st.none(), st.integers(0, K - 1)), min_size=2, max_size=8))
    assume(any(k is None for k in solved_at) and any(k is not None for k in solved_at))
    return [[-1.0] * K if k is None else [-1.0] * k + [1.0] for k in solved_at]


MEAN_POOLED = {"aggregation": "mean", "baseline": "pooled", "scale": "std"}


@pytest.mark.parametrize("name", [*SAFE, "mean pooled"])
@given(group=dapo_refine_group())
def test_rule1_all_wrong_trajectory_is_negative_on_every_turn(name, group):
    estimator = get_estimator("stepwise", **MEAN_POOLED) if name == "mean pooled" else build(name)
    for rewards, advantages in zip(group, estimator(group)):
        if rewards[-1] == -1.0:
            assert all(a < 0.0 for a in advantages), (group, advantages)


@pytest.mark.parametrize("name", list(SAFE))
@given(st.integers(2, 6), s.trajectory(s.reward, max_turns=6))
def test_rule2_identical_rollouts_get_exact_zeros(name, n, trajectory):
    advantages = build(name)([list(trajectory) for _ in range(n)])
    assert advantages == [[0.0] * len(trajectory)] * n


@pytest.mark.parametrize("name", list(SAFE))
@given(st.integers(1, 5), st.data(), st.floats(-3.0, 3.0))
def test_rule3_constant_shift_changes_nothing_at_equal_lengths(name, T, data, c):
    group = data.draw(st.lists(st.lists(st.floats(-3.0, 3.0), min_size=T, max_size=T), min_size=2, max_size=6))
    totals = [sum(t) for t in group]
    assume(max(totals) - min(totals) > 1e-2 or max(totals) == min(totals))
    estimator = build(name)
    base, moved = estimator(group), estimator([[r + c for r in t] for t in group])
    for x, y in zip(base, moved):
        assert x == pytest.approx(y, abs=1e-6)


# -- where the other configurations break the rules (docs/estimators.md, "Known biases") --------


def test_kevin_pooled_pushes_up_the_last_wrong_attempt():
    """Rule 1 broken: one rollout right at once, four wrong three times (γ 0.4, sum, pooled)."""
    group = [[1.0]] + [[-1.0, -1.0, -1.0]] * 4
    wrong = get_estimator("stepwise", **KEVIN)(group)[1]
    assert wrong == pytest.approx([-0.6357, -0.3926, 0.2150], abs=1e-4)
    assert get_estimator("stepwise", **{**KEVIN, "baseline": "leave_one_out"})(group)[1][2] > 0.0


def test_kevin_pooled_credits_identical_rollouts():
    """Rule 2 broken: two identical [1, 1] rollouts get ±1 by position."""
    advantages = get_estimator("stepwise", **KEVIN, eps=0.0)([[1.0, 1.0], [1.0, 1.0]])
    assert advantages == [[1.0, -1.0], [1.0, -1.0]]


def test_per_turn_leaves_late_wrong_attempts_at_zero():
    """Rule 1 broken, weakly: once the success has stopped, the turn-t set holds only the wrong."""
    assert get_estimator("stepwise", gamma=0.4, baseline="per_turn")([[1.0], [-1.0, -1.0, -1.0]])[1][1:] == [0.0, 0.0]


def test_absorbing_baseline_prices_stopping_so_a_bonus_per_turn_is_an_incentive():
    """Unequal lengths: +1 on every turn makes the longer rollout better, as it is under Σ r."""
    estimator = get_estimator("stepwise")
    assert estimator([[0.0, 0.0], [0.0]]) == [[0.0, 0.0], [0.0]]
    shifted = estimator([[1.0, 1.0], [1.0]])
    assert shifted[0][0] > 0.0 > shifted[1][0]


def test_max_returns_are_not_shift_invariant():
    """Rule 3 broken by aggregation "max": max(r_t, γ R_{t+1}) is not linear in the rewards."""
    estimator = get_estimator("stepwise", aggregation="max", gamma=0.4)
    group = [[0.0, 0.0], [-1.0, 0.0]]
    assert estimator(group) != estimator([[r + 1.0 for r in t] for t in group])


def test_mean_pooled_still_credits_identical_rollouts_by_position():
    """Rule 2 broken by pooled "mean" returns when rewards vary within the trajectory."""
    advantages = get_estimator("stepwise", **MEAN_POOLED)([[0.0, 1.0], [0.0, 1.0]])
    assert advantages[0] == advantages[1] and advantages[0][0] < 0.0 < advantages[0][1]


@given(st.integers(1, 5), st.data(), s.gamma, s.scale)
def test_per_turn_equals_absorbing_at_equal_lengths(T, data, gamma, scale):
    group = data.draw(st.lists(st.lists(st.floats(-3.0, 3.0), min_size=T, max_size=T), min_size=1, max_size=6))
    per_turn = get_estimator("stepwise", gamma=gamma, baseline="per_turn", scale=scale)(group)
    assert per_turn == get_estimator("stepwise", gamma=gamma, baseline="absorbing", scale=scale)(group)


@pytest.mark.parametrize("beta", [0.25, 1.0, 2.0])
def test_turn_credit_up_to_beta_two_keeps_all_wrong_turns_negative_exhaustively(beta):
    """Every DAPO-refine group of 2–5 rollouts with K = 3 (docs/estimators.md, turn_credit's limit)."""
    kinds = [[-1.0] * k + [1.0] for k in range(3)] + [[-1.0] * 3]
    estimator = get_estimator("turn_credit", beta=beta)
    for size in range(2, 6):
        for combo in itertools.combinations_with_replacement(range(4), size):
            group = [kinds[i] for i in combo]
            if 3 not in combo or combo == (3,) * size:
                continue
            for i, advantages in zip(combo, estimator(group)):
                assert i != 3 or max(advantages) < 0.0, (group, advantages)
