"""Which changes touch the test machinery: what a graded diff may not change.

A round is graded on the base commit with the model's diff applied (``grading``). The diff may
change the code under test, never how the tests are collected, imported, run or reported. The
rule follows how pytest (9.2, ``_pytest/config/findpaths.py``, ``_pytest/python.py``) and CPython
(3.11, ``site``, ``importlib``) load code; a change is rejected when it

- is a ``conftest.py`` anywhere: pytest imports every conftest.py on the way to a test file
  (hooks, fixtures, ``pytest_plugins``) and could rewrite any outcome;
- changes pytest's configuration: ``pytest.toml``, ``.pytest.toml``, ``pytest.ini`` and
  ``.pytest.ini`` anywhere (always configuration, even empty: they also move the rootdir); in a
  ``pyproject.toml``, ``tox.ini`` or ``setup.cfg`` anywhere, the tables pytest reads from it
  (``[tool.pytest]``/``[tool.pytest.ini_options]``, ``[pytest]``, ``[tool:pytest]``/``[pytest]``),
  parsed as pytest parses them (``tomllib``, ``iniconfig``); a file that cannot be parsed counts
  as changed. ``addopts`` can add ``-p plugin``, ``python_files`` can swap the tests;
- is a file the hidden test patch touches, or lies in a directory of the hidden tests (for each
  hidden test file, its nearest ancestor named ``tests``, ``test`` or ``testing``, else its own
  directory): helpers the hidden tests import, test runners (Django's ``tests/runtests.py``) and,
  with pytest's default ``prepend`` import mode, modules next to the tests shadow any import.
  Library code in a directory with such a name elsewhere (``django/test/``, ``sphinx/testing/``)
  is code under test and may change;
- is a test module by pytest's default pattern (``test_*.py``, ``*_test.py``);
- is byte code (``*.pyc``/``*.pyo``, ``__pycache__``): an ``unchecked-hash`` pyc (PEP 552) is
  imported without looking at its source, so it could replace a hidden test module;
- is a compiled extension module (``*.so``, ``*.pyd``, any ABI tag, any letter case): the import
  system tries extension modules before source, and the host's compiler is visible in the
  sandbox, so one could stand in for any module without a ``.py`` name;
- is package metadata or a start-up hook: ``*.dist-info``/``*.egg-info`` in any letter case
  (``importlib.metadata`` scans every ``sys.path`` entry, the repository root included, for
  ``pytest11`` entry points, which pytest loads as plugins, and matches those suffixes
  case-insensitively), ``*.egg-link``, ``*.pth``, ``sitecustomize.py``, ``usercustomize.py``;
- adds a top-level importable name the base commit does not have (in the repository root, first
  on ``sys.path`` under ``python -m pytest``, or in ``src/``): a module by any import suffix
  (``.py``, ``.pyc``, an extension's) or a directory, which imports as a package or a namespace
  package. An allowlist, not a list of names to avoid: any new name could be imported instead of
  a module pytest, the standard library or the tests look for (or make an optional import
  succeed). New files go inside the names the base commit has, or under names no import can
  reach (``.github/``, ``README.rst``);
- is a symbolic link or a submodule: a link could point any of the names above elsewhere.

What this cannot see: the code under test runs in pytest's own process, so a change to the
package itself can still monkeypatch pytest at import time or print fake result lines; that is
documented in the bundle's README ("Security model", not covered).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = [
    "Change", "check_change", "needs_content", "parse_raw_diff", "hidden_test_dirs", "top_level_name",
    "top_level_names", "touched_paths",
]  # fmt: skip

ALWAYS_CONFIG = frozenset({"pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"})
SECTIONED_CONFIG = frozenset({"pyproject.toml", "tox.ini", "setup.cfg"})
TEST_DIRS = frozenset({"tests", "test", "testing"})
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
IMPORT_SUFFIXES = (".py", ".pyw", ".pyc", ".so", ".pyd")
"""What the import system takes for a module (source, byte code, extension modules of any tag),
compared lower-case."""
COMPILED_SUFFIXES = (".so", ".pyd")
LINK_MODES = frozenset({"120000", "160000"})
_TEST_MODULE = re.compile(r"^(test_.*|.*_test)\.py$")


@dataclass(frozen=True)
class Change:
    """One path in ``git diff --raw``: modes as git prints them (``000000`` = absent)."""

    path: str
    status: str
    old_mode: str
    new_mode: str

    @property
    def added(self) -> bool:
        return self.old_mode == "000000"


def parse_raw_diff(raw: str) -> list[Change]:
    """``git diff --raw -z --no-renames`` output: ``:old new oldsha newsha status\\0path\\0``."""
    fields = raw.split("\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        old_mode, new_mode, _, _, status = meta.lstrip(":").split()
        changes.append(Change(path, status[0], old_mode, new_mode))
    return changes


def touched_paths(patch: str) -> set[str]:
    """Paths a unified git diff (the hidden test patch) changes."""
    return {m.group(1) for m in re.finditer(r"^diff --git a/(\S+) b/", patch, re.MULTILINE)}


def hidden_test_dirs(hidden: set[str]) -> set[PurePosixPath]:
    """The directories of the hidden tests: for each file, its nearest ancestor named like a
    test directory, else the directory it is in."""
    found = set()
    for path in map(PurePosixPath, hidden):
        named = [parent for parent in path.parents if parent.name in TEST_DIRS]
        found.add(named[0] if named else path.parent)
    return found - {PurePosixPath(".")}  # a test module at the root protects only itself


def needs_content(change: Change) -> bool:
    """Whether ``check_change`` must see the file's text before and after."""
    return PurePosixPath(change.path).name in SECTIONED_CONFIG and change.new_mode not in LINK_MODES


