"""What the sums, quiz and walk tests share: the local server's key and the scripted answers."""

from __future__ import annotations

import re

import pytest

KEY_VAR = "STEPWISE_TEST_API_KEY"
QUESTION = re.compile(r"(\d+) \+ (\d+) =$")


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


def answer(call) -> int:
    """The right answer to the question the latest user message ends with."""
    a, b = QUESTION.search(call.messages[-1]["content"]).groups()
    return int(a) + int(b)


def off_by(k):
    return lambda call: f" {answer(call) + k}"
