"""Stepwise credit for one group of verifiers v1 episodes (all rollouts of one prompt).

    score_group(episodes, estimator) -> {trace id: Credit}     the group's records
    write_credit(trace, credit)                                 the record kept on the trace
    lay_out(credit.advantages, runs) -> per-token advantages    the record on a token stream

``score_group`` reads each trace's per-turn rewards and anchor states (``traces.turns``) and
runs the estimator on the group (``credit_group``, the one place a record is made). Hosts lay
the record out on their own tokens and never read the turns again:

    estimator   the name the estimator was looked up by (or its class name)
    reading     how the turns were read: "rewards" (``turn_rewards``), "scores" (``turn_scores``,
                or ``turn_rewards`` read as scores) or "final_turn" (neither: ``missing``)
    rewards     r_t, one per turn                     nodes   per turn, its sampled node indices
    returns     R_t the advantages were taken from (``stepwise``), or None (other estimators)
    advantages  A_t, one per turn; [] when excluded
    excluded    why the trace was left out of its group, or None

The group is the trainable traces (``trace.agent.trainable``). Errored traces (``trace.ok``
False, or an episode whose ``ok`` is False: its env hook raised or its deadline expired) are
excluded: no advantages (``node.advantages`` stays None, "never scored" to verifiers), no part
in the baseline, and a record saying why, with the rewards they earned. A model-server fault
cuts a trajectory short for reasons the policy did not choose; its missing turns would bias
every return it holds. A stop the policy caused (a turn or token limit, an agent timeout) is
not an error: such traces are scored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from verifiers_stepwise.errors import ConfigError, RewardError, TraceError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.base import Estimate
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.traces.kinds import default_estimator
from verifiers_stepwise.traces.turns import (
    TURN_SCORES,
    Reading,
    TraceTurns,
    read_turn_states,
    read_turns,
    sampled_nodes,
)

if TYPE_CHECKING:
    from verifiers.v1 import Episode, Trace

__all__ = [
    "CREDIT",
    "Credit",
    "Missing",
    "MissingTurnRewards",
    "checked_estimate",
    "credit_group",
    "exclusion_reason",
    "lay_out",
    "read_credit",
    "score_group",
    "scored_turns",
    "write_credit",
]

CREDIT = "stepwise_credit"
"""The ``trace.info`` key of a trace's credit record."""

Missing = Literal["final_turn", "error"]


class MissingTurnRewards(TraceError):
    """A trace records no per-turn rewards and ``missing="error"`` was asked for."""


@dataclass(frozen=True, slots=True)
class Credit:
    """One trajectory's credit as ``credit_group`` made it (module docstring: the fields)."""

    estimator: str
    reading: Reading | Literal["final_turn"] | None
    rewards: list[float]
    nodes: list[list[int]] | None
    advantages: list[float]
    returns: list[float] | None = None
    excluded: str | None = None

    def node_turns(self) -> dict[int, int]:
        """The turn t holding each sampled node of the trace (empty without ``nodes``)."""
        return {i: t for t, held in enumerate(self.nodes or ()) for i in held}


def score_group(
    episodes: Sequence[Episode],
    estimator: Estimator | str | None = None,
    *,
    missing: Missing = "final_turn",
    reading: Reading = "rewards",
) -> dict[str, Credit]:
    """The credit records of a group's trainable traces, by trace id.

    Args:
      episodes: the episodes of one group (one prompt, all its rollouts).
      estimator: an ``Estimator`` instance, a registered name such as "stepwise" or "grpo"
        (its default config), or None: the default for the kind of credit the group's env
        declares (``traces.kinds``; the package default ``stepwise`` when it declares none).
      missing: what a trace without ``turn_rewards`` means (``scored_turns``): "final_turn"
        (the trace's reward on its last turn) or "error".
      reading: how ``trace.info["turn_rewards"]`` is read: "rewards", or "scores" (φ_t read by
        differences, as prime-rl PR #3282 reads the key; ``traces.turns``).

    Returns:
      One record per trainable trace, in episode then trace order; an excluded trace's record
      has no advantages and says why in ``excluded``. Nothing is written on the traces
      (``write_credit`` does that).
    """
    if missing not in ("final_turn", "error"):
        raise ConfigError(f"missing must be 'final_turn' or 'error', got {missing!r}")
    if estimator is None:
        estimator = default_estimator([trace for episode in episodes for trace in episode.traces])
    elif isinstance(estimator, str):
        estimator = get_estimator(estimator)
    elif not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be an Estimator or a registered name, got {type(estimator).__name__}")
    label = estimator.name or type(estimator).__name__
    order, records, scored = _sort_traces(episodes, label, missing, reading)
    if scored:
        made = credit_group(
            [turns.rewards for _, turns, _ in scored],
            estimator,
            readings=[how for *_, how in scored],
            nodes=[turns.nodes for _, turns, _ in scored],
            states=[read_turn_states(trace, len(turns.rewards)) for trace, turns, _ in scored],
        )
        records.update((trace.id, credit) for (trace, _, _), credit in zip(scored, made))
    return {trace_id: records[trace_id] for trace_id in order}


