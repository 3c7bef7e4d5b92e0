"""score_group: a registered estimator applied to a group of v1 episodes, one credit record
per trace; write_credit: the record kept on its trace, each turn's advantage on its tokens."""

from __future__ import annotations

import pytest
import verifiers.v1 as vf

from verifiers_stepwise.errors import TraceError
from verifiers_stepwise.estimators.registry import UnknownEstimator, get_estimator
from verifiers_stepwise.testing.trace_files import make_episode
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.credit import (
    CREDIT,
    Credit,
    credit_group,
    exclusion_reason,
    read_credit,
    score_group,
    write_credit,
)
from verifiers_stepwise.traces.turns import append_turn


def rollout(rewards: list[float], *, tokens: bool = True, reward: float | None = None) -> vf.Episode:
    """One episode whose trace took len(rewards) turns (the second with a tool call)."""
    b = TraceBuilder(tokens=tokens)
    for t, r in enumerate(rewards):
        if t:
            b.add(vf.UserMessage(content=f"feedback {t}"))
        nodes = []
        if t == 1:
            nodes.append(b.sample(None, tool_calls=[vf.ToolCall(id="c", name="f", arguments="{}")]))
            b.add(vf.ToolMessage(tool_call_id="c", content="tool output"))
        nodes.append(b.sample(f"attempt {t}"))
        append_turn(b.trace, r, nodes)
    return b.episode(reward=reward)


def sampled_advantages(trace: vf.Trace) -> list[list[float] | None]:
    return [node.advantages for node in trace.nodes if node.sampled]


def score(group: list[vf.Episode], estimator, **kwargs) -> list[Credit | None]:
    """score_group's record of each trace, kept on it with write_credit (prime-rl's path), in
    episode then trace order; None for an untrainable trace."""
    records = score_group(group, estimator, **kwargs)
    for credit_of, trace in ((records.get(t.id), t) for e in group for t in e.traces):
        if credit_of is not None:
            write_credit(trace, credit_of)
    return [records.get(trace.id) for episode in group for trace in episode.traces]


def advantages_of(group: list[vf.Episode], estimator, **kwargs) -> list[list[float]]:
    """score_group's advantages per trace ([] for an untrainable or excluded one)."""
    return [credit.advantages if credit else [] for credit in score(group, estimator, **kwargs)]


def test_score_group_returns_the_records_by_trace_and_writes_nothing():
    group = [rollout([0.0, 1.0]), rollout([1.0])]
    records = score_group(group, "stepwise")
    assert list(records) == [episode.traces[0].id for episode in group]
    assert [r.advantages for r in records.values()] == get_estimator("stepwise")([[0.0, 1.0], [1.0]])
    for episode in group:
        (trace,) = episode.traces
        assert CREDIT not in trace.info and all(node.advantages is None for node in trace.nodes)


def test_stepwise_by_name_matches_the_estimator_and_lands_on_each_turn():
    group = [rollout([0.0, 0.5, 1.0]), rollout([1.0]), rollout([0.0, 0.0])]
    records = score(group, "stepwise")
    expected = get_estimator("stepwise")([[0.0, 0.5, 1.0], [1.0], [0.0, 0.0]])
    assert [r.advantages for r in records] == expected
    for episode, values, record in zip(group, expected, records):
        (trace,) = episode.traces
        for turn, nodes in enumerate(trace.info["turn_nodes"]):
            for i in nodes:
                assert trace.nodes[i].advantages == [values[turn]] * sum(trace.nodes[i].mask)
        assert all(node.advantages is None for node in trace.nodes if not node.sampled)
        returns = [sum(trace.info["turn_rewards"][t:]) for t in range(len(values))]  # γ 1, sum
        assert record == Credit(
            "stepwise", "rewards", trace.info["turn_rewards"], trace.info["turn_nodes"], values, returns
        )
        assert read_credit(trace) == record


def test_a_configured_estimator_instance_is_used_as_given():
    group = [rollout([0.0, 1.0]), rollout([1.0, 1.0]), rollout([0.0, 0.0, 1.0])]
    estimator = get_estimator("stepwise", gamma=0.9, baseline="per_turn", scale="none")
    assert advantages_of(group, estimator) == estimator([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0, 1.0]])
    assert read_credit(group[0].traces[0]).estimator == "stepwise"  # the name it was looked up by
    assert score(group, type(estimator)())[0].estimator == "Stepwise"  # built directly: its class


