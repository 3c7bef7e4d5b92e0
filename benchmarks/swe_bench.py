"""What an episode of ``stepwise-swe-bench`` costs in each sandbox, Docker and bubblewrap
interleaved round robin in one run, on the bundled tasks:

- setup: what task setup does (``box.prepare_box``: the repository at its base commit in its
  sandbox) until a first command (``git rev-parse HEAD``) has answered, and the episode removed;
- a command: one ``bash`` call (``true``) in a prepared episode;
- a graded round: the model's diff read (``model_patch``) and graded (``grade``: a fresh copy,
  the diff applied and checked, the hidden tests run with the decoy verdict), the gold fix.

Each task and engine has an episode of its own; every repeat visits them all, in reverse order
on odd repeats. A shared machine's load moves every figure: the line printed first says it.

    python benchmarks/swe_bench.py [--repeats 5] [--engines docker bwrap]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import types
from pathlib import Path

from stepwise_swe_bench import grading
from stepwise_swe_bench.box import close_box, prepare_box
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits

MEASURES = ("setup", "command", "round")


async def episode(instance, engine: str, workdir: Path):
    runtime = types.SimpleNamespace(type="subprocess", info=types.SimpleNamespace(id=str(workdir)))
    return await prepare_box(runtime, instance, SandboxLimits(engine=engine))  # type: ignore[arg-type]


async def setup(instance, engine: str, workdir: Path) -> float:
    workdir.mkdir()
    start = time.perf_counter()
    ref, sandbox = await episode(instance, engine, workdir)
    head = await sandbox.run("git rev-parse HEAD")
    elapsed = time.perf_counter() - start
    assert head.output.strip() == instance.base_commit, head.output
    await close_box(ref)
    return elapsed


async def graded_round(instance, sandbox) -> float:
    start = time.perf_counter()
    patch = await grading.model_patch(sandbox, instance.base_commit, timeout_s=120)
    result = await grading.grade(instance, sandbox, patch, timeout_s=120, kept_log_bytes=1 << 20)
    elapsed = time.perf_counter() - start
    assert result.resolved and result.tampered is None and result.test_exit_code == 1, result
    return elapsed


async def command(sandbox) -> float:
    start = time.perf_counter()
    done = await sandbox.run("true")
    assert done.exit_code == 0, done.output
    return time.perf_counter() - start


async def main(argv: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="visits of each task and engine")
    parser.add_argument("--engines", nargs="+", default=["docker", "bwrap"], choices=["docker", "bwrap"])
    args = parser.parse_args(argv)
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    times = {engine: {measure: [] for measure in MEASURES} for engine in args.engines}
    with tempfile.TemporaryDirectory(prefix="swe-bench-") as work:
        boxes = []
        for instance in load_instances():
            for engine in args.engines:
                workdir = Path(work) / engine / instance.instance_id
                workdir.mkdir(parents=True)
                ref, sandbox = await episode(instance, engine, workdir)
                applied = await sandbox.run("git apply -", stdin=instance.patch.encode())
                assert applied.exit_code == 0, applied.output
                boxes.append((instance, engine, ref, sandbox))
        for instance, _, _, sandbox in boxes:  # warm-up: templates, images, page cache
            await graded_round(instance, sandbox)
        for repeat in range(args.repeats):
            for n, (instance, engine, _, sandbox) in enumerate(boxes if repeat % 2 == 0 else boxes[::-1]):
                scratch = Path(work) / f"setup-{repeat}-{n}"
                times[engine]["setup"].append(await setup(instance, engine, scratch))
                times[engine]["command"].append(await command(sandbox))
                times[engine]["round"].append(await graded_round(instance, sandbox))
        for _, _, ref, _ in boxes:
            await close_box(ref)
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    tasks = len(boxes) // len(args.engines)
    print(f"per engine and measure: {tasks * args.repeats} ({tasks} tasks x {args.repeats})")
    base = args.engines[-1]
    for measure in MEASURES:
        line = []
        for engine in args.engines:
            median = statistics.median(times[engine][measure])
            ratio = median / statistics.median(times[base][measure])
            line.append(f"{engine} {median * 1e3:7.0f} ms ({ratio:.2f}x {base})")
        print(f"{measure:8s} median  " + "   ".join(line))
    return times


if __name__ == "__main__":
    asyncio.run(main())
