"""Stepwise credit for one group of verifiers v1 episodes (all rollouts of one prompt).

    score_group(episodes, estimator) -> one Credit per trace (None for an untrainable one)

reads each trace's per-turn rewards (``verifiers_stepwise.traces.turns``) and, when recorded,
each turn's anchor state (``turn_states``, which ``gigpo`` reads), runs the estimator on the
group, and places turn t's advantage on turn t's sampled tokens (``node.advantages``). What it
decided is one record per trace, ``Credit``, kept once on the trace as
``trace.info["stepwise_credit"]`` (serialized with it, so ``traces.jsonl`` carries it; read
back with ``read_credit``). Hosts, metrics and the tests lay this record out; none of them
reads the turns again. For eval-client traces, which carry no tokens, it is the only place the
credit shows. The record, version 2:

    version     2
    estimator   the name the estimator was looked up by (or its class name)
    reading     how the turns were read: "rewards" (``turn_rewards``), "scores" (``turn_scores``,
                or ``turn_rewards`` read as scores) or "final_turn" (neither: ``missing``)
    rewards     r_t, one per turn                     nodes   per turn, its sampled node indices
    returns     R_t the advantages were taken from (``stepwise``), or None (other estimators)
    advantages  A_t, one per turn; [] when excluded
    excluded    why the trace was left out of its group, or None

Version 1 (before 0.4, under the key ``"turn_credit"``): ``{"estimator", "rewards",
"advantages"}`` or ``{"estimator", "excluded"}``, and on prime-rl also ``"turn_rewards"``
naming the reading; ``read_credit`` reads it as a ``Credit`` with ``version`` 1 and what it
did not record (nodes, returns, maybe the reading) None.

Which traces form the group: trainable traces (``trace.agent.trainable``) of episodes and
traces that completed without error. Errored traces — ``trace.ok`` False, or an episode whose
``ok`` is False (its env hook raised or its deadline expired) — are excluded: they get no
advantages (``node.advantages`` stays None, which verifiers reads as "never scored") and do
not enter the baseline, and their record says why. The reason: a model-server fault or crash
cuts the trajectory short for reasons the policy did not choose; its missing later turns would
bias every discounted return it holds, and learning from it would teach the policy about
infrastructure. The turn rewards it earned stay on the trace and in its record. A stop the
policy caused (a turn or token limit, an agent timeout) is not an error: such traces are scored.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from verifiers_stepwise.errors import ConfigError, TraceError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.traces.turns import (
    TURN_SCORES,
    Reading,
    TraceTurns,
    TurnSchemaError,
    deprecated_reading,
    place_advantages,
    read_turn_states,
    read_turns,
    sampled_nodes,
)

if TYPE_CHECKING:
    from verifiers.v1 import Episode, Trace

__all__ = [
    "CREDIT",
    "CREDIT_VERSION",
    "Credit",
    "Missing",
    "MissingTurnRewards",
    "Source",
    "credit_group",
    "exclusion_reason",
    "read_credit",
    "score_group",
    "scored_turns",
]

CREDIT = "stepwise_credit"
"""The ``trace.info`` key of a trace's credit record."""
CREDIT_VERSION = 2
_CREDIT_V1 = "turn_credit"  # version 1's key

Missing = Literal["final_turn", "error"]
Source = Literal["rewards", "scores", "final_turn"]
"""Where a trace's turn rewards came from (a credit record's ``reading``)."""


class MissingTurnRewards(TurnSchemaError):
    """A trace records no per-turn rewards and ``missing="error"`` was asked for."""


@dataclass(frozen=True, slots=True)
class Credit:
    """One trace's credit as ``score_group`` made it (module docstring: the fields)."""

    estimator: str
    reading: Source | None
    rewards: list[float]
    nodes: list[list[int]] | None
    advantages: list[float]
    returns: list[float] | None = None
    excluded: str | None = None
    version: int = CREDIT_VERSION

    def to_info(self) -> dict[str, Any]:
        """The record as ``trace.info`` keeps it (plain JSON types; the lists are shared, not
        copied — trainers write one per trace per step — so treat both as read-only)."""
        return {name: getattr(self, name) for name in self.__slots__}


