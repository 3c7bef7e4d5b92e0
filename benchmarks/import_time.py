"""How long ``import verifiers_stepwise`` takes, against ``import numpy`` in the same run.

Each import runs in a fresh interpreter; the interpreter's own start-up is measured the same
way and subtracted. Prints medians in milliseconds.

    python benchmarks/import_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_ms(code: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    bare = median_ms("pass", args.repeats)
    ours = median_ms("import verifiers_stepwise", args.repeats) - bare
    numpy = median_ms("import numpy", args.repeats) - bare
    verifiers = median_ms("import verifiers.v1", args.repeats) - bare
    print(f"import verifiers_stepwise: {ours:7.1f} ms")
    print(f"import numpy:              {numpy:7.1f} ms  ({numpy / max(ours, 0.1):.0f}x ours)")
    print(f"import verifiers.v1:       {verifiers:7.1f} ms  ({verifiers / max(ours, 0.1):.0f}x ours)")


if __name__ == "__main__":
    main()
