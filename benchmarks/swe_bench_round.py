"""What issue #23's defenses cost a graded round: the model's diff read (``model_patch``) and
graded (``grade``), the gold fix of each bundled task, in three modes interleaved round robin in
one run, each task and mode with a repository and sandbox of its own made in that mode:

- ``before``: the code path before #23: the eval script as one call parsed by swebench
  (``split_eval_script`` made to answer None) and none of #23's sandbox defenses (the keyring
  filter and join, the read-only remounts, the cpu cgroup, the open-files count:
  ``swe_bench_caps.without``); the caps that came before (volume, memory cgroup) stay;
- ``sandbox``: #23's sandbox defenses on, still graded as one call;
- ``now``: everything: the decoy verdict (set-up call, then the test call with the grader's
  plugin, every graded test twice) in the defended sandbox.

Goal: ``now`` / ``before`` <= 1.3 (ratio of medians).

    python benchmarks/swe_bench_round.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from stepwise_swe_bench import grading
from stepwise_swe_bench.fixtures import base_checkout, materialize
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox, remove_tree
from swe_bench_caps import DEFENSES, without

MODES = ("before", "sandbox", "now")


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """The code paths of ``name`` (see the module docstring)."""
    with without(set(DEFENSES) if name == "before" else set()), contextlib.ExitStack() as stack:
        if name != "now":
            stack.enter_context(mock.patch.object(grading, "split_eval_script", lambda _: None))
        yield


async def graded_round(instance, sandbox: BwrapSandbox, name: str) -> float:
    with mode(name):
        start = time.perf_counter()
        patch = await grading.model_patch(sandbox, instance.base_commit, timeout_s=120)
        result = await grading.grade(instance, sandbox, patch, timeout_s=120, kept_log_bytes=1 << 20)
        elapsed = time.perf_counter() - start
    assert result.resolved and result.tampered is None, result
    assert (result.test_exit_code == 1) == (name == "now"), result  # the decoys fail
    return elapsed


async def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds per task and mode")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in MODES}
    with tempfile.TemporaryDirectory(prefix="swe-round-bench-") as work:
        boxes = []
        for instance in load_instances():
            for name in MODES:
                repo = Path(work) / name / instance.instance_id
                repo.parent.mkdir(exist_ok=True)
                materialize(instance, repo)
                with mode(name):
                    sandbox = BwrapSandbox(repo, SandboxLimits(), base=base_checkout(instance))
                    applied = await sandbox.run("git apply -", stdin=instance.patch.encode())
                assert applied.exit_code == 0, applied.output
                boxes.append((instance, sandbox, name))
        for instance, sandbox, name in boxes:  # warm-up: templates, bubblewrap check, page cache
            await graded_round(instance, sandbox, name)
        for repeat in range(args.repeats):
            order = boxes if repeat % 2 == 0 else boxes[::-1]
            for instance, sandbox, name in order:
                times[name].append(await graded_round(instance, sandbox, name))
        for _, sandbox, _ in boxes:
            remove_tree(sandbox.repo)
    before = statistics.median(times["before"])
    print(f"rounds per mode: {len(times['before'])} ({len(boxes) // len(MODES)} tasks x {args.repeats})")
    for name in MODES:
        median = statistics.median(times[name])
        print(f"{name:8s} median {median * 1e3:6.0f} ms  ({median / before:.2f}x before)")
    return times


if __name__ == "__main__":
    asyncio.run(main())
