"""Per-turn credit for torchtitan's own Verifiers rollouter (torchtitan main, after 0.3.0).

pytorch/torchtitan PR #4356 ("[rl] Add optional Verifiers rollout integration") runs verifiers
episodes in torchtitan but gives only a rollout's last turn a reward
(``env_rewards["verifiers_reward"] = trace.reward``) and estimates one advantage per rollout.
``StepwiseVerifiersRollouter`` is that rollouter with two changes:

- ``trace_to_rollout_turns`` calls torchtitan's own conversion, checks that its turns are the
  trace's sampled spans token for token (``label_rollout_turns``; a mismatch is an error), and
  writes each verifiers turn's reward and turn index into ``env_rewards``, as this package's
  0.3.0 rollouter does (``hosts.torchtitan.verifiers``);
- its config's ``advantage`` is ``StepwiseAdvantage.Config`` (every estimator option its own
  flag); pair it with ``StepwiseTrainingSampleBuilder.Config()`` as the controller's
  ``async_loop.training_sample_builder``.

``with_stepwise_credit(config)`` makes both changes to a torchtitan main recipe that uses
``VerifiersRollouter``; ``rl_stepwise_dapo_qwen3_4b_verifiers_8k`` is torchtitan's own
Verifiers DAPO-Math recipe so changed (a ``config_registry`` module)::

    python -m torchtitan.rl.train --module verifiers_stepwise.hosts.torchtitan.main \\
        --config rl_stepwise_dapo_qwen3_4b_verifiers_8k

What was checked and what was not: the base class is looked up where torchtitan main has it
(``torchtitan.rl.examples.verifiers.rollouter``, read at commit 986bd6e5) and where PR #4356
put it (``torchtitan.experiments.rl.examples.verifiers.components.rollouter``, read at commit
0db04a96). In both, ``_run_single_rollout`` calls the static ``trace_to_rollout_turns(*, trace,
generation_metadata, group_id, rollout_id)``, which emits one turn per run of sampled tokens,
branch by branch, each node once, the order of ``sampled_spans(trace, trainable_only=False)``;
``label_rollout_turns`` is tested on CPU against turns made in that order from real verifiers
traces. It reads only what verifiers 0.3.x traces (which PR #4356 pins) also have, checked in
the vendored verifiers a60a606: ``trace.info``, ``trace.branches`` with ``nodes``,
``token_ids`` and ``logprobs``, and each node's ``sampled``, ``mask`` and ``token_ids``.
This module itself was never imported here: it needs torchtitan main with PR #4356, and
torchtitan 0.3.0, the newest release, has neither (importing it there raises ImportError
saying so). Nor was a GPU run made.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, fields, replace
from typing import Any

from verifiers_stepwise.hosts.torchtitan import (
    StepwiseAdvantage,
    StepwiseTrainingSampleBuilder,
    requires_torchtitan,
    stepwise_advantage,
)
from verifiers_stepwise.hosts.torchtitan.verifiers import label_rollout_turns

__all__ = ["StepwiseVerifiersRollouter", "rl_stepwise_dapo_qwen3_4b_verifiers_8k", "with_stepwise_credit"]

_BASES = (
    "torchtitan.rl.examples.verifiers.rollouter",  # torchtitan main
    "torchtitan.experiments.rl.examples.verifiers.components.rollouter",  # at PR #4356's merge
)


def _base_module() -> Any:
    for name in _BASES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as error:
            if not name.startswith(error.name or "\0"):
                raise  # the module exists but one of its own imports is missing
    raise ImportError(
        "torchtitan's own VerifiersRollouter (PR #4356) is not installed: it is on torchtitan main, not in "
        "torchtitan 0.3.0; with 0.3.0 use verifiers_stepwise.hosts.torchtitan.verifiers.VerifiersRollouter"
    )


_base: Any = _base_module()


class StepwiseVerifiersRollouter(_base.VerifiersRollouter):
    """torchtitan's ``VerifiersRollouter`` with each verifiers turn's reward on its own turns."""

    @dataclass(kw_only=True, slots=True)
    class Config(_base.VerifiersRollouter.Config):
        advantage: StepwiseAdvantage.Config = field(default_factory=stepwise_advantage)

    @staticmethod
    def trace_to_rollout_turns(*, trace: Any, **kwargs: Any) -> list:
        turns = _base.VerifiersRollouter.trace_to_rollout_turns(trace=trace, **kwargs)
        if trace.ok:  # an errored trace's turn data may stop mid-turn; it scores error_reward
            label_rollout_turns(trace, turns)
        return turns


def with_stepwise_credit(config: Any, **options: float | int | str | bool) -> Any:
    """A torchtitan main ``Controller.Config`` whose rollouter is ``VerifiersRollouter``, with that
    rollouter as ``StepwiseVerifiersRollouter`` (``options`` for the stepwise estimator) and
    ``StepwiseTrainingSampleBuilder`` as its builder; every other field kept."""
    rollouter = config.rollouter
    kept = {f.name: getattr(rollouter, f.name) for f in fields(rollouter) if f.init and f.name != "advantage"}
    return replace(
        config,
        rollouter=StepwiseVerifiersRollouter.Config(**kept, advantage=stepwise_advantage("stepwise", **options)),
        async_loop=replace(config.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
    )


def rl_stepwise_dapo_qwen3_4b_verifiers_8k() -> Any:
    """torchtitan main's ``rl_dapo_qwen3_4b_verifiers_8k`` with per-turn credit (Dr.GRPO centring,
    as that recipe's default estimator)."""
    with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.main"):
        from torchtitan.rl.examples.verifiers.dapo_math.config_registry import rl_dapo_qwen3_4b_verifiers_8k

    return with_stepwise_credit(rl_dapo_qwen3_4b_verifiers_8k(), scale="none")
