"""tinker-cookbook (0.6.1): each transition's advantage on its own action tokens.

Shapes translated (checked against tinker-cookbook 0.6.1 and tinker 0.38.0 from PyPI):

    TrajectoryGroup.trajectories_G[j].transitions[t]          (tinker trajectory group)
      → r_{j,t} = transitions[t].reward, plus final_rewards_G[j] on the last transition,
        so Σ_t r_{j,t} is tinker's own total reward (``get_total_rewards()[j]``)
      → A_{j,t}: one credit record per trajectory, made once per group (``group_credit``)
      → ``Datum.loss_fn_inputs["advantages"]``: A_{j,t} on transition t's action tokens (``lay_out``),
        0 on observation tokens and on parse-error-masked transitions, exactly where tinker
        puts its one trajectory advantage (tinker builds the datums; only values change).

tinker-cookbook has no advantage hook: ``tinker_cookbook.rl.train`` calls its functions through
its module globals, which ``use_estimator`` rebinds for the duration of a ``with`` block.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from verifiers_stepwise.estimators import Estimator
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.extras import requires
from verifiers_stepwise.hosts import estimator_from
from verifiers_stepwise.traces.credit import Credit, credit_group, lay_out

# What tinker_cookbook.rl imports; tinker-cookbook itself needs --no-deps (see pyproject's extra).
with requires(
    "verifiers_stepwise.hosts.tinker",
    "tinker_cookbook",
    "tinker",
    "chz",
    "torch",
    "datasets",
    "PIL",
    "blobfile",
    "termcolor",
    extra="tinker",
    also="pip install --no-deps tinker-cookbook==0.6.1",
):
    import chz
    import tinker
    from tinker import TensorData
    from tinker_cookbook.rl import data_processing
    from tinker_cookbook.rl import train as tinker_train
    from tinker_cookbook.rl.types import PARSE_ERROR_MASKED_METRIC_KEY, Trajectory, TrajectoryGroup

__all__ = [
    "CLIConfig",
    "assemble_training_data",
    "compute_advantages",
    "group_credit",
    "main",
    "turn_rewards",
    "use_estimator",
]

logger = logging.getLogger(__name__)

# group → trajectory → transition
TurnAdvantagesP = list[list[list[float]]]


def turn_rewards(group: TrajectoryGroup) -> list[list[float]]:
    """r_{j,t} of one group. A trajectory with no transitions counts as one turn holding its
    final reward, as tinker's total counts it; it has no tokens to credit."""
    rewards = []
    for trajectory, final_reward in zip(group.trajectories_G, group.final_rewards_G, strict=True):
        per_turn = [transition.reward for transition in trajectory.transitions] or [0.0]
        per_turn[-1] += final_reward
        rewards.append(per_turn)
    return rewards


_CREDIT = "stepwise_credit"  # the attribute of a TrajectoryGroup that keeps its records


def group_credit(group: TrajectoryGroup, estimator: Estimator) -> list[Credit]:
    """The credit record of each trajectory of ``group`` (rewards ``turn_rewards(group)``),
    made on the first call and kept on the group, so that tinker's filters and its training
    data lay out the same records instead of estimating twice. A group is credited alone
    (its baseline is its own), so a record does not depend on which groups it is batched with."""
    kept = group.__dict__.get(_CREDIT)
    if kept is not None and kept[0] is estimator:
        return kept[1]
    records = credit_group(turn_rewards(group), estimator)
    group.__dict__[_CREDIT] = (estimator, records)
    return records


def compute_advantages(groups: list[TrajectoryGroup], *, estimator: Estimator) -> TurnAdvantagesP:
    """Replacement for tinker's ``compute_advantages``: A[g][j][t] per transition, each
    trajectory's advantages from its credit record (``group_credit``)."""
    return [[credit.advantages for credit in group_credit(group, estimator)] for group in groups]


def assemble_training_data(
    groups: list[TrajectoryGroup],
    advantages_P: TurnAdvantagesP,
    include_provenance: bool = True,
) -> tuple[list[tinker.Datum], list[dict[str, int]]]:
    """Replacement for tinker's ``assemble_training_data`` taking per-transition advantages."""
    data_D: list[tinker.Datum] = []
    metadata_D: list[dict[str, int]] = []
    for g, (group, advantages_G) in enumerate(zip(groups, advantages_P, strict=True)):
        for j, (trajectory, per_turn) in enumerate(zip(group.trajectories_G, advantages_G, strict=True)):
            data = _trajectory_to_data(trajectory, per_turn, include_provenance, where=f"group {g}, trajectory {j}")
            data_D.extend(data)
            metadata_D.extend({"group_idx": g, "traj_idx": j} for _ in data)
    return data_D, metadata_D


