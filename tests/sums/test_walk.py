"""stepwise-walk: steps of 1 to 9 to a target, a reward only on arrival, positions as anchor states."""

from __future__ import annotations

import re

import pytest
import verifiers.v1 as vf
from stepwise_walk import WalkEnv
from stepwise_walk.walk import HEADER, position, split_walks, step_of

from verifiers_stepwise import available_environments, get_estimator, score_group
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

from .conftest import KEY_VAR

GOAL = re.compile(r"from (\d+) to (\d+): \d+ \+$")
AT = re.compile(r"(\d+) \+$")


def left(call) -> int:
    """What is left to walk: the target (from the task's line) less where the walk stands now."""
    task = next(m["content"] for m in call.messages if m["role"] == "user")
    return int(GOAL.search(task).group(2)) - int(AT.search(call.messages[-1]["content"]).group(1))


def exact(call) -> str:
    return f" {left(call)}"


def one(call) -> str:
    return " 1"


# Per rollout (arrival order): the exact step at once; a step of 1 then the exact rest; a step past
# the target; a reply with no step (nothing moves), then the exact step; steps of 1 only.
PLANS = PerRollout([exact], [one, exact], [lambda c: f" {left(c) + 1}"], ["go", exact], [one])


def test_the_bundle_registers_its_env_id():
    assert available_environments()["stepwise-walk"] == "stepwise_walk"
    assert vf.environment_class("stepwise-walk") is WalkEnv


def test_the_splits_are_disjoint_and_every_shown_walk_reaches_its_target():
    train, test = split_walks("train"), split_walks("test")
    assert (len(train), len(test)) == (400, 100) and not set(train) & set(test)
    config = {"taskset": {"id": "stepwise-walk", "split": "test"}}
    tasks = list(vf.load_environment(vf.resolve_env_config(config)).taskset)
    assert [t.data.prompt for t in tasks] == [
        t.data.prompt for t in vf.load_environment(vf.resolve_env_config(config)).taskset
    ]
    for task in tasks:
        assert task.data.prompt.startswith(HEADER)
        shots = task.data.prompt[len(HEADER) :].split("from ")[1:-1]  # the last is the task
        for shot in shots:  # each shown walk adds its steps up to its target, the last exact
            start, target = map(int, re.match(r"(\d+) to (\d+):", shot).groups())
            steps = [int(s) for s in re.findall(r"\+ (\d+)", shot)]
            assert 1 <= len(steps) <= 2 and all(1 <= s <= 9 for s in steps)
            assert start + sum(steps) == target and shot.rstrip().endswith("reached.")


@pytest.mark.parametrize(
    "reply, step", [(" 4", 4), ("9", 9), (" 4 = 38", 4), (" 0", None), (" 10", None), (" -2", None), ("go", None)]
)
def test_a_step_is_the_first_integer_from_1_to_9(reply, step):
    assert step_of(reply) == step
    assert position(30, [reply, reply]) == 30 + 2 * (step or 0)


async def walk_from_10_to_17():
    """The five plans on the second held-out walk, 10 to 17 (the first, 10 to 12, gets no step):
    far enough that steps of 1 do not arrive in three, near enough for one exact step."""
    with ModelServer(scripted({"from 10 to 17: 10 +": PLANS}, default="no step")) as server:
        _, group = await run_groups(
            {"taskset": {"id": "stepwise-walk", "split": "test"}},
            vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR),
            rollouts=5,
            limit=2,
        )
        followups = [r["messages"][-1]["content"] for r in server.chat_requests if len(r["messages"]) > 2]
    assert {(e.traces[0].task.data.start, e.traces[0].task.data.target) for e in group} == {(10, 17)}
    return group, followups


async def test_only_arrival_earns_and_each_turn_acts_from_its_position():
    group, followups = await walk_from_10_to_17()
    start = 10
    turns = sorted((read_turns(e.traces[0]).rewards, e.traces[0].info["turn_states"]) for e in group)
    assert turns == sorted(
        [
            ([1.0], [start]),  # the exact step
            ([0.0, 1.0], [start, start + 1]),  # one, then the rest
            ([0.0], [start]),  # past the target: the walk ends
            ([0.0, 1.0], [start, start]),  # no step moves nothing; then the exact step
            ([0.0, 0.0, 0.0], [start, start + 1, start + 2]),  # ones, never arriving in 3 steps
        ]
    )
    assert sorted(e.traces[0].reward for e in group) == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert f"a step is 1 to 9. {start} +" in followups and f"at {start + 1}. {start + 1} +" in followups


async def test_gigpo_compares_the_turns_that_stepped_from_the_same_position():
    group, _ = await walk_from_10_to_17()
    gigpo = [c.advantages for c in score_group(group, get_estimator("gigpo")).values()]
    grpo = [c.advantages for c in score_group(group, get_estimator("grpo")).values()]
    assert gigpo != grpo  # positions recur across the rollouts, so the step advantage is not 0


@pytest.mark.slow
def test_vf_eval_runs_it(tmp_path):
    with ModelServer(scripted({"from 10 to 17: 10 +": PLANS}, default="no step")) as server:
        run = run_vf_eval(
            ["stepwise-walk", "-n", "2", "-r", "5", "--env.taskset.split", "test"],
            server.base_url,
            output_dir=tmp_path,
            env={"HOME": str(tmp_path)},
        )
    assert len(run.episodes) == 10 and all(e.traces[0].ok for e in run.episodes)
    walks = sorted((e.traces[0].task.data.target, e.traces[0].reward) for e in run.episodes)
    assert walks == [(12, 0.0)] * 5 + [(17, r) for r in (0.0, 0.0, 1.0, 1.0, 1.0)]
