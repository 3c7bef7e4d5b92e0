"""Verifiers episodes → TRL's ``rollout_func`` fields, with stepwise credit on every token.

One episode (one trace: the seat being trained) is one TRL sample. Its trace holds one branch
(``TurnFormatRenderer`` extends the conversation token by token), laid out as

    prompt_ids      the branch up to the first sampled token (the task's rendered prompt)
    completion_ids  everything after: sampled replies and the env's feedback turns in between
    env_mask        1 on sampled tokens, 0 on feedback/tool/template tokens (TRL: ``tool_mask``)
    logprobs        the sampling logprobs on sampled tokens, 0.0 elsewhere
    advantages      turn t's advantage A_t (``credit.score_group``) on turn t's sampled tokens,
                    0.0 elsewhere — exactly ``Branch.advantages`` after scoring

An episode whose model call failed (or that errored otherwise) keeps the tokens it produced,
carries reward None (TRL counts it unscorable) and no advantage; ``score_group`` leaves it out
of its group's baseline and records why on ``trace.info["turn_credit"]``. An episode with no
tokens after its prompt (or none at all: its first call failed) gets one pad token outside the
loss in each empty part, since TRL needs a non-empty prompt and completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.traces.credit import CREDIT, score_group
from verifiers_stepwise.traces.turns import read_turns

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["EpisodeSample", "episode_sample", "score_groups"]


@dataclass(frozen=True)
class EpisodeSample:
    """One episode as TRL trains on it (lists aligned as the module docstring says)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    advantages: list[float]
    reward: float | None
    """The trace's reward (TRL's ``reward`` metric); None when the episode errored."""
    turn_rewards: list[float]
    turn_advantages: list[float]
    """The turns as ``score_group`` credited them (its record on the trace); empty when the
    episode was excluded from credit (its ``turn_rewards`` then are the turns it earned)."""
    excluded: str | None
    """Why ``score_group`` left the episode out, or None."""


def score_groups(
    groups: Sequence[Sequence[vf.Episode]], estimator: Estimator, pad_token_id: int
) -> list[EpisodeSample]:
    """Score each group with ``estimator`` and lay every episode out, groups in order."""
    samples: list[EpisodeSample] = []
    for episodes in groups:
        score_group(episodes, estimator)
        samples.extend(episode_sample(episode, pad_token_id) for episode in episodes)
    return samples


def episode_sample(episode: vf.Episode, pad_token_id: int) -> EpisodeSample:
    """The TRL sample of one scored episode; raises ValueError when it cannot be one sample."""
    trainable = [trace for trace in episode.traces if trace.agent.trainable]
    if len(trainable) != 1:
        raise ValueError(
            f"episode {episode.id}: the TRL host trains one seat, but the episode has {len(trainable)} trainable traces"
        )
    (trace,) = trainable
    branches = trace.branches
    if len(branches) > 1:
        raise ValueError(
            f"trace {trace.id}: {len(branches)} branches; one TRL sample needs one (re-rendered turns fork the "
            "graph — use the TurnFormatRenderer, which extends the conversation token by token)"
        )
    credit = trace.info.get(CREDIT, {})
    excluded = credit.get("excluded")
    # A scored episode's turns are its credit record's, so the metrics show what the loss trains
    # on; an excluded one keeps the turns it earned (read from the trace), trained on by nothing.
    if excluded:
        turns = read_turns(trace)
        turn_rewards = turns.rewards if turns is not None else []
    else:
        turn_rewards = list(credit.get("rewards", []))
    tokens, mask, logprobs, advantages = [], [], [], None
    if branches:
        branch = branches[0]
        tokens, mask, logprobs, advantages = branch.token_ids, branch.sampled_mask, branch.logprobs, branch.advantages
    start = mask.index(True) if True in mask else len(tokens)
    advantages = advantages[start:] if advantages is not None else [0.0] * (len(tokens) - start)
    completion, env_mask, logprobs = tokens[start:], [int(m) for m in mask[start:]], logprobs[start:]
    if not completion:
        completion, env_mask, logprobs, advantages = [pad_token_id], [0], [0.0], [0.0]
    return EpisodeSample(
        prompt_ids=tokens[:start] or [pad_token_id],
        completion_ids=completion,
        env_mask=env_mask,
        logprobs=logprobs,
        advantages=advantages,
        reward=None if excluded else trace.reward,
        turn_rewards=turn_rewards,
        turn_advantages=[] if excluded else list(credit.get("advantages", [])),
        excluded=excluded,
    )