def test_grpo_by_name_gives_every_turn_of_a_trajectory_its_advantage():
    group = [rollout([0.0, 1.0]), rollout([0.0, 0.0])]
    a, b = score_group(group, "grpo").values()
    assert a.advantages == [pytest.approx(1.0, abs=1e-5)] * 2 and b.advantages == [pytest.approx(-1.0, abs=1e-5)] * 2
    assert a.returns is None, "grpo is not built on per-turn returns"


def test_a_trace_without_turn_rewards_uses_its_reward_as_the_final_turn():
    plain = TraceBuilder()
    plain.sample(None, tool_calls=[vf.ToolCall(id="c", name="f", arguments="{}")])
    plain.add(vf.ToolMessage(tool_call_id="c", content="out"))
    plain.sample("done")
    episode = plain.episode(reward=1.0)
    group = [episode, rollout([0.0, 0.0])]
    advantages = advantages_of(group, "stepwise")
    assert advantages == get_estimator("stepwise")([[0.0, 1.0], [0.0, 0.0]])
    record = read_credit(episode.traces[0])
    assert (record.reading, record.rewards, record.nodes) == (
        "final_turn",
        [0.0, 1.0],
        [[2], [4]],
    )  # nodes 0, 1: the prompt
    assert sampled_advantages(episode.traces[0]) == [[advantages[0][0]] * 3, [advantages[0][1]] * 3]


def test_missing_error_refuses_traces_without_turn_rewards():
    plain = TraceBuilder()
    plain.sample("done")
    episode = plain.episode(reward=1.0)
    with pytest.raises(TraceError, match=f"trace {episode.traces[0].id}: no turn_rewards"):
        score_group([episode, rollout([1.0])], "stepwise", missing="error")


def test_a_trace_whose_model_never_spoke_is_one_turn_with_nothing_to_write():
    silent = TraceBuilder().episode(reward=0.0)
    advantages = advantages_of([silent, rollout([1.0])], "stepwise")
    assert advantages == get_estimator("stepwise")([[0.0], [1.0]])


def test_errored_traces_are_excluded_visibly_and_keep_their_earned_rewards():
    ok = [rollout([0.0, 1.0]), rollout([1.0, 1.0])]
    failed = rollout([1.0, 0.0])
    (trace,) = failed.traces
    trace.record_error(vf.ProviderError("upstream 500: boom", status_code=500))
    failed.ok = False
    advantages = advantages_of([ok[0], failed, ok[1]], "stepwise")
    assert advantages[1] == []
    assert advantages[0] + advantages[2] == [
        v for row in get_estimator("stepwise")([[0.0, 1.0], [1.0, 1.0]]) for v in row
    ]
    assert all(node.advantages is None for node in trace.nodes)
    assert trace.info["turn_rewards"] == [1.0, 0.0]  # what it earned stays on the trace
    # verifiers 0.4 stops on 'provider_error', older releases on 'error'
    reason = f"trace errored (stop {trace.stop_condition!r}): ProviderError: upstream 500: boom"
    assert read_credit(trace) == Credit("stepwise", "rewards", [1.0, 0.0], trace.info["turn_nodes"], [], None, reason)
    assert exclusion_reason(failed, trace) == reason
    assert exclusion_reason(ok[0], ok[0].traces[0]) is None


def test_an_errored_episode_excludes_its_traces():
    broken = rollout([1.0])
    broken.ok = False
    broken.errors.append(vf.Error(type="EnvError", message="StepEnv.run(): ValueError: bad"))
    advantages = advantages_of([broken, rollout([0.0]), rollout([1.0])], "stepwise")
    assert advantages[0] == []
    assert read_credit(broken.traces[0]).excluded == ("episode errored: EnvError: StepEnv.run(): ValueError: bad")


