"""The verdict on its own, without a sandbox or the environment: the eval script's split, the
plan's names, the judge, the comparisons, and the plugin in a real pytest run through the
bootstrap."""

from __future__ import annotations

import collections
import enum
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.verdict import BOOTSTRAP, VERDICT_MARK, expected, judge, make_plan, plugin, split_eval_script

IDS = ["tests/test_a.py::test_one", "tests/test_a.py::test_two[x-1]"]


def report(outcomes: dict[str, str]) -> str:
    pairs = " ".join(f"{name}={outcome}" for name, outcome in outcomes.items())
    return f"noise\n{VERDICT_MARK} {pairs}\n"


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


LEAVES = (
    st.integers()
    | st.fractions()
    | st.floats(min_value=1e-250, max_value=1e250)
    | st.floats(min_value=-1e250, max_value=-1e-250)
    | st.text(min_size=1)
    | st.binary(min_size=1)
)
VALUES = st.recursive(
    LEAVES | st.none() | st.booleans() | st.just(""),
    lambda inner: st.lists(inner) | st.lists(inner).map(tuple) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
"""Expected values as tests write them: numbers, strings, bytes, None, bools and containers of
them (floats away from over- and underflow, where ``* 2**k`` is exact)."""
W = plugin.WIDTH


@given(VALUES, st.integers(0, 15))
def test_any_value_of_a_line_at_its_own_place_gives_the_same_line(value, draw):
    """What makes the expected value one of ``WIDTH`` without a prior: each of them, drawn at
    its own position, yields exactly the values that were compared, so they cannot say which
    one it is. A value has a line unless it holds nothing that moves."""
    line = plugin._line(value, draw)
    if plugin._path(value) is None and type(value) is not bool:
        assert line is None
        return
    assert line is not None
    values, at = line
    assert len(values) == (2 if type(value) is bool else W) and values[at] == value
    assert values[at] is not value or cached(value)  # built as its neighbours are
    assert all(type(other) is type(value) and other != value for i, other in enumerate(values) if i != at)
    for i, other in enumerate(values):
        assert plugin._line(other, i) == (values, i)


@given(VALUES)
def test_away_from_the_ends_of_a_line_the_draw_alone_places_the_expected_value(value):
    """``at`` is the draw's (so uniform over ``WIDTH`` places for a uniform draw) unless the
    line ends within ``WIDTH`` steps, e.g. at code point 0."""
    path = plugin._path(value)
    if path is None or type(value) is bool:
        return
    ends = any(plugin._moved(value, path, k) is None for k in range(1 - W, W))
    for draw in range(W):
        _, at = plugin._line(value, draw)
        assert at == draw or ends


def cached(value) -> bool:
    """Whether CPython holds ``value`` as one object however it is built: bools, small ints,
    one-character strings and bytes."""
    return (
        type(value) is bool
        or (type(value) is int and -5 <= value <= 256)
        or (type(value) in (str, bytes) and len(value) == 1)
    )


class Always:
    """A forgery: equal to everything."""

    def __eq__(self, other):
        return True

    __hash__ = None


class Color(enum.IntEnum):
    RED = 5


NO_LINE = ["", b"", [], (), {}, [None], [True], None, object(), float("inf"), float("nan"), 0.0, 0j, {1},
           frozenset({1}), Color.RED, collections.OrderedDict(a=1), np.uint8(1), np.float32(1.0), Always()]  # fmt: skip


@pytest.mark.parametrize("value", NO_LINE, ids=repr)
def test_a_value_with_no_line_has_none(value):
    """Was: ``1e17 + 1 == 1e17`` and ``inf + 1 == inf``, so the decoy of an honest test asserting
    ``== 1e17`` passed and the round scored 0 as tampered; ``np.uint8(1) - 1`` raised
    ``OverflowError`` in both copies; an ``IntEnum``'s neighbours were plain ints."""
    assert plugin._line(value, 2) is None


def test_a_bool_is_compared_with_both_bools():
    assert plugin._line(True, 0) == ([False, True], 1)
    assert plugin._line(False, 3) == ([False, True], 0)


HONEST = [
    (5, 5), ("a-slug", "a-slug"), ([1, "x"], [1, "x"]), (1e17, 1e17), (np.uint8(1), np.uint8(1)),
    (np.float32(1e8), 1e8), (0.1 + 0.2, pytest.approx(0.3)), (pytest.approx(0.3), 0.1 + 0.2), (Color.RED, 5),
    ({"id": 7, "name": "x"}, {"id": 7, "name": mock.ANY}), ({"id": mock.ANY, "name": "x"}, {"id": 7, "name": "x"}),
    (True, 1), (None, None), (Always, Always),
]  # fmt: skip


@pytest.mark.parametrize(("left", "right"), HONEST, ids=repr)
@pytest.mark.parametrize("draw", range(4))
def test_an_honest_equality_holds_in_its_own_comparison_only(left, right, draw):
    """So an honest run's decoy fails and its real copy passes, whichever side is expected."""
    results, at = plugin._compare(left, right, draw)
    assert results[at] and not all(results)


def test_a_wildcard_where_the_other_side_moves_makes_an_honest_decoy_pass():
    """A limit, as the README says: the right side's elements that have a line are compared with
    their neighbours, so an expected value on the left holding a wildcard (``mock.ANY``) across
    from one equals them all, and the honest round is flagged."""
    results, _ = plugin._compare({"id": mock.ANY}, {"id": 7}, 0)
    assert all(results)
    assert plugin._forged(plugin._groups([mock.ANY, 3], [1, 3], place))


FORGED = [(Always(), 5), (5, Always()), ("a_b", Always()), (Always(), object()), (object(), Always()),
          (Always(), None), (True, Always())]  # fmt: skip


@pytest.mark.parametrize(("left", "right"), FORGED, ids=repr)
@pytest.mark.parametrize("draw", range(4))
def test_an_equality_that_is_always_true_holds_in_every_comparison_on_either_side(left, right, draw):
    """Was: ``assert "a_b" == f()`` with ``f`` returning an always-equal object passed its real
    copy and failed its decoy, unflagged, every time: the expected side was compared only with
    objects equal to nothing, which never asked the forgery."""
    results, _ = plugin._compare(left, right, draw)
    assert all(results)


def place(path):
    return len(path) % 4


@pytest.mark.parametrize(
    ("left", "right"),
    [([1, "b"], [1, "b"]), ({"a": [1, None], "b": (2.5, "x")}, {"a": [1, None], "b": (2.5, "x")}),
     ([float("nan")] * 2, [float("nan")] * 2), ([], []), ([[]], [[]]), ([1, 3], [mock.ANY, 3]),
     ({"id": 7, "at": "noon"}, {"id": mock.ANY, "at": "noon"}), ([Always], [Always])],
    ids=repr,
)  # fmt: skip
def test_an_honest_container_holds_in_each_elements_own_comparison_only(left, right):
    """Element by element as Python compares containers (an element is its own equal first, so
    a list holding one nan object equals itself), each group failing somewhere."""
    groups = plugin._groups(left, right, place)
    assert all(results[at] for results, at in groups) == (left == right)
    assert not plugin._forged(groups)


def test_an_always_true_element_anywhere_in_a_result_holds_every_way():
    """Was: only the expected value's last element that can move was compared with its
    neighbours, so an always-equal object elsewhere in a list was asked only beside equal values
    and never flagged."""
    groups = plugin._groups([Always(), "b", 3], ["a", "b", 3], place)
    assert all(results[at] for results, at in groups) and plugin._forged(groups)


def test_an_element_of_the_codes_own_is_asked_only_about_its_own_elements_four_values():
    """So a guess inside a container passes at 1 in 4 too: it sees no value more often."""
    seen = []

    class Recorder:
        def __eq__(self, other):
            seen.append(other)
            return False

    plugin._groups([Recorder(), "b"], ["a", "b"], place)
    assert len(seen) == 4 and seen.count("a") == 1 and len(set(seen)) == 4


def test_a_container_of_another_shape_or_past_the_leaf_cap_is_compared_whole():
    class Raises:
        def __eq__(self, other):
            raise RuntimeError("no")

        def __hash__(self):
            return 0

    assert len(plugin._groups({Raises(): 1}, {Raises(): 1}, place)) == 1
    assert len(plugin._groups([1, 2], [1, 2, 3], place)) == 1
    assert len(plugin._groups((1, 2), [1, 2], place)) == 1
    big = list(range(plugin._LEAVES + 1))
    assert len(plugin._groups(big, list(big), place)) == 1


ALWAYS = "class Always:\n    def __eq__(self, other):\n        return True\n\n\ndef test_one():\n"
"""A test module's start: ``Always``, then ``test_one``'s line, its body to follow."""


def plugin_run(
    tmp_path, source: str, secret: bytes, plugin_source: str | None = None
) -> tuple[dict[str, str], str | None]:
    """The verdict of ``source`` (one test module) run through the bootstrap and the plugin as
    the grader runs it, without a sandbox (the code here is the test's own); ``plugin_source``
    stands in for the plugin's."""
    (tmp_path / "test_it.py").write_text(textwrap.dedent(source))
    ids = [f"test_it.py::{name}" for name in re.findall(r"^def (test_\w+)", textwrap.dedent(source), re.M)]
    plan = make_plan(ids, secret=secret)
    payload = plan.payload()
    if plugin_source is not None:
        payload = json.dumps({**json.loads(payload), "plugin": plugin_source}).encode()
    run = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, "-q", "-p", "no:cacheprovider", "test_it.py"],
        input=payload,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # as in the sandbox
    )
    return judge(plan, run.stdout.decode(), exit_code=run.returncode)