def _trajectory_to_data(
    trajectory: Trajectory, per_turn: Sequence[float], include_provenance: bool, where: str
) -> list[tinker.Datum]:
    # tinker builds the datums with advantage 1 on every credited action token (0 elsewhere);
    # those tokens appear transition by transition, so turn t's run of them gets A_t.
    data = data_processing.trajectory_to_data(trajectory, 1.0, include_provenance=include_provenance)
    credited = [
        (t, len(transition.ac.tokens))
        for t, transition in enumerate(trajectory.transitions)
        if float(transition.metrics.get(PARSE_ERROR_MASKED_METRIC_KEY, 0.0)) < 1.0
    ]
    values = np.array(lay_out(per_turn, credited), dtype=np.float32)
    out, used = [], 0
    for datum in data:
        layout = datum.loss_fn_inputs["advantages"].to_numpy()
        positions = np.flatnonzero(layout == 1.0)
        advantages = np.zeros(layout.shape, dtype=np.float32)
        advantages[positions] = values[used : used + positions.size]
        used += positions.size
        inputs = {**datum.loss_fn_inputs, "advantages": TensorData.from_numpy(advantages)}
        out.append(replace(datum, loss_fn_inputs=inputs))
    if used != values.size:
        raise ValueError(
            f"{where}: tinker trains {used} action tokens but the transitions hold {values.size}; "
            "a datum that starts with an action token (empty observation) cannot be credited"
        )
    return out


def _carries_credit(group: TrajectoryGroup, estimator: Estimator) -> bool:
    return any(a != 0.0 for credit in group_credit(group, estimator) for a in credit.advantages)


def _remove_groups_without_credit(groups: list[TrajectoryGroup], *, estimator: Estimator) -> list[TrajectoryGroup]:
    """Replacement for ``remove_constant_reward_groups``: keep groups with a nonzero advantage.

    Equal totals do not mean no credit once turns are scored. Like tinker, returns one group
    when none is kept, since an empty batch breaks the training loop.
    """
    kept = [group for group in groups if _carries_credit(group, estimator)]
    if not kept:
        logger.warning("No group carries any nonzero advantage. There will be no gradient")
        return groups[:1]
    return kept


def _keep_groups_with_credit(original: Callable[..., Any], estimator: Estimator) -> Callable[..., Any]:
    """Wrap tinker's per-group filter so it only sees (and may drop) groups without credit."""

    def drop_constant_reward_group(
        trajectory_group: TrajectoryGroup | None, config: Any, *args: Any, **kwargs: Any
    ) -> TrajectoryGroup | None:
        if trajectory_group is not None and _carries_credit(trajectory_group, estimator):
            return trajectory_group
        return original(trajectory_group, config, *args, **kwargs)

    return drop_constant_reward_group


@contextmanager
def use_estimator(estimator: str | Estimator = "stepwise", **options: Any) -> Iterator[Estimator]:
    """Train with ``estimator`` (a registered name configured with ``options``, or an
    ``Estimator``) inside the ``with`` block: the four functions below are rebound in
    ``tinker_cookbook.rl.train`` and restored on exit.

    Example:
        with use_estimator("stepwise", gamma=0.9, scale="none"):
            asyncio.run(train.main(config))
    """
    if isinstance(estimator, str):
        estimator = get_estimator(estimator, **options)
    elif options:
        raise TypeError("use_estimator: options configure an estimator name, not an Estimator")
    replacements = {
        "compute_advantages": partial(compute_advantages, estimator=estimator),
        "assemble_training_data": assemble_training_data,
        "remove_constant_reward_groups": partial(_remove_groups_without_credit, estimator=estimator),
        "drop_constant_reward_group": _keep_groups_with_credit(tinker_train.drop_constant_reward_group, estimator),
    }
    saved = {attribute: getattr(tinker_train, attribute) for attribute in replacements}
    vars(tinker_train).update(replacements)
    try:
        yield estimator
    finally:
        vars(tinker_train).update(saved)


@chz.chz
class CLIConfig:
    """``python -m verifiers_stepwise.hosts.tinker estimator=stepwise options.gamma=0.9 train.…=…``

    ``train`` is tinker-cookbook's own ``train.Config``; ``options.<field>=…`` sets a field of
    the estimator's own config (validated by it), and fields left unset keep its defaults.
    """

    train: tinker_train.Config
    estimator: str = "stepwise"
    options: dict[str, float | int | str | bool] = chz.field(default_factory=dict)


def main(config: CLIConfig) -> None:
    """Run tinker-cookbook's RL training loop with the configured estimator."""
    with use_estimator(estimator_from(config)):
        asyncio.run(tinker_train.main(config.train))


if __name__ == "__main__":
    main(chz.entrypoint(CLIConfig))
