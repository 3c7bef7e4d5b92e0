"""A quiz of independent sums: ``questions`` sums asked one after another, one a turn.

Each task is ``questions`` pairs of a stepwise-sums split, shuffled once per split (by default
a in 1–49, b in 1–9: ``train`` 352 pairs, ``test`` the 89 held out), so the test split is 29
quizzes of 3. The prompt is a document for a base model to continue: a solved quiz, then the
task's first question::

    Sums, one after another.
    23 + 5 = 28
    right. 41 + 7 = 46
    wrong, it is 48. 12 + 3 = 15
    right.

    34 + 7 =

A reply's answer is read as in stepwise-sums (``answer_of``). After each reply the user says
``right.`` or ``wrong, it is 41.`` and asks the next question; the last reply ends the episode.
The answers are independent, so a turn's own correctness is the whole of its credit:

- ``reward_at="turn"``: turn t earns r_t = 1 if its answer is right, else 0.
- ``reward_at="end"``: every turn earns 0 but the last, which earns the number of right
  answers: the same total placed where an outcome-only reward puts it.

The episode's reward (``right``) is the fraction of answers right, in both.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field, model_validator
from stepwise_sums.sums import SumsTasksetConfig, answer_of, question, split_pairs

from verifiers_stepwise.envs.env import StepwiseMultiTurnEnv, StepwiseMultiTurnEnvConfig, Turn, TurnResult
from verifiers_stepwise.envs.tasksets import CountedTake
from verifiers_stepwise.traces.kinds import CreditKind

__all__ = ["QuizConfig", "QuizData", "QuizEnv", "QuizTask", "QuizTaskset", "QuizTasksetConfig"]

HEADER = "Sums, one after another.\n"


def feedback(guess: int | None, answer: int) -> str:
    return "right." if guess == answer else f"wrong, it is {answer}."


def solved_quiz(pairs: list[tuple[int, int]], rng: random.Random) -> str:
    """A finished quiz over ``pairs``, about one answer in three wrong and corrected."""
    lines = []
    for k, (a, b) in enumerate(pairs):
        answer = a + b + (rng.choice((-2, -1, 1, 2)) if k % 3 == 1 else 0)
        lines.append(f"{question(a, b)} {answer}\n{feedback(answer, a + b)}")
    return " ".join(lines) + "\n\n"


class QuizData(vf.TaskData):
    pairs: list[tuple[int, int]]

    def right(self, trace: vf.Trace) -> int:
        """How many of the quiz's questions the trace's replies (one a turn) answer right."""
        replies = [message.content or "" for message in trace.assistant_messages]
        return sum(answer_of(str(reply)) == a + b for reply, (a, b) in zip(replies, self.pairs))


class QuizTask(vf.Task[QuizData]):
    @vf.reward
    async def right(self, task: QuizData, trace: vf.Trace) -> float:
        return task.right(trace) / len(task.pairs)


class QuizTasksetConfig(SumsTasksetConfig):
    questions: int = Field(3, ge=1, le=9)
    """Sums per quiz (turns per episode)."""
    shots: int = Field(1, ge=0, le=4)
    """Solved quizzes in each prompt."""
    a_range: tuple[int, int] = (1, 49)
    """The first addend's values (a mix of one- and two-digit sums: the untrained model answers
    about one in four right)."""


class QuizTaskset(CountedTake, vf.Taskset[QuizTask, QuizTasksetConfig]):
    def load(self) -> Iterator[QuizTask]:
        config = self.config
        ranges = (config.a_range, config.b_range)
        train, pairs = split_pairs("train", *ranges), split_pairs(config.split, *ranges)
        rng = random.Random(f"quiz-order-{config.split}")
        rng.shuffle(pairs)  # a quiz mixes first addends instead of walking 10 + 1, 10 + 2, ...
        for i in range(len(pairs) // config.questions):
            mine = pairs[i * config.questions : (i + 1) * config.questions]
            shots_rng = random.Random(f"quiz-{config.split}-{i}")
            shots = "".join(
                solved_quiz(shots_rng.sample(train, config.questions), shots_rng) for _ in range(config.shots)
            )
            prompt = HEADER + shots + question(*mine[0])
            yield QuizTask(QuizData(id=f"quiz-{config.split}-{i}", prompt=prompt, pairs=mine))


class QuizConfig(StepwiseMultiTurnEnvConfig):
    max_turns: int = Field(9, ge=1)
    """An upper bound: the quiz ends after its last question."""
    reward_at: Literal["turn", "end"] = "turn"
    """``turn``: each answer its own reward; ``end``: the count of right answers on the last turn."""

    @model_validator(mode="after")
    def _kind_of_credit(self) -> QuizConfig:
        """Paid per answer the questions are independent credit; paid at the end, outcome."""
        if "credit_kind" not in self.model_fields_set:
            self.credit_kind = CreditKind.INDEPENDENT if self.reward_at == "turn" else CreditKind.OUTCOME
        return self


class QuizEnv(StepwiseMultiTurnEnv, vf.Env[QuizConfig]):
    config: QuizConfig

    async def env_response(self, task: vf.Task, turn: Turn) -> TurnResult:
        data = task.data
        assert isinstance(data, QuizData)  # this env's tasks are QuizTasks
        a, b = data.pairs[turn.index]
        right = answer_of(turn.reply) == a + b
        done = turn.index + 1 == len(data.pairs)
        if self.config.reward_at == "turn":
            reward = float(right)
        else:
            reward = float(data.right(turn.trace)) if done else 0.0
        message = None if done else f"{feedback(answer_of(turn.reply), a + b)} {question(*data.pairs[turn.index + 1])}"
        return TurnResult(reward=reward, message=message)
