"""The Verifiers rollouter for torchtitan 0.3.0, against real verifiers episodes of this package's envs.

What is real: torchtitan 0.3.0's ``Rollouter`` base, rollout types, ``Rubric``, renderer config
(``RendererConfig(name="qwen3").build``) and sample builder; verifiers 0.4.0's env server,
``EnvClient`` and token-level ``TrainClient`` (rendering with ``renderers``' Qwen3 renderer);
this package's envs, the token endpoint and ``score_group``. What is not: torchtitan's vLLM
generator (a scripted ``GenerateFn`` that decodes the prompt and answers from a plan, one plan
per rollout told apart by the per-rollout seed), Qwen3's tokenizer (a byte-level one with
Qwen3's special tokens, ``testing.tokenizer``) and vLLM's ``SamplingConfig`` (a dataclass with
its fields; its module imports vLLM).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import verifiers.v1 as vf
from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder
from torchtitan.experiments.rl.renderer import RendererConfig
from torchtitan.experiments.rl.rollout.advantage import AdvantageEstimator
from torchtitan.experiments.rl.rollout.types import Rollout, RolloutGroup, RolloutStatus
from torchtitan.experiments.rl.types import Completion

from verifiers_stepwise import ConfigError, RewardError, get_estimator, score_group, write_credit
from verifiers_stepwise.envs.refine import RefineConfig
from verifiers_stepwise.hosts.torchtitan import (
    TURN_REWARD,
    StepwiseAdvantage,
    check_credit,
    env_config,
    stepwise_advantage,
    turn_advantages,
)
from verifiers_stepwise.hosts.torchtitan.release import StepwiseTrainingSampleBuilder
from verifiers_stepwise.hosts.torchtitan.turns import lay_out_credit, sampled_spans
from verifiers_stepwise.hosts.torchtitan.verifiers import VERIFIERS_REWARD, VerifiersRollouter, trace_to_turns
from verifiers_stepwise.testing.tokenizer import qwen3_byte_tokenizer
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.credit import Credit
from verifiers_stepwise.traces.turns import read_turns


@dataclass
class Sampling:
    """torchtitan's ``actors.generator.SamplingConfig`` fields (that module imports vLLM)."""

    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int = 64
    seed: int | None = 0
    stop_token_ids: list[int] | None = None


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    path = qwen3_byte_tokenizer(tmp_path_factory.mktemp("qwen3-bytes"))
    return RendererConfig(name="qwen3", enable_thinking=False).build(tokenizer_path=path)


def scripted(renderer, plans: dict[int, list[str]]):
    """A torchtitan ``GenerateFn``: rollout j (its seed) answers ``plans[j][k]`` on its k-th call."""
    tokenizer = renderer._tokenizer
    stop = renderer.get_stop_token_ids()[0]

    async def generate(prompt_token_ids, *, request_id, routing_session_id=None, sampling_config=None):
        generate.calls.append((request_id, routing_session_id, sampling_config))
        return planned_completion(tokenizer, stop, plans[sampling_config.seed], prompt_token_ids, request_id)

    generate.calls = []
    return generate


def planned_completion(tokenizer, stop: int, plan: list[str], prompt_token_ids, request_id) -> Completion:
    """The k-th reply of ``plan`` for a prompt holding k earlier assistant turns, as a Completion."""
    k = tokenizer.decode(prompt_token_ids).count("<|im_start|>assistant") - 1
    tokens = tokenizer.encode(plan[k], add_special_tokens=False) + [stop]
    return Completion(
        min_policy_version=5,
        max_policy_version=6,
        request_id=request_id,
        token_ids=tokens,
        token_logprobs=[-0.125 * (1 + i % 3) for i in range(len(tokens))],
        finish_reason="stop",
    )


