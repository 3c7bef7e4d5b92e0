"""The grader's pytest plugin: runs inside the grading sandbox, in the tests' own process.

Not imported by the host: ``verdict`` sends this file's text, with the round's plan, on the
test command's stdin; a bootstrap (``verdict.BOOTSTRAP``) reads both before pytest starts, so
before the code under test is imported, and the pipe is empty afterwards. Standard library and
pytest only.

The plan names every graded test twice, ``real`` and ``decoy``, under names the host derived
with a keyed hash; the items run sorted by node id, so neither names nor order say which is
which. Both copies are compiled here from the same transformed source, where each
``assert L == R`` becomes ``_vf_check(L, R, i)``: evaluate both sides once, make ``R'``, a
value of ``R``'s type that differs from it (``_perturbed``, moved one of two ways by the plan's
bits), and compare ``L == R`` and ``L == R'`` in an order the bits also choose. Both copies make
exactly these calls; only what follows differs, a closure flag: the real copy asserts
``L == R``; the decoy records both results and passes only if, for every equality it ran,
``L`` equalled both ``R`` and ``R'``. Honest equality is transitive and ``R != R'``, so an honest
run reports every decoy FAILED, fixed or not. Everything else about the copies (module, globals,
fixtures, markers, parameters, file and line numbers) is the same.

At the end (``pytest_unconfigure``) one line, ``VERDICT_MARK`` and a JSON object, reports each
planned name's outcome.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
import types
from typing import Any

import pytest

VERDICT_MARK = "STEPWISE-VERDICT"
PLAN: dict = {}
"""Set by the bootstrap: ``{"tests": [{"id", "real", "decoy", "bits"}]}``; emptied at collection."""
_OUTCOMES: dict[str, str] = {}
"""Each planned name's outcome (the report)."""
_NAME_OF: dict[str, str] = {}
"""The node id each planned name runs under."""


def _perturbed(value: Any, bit: int) -> Any:
    """A value of ``value``'s type that differs from it, one of two ways chosen by ``bit``
    (so seeing one value does not say which way it was moved): numbers ±1, a string or
    bytes one element longer or shorter, a sequence with its last element repeated or
    dropped, a dict or set with one entry more or fewer. Other types: an object equal to
    nothing."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + (1 if bit else -1)
    if type(value) in _ONE:
        if value and not bit:
            return value[:-1]
        return value + (value[-1:] if value else _ONE[type(value)])
    if isinstance(value, dict):
        if value and not bit:
            return dict(list(value.items())[:-1])
        return {**value, object(): None}
    if isinstance(value, (set, frozenset)):
        if value and not bit:
            return type(value)(list(value)[:-1])
        return type(value)([*value, object()])
    return _Unequal()


_ONE: dict[type, Any] = {str: "a", bytes: b"a", list: [None], tuple: (None,)}


class _Unequal:
    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class _Rewrite(ast.NodeTransformer):
    """``assert L == R, msg`` → ``_vf_check(L, R, i)`` (i counts them)."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return node
        index = ast.Constant(self.count)
        self.count += 1
        call = ast.Call(ast.Name("_vf_check", ast.Load()), [test.left, test.comparators[0], index], [])
        return ast.copy_location(ast.Expr(call), node)


def _equal(left: Any, right: Any) -> bool:
    """``left == right`` as an assertion reads it; an equality that raises is not equal."""
    try:
        return bool(left == right)
    except Exception:
        return False


def _compile(function: Any, module: types.ModuleType) -> Any:
    """The factory ``check -> test function`` for ``function``, compiled from its
    source with its module's globals, file and line numbers; None if it has no usable source."""
    try:
        lines, start = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        return None
    definition.decorator_list = []
    _Rewrite().visit(definition)
    factory = ast.FunctionDef(
        name="_vf_factory",
        args=ast.arguments([], [ast.arg("_vf_check")], None, [], [], None, []),
        body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))],
        decorator_list=[],
    )
    module_ast = ast.fix_missing_locations(ast.Module([factory], []))
    ast.increment_lineno(module_ast, start - 1)
    namespace: dict = {}
    code = compile(module_ast, function.__code__.co_filename, "exec")
    exec(code, module.__dict__, namespace)
    return namespace["_vf_factory"]


