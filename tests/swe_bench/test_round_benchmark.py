"""benchmarks/swe_bench_round.py runs (one round per task and mode; the numbers are in
docs/benchmarks.md, never timed here), and each mode is the code path it names."""

from __future__ import annotations

import asyncio

import pytest
import swe_bench_round as bench
from stepwise_swe_bench import grading
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.sandbox import BwrapSandbox


@pytest.mark.parametrize("name", bench.MODES)
def test_each_mode_is_the_code_path_it_names(sandbox, name):
    instance = load_instances()[0]
    with bench.mode(name):
        split = grading.split_eval_script(instance.test_spec().eval_script)
        with BwrapSandbox(sandbox.repo, sandbox.limits).command("true", []) as command:
            argv = command.argv
    assert (split is not None) == (name == "now")  # the decoy verdict, or one call parsed by swebench
    assert ("--seccomp" in argv) == (name != "before")  # the keyring filter
    remounted = {argv[i + 1] for i, option in enumerate(argv) if option == "--remount-ro"}
    assert ({"/", "/dev"} <= remounted) == (name != "before")  # read-only / and /dev


@pytest.mark.slow  # real gradings
def test_round_benchmark_grades_every_task_in_each_mode(capsys):
    times = asyncio.run(bench.main(["--repeats", "1"]))
    assert set(times) == set(bench.MODES) and all(len(t) == 5 and min(t) > 0 for t in times.values())
    out = capsys.readouterr().out
    assert "rounds per mode: 5 (5 tasks x 1)" in out and "x before)" in out
