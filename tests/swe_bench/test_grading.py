"""The bundled tasks are real: hidden tests fail at the base commit and pass with the fix, and
grading is swebench's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from stepwise_swe_bench.fixtures import materialize
from stepwise_swe_bench.grading import feedback, grade, model_patch, round_score
from stepwise_swe_bench.instances import SweInstance, load_instances
from stepwise_swe_bench.sandbox import Sandbox
from stepwise_swe_bench.verdict import expected

from .conftest import ENGINES, episode

INSTANCES = {i.instance_id: i for i in load_instances()}
ENGINE = pytest.mark.parametrize("engine", ENGINES)


def graded(instance: SweInstance, sandbox: Sandbox, timeout_s: float = 60):
    """One round as the environment grades it: the repository's diff on a fresh checkout."""

    async def round_():
        patch = await model_patch(sandbox, instance.base_commit, timeout_s=60)
        return await grade(instance, sandbox, patch, timeout_s=timeout_s, kept_log_bytes=1 << 20)

    return asyncio.run(round_())


def sh(sandbox: Sandbox, command: str, stdin: bytes | None = None):
    result = asyncio.run(sandbox.run(command, stdin=stdin))
    assert result.exit_code == 0, result.output
    return result.output


# Each instance runs its hidden tests twice: the fast loop keeps the first, in each engine.
@pytest.mark.parametrize(
    ("engine", "instance_id"),
    [
        (engine, i) if n == 0 else pytest.param(engine, i, marks=pytest.mark.slow)
        for n, i in enumerate(sorted(INSTANCES))
        for engine in ENGINES
        if n == 0 or engine == "docker"
    ],
)
def test_hidden_tests_fail_before_the_fix_and_pass_after(tmp_path: Path, engine: str, instance_id: str):
    instance = INSTANCES[instance_id]
    with episode(engine, instance, tmp_path) as sandbox:
        check_gold(instance, sandbox)


def check_gold(instance: SweInstance, sandbox: Sandbox) -> None:
    assert sh(sandbox, "git rev-parse HEAD; git status --porcelain") == f"{instance.base_commit}\n"

    before = graded(instance, sandbox)
    assert (before.status, before.resolved, before.log_parsed) == ("RESOLVED_NO", False, True)
    assert sorted(before.fail_to_pass["failure"]) == sorted(instance.FAIL_TO_PASS)
    assert sorted(before.pass_to_pass["success"]) == sorted(instance.PASS_TO_PASS)
    assert round_score(before, "resolved") == round_score(before, "partial") == 0.0

    sh(sandbox, "git apply -", stdin=instance.patch.encode())
    after = graded(instance, sandbox)
    assert (after.status, after.resolved) == ("RESOLVED_FULL", True)
    # The gold run reports what the task records of it: every graded test passed, or XFAIL where
    # tests.json's GOLD_XFAIL says so (none of the bundled tasks has an xfail-marked test).
    graded_tests = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
    assert after.outcomes == {t: expected(t, instance.GOLD_XFAIL) for t in graded_tests}
    assert round_score(after, "resolved") == round_score(after, "partial") == 1.0
    # Grading ran on a copy: the model's repository holds only the fix, never the hidden tests.
    assert asyncio.run(model_patch(sandbox, instance.base_commit, timeout_s=60)).strip() == instance.patch.strip()


@ENGINE
def test_partial_credit_is_the_share_of_fail_to_pass(tmp_path: Path, engine: str):
    instance = INSTANCES["stepwise__slugs-21"]
    with episode(engine, instance, tmp_path) as sandbox:
        # Collapse runs of separators, but still leave them at the ends: 2 of 3 hidden tests pass.
        sh(sandbox, "sed -i 's/\\[^A-Za-z0-9\\]/[^A-Za-z0-9]+/' slugs/slugify.py")
        result = graded(instance, sandbox)
    assert result.status == "RESOLVED_PARTIAL" and not result.resolved
    assert result.fail_to_pass["failure"] == ["tests/test_slugify.py::test_no_separator_at_the_ends"]
    assert round_score(result, "partial") == pytest.approx(2 / 3)
    assert round_score(result, "resolved") == 0.0
    message = feedback(result, round_index=0, rounds_left=1, max_log_chars=2000)
    assert "2/3 pass" in message and "test_no_separator_at_the_ends" in message
    assert "1 round left" in message and "AssertionError" in message


@ENGINE
def test_breaking_a_pass_to_pass_test_zeroes_the_reward(tmp_path: Path, engine: str):
    instance = INSTANCES["stepwise__intervals-1"]
    with episode(engine, instance, tmp_path) as sandbox:
        # Merges touching intervals, and wrongly also (1, 2) with (3, 5).
        sh(sandbox, "sed -i 's/start < merged\\[-1\\]\\[1\\]/start <= merged[-1][1] + 1/' intervals/core.py")
        result = graded(instance, sandbox)
    assert result.fail_to_pass["failure"] == [] and not result.resolved
    assert result.pass_to_pass["failure"] == ["tests/test_core.py::test_merge_disjoint"]
    assert round_score(result, "partial") == round_score(result, "resolved") == 0.0
    assert "now fail:\n- tests/test_core.py::test_merge_disjoint" in feedback(
        result, round_index=0, rounds_left=1, max_log_chars=100
    )


@ENGINE
def test_code_run_by_the_tests_cannot_keep_the_hidden_tests(tmp_path: Path, engine: str):
    instance = INSTANCES["stepwise__pager-3"]
    with episode(engine, instance, tmp_path) as sandbox:
        sh(sandbox, 'printf \'import shutil\\nshutil.copytree("tests", "stolen")\\n\' > conftest.py')
        graded(instance, sandbox)
        assert sh(sandbox, "ls; grep -c test_exact_multiple tests/test_pages.py || true") == (
            "README.md\nconftest.py\npager\npyproject.toml\ntests\n0\n"
        )


@pytest.mark.slow
@ENGINE
def test_tests_that_hang_are_cut_off_and_score_zero(tmp_path: Path, engine: str):
    instance = INSTANCES["stepwise__semverlite-12"]
    with episode(engine, instance, tmp_path) as sandbox:
        sh(sandbox, "printf 'while True:\\n    pass\\n' >> semverlite/__init__.py")
        result = graded(instance, sandbox, timeout_s=3)
    assert not result.log_parsed and result.run["termination"] == "timeout"
    assert round_score(result, "partial") == 0.0
    assert "could not be run" in feedback(result, round_index=1, rounds_left=0, max_log_chars=100)


def test_concurrent_setups_of_one_task(tmp_path: Path):
    """Rollouts of one task set up at once (in threads) each get the repository."""
    from stepwise_swe_bench import fixtures

    instance = INSTANCES["stepwise__pager-3"]
    fixtures._build_template.cache_clear()

    async def setups():
        await asyncio.gather(*(asyncio.to_thread(materialize, instance, tmp_path / f"r{i}") for i in range(4)))

    asyncio.run(setups())
    for i in range(4):
        assert (tmp_path / f"r{i}" / "pager" / "pages.py").is_file()
