"""torchtitan adapter, against torchtitan 0.3.0's real rollout types, estimator and builder.

What is real: ``Rollout``/``RolloutTurn``/``RolloutGroup``, ``AdvantageEstimator``,
``TrainingSampleBuilder``, ``Rollouter``, ``TokenEnv``, the DAPO-Math env/rubric/rollouter
and ``ConfigManager``. What is not: the vLLM generator (a scripted ``generate_fn``), the
tokenizer (a character-level renderer below) and vLLM's ``SamplingConfig`` (only its ``seed``
is read); the recipe function itself needs vLLM and Monarch and is only resolved, not run.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from renderers import ParsedResponse
from torchtitan.config import Configurable
from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder
from torchtitan.experiments.rl.examples.dapo_math.data import DapoMathSample
from torchtitan.experiments.rl.rollout.advantage import AdvantageEstimator
from torchtitan.experiments.rl.rollout.types import Rollout, RolloutGroup, RolloutStatus, RolloutTurn
from torchtitan.experiments.rl.types import Completion, RolloutTurnID

from verifiers_stepwise import ConfigError, RewardError, get_estimator
from verifiers_stepwise.estimators.registry import UnknownEstimator
from verifiers_stepwise.hosts.torchtitan import (
    StepwiseAdvantage,
    env_turns,
    turn_advantages,
)
from verifiers_stepwise.hosts.torchtitan.config_registry import (
    StepwiseDapoMathEnv,
    StepwiseDapoMathRollouter,
)
from verifiers_stepwise.hosts.torchtitan.release import StepwiseTrainingSampleBuilder

COMPLETION = 1_000_000  # completion token of turn t: COMPLETION + 1000 * t + k


@dataclass
class TurnSpec:
    reward: float | None  # None: the env attached no per-turn reward
    completion: int = 2  # completion tokens
    env: int = 1  # env-reply tokens before the next turn
    breaks_prefix: bool = False  # the env rewrote history before this turn


def make_rollout(group_id: int, j: int, turns: list[TurnSpec], reward: float | None) -> Rollout:
    rollout_turns, history = [], []
    for t, spec in enumerate(turns):
        if t == 0 or spec.breaks_prefix:
            prompt = [7, 8, 9 + t]
        else:
            prompt = history + [500 + t] * turns[t - 1].env
        completion = [COMPLETION + 1000 * t + k for k in range(spec.completion)]
        rollout_turns.append(
            RolloutTurn(
                rollout_id=RolloutTurnID(group_id=group_id, rollout_id=j, turn_id=t),
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=[-0.25] * spec.completion,
                min_policy_version=3,
                max_policy_version=3,
                env_rewards={} if spec.reward is None else {"turn_reward": spec.reward},
            )
        )
        history = prompt + completion
    return Rollout(group_id=group_id, rollout_id=j, turns=rollout_turns, status=RolloutStatus.COMPLETED, reward=reward)


def make_group(group_id: int, spec: list[tuple[list[TurnSpec], float]]) -> RolloutGroup:
    return RolloutGroup(
        group_id=group_id,
        rollouts=[make_rollout(group_id, j, turns, reward) for j, (turns, reward) in enumerate(spec)],
    )


@functools.cache
def component(estimator: str = "stepwise", **options) -> StepwiseAdvantage:
    """Built once per option set."""
    return StepwiseAdvantage.Config(estimator=estimator, options=options).build()


@functools.cache
def reference(std: bool) -> AdvantageEstimator:
    return AdvantageEstimator.Config(should_std_normalize=std).build()


@functools.cache
def builder(drop: bool = True) -> StepwiseTrainingSampleBuilder:
    return StepwiseTrainingSampleBuilder.Config(drop_zero_std_reward_groups=drop).build()


def score(group: RolloutGroup, estimator) -> RolloutGroup:
    for rollout, advantage in zip(group.rollouts, estimator(group), strict=True):
        rollout.advantage = advantage
    return group


def sample_fields(samples):
    return [(s.rollout_id, s.token_ids, s.loss_mask, s.logprobs, s.advantage) for s in samples]


# -- single turn: identical to torchtitan's own estimator and builder --------------------------

dyadic = st.integers(-32, 32).map(lambda k: k / 8)  # sums and means are exact in float64
anything = st.floats(-1e3, 1e3, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    rewards=st.lists(st.one_of(dyadic, anything), min_size=1, max_size=9),
    options=st.sampled_from(
        [
            {"scale": "none"},
            {"scale": "std"},
            {"scale": "none", "gamma": 0.4, "aggregation": "max"},
            {"scale": "std", "gamma": 1.0, "baseline": "per_turn"},
            {"estimator": "grpo", "scale": "none"},
            {"estimator": "grpo", "scale": "std"},
        ]
    ),
)
@example(rewards=[0.4, 0.4, 0.4], options={"scale": "std"})  # found by hypothesis in CI-like runs
def test_single_turn_reproduces_torchtitans_estimator(rewards, options):
    spec = [([TurnSpec(reward=None)], r) for r in rewards]
    std = options["scale"] == "std"
    ours = [float(a) for a in component(**options)(make_group(0, spec))]
    theirs = reference(std)(make_group(0, spec))
    if not std and all((r * 8).is_integer() for r in rewards):
        assert ours == theirs  # Dr.GRPO on rewards whose mean is exact: bit for bit
    elif len(set(rewards)) == 1:  # no spread: exactly 0 here; torchtitan's summed mean can miss
        # the rewards by an ulp, which std scaling divides by (ulp-sized std + eps): [0.4] * 3
        # gives it -5.6e-11
        assert ours == [0.0] * len(rewards) and theirs == pytest.approx(ours, abs=1e-9)
    else:  # torchtitan sums in order and takes statistics.pstdev; the core sums exactly
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    rewards=st.lists(dyadic, min_size=1, max_size=6),
    completions=st.lists(st.integers(1, 4), min_size=6, max_size=6),
)
def test_single_turn_training_samples_equal_torchtitans(rewards, completions):
    # torchtitan's default (Dr.GRPO): identical samples, and the same groups dropped
    # (equal rewards) or kept (a lone rollout too).
    spec = [([TurnSpec(reward=None, completion=c)], r) for r, c in zip(rewards, completions)]
    ours = builder().build_from_group(rollout_group=score(make_group(4, spec), component(scale="none")))
    theirs = (
        TrainingSampleBuilder.Config()
        .build()
        .build_from_group(rollout_group=score(make_group(4, spec), reference(False)))
    )
    assert sample_fields(ours.training_samples) == sample_fields(theirs.training_samples)


# -- several turns: each turn's tokens carry that turn's advantage -----------------------------

turn_spec = st.builds(
    TurnSpec,
    reward=st.one_of(st.none(), dyadic),
    completion=st.integers(1, 3),
    env=st.integers(0, 2),
    breaks_prefix=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.lists(st.tuples(st.lists(turn_spec, min_size=1, max_size=5), dyadic), min_size=1, max_size=5),
    options=st.sampled_from([{}, {"gamma": 0.9, "baseline": "per_turn"}, {"aggregation": "max", "scale": "none"}]),
)
def test_every_completion_token_carries_its_turns_advantage(spec, options):
    stepwise = component(**options)
    group = score(make_group(2, spec), stepwise)
    rewards = [env_turns(rollout, "turn_reward") for rollout in group.rollouts]
    expected = stepwise.estimator(rewards)  # the core, on the same rewards

    samples = builder(drop=False).build_from_group(rollout_group=group).training_samples
    seen = {}
    for sample in samples:
        j = sample.rollout_id.rollout_id
        for token, trained, advantage in zip(sample.token_ids, sample.loss_mask, sample.advantage):
            if not trained:
                assert advantage == 0.0  # prompt and env tokens
                continue
            t = (token - COMPLETION) // 1000
            assert advantage == expected[j][t]
            seen[j, t] = seen.get((j, t), 0) + 1
    assert seen == {(j, t): turn.completion for j, (turns, _) in enumerate(spec) for t, turn in enumerate(turns)}


def test_turn_rewards_follow_env_rewards_then_the_rubric_reward():
    rollout = make_rollout(0, 0, [TurnSpec(0.25), TurnSpec(None), TurnSpec(0.5)], reward=1.0)
    assert env_turns(rollout, "turn_reward") == [0.25, 0.0, 0.5]  # rubric reward unused
    truncated = make_rollout(0, 0, [TurnSpec(0.25), TurnSpec(None)], reward=-1.0)
    assert env_turns(truncated, "turn_reward") == [0.25, -1.0]  # last turn: rubric reward
    plain = make_rollout(0, 0, [TurnSpec(None), TurnSpec(None)], reward=1.0)
    assert env_turns(plain, "turn_reward") == [0.0, 1.0]
    assert env_turns(plain, "other_key") == [0.0, 1.0]
    empty = Rollout(group_id=0, rollout_id=0, status=RolloutStatus.ERROR, reward=0.0)
    assert env_turns(empty, "turn_reward") == [0.0]


def test_multi_turn_example_by_hand():
    # Both rollouts end with reward 1, so torchtitan's builder would drop this group.
    spec = [
        ([TurnSpec(0.0), TurnSpec(1.0)], 1.0),
        ([TurnSpec(1.0)], 1.0),
    ]
    group = score(make_group(0, spec), component(gamma=0.5, scale="none", baseline="pooled"))
    # returns: [0 + 0.5·1, 1] and [1]; pooled mean 5/6
    first, second = (turn_advantages(rollout) for rollout in group.rollouts)
    assert first == pytest.approx([0.5 - 5 / 6, 1 - 5 / 6])
    assert second == pytest.approx([1 - 5 / 6])
    # on each turn; the first turn's is the float torchtitan logs as the rollout's advantage
    assert [turn.env_rewards["turn_advantage"] for turn in group.rollouts[0].turns] == first
    assert type(group.rollouts[0].advantage) is float and group.rollouts[0].advantage == first[0]
    out = builder().build_from_group(rollout_group=group)
    sample = out.training_samples[0]
    assert sample.loss_mask == [False] * 3 + [True] * 2 + [False] + [True] * 2
    assert sample.advantage == [0.0] * 3 + [first[0]] * 2 + [0.0] + [first[1]] * 2

    theirs = (
        TrainingSampleBuilder.Config()
        .build()
        .build_from_group(rollout_group=score(make_group(0, spec), AdvantageEstimator.Config().build()))
    )
    assert theirs.training_samples == []


# -- the zero-std filter --------------------------------------------------------------------------


def metric_keys(output):
    return [metric.key for metric in output.metrics]


def test_group_with_equal_final_rewards_but_turn_credit_is_kept():
    spec = [([TurnSpec(0.0), TurnSpec(1.0)], 1.0), ([TurnSpec(1.0), TurnSpec(1.0)], 1.0)]
    group = score(make_group(0, spec), component())
    out = builder().build_from_group(rollout_group=group)
    assert len(out.training_samples) == 2
    assert "training_sample_builder/num_groups_dropped_zero_advantage" not in metric_keys(out)


def test_group_without_credit_is_dropped_and_counted():
    # Identical rollouts: every turn equals its peers at the same turn index.
    spec = [([TurnSpec(1.0), TurnSpec(0.0)], 0.0)] * 3
    group = score(make_group(0, spec), component(baseline="per_turn"))
    out = builder().build_from_group(rollout_group=group)
    assert out.training_samples == []
    assert metric_keys(out) == ["training_sample_builder/num_groups_dropped_zero_advantage"]

    kept = StepwiseTrainingSampleBuilder.Config(drop_zero_std_reward_groups=False).build()
    assert len(kept.build_from_group(rollout_group=group).training_samples) == 3


def test_lone_rollout_is_kept_like_torchtitan():
    group = score(make_group(0, [([TurnSpec(1.0)], 1.0)]), component())
    out = builder().build_from_group(rollout_group=group)
    assert [s.advantage for s in out.training_samples] == [[0.0, 0.0, 0.0, 0.0, 0.0]]


def test_untrainable_and_failed_groups_are_left_to_torchtitan():
    spec = [([TurnSpec(1.0, completion=0)], 1.0), ([TurnSpec(0.0)], 0.0)]
    group = score(make_group(0, spec), component())
    out = builder().build_from_group(rollout_group=group)
    assert metric_keys(out) == ["training_sample_builder/num_groups_dropped_untrainable"]
    failed = RolloutGroup(group_id=1, rollouts=[])
    assert component()(failed) == []
    assert builder().build_from_group(rollout_group=failed).training_samples == []


# -- errors ---------------------------------------------------------------------------------------


def test_builder_rejects_a_scalar_advantage():
    group = score(make_group(0, [([TurnSpec(1.0)], 1.0), ([TurnSpec(0.0)], 0.0)]), AdvantageEstimator.Config().build())
    with pytest.raises(ConfigError, match="carry no 'turn_advantage'.*StepwiseAdvantage"):
        builder().build_from_group(rollout_group=group)


def test_unscored_and_non_finite_rewards_are_named():
    with pytest.raises(RewardError, match="rollout 5/rollout=1 has no reward"):
        component()(make_group(5, [([TurnSpec(1.0)], 1.0), ([TurnSpec(1.0)], None)]))
    bad = make_group(6, [([TurnSpec(1.0)], 1.0), ([TurnSpec(0.0), TurnSpec(float("nan"))], 0.0)])
    with pytest.raises(RewardError, match=r"torchtitan group 6: group 0, trajectory 1, turn 1: reward nan"):
        component()(bad)


def test_bad_estimator_config_is_named():
    with pytest.raises(UnknownEstimator, match="'nope'.*installed: .*stepwise"):
        StepwiseAdvantage.Config(estimator="nope").build()
    with pytest.raises(ConfigError, match="field 'gamma': unknown field"):
        StepwiseAdvantage.Config(estimator="grpo", options={"gamma": 0.9}).build()
    with pytest.raises(ConfigError, match="field 'baseline'"):
        StepwiseAdvantage.Config(options={"baseline": "nope"}).build()


# -- any registered estimator, config plumbing ---------------------------------------------------


def test_a_third_party_estimator_is_picked_by_name(third_party_estimator):
    spec = [([TurnSpec(0.0), TurnSpec(1.0)], 1.0), ([TurnSpec(0.5)], 0.5)]
    component = StepwiseAdvantage.Config(estimator="last-turn-only", options={"bonus": 0.5}).build()
    assert isinstance(component.estimator, third_party_estimator)
    group = score(make_group(0, spec), component)
    assert [turn_advantages(r) for r in group.rollouts] == [[0.0, 0.75], [0.25]]
    samples = builder().build_from_group(rollout_group=group)
    assert samples.training_samples[0].advantage == [0.0] * 3 + [0.0] * 2 + [0.0] + [0.75] * 2


def test_the_per_turn_advantages_travel_with_the_rollout():
    """torchtitan may move groups between processes: the advantages are plain floats on each turn."""
    group = score(make_group(0, [([TurnSpec(0.0), TurnSpec(1.0)], 1.0), ([TurnSpec(0.5)], 0.5)]), component())
    copy = pickle.loads(pickle.dumps(group))
    assert [turn_advantages(r) for r in copy.rollouts] == [turn_advantages(r) for r in group.rollouts]


def test_cli_flags_reach_the_component():
    import tyro

    config = tyro.cli(
        StepwiseAdvantage.Config,
        args=["--estimator", "stepwise", "--options", "gamma", "0.9", "baseline", "per_turn", "scale", "none"],
    )
    estimator = config.build().estimator
    assert (estimator.config.gamma, estimator.config.baseline, estimator.config.scale) == (0.9, "per_turn", "none")
    assert estimator.config.aggregation == "sum"  # unset: the estimator's default


# -- the DAPO-Math recipe ---------------------------------------------------------------------


def test_retry_env_scores_every_attempt():
    env = StepwiseDapoMathEnv.Config(max_attempts=3).build(
        env_input=DapoMathSample(prompt="What is 3 + 4?", ground_truth="7")
    )

    async def play():
        await env.init()
        return [
            await env.step({"role": "assistant", "content": answer})
            for answer in ["Answer: $5$", "Answer: $6$", "Answer: $7$"]
        ]

    wrong, wrong_again, last = asyncio.run(play())
    assert wrong.env_rewards == {"turn_reward": 0.0} and not wrong.done
    assert wrong.env_messages[0]["role"] == "user"
    assert wrong_again.env_rewards == {"turn_reward": 0.0} and not wrong_again.done
    assert last.env_rewards == {"turn_reward": 1.0} and last.done and last.env_messages == []


class _Problems(Configurable):
    @dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        samples: list = field(default_factory=list)

    def __init__(self, config: Config) -> None:
        self._samples = itertools.cycle(config.samples)

    def __next__(self):
        return next(self._samples)


class _CharRenderer:
    """Characters as token ids: ``<role>content</role>`` per message. Stands in for a
    tokenizer-backed renderer, which would need model files."""

    def render_ids(self, messages, tools=None, add_generation_prompt=False):
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return [ord(c) for c in text + ("<assistant>" if add_generation_prompt else "")]

    def parse_response(self, token_ids):
        return ParsedResponse(content="".join(map(chr, token_ids)).removesuffix("</assistant>"))

    def bridge_to_next_turn(self, **_):
        return None  # TokenEnv re-renders the whole conversation


def test_rollout_through_torchtitans_rollouter():
    answers = {0: ["Answer: $5$", "Answer: $7$"], 1: ["Answer: $1$"] * 3, 2: ["Answer: $7$"]}

    async def generate(prompt_token_ids, *, request_id, routing_session_id=None, sampling_config=None):
        j, t = (int(part.split("=")[1]) for part in request_id.split("/")[1:])
        tokens = [ord(c) for c in answers[j][t] + "</assistant>"]
        return Completion(
            min_policy_version=0,
            max_policy_version=0,
            request_id=request_id,
            token_ids=tokens,
            token_logprobs=[-0.5] * len(tokens),
            finish_reason="stop",
        )

    problem = DapoMathSample(prompt="What is 3 + 4?", ground_truth="7")
    config = StepwiseDapoMathRollouter.Config(
        train_dataset=_Problems.Config(samples=[problem]),
        validation_dataset=_Problems.Config(samples=[problem]),
        message_env=StepwiseDapoMathEnv.Config(max_attempts=3),
    )
    rollouter = config.build()
    group = asyncio.run(
        rollouter.run_group_rollouts(
            generate_fn=generate,
            sample=problem,
            group_id=0,
            group_size=3,
            sampling=SimpleNamespace(seed=None),
            renderer=_CharRenderer(),
        )
    )
    rewards = [[turn.env_rewards["turn_reward"] for turn in r.turns] for r in group.rollouts]
    assert rewards == [[0.0, 1.0], [0.0, 0.0, 0.0], [1.0]]
    # the env ends an episode at its last attempt: completed, with no torchtitan turn cap set
    assert config.token_env.max_num_turns is None
    assert [r.status for r in group.rollouts] == [RolloutStatus.COMPLETED] * 3
    assert [r.reward for r in group.rollouts] == [1.0, 0.0, 1.0]  # torchtitan's rubric
    expected = get_estimator("stepwise", scale="none")(rewards)
    assert [turn_advantages(r) for r in group.rollouts] == expected

    samples = builder().build_from_group(rollout_group=group)
    assert len(samples.training_samples) == 3  # one packed sample per rollout
    for sample, rollout, per_turn in zip(samples.training_samples, group.rollouts, expected):
        credited = [a for a, trained in zip(sample.advantage, sample.loss_mask) if trained]
        lengths = [len(turn.completion_token_ids) for turn in rollout.turns]
        assert credited == [a for a, n in zip(per_turn, lengths) for _ in range(n)]
