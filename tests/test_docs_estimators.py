"""docs/estimators.md: its Python examples run (their asserts are the claims) and its benchmark
table is exactly what benchmarks/credit_table.py makes of the committed results."""

from __future__ import annotations

import json
from pathlib import Path

import credit_table

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "estimators.md").read_text()


def test_python_examples_run():
    blocks = [part.split("```", 1)[0] for part in DOC.split("```python\n")[1:]]
    assert len(blocks) >= 3
    for block in blocks:
        exec(compile(block, "docs/estimators.md", "exec"), {})


def test_benchmark_tables_are_the_committed_runs():
    for run in ("credit", "gigpo"):
        results = json.loads((ROOT / "benchmarks" / "results" / run / "results.json").read_text())
        assert credit_table.table(results) in DOC, run
