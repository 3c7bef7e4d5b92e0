"""Stepwise credit for one group of verifiers v1 episodes (all rollouts of one prompt).

    score_group(episodes, estimator) -> per-turn advantages, one list per trace

reads each trace's per-turn rewards (``verifiers_stepwise.traces.turns``) and, when recorded,
each turn's anchor state (``turn_states``, which ``gigpo`` reads), runs the estimator on the
group, and places turn t's advantage on turn t's sampled tokens (``node.advantages``). The
result is also recorded on each trace as ``trace.info["turn_credit"]`` — the only place it
shows for eval-client traces, which carry no tokens to write on.

Which traces form the group: trainable traces (``trace.agent.trainable``) of episodes and
traces that completed without error. Errored traces — ``trace.ok`` False, or an episode whose
``ok`` is False (its env hook raised or its deadline expired) — are excluded: they get no
advantages (``node.advantages`` stays None, which verifiers reads as "never scored") and do
not enter the baseline, and ``trace.info["turn_credit"]["excluded"]`` says why. The reason:
a model-server fault or crash cuts the trajectory short for reasons the policy did not choose;
its missing later turns would bias every discounted return it holds, and learning from it
would teach the policy about infrastructure. The turn rewards it earned stay on the trace.
A stop the policy caused (a turn or token limit, an agent timeout) is not an error: such
traces are scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.traces.turns import (
    Reading,
    TraceTurns,
    TurnSchemaError,
    place_advantages,
    read_turn_states,
    read_turns,
    sampled_nodes,
)

if TYPE_CHECKING:
    from verifiers.v1 import Episode, Trace

__all__ = ["CREDIT", "Missing", "MissingTurnRewards", "credit_turns", "exclusion_reason", "score_group"]

CREDIT = "turn_credit"

Missing = Literal["final_turn", "error"]


class MissingTurnRewards(TurnSchemaError):
    """A trace records no per-turn rewards and ``missing="error"`` was asked for."""


def score_group(
    episodes: Sequence[Episode],
    estimator: Estimator | str,
    *,
    missing: Missing = "final_turn",
    turn_rewards: Reading = "rewards",
) -> list[list[float]]:
    """Advantages for every turn of a group's trainable, error-free traces, written on nodes.

    Args:
      episodes: the episodes of one group (one prompt, all its rollouts).
      estimator: an ``Estimator`` instance, or a registered name such as "stepwise" or
        "grpo" (its default config).
      missing: what a trace without ``turn_rewards`` means. "final_turn": every sampled node
        is a turn, the earlier ones with reward 0 and the last with the trace's reward
        ``trace.reward`` (one turn without nodes when the model never spoke); "error": raise.
      turn_rewards: how ``trace.info["turn_rewards"]`` is read: "rewards" (per-turn rewards,
        ``None`` rejected) or "scores" (per-turn scores φ_t, ``None`` = unscored, credited by
        differences as prime-rl PR #3282 reads the key; see ``traces.turns``).

    Returns:
      One list per trace, in episode order then trace order: the per-turn advantages of a
      scored trace, ``[]`` for an untrainable or excluded one.
    """
    if missing not in ("final_turn", "error"):
        raise ConfigError(f"missing must be 'final_turn' or 'error', got {missing!r}")
    if isinstance(estimator, str):
        label, estimator = estimator, get_estimator(estimator)
    elif isinstance(estimator, Estimator):
        label = type(estimator).__name__
    else:
        raise TypeError(f"estimator must be an Estimator or a registered name, got {type(estimator).__name__}")
    traces = [(episode, trace) for episode in episodes for trace in episode.traces]
    advantages: list[list[float]] = [[] for _ in traces]
    group: list[tuple[int, Trace, TraceTurns]] = []
    for k, (episode, trace) in enumerate(traces):
        if not trace.agent.trainable:
            continue
        reason = exclusion_reason(episode, trace)
        if reason is not None:
            trace.info[CREDIT] = {"estimator": label, "excluded": reason}
            continue
        group.append((k, trace, credit_turns(trace, missing, turn_rewards)))
    if not group:
        return advantages
    rewards = [turns.rewards for _, _, turns in group]
    states = [read_turn_states(trace, len(turns.rewards)) for _, trace, turns in group]
    if any(row is not None for row in states):  # anchor states, for estimators that group by them (gigpo)
        scored = estimator(rewards, [[None] * len(r) if row is None else row for row, r in zip(states, rewards)])
    else:
        scored = estimator(rewards)
    for (k, trace, turns), values in zip(group, scored):
        place_advantages(trace, turns, values)
        trace.info[CREDIT] = {"estimator": label, "rewards": turns.rewards, "advantages": values}
        advantages[k] = values
    return advantages


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


def credit_turns(trace: Trace, missing: Missing = "final_turn", turn_rewards: Reading = "rewards") -> TraceTurns:
    """The turns credited for a trace that is scored: the turns it records (``read_turns``, with
    ``turn_rewards`` saying how that key is read),
    or, when it records none (no ``turn_rewards``, or an empty list: no turn was scored), what
    ``missing`` says: "final_turn" makes every sampled node a turn, the earlier ones with
    reward 0 and the last with ``trace.reward`` (one turn without nodes when the model never
    spoke); "error" raises MissingTurnRewards. ``score_group`` and ``vf-stepwise`` both
    decide with this one rule."""
    turns = read_turns(trace, turn_rewards)
    if turns is not None:
        return turns
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
        return TraceTurns([reward], [[]])
    return TraceTurns([0.0] * (len(sampled) - 1) + [reward], [[i] for i in sampled])