def top_level_name(path: str, directory: bool = False) -> str | None:
    """The top-level importable name ``path`` provides (``name``, or ``src/name`` under ``src/``),
    or None: a file at the top whose suffix no import takes, or a name that is no identifier.
    ``directory``: ``path`` itself is a directory (else a file)."""
    parts = PurePosixPath(path).parts
    prefix = ""
    if parts[0] == "src" and len(parts) > 1:
        prefix, parts = "src/", parts[1:]
    first = parts[0]
    if len(parts) == 1 and not directory:
        if not first.lower().endswith(IMPORT_SUFFIXES):
            return None
        first = first.split(".")[0]
    return prefix + first if first.isidentifier() else None


def top_level_names(ls_tree: str) -> frozenset[str]:
    """The top-level importable names of the base commit, from ``git ls-tree`` of its root and
    of ``src/`` (lines ``mode type object\tpath``, ``src/`` entries with their prefix)."""
    names = set()
    for line in ls_tree.splitlines():
        meta, _, path = line.partition("\t")
        if path and (name := top_level_name(path, directory=meta.split()[1:2] == ["tree"])):
            names.add(name)
    return frozenset(names)


def check_change(
    change: Change,
    hidden: set[str],
    before: bytes | None = None,
    after: bytes | None = None,
    base_names: frozenset[str] = frozenset(),
) -> str | None:
    """Why ``change`` touches the test machinery (see the module docstring), or None.
    ``hidden``: the paths the hidden test patch touches; ``before``/``after``: the file's
    content at the base commit and with the diff (None when absent), for ``needs_content``;
    ``base_names``: the base commit's ``top_level_names`` (needed when an added path has a
    ``top_level_name``)."""
    path = PurePosixPath(change.path)
    name, parts = path.name, path.parts
    if change.new_mode in LINK_MODES or (change.old_mode in LINK_MODES and change.status != "D"):
        return f"{change.path} is a symbolic link or a submodule"
    if name == "conftest.py":
        return f"{change.path} is a pytest conftest.py"
    if name in ALWAYS_CONFIG:
        return f"{change.path} is a pytest configuration file"
    if name in SECTIONED_CONFIG and _pytest_section(name, before) != _pytest_section(name, after):
        return f"{change.path} changes pytest's configuration"
    if change.path in hidden:
        return f"{change.path} is a file the hidden tests change"
    if _TEST_MODULE.match(name) or any(d in path.parents for d in hidden_test_dirs(hidden)):
        return f"{change.path} is in the tests"
    lower = name.lower()
    if lower.endswith((".pyc", ".pyo")) or "__pycache__" in parts:
        return f"{change.path} is Python byte code"
    if lower.endswith(COMPILED_SUFFIXES):
        return f"{change.path} is a compiled module, which the import system takes before source"
    if any(p.lower().endswith((".dist-info", ".egg-info")) for p in parts) or lower.endswith((".egg-link", ".pth")):
        return f"{change.path} is package metadata or a path hook that Python or pytest would load"
    if name in STARTUP_HOOKS:
        return f"{change.path} is an interpreter start-up hook"
    top = top_level_name(change.path) if change.added else None
    if top is not None and top not in base_names:
        return (
            f"{change.path} adds the top-level importable name {top.removeprefix('src/')!r}, which the base "
            "commit does not have: it could be imported instead of another module (add files inside the "
            "existing packages)"
        )
    return None


def _pytest_section(name: str, content: bytes | None) -> object:
    """What pytest reads from a ``pyproject.toml``/``tox.ini``/``setup.cfg`` (None: nothing).
    A file pytest (or this check) cannot parse is its own value, unequal to any other."""
    if content is None:
        return None
    try:
        text = content.decode()
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        import iniconfig  # pytest's own INI parser (a dependency of pytest)

        ini = iniconfig.IniConfig(name, data=text)
        sections = ("pytest",) if name == "tox.ini" else ("tool:pytest", "pytest")
        return {s: dict(ini[s].items()) for s in sections if s in ini}
    except Exception:  # noqa: BLE001 - unreadable (or no iniconfig): counted as a change
        return object()