def run_group(rollouter, renderer, plans, sample):
    """One group through the rollouter; returns it with the verifiers episodes, by rollout."""
    episodes: dict[int, vf.Episode] = {}
    real = rollouter.episode

    async def spy(env, **run):
        episodes[run["sampling"].seed] = episode = await real(env, **run)
        return episode

    rollouter.episode = spy

    generate = scripted(renderer, plans)

    async def go():
        try:
            return await rollouter.run_group_rollouts(
                generate_fn=generate,
                sample=sample,
                group_id=3,
                group_size=len(plans),
                sampling=Sampling(),
                renderer=renderer,
            )
        finally:
            await rollouter.close()

    group = asyncio.run(go())
    episodes = [episodes[j] for j in range(len(plans))]
    # Every generation went to torchtitan's GenerateFn with the group's sampling, the rollout's
    # seed and its trace as the routing session (one generator's prefix cache per trace).
    sessions = {e.traces[0].id: j for j, e in enumerate(episodes)}
    assert len(generate.calls) == sum(len(turns.nodes) for e in episodes if (turns := read_turns(e.traces[0])))
    for request_id, session, sampling in generate.calls:
        assert request_id.startswith(f"{session}/call=")
        assert sampling == Sampling(seed=sessions[session], stop_token_ids=None)
    return group, episodes


def assert_each_turns_advantage_on_its_tokens(group, episodes, samples, estimator):
    """Per token, turn by turn: the sample's trained tokens are the trace's sampled tokens and
    carry the ``node.advantages`` that ``write_credit`` writes from ``score_group``'s record."""
    records = score_group(episodes, estimator)
    for rollout, episode in zip(group.rollouts, episodes, strict=True):
        (trace,) = episode.traces
        write_credit(trace, records[trace.id])
        mine = [s for s in samples if s.rollout_id.rollout_id == rollout.rollout_id]
        trained = [(t, a) for s in mine for t, m, a in zip(s.token_ids, s.loss_mask, s.advantage) if m]
        expected = []
        for node in trace.nodes:
            if node.sampled:
                tokens = [t for t, m in zip(node.token_ids, node.mask) if m]
                expected += list(zip(tokens, node.advantages, strict=True))
        assert trained and trained == expected
        assert all(a == 0.0 for s in mine for m, a in zip(s.loss_mask, s.advantage) if not m)


@pytest.mark.slow
def test_dapo_math_refine_through_the_rollouter(renderer):
    rollouter = VerifiersRollouter.Config(
        taskset="stepwise-dapo-math",
        env_args={"max_turns": 4},
        env_in_process=True,
        advantage=StepwiseAdvantage.Config(options={"scale": "none"}),
    ).build()
    sample = next(t for t in rollouter._train_dataset._tasks if t["answer"] == "239")
    plans = {0: ["Answer: 1", "Answer: 239"], 1: ["Answer: 239"], 2: ["no idea", "Answer: 2", "Answer: 3", "Answer: 4"]}
    group, episodes = run_group(rollouter, renderer, plans, sample)

    env_rewards = [e.traces[0].info["turn_rewards"] for e in episodes]
    assert env_rewards == [[-1.0, 1.0], [1.0], [-1.0, -1.0, -1.0, -1.0]]
    # torchtitan receives each turn's own reward (PR #4356 gives the first attempt 0, not -1)
    assert [[t.env_rewards[TURN_REWARD] for t in r.turns] for r in group.rollouts] == env_rewards
    assert [r.reward for r in group.rollouts] == [1.0, 1.0, -1.0]
    assert [r.turns[-1].env_rewards[VERIFIERS_REWARD] for r in group.rollouts] == [1.0, 1.0, -1.0]
    # the env ends an episode at its own max_turns (stop 'user_closed'): completed, not truncated
    assert [r.status for r in group.rollouts] == [RolloutStatus.COMPLETED] * 3
    assert all((t.min_policy_version, t.max_policy_version) == (5, 6) for r in group.rollouts for t in r.turns)

    estimator = get_estimator("stepwise", scale="none")
    assert [c.advantages for c in score_group(episodes, estimator).values()] == [
        turn_advantages(r) for r in group.rollouts
    ]
    first_attempt, right_at_once = (group.rollouts[k].advantage for k in (0, 1))
    assert first_attempt < right_at_once  # the wrong first answer gets less than answering right at once

    built = StepwiseTrainingSampleBuilder.Config().build().build_from_group(rollout_group=group)
    assert len(built.training_samples) == 3  # each trace packs into one sample
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, estimator)

    # PR #4356's view of the same episodes (StepwiseAdvantage rewrites the turns' advantages, so
    # after the samples): only the last turn has a reward (the trace's)
    for rollout in group.rollouts:
        for turn in rollout.turns:
            del turn.env_rewards[TURN_REWARD], turn.env_rewards["turn_index"], turn.env_rewards["turn_advantage"]
    assert [[t.env_rewards.get(VERIFIERS_REWARD, 0.0) for t in r.turns] for r in group.rollouts][0] == [0.0, 1.0]
    last_turn_only = StepwiseAdvantage.Config(options={"scale": "none"}).build()(group)
    # ... which would credit the wrong first answer exactly like the right one
    assert last_turn_only[0] == last_turn_only[1] > 0


