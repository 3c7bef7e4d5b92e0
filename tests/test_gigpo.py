"""gigpo against tests/reference.py, and its properties (docs/estimators.md, ``gigpo``)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests import reference
from tests import strategies as s
from verifiers_stepwise import RaggedBatch, get_estimator
from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators.gigpo import GiGPO, anchor_state_advantages
from verifiers_stepwise.estimators.grpo import GRPO
from verifiers_stepwise.estimators.registry import estimator_class
from verifiers_stepwise.estimators.returns import ragged_discounted_returns
from verifiers_stepwise.testing.trace_files import make_episode
from verifiers_stepwise.traces.credit import score_group
from verifiers_stepwise.traces.turns import (
    TURN_STATES,
    append_turn_state,
    read_turn_states,
)

omega = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 4.0]), st.floats(0.0, 10.0))
configs = st.builds(dict, gamma=s.gamma, omega=omega, scale=s.scale)
small = st.floats(-10.0, 10.0, allow_nan=False)  # magnitudes where the tolerance below is simple


def flat(nested):
    return [x for row in nested for x in row]


def lists(states):
    return [list(row) for row in states]


@given(s.group_with_states(small), configs)
def test_gigpo_matches_reference_to_1e_6(case, config):
    """Agreement with the plain reference: |got − want| ≤ 1e-6 (1 + ω) max(1, |want|)."""
    group, states = case
    got = flat(GiGPO(**config)(group, lists(states)))
    want = flat(reference.gigpo(group, lists(states), **config))
    assert all(abs(g - w) <= 1e-6 * (1 + config["omega"]) * max(1.0, abs(w)) for g, w in zip(got, want)), (got, want)


@given(s.group(), configs)
def test_equals_grpo_exactly_when_no_state_recurs(group, config):
    """Every turn its own state, or none: every step group has one member, so A^S = 0."""
    unique = [[f"{j},{t}" if (j + t) % 3 else None for t in range(len(row))] for j, row in enumerate(group)]
    want = GRPO(scale=config["scale"])(group)
    assert GiGPO(**config)(group, unique) == want
    assert GiGPO(**config)(group) == want  # no states at all


@given(s.group_with_states(), s.gamma, s.scale)
def test_omega_zero_is_grpo_exactly(case, gamma, scale):
    group, states = case
    assert GiGPO(gamma=gamma, omega=0.0, scale=scale)(group, lists(states)) == GRPO(scale=scale)(group)


@given(s.groups(), st.data(), s.gamma)
def test_step_advantages_are_zero_sum_in_each_step_group_when_mean_only(groups, data, gamma):
    """Under scale="none", Σ_{(k,u) ∈ S} A^S_{k,u} = 0 for every step group S."""
    states = [data.draw(st.tuples(*(st.lists(s.state, min_size=len(t), max_size=len(t)) for t in g))) for g in groups]
    batch = RaggedBatch.from_groups(groups, states)
    returns = ragged_discounted_returns(batch, gamma, "sum")
    step = anchor_state_advantages(batch, returns, "none", 1e-6)
    keys = list(zip(batch.group_of_turn.tolist(), batch.states.tolist()))
    magnitude = max(1.0, float(np.abs(returns).max())) * int(batch.lengths.max())
    for key in set(keys):
        members = [i for i, k in enumerate(keys) if k == key]
        if key[1] < 0:
            assert step[members].tolist() == [0.0] * len(members)  # no state: A^S = 0
        else:
            assert abs(math.fsum(step[members])) <= 1e-9 * magnitude * len(members)


@given(s.group_with_states(small), configs, st.randoms(use_true_random=False))
def test_permuting_rollouts_permutes_advantages(case, config, rnd: random.Random):
    group, states = case
    order = list(range(len(group)))
    rnd.shuffle(order)
    estimator = GiGPO(**config)
    base = estimator(group, lists(states))
    permuted = estimator([group[i] for i in order], [list(states[i]) for i in order])
    for got, want in zip(permuted, (base[i] for i in order)):
        assert all(abs(g - w) <= 1e-9 * (1 + config["omega"]) * max(1.0, abs(w)) for g, w in zip(got, want))


@given(s.group_with_states(), configs)
def test_a_single_rollout_gets_zeros(case, config):
    group, states = case
    assert flat(GiGPO(**config)(group[:1], lists(states)[:1])) == [0.0] * len(group[0])


@given(s.groups(small), configs, st.data())
def test_groups_are_isolated_even_when_they_share_state_keys(groups, config, data):
    """Step groups never span groups: the same key in another group is another state."""
    assume(len(groups) > 1)
    states = [[["a"] * len(t) for t in g] for g in groups]
    estimator = GiGPO(**config)
    before = estimator.batched(RaggedBatch.from_groups(groups, states))
    k = data.draw(st.integers(1, len(groups) - 1))
    changed = [g if i != k else [[r + 1.0 for r in t] for t in g] for i, g in enumerate(groups)]
    after = estimator.batched(RaggedBatch.from_groups(changed, states))
    n0 = sum(len(t) for t in groups[0])
    assert before[:n0].tolist() == after[:n0].tolist()


def test_a_loop_back_to_the_start_is_credited_below_the_direct_path():
    """Both rollouts succeed, so grpo gives 0 everywhere; from the shared start state s0 the
    rollout that came back to s0 first has the lower discounted return (0.9025 vs 0.95)."""
    group, states = [[0.0, 1.0], [0.0, 0.0, 1.0]], [["s0", "s1"], ["s0", "s0", "s1"]]
    assert GRPO()(group) == [[0.0, 0.0], [0.0, 0.0, 0.0]]
    direct, loop = GiGPO(scale="none")(group, states)
    mean = (0.95 + 0.9025 + 0.95) / 3
    assert np.allclose(direct, [0.95 - mean, 0.0]) and np.allclose(loop, [0.9025 - mean, 0.95 - mean, 0.0])
    assert loop[0] < 0 < direct[0]


def test_registered_by_name():
    assert estimator_class("gigpo") is GiGPO
    assert get_estimator("gigpo", omega=0.5).config.omega == 0.5


# -- anchor states on traces: the schema and score_group ------------------------------------------


def test_turn_states_are_padded_from_the_first_key_and_read_back():
    trace = make_episode([0.0, 0.5, 1.0]).traces[0]
    rewards = trace.info.pop("turn_rewards")
    for reward, state in zip(rewards, [None, "b", None]):
        trace.info.setdefault("turn_rewards", []).append(reward)
        append_turn_state(trace, state)
    assert trace.info[TURN_STATES] == [None, "b", None]
    assert read_turn_states(trace, 3) == [None, "b", None]


def test_no_key_writes_nothing_and_bad_keys_are_refused():
    trace = make_episode([0.0, 1.0]).traces[0]
    append_turn_state(trace, None)
    assert TURN_STATES not in trace.info and read_turn_states(trace, 2) is None
    with pytest.raises(TraceError, match=r"state \(1, 2\) in turn_states is not a str, int or None"):
        append_turn_state(trace, (1, 2))  # type: ignore[arg-type]
    with pytest.raises(TraceError, match="no recorded turn"):
        append_turn_state(SimpleNamespace(id="t", info={}), "a")  # type: ignore[arg-type]
    trace.info[TURN_STATES] = ["a"]
    with pytest.raises(TraceError, match=r"one state per turn \(2\), got 1 entries"):
        read_turn_states(trace, 2)


def test_score_group_hands_recorded_states_to_the_estimator():
    rewards = [[0.0, 1.0], [0.0, 0.0, 1.0], [0.5]]
    states = [["s0", "s1"], ["s0", "s0", "s1"], None]
    group = [make_episode(r) for r in rewards]
    for episode, row in zip(group, states):
        if row is not None:
            episode.traces[0].info[TURN_STATES] = row
    got = [c.advantages for c in score_group(group, GiGPO()).values()]
    assert got == GiGPO()(rewards, [states[0], states[1], [None]])
    assert got != GRPO()(rewards)


def test_a_state_revisited_within_a_rollout_breaks_rules_two_and_three():
    """docs/estimators.md rule columns: identical rollouts that revisit a state are compared
    across positions, whose discounted returns differ once rewards are nonzero; all-zero
    rewards give 0 and the same rollouts shifted by 1 do not."""
    states = [["s", "s"], ["s", "s"]]
    assert GiGPO()([[0.0, 0.0], [0.0, 0.0]], states) == [[0.0, 0.0], [0.0, 0.0]]
    (first, second), _ = GiGPO()([[1.0, 1.0], [1.0, 1.0]], states)
    assert first > 0 > second  # R = 1.95, 1.0 from the same state s


@given(st.lists(small, min_size=2, max_size=8), s.scale, omega)
def test_one_turn_from_a_shared_start_is_one_plus_omega_times_grpo(rewards, scale, w):
    """Every rollout's first turn acts from the start state, so with one turn the step group is
    the whole group and A^S = A^E (the learning benchmark's single_turn control: 2 × grpo)."""
    group = [[r] for r in rewards]
    got = flat(GiGPO(omega=w, scale=scale)(group, [["start"]] * len(group)))
    want = [(1 + w) * a for a in flat(GRPO(scale=scale)(group))]
    assert all(abs(g - x) <= 1e-12 * (1 + w) * max(1.0, abs(x)) for g, x in zip(got, want))
