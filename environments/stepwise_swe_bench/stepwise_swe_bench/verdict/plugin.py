"""The grader's pytest plugin: runs inside the grading sandbox, in the tests' own process.

Not imported by the host: ``verdict`` sends this file's text, with the round's plan, on the
test command's stdin; the bootstrap (``verdict.BOOTSTRAP``) runs it before pytest starts, so
before any code under test is imported, with a copy of the builtins for its namespace. Standard
library and pytest only.

Everything it uses is bound then: the functions and classes below by reference, the builtins by
that copy; the planned tests' source is read from their files and rewritten then too (``load``).
Code under test that rebinds ``inspect.getsourcelines``, ``ast.NodeVisitor.visit``,
``pytest.Function`` or a builtin at import changes nothing here.

The plan names every graded test twice, ``real`` and ``decoy``, under names the host derived
with a keyed hash; the items run sorted by node id, so neither names nor order say which is
which. Both copies are compiled from the test's source with each ``assert L == R`` rewritten to
``_vf_check(L, R, i)``: evaluate both sides once and make ``WIDTH`` comparisons in a fixed order,
``L == R`` among ``WIDTH - 1`` others at a position the plan draws (``_compare``). Each of the
``WIDTH`` values on the side that moves is a fresh object built the same way, the one equal to
the expected value included, so identity, reference counts or ``is`` cannot tell it. Only what
follows differs, a closure flag: the real copy asserts ``L == R``; the decoy passes if, for any
equality it ran, all ``WIDTH`` comparisons held. Honest equality is transitive and the others
differ from the value they stand for, so an honest run reports every decoy FAILED, fixed or
not.

Two more outcomes of a decoy flag the run (the host's ``judge``): ``undecoyed``, a plain test
function (by its source, or by pytest's own item class) the plugin could not copy, and
``unchecked``, a decoy that returned without comparing anything although its test's body asserts
an ``==`` before any ``return`` (so every honest run that returns compares at least once).

At the end (``pytest_unconfigure``) one line, ``VERDICT_MARK`` and ``name=outcome`` pairs,
reports each planned name's outcome, written to the standard output this process started with.
"""

from __future__ import annotations

import decimal
import fractions
import hashlib
import os
import types
from ast import (
    AST,
    Assert,
    AsyncFunctionDef,
    Call,
    ClassDef,
    Compare,
    Constant,
    Eq,
    Expr,
    FunctionDef,
    Lambda,
    Load,
    Module,
    Name,
    PyCF_ONLY_AST,
    Return,
    arg,
    arguments,
)
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from _pytest.python import Function
from _pytest.unittest import TestCaseFunction

VERDICT_MARK = "STEPWISE-VERDICT"
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
_LEAVES = 256
"""Containers with more elements than this are compared whole, not element by element."""
_CO_ASYNC = 0x80 | 0x200  # CO_COROUTINE | CO_ASYNC_GENERATOR
_blake2b, _write, _getcwd = hashlib.blake2b, os.write, os.getcwd
_method = types.MethodType
_OUT = os.dup(1)
"""The standard output this process started with (pytest redirects fd 1 while tests run)."""

_PLAN: list[dict] = []
"""The planned tests: ``{"id", "real", "decoy", "key"}`` (``load``)."""
_SOURCES: dict[str, Any] = {}
"""Each planned test id's ``_Source`` (``load``); None where its node id names no definition."""
_OUTCOMES: dict[str, str] = {}
"""Each planned name's outcome (the report)."""
_NAME_OF: dict[str, str] = {}
"""The node id each planned name runs under."""
_UNCHECKED: set[str] = set()
"""Decoys that returned without comparing anything although their test must compare."""


# -- the tests' source, read before any code under test runs ---------------------------------------


def _is_eq(node: Any) -> bool:
    test = node.test
    return type(test) is Compare and len(test.ops) == 1 and type(test.ops[0]) is Eq


def _children(node: Any) -> list:
    out: list = []
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, list):
            out.extend(v for v in value if isinstance(v, AST))
        elif isinstance(value, AST):
            out.append(value)
    return out


def _returns(node: Any) -> bool:
    """Whether ``node`` holds a ``return`` of the function it is in (nested scopes aside)."""
    if type(node) is Return:
        return True
    if type(node) in (FunctionDef, AsyncFunctionDef, ClassDef, Lambda):
        return False
    return any(_returns(child) for child in _children(node))