def test_untrainable_traces_are_not_part_of_the_group():
    judge = rollout([5.0])
    judge.traces[0].agent.trainable = False
    records = score([judge, rollout([0.0]), rollout([1.0])], "stepwise")
    assert records[0] is None and read_credit(judge.traces[0]) is None
    advantages = [r.advantages for r in records[1:]]
    assert advantages == get_estimator("stepwise")([[0.0], [1.0]])


def test_eval_client_traces_get_advantages_on_the_record_but_nothing_on_nodes():
    group = [rollout([0.0, 1.0], tokens=False), rollout([1.0, 1.0], tokens=False)]
    advantages = advantages_of(group, "stepwise")
    assert advantages == get_estimator("stepwise")([[0.0, 1.0], [1.0, 1.0]])
    for episode, values in zip(group, advantages):
        (trace,) = episode.traces
        assert all(node.advantages is None for node in trace.nodes)
        assert read_credit(trace).advantages == values


def test_a_zero_variance_group_writes_zeros_not_none():
    group = [rollout([1.0, 1.0]), rollout([1.0, 1.0])]
    score(group, get_estimator("stepwise", baseline="per_turn"))
    for episode in group:
        for values in sampled_advantages(episode.traces[0]):
            assert values == [0.0] * len(values)


def test_bad_arguments_are_named():
    group = [rollout([1.0])]
    with pytest.raises(UnknownEstimator, match="no advantage estimator named 'kevin'; installed: .*stepwise"):
        score_group(group, "kevin")
    with pytest.raises(TypeError, match="estimator must be an Estimator or a registered name, got int"):
        score_group(group, 3)
    with pytest.raises(ValueError, match="missing must be 'final_turn' or 'error', got 'zero'"):
        score_group(group, "stepwise", missing="zero")


def test_an_empty_group_scores_nothing():
    assert score_group([], "stepwise") == {}


def test_score_group_reads_turn_rewards_as_scores_when_told():
    """prime-rl PR #3282's reading: turn_rewards are scores φ_t (None = unscored)."""
    episodes = [make_episode([0.2, 0.5, 0.9], task=0), make_episode([0.0, 0.0, 0.0], task=0)]
    episodes[0].traces[0].info["turn_rewards"] = [0.2, None, 0.9]
    with pytest.raises(TraceError, match="reading='scores'"):
        score_group(episodes, "grpo")
    first, _ = score_group(episodes, "grpo", reading="scores").values()
    assert first.rewards == pytest.approx([0.2, 0.0, 0.7]) and first.reading == "scores"


def test_the_record_survives_serialization():
    group = [rollout([0.0, 1.0]), rollout([1.0])]
    records = score(group, "stepwise")
    for episode, record in zip(group, records):
        (trace,) = vf.Episode.model_validate_json(episode.model_dump_json()).traces  # as traces.jsonl holds it
        assert read_credit(trace) == record


def test_a_record_that_is_not_one_is_named():
    (trace,) = rollout([1.0]).traces
    for bad in ({"estimator": "x"}, {"version": 7}, ["not", "a", "record"]):
        trace.info[CREDIT] = bad
        with pytest.raises(TraceError, match=f"trace {trace.id}: trace.info\\['stepwise_credit'\\] is not a credit"):
            read_credit(trace)


def test_an_excluded_trace_whose_turn_data_does_not_read_says_so():
    failed = rollout([1.0, 0.0])
    failed.ok = False
    failed.traces[0].info["turn_nodes"] = [[0]]  # cut off mid-turn
    record, _ = score_group([failed, rollout([1.0])], "stepwise").values()
    assert record.rewards == [] and record.excluded.startswith("episode errored; its turn data does not read: ")


@pytest.mark.parametrize("field", ["readings", "nodes", "states"])
def test_credit_group_refuses_per_trajectory_fields_that_are_not_one_per_trajectory(field):
    """Regression: a ``readings`` or ``nodes`` list shorter than the group made fewer records
    than trajectories, without a word (zip stopped at the shortest)."""
    value = {"readings": ["rewards"], "nodes": [[[1]]], "states": [["s"]]}[field]
    estimator = get_estimator("stepwise")
    assert len(credit_group([[1.0], [0.0], [0.5]], estimator)) == 3
    with pytest.raises(ValueError):
        credit_group([[1.0], [0.0], [0.5]], estimator, **{field: value})
