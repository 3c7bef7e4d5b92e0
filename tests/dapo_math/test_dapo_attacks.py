"""Red team: the DAPO-math reward attacked the way the policy would, through its replies.

Each test sends what a model could write (to the scorer, or as scripted replies through the env
and the real ``vf-eval``) and asserts it earns no more than an honest wrong answer: reward −1 (not
the right answer's +1), bounded time, or a recorded error. What the scorer rejects is listed in
the bundle README ("What the scorer rejects"); properties of the design are pinned as such.
"""

from __future__ import annotations

import json
import time

import pytest
import verifiers.v1 as vf
from hypothesis import given
from hypothesis import strategies as st
from stepwise_dapo_math.answers import check_answer
from stepwise_dapo_math.loaders import BUNDLED_PATH
from stepwise_dapo_math.symbolic import SymbolicChecker, verify_pair

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.envs.harness import strip_think
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, ToolCallReply, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval

KEY_VAR = "STEPWISE_DAPO_ATTACK_KEY"
ROW = json.loads(BUNDLED_PATH.read_text().splitlines()[0])
PROBLEM, GOLD = ROW["extra_info"]["problem"], ROW["reward_model"]["ground_truth"]
TOOL_CALL = Reply(tool_calls=[ToolCallReply("python", {"code": "print(1)"})])


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")


# --- the answer scorer: one reply states one integer, or it is wrong --------------------------

HEDGES = [
    "Answer: 42\nAnswer: 43\nAnswer: one of those",  # the last line counts
    "Answer: 42 or 43",
    "Answer: 42, 43",
    "Answer: [42, 43]",
    "Answer: \\{42, 43\\}",
    "Answer: 41-43",
    "Answer: 42 \\pm 1",
    "Answer: $42$ or $43$",
    "Answer: \\boxed{42}\\boxed{43}",
    "Answer: 42\\text{ or }43",
    "Answer: 42 \\text{ and } \\text{43}",  # was 42: the trailing "unit" \text{43} was dropped
    "Answer: 42 \\mathrm{(or 43)}",  # was 42 the same way
    "Answer: 42 \\text{ (or } 43)",
    "Answer: 42 42",
    "Answer: 4 2",
    "Answer: 4 square 2",  # DAPO's reference deletes unit words anywhere: 42 there
    "Answer: 42 cm or 43 cm",
    "Answer: 42 \\text{ cm}^{43}",  # a power other than 2 or 3 is a value, not a unit's
    "Answer: 42 cm^2 43",
]
HIDDEN = [
    "Answer: 4\u200b2",  # zero-width space
    "Answer: \u202e24",  # right-to-left override: shows as 42
    "Answer: 4\u00ad2",  # soft hyphen
    "Answer: 42\u0301",  # combining accent
    "Answer: 42 <!-- 43 -->",
    "Answer: 42 % 43",  # a LaTeX comment
    "Answer: \\phantom{43}42",
    "Answer: 42\\phantom{3}",
    "Answer: 4\u00a02",
]
NOT_ANSWERS = [
    "",
    "I do not know.",
    "Answer: $Answer",  # the prompt's template echoed back
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.",
    "Answer:",
    "Answer: 42%",
    "Answer: 4.2e1",
    "Answer: \\frac{84}{2}",
    "Answer: 10^{2}",
    "Answer: 42.5",
    "Answer: 9" * 3,
    "\\boxed{42",  # never closed
]


@pytest.mark.parametrize("reply", HEDGES + HIDDEN + NOT_ANSWERS)
def test_hedged_hidden_or_missing_answers_score_wrong(reply):
    for gold in ("42", "43"):
        assert not check_answer(reply, gold).correct, (reply, gold)


@pytest.mark.parametrize(
    "reply",
    ["Answer: ４２", "Answer: 𝟒𝟐", "Answer: ٤٢", "Answer: \\text{42}", "Answer: 42 \\text{ apples}", "Answer: n = 42"],
)
def test_honest_variants_of_one_integer_still_count(reply):
    assert check_answer(reply, "42").correct


