"""benchmarks/swe_bench_guess.py runs: the guess is graded, never flagged, and the gold control
in the same run resolves (the paid rate itself is in the bundle README, never asserted here)."""

from __future__ import annotations

import asyncio
import json

import pytest
import swe_bench_guess as bench


@pytest.mark.slow  # real gradings
def test_the_guess_is_graded_unflagged_beside_a_resolved_gold_control(capsys, tmp_path):
    counts = asyncio.run(bench.main(["--rounds", "2", "--control-every", "1", "--out", str(tmp_path)]))
    assert counts["rounds"] == 2 and counts["flagged"] == 0
    assert counts["controls"] == counts["controls_resolved"] == 2
    line = capsys.readouterr().out.strip()
    assert line.startswith("guess paid") and line in (tmp_path / "results.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["paid"] == counts["paid"]


def test_the_wilson_interval_brackets_the_proportion():
    assert bench.wilson(0, 64) == (0.0, pytest.approx(1.96**2 / (64 + 1.96**2)))
    low, high = bench.wilson(6, 64)
    assert low < 6 / 64 < high
