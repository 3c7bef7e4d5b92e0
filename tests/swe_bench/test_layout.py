"""How the bundle's modules import each other, and how its tool server is served."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import stepwise_swe_bench
import verifiers.v1 as vf
from stepwise_swe_bench.taskset import SweBenchTask, SweBenchTaskConfig, SweBenchTaskset, SweBenchTasksetConfig
from stepwise_swe_bench.toolset import SweToolset

BUNDLE = Path(stepwise_swe_bench.__file__).parent


def bundle_imports(path: Path) -> set[str]:
    """The bundle modules ``path`` imports anywhere: top level, in functions, under TYPE_CHECKING."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stepwise_swe_bench."):
            found.add(node.module.split(".")[1])
    return found


def test_no_module_of_the_bundle_imports_itself_back():
    graph = {path.stem: bundle_imports(path) for path in BUNDLE.glob("*.py")}
    graph["verdict"] = set().union(*(bundle_imports(path) for path in (BUNDLE / "verdict").glob("*.py"))) - {"plugin"}
    assert set().union(*graph.values()) <= set(graph)

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for module in graph[start] - seen:
            seen.add(module)
            if module == target or reaches(module, target, seen):
                return True
        return False

    assert [m for m in graph if reaches(m, m, set())] == []


def test_the_tool_server_imports_neither_the_environment_nor_grading():
    probe = (
        "import sys, stepwise_swe_bench.toolset; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('stepwise_swe_bench', 'swebench', "
        "'verifiers_stepwise')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "stepwise_swe_bench.toolset" in loaded
    for module in ("env", "grading", "machinery", "taskset", "fixtures"):
        assert f"stepwise_swe_bench.{module}" not in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("swebench", "verifiers_stepwise")]


def test_the_verdict_is_a_module_of_its_own():
    """It imports nothing of the environment: its plugin runs in the grading sandbox on the
    standard library and pytest alone, and the host side is the plan and the judge."""
    for path in (BUNDLE / "verdict").glob("*.py"):
        assert bundle_imports(path) <= {"plugin"}, path
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module
        }
        assert imported <= set(sys.stdlib_module_names) | {"pytest", "_pytest", "__future__"}, (path, imported)


def test_the_package_exports_load_on_first_use():
    assert stepwise_swe_bench.SweBenchTaskset is SweBenchTaskset
    assert issubclass(stepwise_swe_bench.SweBenchEnv, vf.Env)


def test_the_tools_are_one_server_per_eval_not_per_rollout():
    """A server per rollout cost every rollout seconds of setup (the interpreter, verifiers'
    imports, the launcher's one-second polls); the taskset's server is started once per eval."""
    assert SweBenchTask.toolsets(SweBenchTaskConfig()) == []
    (server,) = SweBenchTaskset.toolsets(SweBenchTasksetConfig())
    assert isinstance(server, SweToolset) and isinstance(server.config, vf.SharedToolsetConfig)
    assert server.server_name == ""  # tools advertised bare: bash, view, edit, create, submit