def read_credit(trace: Trace) -> Credit | None:
    """The credit record on ``trace`` (version 2, or version 1 under its old key), or None when
    it was never scored. Raises TraceError when the record is not one ``score_group`` writes."""
    info = trace.info or {}
    raw = info.get(CREDIT)
    if raw is None:
        old = info.get(_CREDIT_V1)
        return None if old is None else _version_1(trace, old)
    try:
        if raw.get("version") != CREDIT_VERSION:
            raise TypeError(f"version {raw.get('version')!r}, this package writes {CREDIT_VERSION}")
        return Credit(**raw)
    except (AttributeError, TypeError) as error:
        raise TraceError(f"trace {trace.id}: trace.info[{CREDIT!r}] is not a credit record: {error}") from None


def _version_1(trace: Trace, raw: Any) -> Credit:
    if not isinstance(raw, Mapping) or "estimator" not in raw:
        raise TraceError(f"trace {trace.id}: trace.info[{_CREDIT_V1!r}] is not a version 1 credit record")
    return Credit(
        estimator=raw["estimator"],
        reading=raw.get("turn_rewards"),
        rewards=list(raw.get("rewards", [])),
        nodes=None,
        advantages=list(raw.get("advantages", [])),
        excluded=raw.get("excluded"),
        version=1,
    )


def score_group(
    episodes: Sequence[Episode],
    estimator: Estimator | str,
    *,
    missing: Missing = "final_turn",
    reading: Reading = "rewards",
    turn_rewards: Reading | None = None,
) -> list[Credit | None]:
    """Credit every turn of a group's trainable, error-free traces: advantages on their nodes,
    and each trainable trace's record on ``trace.info["stepwise_credit"]``.

    Args:
      episodes: the episodes of one group (one prompt, all its rollouts).
      estimator: an ``Estimator`` instance, or a registered name such as "stepwise" or
        "grpo" (its default config).
      missing: what a trace without ``turn_rewards`` means. "final_turn": every sampled node
        is a turn, the earlier ones with reward 0 and the last with the trace's reward
        ``trace.reward`` (one turn without nodes when the model never spoke); "error": raise.
      reading: how ``trace.info["turn_rewards"]`` is read: "rewards" (per-turn rewards,
        ``None`` rejected) or "scores" (per-turn scores φ_t, ``None`` = unscored, credited by
        differences as prime-rl PR #3282 reads the key; see ``traces.turns``).
      turn_rewards: the old name of ``reading`` (deprecated).

    Returns:
      One record per trace, in episode order then trace order; None for an untrainable trace.
      An excluded trace's record has no advantages and says why in ``excluded``.
    """
    reading = deprecated_reading(reading, turn_rewards, "score_group")
    if missing not in ("final_turn", "error"):
        raise ConfigError(f"missing must be 'final_turn' or 'error', got {missing!r}")
    if isinstance(estimator, str):
        estimator = get_estimator(estimator)
    elif not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be an Estimator or a registered name, got {type(estimator).__name__}")
    label = estimator.name or type(estimator).__name__
    # One pass over the traces: each is untrainable (None), excluded (its record now) or scored.
    records: list[Credit | None] = []
    group: list[tuple[int, Trace, TraceTurns, Source]] = []
    for episode in episodes:
        for trace in episode.traces:
            if not trace.agent.trainable:
                records.append(None)
            elif (reason := exclusion_reason(episode, trace)) is not None:
                records.append(_record(trace, _excluded(trace, label, reason, reading)))
            else:
                group.append((len(records), trace, *scored_turns(trace, missing, reading)))
                records.append(None)
    if not group:
        return records
    made = credit_group(
        [turns.rewards for _, _, turns, _ in group],
        estimator,
        label=label,
        readings=[source for *_, source in group],
        nodes=[turns.nodes for _, _, turns, _ in group],
        states=[read_turn_states(trace, len(turns.rewards)) for _, trace, turns, _ in group],
    )
    for (k, trace, turns, _), credit in zip(group, made):
        place_advantages(trace, turns, credit.advantages)
        records[k] = _record(trace, credit)
    return records


