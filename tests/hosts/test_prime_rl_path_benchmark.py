"""Smoke test of benchmarks/prime_rl_path.py: it runs end to end on a tiny size."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_runs_and_reports_the_ratio():
    run = subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "prime_rl_path.py"),
            "--groups", "2", "--group-size", "4", "--max-turns", "3", "--tokens", "4", "8", "--repeats", "1",
        ],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 groups x 4 episodes" in run.stdout
    assert "ratio stepwise / reward-minus-mean broadcast:" in run.stdout
