"""torchtitan main's layout (``torchtitan.rl``, after 0.3.0): per-turn credit for its own
Verifiers rollouter (PR #4356), and its ``StepwiseTrainingSampleBuilder``.

``StepwiseVerifiersRollouter`` is PR #4356's ``VerifiersRollouter`` (one advantage per rollout)
with its turns checked against the trace's sampled spans and each trace's credit record laid
out on them (docs/torchtitan.md, "torchtitan's own Verifiers rollouter").

    python -m torchtitan.rl.train --module verifiers_stepwise.hosts.torchtitan.main \\
        --config rl_stepwise_verifiers_dapo_qwen3_4b_math

Checked by ``tests/hosts/test_host_torchtitan_main.py`` against main's own rollouter files
(docs/torchtitan.md); not run: torchtitan main itself and a GPU run.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from typing import Any

from verifiers_stepwise.envs.harness import refuse_a_uv_harness_without_uv
from verifiers_stepwise.errors import ConfigError, HostMismatch
from verifiers_stepwise.hosts.torchtitan import (
    Scalar,
    StepwiseAdvantage,
    StepwiseSamples,
    env_config,
    init_fields,
    requires_torchtitan,
    stepwise_advantage,
    stepwise_controller,
)
from verifiers_stepwise.hosts.torchtitan.turns import check_rollout_turns, lay_out_credit
from verifiers_stepwise.traces.credit import score_group

__all__ = [
    "LAYOUT",
    "StepwiseTrainingSampleBuilder",
    "StepwiseVerifiersRollouter",
    "rl_stepwise_verifiers_dapo_qwen3_4b_math",
    "stepwise_env_rollouter",
    "with_stepwise_credit",
]

LAYOUT = "torchtitan.rl"

if importlib.util.find_spec("torchtitan.rl") is None:
    raise ImportError(
        "torchtitan's own VerifiersRollouter (PR #4356) is not installed: it is on torchtitan main, not in "
        "torchtitan 0.3.0; with 0.3.0 use verifiers_stepwise.hosts.torchtitan.verifiers.VerifiersRollouter"
    )

with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.main"):
    import torchtitan.rl.examples.verifiers.rollouter as _base
    from torchtitan.rl.components.training_sample_builder import TrainingSampleBuilder
    from torchtitan.rl.observability import metrics


class StepwiseTrainingSampleBuilder(StepwiseSamples, TrainingSampleBuilder):
    """``AsyncLoopConfig.training_sample_builder`` on torchtitan main: turn t's completion
    tokens get A_{j,t} (``hosts.torchtitan.StepwiseSamples``)."""

    metrics = metrics

    @dataclass(kw_only=True, slots=True)
    class Config(StepwiseSamples.Config, TrainingSampleBuilder.Config):
        pass


class StepwiseVerifiersRollouter(_base.VerifiersRollouter):
    """torchtitan's ``VerifiersRollouter`` with each verifiers turn's reward on its own turns."""

    @dataclass(kw_only=True, slots=True)
    class Config(_base.VerifiersRollouter.Config):
        advantage: StepwiseAdvantage.Config = field(default_factory=stepwise_advantage)

        def __post_init__(self) -> None:
            _base.VerifiersRollouter.Config.__post_init__(self)
            _refuse_a_task_cap_verifiers_cannot_apply(self)
            environment = self.verifiers_env_server.environment
            refuse_a_uv_harness_without_uv(environment, "rollouter.verifiers_env_server.environment")

    _advantage_estimator: Any  # the base class's: StepwiseAdvantage, then _lay_out_credit

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._estimator = self._advantage_estimator.estimator
        self._advantage_estimator = self._lay_out_credit  # what the base class calls on a group
        self._played: dict[str, tuple[Any, Any]] = {}  # (episode, trace) by trace id, until credited

    def rollout_status(self, *, verifiers_episode: Any, trace: Any) -> Any:
        self._played[trace.id] = (verifiers_episode, trace)
        return _base.VerifiersRollouter.rollout_status(verifiers_episode=verifiers_episode, trace=trace)

    def _lay_out_credit(self, group: Any) -> list:
        """Each rollout's advantages from its trace's credit record, ``score_group`` on the group."""
        played = []
        for rollout in group.rollouts:
            trace_id = rollout.logs.get("verifiers_trace_id")
            if trace_id not in self._played:
                raise HostMismatch(
                    f"torchtitan rollout {rollout.group_id}/rollout={rollout.rollout_id} names no verifiers trace "
                    "this rollouter converted (Rollout.logs['verifiers_trace_id']); torchtitan's VerifiersRollouter "
                    "changed, update verifiers_stepwise.hosts.torchtitan.main"
                )
            played.append((rollout, *self._played.pop(trace_id)))
        records = score_group([episode for _, episode, _ in played], self._estimator)
        advantages = []
        for rollout, _, trace in played:
            # an errored trace's turns may stop mid-turn; its record excludes it, and it trains nothing
            nodes = check_rollout_turns(trace, rollout.turns) if trace.ok else []
            where = f"torchtitan rollout {rollout.group_id}/rollout={rollout.rollout_id}"
            advantages.append(lay_out_credit(records[trace.id], rollout.turns, nodes, where))
        return advantages


def _refuse_a_task_cap_verifiers_cannot_apply(config: Any) -> None:
    """torchtitan main's task source caps a taskset with ``Taskset.head(num_tasks)`` (verifiers
    0.3.1, its pin); verifiers 0.4.0 renamed it ``take``, so a cap would fail at the first
    build with an AttributeError. Refused here, at config time, with the way round it."""
    import verifiers
    from verifiers.v1.taskset import Taskset

    sources = {"train_data.source": config.train_data.source, "validation_source": config.validation_source}
    for where, source in sources.items():
        if source.num_tasks is not None and not hasattr(Taskset, "head"):
            raise ConfigError(
                f"rollouter.{where}.num_tasks = {source.num_tasks}: torchtitan main caps tasks with verifiers' "
                f"Taskset.head, which verifiers {verifiers.__version__} calls take; leave num_tasks unset and cap "
                "the taskset itself (stepwise_env_rollouter(..., env_args={'taskset.limit': N}) for a taskset "
                "with a limit field), or install verifiers 0.3.1, main's pin"
            )


def stepwise_env_rollouter(
    rollouter: Any,
    *,
    taskset: str = "stepwise-dapo-math",
    env_args: dict[str, Scalar] | None = None,
    **options: float | int | str | bool,
) -> StepwiseVerifiersRollouter.Config:
    """torchtitan main's ``VerifiersRollouter.Config`` (a recipe's) training the verifiers env
    ``taskset`` (any installed env id; ``env_args`` its ``[env]`` fields, dotted keys nest) with
    per-turn credit: its training and validation tasks and its env server's environment are that
    env's, ``options`` the stepwise estimator's; the rest (server pool, rubric, generation
    server) is the recipe's."""
    import verifiers.v1 as vf

    environment = vf.resolve_env_config(env_config(taskset, env_args or {}))
    source = rollouter.train_data.source
    return _stepwise(
        rollouter,
        options,
        train_data=replace(rollouter.train_data, source=replace(source, verifiers_taskset=environment.taskset)),
        validation_source=replace(rollouter.validation_source, verifiers_taskset=environment.taskset),
        verifiers_env_server=replace(rollouter.verifiers_env_server, environment=environment),
    )


