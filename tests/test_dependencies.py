"""Every imported package is declared where it is imported, and the core declares no more.

Read from the source (AST) and the pyproject files; import names are mapped to distributions
through the installed metadata (``packages_distributions``), so this runs in the dev install.
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CORE = ["verifiers_stepwise", "stepwise_chat"]
BUNDLES = {
    "stepwise_refine": ROOT / "environments/stepwise_refine",
    "stepwise_dapo_math": ROOT / "environments/stepwise_dapo_math",
    # fixtures/ holds the task repositories the model edits: task data, not bundle code
    "stepwise_swe_bench": ROOT / "environments/stepwise_swe_bench",
    "stepwise_sums": ROOT / "environments/stepwise_sums",
}
FIRST_PARTY = {"verifiers_stepwise", "stepwise_chat", *BUNDLES}


def project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


@functools.cache
def distributions(module: str) -> set[str]:
    return {canonicalize_name(d) for d in _packages().get(module, [])}


@functools.cache
def _packages() -> dict[str, list[str]]:
    return dict(packages_distributions())


def sources(package: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        if "fixtures" not in path.relative_to(package).parts:
            yield path, ast.parse(path.read_text(), str(path))


def guards(package: Path) -> dict[str, ast.Call]:
    """The package's own import guards by name: ``requires`` and each function that returns a
    ``requires(...)`` call (e.g. ``hosts.torchtitan.requires_torchtitan``)."""
    found = {"requires": ast.Call(func=ast.Name("requires"), args=[ast.Constant("")], keywords=[])}
    for _, tree in sources(package):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call):
                        if getattr(ret.value.func, "id", None) == "requires":
                            found[node.name] = ret.value
    return found


def guard_call(call: ast.expr, known: dict[str, ast.Call]) -> ast.Call | None:
    """The ``requires(...)`` call a ``with`` item amounts to: a guard's, plus the modules this call adds."""
    name = getattr(call.func, "id", None) if isinstance(call, ast.Call) else None
    if name not in known:
        return None
    assert isinstance(call, ast.Call)
    guard = known[name]
    return ast.Call(func=guard.func, args=[*guard.args, *call.args[1:]], keywords=guard.keywords or call.keywords)


def imports(package: Path) -> Iterator[tuple[str, str, ast.Call | None]]:
    """(file, top-level module, the ``requires(...)`` call that guards it or None) per import.

    An import is guarded by the ``with requires(...)`` block (or a guard returning one) around
    it, or, anywhere in a file, by the file's block that names its module (e.g. a later import
    inside a function)."""
    known = guards(package)
    for path, tree in sources(package):
        guarded: dict[int, ast.Call] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.With):
                for item in node.items:
                    call = guard_call(item.context_expr, known)
                    if call is not None:
                        for inner in ast.walk(node):
                            guarded[id(inner)] = call
        by_module = {module: call for call in guarded.values() for module in named(call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", top, guarded.get(id(node), by_module.get(top))


def named(call: ast.Call) -> list[str]:
    """The modules a ``requires(feature, *modules, ...)`` call names."""
    return [arg.value for arg in call.args[1:] if isinstance(arg, ast.Constant)]


def keyword(call: ast.Call, name: str) -> str | None:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def test_the_core_depends_only_on_what_it_imports():
    core = names(project(ROOT)["dependencies"])
    assert core == {"verifiers", "numpy", "pydantic", "rich", "openai", "httpx", "certifi", "aiohttp"}
    assert not core & {"torch", "numba", "datasets", "matplotlib"}


def test_every_core_import_is_declared_and_every_optional_one_names_its_extra():
    meta = project(ROOT)
    core = names(meta["dependencies"])
    extras = {extra: names(reqs) for extra, reqs in meta["optional-dependencies"].items()}
    problems = []
    for package in CORE:
        for where, module, call in imports(ROOT / package):
            provided = distributions(module)
            if call is None:
                if not provided & core:
                    problems.append(f"{where}: {module} is not a core dependency (import it in requires())")
                continue
            extra, also = keyword(call, "extra"), keyword(call, "also")
            if module not in named(call):
                problems.append(f"{where}: {module} is imported in requires() but not named there")
            elif not provided & (core | extras.get(extra or "", set())) and also is None:
                problems.append(f"{where}: {module} is not in extra {extra!r} and requires() says no other install")
    assert problems == []


@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_bundle_import_is_declared_by_the_bundle(bundle):
    meta = project(BUNDLES[bundle])
    declared = names(meta["dependencies"]).union(*map(names, meta.get("optional-dependencies", {}).values()))
    missing = [
        f"{where}: {module}"
        for where, module, _ in imports(BUNDLES[bundle] / bundle)
        if not distributions(module) & declared
    ]
    assert missing == []
