"""End to end: the real ``vf-eval stepwise-swe-bench`` against the local model server, whose
scripted model works through tool calls, with every command in the episode's Docker container.

One run, three bundled tasks, two rollouts each (a tool server starts per rollout, so the
scenarios share a run):

- semverlite: rollout A fixes the bug in round 1 -> resolved, turn rewards [1]; rollout B cheats
  instead: a root conftest.py that marks every test passed, then a pytest.ini plugin -> both
  rounds rejected with the reason recorded, [-0.1, 0] (an unresolved round that leads to another
  costs the env's turn_cost, 0.1);
- intervals: rollout A "fixes" it by also merging intervals one apart, which breaks a
  PASS_TO_PASS test -> never resolved; rollout B attacks the sandbox through ``bash`` and then
  runs out of its step budget;
- slugs: rollout A needs two rounds (the feedback names the test still failing) -> [-0.1, 1];
  rollout B never changes anything -> [-0.1, 0]; the stepwise advantages credit A's second round.
"""

from __future__ import annotations

import json

import pytest
import verifiers.v1 as vf
from stepwise_swe_bench.env import SweBenchEnvConfig
from stepwise_swe_bench.grading import hidden_lines
from stepwise_swe_bench.instances import load_instances

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, ToolCallReply, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.kinds import CREDIT_KIND, DEFAULTS, CreditKind
from verifiers_stepwise.traces.turns import read_turns

from .conftest import containers, loopback_server, need

# Every test reads the module's one real vf-eval run of SWE episodes (about 40 s).
pytestmark = pytest.mark.slow

SECRET = "sk-host-secret-5d1e7a"
COST = SweBenchEnvConfig().turn_cost
TASKS = ["stepwise__semverlite-12", "stepwise__intervals-1", "stepwise__slugs-21"]


def call(name: str, **arguments) -> Reply:
    return Reply(tool_calls=[ToolCallReply(name, arguments)])


def bash(command: str) -> Reply:
    return call("bash", command=command)


SOLVE = [
    call("view", path="semverlite/version.py", start_line=40),
    call(
        "edit", path="semverlite/version.py", old="return max(versions)", new="return max(versions, key=Version.parse)"
    ),
    call("submit", summary="compare parsed versions"),
    "latest() now compares parsed versions.",
]
PASS_ALL = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
CHEAT = [
    call("create", path="conftest.py", content=PASS_ALL),
    call("submit"),
    "Every test passes now.",
    call("bash", command="rm conftest.py && printf '[pytest]\\naddopts = -p passall\\n' > pytest.ini"),
    call("create", path="passall.py", content=PASS_ALL),
    call("submit"),
    "Done.",
]
BREAK_PASS_TO_PASS = [
    call("edit", path="intervals/core.py", old="start < merged[-1][1]", new="start <= merged[-1][1] + 1"),
    call("submit"),
    "Adjacent intervals are merged now.",
    "I think the change is right.",
]
TWO_ROUNDS = [
    call("edit", path="slugs/slugify.py", old='r"[^A-Za-z0-9]"', new='r"[^A-Za-z0-9]+"'),
    call("submit"),
    "Runs of separators collapse now.",
    call("edit", path="slugs/slugify.py", old="ascii_text).lower()", new="ascii_text).strip(separator).lower()"),
    call("submit"),
    "Separators at the ends are stripped too.",
]
GIVE_UP = ["I could not reproduce the problem.", "Still nothing to change."]


