"""Stepwise DAPO-Math recipes for torchtitan 0.3.0 (docs/torchtitan.md)::

    python -m torchtitan.experiments.rl.train --module verifiers_stepwise.hosts.torchtitan \\
        --config rl_stepwise_verifiers_dapo_qwen3_4b_math      # or rl_stepwise_dapo_qwen3_4b_math

``rl_stepwise_verifiers_dapo_qwen3_4b_math`` runs this package's ``stepwise-dapo-math`` env
through ``VerifiersRollouter``; ``rl_stepwise_dapo_qwen3_4b_math`` torchtitan's native DAPO-Math
env with retries, each attempt its turn's reward (its rubric scores the last attempt, so
validation reward means "solved within ``max_attempts``"). Importing this module needs no GPU
package; calling a recipe loads torchtitan's trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.hosts.torchtitan import (
    StepwiseAdvantage,
    requires_torchtitan,
    stepwise_advantage,
    stepwise_controller,
)
from verifiers_stepwise.hosts.torchtitan.release import StepwiseTrainingSampleBuilder
from verifiers_stepwise.hosts.torchtitan.verifiers import VerifiersRollouter

with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.config_registry"):
    from renderers import Message
    from torchtitan.experiments.rl.environment import MessageEnvStepOutput, TokenEnv
    from torchtitan.experiments.rl.examples.dapo_math.data import DapoMathSample
    from torchtitan.experiments.rl.examples.dapo_math.env import DapoMathEnv
    from torchtitan.experiments.rl.examples.dapo_math.rollouter import DapoMathRollouter
    from torchtitan.experiments.rl.examples.dapo_math.rubric import score_math_response

if TYPE_CHECKING:
    from torchtitan.experiments.rl.controller import Controller

__all__ = [
    "StepwiseDapoMathEnv",
    "StepwiseDapoMathRollouter",
    "rl_stepwise_dapo_qwen3_4b_math",
    "rl_stepwise_verifiers_dapo_qwen3_4b_math",
    "stepwise_verifiers_rollouter",
]


class StepwiseDapoMathEnv(DapoMathEnv):
    """DAPO-Math with retries: every attempt is scored and its score is that turn's reward."""

    @dataclass(kw_only=True, slots=True)
    class Config(DapoMathEnv.Config):
        max_attempts: int = 4
        """Attempts per problem; the episode also ends at the first correct answer."""
        retry_message: str = (
            "That answer is not correct. Check your work and try again. The last line of your "
            'response should be of the form "Answer: $Answer".'
        )
        """The user message sent after a wrong attempt."""
        turn_reward_key: str = "turn_reward"
        """Must match ``StepwiseAdvantage.Config.turn_reward_key``."""

        def __post_init__(self) -> None:
            if self.max_attempts < 1:
                raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def __init__(self, config: Config, *, env_input: DapoMathSample) -> None:
        super().__init__(config, env_input=env_input)
        self._config = config
        self._ground_truth = env_input.ground_truth
        self._attempts = 0

    async def step(self, completion_message: Message) -> MessageEnvStepOutput:
        self._attempts += 1
        score = score_math_response(completion_message.get("content") or "", self._ground_truth)
        done = score == 1.0 or self._attempts >= self._config.max_attempts
        return MessageEnvStepOutput(
            env_messages=[] if done else [{"role": "user", "content": self._config.retry_message}],
            done=done,
            env_rewards={self._config.turn_reward_key: score},
        )