def _sort_traces(
    episodes: Sequence[Episode], label: str, missing: Missing, reading: Reading
) -> tuple[list[str], dict[str, Credit], list[tuple[Trace, TraceTurns, Reading | Literal["final_turn"]]]]:
    """The group's trainable traces in order, the records of those it excludes, and the turns
    of those it scores."""
    order: list[str] = []
    excluded: dict[str, Credit] = {}
    scored: list[tuple[Trace, TraceTurns, Reading | Literal["final_turn"]]] = []
    for episode in episodes:
        for trace in episode.traces:
            if not trace.agent.trainable:
                continue
            order.append(trace.id)
            reason = exclusion_reason(episode, trace)
            if reason is None:
                scored.append((trace, *scored_turns(trace, missing, reading)))
            else:
                excluded[trace.id] = _excluded(trace, label, reason, reading)
    return order, excluded, scored


def credit_group(
    rewards: Sequence[list[float]],
    estimator: Estimator,
    *,
    readings: Sequence[Reading | Literal["final_turn"] | None] | None = None,
    nodes: Sequence[list[list[int]] | None] | None = None,
    states: Sequence[Sequence[Any] | None] | None = None,
) -> list[Credit]:
    """The credit records of one group's trajectories from their per-turn rewards: the one
    place a record is made. ``score_group`` calls it with what it read from the traces; a host
    whose rollouts are not verifiers traces (tinker-cookbook's transitions, torchtitan's own
    envs) calls it with the rewards it translated, and lays the records out.

    Args:
      rewards: r_t per trajectory (each list is kept in its record, not copied).
      estimator: the estimator, named in the records by its registered name (or class name).
      readings: each trajectory's record ``reading`` (default "rewards").
      nodes: each trajectory's sampled node indices per turn (default None: no verifiers nodes).
      states: each trajectory's anchor state per turn (None: none recorded), for estimators
        that group turns by state (``gigpo``).

    Raises ValueError when ``readings``, ``nodes`` or ``states`` is not one per trajectory.
    """
    label = estimator.name or type(estimator).__name__
    anchored = None
    if states is not None and any(row is not None for row in states):
        anchored = [[[None] * len(r) if row is None else row for row, r in zip(states, rewards, strict=True)]]
    batch = RaggedBatch.from_groups([rewards], anchored)
    estimate = checked_estimate(estimator, batch, label)
    (advantages,) = batch.split(estimate.advantages)
    returns = batch.split(estimate.returns)[0] if estimate.returns is not None else [None] * len(rewards)
    return [
        Credit(label, how, turn_rewards, turn_nodes, values, turn_returns)
        for turn_rewards, how, turn_nodes, values, turn_returns in zip(
            rewards, readings or ["rewards"] * len(rewards), nodes or [None] * len(rewards), advantages, returns,
            strict=True,
        )
    ]  # fmt: skip


def checked_estimate(estimator: Estimator, batch: RaggedBatch, label: str) -> Estimate:
    """``estimator.estimate(batch)``, refused with a RewardError naming the group, trajectory
    and turn when it is not one finite advantage per turn (a third-party estimator's bug, or
    returns that overflow)."""
    estimate = estimator.estimate(batch)
    advantages = np.asarray(estimate.advantages, dtype=np.float64)
    if advantages.shape != (batch.n_turns,):
        raise RewardError(f"{label}: {advantages.shape} advantages for {batch.n_turns} turns")
    finite = np.isfinite(advantages)
    if not finite.all():
        i = int(np.argmin(finite))
        raise RewardError(f"{label}: advantage {float(advantages[i])!r} of {batch.where(i)} is not finite")
    return Estimate(estimate.returns, advantages)


