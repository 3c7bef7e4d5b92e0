"""stepwise-quiz: independent questions, each answer its own turn's reward or the count at the end."""

from __future__ import annotations

import re

import pytest
import verifiers.v1 as vf
from stepwise_quiz import QuizEnv
from stepwise_quiz.quiz import HEADER, QuizTasksetConfig
from stepwise_sums.sums import split_pairs

from verifiers_stepwise import available_environments
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

from .conftest import KEY_VAR, QUESTION, answer, off_by

# Per rollout (in arrival order): all right; the second answer off by one; the first and last
# restated as sums (right), the second a hedge read as its first number (wrong); nothing right.
PLANS = PerRollout(
    [off_by(0)],
    [off_by(0), off_by(1), off_by(0)],
    [
        lambda c: f" {QUESTION.search(c.messages[-1]['content']).group(0)} {answer(c)}",
        lambda c: f" {answer(c) - 1} or {answer(c)}",
        lambda c: f" {QUESTION.search(c.messages[-1]['content']).group(0)} {answer(c)}",
    ],
    ["no idea"],
)
RIGHT = [[1, 1, 1], [1, 0, 1], [1, 0, 1], [0, 0, 0]]


def test_the_bundle_registers_its_env_id():
    assert available_environments()["stepwise-quiz"] == "stepwise_quiz"
    assert vf.environment_class("stepwise-quiz") is QuizEnv


def quizzes(split: str, **taskset) -> list:
    config = {"taskset": {"id": "stepwise-quiz", "split": split, **taskset}}
    return list(vf.load_environment(vf.resolve_env_config(config)).taskset)


def test_the_held_out_quizzes_ask_only_held_out_sums_and_prompts_are_reproducible():
    test, train = quizzes("test"), quizzes("train")
    ranges = QuizTasksetConfig().a_range, QuizTasksetConfig().b_range
    assert (len(test), len(train)) == (29, 117)
    asked = [tuple(pair) for quiz in test for pair in quiz.data.pairs]
    assert len(set(asked)) == len(asked) == 87 and set(asked) <= set(split_pairs("test", *ranges))
    assert [q.data.prompt for q in test] == [q.data.prompt for q in quizzes("test")]
    for quiz in test:  # the solved quiz in the prompt is made of training sums
        assert quiz.data.prompt.startswith(HEADER)
        shown = {tuple(map(int, m)) for m in re.findall(r"(\d+) \+ (\d+) =", quiz.data.prompt)}
        assert shown - {tuple(quiz.data.pairs[0])} <= set(split_pairs("train", *ranges))
    assert len(quizzes("test", questions=5)) == 17


@pytest.mark.parametrize("reward_at", ["turn", "end"])
async def test_each_answer_is_its_turns_reward_or_the_count_comes_at_the_end(reward_at):
    with ModelServer(scripted({"Sums, one": PLANS})) as server:
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-quiz"}, "reward_at": reward_at},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            rollouts=4,
            limit=1,
        )
        followups = {r["messages"][-1]["content"].split(".")[0] for r in server.chat_requests if len(r["messages"]) > 2}
    rewards = sorted(read_turns(e.traces[0]).rewards for e in group)
    if reward_at == "turn":
        assert rewards == sorted([[float(x) for x in right] for right in RIGHT])
    else:  # the same totals, on the last turn only
        assert rewards == sorted([[0.0, 0.0, float(sum(right))] for right in RIGHT])
    assert sorted(e.traces[0].reward for e in group) == pytest.approx(sorted(sum(r) / 3 for r in RIGHT))
    assert {f.split(",")[0] for f in followups} == {"right", "wrong"}


@pytest.mark.slow
def test_vf_eval_runs_both_placements(tmp_path):
    for reward_at in ("turn", "end"):
        with ModelServer(scripted({"Sums, one": PLANS})) as server:
            run = run_vf_eval(
                ["stepwise-quiz", "-n", "1", "-r", "4", "--env.reward-at", reward_at],
                server.base_url,
                output_dir=tmp_path / reward_at,
                env={"HOME": str(tmp_path)},
            )
        assert len(run.episodes) == 4 and all(e.traces[0].ok for e in run.episodes)
        totals = sorted(sum(read_turns(e.traces[0]).rewards) for e in run.episodes)
        assert totals == sorted(float(sum(right)) for right in RIGHT)
