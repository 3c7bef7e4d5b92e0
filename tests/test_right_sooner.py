"""Each bundled env declares its kind of credit, and its reward, credited by the estimator that
kind gets when the user names none, prefers being right sooner over right later (issue 34).

Each case runs the real env in-process against the scripted model: one rollout is right at a
turn where the other is wrong and puts it right later (for the quiz, whose questions all get
asked, the other answers the same questions right in a later order). Scored with no estimator
named (``score_group(group)``: the kind's default, ``traces.kinds``), the sooner rollout's turn
gets the higher advantage. stepwise-swe-bench's case runs in tests/swe_bench (it needs its
sandbox); the kinds' defaults themselves are tested in test_kinds.py.
"""

from __future__ import annotations

import re

import pytest
import verifiers.v1 as vf
from stepwise_dapo_math.loaders import BUNDLED_PATH

from verifiers_stepwise import score_group
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.traces.kinds import CREDIT_KIND, DEFAULTS, CreditKind
from verifiers_stepwise.traces.turns import read_turns

KEY_VAR = "STEPWISE_TEST_API_KEY"
SUM = re.compile(r"(\d+) \+ (\d+) =$")
WALK = re.compile(r"from (\d+) to (\d+): \d+ \+$")
AT = re.compile(r"(\d+) \+$")
DAPO_PROBLEM, DAPO_GOLD = next(
    (row["extra_info"]["problem"], row["reward_model"]["ground_truth"])
    for row in map(__import__("json").loads, BUNDLED_PATH.read_text().splitlines())
)


def right(call) -> str:
    a, b = SUM.search(call.messages[-1]["content"]).groups()
    return f" {int(a) + int(b)}"


def wrong(call) -> str:
    a, b = SUM.search(call.messages[-1]["content"]).groups()
    return f" {int(a) + int(b) + 1}"


def step(call) -> str:
    task = next(m["content"] for m in call.messages if m["role"] == "user")
    return f" {int(WALK.search(task).group(2)) - int(AT.search(call.messages[-1]['content']).group(1))}"


# env config, declared kind, the script, and each rollout's turn rewards (sooner first, later second)
CASES = {
    "stepwise-sums": (
        {"taskset": {"id": "stepwise-sums"}},
        CreditKind.REFINEMENT,
        {"Sums.": PerRollout([right], [wrong, right])},
        ([1.0], [-1.0, 1.0]),
    ),
    "stepwise-quiz": (
        {"taskset": {"id": "stepwise-quiz"}},
        CreditKind.INDEPENDENT,
        {"Sums, one": PerRollout([right, wrong, right], [wrong, right, right])},
        ([1.0, 0.0, 1.0], [0.0, 1.0, 1.0]),
    ),
    "stepwise-walk": (
        {"taskset": {"id": "stepwise-walk", "split": "test"}},
        CreditKind.STATES,
        {"from 10 to 17: 10 +": PerRollout([step], [" 1", step])},
        ([1.0], [0.0, 1.0]),
    ),
    "stepwise-refine": (
        {"taskset": {"id": "stepwise-refine"}},
        CreditKind.REFINEMENT,
        {"17 * 23": PerRollout(["391"], ["390", "391"])},
        ([1.0], [1 - 1 / 391 - 0.1, 1 / 391]),
    ),
    "stepwise-dapo-math": (
        {"taskset": {"id": "stepwise-dapo-math", "dataset": "bundled"}, "max_turns": 3},
        CreditKind.REFINEMENT,
        {DAPO_PROBLEM: PerRollout([f"Answer: {DAPO_GOLD}"], ["Answer: 1", f"Answer: {DAPO_GOLD}"])},
        ([1.0], [-1.0, 1.0]),
    ),
}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


async def group_of_two(config: dict, script: dict) -> list[vf.Episode]:
    with ModelServer(scripted(script, default="no idea")) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR)
        groups = await run_groups(config, client, rollouts=2, limit=2 if "walk" in str(config) else 1)
    return groups[-1]  # the walk's first held-out task (10 to 12) takes no step of the script


@pytest.mark.parametrize("env_id", CASES)
async def test_the_default_credit_prefers_right_sooner(env_id):
    config, kind, script, rewards = CASES[env_id]
    group = await group_of_two(config, script)
    traces = {tuple(round(r, 6) for r in read_turns(e.traces[0]).rewards): e.traces[0] for e in group}
    sooner, later = (traces[tuple(round(r, 6) for r in want)] for want in rewards)
    assert {t.info[CREDIT_KIND] for t in traces.values()} == {kind}
    records = score_group(group)
    assert {r.estimator for r in records.values()} == {DEFAULTS[kind].estimator}
    first = next(t for t, (a, b) in enumerate(zip(*rewards)) if a != b)  # the first turn they differ
    assert records[sooner.id].advantages[first] > records[later.id].advantages[first]


async def test_the_quiz_paid_at_the_end_is_outcome_credit_where_order_is_not_paid():
    """reward_at=end pays the count of right answers at the end: the same answers in another
    order are credited alike, and one more right answer is credited higher on every turn."""
    script = {"Sums, one": PerRollout([right, wrong, right], [wrong, right, right], [wrong, wrong, right])}
    with ModelServer(scripted(script, default="no idea")) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR)
        (group,) = await run_groups(
            {"taskset": {"id": "stepwise-quiz"}, "reward_at": "end"}, client, rollouts=3, limit=1
        )
    assert {e.traces[0].info[CREDIT_KIND] for e in group} == {CreditKind.OUTCOME}
    records = score_group(group)
    by_count = sorted((read_turns(e.traces[0]).rewards[-1], records[e.traces[0].id].advantages) for e in group)
    (one, fewer), (two, a), (two_too, b) = by_count
    assert (one, two, two_too) == (1.0, 2.0, 2.0) and a == b
    assert all(x > y for x, y in zip(a, fewer))
