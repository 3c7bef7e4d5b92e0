"""torchtitan RL (0.3.0's ``torchtitan.experiments.rl``, main's ``torchtitan.rl``): each turn's
advantage on its own tokens.

    (this module)     what serves both layouts: StepwiseAdvantage, the per-turn builder's logic
                      (StepwiseSamples), the config-time checks (stepwise_controller); imports
                      torchtitan.config only
    release           torchtitan 0.3.0's layout (torchtitan.experiments.rl): its
                      StepwiseTrainingSampleBuilder
    verifiers         VerifiersRollouter: torchtitan 0.3.0 trains on any verifiers environment
    config_registry   0.3.0's recipes: ``--module verifiers_stepwise.hosts.torchtitan --config ...``
    main              torchtitan main's layout (torchtitan.rl): its StepwiseTrainingSampleBuilder,
                      StepwiseVerifiersRollouter (per-turn credit for main's own Verifiers
                      rollouter, PR #4356) and main's recipe
    turns             which verifiers turn each torchtitan turn belongs to, and the credit record
                      laid out on them (both Verifiers rollouters)

Shapes translated (checked against torchtitan 0.3.0 from PyPI), for a native torchtitan env:

    RolloutGroup.rollouts[j].turns[k]                     (torchtitan rollout)
      → r_{j,k} = env_rewards[turn_reward_key] of turn k, or 0, except on the last turn, which
        falls back to rollout.reward (the rubric's score). A rollout whose env attaches no
        per-turn reward is therefore scored exactly as torchtitan scores it: [0, …, 0, reward].
      → one credit record per rollout (``traces.credit.credit_group``) with the estimator
        registered under ``estimator``
      → env_rewards["turn_advantage"] = A_{j,k} on turn k (and Rollout.advantage = A_{j,0},
        the float torchtitan logs)
      → StepwiseTrainingSampleBuilder: A_{j,k} on every completion token of turn k, 0.0 on
        prompt and env tokens, in torchtitan's own packing of turns into samples (``lay_out``).

The Verifiers rollouters make the record with ``score_group`` from the traces instead and lay
it out on their turns (``turns.lay_out_credit``): a verifiers turn whose model replied several
times (tool calls) is several torchtitan turns, each with that turn's advantage.

Two ``Configurable`` components, both needed:

- ``StepwiseAdvantage`` goes in ``Rollouter.Config.advantage``. torchtitan wants one float per
  rollout (``Rollout.advantage``, "TODO: make it per token" in 0.3.0); each turn's advantage goes
  on the turn, ``env_rewards["turn_advantage"]``, the per-turn slot torchtitan's rollout has.
- ``StepwiseTrainingSampleBuilder`` (``release``'s or ``main``'s, by layout) goes in
  ``AsyncLoopConfig.training_sample_builder``. It
  lets torchtitan pack the samples, then lays each turn's advantage on its completion tokens.
  Its ``drop_zero_std_reward_groups`` keeps torchtitan's intent (skip groups with no learning
  signal) but tests per-turn credit instead of final rewards: a group is dropped only when
  every completion token of every rollout carries advantage 0, so a group with equal final
  rewards whose turns still differ is trained.

torchtitan's own builder would put ``Rollout.advantage`` (turn 0's) on every token of a rollout;
the pairing is checked when the config is built (``check_credit``), in the config
``stepwise_controller`` returns (the recipes return one; wrap a config of your own with it).

With one turn per rollout, ``StepwiseAdvantage(scale="none")`` equals torchtitan's default
``AdvantageEstimator`` (Dr.GRPO) and ``scale="std"`` equals ``should_std_normalize=True``,
and the builder drops the same groups torchtitan's does.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError, HostMismatch, RewardError
from verifiers_stepwise.extras import requires
from verifiers_stepwise.hosts import estimator_from
from verifiers_stepwise.traces.credit import credit_group, lay_out

GPU_ONLY = ("vllm", "monarch", "torchstore", "triton")
"""Packages torchtitan's RL trainer imports that install only on a CUDA machine."""


