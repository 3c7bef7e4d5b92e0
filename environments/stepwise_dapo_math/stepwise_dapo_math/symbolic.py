"""Symbolic answer checking with ``math-verify``, safe in worker threads and bounded in time.

math-verify bounds its own work with ``signal.alarm``, which only works in the main thread of the
main interpreter (an async env scores in worker threads and event loops). Here its timeouts are
disabled (``parsing_timeout=None``, ``timeout_seconds=None``) and every check runs in a worker
process of a ``pebble.ProcessPool`` that kills the worker when the check overruns ``timeout_s``
(counted from when the worker starts the check) and starts a fresh one. A pathological answer
such as ``9^{9^{9^{9}}}`` therefore costs at most ``timeout_s`` and scores as incorrect, with
``timed_out`` set so the run can count it.

Both sides are parsed the same way: as a LaTeX math span (``$...$``), else as plain text.
Integer-vs-integer comparisons never reach a worker: :mod:`answers` decides them exactly.

A ground truth that is an exact rational number (``3``, ``\\frac{1}{2}``, ``0.5``, also as a
relation, ``x = \\frac{1}{2}``, read whole as the answer is) is matched only exactly, by two
readings that must both accept. math-verify's verdict compares floats with a tolerance (and
gives a relation no number to compare exactly), and its extraction reads one match of the
answer and drops the rest (a trailing ``\\text{...}`` runs to the end of the answer, so
``\\frac{1}{2} \\text{, or } \\frac{7}{10}`` reads as ``\\frac{1}{2}``). So the answer is also
read whole (:func:`exact_value`): peeled as the integer verifier peels it, nothing that holds a
value dropped, parsed by one LaTeX grammar that must consume every character, decimals taken
at their exact decimal value, and evaluated without rounding; it must come to that same
rational. Text holding two values reads as a set, a tuple, words or a parse error, never as one
rational, so a hedge scores as wrong whichever value is right, and ``0.5000001`` is not ``1/2``.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from stepwise_dapo_math.answers import normalize_integer, peel_answer

__all__ = ["SymbolicChecker", "SymbolicResult", "exact_value", "shared_checker"]


@dataclass(frozen=True)
class SymbolicResult:
    correct: bool
    timed_out: bool = False
    error: str | None = None
    """A worker failure other than the deadline (counted, scored as incorrect)."""


class SymbolicChecker:
    """A pool of ``workers`` processes verifying answers with math-verify, ``timeout_s`` each.

    The pool starts on first use and stops with :meth:`close` or at interpreter exit. Workers
    are forked from multiprocessing's single-threaded fork server, never from this (threaded)
    process; the server imports the main module once, so a killed worker is replaced fast.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0) -> None:
        if workers < 1:
            raise ValueError(f"math_verify.workers must be >= 1, got {workers}")
        if not timeout_s > 0:
            raise ValueError(f"math_verify.timeout_s must be > 0, got {timeout_s}")
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: Any = None
        self._lock = threading.Lock()
        self.restarts = 0
        """How many times a pool that stopped working was replaced."""

    def check(self, answer: str, gold: str) -> SymbolicResult:
        """Blocking check of ``answer`` against ``gold``; at most ``timeout_s`` of worker time.
        A pool that broke is restarted and the check tried once more; what went wrong stays
        on the result (``error``)."""
        exact = _integer_decision(answer, gold)
        if exact is not None:
            return SymbolicResult(exact)
        first = _result(self._schedule(answer, gold))
        return first if first.error is None else _retried(first, _result(self._schedule(answer, gold)))

    async def acheck(self, answer: str, gold: str) -> SymbolicResult:
        """:meth:`check` without blocking the event loop."""
        exact = _integer_decision(answer, gold)
        if exact is not None:
            return SymbolicResult(exact)
        first = await self._acheck_once(answer, gold)
        return first if first.error is None else _retried(first, await self._acheck_once(answer, gold))

    async def _acheck_once(self, answer: str, gold: str) -> SymbolicResult:
        try:
            future = self._schedule(answer, gold)
        except RuntimeError as error:  # the pool could not take the check
            return SymbolicResult(False, error=f"{type(error).__name__}: {error}")
        try:
            await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # stops the worker if the check already started
            raise
        except Exception:
            pass  # read below, classified as in the blocking path
        return _result(future)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join()

    def _schedule(self, answer: str, gold: str) -> Any:
        with self._lock:
            if self._pool is not None and not self._pool.active:  # broken or stopped: replace it
                self._pool.stop()
                self._pool, self.restarts = None, self.restarts + 1
            if self._pool is None:
                from pebble import ProcessPool

                self._pool = ProcessPool(
                    max_workers=self.workers,
                    initializer=_warm_up,
                    context=multiprocessing.get_context("forkserver"),
                )
            pool = self._pool
        return pool.schedule(verify_pair, args=(answer, gold), timeout=self.timeout_s)


