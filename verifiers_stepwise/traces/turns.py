"""The per-turn reward schema on a verifiers v1 trace.

Verifiers 0.4.0 has no per-step reward field, so a stepwise environment records two keys in
``trace.info`` (serialized with the trace, readable from ``traces.jsonl``):

    turn_rewards   list[float]        one reward per environment turn, in order
    turn_nodes     list[list[int]]    per turn, the indices into ``trace.nodes`` of the sampled
                                      (assistant) nodes that turn produced — several when the
                                      model called tools within the turn

Without ``turn_nodes`` every sampled node is one turn, in node order (the convention of
prime-rl's turn-credit work), so ``len(turn_rewards)`` must equal the number of sampled nodes.
A mapping that disagrees with the trace raises ``TraceError`` naming the trace and the counts;
credit is never shifted silently.

Credit is made from these turns once (``traces.credit``): turn t's advantage A_t belongs to
the sampled tokens of turn t's nodes, and to nothing else.

Per-turn *scores* instead of rewards. An env whose turns carry a score of the state after the
turn (a potential φ_t: tests passed so far; ``None`` for a turn not scored) records

    turn_scores    list[float | None]  one score per turn, in order (with ``turn_nodes`` as above)

read as rewards by differences (potential-based, so Σ_t r_t = the last score):

    r_t = φ_t − φ_prev    φ_prev = the last score recorded before turn t (0 before the first);
    r_t = 0               when φ_t is None (the next scored turn's difference spans it)

prime-rl's open turn-credit PR #3282 reads ``turn_rewards`` itself as such scores; here that is
the setting ``reading="scores"``. With the default reading a ``None`` in ``turn_rewards`` is
rejected with a message naming that setting, never read as 0; a trace holding both keys is
rejected as ambiguous.

Anchor states (``append_turn_state``, read by ``gigpo`` only; absent = no turn has one):

    turn_states    list[str | int | None]   per turn, the key of the state it acted from

Keys are compared exactly, so an env keys a state by what defines it (a hash of the board),
never by something that differs between rollouts in the same state (a timestamp). The list
starts at the first turn with a key, earlier turns padded with None.

Forked traces: a trace's turns are one sequence in ``turn_rewards`` order, whatever its
branches (``trace.branches``, e.g. after compaction: the same agent's episode in a new
context). Sub-agents live in their own traces (``episode.traces``), each its own trajectory,
so one trace's return never sums another's rewards (AReaL #1666's discounting across parallel
branches cannot happen).

Nothing here imports verifiers: traces are read through their attributes (``info``, ``nodes``,
``sampled``, ``mask``, ``token_ids``, ``logprobs``, ``parent``), checked against verifiers 0.4.0.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from itertools import compress, count
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from verifiers_stepwise.errors import ConfigError, TraceError

if TYPE_CHECKING:
    from verifiers.v1 import Trace

__all__ = [
    "TURN_NODES",
    "TURN_REWARDS",
    "TURN_SCORES",
    "TURN_STATES",
    "Reading",
    "TraceTurns",
    "append_turn",
    "append_turn_score",
    "append_turn_state",
    "forfeit_turns",
    "read_turn_states",
    "read_turns",
    "sampled_nodes",
    "score_differences",
]

TURN_REWARDS = "turn_rewards"
TURN_SCORES = "turn_scores"
Reading = Literal["rewards", "scores"]
"""How ``turn_rewards`` is read: as per-turn rewards (this package) or as per-turn scores."""
TURN_NODES = "turn_nodes"
TURN_STATES = "turn_states"
FORFEITED = "forfeited_turns"
_SAMPLED = attrgetter("sampled")
_ABSENT = object()


class TraceTurns(NamedTuple):
    """A trace's turns: ``rewards[t]`` and the sampled node indices ``nodes[t]`` of turn t.

    (A named tuple: trainers build one per trace per step, and it constructs fastest.)"""

    rewards: list[float]
    nodes: list[list[int]]


def read_turns(trace: Trace, reading: Reading = "rewards") -> TraceTurns | None:
    """The validated turns of ``trace``, or None when it records neither ``turn_rewards`` nor
    ``turn_scores``, or an empty list (no turn was scored; ``turn_nodes`` is then not read).
    Scores (``turn_scores``, or ``turn_rewards`` with ``reading="scores"``) come back as
    rewards by differences (module docstring).

    Raises TraceError when a reward is not a finite number, when ``turn_nodes`` and
    ``turn_rewards`` differ in length, when a listed index is not a sampled node of the trace,
    when a sampled node belongs to no turn or to two, when turns are out of node order, or
    (without ``turn_nodes``) when the reward count differs from the sampled-node count.
    The result is read-only: its ``nodes`` may be the very lists held in ``trace.info``.
    """
    info = trace.info or {}
    raw = _recorded_rewards(trace, info, reading)
    if raw is None or (type(raw) is list and not raw):
        return None  # nothing recorded, or no turn was scored
    # Trainers read every trace every step, so the usual case is checked first with a few
    # C-level builtins; anything else goes through the checks that name what is wrong.
    # Float rewards with a finite sum (a NaN or infinity would spoil it) are valid as they are.
    if type(raw) is list and set(map(type, raw)) == {float} and math.isfinite(sum(raw)):
        rewards = raw[:]
    else:
        rewards = _rewards(trace, raw)
    return TraceTurns(rewards, _recorded_nodes(trace, info.get(TURN_NODES, _ABSENT), len(rewards)))


def _recorded_rewards(trace: Trace, info: dict, reading: Reading) -> Any:
    """The trace's per-turn rewards as recorded (scores differenced), unchecked; None without."""
    raw_rewards = info.get(TURN_REWARDS, _ABSENT)
    raw_scores = info.get(TURN_SCORES, _ABSENT)
    if raw_scores is not _ABSENT:
        if raw_rewards is not _ABSENT:
            raise TraceError(
                f"trace {trace.id}: both {TURN_REWARDS} and {TURN_SCORES} in trace.info; record one "
                f"(rewards, or scores read by differences)"
            )
        return score_differences(_scores(trace, raw_scores, TURN_SCORES))
    if raw_rewards is _ABSENT:
        return None
    if reading == "scores":
        return score_differences(_scores(trace, raw_rewards, TURN_REWARDS))
    if reading != "rewards":
        raise ConfigError(f"reading must be 'rewards' or 'scores', got {reading!r}")
    return raw_rewards


