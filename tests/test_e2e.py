"""End to end: the real ``vf-eval`` command against the local model server, traces read back
with ``vf.WireEpisode``, turn rewards checked, the ``stepwise`` estimator applied by name."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

PLUGINS = Path(__file__).parent / "plugins"

SCRIPT = scripted(
    {
        # The bundled arithmetic example (first three problems), two rollouts each.
        "17 * 23": PerRollout(["About 400.", "391"], ["391"]),
        "144 / 12": PerRollout(["10", "11", "13"], ["12"]),
        "2 ** 10": PerRollout(["I do not know."], ["1000", Reply(fault="http_500")]),
        # A plain taskset wrapped by --env.id stepwise-refine.
        "one two three four": ["four three one two", "four three two one"],
        "red green blue": ["blue green red"],
    }
)


@pytest.fixture(scope="module")
def server():
    with ModelServer(SCRIPT) as s:
        yield s


def by_task(episodes):
    groups = defaultdict(list)
    for episode in episodes:
        groups[episode.task.data.idx].append(episode)
    return [groups[idx] for idx in sorted(groups)]


def rewards_of(group):
    return sorted((read_turns(e.traces[0]).rewards for e in group), key=len)


@pytest.mark.slow
def test_vf_eval_stepwise_refine_offline(server, tmp_path):
    run = run_vf_eval(
        # the scores alone: no turn cost (tests/test_right_sooner.py shows what the 0.1 default adds)
        [
            "stepwise-refine",
            "-n",
            "3",
            "-r",
            "2",
            "--env.max-turns",
            "3",
            "--sampling.temperature",
            "0.7",
            "--env.turn-cost",
            "0",
        ],  # fmt: skip
        server.base_url,
        output_dir=tmp_path,
        env={"HOME": str(tmp_path)},
    )
    assert len(run.episodes) == 6
    assert all(body["temperature"] == 0.7 for body in server.chat_requests if "17 * 23" in str(body))
    multiply, divide, power = by_task(run.episodes)
    # refine records each turn's score; a turn's reward is what it improved
    assert all("turn_scores" in e.traces[0].info and "turn_rewards" not in e.traces[0].info for e in run.episodes)
    assert rewards_of(multiply) == [[1.0], pytest.approx([1 - 9 / 391, 9 / 391])]
    assert rewards_of(divide) == [[1.0], pytest.approx([1 - 2 / 12, 1 / 12, 0.0])]
    (failed,) = [e for e in power if not e.ok]
    (silent,) = [e for e in power if e.ok]
    assert failed.traces[0].errors[-1].status_code == 500
    assert failed.traces[0].info["turn_scores"] == [pytest.approx(1 - 24 / 1024)]  # kept
    assert silent.traces[0].info["turn_scores"] == [0.0, 0.0, 0.0]
    for episode in run.episodes:
        trace = episode.traces[0]
        turns = read_turns(trace)  # the schema validates against the trace's own nodes
        assert [len(nodes) for nodes in turns.nodes] == [1] * len(turns.rewards)
        # The feedback the refine env sent is on the trace, between the turns.
        feedback = [m.content for m in trace.messages if m.role == "user"][1:]
        assert all(text.startswith("Your answer scored ") for text in feedback)

    stepwise = get_estimator("stepwise")
    for group in (multiply, divide, power):
        scored = [e for e in group if e.ok]
        records = score_group(group, "stepwise")
        advantages = [credit.advantages for credit in records.values()]
        expected = stepwise([read_turns(e.traces[0]).rewards for e in scored])
        assert [a for a, e in zip(advantages, group) if e.ok] == expected
        for episode, values in zip(group, advantages):
            trace = episode.traces[0]
            # Eval-client traces carry no token ids: nothing is written on nodes, nothing crashes.
            assert all(not n.token_ids and n.advantages is None for n in trace.nodes)
            if episode.ok:
                assert records[trace.id].advantages == values
            else:
                assert values == [] and records[trace.id].excluded
    # Recorded as scores, an undiscounted return from turn 0 is the final score: both multiply
    # rollouts end right, so neither first turn is preferred, and the turn that fixed the near
    # miss earns its gain; divide's second rollout ends below 1.0 and loses.
    records = score_group(multiply, "stepwise")
    credit = sorted((records[e.traces[0].id].advantages for e in multiply), key=len)
    assert credit == [[pytest.approx(0.0, abs=1e-12)], [pytest.approx(0.0, abs=1e-12), pytest.approx(9 / 391 / 2)]]
    records = score_group(divide, "stepwise")
    assert any(min(records[e.traces[0].id].advantages) < 0 for e in divide)


@pytest.mark.slow
def test_vf_eval_any_taskset_with_env_id_stepwise_refine(server, tmp_path):
    run = run_vf_eval(
        ["reverse-words", "--env.id", "stepwise-refine", "--env.max-turns", "4"],
        server.base_url,
        output_dir=tmp_path,
        env={"HOME": str(tmp_path), "PYTHONPATH": str(PLUGINS)},
    )
    assert run.run_dir.name.startswith("stepwise-refine+reverse-words--local-model--stepwise-chat--")
    four, three = by_task(run.episodes)
    assert four[0].env.id == "stepwise-refine+reverse-words"
    # the first turn asked for another: the turn cost (0.1) is charged on it
    assert four[0].traces[0].info["turn_scores"] == pytest.approx([0.4, 0.9])
    assert read_turns(four[0].traces[0]).rewards == pytest.approx([0.4, 0.5])
    assert read_turns(three[0].traces[0]).rewards == [1.0]
    assert four[0].traces[0].rewards["in_place"].score == 1.0  # the task's own reward at close
    (second,) = [b for b in server.chat_requests if "one two three four" in str(b) and len(b["messages"]) == 3]
    assert (
        second["messages"][-1]["content"]
        == "Your answer scored 0.50; 1.00 counts as solved. Check your work and give an improved answer."
    )
