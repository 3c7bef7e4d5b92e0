"""stepwise-sums: the splits, the answer rule, the turn loop, and attacks on the reward through vf-eval."""

from __future__ import annotations

import re

import pytest
import verifiers.v1 as vf
from stepwise_sums import SumsEnv
from stepwise_sums.sums import HEADER, answer_of, closeness, split_pairs

from verifiers_stepwise import available_environments
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

from .conftest import KEY_VAR, QUESTION, answer, off_by

# The k-th rollout to reach the server follows plan k % 5 (one count over every prompt): right at
# once; too high then right; hedges and a decimal (wrong: only the first integer is read); no
# number; right after two hints.
PLANS = PerRollout(
    [off_by(0)],
    [off_by(1), off_by(0)],
    [
        lambda c: f" {answer(c) + 1} or {answer(c)}",
        lambda c: f" {answer(c)}.5",
        lambda c: f"{answer(c) - 1}, {answer(c)}",
    ],
    ["I think it is big."],
    [off_by(-3), off_by(2), off_by(0)],
)


def restated(k: int):
    """The reply that restates the sum and gives its answer off by ``k``: ``10 + 2 = 12``."""
    return lambda c: f" {QUESTION.search(c.messages[-1]['content']).group(0)} {answer(c) + k}"


# An honest reply that restates the sum, right at once; a forged one that restates it with two
# results (`10 + 2 = 13 or = 11`: one is read, the last), then a third (`= 11 = 12`), read as 12.
RESTATED = PerRollout(
    [restated(0)],
    [lambda c: f"{restated(1)(c)} or = {answer(c) - 1}", lambda c: f" = {answer(c) - 1} = {answer(c)}"],
)


def test_the_bundle_registers_its_env_id():
    assert available_environments()["stepwise-sums"] == "stepwise_sums"
    assert vf.environment_class("stepwise-sums") is SumsEnv


def test_the_splits_are_disjoint_and_prompts_reproducible():
    train, test = split_pairs("train"), split_pairs("test")
    assert (len(train), len(test)) == (360, 90) and not set(train) & set(test)
    with pytest.raises(ValueError, match="split must be"):
        split_pairs("dev")
    first = [
        t.data.prompt for t in vf.load_environment(vf.resolve_env_config({"taskset": {"id": "stepwise-sums"}})).taskset
    ]
    again = [
        t.data.prompt for t in vf.load_environment(vf.resolve_env_config({"taskset": {"id": "stepwise-sums"}})).taskset
    ]
    assert first == again and all(p.startswith(HEADER) for p in first)
    held_out = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "stepwise-sums", "split": "test"}}))
    for task in held_out.taskset:  # the shots come from the training pairs only
        shots = {tuple(map(int, m)) for m in re.findall(r"(\d+) \+ (\d+) =", task.data.prompt)}
        assert shots - {(task.data.a, task.data.b)} <= set(train)


def test_the_ranges_set_the_pairs_and_bad_ranges_are_refused():
    config = {"taskset": {"id": "stepwise-sums", "split": "test", "a_range": [10, 59], "b_range": [10, 59]}}
    held_out = list(vf.load_environment(vf.resolve_env_config(config)).taskset)
    assert len(held_out) == 500 and {(t.data.a, t.data.b) for t in held_out} == set(
        split_pairs("test", (10, 59), (10, 59))
    )
    assert all(10 <= t.data.b <= 59 for t in held_out) and any(t.data.b >= 10 for t in held_out)
    for bad in ([9, 1], [-1, 3]):
        with pytest.raises(Exception, match="b_range must be"):
            vf.load_environment(vf.resolve_env_config({"taskset": {"id": "stepwise-sums", "b_range": bad}}))
    tiny = {"taskset": {"id": "stepwise-sums", "a_range": [1, 1], "b_range": [1, 2], "shots": 4}}
    with pytest.raises(ValueError, match="shots=4 but the ranges hold 1 training pairs"):
        list(vf.load_environment(vf.resolve_env_config(tiny)).taskset)


@pytest.mark.parametrize(
    "reply, value",
    [(" 12", 12), ("12\n", 12), (" 12.", 12), ("-3", -3), (" 12.5", None), ("twelve", None), ("", None),
     (None, None), (" 12 or 13", 12), ("x 12", None), (" 26 + 4 = 30", 30), (" = 13 = 12", 12),
     ("26 + 4 = 30 or 31", 30), (" 26 + 4 =", None), ("= 29.5", None)],
)  # fmt: skip
def test_the_answer_is_the_first_integer_after_the_last_equals_sign(reply, value):
    assert answer_of(reply) == value