def _recorded_nodes(trace: Trace, raw_nodes: Any, n_turns: int) -> list[list[int]]:
    """Each turn's sampled nodes: ``turn_nodes`` checked, or without it one sampled node a turn."""
    sampled = sampled_nodes(trace)
    if raw_nodes is _ABSENT:
        if n_turns != len(sampled):
            raise TraceError(
                f"trace {trace.id}: {n_turns} turn_rewards but {len(sampled)} sampled "
                f"nodes, and no turn_nodes to say which node belongs to which turn"
            )
        return [[i] for i in sampled]
    # Non-empty lists of ints that, read in order, are exactly the sampled nodes meet every
    # rule of _turn_nodes (sum(raw_nodes, []) fails unless every turn is a list).
    if type(raw_nodes) is list and len(raw_nodes) == n_turns and all(raw_nodes):
        try:
            listed: list | None = sum(raw_nodes, [])
        except TypeError:
            listed = None
        if listed == sampled and set(map(type, listed)) == {int}:
            return raw_nodes
    return _turn_nodes(trace, raw_nodes, n_turns, sampled)


def sampled_nodes(trace: Trace) -> list[int]:
    """Indices of the trace's sampled (model-produced) nodes, in node order."""
    return list(compress(count(), map(_SAMPLED, trace.nodes)))


def append_turn(trace: Trace, reward: float, nodes: Sequence[int]) -> None:
    """Record one finished turn on ``trace.info``: its reward and the sampled nodes it produced.

    Called once per turn as the episode runs, so a fault mid-episode keeps the turns already
    earned. ``turn_nodes`` is always written alongside, so readers never fall back to the
    one-node-per-turn convention for traces this package produced.
    """
    _append(trace, TURN_REWARDS, reward, nodes)


