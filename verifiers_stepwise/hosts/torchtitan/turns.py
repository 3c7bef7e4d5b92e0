"""Which verifiers turn each torchtitan turn of a trace belongs to, and its credit: shared by
both Verifiers rollouters (``verifiers``, which makes the turns, and ``main``, which checks the
turns torchtitan main made). Imports no torchtitan layout, so it loads on either.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from verifiers_stepwise.errors import RewardError
from verifiers_stepwise.hosts.torchtitan import TURN_ADVANTAGE, TURN_INDEX, TURN_REWARD
from verifiers_stepwise.traces.credit import Credit

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["Span", "check_rollout_turns", "lay_out_credit", "sampled_spans"]


class Span(NamedTuple):
    """Sampled tokens ``[start, stop)`` of a branch's token stream, from node ``node``."""

    node: int
    branch: Any
    start: int
    stop: int


def sampled_spans(trace: vf.Trace, *, trainable_only: bool = True) -> list[Span]:
    """Every contiguous run of sampled tokens, in branch then node order, each node once (in
    the first branch that holds it): the order torchtitan's own ``trace_to_rollout_turns``
    (PR #4356) emits turns in. ``trainable_only`` skips branches verifiers marks untrainable
    (a rejected compaction attempt); PR #4356 walks them too."""
    index_of = {id(node): i for i, node in enumerate(trace.nodes)}
    seen: set[int] = set()
    spans: list[Span] = []
    for branch in trace.branches:
        if trainable_only and not branch.trainable:
            continue
        offset = 0
        for node in branch.nodes:
            i = index_of[id(node)]
            if node.sampled and i not in seen:
                seen.add(i)
                spans += [Span(i, branch, offset + a, offset + b) for a, b in _runs(node.mask)]
            offset += len(node.token_ids)
    return spans


def lay_out_credit(credit: Credit | None, turns: list[Any], nodes: list[int], where: str) -> float:
    """One trace's credit record (``score_group``'s) laid out on its torchtitan turns: turn k,
    made from sampled node ``nodes[k]``, gets A_t of the verifiers turn t holding that node as
    ``env_rewards["turn_advantage"]``, labelled for torchtitan's logs with ``"turn_index"`` = t
    and, on turn t's last, ``"turn_reward"`` = r_t. Returns the first turn's advantage
    (``Rollout.advantage``). No record, or an excluded one (an errored episode), gives 0 on every
    turn. Raises RewardError when a turn the env recorded has no sampled tokens here."""
    if credit is None or credit.excluded is not None:
        for turn in turns:
            turn.env_rewards[TURN_ADVANTAGE] = 0.0
        return 0.0
    if not turns:  # the model never spoke: one turn without tokens, nothing to credit
        return credit.advantages[0]
    turn_of = credit.node_turns()
    last: dict[int, Any] = {}
    for turn, node in zip(turns, nodes, strict=True):
        t = turn_of[node]
        turn.env_rewards[TURN_INDEX] = float(t)
        turn.env_rewards[TURN_ADVANTAGE] = credit.advantages[t]
        last[t] = turn
    for t, reward in enumerate(credit.rewards):
        if t in last:
            last[t].env_rewards[TURN_REWARD] = reward
        elif credit.reading != "final_turn":  # the env named this turn, and it has no tokens here
            raise RewardError(f"{where}: turn {t} (reward {reward}) has no sampled tokens to credit")
        # else: score_group's rule made every sampled node a turn, one this host does not train
        # (a rejected compaction attempt, on a branch verifiers marks untrainable)
    return turns[0].env_rewards[TURN_ADVANTAGE]


def check_rollout_turns(trace: vf.Trace, turns: list[Any]) -> list[int]:
    """The sampled node of each torchtitan turn another converter made from ``trace`` (torchtitan
    main's ``VerifiersRollouter.trace_to_rollout_turns``): they must be its ``sampled_spans`` over
    every branch, token for token, or this raises ValueError instead of crediting the wrong turn."""
    spans = sampled_spans(trace, trainable_only=False)
    made = [turn.completion_token_ids for turn in turns]
    expected = [span.branch.token_ids[span.start : span.stop] for span in spans]
    if made != expected:
        raise ValueError(
            f"trace {trace.id}: {len(made)} torchtitan turns do not match its {len(expected)} sampled spans; "
            "torchtitan's trace_to_rollout_turns changed, update verifiers_stepwise.hosts.torchtitan.turns"
        )
    return [span.node for span in spans]


def _runs(mask: list[bool]) -> Iterator[tuple[int, int]]:
    """Half-open runs of True in ``mask``."""
    k = 0
    for sampled, run in itertools.groupby(mask):
        n = len(list(run))
        if sampled:
            yield k, k + n
        k += n
