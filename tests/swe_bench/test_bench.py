"""benchmarks/swe_bench.py runs (one visit per task and engine; the numbers are in
docs/benchmarks.md, never timed here)."""

from __future__ import annotations

import asyncio

import pytest
import swe_bench as bench

from .conftest import need


@pytest.mark.slow  # real episodes and gradings
def test_the_benchmark_measures_each_engine(capsys):
    need("docker")
    times = asyncio.run(bench.main(["--repeats", "1"]))
    assert set(times) == {"docker", "bwrap"}
    assert all(len(t) == 5 and min(t) > 0 for by in times.values() for t in by.values())
    out = capsys.readouterr().out
    assert "per engine and measure: 5 (5 tasks x 1)" in out and "x bwrap)" in out and "load average" in out
