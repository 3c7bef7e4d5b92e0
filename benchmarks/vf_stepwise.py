"""`vf-stepwise advantages` on a generated traces file: throughput and peak memory.

Generates a traces.jsonl of --size-mb megabytes (default 1024, eval-client traces of 1-6 turns,
~9 KB an episode, groups of 8 rollouts interleaved 64 tasks at a time) in a temporary
directory, deleted afterwards, and a small file (--small-mb) of the same kind. Then, same run:

- reference: ``vf.WireEpisode.model_validate_json`` alone over the first --reference-mb of the
  file (the cost of reading records at all, which the command cannot avoid);
- the installed ``vf-stepwise advantages FILE --gammas 0,0.4,1`` (per-turn JSONL written) on
  the small and on the large file, each in a fresh process whose peak RSS (ru_maxrss) is read.

Prints MB/s of both and their ratio, and the peak RSS of both runs with their ratio: bounded
memory means the large run's peak grows by the per-trajectory numbers held (see
``verifiers_stepwise.analysis.tracefile``), not by the file's size. Rates are per CPU second (user +
system) as well as per wall-clock second: on a shared machine the CPU rates are the ones to
compare; the small run's cost (mostly importing verifiers) is subtracted for the steady rate.

    python benchmarks/vf_stepwise.py [--size-mb 1024] [--small-mb 16] [--tokens]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verifiers_stepwise.testing.trace_files import write_large_traces

VF_STEPWISE = Path(sys.executable).with_name("vf-stepwise")

MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)
seconds = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": done.returncode, "seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime,
                  "peak_mib": usage.ru_maxrss / 1024, "stdout": done.stdout.decode()}))
"""


def measure(*args: object) -> dict:
    """Run a command in a fresh parent process: its wall and CPU time and its peak RSS."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *map(str, args)], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{args} failed with exit status {result['rc']}")
    return result


def reference_throughput(path: Path, megabytes: float) -> tuple[float, float]:
    """(wall, CPU) MB/s of WireEpisode.model_validate_json alone, on the first ``megabytes``."""
    import verifiers.v1 as vf

    limit = megabytes * 1e6
    read = 0
    start, cpu = time.perf_counter(), time.process_time()
    with path.open("rb") as f:
        for line in f:
            vf.WireEpisode.model_validate_json(line)
            read += len(line)
            if read >= limit:
                break
    return read / 1e6 / (time.perf_counter() - start), read / 1e6 / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1024)
    parser.add_argument("--small-mb", type=float, default=16)
    parser.add_argument("--reference-mb", type=float, default=32)
    parser.add_argument("--tokens", action="store_true", help="train-client traces (token ids)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, size in (("small", args.small_mb), ("large", args.size_mb)):
            path = Path(tmp) / f"{name}.jsonl"
            start = time.perf_counter()
            stats = write_large_traces(path, target_bytes=int(size * 1e6), tokens=args.tokens)
            print(
                f"generated {name}: {stats['bytes'] / 1e6:,.0f} MB, {stats['episodes']:,} episodes, "
                f"{stats['turns']:,} turns in {time.perf_counter() - start:.0f} s",
                flush=True,
            )
            result = measure(
                VF_STEPWISE,
                "advantages",
                path,
                "--gammas",
                "0,0.4,1",
                "--json",
                "-o",
                Path(tmp) / f"{name}.advantages.jsonl",
            )
            report = json.loads(result["stdout"])
            assert report["counts"]["episodes"] == stats["episodes"], report["counts"]
            runs[name] = {**stats, **result}
            (Path(tmp) / f"{name}.advantages.jsonl").unlink()
            if name == "large":
                reference = reference_throughput(path, args.reference_mb)
            path.unlink()

    small, large = runs["small"], runs["large"]
    megabytes = large["bytes"] / 1e6
    extra = (large["bytes"] - small["bytes"]) / 1e6
    print(f"\n{'MB/s':>52} {'wall':>7} {'CPU':>7}")
    print(f"{'reference, WireEpisode.model_validate_json alone':<52} {reference[0]:7.1f} {reference[1]:7.1f}")
    print(
        f"{f'vf-stepwise advantages, {megabytes:,.0f} MB, startup included':<52} "
        f"{megabytes / large['seconds']:7.1f} {megabytes / large['cpu']:7.1f}"
    )
    steady = (extra / (large["seconds"] - small["seconds"]), extra / (large["cpu"] - small["cpu"]))
    print(
        f"{'  without startup (large run - small run)':<52} {steady[0]:7.1f} {steady[1]:7.1f}"
        f"   = {steady[0] / reference[0]:.2f} / {steady[1] / reference[1]:.2f} x reference"
    )
    print(
        f"times: {large['seconds']:.0f} s wall, {large['cpu']:.0f} s CPU on the large file; "
        f"{small['seconds']:.0f} s, {small['cpu']:.0f} s on the small one"
    )
    print(
        f"peak RSS: {small['peak_mib']:.0f} MiB on {small['bytes'] / 1e6:.0f} MB, "
        f"{large['peak_mib']:.0f} MiB on {megabytes:,.0f} MB "
        f"(x{large['peak_mib'] / small['peak_mib']:.2f} for x{large['bytes'] / small['bytes']:.0f} "
        f"the bytes; {(large['peak_mib'] - small['peak_mib']) * 2**20 / (large['episodes'] - small['episodes']):.0f}"
        f" bytes per extra episode)"
    )


if __name__ == "__main__":
    main()