def _located(node: Any, like: Any) -> Any:
    node.lineno, node.col_offset = like.lineno, like.col_offset
    node.end_lineno, node.end_col_offset = like.end_lineno, like.end_col_offset
    return node


def _rewrite(node: Any, count: list[int]) -> None:
    """Every ``assert L == R`` under ``node`` → ``_vf_check(L, R, i)`` (``i`` counts them)."""
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, list):
            for at, child in enumerate(value):
                if type(child) is Assert and _is_eq(child):
                    test: Any = child.test
                    index = _located(Constant(count[0]), child)
                    count[0] += 1
                    call = Call(_located(Name("_vf_check", Load()), child), [test.left, test.comparators[0], index], [])
                    value[at] = _located(Expr(_located(call, child)), child)
                elif isinstance(child, AST):
                    _rewrite(child, count)
        elif isinstance(value, AST):
            _rewrite(value, count)


class _Source(NamedTuple):
    """A test's definition, rewritten (``_rewrite``), and what the verdict asks of its copies."""

    definition: Any
    path: str
    must_compare: bool
    """Its body asserts an ``==`` before any ``return``: a decoy that returns has compared."""
    must_decoy: bool
    """A plain function at module level or in a class without bases: it must have a decoy."""


_SOURCED: dict[int, _Source] = {}
"""Each definition's ``_Source``, by the node's id: rewritten once (parametrized tests share it)."""


def _source(definition: Any, path: str, plain: bool) -> _Source:
    if id(definition) in _SOURCED:
        return _SOURCED[id(definition)]
    must_compare = False
    for statement in definition.body:
        if _returns(statement):
            break
        if type(statement) is Assert and _is_eq(statement):
            must_compare = True
    _rewrite(definition, [0])
    definition.decorator_list = []
    _SOURCED[id(definition)] = _Source(definition, path, must_compare, plain and type(definition) is FunctionDef)
    return _SOURCED[id(definition)]


_TREES: dict[str, Any] = {}


