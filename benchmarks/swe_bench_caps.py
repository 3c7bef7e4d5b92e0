"""What the sandbox's defenses cost: episode setup, teardown, one command and one grading copy,
in configurations interleaved in the same run (round robin), on the bundled tasks.

- ``all``: everything this process gets (as root: an ext4 volume per repository and grading
  copy, memory and cpu cgroups; otherwise the watchers), the keyring filter and fresh session
  keyring, read-only ``/`` and ``/dev``, the open-files count;
- ``all - <defense>``: the same without one defense of issue #23 (``keyring``: the seccomp
  filter and the keyring join; ``read-only``: the two remounts; ``cpu``: the cpu cgroup;
  ``open-files``: the count's guard), so ``all`` minus it is what that defense costs;
- ``none``: the code path before any cap or defense: the repository a plain directory, no
  cgroup, no guard, no filter, no remount.

    taskset -c 0 python benchmarks/swe_bench_caps.py [--episodes 20] [--commands 20]
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

from stepwise_swe_bench import box, cpu, keyring, memory, openfiles, sandbox, volume
from stepwise_swe_bench.box import prepare_box
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import remove_tree
from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime


class _NoCap:
    """The path before the caps: no cgroup to join."""

    def join(self, argv: list[str]) -> list[str]:
        return argv


async def _no_guards(self, limits) -> tuple[list, None]:
    return [], None


DEFENSES = ("keyring", "read-only", "cpu", "open-files")
CONFIGS = ("all", *(f"all - {d}" for d in DEFENSES), "none")


def _without(argv: list[str], defenses: set[str]) -> list[str]:
    """``argv`` less the options of ``defenses`` (``--seccomp FD``, the two remounts of /)."""
    out, i = [], 0
    while i < len(argv):
        if "keyring" in defenses and argv[i] == "--seccomp":
            i += 2
        elif "read-only" in defenses and argv[i] == "--remount-ro" and argv[i + 1] in ("/dev", "/"):
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


@contextlib.contextmanager
def config(name: str) -> Iterator[None]:
    """The code paths of configuration ``name`` (see the module docstring)."""
    if name == "none":
        with without(set(DEFENSES), caps=False):
            yield
    else:
        with without({name.removeprefix("all - ")} & set(DEFENSES)):
            yield


@contextlib.contextmanager
def without(off: set[str], caps: bool = True) -> Iterator[None]:
    """The code paths without the defenses ``off`` (of ``DEFENSES``) and, unless ``caps``, without
    the caps that came before them (volume, memory cgroup, watchers)."""
    command = sandbox.BwrapSandbox.command
    guards = sandbox.BwrapSandbox._guards

    @contextlib.contextmanager
    def command_without(self, *args, **kwargs):
        with command(self, *args, **kwargs) as cmd:
            yield sandbox.BwrapCommand(_without(cmd.argv, off), cmd.fds)

    async def guards_without(self, limits) -> tuple[list, int | None]:
        kept, file_bytes = await guards(self, limits)
        return [g for g in kept if not isinstance(g, openfiles.OpenFiles)], file_bytes

    with contextlib.ExitStack() as stack:
        patch = stack.enter_context
        if off & {"keyring", "read-only"}:
            patch(mock.patch.object(sandbox.BwrapSandbox, "command", command_without))
        if "keyring" in off:
            patch(mock.patch.object(keyring, "fresh_session_keyring", lambda: None))
        if "cpu" in off:
            patch(mock.patch.object(cpu, "episode_cpu", lambda *a: None))
        if "open-files" in off:
            patch(mock.patch.object(sandbox.BwrapSandbox, "_guards", guards_without))
        if not caps:
            patch(mock.patch.object(box, "make_volume", lambda *a: False))
            patch(mock.patch.object(volume, "make_volume", lambda *a: False))
            patch(mock.patch.object(memory, "episode_memory", lambda *a: _NoCap()))
            patch(mock.patch.object(sandbox.BwrapSandbox, "_guards", _no_guards))
        yield


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:7.1f} ms"


async def main(argv: list[str] | None = None) -> dict[tuple[str, str], list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--commands", type=int, default=20)
    args = parser.parse_args(argv)
    instances = load_instances()
    limits = SandboxLimits()
    timings: dict[tuple[str, str], list[float]] = {}

    def note(what: str, on: str, seconds: float) -> None:
        timings.setdefault((what, on), []).append(seconds)

    for i in range(len(CONFIGS) * (args.episodes + 1)):
        on = CONFIGS[i % len(CONFIGS)]
        warm = i >= len(CONFIGS)  # the first round of each configuration warms up
        instance = instances[i % len(instances)]
        with config(on):
            runtime = SubprocessRuntime(SubprocessConfig())
            await runtime.start()
            start = time.perf_counter()
            ref, sandbox_ = await prepare_box(runtime, instance, limits)
            head = await sandbox_.run("git rev-parse HEAD")
            setup = time.perf_counter() - start
            assert head.output.strip() == instance.base_commit, head.output
            for _ in range(args.commands if warm else 0):
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
        if warm:  # templates, bubblewrap probe, filter made
            note("episode setup (to a first command)", on, setup)
            note("episode teardown", on, teardown)
    kind = "volume + cgroups" if sandbox.os.geteuid() == 0 else "watchers"
    print(f"caps: {kind}; {args.episodes} episodes per configuration, interleaved")
    for what in dict.fromkeys(w for w, _ in timings):
        full = statistics.median(timings[(what, "all")])
        print(f"{what}: all {ms(timings[(what, 'all')])}")
        for name in CONFIGS[1:]:
            values = timings[(what, name)]
            print(f"  {name:22s} {ms(values)}   all adds {(full - statistics.median(values)) * 1e3:+6.1f} ms")
    return timings


if __name__ == "__main__":
    asyncio.run(main())