def test_refine_through_the_rollouter_with_gamma(renderer):
    rollouter = VerifiersRollouter.Config(
        taskset="stepwise-refine",
        env_args={"max_turns": 3},
        env_in_process=True,
        advantage=StepwiseAdvantage.Config(options={"gamma": 0.5, "baseline": "per_turn"}),
    ).build()
    sample = next(t for t in rollouter._train_dataset._tasks if t["prompt"].startswith("Compute 17 * 23"))
    plans = {0: ["400", "391"], 1: ["300", "390", "391"], 2: ["391"]}
    group, episodes = run_group(rollouter, renderer, plans, sample)
    assert [len(e.traces[0].info["turn_scores"]) for e in episodes] == [2, 3, 1]  # refine records scores
    # torchtitan receives each turn's reward: what the turn improved on the score before it, less
    # the env's turn cost where the turn did not solve the task
    rewards = [read_turns(e.traces[0]).rewards for e in episodes]
    cost = RefineConfig().turn_cost
    assert rewards[0] == pytest.approx([1 - 9 / 391 - cost, 9 / 391]) and rewards[2] == [1.0]
    assert [[t.env_rewards[TURN_REWARD] for t in r.turns] for r in group.rollouts] == rewards
    estimator = get_estimator("stepwise", gamma=0.5, baseline="per_turn")
    assert [c.advantages for c in score_group(episodes, estimator).values()] == [
        turn_advantages(r) for r in group.rollouts
    ]
    built = StepwiseTrainingSampleBuilder.Config().build().build_from_group(rollout_group=group)
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, estimator)


def test_the_rollouter_lays_out_each_traces_one_credit_record(renderer):
    """The walk of a turn's reward: env → score_group's record → torchtitan turns.
    Anchor states recorded on the traces reach the estimator (gigpo differs from grpo here),
    and each rollout's per-turn advantages are its record's."""
    rollouter = VerifiersRollouter.Config(
        taskset="stepwise-refine",
        env_args={"max_turns": 3},
        env_in_process=True,
        advantage=StepwiseAdvantage.Config(estimator="gigpo"),
    ).build()
    sample = next(t for t in rollouter._train_dataset._tasks if t["prompt"].startswith("Compute 17 * 23"))
    plans = {0: ["400", "391"], 1: ["300", "390", "391"], 2: ["391"]}
    real = rollouter.episode

    async def with_states(env, **run):  # every rollout starts from one state; later ones its own
        episode = await real(env, **run)
        trace, plan = episode.traces[0], plans[run["sampling"].seed]
        trace.info["turn_states"] = ["start", *(f"after {reply}" for reply in plan[:-1])]
        return episode

    rollouter.episode = with_states
    group, episodes = run_group(rollouter, renderer, plans, sample)
    records = list(score_group(episodes, "gigpo").values())
    assert all(r.estimator == "gigpo" and r.excluded is None for r in records)
    assert [turn_advantages(r) for r in group.rollouts] == [r.advantages for r in records]
    assert [r.advantages for r in records] != get_estimator("grpo")([r.rewards for r in records])
    assert [[t.env_rewards[TURN_REWARD] for t in r.turns] for r in group.rollouts] == [r.rewards for r in records]
    built = StepwiseTrainingSampleBuilder.Config().build().build_from_group(rollout_group=group)
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, "gigpo")


