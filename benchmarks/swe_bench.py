"""Episode setup and per-round test time of ``stepwise-swe-bench`` on its bundled tasks.

Setup is what the task's setup hook does: start the ``subprocess`` runtime, put the task's
repository at its base commit in it and open the bubblewrap sandbox over it; it ends when a
first sandboxed command (``git rev-parse HEAD``) has answered. Target: median <= 100 ms. This
is one part of a rollout's setup; ``swe_setup.py`` measures all of it, as ``vf-eval`` times it.
References measured in the same run: starting an empty bubblewrap sandbox, and ``git clone`` of
the same repository (the usual way to get a checkout).

The test run per round is one grading: read the model's diff, copy the base checkout, apply the
diff and check it (``machinery``), apply the hidden tests, run FAIL_TO_PASS and PASS_TO_PASS,
grade with swebench. Reference: the same pytest run
directly on the host, without sandbox, copy or git steps.

    python benchmarks/swe_bench.py [--episodes 40] [--gradings 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stepwise_swe_bench.box import prepare_box
from stepwise_swe_bench.fixtures import commit_tree
from stepwise_swe_bench.grading import grade, model_patch
from stepwise_swe_bench.instances import FIXTURES, load_instances
from stepwise_swe_bench.limits import SandboxLimits
from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime

# What the sandbox sets for every command, applied to the host reference for a fair comparison.
HOST_TEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def ms(seconds: list[float]) -> str:
    p90 = sorted(seconds)[int(0.9 * (len(seconds) - 1))]
    return f"median {statistics.median(seconds) * 1e3:7.1f} ms  (p90 {p90 * 1e3:7.1f})"


async def setup_once(instance, limits: SandboxLimits) -> float:
    runtime = SubprocessRuntime(SubprocessConfig())
    start = time.perf_counter()
    await runtime.start()
    _, sandbox = await prepare_box(runtime, instance, limits)
    head = await sandbox.run("git rev-parse HEAD")
    elapsed = time.perf_counter() - start
    assert head.output.strip() == instance.base_commit, head.output
    await runtime.stop()
    return elapsed


def timed(argv: list[str], cwd: Path | None = None, check: bool = True, env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=check, capture_output=True, env=env)
    return time.perf_counter() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--gradings", type=int, default=3, help="per bundled task")
    args = parser.parse_args()
    instances = load_instances()
    limits = SandboxLimits()

    cold = await setup_once(instances[0], limits)  # builds the templates, checks bubblewrap
    for instance in instances[1:]:
        await setup_once(instance, limits)
    setups = [await setup_once(instances[i % len(instances)], limits) for i in range(args.episodes)]

    work = Path(tempfile.mkdtemp(prefix="swe-bench-bench-"))
    template = work / "template"
    source = FIXTURES / "tasks" / instances[0].instance_id / "repo"
    commit_tree(source, template, "base")
    clones = [
        timed(["git", "clone", "--quiet", "--no-hardlinks", str(template), str(work / f"c{i}")])
        for i in range(args.episodes)
    ]
    empty = [timed(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"]) for _ in range(args.episodes)]

    gradings, direct = [], []
    for instance in instances:
        repo = work / instance.instance_id
        runtime = SubprocessRuntime(SubprocessConfig())
        await runtime.start()
        _, sandbox = await prepare_box(runtime, instance, limits)
        for _ in range(args.gradings):
            start = time.perf_counter()
            patch = await model_patch(sandbox, instance.base_commit, timeout_s=600)
            await grade(instance, sandbox, patch, timeout_s=600, kept_log_bytes=1 << 22)
            gradings.append(time.perf_counter() - start)
        await runtime.stop()
        commit_tree(FIXTURES / "tasks" / instance.instance_id / "repo", repo, "base")
        subprocess.run(["git", "apply", "-"], input=instance.test_patch.encode(), cwd=repo, check=True)
        test_files = sorted({t.split("::")[0] for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS})
        for _ in range(args.gradings):
            # FAIL_TO_PASS fails at the base commit, so pytest exits 1 here as in the grading run.
            pytest = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *test_files]
            direct.append(timed(pytest, cwd=repo, check=False, env={**os.environ, **HOST_TEST_ENV}))
    shutil.rmtree(work, ignore_errors=True)

    setup_median = statistics.median(setups)
    print(f"episode setup, first in process   {cold * 1e3:7.1f} ms")
    met = "met" if setup_median <= 0.1 else "MISSED"
    print(f"episode setup ({args.episodes} episodes)       {ms(setups)}  target <= 100 ms: {met}")
    print(f"  reference: empty bwrap sandbox  {ms(empty)}  setup = {setup_median / statistics.median(empty):.1f}x")
    print(f"  reference: git clone of the repo {ms(clones)}  setup = {setup_median / statistics.median(clones):.1f}x")
    print(f"test run per round ({len(gradings)} gradings)   {ms(gradings)}")
    grading = statistics.median(gradings) / statistics.median(direct)
    print(f"  reference: pytest on the host   {ms(direct)}  grading = {grading:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