def append_turn_score(trace: Trace, score: float | None, nodes: Sequence[int]) -> None:
    """``append_turn`` by the turn's score φ_t (None: not scored), written under ``turn_scores``
    (read as rewards by differences); never mixed with ``append_turn`` on one trace (refused)."""
    _append(trace, TURN_SCORES, score, nodes)


def forfeit_turns(trace: Trace, turns: int, reward: float) -> None:
    """Charge ``reward`` for ``turns`` turns the run did not take to the last recorded turn
    (the one whose replies ended the run) and record ``trace.info["forfeited_turns"]``.

    On a trace recorded by scores the last score φ_last rises by ``reward`` (an unscored last
    turn takes φ_prev + ``reward``), which adds ``reward`` to r_last = φ_last − φ_prev."""
    key = TURN_SCORES if TURN_SCORES in trace.info else TURN_REWARDS
    recorded = trace.info.get(key)
    if not recorded:
        raise TraceError(f"trace {trace.id}: no recorded turn to charge {turns} forfeited turns to")
    last = recorded[-1]
    if last is None and key == TURN_SCORES:
        last = next((phi for phi in reversed(recorded[:-1]) if phi is not None), 0.0)
    recorded[-1] = _checked_value(trace, key, last + reward, len(recorded) - 1)
    trace.info[FORFEITED] = turns


def _append(trace: Trace, key: str, value: float | None, nodes: Sequence[int]) -> None:
    other = TURN_SCORES if key == TURN_REWARDS else TURN_REWARDS
    if other in trace.info:
        raise TraceError(
            f"trace {trace.id}: its turns are recorded as {other}; a turn cannot be added to "
            f"{key} (one kind per trace: rewards, or scores read by differences)"
        )
    value = _checked_value(trace, key, value, len(trace.info.get(key, [])))
    indices = list(nodes)
    for i in indices:
        if not (isinstance(i, int) and 0 <= i < len(trace.nodes) and trace.nodes[i].sampled):
            raise TraceError(f"trace {trace.id}: node {i!r} is not a sampled node of the trace")
    trace.info.setdefault(key, []).append(value)
    trace.info.setdefault(TURN_NODES, []).append(indices)


def _checked_value(trace: Trace, key: str, value: Any, t: int) -> float | None:
    """Turn t's reward (``turn_rewards``) or score (``turn_scores``), checked."""
    (checked,) = _rewards(trace, [value], first=t) if key == TURN_REWARDS else _scores(trace, [value], key, first=t)
    return checked


def append_turn_state(trace: Trace, state: str | int | None) -> None:
    """Record the anchor state of the turn just recorded (module docstring): a str or int key,
    or None when the env says none. Nothing is written while no turn of the trace has a key."""
    turns = len(trace.info.get(TURN_REWARDS, trace.info.get(TURN_SCORES, [])))
    if not turns:
        raise TraceError(f"trace {trace.id}: no recorded turn to give anchor state {state!r}")
    (key,) = _states(trace, [state], first=turns - 1)
    if key is None and TURN_STATES not in trace.info:
        return
    states = trace.info.setdefault(TURN_STATES, [])
    if len(states) >= turns:
        raise TraceError(f"trace {trace.id}: turn {turns - 1} already has an anchor state")
    states.extend([None] * (turns - 1 - len(states)))
    states.append(key)


def read_turn_states(trace: Trace, turns: int) -> list[str | int | None] | None:
    """The anchor state of each of ``turns`` turns of ``trace``, or None when it records none.

    Raises TraceError when ``turn_states`` does not hold one str, int or None per turn.
    """
    raw = (trace.info or {}).get(TURN_STATES)
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != turns:
        shown = f"{len(raw)} entries" if isinstance(raw, list) else type(raw).__name__
        raise TraceError(f"trace {trace.id}: {TURN_STATES} must list one state per turn ({turns}), got {shown}")
    return _states(trace, raw)


def score_differences(scores: Sequence[float | None]) -> list[float]:
    """r_t = φ_t − φ_prev (φ_prev: the last non-None score before t, 0 before the first); None → 0."""
    rewards, previous = [], 0.0
    for score in scores:
        if score is None:
            rewards.append(0.0)
        else:
            rewards.append(score - previous)
            previous = score
    return rewards