class StepwiseDapoMathRollouter(DapoMathRollouter):
    """torchtitan's DAPO-Math rollouter with retries and per-turn credit."""

    @dataclass(kw_only=True, slots=True)
    class Config(DapoMathRollouter.Config):
        message_env: StepwiseDapoMathEnv.Config = field(default_factory=StepwiseDapoMathEnv.Config)
        token_env: TokenEnv.Config = field(default_factory=lambda: TokenEnv.Config(max_rollout_tokens=10240))
        """``max_num_turns`` stays unset (None): the env ends an episode at its last attempt
        (``message_env.max_attempts``), which is the turn cap."""
        # Dr.GRPO centring, as torchtitan's DAPO-Math recipe uses (should_std_normalize=False).
        advantage: StepwiseAdvantage.Config = field(default_factory=lambda: stepwise_advantage(scale="none"))

        def __post_init__(self) -> None:
            # The attempts are the turn cap: the env says done at the last one, which torchtitan's
            # TokenEnv reads before its own cap. Another cap is refused, not reset; nothing is
            # written back, so a cap the CLI sets is always told apart from none.
            turns, attempts = self.token_env.max_num_turns, self.message_env.max_attempts
            if turns is not None and turns != attempts:
                raise ConfigError(
                    f"token_env.max_num_turns {turns} differs from message_env.max_attempts {attempts}: "
                    f"the attempts are the turn cap; set --rollouter.message_env.max_attempts {turns} instead"
                )


def stepwise_verifiers_rollouter(*, max_turns: int = 4) -> VerifiersRollouter.Config:
    """``stepwise-dapo-math`` in refine mode: up to ``max_turns`` attempts, each scored by the
    env (±1) as that turn's reward; Dr.GRPO centring like torchtitan's DAPO-Math recipe."""
    return VerifiersRollouter.Config(
        taskset="stepwise-dapo-math",
        env_args={"max_turns": max_turns},
        advantage=stepwise_advantage(scale="none"),
    )


def rl_stepwise_dapo_qwen3_4b_math() -> Controller.Config:
    """Qwen3-4B-Base on torchtitan's DAPO-Math env, up to four attempts, its datasets, rubric and
    context budget kept."""

    def with_attempts(rollouter: DapoMathRollouter.Config) -> StepwiseDapoMathRollouter.Config:
        return StepwiseDapoMathRollouter.Config(
            train_dataset=rollouter.train_dataset,
            validation_dataset=rollouter.validation_dataset,
            rubric=rollouter.rubric,
            message_env=StepwiseDapoMathEnv.Config(max_attempts=4),
            token_env=replace(rollouter.token_env, max_num_turns=None),  # the attempts are the turn cap
        )

    return _on_torchtitans_dapo_recipe(with_attempts, "outputs/rl/qwen3_4b_stepwise_dapo_math")


def rl_stepwise_verifiers_dapo_qwen3_4b_math() -> Controller.Config:
    """Qwen3-4B-Base on this package's ``stepwise-dapo-math`` verifiers env, up to four attempts;
    validation runs the same taskset, unshuffled."""
    return _on_torchtitans_dapo_recipe(
        lambda _: stepwise_verifiers_rollouter(), "outputs/rl/qwen3_4b_stepwise_verifiers_dapo_math"
    )


def _on_torchtitans_dapo_recipe(rollouter: Callable[[Any], Any], dump_folder: str) -> Controller.Config:
    """torchtitan's 8K DAPO-Math recipe (model, trainer, one TP=2 trainer and six TP=1 generators,
    loss) with ``rollouter(its rollouter)``, ``StepwiseTrainingSampleBuilder`` and up to 2K sampled
    tokens an attempt, checked by ``stepwise_controller``; TrainerDependencyMissing without its stack."""
    # torchtitan's recipe module imports vLLM and Monarch, so it loads only when called.
    with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.config_registry"):
        from torchtitan.experiments.rl.examples.dapo_math.config_registry import rl_dapo_qwen3_4b_math_8k
    base = rl_dapo_qwen3_4b_math_8k()
    config = replace(
        base,
        rollouter=rollouter(base.rollouter),
        async_loop=replace(base.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
        generator=replace(base.generator, sampling=replace(base.generator.sampling, max_tokens=2048)),
        dump_folder=dump_folder,
    )
    return stepwise_controller(config)