def credit_group(
    rewards: Sequence[list[float]],
    estimator: Estimator,
    *,
    label: str | None = None,
    readings: Sequence[Source | None] | None = None,
    nodes: Sequence[list[list[int]] | None] | None = None,
    states: Sequence[Sequence[Any] | None] | None = None,
) -> list[Credit]:
    """The credit records of one group's trajectories from their per-turn rewards: the one
    place a record is made. ``score_group`` calls it with what it read from the traces; a host
    whose rollouts are not verifiers traces (tinker-cookbook's transitions, torchtitan's own
    envs) calls it with the rewards it translated, and lays the records out.

    Args:
      rewards: r_t per trajectory (each list is kept in its record, not copied).
      estimator: the estimator; ``label`` names it in the records (default its registered name).
      readings: each trajectory's record ``reading`` (default "rewards").
      nodes: each trajectory's sampled node indices per turn (default None: no verifiers nodes).
      states: each trajectory's anchor state per turn (None: none recorded), for estimators
        that group turns by state (``gigpo``).

    Raises ValueError when ``readings``, ``nodes`` or ``states`` is not one per trajectory.
    """
    label = label or estimator.name or type(estimator).__name__
    anchored = None
    if states is not None and any(row is not None for row in states):
        anchored = [[[None] * len(r) if row is None else row for row, r in zip(states, rewards, strict=True)]]
    batch = RaggedBatch.from_groups([rewards], anchored)
    estimate = estimator.estimate(batch)
    (advantages,) = batch.split(estimate.advantages)
    returns = batch.split(estimate.returns)[0] if estimate.returns is not None else [None] * len(rewards)
    readings = readings or ["rewards"] * len(rewards)
    nodes = nodes or [None] * len(rewards)
    return [
        Credit(label, source, turn_rewards, turn_nodes, values, turn_returns)
        for turn_rewards, source, turn_nodes, values, turn_returns in zip(
            rewards, readings, nodes, advantages, returns, strict=True
        )
    ]


def _record(trace: Trace, credit: Credit) -> Credit:
    trace.info.pop(_CREDIT_V1, None)  # a version 1 record from an earlier scoring is superseded
    trace.info[CREDIT] = credit.to_info()
    return credit


def _excluded(trace: Trace, label: str, reason: str, reading: Reading) -> Credit:
    """An excluded trace's record: the turns it earned, if they can be read, and why it is out."""
    try:
        turns = read_turns(trace, reading)
    except TurnSchemaError as error:  # an errored trace may stop mid-turn; say so, keep the reason
        return Credit(label, None, [], None, [], excluded=f"{reason}; its turn data does not read: {error}")
    if turns is None:
        return Credit(label, None, [], None, [], excluded=reason)
    return Credit(label, _source(trace, reading), turns.rewards, turns.nodes, [], excluded=reason)


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


def _source(trace: Trace, reading: Reading) -> Source:
    return "scores" if reading == "scores" or TURN_SCORES in (trace.info or {}) else "rewards"


def scored_turns(
    trace: Trace, missing: Missing = "final_turn", reading: Reading = "rewards"
) -> tuple[TraceTurns, Source]:
    """The turns credited for a trace that is scored, and where their rewards came from: the
    turns it records (``read_turns``, with ``reading`` saying how ``turn_rewards`` is read),
    or, when it records none (no ``turn_rewards``, or an empty list: no turn was scored), what
    ``missing`` says: "final_turn" makes every sampled node a turn, the earlier ones with
    reward 0 and the last with ``trace.reward`` (one turn without nodes when the model never
    spoke); "error" raises MissingTurnRewards. ``score_group``, ``vf-stepwise`` and the
    torchtitan rollouter all decide with this one rule."""
    turns = read_turns(trace, reading)
    if turns is not None:
        return turns, _source(trace, reading)
    if missing == "error":
        raise MissingTurnRewards(
            f"trace {trace.id}: no turn_rewards in trace.info (missing='final_turn' would score the trace "
            f"reward as the final turn's reward)"
        )
    reward = trace.reward
    if not math.isfinite(reward):
        raise TurnSchemaError(f"trace {trace.id}: trace reward {reward!r} is not finite")
    sampled = sampled_nodes(trace)
    if not sampled:
        return TraceTurns([reward], [[]]), "final_turn"
    return TraceTurns([0.0] * (len(sampled) - 1) + [reward], [[i] for i in sampled]), "final_turn"


def __getattr__(name: str) -> Any:
    if name == "credit_turns":  # renamed in 0.4: "credit" named both this rule and the record
        warnings.warn(
            "verifiers_stepwise.traces.credit.credit_turns is deprecated: use scored_turns (which also returns "
            "where the rewards came from)",
            DeprecationWarning,
            stacklevel=2,
        )
        return lambda trace, missing="final_turn", turn_rewards="rewards": scored_turns(trace, missing, turn_rewards)[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
