"""Verifiers episodes → TRL's ``rollout_func`` fields, with stepwise credit on every token.

One episode (one trace: the seat being trained) is one TRL sample. Its trace holds one branch
(the host's renderers extend the conversation token by token), laid out as

    prompt_ids      the branch up to the first sampled token (the task's rendered prompt)
    completion_ids  everything after: sampled replies and the env's feedback turns in between
    env_mask        1 on sampled tokens, 0 on feedback/tool/template tokens (TRL: ``tool_mask``)
    logprobs        the sampling logprobs on sampled tokens, 0.0 elsewhere
    advantages      the trace's credit record laid out on the completion (``credit.lay_out``):
                    turn t's A_t on turn t's sampled tokens, 0.0 elsewhere

An errored episode keeps the tokens it produced, with reward None (TRL counts it unscorable)
and no advantage (``score_group`` leaves it out of its group's baseline and says why). An empty
prompt or completion (a first call that failed) is one pad token outside the loss: TRL needs both.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.traces.credit import Credit, lay_out, score_group
from verifiers_stepwise.traces.turns import Reading

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
    credit: Credit
    """The trace's credit record, which the loss (``advantages``) and the metrics both lay out;
    an excluded episode's has no advantages, its ``rewards`` are the turns it earned."""


def score_groups(
    groups: Sequence[Sequence[vf.Episode]], estimator: Estimator, pad_token_id: int, reading: Reading = "rewards"
) -> list[EpisodeSample]:
    """Credit each group with ``estimator`` (``score_group``, ``reading`` as it takes it) and lay
    every episode out on its tokens, groups in order."""
    samples: list[EpisodeSample] = []
    for episodes in groups:
        records = score_group(episodes, estimator, reading=reading)
        samples += [episode_sample(episode, records, pad_token_id) for episode in episodes]
    return samples


def episode_sample(episode: vf.Episode, records: Mapping[str, Credit], pad_token_id: int) -> EpisodeSample:
    """The TRL sample of one scored episode, given its group's credit records (by trace id);
    raises ValueError when it cannot be one sample."""
    trainable = [trace for trace in episode.traces if trace.agent.trainable]
    if len(trainable) != 1:
        raise ValueError(
            f"episode {episode.id}: the TRL host trains one seat, but the episode has {len(trainable)} trainable traces"
        )
    (trace,) = trainable
    credit = records[trace.id]
    branches = trace.branches
    if len(branches) > 1:
        raise ValueError(
            f"trace {trace.id}: {len(branches)} branches; one TRL sample needs one (re-rendered turns fork the "
            "graph — use the TurnFormatRenderer, which extends the conversation token by token)"
        )
    tokens, mask, logprobs, advantages = [], [], [], []
    if branches:
        (branch,) = branches
        tokens, mask, logprobs = branch.token_ids, branch.sampled_mask, branch.logprobs
        advantages = lay_out(credit.advantages, _runs(trace, branch, credit))
    start = mask.index(True) if True in mask else len(tokens)
    completion, env_mask = tokens[start:], [int(m) for m in mask[start:]]
    logprobs, advantages = logprobs[start:], advantages[start:]
    if not completion:
        completion, env_mask, logprobs, advantages = [pad_token_id], [0], [0.0], [0.0]
    return EpisodeSample(
        prompt_ids=tokens[:start] or [pad_token_id],
        completion_ids=completion,
        env_mask=env_mask,
        logprobs=logprobs,
        advantages=advantages,
        reward=None if credit.excluded else trace.reward,
        credit=credit,
    )


def _runs(trace: vf.Trace, branch: vf.Branch, credit: Credit) -> Iterator[tuple[int | None, int]]:
    """The branch's tokens as runs of one turn's sampled tokens (the turn of their node) or of
    unsampled ones (None), for ``lay_out``."""
    turn_of = credit.node_turns()
    index_of = {id(node): i for i, node in enumerate(trace.nodes)}
    for node in branch.nodes:
        turn = turn_of.get(index_of[id(node)])
        for sampled, run in itertools.groupby(node.mask):
            yield (turn if sampled else None), sum(1 for _ in run)
