"""Smoke test of benchmarks/prime_rl_path.py: it runs end to end on a tiny size."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("walked", [[], ["--walked"]])
def test_benchmark_runs_and_reports_the_ratio(walked):
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "prime_rl_path.py"),
            "--groups",
            "2",
            "--group-size",
            "4",
            "--max-turns",
            "3",
            "--tokens",
            "4",
            "8",
            "--repeats",
            "1",
            *walked,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 groups x 4 episodes" in run.stdout
    assert "ratio stepwise / reward-minus-mean broadcast:" in run.stdout
    assert "ratio stepwise / reward-minus-mean broadcast, list.count:" in run.stdout


def load_benchmark():
    spec = importlib.util.spec_from_file_location("prime_rl_path", ROOT / "benchmarks" / "prime_rl_path.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_walk_before_scoring_keeps_the_traces_prime_rl_would_score():
    """``--walked`` walks a group as prime-rl does before ``finalize_group``: its survivors are the
    error-free, trainable traces with a sampled token."""
    bench = load_benchmark()
    (group,) = bench.build_groups(1, 4, 3, (1, 6), seed=3)
    errored, untrainable, unsampled, kept = (episode.traces[0] for episode in group)
    errored.ok = False
    untrainable.agent.trainable = False
    for node in unsampled.nodes:
        node.mask = [False] * len(node.mask)
    assert bench.walk_as_prime_rl(group) == [kept]


def test_both_references_write_the_same_advantages():
    """The list.count reference is the sum reference with a faster count, nothing else."""
    bench = load_benchmark()
    written = []
    for count_sampled in (sum, bench.count_true):
        (group,) = bench.build_groups(1, 4, 3, (1, 6), seed=3)
        bench.reward_minus_mean(group, count_sampled)
        written.append([n.advantages for e in group for n in e.traces[0].nodes])
    assert written[0] == written[1]
    assert any(written[0])