def _rewards(trace: Trace, raw: Any, first: int = 0) -> list[float]:
    if not isinstance(raw, (list, tuple)):
        raise TraceError(f"trace {trace.id}: {TURN_REWARDS} must be a list of numbers, got {type(raw).__name__}")
    rewards = []
    for t, r in enumerate(raw, start=first):
        if r is None:
            raise TraceError(
                f"trace {trace.id}: turn {t} reward is None; {TURN_REWARDS} holds per-turn rewards here. "
                f"Per-turn scores with None for unscored turns (prime-rl PR #3282's reading) belong "
                f"under {TURN_SCORES}, or read these traces with reading='scores' (vf-stepwise: --reading scores)"
            )
        try:  # an int past float64's range (JSON allows 400 digits) overflows here
            value = float(r) if isinstance(r, numbers.Real) and not isinstance(r, bool) else math.nan
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            huge = type(r) is int and len(str(r)) > 20
            shown = f"{str(r)[:20]}... ({len(str(r))} digits)" if huge else repr(r)
            raise TraceError(f"trace {trace.id}: turn {t} reward {shown} is not a finite number")
        rewards.append(value)
    return rewards


def _scores(trace: Trace, raw: Any, key: str, first: int = 0) -> list[float | None]:
    if not isinstance(raw, (list, tuple)):
        raise TraceError(f"trace {trace.id}: {key} must be a list of numbers or None, got {type(raw).__name__}")
    scores: list[float | None] = []
    for t, phi in enumerate(raw, start=first):
        if phi is not None and (isinstance(phi, bool) or not isinstance(phi, numbers.Real) or not math.isfinite(phi)):
            raise TraceError(f"trace {trace.id}: turn {t} score {phi!r} in {key} is not a finite number or None")
        scores.append(None if phi is None else float(phi))
    return scores


def _states(trace: Trace, raw: list[Any], first: int = 0) -> list[str | int | None]:
    for t, key in enumerate(raw, start=first):
        if key is not None and (isinstance(key, bool) or not isinstance(key, (str, int))):
            raise TraceError(f"trace {trace.id}: turn {t} state {key!r} in {TURN_STATES} is not a str, int or None")
    return list(raw)


def _turn_nodes(trace: Trace, raw: Any, n_turns: int, sampled: list[int]) -> list[list[int]]:
    if not isinstance(raw, (list, tuple)):
        raise TraceError(
            f"trace {trace.id}: {TURN_NODES} must be a list of lists of node indices, got {type(raw).__name__}"
        )
    if len(raw) != n_turns:
        raise TraceError(f"trace {trace.id}: {n_turns} {TURN_REWARDS} but {len(raw)} {TURN_NODES} entries")
    nodes: list[list[int]] = []
    previous = -1
    sampled_set = set(sampled)
    for t, turn in enumerate(raw):
        if not isinstance(turn, (list, tuple)) or not turn:
            raise TraceError(
                f"trace {trace.id}: {TURN_NODES}[{t}] must be a non-empty list of node indices, got {turn!r}"
            )
        for i in turn:
            if isinstance(i, bool) or not isinstance(i, int) or i not in sampled_set:
                raise TraceError(
                    f"trace {trace.id}: {TURN_NODES}[{t}] lists {i!r}, which is not a sampled node of the trace"
                )
        if min(turn) <= previous:
            raise TraceError(
                f"trace {trace.id}: {TURN_NODES}[{t}] = {list(turn)} does not come after the "
                f"previous turn's nodes; turns must follow node order"
            )
        previous = max(turn)
        nodes.append(list(turn))
    listed = sorted(i for turn in nodes for i in turn)
    if listed != sampled:
        missing = sorted(set(sampled) - set(listed))
        raise TraceError(
            f"trace {trace.id}: turn_nodes must list every sampled node exactly once; "
            f"sampled nodes {sampled}, listed {listed}" + (f" (missing {missing})" if missing else "")
        )
    return nodes
