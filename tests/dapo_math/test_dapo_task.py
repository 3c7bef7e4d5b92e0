"""Scoring one response as DAPO does: named reward terms, 1/0 option, overlong term, verifiers."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError
from stepwise_dapo_math.config import DapoMathTaskConfig, DapoMathTasksetConfig
from stepwise_dapo_math.loaders import DatasetError
from stepwise_dapo_math.taskset import DapoMathData, DapoMathTask, DapoMathTaskset


def task(answer: str = "42", **config) -> DapoMathTask:
    data = DapoMathData(id="t1", prompt="What is 6 * 7?", answer=answer)
    return DapoMathTask(data, DapoMathTaskConfig(**config))


def score(t: DapoMathTask, reply: str, length: int | None = None):
    return asyncio.run(t.score_reply(reply, length))


def test_dapo_rewards_plus_one_and_minus_one_by_default():
    right = score(task(), "6*7 = 42\nAnswer: 42")
    wrong = score(task(), "Answer: 41")
    missing = score(task(), "I think it is forty-two.")
    assert (right.rewards, wrong.rewards, missing.rewards) == (
        {"correct": 1.0},
        {"correct": -1.0},
        {"correct": -1.0},
    )
    assert right.metrics == {"accuracy": 1.0, "has_answer": 1.0, "verify_timeout": 0.0, "verify_error": 0.0}
    assert missing.metrics["has_answer"] == 0.0


def test_the_prompts_own_answer_template_echoed_back_is_no_answer():
    """DAPO's prompt ends with "... of the form Answer: $Answer (without quotes) where $Answer
    is the answer to the problem."; a model that repeats it has not answered."""
    from stepwise_dapo_math.prompts import dapo_prompt

    prompt = dapo_prompt("What is 6 * 7?")
    t = DapoMathTask(DapoMathData(id="t1", prompt=prompt, answer="42"), DapoMathTaskConfig())
    template = "I will end with a line of the form Answer: $Answer (without quotes) where $Answer is the answer."
    for echo in (score(t, template), score(t, prompt)):  # the template, or the whole prompt back
        assert echo.extracted is not None and echo.metrics["has_answer"] == 0.0 and not echo.correct
    assert score(t, "Answer: 42").metrics["has_answer"] == 1.0
    assert score(t, "Answer: 41").metrics["has_answer"] == 1.0  # wrong, but an answer


def test_a_one_zero_reward_is_a_config_away():
    t = task(correct_reward=1.0, incorrect_reward=0.0)
    assert score(t, "Answer: 42").reward == 1.0 and score(t, "Answer: 7").reward == 0.0
    with pytest.raises(ValidationError, match="greater than"):
        DapoMathTaskConfig(correct_reward=0.0, incorrect_reward=0.0)


@pytest.mark.parametrize("field", ["correct_reward", "incorrect_reward"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_reward_is_a_config_error(field, value):
    """Found by the red team: ``correct_reward=inf`` passed validation, then every solved
    episode failed (a non-finite reward is rejected when written on the trace)."""
    with pytest.raises(ValidationError, match=field):
        DapoMathTaskConfig(**{field: value})


def test_overlong_shaping_is_its_own_term_and_off_by_default():
    assert "overlong_penalty" not in score(task(), "Answer: 42", length=10**6).rewards
    t = task(overlong={"enabled": True, "max_tokens": 100, "cache_tokens": 20})
    assert score(t, "Answer: 42", length=80).rewards == {"correct": 1.0, "overlong_penalty": 0.0}
    half = score(t, "Answer: 42", length=90)
    assert half.rewards == {"correct": 1.0, "overlong_penalty": -0.5} and half.reward == 0.5
    assert score(t, "Answer: 1", length=101).reward == -2.0
    assert score(t, "Answer: 42", length=90).metrics["response_tokens"] == 90.0


def test_overlong_shaping_without_a_length_is_an_error_not_a_guess():
    t = task(overlong={"enabled": True})
    with pytest.raises(ValueError, match="token count"):
        score(t, "Answer: 42")


def test_the_math_verify_verifier_accepts_symbolic_ground_truths():
    t = task("\\frac{1}{2}", verifier="math_verify", math_verify={"workers": 1, "timeout_s": 5})
    assert score(t, "so\nAnswer: 0.5").correct
    assert score(t, "Answer: $\\frac{2}{4}$").correct
    assert not score(t, "Answer: 1/3").correct
    assert not score(t, "no answer here").correct


def test_the_integer_verifier_rejects_a_symbolic_ground_truth_at_load(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        json.dumps({"id": "ok", "problem": "1+1?", "answer": "2"})
        + "\n"
        + json.dumps({"id": "half", "problem": "1/2?", "answer": "\\frac{1}{2}"})
        + "\n"
    )
    with pytest.raises(SystemExit, match=r"^stepwise-dapo-math: .*'half'.*not an integer.*math_verify") as stop:
        DapoMathTaskset(DapoMathTasksetConfig(id="stepwise-dapo-math", path=path)).load()
    assert isinstance(stop.value.__cause__, DatasetError)
    config = DapoMathTasksetConfig(id="stepwise-dapo-math", path=path, task=DapoMathTaskConfig(verifier="math_verify"))
    assert [t.key for t in DapoMathTaskset(config).load()] == ["ok", "half"]


def test_an_empty_selection_is_an_error(tmp_path):
    config = DapoMathTasksetConfig(id="stepwise-dapo-math", dataset="bundled", split="nope")
    with pytest.raises(SystemExit, match="no problems selected.*split='nope'") as stop:
        DapoMathTaskset(config).load()
    assert isinstance(stop.value.__cause__, DatasetError)


def test_tasks_carry_the_problem_and_a_durable_key():
    config = DapoMathTasksetConfig(id="stepwise-dapo-math", dataset="bundled", limit=3)
    tasks = list(DapoMathTaskset(config))
    assert [t.data.idx for t in tasks] == [0, 1, 2]
    assert tasks[0].key == "champ/P_Combinatorics_1" == tasks[0].data.id
    assert tasks[0].data.problem in tasks[0].data.prompt
    assert tasks[0].data.answer == "239"