def with_stepwise_credit(config: Any, **options: float | int | str | bool) -> Any:
    """A torchtitan main ``Controller.Config`` whose rollouter is ``VerifiersRollouter``, with that
    rollouter as ``StepwiseVerifiersRollouter`` (``options`` for the stepwise estimator) and
    ``StepwiseTrainingSampleBuilder`` as its builder; every other field kept, its env too."""
    return replace(
        config,
        rollouter=_stepwise(config.rollouter, options),
        async_loop=replace(config.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
    )


def _stepwise(rollouter: Any, options: dict[str, Any], **changes: Any) -> StepwiseVerifiersRollouter.Config:
    advantage = stepwise_advantage("stepwise", **options)
    return StepwiseVerifiersRollouter.Config(**{**init_fields(rollouter), **changes, "advantage": advantage})


def _refuse_verifiers_before_0_4(taskset: str) -> None:
    """torchtitan main pins verifiers 0.3.1, but ``stepwise-dapo-math`` needs 0.4 (its tasks have
    no ``id`` field, which 0.3.1's env server reads): refused here, not at the first episode."""
    from importlib.metadata import version

    installed = version("verifiers")
    if tuple(int(part) for part in installed.split(".")[:2]) < (0, 4):
        raise ConfigError(
            f"{taskset} needs verifiers>=0.4, and verifiers {installed} is installed (torchtitan main pins "
            "0.3.1): install verifiers 0.4.0 after torchtitan main (main's Verifiers rollouter was tested on "
            "both), or train stepwise-refine, which runs on 0.3.1, with stepwise_env_rollouter"
        )


def rl_stepwise_verifiers_dapo_qwen3_4b_math() -> Any:
    """torchtitan main's ``rl_dapo_qwen3_4b_verifiers_8k`` (Qwen3-4B-Base, one TP=2 trainer, six
    generators) on this package's ``stepwise-dapo-math`` env in refine mode: up to 4 attempts of
    up to 2K tokens each within its 10K context, each attempt's ±1 its turn's reward, Dr.GRPO
    centring as that recipe's estimator. Validation runs the same taskset."""
    with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.main"):
        from torchtitan.rl.examples.verifiers.dapo_math.config_registry import rl_dapo_qwen3_4b_verifiers_8k

    _refuse_verifiers_before_0_4("stepwise-dapo-math")
    base = rl_dapo_qwen3_4b_verifiers_8k()
    config = replace(
        base,
        rollouter=stepwise_env_rollouter(
            base.rollouter, taskset="stepwise-dapo-math", env_args={"max_turns": 4}, scale="none"
        ),
        async_loop=replace(base.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
        generator=replace(base.generator, sampling=replace(base.generator.sampling, max_tokens=2048)),
        dump_folder="outputs/rl/qwen3_4b_stepwise_verifiers_dapo_math",
    )
    return stepwise_controller(config)
