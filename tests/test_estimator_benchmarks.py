"""Smoke tests of benchmarks/estimators.py and benchmarks/import_time.py on tiny sizes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_estimators_benchmark_prints_budget_and_compiled_tables():
    command = [sys.executable, str(ROOT / "benchmarks" / "estimators.py"), "--trajectories", "64"]
    result = subprocess.run(
        [*command, "--repeats", "1", "--python-repeats", "1"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "budget: 4 groups x 16 trajectories x 1-8 turns" in out
    assert "compiled: 4 groups x 16 trajectories x 1-16 turns" in out
    assert out.count("within") == 12  # every configuration, tiny batch
    assert "19.30" in out  # the compiled kernels' published per_turn time is printed beside ours
    assert "default   sum         absorbing" in out and "gigpo     sum         anchor states" in out
    assert out.count("(none published)") == 4  # absorbing (sum, max), the default and gigpo


def test_estimators_benchmark_checks_numpy_against_plain_python():
    bench = load("estimators")
    rows = bench.run("budget", bench.Size(32, 16, 8), gamma=0.9, repeats=1, python_repeats=1)
    stepwise = {(r["aggregation"], r["baseline"]) for r in rows if r["estimator"] == "stepwise"}
    assert stepwise == set(bench.COMPILED_MS) | {("sum", "absorbing"), ("max", "absorbing")}
    assert [r["estimator"] for r in rows if r["estimator"] != "stepwise"] == ["default", "gigpo"]
    assert all(r["numpy_ms"] > 0 and r["python_ms"] > 0 for r in rows)


def test_first_call_is_timed_in_a_fresh_process():
    inside, cpu, whole = load("import_time").first_call_ms(1)
    assert 0 < inside < whole and cpu > 0
