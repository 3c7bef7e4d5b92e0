"""What the per-episode caps (``stepwise_swe_bench.volume``, ``.memory``) cost: episode setup,
teardown, one command and one grading copy, with the caps and without them, interleaved in the
same run (odd rounds without, even rounds with), on the bundled tasks.

"Without" is the code path before the caps: the repository a plain directory, no cgroup, no
guard on the commands. "With" is what this process gets (as root: an ext4 volume per repository
and grading copy, a memory cgroup; otherwise the watchers).

    python benchmarks/swe_bench_caps.py [--episodes 20] [--commands 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from stepwise_swe_bench import box, memory, sandbox, volume
from stepwise_swe_bench.box import prepare_box
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import remove_tree
from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime


class _NoCap:
    """The path before the caps: no cgroup to join."""

    def join(self, argv: list[str]) -> list[str]:
        return argv


async def _no_guards(self, limits) -> list:
    return []


@contextlib.contextmanager
def caps(on: bool) -> Iterator[None]:
    if on:
        yield
        return
    with (
        mock.patch.object(box, "make_volume", lambda *a: False),
        mock.patch.object(volume, "make_volume", lambda *a: False),
        mock.patch.object(memory, "episode_memory", lambda *a: _NoCap()),
        mock.patch.object(sandbox.BwrapSandbox, "_guards", _no_guards),
    ):
        yield


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:7.1f} ms"


async def main(argv: list[str] | None = None) -> dict[tuple[str, bool], list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--commands", type=int, default=20)
    args = parser.parse_args(argv)
    instances = load_instances()
    limits = SandboxLimits()
    timings: dict[tuple[str, bool], list[float]] = {}

    def note(what: str, on: bool, seconds: float) -> None:
        timings.setdefault((what, on), []).append(seconds)

    for i in range(2 * args.episodes + 2):
        on = i % 2 == 0
        instance = instances[i % len(instances)]
        with caps(on):
            runtime = SubprocessRuntime(SubprocessConfig())
            await runtime.start()
            start = time.perf_counter()
            ref, sandbox_ = await prepare_box(runtime, instance, limits)
            head = await sandbox_.run("git rev-parse HEAD")
            setup = time.perf_counter() - start
            assert head.output.strip() == instance.base_commit, head.output
            for _ in range(args.commands if i >= 2 else 0):
                start = time.perf_counter()
                await sandbox_.run("true")
                note("command", on, time.perf_counter() - start)
            start = time.perf_counter()
            async with sandbox_.pristine() as clean:  # type: ignore[attr-defined]
                await clean.run("true")
            note("grading copy + 1 command + removal", on, time.perf_counter() - start)
            start = time.perf_counter()
            await asyncio.to_thread(remove_tree, Path(ref.repo))
            teardown = time.perf_counter() - start
            await runtime.stop()
        if i >= 2:  # the first pair warms up (templates, bubblewrap probe)
            note("episode setup (to a first command)", on, setup)
            note("episode teardown", on, teardown)
    kind = "volume + cgroup" if sandbox.os.geteuid() == 0 else "watchers"
    print(f"caps: {kind}; {args.episodes} episodes each way, interleaved")
    for what in dict.fromkeys(w for w, _ in timings):
        off, on_ = timings[(what, False)], timings[(what, True)]
        added = statistics.median(on_) - statistics.median(off)
        print(f"{what:38s} without {ms(off)}   with {ms(on_)}   added {added * 1e3:+6.1f} ms")
    return timings


if __name__ == "__main__":
    asyncio.run(main())
