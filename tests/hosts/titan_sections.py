"""A ``config_registry`` module for ``test_host_torchtitan_cli``: the rollouter sections of
``hosts.torchtitan.config_registry``' recipes, built by the functions the recipes use, so torchtitan's
``ConfigManager`` parses CLI overrides into them on a machine without vLLM or Monarch (the
recipes' ``Controller.Config`` needs both)."""

from __future__ import annotations

from verifiers_stepwise.hosts.torchtitan.config_registry import (
    StepwiseDapoMathEnv,
    StepwiseDapoMathRollouter,
    stepwise_verifiers_rollouter,
)


def verifiers_rollouter():
    """``rl_stepwise_verifiers_dapo_qwen3_4b_math``'s rollouter."""
    return stepwise_verifiers_rollouter()


def native_rollouter():
    """``rl_stepwise_dapo_qwen3_4b_math``'s rollouter (its datasets are torchtitan's defaults)."""
    return StepwiseDapoMathRollouter.Config(message_env=StepwiseDapoMathEnv.Config(max_attempts=4))


def dapo_rollouter_with_stepwise():
    """torchtitan's own DAPO-Math rollouter with ``StepwiseAdvantage``, wrapped so its flags exist."""
    from torchtitan.experiments.rl.examples.dapo_math.env import DapoMathEnv
    from torchtitan.experiments.rl.examples.dapo_math.rollouter import DapoMathRollouter

    from verifiers_stepwise.hosts.torchtitan import with_stepwise_advantage

    return with_stepwise_advantage(DapoMathRollouter.Config(message_env=DapoMathEnv.Config()), scale="none")
