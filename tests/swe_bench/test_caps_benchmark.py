"""benchmarks/swe_bench_caps.py runs (tiny sizes; the numbers are in docs/benchmarks.md, never timed here)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("benchmark_swe_bench_caps", ROOT / "benchmarks" / "swe_bench_caps.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow  # real episodes: repositories, sandboxes, gradings
def test_caps_benchmark_measures_each_step_with_and_without_the_caps(capsys):
    bench = load()
    timings = asyncio.run(bench.main(["--episodes", "1", "--commands", "2"]))
    steps = {what for what, _ in timings}
    assert steps == {
        "command",
        "grading copy + 1 command + removal",
        "episode setup (to a first command)",
        "episode teardown",
    }
    assert all((what, name) in timings for what in steps for name in bench.CONFIGS)
    assert len(timings[("command", "all")]) == 2 and all(t > 0 for v in timings.values() for t in v)
    out = capsys.readouterr().out
    assert "1 episodes per configuration, interleaved" in out and "all - keyring" in out and "all adds" in out


def test_each_configuration_drops_only_its_defense():
    bench = load()
    argv = ["bwrap", "--seccomp", "3", "--tmpfs", "/x", "--remount-ro", "/x"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    assert bench._without(argv, {"keyring"}) == ["bwrap", *argv[3:]]
    assert bench._without(argv, {"read-only"}) == argv[:7]