def verify_pair(answer: str, gold: str) -> bool:
    """math-verify's verdict on one pair, with its signal-based timeouts disabled (the caller
    bounds the time). Runs inside a pool worker."""
    from math_verify import parse, verify

    def parsed(text: str) -> list:
        stripped = text.strip().strip("$").strip()
        return parse(f"${stripped}$", parsing_timeout=None) or parse(text, parsing_timeout=None)

    target = parsed(answer)
    expected = parsed(gold)
    if not target or not expected or not verify(expected, target, timeout_seconds=None):
        return False
    exact = _rational(expected[0])
    if exact is None and _is_relation(expected[0]):  # x = \frac{1}{2}: read whole, it states one value
        exact = exact_value(gold)
    return exact is None or exact_value(answer) == exact


def exact_value(answer: str) -> Any:
    """The one rational number ``answer`` states, read whole and exactly, else None (see the
    module docstring). Runs inside a pool worker: parsing and evaluation are unbounded."""
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.math_normalization import NormalizationConfig, normalize_latex

    # math-verify's normalization without its unit removal and box extraction, which drop text
    # that can hold a second value; "or"/"and" become list commas.
    whole = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="none")
    try:
        text = normalize_latex(peel_answer(answer), whole)
        return _rational(latex2sympy(text, is_real=True, convert_degrees=False, normalization_config=None))
    except Exception:  # no parse: not one number
        return None


def _rational(expr: Any) -> Any:
    """``expr`` as an exact sympy Rational if it is one number (a set of one counts), else None.
    Each Float, made from a decimal literal at that literal's precision, becomes the rational its
    digits spell, so no comparison of this value rounds."""
    import sympy

    if isinstance(expr, sympy.FiniteSet) and len(expr) == 1:
        (expr,) = expr.args
    if not isinstance(expr, sympy.Expr):  # a set, tuple, relation, string or matrix
        return None
    value = sympy.simplify(expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)}))
    return value if value.is_Rational else None


def _is_relation(expr: Any) -> bool:
    import sympy

    return isinstance(expr, sympy.core.relational.Relational)


def _integer_decision(answer: str, gold: str) -> bool | None:
    normalized_gold = normalize_integer(gold)
    normalized_answer = normalize_integer(answer)
    if normalized_gold is not None and normalized_answer is not None:
        return normalized_gold == normalized_answer
    return None


def _result(future: Any) -> SymbolicResult:
    try:
        return SymbolicResult(bool(future.result()))
    except FutureTimeout:
        return SymbolicResult(False, timed_out=True)
    except Exception as error:  # a crashed worker is this answer's failure, not the run's
        return SymbolicResult(False, error=f"{type(error).__name__}: {error}")


def _retried(first: SymbolicResult, second: SymbolicResult) -> SymbolicResult:
    """The second try's verdict, keeping the first failure on record."""
    if second.error is None:
        return SymbolicResult(second.correct, second.timed_out, f"{first.error} (retried: succeeded)")
    return SymbolicResult(False, second.timed_out, f"{first.error}; retried: {second.error}")


def _warm_up() -> None:
    import logging

    import math_verify

    # Disabled timeouts are deliberate here; silence math-verify's warning about them.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    math_verify.parse("$1$", parsing_timeout=None)


_shared: dict[tuple[int, float], SymbolicChecker] = {}
_shared_lock = threading.Lock()


def shared_checker(workers: int, timeout_s: float) -> SymbolicChecker:
    """One checker per (workers, timeout) in this process, so tasks share worker processes."""
    with _shared_lock:
        checker = _shared.get((workers, timeout_s))
        if checker is None:
            checker = _shared[(workers, timeout_s)] = SymbolicChecker(workers, timeout_s)
        return checker


@atexit.register
def _close_shared() -> None:
    for checker in list(_shared.values()):
        checker.close()
