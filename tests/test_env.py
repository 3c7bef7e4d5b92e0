"""StepwiseMultiTurnEnv: the example env of docs/writing-envs.md, per-turn rewards on the trace, limits,
faults, and what exclude_think does to the trace's branches."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf

from verifiers_stepwise import StepwiseMultiTurnEnvConfig, score_group
from verifiers_stepwise.envs.harness import strip_think
from verifiers_stepwise.estimators.gigpo import GiGPO
from verifiers_stepwise.estimators.grpo import GRPO
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, Reply, scripted
from verifiers_stepwise.testing.traces import TraceBuilder
from verifiers_stepwise.traces.credit import Credit, write_credit
from verifiers_stepwise.traces.turns import append_turn, read_turns

KEY_VAR = "STEPWISE_TEST_API_KEY"
WRITING_ENVS = Path(__file__).resolve().parents[1] / "docs" / "writing-envs.md"


@pytest.fixture(scope="module")
def guess_env(tmp_path_factory):
    """The example of docs/writing-envs.md, written out as the module `guess_env` and imported."""
    text = WRITING_ENVS.read_text()
    section = text[text.index("## The env") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    root = tmp_path_factory.mktemp("example")
    (root / "guess_env.py").write_text(code)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("guess_env")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("guess_env", None)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


def client(server: ModelServer, **config) -> vf.EvalClientConfig:
    return vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR, **config)


async def play(script, env: dict, **kwargs) -> list[list[vf.Episode]]:
    with ModelServer(scripted(script)) as server:
        return await run_groups(env, client(server), **kwargs)


def only_trace(group: list[vf.Episode]) -> vf.Trace:
    ((trace,),) = [e.traces for e in group]
    return trace


async def test_the_documented_example_records_a_reward_per_turn(guess_env):
    script = {"Game 3": ["5", "2", "3"], "Game 7": ["1", "9", "8", "6"]}
    game3, game7 = await play(script, {"taskset": {"id": "guess-env"}})
    three, seven = only_trace(game3), only_trace(game7)
    assert type(game3[0]).__name__ == "Episode" and game3[0].ok and game7[0].ok
    # Game 3: 5 (0.8), 2 (0.9), 3 (solved: stop).
    assert three.info["turn_rewards"] == pytest.approx([0.8, 0.9, 1.0])
    assert three.info["turn_nodes"] == [[1], [3], [5]]
    assert three.rewards["solved"].score == 1.0 and three.stop_condition == "user_closed"
    # Game 7 never solves: max_turns (4) turns, the last turn's hint is not sent.
    assert seven.info["turn_rewards"] == pytest.approx([0.4, 0.8, 0.9, 0.9])
    assert seven.num_turns == 4 and seven.messages[-1].role == "assistant"
    assert seven.rewards["solved"].score == 0.0
    # The schema reads back and the stepwise estimator applies to the group.
    assert read_turns(three).rewards == three.info["turn_rewards"]


async def test_env_config_fields_are_cli_flags(guess_env):
    config = vf.resolve_env_config({"taskset": {"id": "guess-env"}, "max_turns": 2, "partial_credit": False})
    assert type(config).__name__ == "GuessConfig" and config.max_turns == 2
    (game3,) = await play({"Game 3": ["5", "4", "3"]}, config, limit=1)
    assert only_trace(game3).info["turn_rewards"] == [0.0, 0.0]


async def test_a_model_call_limit_ends_the_loop(guess_env):
    (game3,) = await play(
        {"Game 3": ["5", "4", "3"]},
        {"taskset": {"id": "guess-env"}, "agent": {"max_turns": 2}},
        limit=1,
    )
    trace = only_trace(game3)
    assert trace.stop_condition == "max_turns" and trace.ok
    assert trace.info["turn_rewards"] == pytest.approx([0.8, 0.9])


@pytest.mark.slow
async def test_faults_are_recorded_and_the_run_goes_on(guess_env, monkeypatch):
    """Each fault hits one game's third model call; earlier turns keep their rewards, the
    episode records the error, and the other games still run."""
    monkeypatch.setattr(guess_env.GuessTaskset, "load", _many_games)
    faults = ["http_500", "timeout", "malformed_json", "empty"]
    script = {f"Game {i}:": ["1", "2", Reply(fault=fault)] for i, fault in enumerate(faults, start=3)}
    script["Game 9:"] = ["1", "9"]
    env = {"taskset": {"id": "guess-env"}, "agent": {"harness": {"id": "stepwise-chat", "max_retries": 0}}}
    with ModelServer(scripted(script), hang_seconds=30) as server:
        groups = await run_groups(env, client(server, timeout={"read": 2}))
    *broken, clean = [only_trace(g) for g in groups]
    for trace, fault, group in zip(broken, faults, groups):
        assert not trace.ok and not group[0].ok, fault
        assert trace.errors and trace.errors[-1].type == "ProviderError", (fault, trace.errors)
        assert len(trace.info["turn_rewards"]) == 2, fault  # the turns it earned are kept
    statuses = [t.errors[-1].status_code for t in broken]
    assert statuses == [500, 504, 502, 502]
    assert clean.ok and clean.info["turn_rewards"] == pytest.approx([0.2, 1.0])
    # Credit: errored episodes are excluded and say so; the clean one is scored alone.
    records = {trace_id: r for group in groups for trace_id, r in score_group(group, "stepwise").items()}
    assert records[broken[0].id].excluded
    assert records[clean.id].advantages == [0.0, 0.0]


def _many_games(self):
    module = sys.modules[type(self).__module__]
    for secret in (3, 4, 5, 6, 9):
        prompt = f"Game {secret}: guess my number from 1 to 10. Reply with a number."
        yield module.GuessTask(module.GuessData(secret=secret, prompt=prompt))


def test_exclude_think_is_carried_out_by_the_harness():
    config = StepwiseMultiTurnEnvConfig(exclude_think=True)
    assert config.agent.harness.exclude_think is True
    with pytest.raises(ValueError, match="exclude_think needs a harness that rebuilds each turn's context"):
        StepwiseMultiTurnEnvConfig(exclude_think=True, agent={"harness": {"id": "null"}})


THINKING = {"Game 3": ["<think>start in the middle</think>5", Reply(content="2", reasoning="lower"), "3"]}


async def test_without_exclude_think_the_exchange_is_one_branch(guess_env):
    (game3,) = await play(THINKING, {"taskset": {"id": "guess-env"}}, limit=1)
    trace = only_trace(game3)
    (branch,) = trace.branches
    assert [m.role for m in branch.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert branch.messages[1].content == "<think>start in the middle</think>5"
    assert branch.messages[3].reasoning_content == "lower"


async def test_exclude_think_gives_each_turn_its_own_branch(guess_env):
    """Earlier reasoning leaves the context, so each request forks the graph where the first
    rewritten assistant message stands: turn t ends branch t, and a branch holds exactly one
    sampled turn — Kevin's one sample per turn."""
    with ModelServer(scripted(THINKING)) as server:
        (game3,) = await run_groups({"taskset": {"id": "guess-env"}, "exclude_think": True}, client(server), limit=1)
        sent = server.chat_requests
    trace = only_trace(game3)
    assert trace.info["turn_nodes"] == [[1], [4], [7]]
    branches = [[trace.nodes.index(n) for n in b.nodes] for b in trace.branches]
    assert branches == [[0, 1], [0, 2, 3, 4], [0, 2, 3, 5, 6, 7]]
    sampled = [[i for i in b if trace.nodes[i].sampled] for b in branches]
    assert sampled == [[1], [4], [7]]
    # The model saw earlier turns without their reasoning; each sampled node keeps its own.
    assert [m["content"] for m in sent[1]["messages"]] == [sent[0]["messages"][0]["content"], "5", "Lower."]
    assert "reasoning_content" not in sent[2]["messages"][3]
    assert trace.nodes[1].message.content == "<think>start in the middle</think>5"
    assert trace.nodes[4].message.reasoning_content == "lower"
    assert trace.nodes[5].message.reasoning_content is None  # the rewritten copy is context