def requires_torchtitan(feature: str, *modules: str) -> AbstractContextManager[None]:
    """The import guard of a module that imports torchtitan: one of the torchtitan extra's
    packages missing (torchtitan, torch, renderers, and ``modules``) says to install the extra;
    anything else torchtitan needs is named (``TrainerDependencyMissing``), a GPU-only one as such."""
    return requires(
        feature,
        "torchtitan",
        "torch",
        "renderers",
        *modules,
        extra="torchtitan",
        trainer="torchtitan",
        gpu_only=GPU_ONLY,
    )


with requires_torchtitan("verifiers_stepwise.hosts.torchtitan"):
    from torchtitan.config import Configurable

if TYPE_CHECKING:
    from torchtitan.experiments.rl.rollout.types import Rollout, RolloutGroup
    from torchtitan.experiments.rl.types import TrainingSample, TrainingSampleGroup

__all__ = [
    "GPU_ONLY",
    "Scalar",
    "TURN_ADVANTAGE",
    "TURN_INDEX",
    "TURN_REWARD",
    "StepwiseAdvantage",
    "StepwiseSamples",
    "check_credit",
    "check_cli_flags",
    "env_config",
    "env_turns",
    "requires_torchtitan",
    "stepwise_advantage",
    "stepwise_controller",
    "turn_advantages",
    "with_stepwise_advantage",
]

TURN_REWARD = "turn_reward"
"""The default ``RolloutTurn.env_rewards`` key of a turn's reward."""
TURN_INDEX = "turn_index"
"""The ``RolloutTurn.env_rewards`` key naming the env turn a torchtitan turn belongs to."""
TURN_ADVANTAGE = "turn_advantage"
"""The ``RolloutTurn.env_rewards`` key of a turn's advantage, which ``StepwiseAdvantage`` (or a
Verifiers rollouter) writes and ``StepwiseTrainingSampleBuilder`` lays on the turn's tokens."""


Scalar = int | float | bool | str  # tyro tries each in order: "6" is 6, "True" True, "test" "test"


def env_config(taskset: str, env_args: dict[str, Scalar]) -> dict[str, Any]:
    """The verifiers ``[env]`` block: ``{"taskset": {"id": taskset}}`` plus ``env_args``, whose
    dotted keys nest (``"taskset.split": "test"``, ``"agent.harness.id": "stepwise-chat"``)."""
    block: dict[str, Any] = {"taskset": {"id": taskset}}
    for dotted, value in env_args.items():
        *parents, name = dotted.split(".")
        node = block
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"env_args {dotted!r}: {part!r} is a value, not a section")
        node[name] = value
    return block


def env_turns(rollout: Rollout, key: str) -> list[float]:
    """r_k of each turn k of one scored rollout: ``env_rewards[key]``, else 0, except on the last
    turn, which falls back to ``rollout.reward`` (the module docstring's rule).

    A rollout with no turns (its env failed before the first generation) counts as one turn
    holding its reward, as torchtitan's estimator counts it; it has no tokens to credit.
    Raises RewardError when the rollout has no reward.
    """
    if rollout.reward is None:
        raise RewardError(
            f"torchtitan rollout {rollout.group_id}/rollout={rollout.rollout_id} has no reward; the rubric must "
            "score a group before its advantages are estimated"
        )
    last = len(rollout.turns) - 1
    rewards = [turn.env_rewards.get(key, rollout.reward if k == last else 0.0) for k, turn in enumerate(rollout.turns)]
    return rewards or [rollout.reward]


def turn_advantages(rollout: Rollout) -> list[float]:
    """Each turn's advantage, ``env_rewards["turn_advantage"]``; ConfigError when a turn carries
    none (the rollouter's advantage is not ``StepwiseAdvantage``, nor is it this package's
    Verifiers rollouter), naming the fix."""
    missing = [k for k, turn in enumerate(rollout.turns) if TURN_ADVANTAGE not in turn.env_rewards]
    if missing:
        raise ConfigError(
            f"rollout {rollout.group_id}/rollout={rollout.rollout_id}: turns {missing} carry no {TURN_ADVANTAGE!r}, "
            "so its advantage is not per turn; set the rollouter's advantage to "
            "verifiers_stepwise.hosts.torchtitan.StepwiseAdvantage.Config(...)"
        )
    return [turn.env_rewards[TURN_ADVANTAGE] for turn in rollout.turns]


