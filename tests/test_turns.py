"""The per-turn schema on v1 traces, and credit placed on tokens by ``write_credit``.

Traces are built through verifiers' own commit path (``TraceBuilder``), with token ids like a
train client or without them like the eval client.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import verifiers.v1 as vf
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.credit import Credit, write_credit
from verifiers_stepwise.traces.turns import (
    TraceTurns,
    append_turn,
    append_turn_score,
    forfeit_turns,
    read_turns,
    score_differences,
)


def three_turns(tokens: bool = True) -> tuple[TraceBuilder, list[list[int]]]:
    """Turn 0 answers; turn 1 calls a tool, then answers; turn 2 answers. Rewards 0, .5, 1."""
    b = TraceBuilder(tokens=tokens)
    nodes = [[b.sample("first try")]]
    append_turn(b.trace, 0.0, nodes[0])
    b.add(vf.UserMessage(content="Not yet. Try again."))
    call = vf.ToolCall(id="c1", name="run", arguments='{"x": 1}')
    first = b.sample(None, tool_calls=[call], n_tokens=2)
    b.add(vf.ToolMessage(tool_call_id="c1", content="result 41"))
    nodes.append([first, b.sample("second try", n_tokens=4)])
    append_turn(b.trace, 0.5, nodes[1])
    b.add(vf.UserMessage(content="Closer."))
    nodes.append([b.sample("third try")])
    append_turn(b.trace, 1.0, nodes[2])
    return b, nodes


def write_turn_advantages(trace: vf.Trace, advantages: list[float]) -> None:
    """``write_credit`` of a record holding ``advantages`` for the turns the trace records."""
    turns = read_turns(trace)
    write_credit(trace, Credit("test", "rewards", turns.rewards, turns.nodes, advantages))


def test_no_turn_rewards_reads_as_none():
    b = TraceBuilder()
    b.sample("hello")
    assert read_turns(b.trace) is None


def test_append_turn_records_rewards_and_the_turns_sampled_nodes():
    b, nodes = three_turns()
    assert b.trace.info["turn_rewards"] == [0.0, 0.5, 1.0]
    assert b.trace.info["turn_nodes"] == nodes
    assert read_turns(b.trace) == TraceTurns([0.0, 0.5, 1.0], nodes)
    # The schema survives the trace's own JSON record.
    reread = vf.WireTrace.model_validate(b.trace.to_record())
    assert read_turns(reread) == TraceTurns([0.0, 0.5, 1.0], nodes)


def test_append_turn_refuses_non_sampled_nodes_and_bad_rewards():
    b = TraceBuilder()
    node = b.sample("hi")
    with pytest.raises(TraceError, match="node 1 is not a sampled node"):
        append_turn(b.trace, 1.0, [1])
    with pytest.raises(TraceError, match=r"turn 0 reward nan is not a finite number"):
        append_turn(b.trace, math.nan, [node])
    assert "turn_rewards" not in b.trace.info


def test_without_turn_nodes_each_sampled_node_is_one_turn():
    b, nodes = three_turns()
    sampled = [i for turn in nodes for i in turn]
    del b.trace.info["turn_nodes"]
    b.trace.info["turn_rewards"] = [0.0, 0.1, 0.5, 1.0]
    assert read_turns(b.trace) == TraceTurns([0.0, 0.1, 0.5, 1.0], [[i] for i in sampled])
    b.trace.info["turn_rewards"] = [0.0, 0.5, 1.0]
    with pytest.raises(TraceError) as error:
        read_turns(b.trace)
    assert str(error.value) == (
        f"trace {b.trace.id}: 3 turn_rewards but 4 sampled nodes, and no turn_nodes to say "
        f"which node belongs to which turn"
    )


@pytest.mark.parametrize(
    ("rewards", "turn_nodes", "message"),
    [
        ([0.0, 0.5], None, r"2 turn_rewards but 3 turn_nodes entries"),
        ([0.0, 0.5, 1.0, 1.0], None, r"4 turn_rewards but 3 turn_nodes entries"),
        (None, [[2], [4, 6], [8], [8]], r"3 turn_rewards but 4 turn_nodes entries"),
        (None, [[2], [4, 5], [8]], r"turn_nodes\[1\] lists 5, which is not a sampled node"),
        (None, [[2], [4, 6], [99]], r"turn_nodes\[2\] lists 99, which is not a sampled node"),
        (None, [[2], [4, 6], []], r"turn_nodes\[2\] must be a non-empty list"),
        (None, [[2], [6], [8]], r"every sampled node exactly once.*\(missing \[4\]\)"),
        (None, [[2, 4], [4, 6], [8]], r"turn_nodes\[1\] = \[4, 6\] does not come after"),
        (None, [[4, 6], [2], [8]], r"turn_nodes\[1\] = \[2\] does not come after"),
        # equal to the sampled nodes in value but not ints, or not lists: the fast path must
        # not let them through
        (None, [[2.0], [4, 6], [8]], r"turn_nodes\[0\] lists 2.0, which is not a sampled node"),
        (None, [[2], [4, 6], {8: 1}], r"turn_nodes\[2\] must be a non-empty list"),
        ([0.0, math.nan, 1.0], None, r"turn 1 reward nan is not a finite number"),
        ([0.0, "0.5", 1.0], None, r"turn 1 reward '0.5' is not a finite number"),
        ([0.0, True, 1.0], None, r"turn 1 reward True is not a finite number"),
        ([0.0, math.inf, 1.0], None, r"turn 1 reward inf is not a finite number"),
        ({"a": 1.0}, None, r"turn_rewards must be a list of numbers, got dict"),
    ],
)
def test_disagreeing_schemas_raise_naming_the_trace(rewards, turn_nodes, message):
    b, nodes = three_turns()
    assert nodes == [[2], [4, 6], [8]]
    if rewards is not None:
        b.trace.info["turn_rewards"] = rewards
    if turn_nodes is not None:
        b.trace.info["turn_nodes"] = turn_nodes
    with pytest.raises(TraceError, match=message) as error:
        read_turns(b.trace)
    assert str(error.value).startswith(f"trace {b.trace.id}: ")


def test_other_real_numbers_and_tuples_are_read_as_the_slow_path_always_did():
    b, _ = three_turns()
    b.trace.info["turn_rewards"] = [0, 0.5, np.float32(1.0)]
    b.trace.info["turn_nodes"] = [(2,), [4, 6], [8]]
    turns = read_turns(b.trace)
    assert turns.rewards == [0.0, 0.5, 1.0] and all(type(r) is float for r in turns.rewards)
    assert turns.nodes == [[2], [4, 6], [8]]


def test_each_turn_advantage_lands_on_exactly_that_turns_sampled_tokens():
    b, nodes = three_turns()
    write_turn_advantages(b.trace, [0.25, -1.5, 2.0])
    for i, node in enumerate(b.trace.nodes):
        turn = next((t for t, turn in enumerate(nodes) if i in turn), None)
        if turn is None:  # system, prompt, feedback and tool nodes
            assert node.advantages is None
        else:
            assert node.advantages == [[0.25, -1.5, 2.0][turn]] * sum(node.mask)
    (branch,) = b.trace.branches
    by_node = []
    for node in branch.nodes:
        by_node += [b.trace.nodes.index(node)] * len(node.token_ids)
    expected = {2: 0.25, 4: -1.5, 6: -1.5, 8: 2.0}
    assert branch.advantages == [
        expected.get(n, 0.0) if sampled else 0.0 for n, sampled in zip(by_node, branch.sampled_mask)
    ]


def test_regression_earlier_turns_are_not_left_at_zero_by_a_last_turn_broadcast():
    """DESIGN.md section 5: copying the last turn's masked advantage to the whole sequence left
    earlier turns at 0. Every turn's tokens must carry that turn's own value."""
    b, nodes = three_turns()
    write_turn_advantages(b.trace, [0.7, 0.3, -1.0])
    (branch,) = b.trace.branches
    values = [a for a, m in zip(branch.advantages, branch.sampled_mask) if m]
    sizes = [sum(b.trace.nodes[i].mask) for turn in nodes for i in turn]
    assert values == [0.7] * sizes[0] + [0.3] * (sizes[1] + sizes[2]) + [-1.0] * sizes[3]
    assert 0.0 not in values


@settings(max_examples=60, deadline=None)
@given(
    turns=st.lists(
        st.tuples(
            st.lists(st.integers(0, 4), min_size=1, max_size=3),  # sampled tokens per model call
            st.floats(-10, 10, allow_nan=False),  # the turn's advantage
        ),
        min_size=1,
        max_size=5,
    )
)
def test_token_placement_property(turns):
    """N10: every sampled token of turn t carries A_t, every other token 0, and turn t's
    tokens sum to A_t * n_t; a call that sampled no token gets nothing."""
    b = TraceBuilder()
    for t, (calls, _) in enumerate(turns):
        if t:
            b.add(vf.UserMessage(content=f"feedback {t}"))
        ids = []
        for k, n in enumerate(calls):
            if k:
                b.add(vf.ToolMessage(tool_call_id=f"c{t}{k}", content="out"))
            last = k == len(calls) - 1
            calls_made = None if last else [vf.ToolCall(id=f"c{t}{k + 1}", name="f", arguments="{}")]
            ids.append(b.sample(None if calls_made else f"answer {t}", tool_calls=calls_made, n_tokens=n))
        append_turn(b.trace, 0.0, ids)
    advantages = [a for _, a in turns]
    write_turn_advantages(b.trace, advantages)
    (branch,) = b.trace.branches
    owner = {i: t for t, nodes in enumerate(b.trace.info["turn_nodes"]) for i in nodes}
    position_turn = []
    for node in branch.nodes:
        i = b.trace.nodes.index(node)
        position_turn += [owner.get(i) if m else None for m in node.mask]
        if i in owner and not any(node.mask):
            assert node.advantages is None
    if not any(sum(calls) for calls, _ in turns):
        assert branch.advantages is None  # nothing was sampled, so nothing was assigned
        return
    placed = branch.advantages
    assert len(position_turn) == len(placed)
    for value, turn in zip(placed, position_turn):
        assert value == (0.0 if turn is None else advantages[turn])
    for t, (calls, a) in enumerate(turns):
        total = sum(v for v, turn in zip(placed, position_turn) if turn == t)
        assert total == pytest.approx(a * sum(calls))


def test_eval_client_traces_have_nothing_to_write_and_do_not_crash():
    b, nodes = three_turns(tokens=False)
    assert all(not node.token_ids for node in b.trace.nodes)
    write_turn_advantages(b.trace, [1.0, 2.0, 3.0])
    assert all(node.advantages is None for node in b.trace.nodes)
    assert b.trace.branches[0].advantages is None


def test_advantage_count_must_match_the_turns():
    b, _ = three_turns()
    with pytest.raises(TraceError, match="2 advantages for 3 turns"):
        write_turn_advantages(b.trace, [1.0, 2.0])


def test_an_empty_turn_rewards_list_records_no_turns():
    """``turn_rewards == []`` (no turn was scored) reads like a missing key, whatever turn_nodes says."""
    b = TraceBuilder()
    b.sample("an answer")
    b.trace.info.update(turn_rewards=[], turn_nodes=[])
    assert read_turns(b.trace) is None


# -- per-turn scores (turn_scores; turn_rewards read as scores) and None --------------------------


def two_turns(key: str, values: list) -> TraceBuilder:
    b = TraceBuilder()
    nodes = [[b.sample("first")]]
    b.add(vf.UserMessage(content="Again."))
    nodes.append([b.sample("second")])
    b.add(vf.UserMessage(content="Again."))
    nodes.append([b.sample("third")])
    b.trace.info[key] = values
    b.trace.info["turn_nodes"] = nodes
    return b


def test_turn_scores_are_read_as_rewards_by_differences():
    b = two_turns("turn_scores", [0.2, 0.5, 0.9])
    assert read_turns(b.trace).rewards == pytest.approx([0.2, 0.3, 0.4])
    assert math.fsum(read_turns(b.trace).rewards) == pytest.approx(0.9)  # the last score


def test_an_unscored_turn_gets_zero_and_the_next_difference_spans_it():
    assert score_differences([None, 0.5, None, 0.25]) == [0.0, 0.5, 0.0, -0.25]
    assert read_turns(two_turns("turn_scores", [0.5, None, 1.0]).trace).rewards == [0.5, 0.0, 0.5]


def test_none_in_turn_rewards_is_rejected_naming_the_setting():
    b = two_turns("turn_rewards", [0.2, None, 0.9])
    with pytest.raises(TraceError, match=r"turn 1 reward is None.*turn_scores.*reading='scores'"):
        read_turns(b.trace)


def test_prime_rl_reading_of_turn_rewards_is_a_setting():
    """An env written for prime-rl PR #3282 (scores under turn_rewards) is read correctly with the
    setting; its cumulative scores would otherwise be summed as rewards (0.2 + 0.5 + 0.9)."""
    b = two_turns("turn_rewards", [0.2, None, 0.9])
    assert read_turns(b.trace, reading="scores").rewards == pytest.approx([0.2, 0.0, 0.7])
    flags = two_turns("turn_rewards", [1.0, 1.0, 1.0])  # success flags: no progress after turn 0
    assert read_turns(flags.trace, reading="scores").rewards == [1.0, 0.0, 0.0]
    assert read_turns(flags.trace).rewards == [1.0, 1.0, 1.0]


def test_both_keys_on_one_trace_is_ambiguous():
    b = two_turns("turn_scores", [0.2, 0.5, 0.9])
    b.trace.info["turn_rewards"] = [0.2, 0.3, 0.4]
    with pytest.raises(TraceError, match="both turn_rewards and turn_scores"):
        read_turns(b.trace)


@pytest.mark.parametrize("bad", [float("nan"), "0.5", True])
def test_a_bad_score_names_its_turn(bad):
    with pytest.raises(TraceError, match=r"turn 1 score .* in turn_scores is not a finite number or None"):
        read_turns(two_turns("turn_scores", [0.1, bad, 0.3]).trace)


def test_append_turn_score_records_scores_and_nodes():
    b = TraceBuilder()
    first = b.sample("first")
    append_turn_score(b.trace, None, [first])
    b.add(vf.UserMessage(content="Again."))
    second = b.sample("second")
    append_turn_score(b.trace, 0.75, [second])
    assert b.trace.info["turn_scores"] == [None, 0.75] and b.trace.info["turn_nodes"] == [[first], [second]]
    assert read_turns(b.trace) == TraceTurns([0.0, 0.75], [[first], [second]])


@pytest.mark.parametrize("first, then", [(append_turn, append_turn_score), (append_turn_score, append_turn)])
def test_one_trace_records_its_turns_by_rewards_or_by_scores_never_both(first, then):
    key = "turn_rewards" if first is append_turn else "turn_scores"
    b = TraceBuilder()
    first(b.trace, 0.5, [one := b.sample("first")])
    b.add(vf.UserMessage(content="Again."))
    second = b.sample("second")
    with pytest.raises(TraceError, match=f"trace {b.trace.id}: its turns are recorded as turn_"):
        then(b.trace, 0.75, [second])
    assert b.trace.info["turn_nodes"] == [[one]] and sorted(b.trace.info) == ["turn_nodes", key]  # nothing half-written


@pytest.mark.parametrize(
    "scores, charged, rewards",
    [
        ([0.25, 0.5], [0.25, -0.5], [0.25, -0.75]),  # r_last 0.25 - 1
        ([0.25, None], [0.25, -0.75], [0.25, -1.0]),  # unscored last turn: φ_prev - 1
        ([None], [-1.0], [-1.0]),
    ],
)
def test_a_forfeit_on_scores_changes_the_last_reward_as_on_rewards(scores, charged, rewards):
    """forfeit_turns adds the forfeit to r_last = φ_last − φ_prev, whichever kind the trace holds."""
    by_scores, by_rewards = TraceBuilder(), TraceBuilder()
    for score, reward in zip(scores, score_differences(scores)):
        append_turn_score(by_scores.trace, score, [by_scores.sample("try")])
        append_turn(by_rewards.trace, reward, [by_rewards.sample("try")])
    forfeit_turns(by_scores.trace, 2, -1.0)
    forfeit_turns(by_rewards.trace, 2, -1.0)
    assert by_scores.trace.info["turn_scores"] == charged and by_scores.trace.info["forfeited_turns"] == 2
    assert read_turns(by_scores.trace).rewards == read_turns(by_rewards.trace).rewards == rewards


# -- forked traces: whose future a turn's return sums --------------------------------------------


def compacted() -> tuple[TraceBuilder, list[list[int]]]:
    """Two turns, then the context is rewritten (compaction: a summary replaces the history),
    then a third turn on the new branch."""
    b = TraceBuilder()
    nodes = [[b.sample("first try")]]
    append_turn(b.trace, 0.0, nodes[0])
    b.add(vf.UserMessage(content="Not yet."))
    nodes.append([b.sample("second try")])
    append_turn(b.trace, 0.0, nodes[1])
    b.context[:] = [b.context[0], vf.UserMessage(content="Summary: two tries so far. Solve the task.")]
    nodes.append([b.sample("third try")])
    append_turn(b.trace, 1.0, nodes[2])
    return b, nodes


def test_a_compacted_trace_is_one_sequence_and_early_turns_see_the_reward_after_the_fork():
    from verifiers_stepwise import get_estimator, score_group

    b, nodes = compacted()
    assert len(b.trace.branches) == 2  # the fork is real: two leaves
    assert read_turns(b.trace) == TraceTurns([0.0, 0.0, 1.0], nodes)
    other, _ = compacted()
    other.trace.info["turn_rewards"] = [0.0, 0.0, 0.0]
    estimator = get_estimator("stepwise", gamma=0.5, scale="none")
    advantages = [credit.advantages for credit in score_group([b.episode(), other.episode()], estimator).values()]
    # returns [0.25, 0.5, 1] vs [0, 0, 0]: turn 0's return holds the post-compaction reward
    assert advantages[0] == pytest.approx([0.125, 0.25, 0.5])


def test_parallel_agents_are_separate_traces_whose_returns_never_mix():
    from verifiers_stepwise import get_estimator, score_group

    main, helper = TraceBuilder(), TraceBuilder(prompt="Sub-task.")
    append_turn(main.trace, 0.0, [main.sample("delegate")])
    append_turn(helper.trace, 1.0, [helper.sample("done")])
    for trace in (main.trace, helper.trace):
        trace.is_completed = trace.ok = True
    episode = vf.Episode(task=main.trace.task, traces=[main.trace, helper.trace], ok=True)
    estimator = get_estimator("stepwise", gamma=1.0, scale="none")
    records = list(score_group([episode], estimator).values())
    assert [r.advantages for r in records] == [[-0.5], [0.5]]
    # two trajectories: the helper's reward is not part of the main trace's future
    assert [r.rewards for r in records] == [[0.0], [1.0]]
