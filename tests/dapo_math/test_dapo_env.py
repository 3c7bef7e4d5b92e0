"""The DAPO-math env in-process: single-turn = standard DAPO, refine mode = per-turn rewards,
and the stepwise estimator on its groups."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import verifiers.v1 as vf
from stepwise_dapo_math.config import DapoMathTaskConfig, DapoMathTasksetConfig
from stepwise_dapo_math.env import MISSING, WRONG, DapoMathEnvConfig
from stepwise_dapo_math.loaders import BUNDLED_PATH
from stepwise_dapo_math.taskset import DapoMathData, DapoMathTask, DapoMathTaskset, response_length, response_lengths
from stepwise_dapo_math.tokens import TokenizerError
from verifiers.v1.errors import TaskError

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ChatCall, ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.tokenizer import qwen3_byte_tokenizer
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.turns import read_turns

KEY_VAR = "STEPWISE_DAPO_TEST_KEY"
ROWS = [json.loads(line) for line in BUNDLED_PATH.read_text().splitlines()[:3]]
PROBLEMS = [row["extra_info"]["problem"] for row in ROWS]
GOLDS = [row["reward_model"]["ground_truth"] for row in ROWS]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


def env(**fields) -> dict:
    taskset = {"id": "stepwise-dapo-math", "dataset": "bundled", **fields.pop("taskset", {})}
    return {"taskset": taskset, **fields}


async def play(plan: dict, env_config: dict, **kwargs) -> list[list[vf.Episode]]:
    with ModelServer(scripted(plan)) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR)
        return await run_groups(env_config, client, **kwargs)


def traces(group: list[vf.Episode]) -> list[vf.Trace]:
    return [trace for episode in group for trace in episode.traces]


async def test_single_turn_is_standard_dapo_and_stepwise_reduces_to_grpo():
    plan = {
        PROBLEMS[0]: PerRollout([f"Work.\nAnswer: {GOLDS[0]}"], ["Work.\nAnswer: 1"]),
        PROBLEMS[1]: [f"Answer: $\\boxed{{{GOLDS[1]}}}$."],
        PROBLEMS[2]: ["I give up."],
    }
    groups = await play(plan, env(), rollouts=2, limit=3)
    first, second, third = (traces(g) for g in groups)
    assert sorted(t.rewards["correct"].score for t in first) == [-1.0, 1.0]
    assert [t.rewards["correct"].score for t in second] == [1.0, 1.0]
    assert [t.rewards["correct"].score for t in third] == [-1.0, -1.0]
    for trace in first + second + third:
        assert trace.num_turns == 1 and trace.stop_condition == "user_closed"
        assert trace.info["turn_rewards"] == [trace.reward]  # one turn: its reward is DAPO's
        assert "overlong_penalty" not in trace.rewards
    assert third[0].metrics["has_answer"] == 0.0
    # T = 1: the stepwise estimator gives exactly the trajectory-level GRPO advantages.
    stepwise = [c.advantages for c in score_group(groups[0], "stepwise").values()]
    assert stepwise == [
        c.advantages for c in score_group(groups[0], get_estimator("grpo", scale="none")).values()
    ]  # one turn: Dr. GRPO
    assert [c.advantages for c in score_group(groups[0], get_estimator("stepwise", scale="std")).values()] == [
        c.advantages for c in score_group(groups[0], "grpo").values()
    ]
    assert sorted(a for (a,) in stepwise) == pytest.approx([-1.0, 1.0], abs=1e-5)
    assert [c.advantages for c in score_group(groups[1], "stepwise").values()] == [[0.0], [0.0]]


async def test_refine_mode_rewards_every_turn_and_stops_when_solved():
    plan = {
        PROBLEMS[0]: ["Answer: 1", "Hmm.", f"Answer: {GOLDS[0]}", "Answer: never asked"],
        PROBLEMS[1]: ["Answer: 1", "Answer: 2", "Answer: 3"],
    }
    groups = await play(plan, env(max_turns=3), limit=2)
    (solved,), (unsolved,) = (traces(g) for g in groups)
    assert solved.info["turn_rewards"] == [-1.0, -1.0, 1.0]
    assert solved.rewards["correct"].score == 1.0 and solved.num_turns == 3
    feedback = [n.message.content for n in solved.nodes if n.message.role == "user"][1:]
    assert feedback == [WRONG, MISSING]
    assert [t["extracted"] for t in solved.info["dapo_turns"]] == ["1", None, GOLDS[0]]
    assert unsolved.info["turn_rewards"] == [-1.0, -1.0, -1.0]
    assert unsolved.rewards["correct"].score == -1.0
    assert unsolved.messages[-1].role == "assistant"  # the last turn's retry is not sent
    assert read_turns(solved).nodes == solved.info["turn_nodes"]


async def test_the_stepwise_estimator_credits_the_turn_that_solved():
    plan = {PROBLEMS[0]: PerRollout(["Answer: 1", f"Answer: {GOLDS[0]}"], [f"Answer: {GOLDS[0]}"])}
    (group,) = await play(plan, env(max_turns=2), rollouts=2, limit=1)
    rewards = sorted(t.info["turn_rewards"] for t in traces(group))
    assert rewards == [[-1.0, 1.0], [1.0]]
    by_turns = {len(a): a for a in [c.advantages for c in score_group(group, "stepwise").values()]}
    # The default (absorbing, γ 1, mean-only): returns [1] and [-1 + 1, 1]; turn 0 is 1 against 0,
    # and at turn 1 the rollout that already stopped counts as 0 against the late right answer.
    assert by_turns[1] == pytest.approx([0.5])
    assert by_turns[2] == pytest.approx([-0.5, 0.5])
    # Kevin's (γ 0.4, pooled over the three turns, mean 7/15, population std): the failed first
    # attempt alone is below the mean.
    kevin = get_estimator("stepwise", gamma=0.4, baseline="pooled", scale="std")
    records = score_group(group, kevin)
    by_turns = {len(a): a for a in [c.advantages for c in records.values()]}
    assert by_turns[1] == pytest.approx([0.7071], abs=1e-4)
    assert by_turns[2] == pytest.approx([-1.4142, 0.7071], abs=1e-4)
    assert set(records) == {t.id for t in traces(group)}


async def test_overlong_shaping_uses_the_reported_length_of_each_response():
    long_reply = " ".join(["word"] * 40) + f"\nAnswer: {GOLDS[0]}"
    shaping = {"enabled": True, "max_tokens": 45, "cache_tokens": 10}
    plan = {PROBLEMS[0]: [long_reply]}
    config = env(taskset={"task": {"overlong": shaping}})
    ((trace,),) = [traces(g) for g in await play(plan, config, limit=1)]
    # 42 words = 42 tokens at this server: (35 - 42) / 10
    assert trace.metrics["response_tokens"] == 42.0
    assert trace.rewards["overlong_penalty"].score == pytest.approx(-0.7)
    assert trace.info["turn_rewards"] == [pytest.approx(1.0 - 0.7)]


async def test_a_local_file_runs_through_the_env(tmp_path):
    path = tmp_path / "mine.parquet"
    rows = [{"problem": "What is 2 + 3?", "answer": 5}, {"problem": "What is 2 * 3?", "answer": 6}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    plan = {"2 + 3": ["Answer: 5"], "2 * 3": ["Answer: 7"]}
    groups = await play(plan, {"taskset": {"id": "stepwise-dapo-math", "path": str(path)}})
    assert [traces(g)[0].info["turn_rewards"] for g in groups] == [[1.0], [-1.0]]
    assert [g[0].task.key for g in groups] == [f"{path}#0", f"{path}#1"]


def test_env_config_defaults_to_one_turn_and_the_in_process_harness():
    config = DapoMathEnvConfig(taskset={"id": "stepwise-dapo-math"})
    assert config.max_turns == 1
    assert config.agent.harness.id == "stepwise-chat"
    assert type(vf.resolve_env_config(env(max_turns=3))).__name__ == "DapoMathEnvConfig"


def task(answer: str, **config) -> DapoMathTask:
    return DapoMathTask(DapoMathData(id="t", prompt="p", answer=answer), DapoMathTaskConfig(**config))


def test_the_reward_hook_scores_the_last_reply_of_a_trace():
    builder = TraceBuilder("p")
    builder.sample("Answer: 3", n_tokens=30)
    builder.add(vf.UserMessage(content="again"))
    builder.sample("Answer: 4", n_tokens=12)
    trace = builder.trace
    assert response_lengths(trace) == [30, 12]
    shaped = task("4", overlong={"enabled": True, "max_tokens": 20, "cache_tokens": 10})
    asyncio.run(shaped.score(trace))
    assert trace.rewards["correct"].score == 1.0
    assert trace.rewards["overlong_penalty"].score == pytest.approx(-0.2)
    assert trace.reward == pytest.approx(0.8)
    assert trace.metrics["accuracy"] == 1.0 and trace.metrics["response_tokens"] == 12.0


def test_a_reply_the_env_scored_is_not_verified_again():
    builder = TraceBuilder("p")
    node = builder.sample("Answer: 4")
    mark = {"node": node, "extracted": "4", "correct": True, "rewards": {"correct": 7.0}, "metrics": {}}
    builder.trace.info["dapo_turns"] = [mark]
    asyncio.run(task("4").score(builder.trace))
    assert builder.trace.rewards["correct"].score == 7.0  # the env's record, reused
    builder.add(vf.UserMessage(content="again"))
    builder.sample("Answer: 5")  # a reply the env never scored
    asyncio.run(task("4").score(builder.trace))
    assert builder.trace.rewards["correct"].score == -1.0


def test_response_lengths_come_from_usage_without_tokens_and_are_unknown_without_either():
    builder = TraceBuilder("p", tokens=False)
    builder.sample("Answer: 3")
    builder.sample("Answer: 4")
    builder.trace.calls[0].usage = vf.Usage(prompt_tokens=5, completion_tokens=17)
    assert response_lengths(builder.trace) == [17, None]
    shaped = task("4", overlong={"enabled": True})
    # the rollout records it on the trace, with the fix
    with pytest.raises(TaskError, match="token count.*set overlong.tokenizer"):
        asyncio.run(shaped.score(builder.trace))
    assert builder.trace.rewards["dapo"] is None  # unscored, not guessed


def test_a_scripted_call_sees_the_dapo_prompt():
    seen: list[ChatCall] = []

    def record(call: ChatCall) -> str:
        seen.append(call)
        return "Answer: 0"

    asyncio.run(play({PROBLEMS[0]: [record]}, env(), limit=1))
    (call,) = seen
    assert call.prompt == ROWS[0]["prompt"][0]["content"]


def test_the_bundle_is_registered_and_resolves_through_verifiers():
    from stepwise_dapo_math import DapoMathEnv, DapoMathTaskset
    from verifiers.v1.utils.loaders import environment_class, load_taskset

    from verifiers_stepwise import available_environments

    assert available_environments()["stepwise-dapo-math"] == "stepwise_dapo_math"
    assert environment_class("stepwise-dapo-math") is DapoMathEnv
    config = vf.resolve_env_config(env()).taskset
    assert type(load_taskset(config)) is DapoMathTaskset


def test_the_answer_checker_imports_without_verifiers():
    code = (
        "import sys, stepwise_dapo_math.answers, stepwise_dapo_math.shaping, "
        "stepwise_dapo_math.symbolic; "
        "print(sorted(m for m in ('verifiers', 'datasets', 'math_verify') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory) -> str:
    """One token per byte (``verifiers_stepwise.testing.tokenizer``)."""
    return qwen3_byte_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def test_without_usage_the_configured_tokenizer_counts_the_response(byte_tokenizer):
    builder = TraceBuilder("p", tokens=False)
    node = builder.sample("Answer: 3")
    builder.trace.nodes[node].message.reasoning_content = "hmm"
    assert response_lengths(builder.trace) == [None]
    assert response_length(builder.trace, node, byte_tokenizer) == len("Answer: 3") + len("hmm")
    builder.trace.calls[0].usage = vf.Usage(prompt_tokens=5, completion_tokens=17)
    assert response_length(builder.trace, node, byte_tokenizer) == 17  # the provider's count comes first


@pytest.mark.parametrize(
    ("name", "message"), [("/no/such/tokenizer", "no such directory"), ("no-such-org/none", "cannot be loaded")]
)
def test_a_tokenizer_that_cannot_load_stops_the_taskset_before_any_episode(name, message, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = DapoMathTasksetConfig(dataset="bundled", task={"overlong": {"enabled": True, "tokenizer": name}})
    with pytest.raises(SystemExit, match=f"overlong.tokenizer '{name}'.*{message}") as stop:
        DapoMathTaskset(config).load()
    assert isinstance(stop.value.__cause__, TokenizerError)


async def test_the_readmes_dapo_refine_numbers():
    """The README's sentence on wrong turns: the env's own rewards, the default estimator's and
    GRPO's advantages on them, and the README printing exactly these numbers."""
    wrong = "Answer: 1"
    plan = {PROBLEMS[0]: PerRollout([wrong, f"Answer: {GOLDS[0]}"], [f"Answer: {GOLDS[0]}"], [wrong] * 4)}
    (group,) = await play(plan, env(max_turns=4), rollouts=3, limit=1)
    # the k-th rollout to reach the server gets plan k, not the k-th slot: put them in plan order
    planned = [[-1.0, 1.0], [1.0], [-1.0] * 4]
    rewards = sorted(
        (t.info["turn_rewards"] for t in traces(group)), key=lambda r: planned.index(r) if r in planned else -1
    )
    assert rewards == planned
    stepwise = get_estimator("stepwise")(rewards)
    expected = [[1.0, 5 / 3], [2.0], [-3.0, -7 / 3, -4 / 3, -2 / 3]]
    assert [a == pytest.approx(e) for a, e in zip(stepwise, expected)] == [True] * 3
    assert all(a < 0 for a in stepwise[2])  # all wrong: negative on every turn
    assert stepwise[0][0] > 0  # the wrong attempt shares in the fix that follows it ...
    grpo = get_estimator("grpo")(rewards)
    assert grpo[0][0] > 0 and grpo[0][0] == grpo[0][1]  # ... as under GRPO, where every turn shares
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    shown = (
        "the wrong first attempt gets +1.0 and its fix +1.67, right at once +2.0, the all-wrong rollout"
        " −3.0, −2.33, −1.33, −0.67 (GRPO: +0.46 on both turns, +0.93, −1.39 on all four;"
    )
    assert shown in readme
    assert [round(a, 2) for a in (*grpo[0], *grpo[1], *grpo[2])] == [0.46, 0.46, 0.93] + [-1.39] * 4
