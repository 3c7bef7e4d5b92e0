"""The grader's pytest plugin: runs inside the grading sandbox, in the tests' own process.

Not imported by the host: ``verdict`` sends this file's text, with the round's plan, on the
test command's stdin; a bootstrap (``verdict.BOOTSTRAP``) reads both before pytest starts, so
before the code under test is imported, and the pipe is empty afterwards. Standard library and
pytest only.

The plan names every graded test twice, ``real`` and ``decoy``, under names the host derived
with a keyed hash; the items run sorted by node id, so neither names nor order say which is
which. Both copies are compiled here from the same transformed source, where each
``assert L == R`` becomes ``_vf_check(L, R, i)``: evaluate both sides once and make ``WIDTH``
comparisons in a fixed order, ``L == R`` among ``WIDTH - 1`` others at a position the plan
draws (``_compare``: the side with a line replaced by its consecutive values, so that any of
them could be the expected one). Both copies make exactly these calls; only what follows
differs, a closure flag: the real copy asserts ``L == R``; the decoy passes if, for any
equality it ran, all ``WIDTH`` comparisons held. Honest equality is transitive and the others
differ from the value they stand for, so an honest run reports every decoy FAILED, fixed or
not, and one forged equality among honest ones is enough to flag the run. Everything else
about the copies (module, globals, fixtures, markers, parameters, file and line numbers) is the
same.

At the end (``pytest_unconfigure``) one line, ``VERDICT_MARK`` and a JSON object, reports each
planned name's outcome.
"""

from __future__ import annotations

import ast
import decimal
import fractions
import hashlib
import inspect
import json
import sys
import textwrap
import types
from collections.abc import Callable
from typing import Any

import pytest

VERDICT_MARK = "STEPWISE-VERDICT"
PLAN: dict = {}
"""Set by the bootstrap: ``{"tests": [{"id", "real", "decoy", "key"}]}``; emptied at collection."""
_OUTCOMES: dict[str, str] = {}
"""Each planned name's outcome (the report)."""
_NAME_OF: dict[str, str] = {}
"""The node id each planned name runs under."""


WIDTH = 4
"""How many comparisons each equality makes: its own and ``WIDTH - 1`` others."""
_ADDED = (int, fractions.Fraction, decimal.Decimal)
"""Exact types whose line is ``+ k``."""
_SCALED = (float, complex)
"""Exact types whose line is ``* 2**k``: exact in binary floating point, and each value twice or
half its neighbour, beyond the tolerance of any approximate ``==`` (``pytest.approx``, a
float32 that rounds ``1e8 + 1``)."""
_TOP: dict[type, int] = {str: 0x110000, bytes: 0x100}
"""One past the largest code point of a str, byte of a bytes."""


def _path(value: Any) -> tuple | None:
    """Where ``value`` moves along its line: ``()`` for a value on one (ints, rationals and
    decimals, floats and complex numbers, a non-empty str or bytes), the keys down to the last
    element (value) that has one for a list, tuple or dict, None for no line. Only these exact
    types: a subclass (an ``IntEnum``, a forgery with its own ``__add__``) has no line."""
    kind = type(value)
    if kind in _ADDED or kind in _SCALED:
        return ()
    if kind in _TOP:
        return () if value else None
    if kind in (list, tuple, dict):
        for key in reversed(list(value) if kind is dict else range(len(value))):
            if (inner := _path(value[key])) is not None:
                return (key, *inner)
    return None


def _moved(value: Any, path: tuple, k: int) -> Any:
    """``value`` moved ``k`` steps at ``path`` (``_path``), or None where that leaves the type:
    ``+ k`` for ints, rationals and decimals, ``* 2**k`` for floats and complex numbers, a str's
    or bytes' last code point ``+ k``. Moving keeps each type, so the path stays, and moving
    ``k`` then ``j`` steps is moving ``k + j``."""
    if k == 0:
        return value
    kind = type(value)
    if path:
        inner = _moved(value[path[0]], path[1:], k)
        if inner is None:
            return None
        copy: Any = dict(value) if kind is dict else list(value)
        copy[path[0]] = inner
        return tuple(copy) if kind is tuple else copy
    if kind in _ADDED:
        return value + k
    if kind in _SCALED:
        return value * 2.0**k
    code = value[-1] if kind is bytes else ord(value[-1])
    if not 0 <= code + k < _TOP[kind]:
        return None
    return value[:-1] + (bytes([code + k]) if kind is bytes else chr(code + k))


def _line(value: Any, draw: int) -> tuple[list, int] | None:
    """``WIDTH`` consecutive values of ``value``'s line (``_moved``) and where ``value`` is among
    them, at ``draw % WIDTH``; None if it has no line (``_path``: empty, None, sets, subclasses,
    other types, nan) or a step leaves it equal (0, inf).

    Each other value differs from ``value``, and any of them, taken as ``value`` at its own
    position, gives the same list: the list alone does not say which one ``value`` is, only a
    prior over what values look like does. Where the line ends within ``WIDTH`` steps (a code
    point near 0 or the top) the window starts at the nearest start that fits, so there some
    positions are likelier. A bool's line is ``[False, True]``."""
    at = draw % WIDTH
    if type(value) is bool:
        return [False, True], int(value)
    if (path := _path(value)) is None or not _equal(value, value):  # nan equals nothing
        return None
    for start in sorted(range(1 - WIDTH, 1), key=lambda s: (abs(s + at), s)):  # -at first
        try:
            line = [_moved(value, path, start + i) for i in range(WIDTH)]
            if all(v is not None for v in line) and not any(
                _equal(v, value) for i, v in enumerate(line) if i != -start
            ):
                return line, -start
        except Exception:  # a Decimal context that traps, say: no line
            return None
    return None


