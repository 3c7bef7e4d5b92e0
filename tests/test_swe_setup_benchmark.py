"""benchmarks/swe_setup.py runs (tiny sizes; the numbers are in docs/benchmarks.md, never timed here). It
compares two bundles, stepwise-swe-bench against stepwise-refine, so it runs with every bundle installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # two real vf-eval runs


def test_setup_benchmark_reads_every_rollouts_setup_from_real_vf_eval_runs(capsys):
    spec = importlib.util.spec_from_file_location("benchmark_swe_setup", ROOT / "benchmarks" / "swe_setup.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    # Three tasks at once through the eval's one tool server: each rollout's bash call must
    # answer with its own task's base commit (the benchmark checks), so no call crossed over.
    runs = bench.main(["--rollouts", "3", "--concurrency", "3"])
    assert [(r.env, r.concurrency, len(r.setups)) for r in runs] == [
        ("stepwise-swe-bench", 3, 3),
        ("stepwise-refine", 3, 3),
    ]
    assert all(0 < s < f for r in runs for s, f in zip(r.setups, r.first_calls, strict=True))
    swe = runs[0]
    assert all(0 < t <= s for t, s in zip(swe.task_setups, swe.setups, strict=True)) and len(swe.task_setups) == 3
    out = capsys.readouterr().out
    assert "-c 3: 3 rollouts each" in out and "reference: refine" in out and "target <= 500 ms" in out