class StepwiseAdvantage(Configurable):
    """``Rollouter.Config.advantage``: per-turn advantages from a registered estimator.

    Example (with ``StepwiseTrainingSampleBuilder.Config()`` as the controller's builder)::

        with_stepwise_advantage(DapoMathRollouter.Config(...), gamma=0.9)  # torchtitan's rollouter
        VerifiersRollouter.Config(..., advantage=stepwise_advantage(gamma=0.9))  # this package's
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        estimator: str = "stepwise"
        """Registered estimator name (``verifiers_stepwise.available_estimators()``)."""
        options: dict[str, float | int | str | bool] = field(default_factory=dict)
        """Fields of the estimator's own config (``--rollouter.advantage.options gamma 0.9``),
        validated by it; unset fields keep its defaults. ``scale="none"`` is Dr.GRPO,
        torchtitan's default; ``"std"`` its ``should_std_normalize=True``."""
        turn_reward_key: str = TURN_REWARD
        """The ``RolloutTurn.env_rewards`` entry that holds a turn's reward."""

    def __init__(self, config: Config) -> None:
        self.turn_reward_key = config.turn_reward_key
        self.estimator = estimator_from(config)

    def __call__(self, group: RolloutGroup) -> list[float]:
        """Each rollout's first-turn advantage (torchtitan's ``Rollout.advantage``, what it logs),
        in group order; every turn's own on the turn (``env_rewards["turn_advantage"]``)."""
        if not group.rollouts:
            return []
        try:
            records = credit_group([env_turns(r, self.turn_reward_key) for r in group.rollouts], self.estimator)
        except RewardError as error:
            raise RewardError(f"torchtitan group {group.group_id}: {error}") from None
        for rollout, credit in zip(group.rollouts, records):
            for turn, value in zip(rollout.turns, credit.advantages):
                turn.env_rewards[TURN_ADVANTAGE] = value
        return [credit.advantages[0] for credit in records]


def stepwise_advantage(estimator: str = "stepwise", **options: float | int | str | bool) -> StepwiseAdvantage.Config:
    """``StepwiseAdvantage.Config`` whose ``options`` list every field of the estimator's config:
    ``options`` as given, the rest at the estimator's defaults.

    What recipes use: tyro turns a dict default that is not empty into one flag per key, so
    each field then has its own flag (``--rollouter.advantage.options.gamma 0.9``), where a
    partial dict would offer flags for its own keys only.
    """
    from verifiers_stepwise.estimators.registry import get_estimator

    full = get_estimator(estimator, **options).config.model_dump()
    return StepwiseAdvantage.Config(estimator=estimator, options=full)


