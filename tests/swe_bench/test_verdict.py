"""The verdict's parts without a sandbox: the eval script's split, the plan's names, the judge."""

from __future__ import annotations

import json

import pytest
from stepwise_swe_bench import verdict_plugin
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.verdict import VERDICT_MARK, expected, judge, make_plan, split_eval_script

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


@pytest.mark.parametrize("value", [0, 7, 2.5, True, "", "ab", b"xy", [], [1, 2], (1,), {}, {"a": 1}, {1}, frozenset()])
@pytest.mark.parametrize("bit", [0, 1])
def test_a_perturbed_value_has_the_type_and_differs(value, bit):
    wrong = verdict_plugin._perturbed(value, bit)
    assert type(wrong) is type(value) and wrong != value


def test_other_types_get_a_value_equal_to_nothing():
    wrong = verdict_plugin._perturbed(object(), 0)
    assert not wrong == wrong and wrong != 1
