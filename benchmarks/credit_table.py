"""The benchmark table of docs/estimators.md, from a learning-benchmark run's results.json.

    python benchmarks/credit_table.py benchmarks/results/credit/results.json

One row per method, one column per task: median episodes to the target as a multiple of the
first method's (``grpo``), seeds that reached it, and the mean final success rate.
``tests/test_docs_estimators.py`` checks that the docs hold exactly this table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(row: dict, reference: dict) -> str:
    final = sum(row["final_success"]) / len(row["final_success"])
    reached = f"{row['reached']}/{row['seeds']}"
    if row["median_episodes"] is None:
        return f"never ({reached}), {final:.3f}"
    ratio = row["median_episodes"] / reference["median_episodes"] if reference["median_episodes"] else float("nan")
    return f"{ratio:.2f}× ({reached}), {final:.3f}"


def table(results: dict) -> str:
    tasks = results["tasks"]
    names = list(tasks)
    methods = [row["method"] for row in tasks[names[0]]["rows"]]
    lines = [
        "| method | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for k, method in enumerate(methods):
        cells = [cell(tasks[name]["rows"][k], tasks[name]["rows"][0]) for name in names]
        lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text())))