def write_credit(trace: Trace, credit: Credit) -> None:
    """Keep ``credit`` on ``trace``: the record as ``trace.info["stepwise_credit"]`` and, unless
    it is excluded, turn t's A_t on every sampled token of turn t's nodes (``node.advantages``,
    one value per sampled token, the layout of ``node.logprobs``). Prompt, feedback and tool
    nodes, and nodes without sampled tokens (eval-client traces carry no token ids), get nothing."""
    trace.info[CREDIT] = {name: getattr(credit, name) for name in credit.__slots__}
    if credit.excluded is not None:
        return
    if credit.nodes is None or len(credit.nodes) != len(credit.advantages):
        raise TraceError(f"trace {trace.id}: {len(credit.advantages)} advantages for {len(credit.nodes or [])} turns")
    trace_nodes = trace.nodes
    for t, held in enumerate(credit.nodes):
        for i in held:
            node = trace_nodes[i]
            sampled = node.mask.count(True)  # a C loop; sum() adds bools one object at a time
            if sampled:
                node.advantages = lay_out(credit.advantages, ((t, sampled),))


def lay_out(advantages: Sequence[float], runs: Iterable[tuple[int | None, int]]) -> list[float]:
    """Per-token advantages of a token stream cut into runs: ``(t, n)`` is n tokens of turn t,
    each carrying A_t = ``advantages[t]``; ``(None, n)`` n tokens of no turn (prompt, feedback,
    template), each 0.0. An excluded record's empty ``advantages`` lay 0.0 on every token.

    The one function every host lays credit with: prime-rl's nodes (``write_credit``), TRL's
    completion, tinker's datums and torchtitan's samples."""
    out: list[float] = []
    for t, n in runs:
        out += [float(advantages[t]) if t is not None and advantages else 0.0] * n
    return out


def read_credit(trace: Trace) -> Credit | None:
    """The credit record ``write_credit`` kept on ``trace``, or None when it has none. Raises
    TraceError when ``trace.info["stepwise_credit"]`` is not such a record."""
    raw = (trace.info or {}).get(CREDIT)
    if raw is None:
        return None
    try:
        return Credit(**raw)
    except TypeError as error:
        raise TraceError(f"trace {trace.id}: trace.info[{CREDIT!r}] is not a credit record: {error}") from None


def _excluded(trace: Trace, label: str, reason: str, reading: Reading) -> Credit:
    """An excluded trace's record: the turns it earned, if they can be read, and why it is out."""
    try:
        turns = read_turns(trace, reading)
    except TraceError as error:  # an errored trace may stop mid-turn; say so, keep the reason
        return Credit(label, None, [], None, [], excluded=f"{reason}; its turn data does not read: {error}")
    if turns is None:
        return Credit(label, None, [], None, [], excluded=reason)
    return Credit(label, _reading(trace, reading), turns.rewards, turns.nodes, [], excluded=reason)


def exclusion_reason(episode: Episode, trace: Trace) -> str | None:
    """Why ``score_group`` excludes ``trace`` (of ``episode``) from its group, or None when it
    is scored: the trace's or the episode's last error, or that it errored without one."""
    if not trace.ok:
        return f"trace errored (stop {trace.stop_condition!r}){_last_error(trace.errors)}"
    if not episode.ok:
        return f"episode errored{_last_error(episode.errors)}"
    return None


def _last_error(errors: Sequence[Any]) -> str:
    return f": {errors[-1].type}: {errors[-1].message}" if errors else ""


def _reading(trace: Trace, reading: Reading) -> Reading:
    return "scores" if reading == "scores" or TURN_SCORES in (trace.info or {}) else "rewards"


def scored_turns(
    trace: Trace, missing: Missing = "final_turn", reading: Reading = "rewards"
) -> tuple[TraceTurns, Reading | Literal["final_turn"]]:
    """The turns credited for a trace that is scored, and how their rewards were read: the
    turns it records (``read_turns``, with ``reading`` saying how ``turn_rewards`` is read),
    or, when it records none (no ``turn_rewards``, or an empty list: no turn was scored), what
    ``missing`` says: "final_turn" makes every sampled node a turn, the earlier ones with
    reward 0 and the last with ``trace.reward`` (one turn without nodes when the model never
    spoke); "error" raises MissingTurnRewards. ``score_group`` and ``vf-stepwise`` both decide
    with this one rule."""
    turns = read_turns(trace, reading)
    if turns is not None:
        return turns, _reading(trace, reading)
    if missing == "error":
        raise MissingTurnRewards(
            f"trace {trace.id}: no turn_rewards in trace.info (missing='final_turn' would score the trace "
            f"reward as the final turn's reward)"
        )
    reward = trace.reward
    if not math.isfinite(reward):
        raise TraceError(f"trace {trace.id}: trace reward {reward!r} is not finite")
    sampled = sampled_nodes(trace)
    if not sampled:
        return TraceTurns([reward], [[]]), "final_turn"
    return TraceTurns([0.0] * (len(sampled) - 1) + [reward], [[i] for i in sampled]), "final_turn"
