"""Env id ``stepwise-quiz``: independent sums asked one after another in one conversation.

Each turn is a new question whose answer does not depend on the others, so a turn's own
correctness is exactly the credit it earned: the task where per-turn rewards are the truth
(``reward_at="turn"``, the default). ``reward_at="end"`` pays the same total on the last
turn only, the outcome-only control of the learning suite (``benchmarks/credit_suite.py``).
"""

from stepwise_quiz.quiz import QuizEnv, QuizTaskset

__all__ = ["QuizEnv", "QuizTaskset"]
