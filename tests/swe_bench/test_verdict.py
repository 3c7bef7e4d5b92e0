"""The verdict's parts without a sandbox: the eval script's split, the plan's names, the judge."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stepwise_swe_bench import verdict_plugin
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.verdict import BOOTSTRAP, VERDICT_MARK, expected, judge, make_plan, split_eval_script

IDS = ["tests/test_a.py::test_one", "tests/test_a.py::test_two[x-1]"]


def report(outcomes: dict[str, str]) -> str:
    return f"noise\n{VERDICT_MARK} {json.dumps(outcomes)}\n"


def test_every_bundled_task_splits_into_its_set_up_and_one_bootstrapped_pytest_call():
    for instance in load_instances():
        split = split_eval_script(instance.test_spec().eval_script)
        assert split is not None and "git apply" in split.setup and "Start Test Output" not in split.setup
        assert "python -c" in split.command and "pytest.main" in split.command


def test_a_test_section_that_is_not_one_pytest_command_is_graded_as_before():
    script = ": '>>>>> Start Test Output'\n./tests/runtests.py --verbosity 2 admin\n: '>>>>> End Test Output'\n"
    assert split_eval_script(script) is None


def test_names_are_keyed_hashes_that_differ_per_secret_and_do_not_name_the_test():
    first, second = make_plan(IDS, secret=b"a" * 32), make_plan(IDS, secret=b"b" * 32)
    names = [*first.real_names(), *first.decoy_names()]
    assert len(set(names)) == 4 and all(n.startswith("test_") and len(n) == 21 for n in names)
    assert set(names).isdisjoint([*second.real_names(), *second.decoy_names()])
    assert not any("one" in n or "two" in n for n in names)


def test_the_judge_takes_only_passed_and_flags_decoys_that_did_not_fail():
    plan = make_plan(IDS, secret=b"k" * 32)
    (real_one, real_two), (decoy_one, decoy_two) = plan.real_names(), plan.decoy_names()
    honest = {real_one: "passed", real_two: "xfailed", decoy_one: "failed", decoy_two: "failed"}
    assert judge(plan, report(honest)) == ({IDS[0]: "passed", IDS[1]: "xfailed"}, None)
    _, why = judge(plan, report({**honest, decoy_two: "xfailed"}))
    assert why is not None and IDS[1] in why and "tampered" in why
    _, why = judge(plan, report({real_one: "passed", real_two: "passed"}))  # decoys left out
    assert why is not None and "(missing)" in why
    assert "2 reports" in judge(plan, report(honest) * 2)[1]
    assert "without the grader's report" in judge(plan, "PASSED tests/test_a.py::test_one")[1]


def test_an_exit_status_of_0_beside_failed_tests_is_forged():
    """pytest exits 1 when a test it reports failed or errored, and an honest run's decoys always
    fail: 0 there means an exit hook (``os._exit(0)`` after the report) forged it."""
    plan = make_plan(IDS, secret=b"k" * 32)
    (real_one, real_two), (decoy_one, decoy_two) = plan.real_names(), plan.decoy_names()
    honest = {real_one: "passed", real_two: "passed", decoy_one: "failed", decoy_two: "error"}
    assert judge(plan, report(honest), exit_code=1) == ({IDS[0]: "passed", IDS[1]: "passed"}, None)
    for outcomes in (honest, {**honest, decoy_two: "failed", real_two: "failed"}):
        _, why = judge(plan, report(outcomes), exit_code=0)
        assert why is not None and "exit status was forged" in why
    # Nothing failed (no decoys: tests without source to copy): 0 is pytest's own status.
    no_decoys = {real_one: "passed", real_two: "not-collected", decoy_one: "no-decoy", decoy_two: "not-collected"}
    assert judge(plan, report(no_decoys), exit_code=0)[1] is None


def test_an_xfailed_decoy_is_honest_only_for_a_test_the_gold_run_reports_xfail():
    """A test marked xfail that xfails under gold: its decoy's failure is reported as an xfail,
    and its real copy's xfail is what the gold run shows. Anywhere else an xfail is no pass, and
    an xfailed decoy (``pytest.xfail()`` from library code) is tampering."""
    plan = make_plan(IDS, secret=b"k" * 32)
    (real_one, real_two), (decoy_one, decoy_two) = plan.real_names(), plan.decoy_names()
    marked = {real_one: "passed", real_two: "xfailed", decoy_one: "failed", decoy_two: "xfailed"}
    assert judge(plan, report(marked), gold_xfail={IDS[1]}) == ({IDS[0]: "passed", IDS[1]: "xfailed"}, None)
    assert expected(IDS[1], {IDS[1]}) == "xfailed" and expected(IDS[0], {IDS[1]}) == "passed"
    _, why = judge(plan, report({**marked, decoy_one: "xfailed"}), gold_xfail={IDS[1]})
    assert why is not None and IDS[0] in why and IDS[1] not in why
    _, why = judge(plan, report({**marked, decoy_two: "xpassed"}), gold_xfail={IDS[1]})
    assert why is not None and IDS[1] in why


VALUES = st.recursive(
    st.integers()
    | st.fractions()
    | st.integers(-(2**40), 2**40).map(lambda n: n / 64)
    | st.text(min_size=1)
    | st.binary(min_size=1),
    lambda inner: (
        st.lists(inner, min_size=1)
        | st.lists(inner, min_size=1).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, min_size=1)
    ),
    max_leaves=6,
)
"""Expected values with a line: numbers (floats whose steps of 1 are exact), non-empty strings
and bytes, and containers of them."""


@given(VALUES, st.integers(0, 15))
def test_any_value_of_the_window_at_its_own_place_gives_the_same_window(value, draw):
    """What makes the expected value one of ``WIDTH`` with no prior: each of them, drawn at its
    own position, yields exactly the list that was shown, so the list cannot say which one it is."""
    values, at = verdict_plugin._window(value, draw)
    assert len(values) == verdict_plugin.WIDTH and values[at] is value
    assert all(type(other) is type(value) and other != value for i, other in enumerate(values) if i != at)
    for i, other in enumerate(values):
        assert verdict_plugin._window(other, i) == (values, i)


@given(VALUES)
def test_away_from_the_ends_of_a_line_the_draw_alone_places_the_expected_value(value):
    """``at`` is the draw's (so uniform over ``WIDTH`` places for a uniform draw) unless the
    line ends within ``WIDTH`` steps, e.g. at code point 0."""
    for draw in range(verdict_plugin.WIDTH):
        values, at = verdict_plugin._window(value, draw)
        ends = any(
            verdict_plugin._moved(value, k) is None for k in range(1 - verdict_plugin.WIDTH, verdict_plugin.WIDTH)
        )
        assert at == draw or ends


def test_a_bool_is_compared_with_both_bools():
    assert verdict_plugin._window(True, 0) == ([False, True], 1)
    assert verdict_plugin._window(False, 3) == ([False, True], 0)


@pytest.mark.parametrize("value", ["", b"", [], (), {}, [""], None, object(), float("inf"), 1e17, -(2.0**60)])
def test_a_value_without_a_line_is_compared_with_objects_equal_to_nothing(value):
    """Was: ``inf + 1`` and ``1e17 + 1`` equal the value itself, so the decoy of an honest test
    asserting ``== 1e17`` passed and the round was scored 0 as tampered with."""
    values, at = verdict_plugin._window(value, 2)
    assert at == 2 and values[at] is value
    others = [other for i, other in enumerate(values) if i != at]
    assert all(not other == value and not other == other for other in others)


def plugin_run(tmp_path, source: str, secret: bytes) -> tuple[dict[str, str], str | None]:
    """The verdict of ``source`` (one test module) run through the bootstrap and the plugin as
    the grader runs it, without a sandbox (the code here is the test's own)."""
    (tmp_path / "test_it.py").write_text(textwrap.dedent(source))
    ids = [f"test_it.py::{name}" for name in re.findall(r"^def (test_\w+)", textwrap.dedent(source), re.M)]
    plan = make_plan(ids, secret=secret)
    run = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_it.py"],
        input=plan.payload(),
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    return judge(plan, run.stdout.decode(), exit_code=run.returncode)


def secret_placing(first_draw: int) -> bytes:
    """A secret whose plan puts ``test_it.py::test_one``'s first expected value at ``first_draw``."""
    return next(
        secret
        for n in range(1000)
        if make_plan(["test_it.py::test_one"], secret=(secret := b"%d" % n)).tests[0]["draws"][0] % verdict_plugin.WIDTH
        == first_draw
    )


def test_an_honest_test_of_a_large_float_passes_and_its_decoy_fails(tmp_path):
    assert plugin_run(tmp_path, "def test_one():\n    assert 10.0**17 == 1e17\n", b"s") == (
        {"test_it.py::test_one": "passed"},
        None,
    )


GUESS = """\
class Guess:
    \"\"\"Equal only to the n-th value it is compared with: an off-by-one bug, or a guess.\"\"\"
    def __init__(self):
        self.calls = 0
    def __eq__(self, other):
        self.calls += 1
        return self.calls == {n}

def test_one():
    assert Guess() == "a-slug"
"""


@pytest.mark.parametrize("guess", range(4))
def test_a_guessing_equality_passes_at_one_place_in_width_and_is_not_flagged(tmp_path, guess):
    """The attack the decoys cannot flag (it looks like an honest bug): accept exactly one of the
    values an equality is compared with. It passes the real copy only where the draw put the
    expected value at its guess: at odds 1 / WIDTH per equality (before: 1 / 2, and certainty
    where the one perturbed value gave itself away, e.g. ``"a-slug"`` against ``"a-slu"``)."""
    for place in range(verdict_plugin.WIDTH):
        tests, why = plugin_run(tmp_path, GUESS.format(n=guess + 1), secret_placing(place))
        assert why is None
        assert tests["test_it.py::test_one"] == ("passed" if place == guess else "failed")
