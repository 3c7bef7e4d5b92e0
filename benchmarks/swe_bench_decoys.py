"""What the decoy verdict costs per graded round: one grading of the gold fix with ``verdict``
(set-up call, then the test call with the plugin, every graded test twice) against the same
grading through the eval script as one call parsed by swebench (``split_eval_script`` made to
answer None), interleaved per task and repetition in one run. Goal: ratio of medians <= 1.3.

    python benchmarks/swe_bench_decoys.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from stepwise_swe_bench import grading
from stepwise_swe_bench.fixtures import base_checkout, materialize
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox


async def grade_once(instance, sandbox: BwrapSandbox, decoys: bool) -> float:
    with mock.patch.object(grading, "split_eval_script", grading.split_eval_script if decoys else lambda _: None):
        start = time.perf_counter()
        result = await grading.grade(instance, sandbox, instance.patch, timeout_s=120, kept_log_bytes=1 << 20)
        elapsed = time.perf_counter() - start
    assert result.resolved and result.tampered is None, result
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="gradings per task and mode")
    args = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="swe-decoys-bench-") as work:
        boxes = []
        for instance in load_instances():
            repo = Path(work) / instance.instance_id
            materialize(instance, repo)
            boxes.append((instance, BwrapSandbox(repo, SandboxLimits(), base=base_checkout(instance))))
        for instance, sandbox in boxes:  # warm-up: templates, bubblewrap check, page cache
            await grade_once(instance, sandbox, True)
        for repeat in range(args.repeats):
            for instance, sandbox in boxes:
                for decoys in (repeat % 2 == 0, repeat % 2 == 1):
                    times[decoys].append(await grade_once(instance, sandbox, decoys))
    before, after = statistics.median(times[False]), statistics.median(times[True])
    print(f"gradings per mode: {len(times[False])} ({len(boxes)} tasks x {args.repeats})")
    print(f"one call, swebench's parser: median {before * 1e3:.0f} ms")
    print(f"decoy verdict:               median {after * 1e3:.0f} ms")
    print(f"ratio: {after / before:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