async def test_each_turn_is_scored_and_a_hint_follows_a_wrong_answer():
    with ModelServer(scripted({"Sums.": PLANS})) as server:
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-sums"}},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            rollouts=5,
            limit=1,
        )
        requests = server.chat_requests
    rewards = sorted([read_turns(e.traces[0]).rewards for e in group], key=lambda r: (len(r), r))
    assert rewards == [[1.0], [-1.0, 1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, 1.0]]
    assert sorted(e.traces[0].reward for e in group) == [0.0, 0.0, 1.0, 1.0, 1.0]  # the last answer's
    followups = {r["messages"][-1]["content"] for r in requests if len(r["messages"]) > 2}
    assert followups == {"too high. 10 + 2 =", "too low. 10 + 2 =", "no number. 10 + 2 ="}


@pytest.mark.slow
def test_vf_eval_runs_it_and_hedges_earn_nothing(tmp_path):
    with ModelServer(scripted({"Sums.": PLANS})) as server:
        run = run_vf_eval(["stepwise-sums", "-n", "2", "-r", "5"], server.base_url, output_dir=tmp_path,
                          env={"HOME": str(tmp_path)})  # fmt: skip
    assert len(run.episodes) == 10 and all(e.traces[0].ok for e in run.episodes)
    by_turns = sorted((len(read_turns(e.traces[0]).rewards), e.traces[0].reward) for e in run.episodes)
    # each plan twice: right at once, right at turn 2, right at turn 3; the hedger and the wordy one
    # fail. Pooled, not per task: PLANS (key "Sums.", in every prompt) numbers the ten rollouts of
    # both tasks in arrival order, so which task gets which plan k % 5 is not fixed.
    assert by_turns == sorted([(1, 1.0), (2, 1.0), (3, 0.0), (3, 0.0), (3, 1.0)] * 2)


def test_closeness_is_one_only_when_right_and_at_most_half_otherwise():
    assert closeness(12, 12) == 1.0 and closeness(None, 12) == 0.0
    assert closeness(13, 12) == closeness(11, 12) == pytest.approx(0.45)
    assert closeness(22, 12) == closeness(-50, 12) == 0.0
    assert max(closeness(g, 40) for g in range(-100, 200) if g != 40) == pytest.approx(0.45)


def closeness_rewards(episodes) -> list[list[float]]:
    return sorted([read_turns(e.traces[0]).rewards for e in episodes], key=lambda r: (len(r), r))


# Per plan (PLANS): right at once; off by 1 then right; a hedge, a decimal, a list (each read as
# its first integer or none); no number; off by -3, by 2, then right.
CLOSENESS_REWARDS = [[1.0], [0.45, 0.55], [0.0, 0.0, 0.0], [0.35, 0.05, 0.6], [0.45, -0.45, 0.45]]


async def test_closeness_scores_each_answer_and_rewards_what_a_turn_improved():
    with ModelServer(scripted({"Sums.": PLANS})) as server:
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-sums"}, "scoring": "closeness"},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            rollouts=5,
            limit=1,
        )
    assert all("turn_rewards" not in e.traces[0].info for e in group)  # recorded as scores
    assert closeness_rewards(group) == [pytest.approx(r) for r in sorted(CLOSENESS_REWARDS, key=lambda r: (len(r), r))]
    # an episode's rewards sum to its last answer's score: no hedge or detour out-earns the answer
    assert sorted(e.traces[0].reward for e in group) == [0.0, 0.0, 1.0, 1.0, 1.0]


@pytest.mark.slow
def test_vf_eval_runs_closeness_and_hedges_earn_no_more_than_their_first_number(tmp_path):
    with ModelServer(scripted({"Sums.": PLANS})) as server:
        run = run_vf_eval(["stepwise-sums", "-n", "1", "-r", "5", "--env.scoring", "closeness"], server.base_url,
                          output_dir=tmp_path, env={"HOME": str(tmp_path)})  # fmt: skip
    assert len(run.episodes) == 5 and all(e.traces[0].ok for e in run.episodes)
    expected = sorted(CLOSENESS_REWARDS, key=lambda r: (len(r), r))
    assert closeness_rewards(run.episodes) == [pytest.approx(r) for r in expected]


@pytest.mark.slow
def test_vf_eval_reads_an_honest_restatement_as_its_result_and_a_forged_one_as_one_answer(tmp_path):
    with ModelServer(scripted({"Sums.": RESTATED})) as server:
        run = run_vf_eval(["stepwise-sums", "-n", "1", "-r", "2"], server.base_url, output_dir=tmp_path,
                          env={"HOME": str(tmp_path)})  # fmt: skip
    rewards = sorted(read_turns(e.traces[0]).rewards for e in run.episodes)
    # honest: right at once (it was read as 10, a wrong answer, before); forged: its two results
    # read as the last one, wrong, then a plain right answer
    assert rewards == [[-1.0, 1.0], [1.0]]