def test_an_excluded_or_missing_record_trains_nothing():
    (trace,) = tool_episode([0.0, 1.0]).traces
    turns = trace_to_turns(trace, group_id=0, rollout_id=0)
    nodes = [span.node for span in sampled_spans(trace)]
    excluded = Credit("stepwise", None, [0.0, 1.0], None, [], excluded="episode errored")
    for credit in (excluded, None):
        assert lay_out_credit(credit, turns, nodes, "here") == 0.0
        assert [t.env_rewards["turn_advantage"] for t in turns] == [0.0] * len(turns)
    assert all("turn_index" not in t.env_rewards for t in turns)


# -- traces with tool calls and forks (verifiers' own commit path, no model) -------------------


def tool_call(name: str) -> vf.ToolCall:
    return vf.ToolCall(id=f"call-{name}", name=name, arguments="{}")


def tool_episode(rewards: list[float], *, fork: bool = False) -> vf.Episode:
    """Turn 0: a tool call, its result, then the answer (two sampled nodes); later turns: one
    reply after feedback. ``fork``: the last turn is re-asked on a rewritten context."""
    b = TraceBuilder()
    first = b.sample(None, tool_calls=[tool_call("search")], n_tokens=2)
    b.add(vf.ToolMessage(tool_call_id="call-search", content="result"))
    nodes = [[first, b.sample("answer 0", n_tokens=3)]]
    for t in range(1, len(rewards)):
        b.add(vf.UserMessage(content="try again"))
        if fork and t == len(rewards) - 1:
            b.context[:] = [*b.context[:2], vf.UserMessage(content="a fresh start")]
        nodes.append([b.sample(f"answer {t}", n_tokens=1 + t)])
    b.trace.info.update(turn_rewards=rewards, turn_nodes=nodes)
    return b.episode(reward=rewards[-1])


def test_a_trace_without_turn_rewards_and_a_rejected_compaction_attempt_is_laid_out():
    """Regression: score_group's final-turn rule makes every sampled node a turn, the rejected
    compaction attempt's too, which the 0.3.0 rollouter does not train (its branch is
    untrainable); lay_out_credit raised RewardError for it and the group was lost, where the
    code before credited the trace's trainable turn."""
    from verifiers.v1.semantic import ParentLink

    episodes = []
    for reward in (1.0, 0.0):
        b = TraceBuilder()
        attempt = b.sample("a compaction attempt the harness rejected")
        b.context[-2:] = [vf.UserMessage(content="a summary of it")]  # history rewritten: a new branch
        b.sample("the answer")
        b.trace.nodes[attempt].semantic_parents.append(ParentLink(node=attempt - 1, type="compaction_attempt"))
        episodes.append(b.episode(reward=reward))
    records = score_group(episodes, "stepwise")
    laid = []
    for episode, record in zip(episodes, records.values()):
        (trace,) = episode.traces
        assert [branch.trainable for branch in trace.branches] == [False, True]
        spans = sampled_spans(trace)
        turns = trace_to_turns(trace, group_id=0, rollout_id=0)
        lay_out_credit(record, turns, [span.node for span in spans], "rollout")
        laid.append([turn.env_rewards["turn_advantage"] for turn in turns])
        assert turns[-1].env_rewards["turn_reward"] == trace.reward
    assert laid == [[0.5], [-0.5]]