def attacks(outside: str, port: int) -> list:
    """Round 1: seven attacks and one call past the round's budget of 7; round 2: calls until
    the episode's budget of 12 is gone."""
    return [
        bash(f"echo pwned > {outside}; echo pwned > /usr/pwned"),
        bash(f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""),
        bash("env; cat /proc/*/environ"),
        bash(":(){ :|:& };:; sleep 30"),
        bash("while :; do :; done"),
        bash("head -c 1G /dev/zero | tr '\\0' x"),
        bash("cat /etc/shadow; ls /root"),
        bash("echo one call too many"),
        "Done poking around.",
        *[bash("true")] * 4,
        bash("echo past the episode budget"),
        "This call is never answered.",
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    need("docker")
    outside = tmp_path_factory.mktemp("host") / "outside.txt"
    home = tmp_path_factory.mktemp("home")
    before = containers()
    with loopback_server() as (port, accepted):
        groups = play(outside, port, home)
    left = containers() - before
    return {"groups": groups, "outside": outside, "accepted": accepted, "home": home, "left": left}


def play(outside, port: int, home) -> list[list]:
    """Run vf-eval; the episodes of each of TASKS."""
    script = scripted(
        {
            "semverlite": PerRollout(SOLVE, CHEAT),
            "stepwise-fixtures/intervals": PerRollout(BREAK_PASS_TO_PASS, attacks(str(outside), port)),
            "stepwise-fixtures/slugs": PerRollout(TWO_ROUNDS, GIVE_UP),
        }
    )
    flags = [
        "stepwise-swe-bench", "-n", "3", "-r", "2", "--env.max-turns", "2",
        "--env.taskset.instance-ids", json.dumps(TASKS),
        "--env.taskset.task.sandbox.timeout-s", "3",
        "--env.taskset.task.budget.max-steps-per-round", "7",
        "--env.taskset.task.budget.max-steps", "12",
    ]  # fmt: skip
    with ModelServer(script) as server:
        run = run_vf_eval(
            flags,
            server.base_url,
            output_dir=home / "outputs",
            env={"HOME": str(home), "SWE_BENCH_DB_PASSWORD": SECRET},
        )
    groups: dict[str, list] = {}
    for episode in run.episodes:
        groups.setdefault(episode.traces[0].task.data.id, []).append(episode)
    return [groups[t] for t in TASKS]


def traces(group) -> list[vf.Trace]:
    return [episode.traces[0] for episode in group]


def by_rollout(group, marker: str) -> tuple[vf.Trace, vf.Trace]:
    """(the rollout whose transcript contains ``marker``, the other one)."""
    first, second = traces(group)
    return (first, second) if marker in str(first.messages) else (second, first)


def test_a_model_that_fixes_the_bug_is_resolved_with_reward_1(run):
    trace, _ = by_rollout(run["groups"][0], "key=Version.parse")
    assert trace.ok, trace.errors
    assert trace.info["turn_scores"] == [1.0] and read_turns(trace).rewards == [1.0]
    assert trace.rewards["resolved"].score == 1.0
    (round_,) = trace.info["swe_bench"]["rounds"]
    assert round_["status"] == "RESOLVED_FULL" and round_["submitted"] and round_["rejected"] is None
    assert "key=Version.parse" in round_["patch"]
    # One turn: every sampled node of the tool loop belongs to it.
    sampled = [i for i, node in enumerate(trace.nodes) if node.sampled]
    assert trace.info["turn_nodes"] == [sampled] and len(sampled) == 4


def test_changing_the_test_machinery_scores_0_with_the_reason(run):
    """A conftest.py that marks every test passed got reward 1 when grading ran in the model's
    repository; now the diff is rejected before any test runs, each round, with the reason."""
    cheat, _ = by_rollout(run["groups"][0], "pytest_runtest_makereport")
    assert cheat.ok, cheat.errors
    assert read_turns(cheat).rewards == [-COST, 0.0] and cheat.rewards["resolved"].score == 0.0
    first, second = cheat.info["swe_bench"]["rounds"]
    assert "conftest.py is a pytest conftest.py" in first["rejected"]
    assert "pytest.ini is a pytest configuration file" in second["rejected"]
    assert not first["resolved"] and not second["resolved"]
    feedback = [m.content for m in cheat.messages if m.role == "user"][1]
    assert "was not graded" in feedback and "conftest.py" in feedback
    # No line of the hidden tests reached the model.
    (instance,) = load_instances(instance_ids=[TASKS[0]])
    assert not [line for line in hidden_lines(instance.test_patch) if line in str(cheat.messages)]


def test_breaking_a_pass_to_pass_test_is_not_resolved(run):
    broken, _ = by_rollout(run["groups"][1], "merged[-1][1] + 1")
    assert broken.ok and read_turns(broken).rewards == [-COST, 0.0]
    assert broken.rewards["resolved"].score == 0.0
    first, second = broken.info["swe_bench"]["rounds"]
    assert first["rejected"] is None and first["log_parsed"], first
    assert first["fail_to_pass"]["failure"] == []
    assert first["pass_to_pass"]["failure"] == ["tests/test_core.py::test_merge_disjoint"]
    # The failing test and the log went back to the model as the next round's message.
    feedback = [m.content for m in broken.messages if m.role == "user"][1]
    assert "tests/test_core.py::test_merge_disjoint" in feedback and "AssertionError" in feedback
    assert not second["resolved"] and not second["submitted"]


def test_attacks_through_tools_fail_safely_and_are_recorded(run):
    _, attacker = by_rollout(run["groups"][1], "merged[-1][1] + 1")
    assert attacker.ok, attacker.errors  # the run went on
    assert not run["outside"].exists() and run["accepted"] == []
    transcript = str(attacker.messages)
    assert SECRET not in transcript
    assert "Connection refused" in transcript and "Read-only file system" in transcript
    calls = attacker.info["swe_bench"]["tool_calls"]
    ended = {c["input"]: c.get("termination") for c in calls if "termination" in c}
    assert ended[":(){ :|:& };:; sleep 30"] == "timeout"
    assert ended["while :; do :; done"] == "timeout"
    assert ended["head -c 1G /dev/zero | tr '\\0' x"] == "output_limit"
    refused = [c for c in calls if c.get("refused")]
    assert [c["input"] for c in refused] == ["echo one call too many", "echo past the episode budget"]
    # The round's refusal reached the model; the episode's was the last thing it got: the
    # model call carrying it was refused by the budget stop, so only the record has it.
    assert "This round's step or time budget is used up" in transcript
    # Both rounds were graded; the budget then ended the episode.
    assert read_turns(attacker).rewards == [-COST, 0.0]
    assert attacker.stop_condition == "out_of_budget"
    assert attacker.metrics["steps"] == 13


def test_a_second_round_fix_shows_in_the_turn_rewards_and_gets_the_credit(run):
    group = run["groups"][2]
    fixed, idle = by_rollout(group, "strip(separator)")
    assert read_turns(fixed).rewards == [-COST, 1.0]
    assert read_turns(idle).rewards == [-COST, 0.0]
    first = fixed.info["swe_bench"]["rounds"][0]
    assert first["fail_to_pass"]["failure"] == ["tests/test_slugify.py::test_no_separator_at_the_ends"]
    feedback = [m.content for m in fixed.messages if m.role == "user"][1]
    assert "test_no_separator_at_the_ends" in feedback and "1 round left" in feedback
    # Turns: the sampled nodes of each round's tool loop.
    assert [len(nodes) for nodes in fixed.info["turn_nodes"]] == [3, 3]

    # discounted (γ 0.4), the fixing round gets more credit than the round before it
    advantages = [c.advantages for c in score_group(group, get_estimator("stepwise", gamma=0.4)).values()]
    fixed_adv, idle_adv = (
        (advantages[0], advantages[1]) if traces(group)[0] is fixed else (advantages[1], advantages[0])
    )
    assert fixed_adv[1] > fixed_adv[0] > max(idle_adv)


def test_resolving_sooner_is_credited_above_resolving_later_by_the_kinds_default(run):
    """The env declares refinement credit; its default credits the round-1 fix (semverlite's
    [1]) above the first round of the round-2 fix (slugs' [-0.1, 1]), as one group: without the
    turn cost both sum to 1 and ``grpo`` could not tell them apart (tests/test_right_sooner.py)."""
    (sooner, _), (later, _) = (
        by_rollout(run["groups"][0], "key=Version.parse"),
        by_rollout(run["groups"][2], "strip(separator)"),
    )
    assert {sooner.info[CREDIT_KIND], later.info[CREDIT_KIND]} == {CreditKind.REFINEMENT}
    chosen = DEFAULTS[CreditKind.REFINEMENT]
    now, then = get_estimator(chosen.estimator, **chosen.options)(
        [read_turns(sooner).rewards, read_turns(later).rewards]
    )
    assert now[0] > then[0]


def test_every_episode_is_recorded_and_cleaned_up(run):
    assert sum(len(group) for group in run["groups"]) == 6
    assert all(episode.ok for group in run["groups"] for episode in group)
    # Setup: the repository (the task's part) within the rollout's whole setup, no tool server.
    for trace in (episode.traces[0] for group in run["groups"] for episode in group):
        assert 0 < trace.info["swe_bench"]["setup_s"] <= trace.timing.setup.duration < 10
    # The containers (the episodes' and their grading runs') went away with their rollouts.
    assert run["left"] == set()