def _tree(path: str) -> Any:
    """The parsed file at ``path`` (None if unreadable), parsed once."""
    if path not in _TREES:
        try:
            with open(path, "rb") as file:
                _TREES[path] = compile(file.read(), path, "exec", PyCF_ONLY_AST)
        except (OSError, SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


def _from_id(test: str, cwd: str) -> _Source | None:
    """The last definition the node id ``test`` names (classes, then the function) in its file."""
    path, *names = test.split("[")[0].split("::")
    file = path if path.startswith("/") else f"{cwd}/{path}"
    scope, plain = _tree(file), True
    if scope is None or not names:
        return None
    for name in names[:-1]:
        classes = [n for n in scope.body if type(n) is ClassDef and n.name == name]
        if not classes:
            return None
        scope, plain = classes[-1], plain and not classes[-1].bases
    found = [n for n in scope.body if type(n) in (FunctionDef, AsyncFunctionDef) and n.name == names[-1]]
    return _source(found[-1], file, plain) if found else None


def load(plan: dict) -> None:
    """Take the round's plan and read its tests' source (called by the bootstrap)."""
    _PLAN.extend(plan["tests"])
    cwd = _getcwd()
    for entry in _PLAN:
        _SOURCES[entry["id"]] = _from_id(entry["id"], cwd)


def _from_code(item: Any) -> _Source | None:
    """For a test whose node id does not name where it is defined (inherited, say): its
    definition found from its function's code object (its file and first line)."""
    function: Any = getattr(item, "obj", None)
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    code = getattr(function, "__code__", None)
    if code is None or code.co_flags & _CO_ASYNC or code.co_freevars:
        return None
    tree = _tree(code.co_filename)
    stack = [tree] if tree is not None else []
    while stack:
        node = stack.pop()
        if type(node) is FunctionDef and node.name == code.co_name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if code.co_firstlineno == first:
                return _source(node, code.co_filename, True)
        stack.extend(n for n in _children(node) if type(n) in (FunctionDef, ClassDef, Module))
    return None


def _factory(source: _Source, module: Any) -> Any:
    """The factory ``check -> test function`` of a test's source, run with its module's
    globals, its file and line numbers."""
    definition = source.definition

    def at(node: Any) -> Any:
        return _located(node, definition)

    factory = at(
        FunctionDef(
            name="_vf_factory",
            args=arguments([], [at(arg("_vf_check"))], None, [], [], None, []),
            body=[definition, at(Return(at(Name(definition.name, Load()))))],
            decorator_list=[],
        )
    )
    namespace: dict = {}
    exec(compile(Module([factory], []), source.path, "exec"), module.__dict__, namespace)
    return namespace["_vf_factory"]


# -- the comparisons --------------------------------------------------------------------------------


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
    """A new object: ``value`` moved ``k`` steps at ``path`` (``_path``), or None where that
    leaves the type: ``+ k`` for ints, rationals and decimals, ``* 2**k`` for floats and complex
    numbers, a str's or bytes' last code point ``+ k``. ``k = 0`` is built the same way, so it
    is an equal value and no more the expected object than its neighbours are. Moving keeps each
    type, so the path stays, and moving ``k`` then ``j`` steps is moving ``k + j``."""
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
    """``WIDTH`` consecutive values of ``value``'s line (``_moved``) and where the one equal to
    ``value`` is among them, at ``draw % WIDTH``; None if it has no line (``_path``: empty,
    None, sets, subclasses, other types, nan), a step leaves it equal (0, inf) or the copy is
    not equal (a Decimal its context rounds).

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
            if all(v is not None for v in line) and all(_equal(v, value) == (i == -start) for i, v in enumerate(line)):
                return line, -start
        except Exception:  # a Decimal context that traps, say: no line
            return None
    return None


def _draw(key: str, index: int, path: tuple) -> int:
    """Where the ``index``-th equality of a test puts its own comparison of the elements at
    ``path``: from a keyed hash, so no two places say anything of each other."""
    digest = _blake2b(repr((index, path)).encode(), key=bytes.fromhex(key), digest_size=8).digest()
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


def _groups(left: Any, right: Any, draw: Callable[[tuple], int]) -> list[tuple[list[bool], int]]:
    """``left == right`` as groups of comparisons, each with the place of its own: one group
    (``_compare``) for the pair, or, where both sides are lists, tuples or dicts of one exact
    type and shape (``_LEAVES`` elements at most), one for each pair of elements, as Python
    compares them (an element is its own equal: ``x is y`` first). So an ``__eq__`` of the
    code's own anywhere in a result is compared with its own element's neighbours. An element
    pair is checked only where the right one has a line; elsewhere (``mock.ANY`` or a matcher in
    an expected value, which equal anything) its group is its own comparison alone.
    ``draw(path)`` places each group's own comparison."""
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


def _equal(left: Any, right: Any) -> bool:
    """``left == right`` as an assertion reads it; an equality that raises is not equal."""
    try:
        return bool(left == right)
    except Exception:
        return False


# -- the copies -------------------------------------------------------------------------------------


def _copy(item: Any, factory: Any, name: str, key: str, decoy: bool, must_compare: bool) -> Any:
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
        inner = _method(inner, item.instance)

    def run(**kwargs: Any) -> Any:
        __tracebackhide__ = True
        result = inner(**kwargs)
        if decoy and must_compare and not held:
            _UNCHECKED.add(name)
        if decoy and not any(held):  # one equality that held every way is enough
            raise AssertionError()
        return result

    copy = Function.from_parent(
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
    by_id = {item.nodeid: item for item in items}
    chosen = []
    for entry in _PLAN:
        item = by_id.get(entry["id"])
        if item is None:  # not collected (e.g. the module does not import): neither copy runs
            _OUTCOMES[entry["real"]] = _OUTCOMES[entry["decoy"]] = "not-collected"
            continue
        function = isinstance(item, Function) and not isinstance(item, TestCaseFunction)
        source = _SOURCES.get(entry["id"]) or (_from_code(item) if function else None)
        factory = None
        if function and source is not None and type(source.definition) is FunctionDef:
            try:
                factory = _factory(source, item.module)  # type: ignore[attr-defined]
            except Exception:
                factory = None
        if factory is None:  # the item as it is: no decoy (unittest, async), or one missing
            _NAME_OF[item.nodeid] = entry["real"]
            chosen.append(item)
            _OUTCOMES[entry["decoy"]] = "undecoyed" if source is not None and source.must_decoy else "no-decoy"
            continue
        assert source is not None
        for name, decoy in ((entry["real"], False), (entry["decoy"], True)):
            copy = _copy(item, factory, name, entry["key"], decoy, source.must_compare)
            _NAME_OF[copy.nodeid] = name
            chosen.append(copy)
    _PLAN.clear()
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
    for name in _UNCHECKED:
        _OUTCOMES[name] = "unchecked"
    pairs = " ".join(f"{name}={outcome}" for name, outcome in sorted(_OUTCOMES.items()))
    _write(_OUT, f"\n{VERDICT_MARK} {pairs}\n".encode())