def titan_group(episodes: list[vf.Episode], advantage=None, *, estimator=None) -> RolloutGroup:
    """The episodes as one torchtitan group (``trace_to_turns``, each scored by its trace reward as
    ``VerifiersReward`` scores it), credited as the Verifiers rollouter credits a group
    (``score_group`` with ``estimator``, laid out by ``lay_out_credit``) or by a torchtitan
    advantage component on the turns alone (``advantage``)."""
    rollouts = []
    for j, episode in enumerate(episodes):
        (trace,) = episode.traces
        turns = trace_to_turns(trace, group_id=0, rollout_id=j, versions=(2, 2))
        rollouts.append(Rollout(group_id=0, rollout_id=j, turns=turns, status=RolloutStatus.COMPLETED))
        rollouts[-1].reward = trace.reward
    group = RolloutGroup(group_id=0, rollouts=rollouts)
    if estimator is None:
        values = advantage(group)
    else:
        records = score_group(episodes, estimator)
        values = [
            lay_out_credit(records[e.traces[0].id], r.turns, [s.node for s in sampled_spans(e.traces[0])], "test")
            for e, r in zip(episodes, rollouts)
        ]
    for rollout, value in zip(rollouts, values, strict=True):
        rollout.advantage = value
    return group


@pytest.mark.parametrize("fork", [False, True])
def test_a_turn_with_several_sampled_replies_is_one_env_turn(fork):
    episodes = [tool_episode([0.0, 1.0], fork=fork), tool_episode([0.5]), tool_episode([0.0, 0.0, 1.0], fork=fork)]
    group = titan_group(episodes, estimator=get_estimator("stepwise", gamma=0.9))
    assert [len(r.turns) for r in group.rollouts] == [3, 2, 4]  # one torchtitan turn per sampled span
    assert [[t.env_rewards["turn_index"] for t in r.turns] for r in group.rollouts][0] == [0.0, 0.0, 1.0]
    expected = [c.advantages for c in score_group(episodes, get_estimator("stepwise", gamma=0.9)).values()]
    per_span = [turn_advantages(r) for r in group.rollouts]
    assert per_span[0] == [expected[0][0], expected[0][0], expected[0][1]]
    built = StepwiseTrainingSampleBuilder.Config(drop_zero_std_reward_groups=False).build()
    samples = built.build_from_group(rollout_group=group).training_samples
    assert len(samples) == (5 if fork else 3)  # a rewritten context opens a second sample
    assert_each_turns_advantage_on_its_tokens(group, episodes, samples, get_estimator("stepwise", gamma=0.9))


def test_a_trace_without_turn_rewards_is_scored_as_torchtitan_and_score_group_score_it():
    plain = []
    for reward in (1.0, 0.0, 0.5):
        b = TraceBuilder()
        b.sample("first")
        b.add(vf.UserMessage(content="more"))
        b.sample("second")
        plain.append(b.episode(reward=reward))
    group = titan_group(plain, StepwiseAdvantage.Config(options={"scale": "none"}).build())
    assert all("turn_index" not in t.env_rewards for r in group.rollouts for t in r.turns)
    assert [c.advantages for c in score_group(plain, get_estimator("stepwise", scale="none")).values()] == [
        turn_advantages(r) for r in group.rollouts
    ]


def test_single_turn_rollouts_equal_torchtitans_estimator_and_builder():
    episodes = [tool_episode([r]) for r in (1.0, -1.0, 0.25, 0.25)]
    for std, scale in ((False, "none"), (True, "std")):
        ours = titan_group(episodes, StepwiseAdvantage.Config(options={"scale": scale}).build())
        theirs = titan_group(episodes, AdvantageEstimator.Config(should_std_normalize=std).build())
        assert [r.advantage for r in ours.rollouts] == pytest.approx([r.advantage for r in theirs.rollouts])
        mine = StepwiseTrainingSampleBuilder.Config().build().build_from_group(rollout_group=ours)
        from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder

        native = TrainingSampleBuilder.Config().build().build_from_group(rollout_group=theirs)
        for a, b in zip(mine.training_samples, native.training_samples, strict=True):
            assert (a.token_ids, a.loss_mask, a.logprobs) == (b.token_ids, b.loss_mask, b.logprobs)
            assert a.advantage == pytest.approx(b.advantage)