# Issue 36: each scored -1 against 42; DAPO's reference normalization drops these units.
UNITS = ["42 dollars", "42 degrees", "$42$ cm", "42 \\text{ cm}^2", "42 cm^2", "42\\,\\text{m}^{3}", "42 square feet"]


@pytest.mark.parametrize("answer", UNITS)
def test_an_answer_with_its_unit_counts_as_dapo_counts_it(answer):
    assert check_answer(f"Answer: {answer}", "42").correct
    assert not check_answer(f"Answer: {answer}", "2").correct


FRAGMENTS = st.sampled_from(
    [
        "Answer:",
        "answer :",
        "\\boxed{",
        "}",
        "{",
        " or ",
        ", ",
        "=",
        "\\text{",
        "\\mathrm{",
        "$",
        "\n",
        " ",
        "\\,",
        "\u200b",
        "\u202e",
        "<!--",
        "-->",
        "%",
        "\\phantom{",
        "1",
        "2",
        "12",
        "21",
        "-",
        ".0",
        ",000",
        "４",
        "°",
        "^\\circ",
        " cm",
        "square",
        "^2",
        "^{3}",
    ]
)


@given(st.lists(FRAGMENTS, max_size=14).map("".join), st.integers(-30, 30), st.integers(-30, 30))
def test_no_reply_is_right_for_two_different_answers(reply, a, b):
    """Whatever a reply holds, it is scored against one extracted integer: it cannot hedge."""
    if a != b:
        assert not (check_answer(reply, str(a)).correct and check_answer(reply, str(b)).correct)