def secret_placing(first_draw: int) -> bytes:
    """A secret whose plan puts ``test_it.py::test_one``'s first expected value at ``first_draw``."""
    return next(
        secret
        for n in range(1000)
        if plugin._draw(make_plan(["test_it.py::test_one"], secret=(secret := b"%d" % n)).tests[0]["key"], 0, ())
        == first_draw
    )


def test_an_always_equal_result_on_the_right_of_its_expected_value_is_tampering(tmp_path):
    _, why = plugin_run(tmp_path, ALWAYS + '    assert "a-slug" == Always()\n', b"s")
    assert why is not None and "did not fail" in why


def test_an_always_equal_element_of_a_result_is_tampering(tmp_path):
    _, why = plugin_run(tmp_path, ALWAYS + '    assert [Always(), "b"] == ["a", "b"]\n', b"s")
    assert why is not None and "did not fail" in why


def test_one_forged_equality_among_honest_ones_is_tampering(tmp_path):
    """Was: the decoy passed only if every equality it ran held every way, so a test whose other
    equalities the code already passed honestly, and whose failing one got an always-true
    result, passed its real copy unflagged."""
    tests, why = plugin_run(tmp_path, ALWAYS + "    assert 1 + 1 == 2\n    assert Always() == 5\n", b"s")
    assert why is not None and "did not fail" in why
    tests, why = plugin_run(tmp_path, ALWAYS + "    assert 1 + 1 == 2\n    assert 2 + 3 == 5\n", b"s")
    assert (tests, why) == ({"test_it.py::test_one": "passed"}, None)


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
    assert {assertion}
