"""Token-bearing verifiers episodes for the prime-rl adapter tests, and scoring them.

Built through verifiers' own commit path (``verifiers_stepwise.testing.traces.TraceBuilder``);
shared by test_host_prime_rl.py (stand-in or real prime-rl) and test_prime_rl_host.py (real).
"""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf

from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.turns import append_turn


def single_turn(reward: float, n_tokens: int = 3) -> vf.Episode:
    b = TraceBuilder()
    b.sample("the answer", n_tokens=n_tokens)
    return b.episode(reward=reward)


def multi_turn(rewards: list[float], tool_turn: int | None = None) -> vf.Episode:
    """One trace with a turn per reward; turn ``tool_turn`` makes a tool call first."""
    b = TraceBuilder()
    for t, reward in enumerate(rewards):
        if t:
            b.add(vf.UserMessage(content=f"feedback on attempt {t}"))
        nodes = []
        if t == tool_turn:
            nodes.append(b.sample(None, tool_calls=[vf.ToolCall(id=f"c{t}", name="run", arguments="{}")]))
            b.add(vf.ToolMessage(tool_call_id=f"c{t}", content="tool output"))
        nodes.append(b.sample(f"attempt {t}", n_tokens=2 + t))
        append_turn(b.trace, reward, nodes)
    return b.episode(reward=rewards[-1])


def score(algo, episodes: list[vf.Episode]) -> list[vf.Episode]:
    """``episodes`` after the algorithm's ``finalize_group`` (prime-rl's entry point) scored them."""
    asyncio.run(algo.finalize_group(episodes))
    return episodes