def _draw(key: str, index: int, path: tuple) -> int:
    """Where the ``index``-th equality of a test puts its own comparison of the elements at
    ``path``: from a keyed hash, so no two places say anything of each other."""
    digest = hashlib.blake2b(repr((index, path)).encode(), key=bytes.fromhex(key), digest_size=8).digest()
    return int.from_bytes(digest, "big") % WIDTH


def _compare(left: Any, right: Any, draw: int, *, whole: bool = True) -> tuple[list[bool], int]:
    """``left == right`` among ``WIDTH`` comparisons, and where it is.

    The side with a line (the right, else the left: ``assert expected == actual`` is common) is
    replaced by each value of its line, the other side kept, in the assertion's order. Where
    neither side has one, objects equal to nothing stand in, each compared with both sides
    (either equality counts), so an ``==`` that is always true is asked about one on whichever
    side it is. Not ``whole`` (elements of containers, see ``_groups``): only the right side's
    line, else the comparison alone."""
    if (line := _line(right, draw)) is not None:
        values, at = line
        return [_equal(left, value) for value in values], at
    if not whole:
        return [_equal(left, right)], 0
    if (line := _line(left, draw)) is not None:
        values, at = line
        return [_equal(value, right) for value in values], at
    at = draw % WIDTH
    others = [_Unequal() for _ in range(WIDTH)]
    return [_equal(left, right) if i == at else _equal(left, o) or _equal(o, right) for i, o in enumerate(others)], at


_LEAVES = 256
"""Containers with more elements than this are compared whole, not element by element."""


def _groups(left: Any, right: Any, draw: Callable[[tuple], int]) -> list[tuple[list[bool], int]]:
    """``left == right`` as groups of comparisons, each with the place of its own: one group
    (``_compare``) for the pair, or, where both sides are lists, tuples or dicts of one exact
    type and shape (``_LEAVES`` elements at most), one for each pair of elements, as Python
    compares them (an element is its own equal: ``x is y`` first). So an ``__eq__`` of the
    code's own anywhere in a result is compared with its own element's neighbours, not only
    with equal values beside another element that moves. An element pair is checked only where
    the right one has a line; elsewhere (``mock.ANY`` or a matcher in an expected value, which
    equal anything) its group is its own comparison alone. ``draw(path)`` places each group's
    own comparison."""
    pairs: list[tuple[Any, Any, tuple]] = []
    todo: list[tuple[Any, Any, tuple]] = [(left, right, ())]
    try:
        while todo:
            a, b, path = todo.pop()
            kind = type(b)
            same = type(a) is kind and kind in (list, tuple, dict) and len(a) == len(b)
            if same and (kind is not dict or a.keys() == b.keys()) and len(pairs) + len(todo) + len(b) <= _LEAVES:
                keys = list(b) if kind is dict else range(len(b))  # a path holds positions, not keys
                todo.extend((a[key], b[key], (*path, i)) for i, key in reversed(list(enumerate(keys))))
            else:
                pairs.append((a, b, path))
    except Exception:  # keys whose == or hash raises: the pair as a whole
        pairs = [(left, right, ())]
    if len(pairs) == 1 and not pairs[0][2]:
        return [_compare(left, right, draw(()))]
    groups = []
    for a, b, path in pairs:
        results, at = _compare(a, b, draw(path), whole=False)
        results[at] = a is b or results[at]
        groups.append((results, at))
    return groups


def _forged(groups: list[tuple[list[bool], int]]) -> bool:
    """Whether some group's comparisons all held: an honest ``==`` cannot equal a value and its
    neighbours too."""
    return any(len(results) > 1 and all(results) for results, _ in groups)


class _Unequal:
    """Equal to nothing but itself: its ``==`` defers to the other side (``NotImplemented``), so
    an honest value is compared by identity, and an ``__eq__`` of the code's own is asked."""

    def __eq__(self, other: object) -> bool:
        return NotImplemented

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


def _copy(item: pytest.Function, factory: Any, name: str, key: str, decoy: bool) -> pytest.Function:
    """One copy of ``item`` named ``name``: the real test, or its decoy."""
    held: list[bool] = []

    def check(left: Any, right: Any, index: int) -> None:
        __tracebackhide__ = True  # a failure is reported at the test's own line
        groups = _groups(left, right, lambda path: _draw(key, index, path))
        if decoy:
            held.append(_forged(groups))
        elif not all(results[at] for results, at in groups):
            raise AssertionError(f"assert {left!r} == {right!r}")

    inner = factory(check)
    if item.instance is not None:
        inner = types.MethodType(inner, item.instance)

    def run(**kwargs: Any) -> Any:
        __tracebackhide__ = True
        result = inner(**kwargs)
        if decoy and not any(held):  # one equality that held every way is enough
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
            copy = _copy(item, factory, name, entry["key"], decoy)
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
