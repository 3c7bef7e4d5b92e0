"""The DAPO prompt: the exact user message of every BytedTsinghua-SIA/DAPO-Math-17k row."""

from __future__ import annotations

__all__ = ["DAPO_PREFIX", "DAPO_SUFFIX", "dapo_prompt", "problem_of"]

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    "\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def dapo_prompt(problem: str) -> str:
    """The DAPO user message for a bare problem statement."""
    return f"{DAPO_PREFIX}{problem.strip()}{DAPO_SUFFIX}"


def problem_of(prompt: str) -> str | None:
    """The bare problem inside a DAPO user message, or None when it is not one."""
    if prompt.startswith(DAPO_PREFIX) and prompt.endswith(DAPO_SUFFIX):
        return prompt[len(DAPO_PREFIX) : len(prompt) - len(DAPO_SUFFIX)]
    return None