def _copy(item: pytest.Function, factory: Any, name: str, bits: list[int], decoy: bool) -> pytest.Function:
    """One copy of ``item`` named ``name``: the real test, or its decoy."""
    pairs: list[tuple[bool, bool]] = []

    def check(left: Any, right: Any, index: int) -> None:
        __tracebackhide__ = True  # a failure is reported at the test's own line
        wrong = _perturbed(right, bits[(2 * index) % len(bits)])
        if bits[(2 * index + 1) % len(bits)]:
            real, other = _equal(left, right), _equal(left, wrong)
        else:
            other, real = _equal(left, wrong), _equal(left, right)
        if decoy:
            pairs.append((real, other))
        elif not real:
            raise AssertionError(f"assert {left!r} == {right!r}")

    inner = factory(check)
    if item.instance is not None:
        inner = types.MethodType(inner, item.instance)

    def run(**kwargs: Any) -> Any:
        __tracebackhide__ = True
        result = inner(**kwargs)
        if decoy and not (pairs and all(real and other for real, other in pairs)):
            raise AssertionError()
        return result

    copy = pytest.Function.from_parent(
        item.parent,
        name=name,
        callspec=getattr(item, "callspec", None),
        callobj=run,
        fixtureinfo=item._fixtureinfo,
        originalname=name,
    )
    copy.own_markers = list(item.own_markers)
    return copy


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Replace the collected items with the plan's copies (sorted by name); drop the rest."""
    plan = PLAN.pop("tests", [])
    by_id = {item.nodeid: item for item in items}
    chosen = []
    for entry in plan:
        item = by_id.get(entry["id"])
        if item is None:  # not collected (e.g. the module does not import): neither copy runs
            _OUTCOMES[entry["real"]] = _OUTCOMES[entry["decoy"]] = "not-collected"
            continue
        factory = None
        if type(item) is pytest.Function and not inspect.iscoroutinefunction(item.function):
            factory = _compile(item.function, item.module)
        # No source to copy (unittest, async): the item as it is, no decoy.
        if factory is None or not isinstance(item, pytest.Function):
            _NAME_OF[item.nodeid] = entry["real"]
            chosen.append(item)
            _OUTCOMES[entry["decoy"]] = "no-decoy"
            continue
        for name, decoy in ((entry["real"], False), (entry["decoy"], True)):
            copy = _copy(item, factory, name, entry["bits"], decoy)
            _NAME_OF[copy.nodeid] = name
            chosen.append(copy)
    chosen.sort(key=lambda item: item.nodeid)
    config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
    items[:] = chosen
    for name in _NAME_OF.values():
        _OUTCOMES[name] = "missing"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each copy's outcome over its phases: ``error`` (setup/teardown failed), ``failed``,
    ``passed``, ``skipped``, ``xfailed``, ``xpassed``."""
    name = _NAME_OF.get(report.nodeid)
    if name is None:
        return
    previous = _OUTCOMES[name]
    if report.when != "call":
        if report.failed:
            _OUTCOMES[name] = "error"
        elif report.skipped and previous == "missing":
            _OUTCOMES[name] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        return
    if previous == "error":
        return
    if hasattr(report, "wasxfail"):
        _OUTCOMES[name] = "xpassed" if report.passed else "xfailed"
    else:
        _OUTCOMES[name] = report.outcome


def pytest_unconfigure(config: pytest.Config) -> None:
    sys.stdout.write(f"\n{VERDICT_MARK} {json.dumps(_OUTCOMES, sort_keys=True)}\n")
    sys.stdout.flush()
