"""How long ``import verifiers_stepwise`` and a fresh process's first estimator call take.

Each measurement runs in a fresh interpreter. The imports: ``import verifiers_stepwise``
against ``import numpy`` and ``import verifiers.v1``, with the interpreter's own start-up
measured the same way and subtracted. The first call (budget of issue #13: <= 0.5 s including
imports): in a fresh process, from its first statement to the end of one ``Stepwise.batched``
call on the budget batch of ``benchmarks/estimators.py`` (1,024 groups x 16 trajectories x 1-8
turns), wall and CPU time inside that process -- importing numpy and the package, the registry
lookup of ``get_estimator("stepwise")``, building and validating the ``RaggedBatch`` and the
call; plus the whole process's wall time, interpreter start-up included. Prints medians in
milliseconds and the load average: on a shared machine wall time includes waiting for a core,
and CPU time is the better measure.

    python benchmarks/import_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BUDGET_S = 0.5

FIRST_CALL = """
import time
start, cpu = time.perf_counter(), time.process_time()
import numpy as np
from verifiers_stepwise import RaggedBatch, get_estimator
rng = np.random.default_rng(0)
lengths = rng.integers(1, 9, 1024 * 16)
batch = RaggedBatch(rng.random(int(lengths.sum())), lengths, np.full(1024, 16))
get_estimator("stepwise", gamma=0.9).batched(batch)
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def median_ms(code: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def first_call_ms(repeats: int) -> tuple[float, float, float]:
    """Medians of a fresh process's first call: wall and CPU time inside the process, and the
    whole process's wall time."""
    inside, cpu, whole = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", FIRST_CALL], check=True, capture_output=True, text=True)
        whole.append(time.perf_counter() - start)
        wall, used = map(float, result.stdout.split())
        inside.append(wall)
        cpu.append(used)
    return tuple(statistics.median(x) * 1e3 for x in (inside, cpu, whole))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print("load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    bare = median_ms("pass", args.repeats)
    ours = median_ms("import verifiers_stepwise", args.repeats) - bare
    numpy = median_ms("import numpy", args.repeats) - bare
    verifiers = median_ms("import verifiers.v1", args.repeats) - bare
    inside, cpu, whole = first_call_ms(args.repeats)
    print(f"import verifiers_stepwise: {ours:7.1f} ms")
    print(f"import numpy:              {numpy:7.1f} ms  ({numpy / max(ours, 0.1):.0f}x ours)")
    print(f"import verifiers.v1:       {verifiers:7.1f} ms  ({verifiers / max(ours, 0.1):.0f}x ours)")
    budget = BUDGET_S * 1e3

    def verdict(ms: float) -> str:
        return "within" if ms <= budget else "OVER"

    print(
        f"first call, fresh process: {inside:7.1f} ms wall ({verdict(inside)} the {budget:.0f} ms budget), "
        f"{cpu:.1f} ms CPU ({verdict(cpu)}), imports included; {whole:.1f} ms with interpreter start-up "
        f"({bare:.1f} ms bare)"
    )


if __name__ == "__main__":
    main()