class StepwiseSamples:
    """``StepwiseTrainingSampleBuilder``'s own part, mixed into a torchtitan layout's
    ``TrainingSampleBuilder`` (``release``, ``main``): turn t's completion tokens get A_{j,t}.

    Needs each turn's advantage on the turn (``StepwiseAdvantage``, or this package's Verifiers
    rollouters); a rollout without is an error that says so (``turn_advantages``). The
    layout's class supplies ``metrics``, its ``observability.metrics`` module.
    """

    class Config:
        """What a layout's ``StepwiseTrainingSampleBuilder.Config`` also is (``check_credit``)."""

        __slots__ = ()

    metrics: Any

    def __init__(self, config: Any) -> None:
        # torchtitan's filter compares final rewards; this class filters on per-turn credit.
        super().__init__(replace(config, drop_zero_std_reward_groups=False))  # type: ignore[call-arg]
        self.drop_groups_without_credit = config.drop_zero_std_reward_groups

    def build_from_group(self, *, rollout_group: RolloutGroup) -> TrainingSampleGroup:
        built = super().build_from_group(rollout_group=rollout_group)  # type: ignore[misc]
        if (
            self.drop_groups_without_credit
            and len(rollout_group.rollouts) > 1  # torchtitan keeps lone rollouts too
            and built.training_samples
            and not any(a != 0.0 for sample in built.training_samples for a in sample.advantage)
        ):
            m = self.metrics
            dropped = m.Metric("training_sample_builder/num_groups_dropped_zero_advantage", m.Sum(1.0))
            return replace(built, training_samples=[], metrics=[*rollout_group.metrics, dropped])
        return built

    def rollout_to_training_samples(self, rollout: Rollout) -> list[TrainingSample]:
        advantages = turn_advantages(rollout)
        samples = super().rollout_to_training_samples(rollout)  # type: ignore[misc]
        # torchtitan packs turns in order: sample k holds turns [turn_id_k, turn_id_{k+1}),
        # and their completion tokens are its loss-mask positions, turn by turn.
        firsts = [sample.rollout_id.turn_id for sample in samples] + [len(rollout.turns)]
        for sample, first, stop in zip(samples, firsts, firsts[1:]):
            values = lay_out(advantages, [(t, len(rollout.turns[t].completion_token_ids)) for t in range(first, stop)])
            trained = [i for i, masked_in in enumerate(sample.loss_mask) if masked_in]
            if len(trained) != len(values):
                raise HostMismatch(
                    f"rollout {rollout.group_id}/rollout={rollout.rollout_id}: the sample from turn "
                    f"{first} trains {len(trained)} tokens but turns {first}..{stop - 1} completed "
                    f"{len(values)}; torchtitan's packing changed, update this adapter"
                )
            advantage = [0.0] * len(sample.loss_mask)
            for i, value in zip(trained, values):
                advantage[i] = value
            sample.advantage = advantage
        return samples


def check_credit(config: Any) -> None:
    """Raise ConfigError unless a ``Controller.Config`` pairs ``StepwiseAdvantage`` with
    ``StepwiseTrainingSampleBuilder`` (either one alone mis-credits: torchtitan's builder
    puts turn 0's advantage, ``Rollout.advantage``, on every token; this builder rejects a
    rollout without per-turn advantages only once the first group arrives). Reads
    ``config.rollouter.advantage`` and ``config.async_loop.training_sample_builder``; runs in
    the config ``stepwise_controller`` returns once the CLI's overrides are applied. A config
    that is not one (torchtitan's own ``Controller.Config``) is not checked: wrap it with
    ``stepwise_controller``."""

    stepwise = isinstance(config.rollouter.advantage, StepwiseAdvantage.Config)
    builder = config.async_loop.training_sample_builder
    if stepwise != isinstance(builder, StepwiseSamples.Config):
        fix = (
            "set async_loop.training_sample_builder=StepwiseTrainingSampleBuilder.Config() "
            "(torchtitan's builder would give every token of a rollout its first turn's advantage)"
            if stepwise
            else "set rollouter.advantage=stepwise_advantage(...) or use torchtitan's TrainingSampleBuilder"
        )
        raise ConfigError(
            f"rollouter.advantage is {type(config.rollouter.advantage).__qualname__} but "
            f"async_loop.training_sample_builder is {type(builder).__qualname__}: per-turn advantages need "
            f"both StepwiseAdvantage.Config and StepwiseTrainingSampleBuilder.Config; {fix} "
            "(verifiers_stepwise.hosts.torchtitan, StepwiseTrainingSampleBuilder in .release or .main by layout)"
        )


def check_cli_flags(config: Any) -> None:
    """Raise ConfigError when ``config.rollouter`` holds ``StepwiseAdvantage`` in a field its class
    annotates otherwise: tyro would then reject ``--rollouter.advantage.options.*`` (it builds
    flags from the annotation). The error names ``with_stepwise_advantage``, which fixes it."""

    rollouter = config.rollouter
    if isinstance(rollouter.advantage, StepwiseAdvantage.Config) and (
        _annotated_advantage(type(rollouter)) is not StepwiseAdvantage.Config
    ):
        raise ConfigError(
            f"rollouter {type(rollouter).__qualname__} annotates its advantage as "
            f"{_annotated_advantage(type(rollouter))!r}, so the CLI offers no --rollouter.advantage.options.* "
            "flags for StepwiseAdvantage; wrap the rollouter config: "
            "verifiers_stepwise.hosts.torchtitan.with_stepwise_advantage(rollouter, **options)"
        )


