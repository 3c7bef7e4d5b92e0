"""Stepwise DAPO-Math recipes for torchtitan RL (a ``config_registry`` module).

    python -m torchtitan.experiments.rl.train \\
        --module verifiers_stepwise.hosts.torchtitan.config_registry \\
        --config rl_stepwise_verifiers_dapo_qwen3_4b_math      # or rl_stepwise_dapo_qwen3_4b_math

``rl_stepwise_verifiers_dapo_qwen3_4b_math`` runs this package's ``stepwise-dapo-math``
verifiers env in refine mode (``max_turns`` attempts) through ``VerifiersRollouter``; any
verifiers env works the same way (``--rollouter.taskset stepwise-refine``). Both recipes
return their config through ``stepwise_controller``, which refuses a stepwise advantage paired
with torchtitan's broadcasting builder after the CLI's overrides are applied. Importing this
module needs no GPU package; calling a recipe loads torchtitan's trainer, and a missing
dependency of it (vLLM, Monarch, torchstore, triton, ...) is reported by name.

``rl_stepwise_dapo_qwen3_4b_math`` does the same on torchtitan's native env. torchtitan's
DAPO-Math recipe gives the model one attempt per problem; here the model gets up to
``max_attempts``: each attempt is scored with torchtitan's own Math-Verify scorer and that
score is the turn's reward (``env_rewards["turn_reward"]``); after a wrong answer the env asks
for another attempt, after a right one the episode ends. Per-turn advantages then reach each
attempt's tokens through ``StepwiseAdvantage`` and ``StepwiseTrainingSampleBuilder``.
Everything else (model, data, rubric, loss, parallelism) is torchtitan's recipe unchanged;
the rubric still scores the last attempt, which is the rollout reward torchtitan logs and
validates on (so validation reward here means "solved within ``max_attempts``").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

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
    "with_stepwise_attempts",
]


DEFAULT_ATTEMPTS = 4
"""Attempts (and so turns) of a stepwise DAPO-Math episode unless configured."""


class StepwiseDapoMathEnv(DapoMathEnv):
    """DAPO-Math with retries: every attempt is scored and its score is that turn's reward."""

    @dataclass(kw_only=True, slots=True)
    class Config(DapoMathEnv.Config):
        max_attempts: int = DEFAULT_ATTEMPTS
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
            # The attempts are the turn cap (``--rollouter.message_env.max_attempts 6``): the env
            # says done at the last one, which torchtitan's TokenEnv reads before its own cap. A
            # cap set to something else was once reset to the attempts without a word; it is
            # refused, naming the flag that sets the cap. Nothing is written back, so a cap the
            # CLI sets is always told apart from none (tyro rebuilds this config from the loaded
            # one, whose values become the defaults).
            turns, attempts = self.token_env.max_num_turns, self.message_env.max_attempts
            if turns is not None and turns != attempts:
                raise ConfigError(
                    f"token_env.max_num_turns {turns} differs from message_env.max_attempts {attempts}: "
                    f"the attempts are the turn cap; set --rollouter.message_env.max_attempts {turns} instead"
                )


def with_stepwise_attempts(
    config: Controller.Config, *, max_attempts: int = 4, max_tokens_per_attempt: int = 2048
) -> Controller.Config:
    """A DAPO-Math ``Controller.Config`` turned into its stepwise, multi-attempt version.

    Keeps the recipe's datasets, rubric and context budget; replaces the env, the advantage
    component and the training-sample builder, and caps each attempt's sampled tokens.
    """
    rollouter = config.rollouter
    generator = config.generator
    return replace(
        config,
        rollouter=StepwiseDapoMathRollouter.Config(
            train_dataset=rollouter.train_dataset,
            validation_dataset=rollouter.validation_dataset,
            rubric=rollouter.rubric,
            message_env=StepwiseDapoMathEnv.Config(max_attempts=max_attempts),
            token_env=replace(rollouter.token_env, max_num_turns=None),  # the attempts are the turn cap
        ),
        async_loop=replace(config.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
        generator=replace(generator, sampling=replace(generator.sampling, max_tokens=max_tokens_per_attempt)),
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
    """Qwen3-4B-Base on DAPO-Math, four attempts of up to 2K tokens within a 10K context.

    torchtitan's own 8K single-attempt recipe on one node (one TP=2 trainer, six TP=1
    generators), made stepwise with ``with_stepwise_attempts``.
    """
    config = with_stepwise_attempts(_torchtitan_dapo_recipe())
    return stepwise_controller(replace(config, dump_folder="outputs/rl/qwen3_4b_stepwise_dapo_math"))


def rl_stepwise_verifiers_dapo_qwen3_4b_math() -> Controller.Config:
    """Qwen3-4B-Base on this package's ``stepwise-dapo-math`` verifiers env, four attempts.

    torchtitan's 8K DAPO-Math recipe (model, trainer, generators, loss) with its rollout path
    replaced by ``VerifiersRollouter`` and its builder by ``StepwiseTrainingSampleBuilder``;
    each attempt samples up to 2K tokens. Validation runs the same taskset, unshuffled.
    """
    base = _torchtitan_dapo_recipe()
    config = replace(
        base,
        rollouter=stepwise_verifiers_rollouter(),
        async_loop=replace(base.async_loop, training_sample_builder=StepwiseTrainingSampleBuilder.Config()),
        generator=replace(base.generator, sampling=replace(base.generator.sampling, max_tokens=2048)),
        dump_folder="outputs/rl/qwen3_4b_stepwise_verifiers_dapo_math",
    )
    return stepwise_controller(config)


def _torchtitan_dapo_recipe() -> Controller.Config:
    """torchtitan's 8K DAPO-Math config, or TrainerDependencyMissing."""
    # torchtitan's recipe module imports vLLM and Monarch, so it loads only when called.
    with requires_torchtitan("verifiers_stepwise.hosts.torchtitan.config_registry"):
        from torchtitan.experiments.rl.examples.dapo_math.config_registry import rl_dapo_qwen3_4b_math_8k
    return rl_dapo_qwen3_4b_math_8k()