# Shapes that would make a backtracking regex or a rescanning loop quadratic or worse, each
# about 1 MB (far beyond a reply the sampler lets through). Linear scoring reads each in well
# under a second; the bound only catches a catastrophe (minutes), not a slowdown.
GIANT = 1_000_000
GIANT_REPLIES = {
    "colons": ":" * GIANT,
    "full-width colons": "\uff1a" * GIANT,
    "answer labels without answers": ("Answer:" + " " * 50) * (GIANT // 57),
    "blanks before one colon": " " * GIANT + ":",
    "open boxes": "\\boxed{" * (GIANT // 7),
    "a brace-less box": "\\boxed " + "x" * GIANT,
    "deep braces": "Answer: " + "{" * GIANT + "}" * GIANT,
    "nested wrappers": "Answer: " + "\\text{" * (GIANT // 6) + "42" + "}" * (GIANT // 6),
    "trailing units": "Answer: 42" + " \\text{a}" * (GIANT // 9),
    "degree marks": "Answer: 42" + "^ " * (GIANT // 2) + "\\circ",
    "equals signs": "Answer: " + "=" * GIANT + "42",
    "thousands groups": "Answer: 1" + ",000" * (GIANT // 4) + ",00",
    "latex spaces": "Answer: 4" + "\\," * (GIANT // 2) + "2",
    "delimiters": "Answer: " + "\\(" * (GIANT // 2) + "42" + "\\)" * (GIANT // 2),
    "full-width digits": "Answer: " + "９" * GIANT,
}


@pytest.mark.parametrize("name", list(GIANT_REPLIES))
def test_giant_replies_are_scored_in_bounded_time(name):
    start = time.perf_counter()
    check = check_answer(GIANT_REPLIES[name], "42")
    assert time.perf_counter() - start < 15.0, name
    assert not check.correct or name == "equals signs"  # "====42" is "x = 42"


# --- the math-verify path: symbolic equivalence, not "any of these" ---------------------------


@pytest.mark.slow
def test_math_verify_does_not_accept_a_hedge_for_either_value():
    checker = SymbolicChecker(workers=1, timeout_s=5.0)
    try:
        hedges = [
            "\\frac{1}{2} \\text{ or } 3",
            "\\frac{1}{2}, 3",
            "\\{\\frac{1}{2}, 3\\}",
            "(\\frac{1}{2}, 3)",
            "1/2 \\text{ and } 3",
            "x = \\frac{1}{2}, 3",
            "$\\frac{1}{2}$ $3$",  # two math spans: one is read
            "3 $\\frac{1}{2}$",
            "\\frac{1}{2} \\lor 3",
            "\\mathbb{R}",
            "(-\\infty, \\infty)",
            "x",
            "\\emptyset",
        ]
        for answer in hedges:
            matched = [gold for gold in ("\\frac{1}{2}", "3") if checker.check(answer, gold).correct]
            assert len(matched) <= 1, (answer, matched)
        for answer in ("\\mathbb{R}", "(-\\infty, \\infty)", "x", "\\emptyset", "\\infty", "nan", "zoo"):
            assert not checker.check(answer, "\\frac{1}{2}").correct, answer
    finally:
        checker.close()


@pytest.mark.slow
def test_math_verify_leniencies_are_pinned_as_its_design():
    """math-verify's own reading, kept as it is (documented in the bundle README): a bare list
    matches the tuple, the set and the open interval with those numbers, a one-element set
    matches its element, a letter matches its multiple-choice option. Each still needs the right
    values; none matches a different value."""
    lenient = [("1,2", "(1,2)"), ("1,2", "\\{1,2\\}"), ("\\{3\\}", "3"), ("a", "\\text{(A)}")]
    for answer, gold in lenient:
        assert verify_pair(answer, gold), (answer, gold)
    for answer, gold in [("1,3", "(1,2)"), ("\\{4\\}", "3"), ("b", "\\text{(A)}"), ("\\pm\\infty", "3")]:
        assert not verify_pair(answer, gold), (answer, gold)


# A rational ground truth matches only exactly (issue 23): math-verify compares floats with a
# tolerance and reads one value of a hedge; the answer is also read whole and exactly.
HALF = "\\frac{1}{2}"
NEAR_MISSES = [
    ("0.5000001", HALF),  # measured: scored +1
    ("0.4999999", HALF),
    ("0.50000000000000000001", HALF),  # past a double's and math-verify's precision
    ("0.49999999999999999999", HALF),
    ("0.4999\\ldots", HALF),
    ("0.49999\u2026", HALF),  # an ellipsis
    ("5.000001e-1", HALF),  # scientific notation
    ("5.000001 \\times 10^{-1}", HALF),
    ("50.00001\\%", HALF),
    ("x = 0.5000001", HALF),
    ("\\boxed{0.5000001}", HALF),
    ("0.1000001", "0.1"),  # a decimal ground truth is the rational its digits spell
    ("\\frac{1}{10} + 10^{-9}", "0.1"),
    ("-0.6666667", "-\\frac{2}{3}"),
    ("-0.666666666666666666667", "-\\frac{2}{3}"),
    ("3.0000001", "3"),
    ("2.9999999", "3"),
    ("3.000000000000000000001", "3"),
    ("3 + 10^{-8}", "3"),
    ("\\frac{3000001}{1000000}", "3"),
]
# Each states two values (the first is the measured attack): wrong for either of them.
TWO_VALUES = [
    "\\frac{1}{2} \\text{, or } \\frac{7}{10}",
    "\\frac{7}{10} \\text{, or } \\frac{1}{2}",
    "\\frac{1}{2} \\text{, } \\frac{7}{10}",
    "\\frac{1}{2} \\text{ } \\frac{7}{10}",
    "\\frac12 \\text{ or } \\frac{7}{10}",
    "\\frac12 \\text{ otherwise } \\frac{7}{10}",
    "\\frac12 \\text{(or } \\frac{7}{10})",
    "\\frac{1}{2}\\quad\\text{or}\\quad\\frac{7}{10}",
    "\\frac12 or \\frac{7}{10}",
    "\\frac12 and \\frac{7}{10}",
    "\\frac12, \\frac{7}{10}",
    "\\frac12; \\frac{7}{10}",
    "\\frac12 \\lor \\frac{7}{10}",
    "\\frac12 \\vee \\frac{7}{10}",
    "\\boxed{\\frac12}\\boxed{\\frac{7}{10}}",
    "\\boxed{\\frac12} \\text{ or } \\boxed{\\frac{7}{10}}",
    "$\\frac12$ or $\\frac{7}{10}$",
    "0.5 \\text{ or } 0.7",
    "x = \\frac12 \\text{ or } x = \\frac{7}{10}",
]
# A relation ground truth (issue 36): math-verify's verdict alone paid both of the first two.
RELATION = "x = \\frac{1}{2}"
RELATION_FORGED = ["0.5000001", "\\frac{1}{2} \\text{, or } \\frac{7}{10}", "x = 0.5000001", "0.49999999999999999999"]
RELATION_HONEST = ["\\frac{1}{2}", "0.5", "x = 0.5", "x = \\frac12"]
EXACT = ["0.5", "0.50", "1/2", "\\frac{2}{4}", "\\dfrac12", "-\\frac{-1}{2}", "x = \\frac12", "\\boxed{\\frac12}"]
EXACT += ["50\\%", "5 \\times 10^{-1}", "2^{-1}", "\\frac{1}{2}\\text{ cm}", "\\{\\frac12\\}", "$\\frac{1}{2}$"]


@pytest.fixture(scope="module")
def checker():
    checker = SymbolicChecker(workers=1, timeout_s=10.0)
    yield checker
    checker.close()


@pytest.mark.parametrize(("answer", "gold"), NEAR_MISSES)
def test_math_verify_matches_a_rational_ground_truth_only_exactly(checker, answer, gold):
    result = checker.check(answer, gold)
    assert not result.correct and result.error is None and not result.timed_out, (answer, gold)


@pytest.mark.parametrize("answer", TWO_VALUES)
def test_math_verify_scores_a_hedge_between_two_values_as_wrong_for_both(checker, answer):
    for gold in (HALF, "\\frac{7}{10}", "0.5", "0.7"):
        assert not checker.check(answer, gold).correct, (answer, gold)


@pytest.mark.parametrize("answer", EXACT)
def test_math_verify_still_accepts_exact_forms_of_the_rational(checker, answer):
    assert checker.check(answer, HALF).correct, answer
    assert checker.check(answer, "0.5").correct, answer


def test_math_verify_matches_a_relation_ground_truth_only_exactly(checker):
    for answer in RELATION_FORGED:
        assert not checker.check(answer, RELATION).correct, answer
    for answer in RELATION_HONEST:
        assert checker.check(answer, RELATION).correct, answer


@pytest.mark.parametrize("hedge", [h.replace("\\frac12", "3").replace("\\frac{1}{2}", "3") for h in TWO_VALUES[2:]])
def test_integer_hedges_score_wrong_under_both_verifiers(checker, hedge):
    hedge = hedge.replace("\\frac{7}{10}", "4").replace("0.5", "3").replace("0.7", "4")
    for gold in ("3", "4"):
        assert not check_answer(f"Answer: {hedge}", gold).correct, (hedge, gold)
        assert not checker.check(hedge, gold).correct, (hedge, gold)


@pytest.mark.slow
def test_math_verify_bounds_a_giant_or_explosive_reply_and_records_it():
    checker = SymbolicChecker(workers=1, timeout_s=1.0)
    try:
        for answer in ("9^{9^{9^{9}}}", "{" * 50_000 + "1" + "}" * 50_000, "(10^{8})!", "2^{2^{40}}"):
            start = time.perf_counter()
            result = checker.check(answer, "\\frac{1}{2}")
            assert time.perf_counter() - start < 20.0, answer
            assert not result.correct, answer
        assert checker.check("0.5", "\\frac{1}{2}").correct  # the pool still answers afterwards
    finally:
        checker.close()


# --- the env: stalling, quitting and where the answer is read ---------------------------------


async def play(plan, **env_fields) -> list[vf.Episode]:
    env = {"taskset": {"id": "stepwise-dapo-math", "dataset": "bundled"}, **env_fields}
    rollouts = len(plan.plans) if isinstance(plan, PerRollout) else 1
    with ModelServer(scripted({PROBLEM: plan})) as server:
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VAR)
        (group,) = await run_groups(env, client, rollouts=rollouts, limit=1)
    return group


def only(group: list[vf.Episode]) -> list[vf.Trace]:
    return [trace for episode in group for trace in episode.traces]


async def test_a_model_that_only_calls_tools_ends_at_the_call_cap_with_every_attempt_wrong():
    """Was: no cap on model calls, so a tool call on every call never ended the episode (the
    harness answers "unknown tool" and asks again). The task has no tools: one call per turn."""
    (trace,) = only(await play([TOOL_CALL], max_turns=3))
    assert trace.num_turns == 3 and trace.stop_condition == "max_turns" and trace.ok
    # the tool loop is one turn (the harness never got a reply without a tool call), cut at the
    # run's cap of 3 calls; the two attempts it never reached count as wrong
    assert trace.info["turn_nodes"] == [[1, 3, 5]]
    assert trace.info["turn_rewards"] == [-3.0] and trace.info["forfeited_turns"] == 2
    assert trace.reward == -1.0


async def test_quitting_through_a_limit_earns_no_more_credit_than_failing():
    """Was: under the default estimator a rollout that got itself stopped (a tool call, here
    hitting the call cap) after one wrong answer got +0.33 next to a success and a rollout
    that kept trying: the absorbing baseline counts a stopped rollout's later turns as 0,
    which beats −1 per further wrong attempt. Now the attempts it did not make count as wrong."""
    plan = PerRollout(["Answer: 1", f"Answer: {GOLD}"], ["Answer: 1"], ["Answer: 1", TOOL_CALL], [TOOL_CALL])
    group = await play(plan, max_turns=3)
    by_rewards = {tuple(t.info["turn_rewards"]): t for t in only(group)}
    solved, failed, quit_late, quit_early = (
        by_rewards[(-1.0, 1.0)],
        by_rewards[(-1.0, -1.0, -1.0)],
        by_rewards[(-1.0, -2.0)],
        by_rewards[(-3.0,)],
    )
    assert quit_late.info["forfeited_turns"] == 1 and quit_early.info["forfeited_turns"] == 2
    assert "forfeited_turns" not in solved.info and "forfeited_turns" not in failed.info
    records = score_group(group, "stepwise")
    credit = {id(t): records[t.id].advantages for t in only(group)}
    assert credit[id(quit_early)][0] == pytest.approx(credit[id(failed)][0])  # both −0.75
    assert credit[id(quit_late)][0] == pytest.approx(credit[id(failed)][0])
    assert all(a < 0 for t in (failed, quit_late, quit_early) for a in credit[id(t)])
    assert all(a > 0 for a in credit[id(solved)])


async def test_quitting_through_a_token_cap_forfeits_the_attempts_left():
    long_wrong = "Answer: 1 " + "padding " * 50
    (trace,) = only(await play([long_wrong], max_turns=4, agent={"max_output_tokens": 20}))
    assert trace.stop_condition == "max_output_tokens"
    assert trace.info["turn_rewards"] == [-4.0] and trace.info["forfeited_turns"] == 3


async def test_running_out_the_agents_time_forfeits_the_attempts_left():
    """A deadline that expires mid-call (a slow, long reply) is a stop, not an error: the turn in
    flight and the ones after it are forfeited, charged to the last turn that replied."""
    (trace,) = only(await play(["Answer: 1", Reply(fault="timeout")], max_turns=3, agent={"timeout": {"rollout": 3}}))
    assert trace.ok and trace.stop_condition == "agent_timeout"
    assert trace.info["turn_rewards"] == [-3.0] and trace.info["forfeited_turns"] == 2


async def test_overflowing_the_context_is_an_excluded_error_unless_a_token_cap_makes_it_a_limit():
    """Not covered: a reply long enough that the next call overflows the server's context is
    answered 400, an error, so the rollout is excluded from credit (neither punished nor
    rewarded). A token cap below the context makes the same reply a limit: scored, forfeiting."""
    group = await play(["Answer: 1 " + "padding " * 50, Reply(fault="http_400")], max_turns=3)
    (trace,) = only(group)
    assert not trace.ok and trace.errors[-1].status_code == 400
    assert trace.info["turn_rewards"] == [-1.0] and "forfeited_turns" not in trace.info
    assert score_group(group, "stepwise")[trace.id].excluded
    group = await play(
        ["Answer: 1 " + "padding " * 50, Reply(fault="http_400")], max_turns=3, agent={"max_total_tokens": 40}
    )
    (trace,) = only(group)
    assert trace.ok and trace.stop_condition == "max_total_tokens"
    assert trace.info["turn_rewards"] == [-3.0] and trace.info["forfeited_turns"] == 2


def test_the_forfeit_rule_restores_the_no_positive_credit_for_failure_rule():
    """The estimator itself, on the groups above: the quitter's +0.33 before, −0.75 after."""
    stepwise = get_estimator("stepwise")
    before = stepwise([[-1.0, 1.0], [-1.0, -1.0, -1.0], [-1.0]])
    assert before[2][0] == pytest.approx(1 / 3)
    after = stepwise([[-1.0, 1.0], [-1.0, -1.0, -1.0], [-3.0]])
    assert after[2][0] == pytest.approx(after[1][0]) and after[2][0] < 0


def test_with_a_one_zero_reward_stalling_before_the_answer_is_free_under_the_default():
    """Design property (``incorrect_reward = 0``, γ = 1): a throwaway wrong answer before the
    right one costs nothing, so nothing teaches the policy to answer right at once. The default
    −1 makes each wrong attempt cost 1 (or use γ < 1)."""
    stepwise = get_estimator("stepwise")
    at_once, stalled, failed = stepwise([[1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert at_once[0] == pytest.approx(1 / 3) and stalled[0] == pytest.approx(1 / 3)
    at_once, stalled, failed = stepwise([[1.0], [-1.0, -1.0, 1.0], [-1.0, -1.0, -1.0]])
    assert at_once[0] == pytest.approx(2.0) and stalled[0] == pytest.approx(0.0)
    discounted = get_estimator("stepwise", gamma=0.5)([[1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert discounted[0][0] > discounted[1][0]


async def test_answers_outside_the_reply_text_do_not_count():
    """Reasoning fields and tool-call arguments are not the reply; an empty reply is missing."""
    plan = PerRollout(
        [Reply(content="Let me think.", reasoning=f"Answer: {GOLD}")],
        [Reply(content="", reasoning=f"Answer: {GOLD}")],
        [Reply(tool_calls=[ToolCallReply("submit", {"answer": GOLD})])],
        [""],
    )
    for trace in only(await play(plan)):
        assert trace.reward == -1.0 and trace.metrics["has_answer"] == 0.0


async def test_the_reply_text_is_read_whole_think_blocks_included():
    """Text in ``<think>`` inside the reply is part of the reply (a server with a reasoning
    parser moves it to ``reasoning_content``, which is not read): an answer line there counts
    only when no later one overrides it, and it must still be right. Pinned as the design."""
    plan = PerRollout(
        [f"<think>\nAnswer: {GOLD}\n</think>\nI am not sure."],
        [f"<think>\nAnswer: {GOLD}\n</think>\nAnswer: 1"],
        [f"<think>Answer: {GOLD}</think>I am not sure."],  # the answer runs to the end of its line
    )
    rewards = sorted(trace.reward for trace in only(await play(plan)))
    assert rewards == [-1.0, -1.0, 1.0]


def test_stripping_earlier_reasoning_is_linear_in_unclosed_think_tags():
    """Was: ``exclude_think`` stripped ``<think>`` blocks with a lazy regex that rescans to the
    end from every unclosed ``<think>``: 56 KB of them took 8.7 s on the event loop, which every
    rollout shares (a 1 MB reply: most of an hour)."""
    reply = vf.AssistantMessage(content="Answer: 1 <think>x</think> " + "<think>" * 150_000)
    start = time.perf_counter()
    assert strip_think(reply).content == "Answer: 1"
    assert time.perf_counter() - start < 5.0


@pytest.mark.slow
def test_vf_eval_stalling_and_quitting_rollouts_get_no_positive_credit(tmp_path):
    """The stall/quit attack through the real ``vf-eval`` and the traces it writes."""
    plan = PerRollout(["Answer: 1", f"Answer: {GOLD}"], ["Answer: 1"], ["Answer: 1", TOOL_CALL], [TOOL_CALL])
    with ModelServer(scripted({PROBLEM: plan})) as server:
        run = run_vf_eval(
            ["stepwise-dapo-math", "-n", "1", "-r", "4", "--env.max-turns", "3"],
            server.base_url,
            output_dir=tmp_path / "outputs",
            env={"HOME": str(tmp_path)},
        )
    episodes = run.episodes
    assert len(episodes) == 4 and all(e.ok for e in episodes)
    rewards = sorted(tuple(e.traces[0].info["turn_rewards"]) for e in episodes)
    assert rewards == [(-3.0,), (-1.0, -2.0), (-1.0, -1.0, -1.0), (-1.0, 1.0)]
    advantages = [c.advantages for c in score_group(episodes, "stepwise").values()]
    for episode, values in zip(episodes, advantages):
        solved = episode.traces[0].info["turn_rewards"][-1] == 1.0
        assert all((a > 0) if solved else (a < 0) for a in values), (episode.traces[0].info, values)


@pytest.mark.slow
def test_vf_eval_math_verify_pays_only_the_exact_rational(tmp_path):
    """The near-miss decimal and the two-value hedge measured in issue 23 (each scored +1), and
    two of this suite's own, through the real ``vf-eval`` with the gold's exact form as control."""
    replies = [HALF, "0.5000001", "\\frac{1}{2} \\text{, or } \\frac{7}{10}", "0.49999999999999999999"]
    replies.append("x = \\frac12 \\text{ or } x = \\frac{7}{10}")
    scored = math_verify_rewards(tmp_path, "What is one half as a fraction?", HALF, replies)
    assert scored == {HALF: 1.0} | {reply: -1.0 for reply in replies[1:]}


def math_verify_rewards(tmp_path, problem: str, answer: str, replies: list[str]) -> dict[str, float]:
    """Each reply's reward from the real ``vf-eval`` under ``math_verify``, one rollout each."""
    path = tmp_path / "problem.jsonl"
    path.write_text(json.dumps({"id": "problem", "problem": problem, "answer": answer}) + "\n")
    plan = PerRollout(*([f"Answer: {reply}"] for reply in replies))
    with ModelServer(scripted({problem: plan})) as server:
        run = run_vf_eval(
            ["stepwise-dapo-math", "-n", "1", "-r", str(len(replies)), "--env.taskset.path", str(path)]
            + ["--env.taskset.task.verifier", "math_verify"],
            server.base_url,
            output_dir=tmp_path / "outputs",
            env={"HOME": str(tmp_path)},
        )
    return {e.traces[0].info["dapo_turns"][-1]["extracted"]: e.traces[0].reward for e in run.episodes}


@pytest.mark.slow
def test_vf_eval_math_verify_matches_a_relation_ground_truth_exactly(tmp_path):
    """Issue 36: a ground truth written as a relation got no exact check, so the near miss and
    the hedge scored +1; through the real ``vf-eval``, the honest answers beside them."""
    replies = RELATION_HONEST[:2] + RELATION_FORGED[:2]
    scored = math_verify_rewards(tmp_path, "Solve 2x = 1 for x.", RELATION, replies)
    assert scored == {reply: 1.0 for reply in replies[:2]} | {reply: -1.0 for reply in replies[2:]}


@pytest.mark.slow
def test_vf_eval_pays_an_answer_with_its_unit_and_no_unit_forgery(tmp_path):
    """Issue 36: honest answers with units scored -1 against 42; through the real ``vf-eval``
    (the integer verifier, DAPO's default), beside forgeries that use a unit to hide a value."""
    problem = "How many dollars are 6 times 7 dollars?"
    path = tmp_path / "units.jsonl"
    path.write_text(json.dumps({"id": "units", "problem": problem, "answer": "42"}) + "\n")
    forged = ["4 square 2", "42 cm or 43 cm", "42 \\text{ cm}^{43}"]
    replies = UNITS[:4] + forged
    plan = PerRollout(*([f"Answer: {reply}"] for reply in replies))
    with ModelServer(scripted({problem: plan})) as server:
        run = run_vf_eval(
            ["stepwise-dapo-math", "-n", "1", "-r", str(len(replies)), "--env.taskset.path", str(path)],
            server.base_url,
            output_dir=tmp_path / "outputs",
            env={"HOME": str(tmp_path)},
        )
    scored = {e.traces[0].info["dapo_turns"][-1]["extracted"]: e.traces[0].reward for e in run.episodes}
    assert scored == {reply: 1.0 for reply in UNITS[:4]} | {reply: -1.0 for reply in forged}