def test_a_turn_without_sampled_tokens_is_an_error_not_a_lost_reward():
    episodes = [tool_episode([0.0, 1.0]), tool_episode([1.0])]
    (trace,) = episodes[0].traces
    record = score_group(episodes, "stepwise")[trace.id]
    turns = trace_to_turns(trace, group_id=0, rollout_id=0)
    nodes = [span.node for span in sampled_spans(trace)]
    with pytest.raises(RewardError, match="turn 1 \\(reward 1.0\\) has no sampled tokens to credit"):
        lay_out_credit(record, turns[:2], nodes[:2], "here")  # the last turn's span went missing


# -- the bridge for torchtitan main's own VerifiersRollouter (PR #4356) -----------------------


def test_the_bridge_says_it_needs_torchtitan_main():
    import importlib.util

    if importlib.util.find_spec("torchtitan.rl") is not None:
        pytest.skip("torchtitan main is installed")
    with pytest.raises(ImportError, match="PR #4356.*torchtitan main"):
        import verifiers_stepwise.hosts.torchtitan.main  # noqa: F401


def test_env_args_nest_by_dots_and_a_bad_env_fails_at_config_time():
    block = env_config("stepwise-dapo-math", {"max_turns": 3, "taskset.limit": 100})
    assert block == {"taskset": {"id": "stepwise-dapo-math", "limit": 100}, "max_turns": 3}
    # docs/torchtitan.md's example
    config = VerifiersRollouter.Config(
        taskset="stepwise-dapo-math",
        env_args={"max_turns": 3, "taskset.limit": 100},
        advantage=stepwise_advantage(gamma=0.9, scale="none"),
    )
    assert len(config.build()._train_dataset._tasks) == 100
    with pytest.raises(Exception, match="max_turns"):
        VerifiersRollouter.Config(taskset="stepwise-dapo-math", env_args={"max_turns": 0})
    with pytest.raises(Exception, match="limit"):
        VerifiersRollouter.Config(taskset="stepwise-refine", env_args={"taskset.limit": 2})  # no such field
    with pytest.raises(ValueError, match="is a value"):
        env_config("stepwise-refine", {"max_turns": 3, "max_turns.x": 1})


