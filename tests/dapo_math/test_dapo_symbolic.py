"""The math-verify path: symbolic equivalence, safe in threads and event loops, bounded in time."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from stepwise_dapo_math.symbolic import SymbolicChecker, verify_pair

PATHOLOGICAL = "9^{9^{9^{9}}}"  # sympy tries to evaluate this power and never returns


@pytest.fixture(scope="module")
def checker():
    checker = SymbolicChecker(workers=1, timeout_s=1.0)
    yield checker
    checker.close()


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("$\\sqrt{2}/2$", "\\frac{\\sqrt{2}}{2}"),
        ("2^3", "8"),
        ("\\frac{n(n+1)}{2}", "n(n+1)/2"),
    ],
)
def test_equivalent_forms_are_correct(checker, answer, gold):
    assert checker.check(answer, gold).correct


@pytest.mark.parametrize(("answer", "gold"), [("\\frac{1}{3}", "0.5"), ("x+1", "x"), ("", "1")])
def test_different_values_are_wrong(checker, answer, gold):
    assert not checker.check(answer, gold).correct


def test_integer_pairs_are_decided_without_a_worker():
    unstarted = SymbolicChecker(workers=1, timeout_s=1.0)
    assert unstarted.check("1,000", "1000").correct
    assert not unstarted.check("7", "8").correct
    assert unstarted._pool is None


@pytest.mark.slow
def test_a_pathological_answer_costs_bounded_time_and_scores_wrong(checker):
    checker.check("1", "\\frac{2}{2}")  # worker up
    started = time.monotonic()
    result = checker.check(PATHOLOGICAL, "5")
    assert result.timed_out and not result.correct
    # the worker was killed at the deadline (1 s) instead of running forever
    assert time.monotonic() - started < 30
    # and a fresh worker answers the next check
    assert checker.check("\\frac{4}{2}", "2").correct


def test_checks_from_worker_threads_do_not_hit_signal_alarm(checker):
    with ThreadPoolExecutor(max_workers=4) as threads:
        results = list(threads.map(lambda a: checker.check(a, "\\frac{1}{2}"), ["1/2", "0.5", "2/4", "1/3"]))
    assert [r.correct for r in results] == [True, True, True, False]
    assert not any(r.error for r in results)


@pytest.mark.slow
def test_async_checks_share_the_pool(checker):
    async def run():
        return await asyncio.gather(
            checker.acheck("1/2", "\\frac{1}{2}"),
            checker.acheck(PATHOLOGICAL, "\\frac{1}{2}"),
            checker.acheck("\\pi", "\\pi"),
        )

    good, slow, pi = asyncio.run(run())
    assert good.correct and pi.correct
    assert slow.timed_out and not slow.correct


def test_verify_pair_disables_math_verify_timeouts_so_threads_work():
    # Called directly in a non-main thread: math-verify's own signal.alarm would raise here.
    with ThreadPoolExecutor(max_workers=1) as threads:
        assert threads.submit(verify_pair, "\\frac{1}{2}", "0.5").result()


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="workers"):
        SymbolicChecker(workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        SymbolicChecker(timeout_s=0)


@pytest.mark.slow
def test_a_cancelled_check_stops_its_worker():
    checker = SymbolicChecker(workers=1, timeout_s=60.0)
    try:
        checker.check("1", "\\frac{2}{2}")  # worker up

        async def run():
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(checker.acheck(PATHOLOGICAL, "5"), timeout=0.5)
            # the only worker was stopped with the check, so this one is not stuck behind it
            return await asyncio.wait_for(checker.acheck("\\frac{6}{3}", "2"), timeout=30)

        assert asyncio.run(run()).correct
    finally:
        checker.close()


def test_a_broken_pool_is_restarted_and_the_failure_recorded():
    """A correct answer scored -1 with no trace of why once the worker pool broke. Here the
    pool stops under the checker (as when its manager dies): the next check starts a new pool,
    is right, and says what happened."""
    checker = SymbolicChecker(workers=1, timeout_s=30.0)
    try:
        assert checker.check("\\frac{1}{2}", "0.5").correct
        checker._pool.stop()
        checker._pool.join()

        async def run():
            return await checker.acheck("\\frac{2}{4}", "0.5")

        result = asyncio.run(run())
        assert result.correct and result.error is None and checker.restarts == 1
        assert checker.check("\\frac{3}{6}", "0.5").correct
    finally:
        checker.close()


def test_a_failed_check_is_on_the_turns_record(monkeypatch):
    """When math-verify cannot answer (here: every try fails), the reply scores as wrong and the
    turn's record and metrics say why."""
    from stepwise_dapo_math.config import DapoMathTaskConfig
    from stepwise_dapo_math.symbolic import SymbolicResult
    from stepwise_dapo_math.taskset import DapoMathData, DapoMathTask

    async def broken(self, answer, gold):
        return SymbolicResult(False, error="ProcessExpired: Abnormal termination")

    monkeypatch.setattr(SymbolicChecker, "_acheck_once", broken)
    task = DapoMathTask(
        DapoMathData(id="t", prompt="p", answer="\\frac{1}{2}"), DapoMathTaskConfig(verifier="math_verify")
    )
    score = asyncio.run(task.score_reply("Answer: 0.5"))
    assert not score.correct and score.metrics["verify_error"] == 1.0
    record = score.record(3)
    assert (
        record["verify_error"] == "ProcessExpired: Abnormal termination; retried: ProcessExpired: Abnormal termination"
    )
