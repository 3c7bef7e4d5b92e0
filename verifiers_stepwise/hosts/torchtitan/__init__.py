"""torchtitan RL (0.3.0's ``torchtitan.experiments.rl``, main's ``torchtitan.rl``): each turn's
advantage on its own tokens (docs/torchtitan.md has the data path and the layouts).

    (this module)     what serves both layouts: StepwiseAdvantage, the builder's per-turn logic
                      (StepwiseSamples), the config-time checks; imports torchtitan.config only
    release           0.3.0's layout: its StepwiseTrainingSampleBuilder
    verifiers         VerifiersRollouter: torchtitan 0.3.0 trains on any verifiers environment
    config_registry   0.3.0's recipes
    main              main's layout: its StepwiseTrainingSampleBuilder, StepwiseVerifiersRollouter
                      (main's own Verifiers rollouter, PR #4356) and main's recipe
    turns             a trace's credit record laid out on its torchtitan turns (both rollouters)
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, get_type_hints

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
    turn, which falls back to ``rollout.reward`` (so a rollout without turn rewards scores as
    torchtitan scores it). A rollout with no turns counts as one turn holding its reward, as
    torchtitan's estimator counts it. Raises RewardError when the rollout has no reward."""
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
    """``Rollouter.Config.advantage``: per-turn advantages from a registered estimator, paired
    with ``StepwiseTrainingSampleBuilder`` (``check_credit``)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        estimator: str = "stepwise"
        """Registered estimator name (``verifiers_stepwise.available_estimators()``)."""
        options: dict[str, float | int | str | bool] = field(default_factory=dict)
        """Fields of the estimator's own config (``--rollouter.advantage.options gamma 0.9``),
        validated by it; unset fields keep its defaults. With one turn per rollout, ``scale="none"``
        is torchtitan's default ``AdvantageEstimator`` (Dr.GRPO), ``"std"`` its ``should_std_normalize=True``."""
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
    """``StepwiseAdvantage.Config`` with every field of the estimator's config in ``options`` (the
    rest at its defaults), so that tyro offers each its own flag (``--rollouter.advantage.options.gamma``)."""
    from verifiers_stepwise.estimators.registry import get_estimator

    full = get_estimator(estimator, **options).config.model_dump()
    return StepwiseAdvantage.Config(estimator=estimator, options=full)


class StepwiseSamples:
    """``StepwiseTrainingSampleBuilder``'s own part, mixed into a layout's ``TrainingSampleBuilder``
    (``release``, ``main``, which supply ``metrics``): turn t's completion tokens get A_{j,t}.
    Its ``drop_zero_std_reward_groups`` drops a group only when every completion token of every
    rollout carries advantage 0 (torchtitan's compares final rewards)."""

    class Config:
        """What a layout's ``StepwiseTrainingSampleBuilder.Config`` also is (``check_credit``)."""

        __slots__ = ()

    metrics: Any

    def __init__(self, config: Any) -> None:
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
    ``StepwiseTrainingSampleBuilder``: either one alone mis-credits (torchtitan's builder puts
    turn 0's advantage, ``Rollout.advantage``, on every token; this builder rejects a rollout
    without per-turn advantages only once the first group arrives)."""
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
    annotates otherwise: tyro builds flags from the annotation, so it would reject
    ``--rollouter.advantage.options.*``. The error names ``with_stepwise_advantage``."""
    rollouter = config.rollouter
    annotated = _annotated_advantage(type(rollouter))
    if isinstance(rollouter.advantage, StepwiseAdvantage.Config) and annotated is not StepwiseAdvantage.Config:
        raise ConfigError(
            f"rollouter {type(rollouter).__qualname__} annotates its advantage as {annotated!r}, so the CLI "
            "offers no --rollouter.advantage.options.* flags for StepwiseAdvantage; wrap the rollouter config: "
            "verifiers_stepwise.hosts.torchtitan.with_stepwise_advantage(rollouter, **options)"
        )


def with_stepwise_advantage(rollouter: Any, **options: float | int | str | bool) -> Any:
    """``rollouter`` (any torchtitan ``Rollouter.Config``) with ``StepwiseAdvantage`` as its
    advantage, every estimator option a CLI flag: its class, or a subclass of it (same owner,
    same fields) that annotates ``advantage`` as ``StepwiseAdvantage.Config`` where torchtitan's
    annotates its own estimator's config. ``options`` default to the rollouter's current
    stepwise options, if it has them."""
    config_class = type(rollouter)
    if _annotated_advantage(config_class) is not StepwiseAdvantage.Config:
        annotated = {"__annotations__": {"advantage": StepwiseAdvantage.Config}}
        default = field(default_factory=stepwise_advantage)
        config_class = _subclass(config_class, "Stepwise", {**annotated, "advantage": default})
    current = rollouter.advantage
    if not options and isinstance(current, StepwiseAdvantage.Config):
        full = stepwise_advantage(current.estimator, **current.options)
        advantage = replace(full, turn_reward_key=current.turn_reward_key)
    else:
        advantage = stepwise_advantage("stepwise", **options)
    return config_class(**{**init_fields(rollouter), "advantage": advantage})


def stepwise_controller(config: Any) -> Any:
    """``config`` (a torchtitan ``Controller.Config``, of either layout) as a config of the same
    fields whose ``__post_init__`` also runs ``check_credit`` and ``check_cli_flags``, so they see
    the CLI's overrides (torchtitan's ``ConfigManager`` builds the config again with them)."""
    base_post_init = getattr(type(config), "__post_init__", None)

    def __post_init__(self: Any) -> None:
        if base_post_init is not None:
            base_post_init(self)
        check_credit(self)
        check_cli_flags(self)

    return _subclass(type(config), "Checked", {"__post_init__": __post_init__})(**init_fields(config))


def init_fields(config: Any) -> dict[str, Any]:
    """A dataclass config's ``__init__`` fields and their values: what rebuilds it as another class."""
    return {f.name: getattr(config, f.name) for f in fields(config) if f.init}


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
    """The annotation of ``advantage`` that a config class's dataclass fields follow, resolved as
    tyro resolves it; None when no class annotates it or it will not resolve."""
    try:
        return get_type_hints(config_class).get("advantage")
    except Exception:
        return None