def own_recipe_snippet() -> str:
    """docs/torchtitan.md's "In a recipe of your own" block, as written."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "torchtitan.md").read_text()
    start = text.index("In a recipe of your own:")
    return re.search(r"```python\n(.*?)```", text[start:], re.S)[1]


@dataclass
class AsyncLoop:
    """The field of torchtitan's ``AsyncLoopConfig`` the snippet replaces, with its default
    (``controller.py``, which imports vLLM, is read, not imported)."""

    training_sample_builder: object = dataclasses.field(default_factory=TrainingSampleBuilder.Config)


def test_asyncloops_default_builder_is_torchtitans():
    import importlib.util
    from pathlib import Path

    (root,) = importlib.util.find_spec("torchtitan.experiments.rl").submodule_search_locations
    source = " ".join((Path(root) / "controller.py").read_text().split())
    default = "training_sample_builder: TrainingSampleBuilder.Config = field( "
    default += "default_factory=TrainingSampleBuilder.Config )"
    assert default in source


@pytest.mark.parametrize("builder_line", [True, False])
def test_the_documented_own_recipe_credits_per_token_or_refuses_without_its_builder_line(renderer, builder_line):
    """Regression (#25): the snippet without its ``training_sample_builder`` line left torchtitan's
    builder in place, which gave every token of a rollout its first turn's advantage (a wrong
    first attempt then trained on the whole rollout's credit). Now the config is refused when it
    is built (``check_credit``, which ``stepwise_controller`` runs), naming the line; with the
    line each token carries its turn's ``score_group`` advantage."""
    snippet = own_recipe_snippet()
    line = re.search(r"async_loop = replace\(.*?\n\)\n", snippet, re.S)
    assert line and "training_sample_builder=StepwiseTrainingSampleBuilder.Config()" in line[0]
    if not builder_line:
        snippet = snippet.replace(line[0], "async_loop = base.async_loop\n")
    names = {"base": SimpleNamespace(async_loop=AsyncLoop())}
    exec(snippet, names)  # noqa: S102 (the guide's code)
    config = SimpleNamespace(rollouter=names["rollouter"], async_loop=names["async_loop"])
    if not builder_line:
        fix = "set async_loop.training_sample_builder=StepwiseTrainingSampleBuilder.Config()"
        with pytest.raises(ConfigError, match=re.escape(fix)):
            check_credit(config)
        return
    check_credit(config)
    rollouter = dataclasses.replace(names["rollouter"], env_in_process=True).build()
    builder = names["async_loop"].training_sample_builder.build()
    sample = rollouter._train_dataset._tasks[0]
    right = f"Answer: {sample['answer']}"
    plans = {0: ["Answer: no", right], 1: [right], 2: ["Answer: no", "Answer: no", "Answer: no"]}
    group, episodes = run_group(rollouter, renderer, plans, sample)
    assert [len(r.turns) for r in group.rollouts] == [2, 1, 3]
    estimator = get_estimator("stepwise", gamma=0.9, scale="none")
    credit = [c.advantages for c in score_group(episodes, estimator).values()]
    assert credit == [turn_advantages(r) for r in group.rollouts]
    assert credit[0][0] != credit[0][1]  # the turns differ: a broadcast would be wrong
    built = builder.build_from_group(rollout_group=group)
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, estimator)


@pytest.mark.slow
def test_the_default_env_server_is_a_verifiers_subprocess(renderer):
    rollouter = VerifiersRollouter.Config(taskset="stepwise-refine", env_args={"max_turns": 2}).build()
    sample = next(t for t in rollouter._train_dataset._tasks if t["prompt"].startswith("Compute 17 * 23"))
    group, episodes = run_group(rollouter, renderer, {0: ["400", "391"], 1: ["391"]}, sample)
    assert rollouter._server is None  # closed: the process was stopped and joined
    assert [len(e.traces[0].info["turn_scores"]) for e in episodes] == [2, 1]
    assert [c.advantages for c in score_group(episodes, "stepwise").values()] == [
        turn_advantages(r) for r in group.rollouts
    ]
    built = StepwiseTrainingSampleBuilder.Config().build().build_from_group(rollout_group=group)
    assert_each_turns_advantage_on_its_tokens(group, episodes, built.training_samples, "stepwise")


_STARTS_AND_EXITS = """
import asyncio, sys
import tests.hosts.conftest
from torchtitan.experiments.rl.components.training_sample_builder import TrainingSampleBuilder
from torchtitan.experiments.rl.renderer import RendererConfig
from verifiers_stepwise.hosts.torchtitan.verifiers import VerifiersRollouter
from verifiers_stepwise.testing.tokenizer import qwen3_byte_tokenizer
rollouter = VerifiersRollouter.Config(taskset="stepwise-refine").build()
renderer = RendererConfig(name="qwen3").build(tokenizer_path=qwen3_byte_tokenizer(sys.argv[1]))
asyncio.run(rollouter._start(renderer))
print(rollouter._server.pid, flush=True)
"""