"""


@pytest.mark.parametrize("assertion", ['Guess() == "a-slug"', '"a-slug" == Guess()'])
@pytest.mark.parametrize("guess", range(4))
def test_a_guessing_equality_passes_at_one_place_in_width_and_is_not_flagged(tmp_path, guess, assertion):
    """The attack the decoys cannot flag (it looks like an honest bug): accept exactly one of the
    values an equality is compared with. It passes the real copy only where the draw put the
    expected value at its guess: at odds 1 / WIDTH per equality, whichever side the expected
    value is on (before: 1 / 2, certainty where the one perturbed value gave itself away, e.g.
    ``"a-slug"`` against ``"a-slu"``, and with the expected value on the left, certainty: the
    guess was asked only about the expected value)."""
    for place in range(plugin.WIDTH):
        tests, why = plugin_run(tmp_path, GUESS.format(n=guess + 1, assertion=assertion), secret_placing(place))
        assert why is None
        assert tests["test_it.py::test_one"] == ("passed" if place == guess else "failed")


def test_the_real_comparison_is_given_a_fresh_copy_as_its_neighbours_are():
    """Was: the expected object itself, referenced from the test's and the grader's frames, so
    an ``__eq__`` that answered by its reference count (or identity) told it from its fresh
    neighbours and passed every real copy unflagged."""
    expected_value = "-".join(["a", "slug"])  # not interned, not cached
    seen: list[tuple[int, bool]] = []

    class Recorder:
        def __eq__(self, other):
            seen.append((sys.getrefcount(other), other is expected_value))
            return False

    for draw in range(W):
        seen.clear()
        results, at = plugin._compare(Recorder(), expected_value, draw)
        assert len(seen) == W and not any(same for _, same in seen)
        assert len({count for count, _ in seen}) == 1, seen  # nothing sets the expected one apart


REBINDINGS = {
    "getsourcelines": "import inspect\ndef _no(*a):\n    raise OSError('no source')\ninspect.getsourcelines = _no\n",
    "visit": "import ast\nast.NodeVisitor.visit = lambda self, node: node\n",
    "function": "import pytest\npytest.Function = type('Function', (pytest.Function,), {})\n",
    "pytest_python_function": "import _pytest.python as p\np.Function = type('Function', (p.Function,), {})\n",
    "compile": "import builtins\n_c = builtins.compile\nbuiltins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)\n",
}
"""Code under test that, at import, switches off what made the decoys (each scored 1 beside an
always-true ``==`` before the plugin bound what it uses at its start)."""


@pytest.mark.parametrize("name", sorted(REBINDINGS))
def test_rebinding_what_the_plugin_uses_at_import_leaves_the_decoys_in_place(tmp_path, name):
    source = REBINDINGS[name] + ALWAYS + '    assert Always() == "a-slug"\n'
    _, why = plugin_run(tmp_path, source, b"s")
    assert why is not None and "(passed)" in why


def test_the_plugin_and_the_plan_are_not_in_the_main_module(tmp_path):
    """Was: ``sys.modules["__main__"]._m.PLAN`` held every real name and key at import."""
    source = (
        "import sys\n"
        "main = vars(sys.modules['__main__'])\n"
        "FOUND = sorted(k for k in main if not k.startswith('__'))\n"
        "def test_one():\n    assert FOUND == ['_run', 'sys']\n"
    )
    assert plugin_run(tmp_path, source, b"s") == ({"test_it.py::test_one": "passed"}, None)


def test_a_plain_test_the_plugin_cannot_copy_flags_the_round(tmp_path):
    """A plain function must have a decoy: where none was made, the round is flagged
    (``undecoyed``), not taken for a test without one (unittest, async)."""
    broken = (
        Path(plugin.__file__)
        .read_text()
        .replace("def _factory(", "def _factory(*a):\n    raise RuntimeError\n\n\ndef _unused(")
    )
    tests, why = plugin_run(tmp_path, "def test_one():\n    assert 1 + 1 == 2\n", b"s", broken)
    assert tests == {"test_it.py::test_one": "passed"} and why is not None and "(undecoyed)" in why


def test_a_decoy_that_compared_nothing_flags_the_round(tmp_path):
    """A test whose body asserts ``==`` before any return compares at least once whenever it
    returns: a decoy that returned having compared nothing was switched off (``unchecked``)."""
    unrewritten = Path(plugin.__file__).read_text().replace("    _rewrite(definition, [0])\n", "")
    _, why = plugin_run(tmp_path, "def test_one():\n    assert 1 + 1 == 2\n", b"s", unrewritten)
    assert why is not None and "(unchecked)" in why
    # Every parametrization of a test: they share its definition, rewritten once, so the second
    # is not read from the rewritten source (which asserts no ``==``). Here the rewrite runs and
    # the decoy's check records nothing.
    silenced = Path(plugin.__file__).read_text().replace("held.append(_forged(groups))", "pass")
    source = "import pytest\n\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_one(x):\n    assert x == x\n"
    (tmp_path / "test_it.py").write_text(source)
    plan = make_plan(["test_it.py::test_one[1]", "test_it.py::test_one[2]"], secret=b"s")
    payload = json.dumps({**json.loads(plan.payload()), "plugin": silenced}).encode()
    run = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, "-q", "-p", "no:cacheprovider", "test_it.py"],
        input=payload, cwd=tmp_path, capture_output=True, timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )  # fmt: skip
    _, why = judge(plan, run.stdout.decode(), exit_code=run.returncode)
    assert why is not None and why.count("(unchecked)") == 2, why
    # An equality only in a branch, or after a return that may come first: nothing is required.
    source = (
        "def test_one():\n    if False:\n        assert 1 == 2\n\n\ndef test_two():\n    return\n    assert 1 == 2\n"
    )
    tests, why = plugin_run(tmp_path, source, b"s", unrewritten)
    assert why is None and set(tests.values()) == {"passed"}


def test_unittest_and_async_tests_run_as_they_are_without_a_decoy(tmp_path):
    source = (
        "import asyncio, unittest\n\n\nclass TestCase(unittest.TestCase):\n    def test_in_case(self):\n"
        "        self.assertEqual(1 + 1, 2)\n\n\ndef test_plain():\n    assert asyncio.run(coro()) == 3\n\n\n"
        "async def coro():\n    return 3\n"
    )
    (tmp_path / "test_it.py").write_text(source)
    plan = make_plan(["test_it.py::TestCase::test_in_case", "test_it.py::test_plain"], secret=b"s")
    run = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, "-q", "-p", "no:cacheprovider", "test_it.py"],
        input=plan.payload(), cwd=tmp_path, capture_output=True, timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )  # fmt: skip
    tests, why = judge(plan, run.stdout.decode(), exit_code=run.returncode)
    assert why is None and set(tests.values()) == {"passed"}