def test_exclude_think_branches_carry_one_turns_credit_each_with_tokens():
    """The same branch structure with train-client tokens (verifiers' commit path): each
    branch's advantages cover only its own turn."""
    b = TraceBuilder(prompt="Game 3: guess my number.", system=None)
    for t, (reply, reasoning) in enumerate([("<think>middle</think>5", None), ("2", "lower"), ("3", None)]):
        if t:
            b.context = [strip_think(m) if isinstance(m, vf.AssistantMessage) else m for m in b.context]
            b.add(vf.UserMessage(content="Lower." if t == 1 else "Higher."))
        append_turn(b.trace, [0.8, 0.9, 1.0][t], [b.sample(reply, reasoning=reasoning)])
    trace = b.trace
    assert len(trace.branches) == 3
    turns = read_turns(trace)
    write_credit(trace, Credit("test", "rewards", turns.rewards, turns.nodes, [-0.5, 0.25, 1.5]))
    for branch, own in zip(trace.branches, [-0.5, 0.25, 1.5]):
        values = [a for a, m in zip(branch.advantages, branch.sampled_mask) if m]
        assert values == [own] * 3  # only this branch's own turn is sampled on it
        assert sum(branch.sampled_mask) == 3


async def test_exclude_think_without_reasoning_is_one_branch(guess_env):
    """Nothing to strip, nothing changes: answers padded with whitespace and no reasoning stay
    one branch (stripping whitespace used to fork the graph at every turn)."""
    script = {"Game 3": [" 5\n", "2 ", "3"]}
    (game3,) = await play(script, {"taskset": {"id": "guess-env"}, "exclude_think": True}, limit=1)
    trace = only_trace(game3)
    (branch,) = trace.branches
    assert [m.content for m in branch.messages if m.role == "assistant"] == [" 5\n", "2 ", "3"]


@pytest.mark.parametrize("given", [{}, {"reward": 1.0, "score": 1.0}, {"message": "again"}])
def test_a_turn_result_takes_exactly_one_of_reward_and_score(given):
    from verifiers_stepwise.envs.env import TurnResult

    with pytest.raises(ValueError, match="exactly one of reward= and score="):
        TurnResult(**given)
    assert TurnResult(0.5, "again").reward == 0.5 and TurnResult(score=0.5).score == 0.5


async def test_turn_state_hook_records_each_turns_anchor_state(guess_env, monkeypatch):
    """The state a turn acts from, said by the env before the turn, lands in turn_states; the
    hint "Lower." recurs across the two games, so gigpo's step advantage is not 0."""
    monkeypatch.setattr(guess_env.GuessEnv, "turn_state", lambda self, task, index, trace, message: message or "start")
    script = {"Game 3": ["5", "2", "3"], "Game 7": ["1", "9", "8", "6"]}
    game3, game7 = await play(script, {"taskset": {"id": "guess-env"}})
    three, seven = only_trace(game3), only_trace(game7)
    assert three.info["turn_states"] == ["start", "Lower.", "Higher."]
    assert seven.info["turn_states"] == ["start", "Higher.", "Lower.", "Lower."]
    rewards = [three.info["turn_rewards"], seven.info["turn_rewards"]]
    states = [three.info["turn_states"], seven.info["turn_states"]]
    assert (
        [c.advantages for c in score_group(game3 + game7, GiGPO()).values()]
        == GiGPO()(rewards, states)
        != GRPO()(rewards)
    )