@pytest.mark.slow
def test_a_process_that_never_closes_the_rollouter_still_exits(tmp_path):
    """torchtitan 0.3.0 never closes a rollouter: the spawned env server must not keep the
    trainer's process from exiting (multiprocessing joins its children at exit)."""
    import os
    import subprocess
    import sys
    import time

    done = subprocess.run(
        [sys.executable, "-c", _STARTS_AND_EXITS, str(tmp_path / "tokenizer")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pid = int(done.stdout.split()[-1])
    time.sleep(1)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the env server is gone too


# -- a harness that needs uv, on a machine without it ---------------------------------------

_BUILD_WITH_HARNESS = """
import sys
import tests.hosts.conftest
from verifiers_stepwise import ConfigError
from verifiers_stepwise.hosts.torchtitan.verifiers import VerifiersRollouter
for harness in sys.argv[1:]:
    args = {"max_turns": 2} if harness == "default" else {"max_turns": 2, "agent.harness.id": harness}
    try:
        VerifiersRollouter.Config(taskset="stepwise-refine", env_args=args)
    except ConfigError as error:
        print("ConfigError:", error)
    else:
        print("built")
"""


def without_uv(tmp_path, *extra_path: Path) -> dict[str, str]:
    """This environment with no ``uv`` on PATH (nor in ~/.local/bin: HOME is empty) and no package index."""
    import os
    import shutil

    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not shutil.which("uv", path=p)]
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        "PATH": os.pathsep.join([*map(str, extra_path), *path]),
        "HOME": str(home),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": "",
        **{proxy: "http://127.0.0.1:9" for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
    }


def build_with_harness(env: dict[str, str], *harnesses: str) -> list[str]:
    """What building the rollouter config with each harness id gives, in a fresh process."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _BUILD_WITH_HARNESS, *harnesses],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-len(harnesses) :]


@pytest.mark.slow
def test_a_harness_that_needs_uv_is_refused_up_front_where_there_is_none(tmp_path):
    """Regression (#25): with the ``null`` harness and no uv (the dev install brings uv, and so hid
    it), the config built, and every episode then failed in the env server while verifiers tried
    to download uv (offline: errored rollouts, nothing trained). The config now refuses, naming
    the in-process harness; with uv on PATH, or with this package's harness, it builds."""
    refused, default, chat = build_with_harness(without_uv(tmp_path), "null", "default", "stepwise-chat")
    assert refused.startswith("ConfigError: rollouter env 'stepwise-refine': agent 'agent' runs verifiers' 'null'")
    assert "agent.harness.id = 'stepwise-chat'" in refused and "pip install uv" in refused
    assert (default, chat) == ("built", "built")  # stepwise-refine's own harness is stepwise-chat
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uv").write_text("#!/bin/sh\nexit 0\n")
    (fake / "uv").chmod(0o755)
    assert build_with_harness(without_uv(tmp_path, fake), "null") == ["built"]


_PREPARE_THE_NULL_PROGRAM = """
import asyncio
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime
async def prepare():
    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, {})
try:
    asyncio.run(prepare())
except Exception as error:
    print(type(error).__name__, error)
else:
    print("prepared")
"""


@pytest.mark.slow
def test_without_uv_offline_the_null_harness_cannot_prepare_its_program(tmp_path):
    """What the refusal above saves a user from: verifiers' ``null`` harness setup, as its env
    server runs it, without uv and without the network."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PREPARE_THE_NULL_PROGRAM],
        env=without_uv(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.stdout.strip().splitlines()[-1].startswith("RuntimeError failed to prepare uv script"), done.stdout


def test_the_harnesses_that_need_uv_are_verifiers_own_list():
    """``UV_HARNESSES`` is every built-in harness of the installed verifiers whose code runs a uv
    program (read from its source)."""
    import importlib.util

    from verifiers_stepwise.envs.harness import UV_HARNESSES

    (root,) = importlib.util.find_spec("verifiers.v1.harnesses").submodule_search_locations
    uses_uv = {
        folder.name
        for folder in Path(root).iterdir()
        if folder.is_dir()
        and folder.name != "utils"  # the helpers (launch_chat_program itself), not a harness
        and any(
            "prepare_uv_script" in text or "launch_chat_program" in text
            for text in (f.read_text() for f in folder.glob("*.py"))
        )
    }
    assert uses_uv == set(UV_HARNESSES)