def with_stepwise_advantage(rollouter: Any, **options: float | int | str | bool) -> Any:
    """``rollouter`` (any torchtitan ``Rollouter.Config``) with ``StepwiseAdvantage`` as its
    advantage, whose every estimator option is a CLI flag.

    tyro builds a field's flags from its annotation: torchtitan's rollouters annotate
    ``advantage`` as ``AdvantageEstimator.Config`` (or ``Configurable.Config``), so a
    ``StepwiseAdvantage.Config`` put there has no ``--rollouter.advantage.options.*`` flags and
    tyro rejects them. The config returned is of a subclass of ``rollouter``'s class (same owner,
    same fields) that annotates ``advantage`` as ``StepwiseAdvantage.Config``. ``options``
    default to the rollouter's current stepwise options, if it has them.
    """
    config_class = _stepwise_config_class(type(rollouter))
    current = rollouter.advantage
    if not options and isinstance(current, StepwiseAdvantage.Config):
        full = stepwise_advantage(current.estimator, **current.options)
        advantage = replace(full, turn_reward_key=current.turn_reward_key)
    else:
        advantage = stepwise_advantage("stepwise", **options)
    kept = {f.name: getattr(rollouter, f.name) for f in fields(rollouter) if f.init and f.name != "advantage"}
    return config_class(**kept, advantage=advantage)


def _stepwise_config_class(base: type) -> type:
    if _annotated_advantage(base) is StepwiseAdvantage.Config:
        return base
    annotated = {"__annotations__": {"advantage": StepwiseAdvantage.Config}}
    return _subclass(base, "Stepwise", {**annotated, "advantage": field(default_factory=stepwise_advantage)})


def stepwise_controller(config: Any) -> Any:
    """``config`` (a torchtitan ``Controller.Config``, of either layout) as a config of the same
    fields whose ``__post_init__`` also runs ``check_credit`` and ``check_cli_flags``. torchtitan's
    ``ConfigManager`` builds the config again with the CLI's overrides, so the checks see the
    final one; ``build()`` builds torchtitan's own controller, unchanged."""

    base_post_init = getattr(type(config), "__post_init__", None)

    def __post_init__(self: Any) -> None:
        if base_post_init is not None:
            base_post_init(self)
        check_credit(self)
        check_cli_flags(self)

    checked = _subclass(type(config), "Checked", {"__post_init__": __post_init__})
    return checked(**{f.name: getattr(config, f.name) for f in fields(config) if f.init})


def _subclass(base: type, prefix: str, namespace: dict[str, Any]) -> type:
    """A dataclass subclass of the config class ``base`` with ``namespace``, made once and kept
    in this module under its name, so that it pickles by reference."""
    name = f"{prefix}_{base.__qualname__.replace('.', '_')}"
    while (made := globals().get(name)) is not None and made.__mro__[1] is not base:
        name += "_"  # another base of the same name (a fresh import of its module)
    if made is None:
        made = dataclass(kw_only=True, slots=True)(type(name, (base,), dict(namespace)))
        made.__module__, made.__qualname__ = __name__, name
        globals()[name] = made
    return made


def _annotated_advantage(config_class: type) -> Any:
    """The annotation of ``advantage`` that a config class's dataclass fields follow (the nearest
    class in its MRO that annotates it), resolved; None when no class does or it will not resolve."""
    for klass in config_class.__mro__:
        annotation = klass.__dict__.get("__annotations__", {}).get("advantage")
        if annotation is None:
            continue
        if isinstance(annotation, str):
            try:
                return eval(annotation, vars(sys.modules[klass.__module__]))  # noqa: S307 (an annotation string)
            except Exception:
                return None
        return annotation
    return None
