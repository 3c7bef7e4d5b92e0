"""Rollout setup of ``stepwise-swe-bench`` as ``vf-eval`` measures it, against ``stepwise-refine``.

Runs the real ``vf-eval`` (a subprocess, as a user runs it) against the scripted local model
server, at ``-c 1`` and ``-c 4``, and reads every rollout's ``timing.setup`` from the traces: the
span verifiers times from the started runtime to the harness session being open: task setup (the
repository at its base commit and the sandbox over it), harness setup, the interception slot and
the rollout's tool servers. Target: median and p90 <= 0.5 s at both concurrencies.

Reference, same run and same flags: ``stepwise-refine``, whose rollouts have no tools and no
repository, so its setup is what verifiers itself spends on a rollout. Also reported: the task
setup's own part of ``timing.setup`` (the repository and its sandbox,
``trace.info["swe_bench"]["setup_s"]``), and what else a rollout waits for: the wait until its
first model call (setup, then the harness opening its HTTP client and, for SWE, connecting to the
tool server and listing its tools), the eval's start, from launching ``vf-eval`` to the first
rollout's setup (the process start, loading the env and what it serves once per eval, such as
taskset-scoped tool servers), and the wall time.

Every SWE rollout makes one ``bash`` call (``git rev-parse HEAD``, checked against the base
commit, so the tool server is proven to answer), then ends its one round, which is graded.

    python benchmarks/swe_setup.py [--rollouts 8] [--concurrency 1 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verifiers_stepwise.testing.server import ChatCall, ModelServer, Reply, ToolCallReply
from verifiers_stepwise.testing.vf_eval import run_vf_eval

TARGET_S = 0.5
ENVS = ("stepwise-swe-bench", "stepwise-refine")


def reply(call: ChatCall) -> Reply | str:
    """The SWE model's first call asks for the commit; every other call answers in text."""
    if call.index == 0 and "/testbed" in call.prompt:
        return Reply(tool_calls=[ToolCallReply("bash", {"command": "git rev-parse HEAD"})])
    return "Done."


@dataclass(frozen=True)
class Run:
    env: str
    concurrency: int
    setups: list[float]
    """Each rollout's ``timing.setup`` in seconds."""
    first_calls: list[float]
    """Each rollout's wait from the start of its setup to its first model call, in seconds."""
    task_setups: list[float]
    """SWE: each rollout's task setup (repository and sandbox), part of ``setups``; else empty."""
    start_s: float
    """From launching vf-eval to the first rollout's setup."""
    wall_s: float


def run(env: str, rollouts: int, concurrency: int, base_url: str, out: Path) -> Run:
    tasks = min(rollouts, 5)  # five bundled SWE tasks; rollouts spread over them
    flags = [env, "-n", str(tasks), "-r", str(-(-rollouts // tasks)), "-c", str(concurrency), "--env.max-turns", "1"]
    launched = time.time()
    result = run_vf_eval(flags, base_url, output_dir=out / f"{env}-c{concurrency}", timeout=1800)
    wall = time.time() - launched
    traces = [episode.traces[0] for episode in result.episodes]
    failed = [t.errors for t in traces if not t.ok]
    if failed:
        raise RuntimeError(f"{env}: {len(failed)} rollouts failed: {failed[0]}")
    if env == "stepwise-swe-bench":
        check_tool_answered(traces)
    first = min(t.timing.setup.start for t in traces)
    setups = [t.timing.setup.duration for t in traces]
    first_calls = [t.calls[0].time.start - t.timing.setup.start for t in traces]
    task_setups = [t.info["swe_bench"]["setup_s"] for t in traces] if env == "stepwise-swe-bench" else []
    return Run(env, concurrency, setups, first_calls, task_setups, first - launched, wall)


def check_tool_answered(traces: Sequence) -> None:
    for trace in traces:
        (call, *_) = trace.info["swe_bench"]["tool_calls"]
        commit = trace.task.data.model_extra["instance"]["base_commit"]  # the wire form: plain data
        if call.get("exit_code") != 0 or call.get("output", "").strip() != commit:
            raise RuntimeError(f"the bash tool did not answer with the base commit: {call}")


def p90(values: Sequence[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def spread(values: Sequence[float]) -> str:
    return f"median {statistics.median(values) * 1e3:7.1f} ms  p90 {p90(values) * 1e3:7.1f} ms"


def report(runs: Sequence[Run]) -> list[str]:
    lines = []
    for concurrency in sorted({r.concurrency for r in runs}):
        swe, ref = (next(r for r in runs if r.env == env and r.concurrency == concurrency) for env in ENVS)
        met = "met" if max(statistics.median(swe.setups), p90(swe.setups)) <= TARGET_S else "MISSED"
        extra = (statistics.median(swe.setups) - statistics.median(ref.setups)) * 1e3
        ratio = statistics.median(swe.setups) / statistics.median(ref.setups)
        lines += [
            f"-c {concurrency}: {len(swe.setups)} rollouts each",
            f"  timing.setup        swe-bench {spread(swe.setups)}  target <= {TARGET_S * 1e3:.0f} ms: {met}",
            f"    of it task setup            {spread(swe.task_setups)}  (repository and sandbox)",
            f"    reference: refine           {spread(ref.setups)}  swe-bench = {ratio:.0f}x (+{extra:.0f} ms)",
            f"  until 1st model call swe-bench {spread(swe.first_calls)}",
            f"    reference: refine           {spread(ref.first_calls)}",
            f"  eval start          swe-bench {swe.start_s:5.1f} s  refine {ref.start_s:5.1f} s"
            f"  (+{swe.start_s - ref.start_s:.1f} s, once per eval)",
            f"  wall                swe-bench {swe.wall_s:5.1f} s  refine {ref.wall_s:5.1f} s",
        ]
    return lines


def main(argv: Sequence[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=8, help="per env and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--json", type=Path, help="also write every rollout's setup here")
    args = parser.parse_args(argv)
    runs = []
    with ModelServer(reply) as server, tempfile.TemporaryDirectory(prefix="swe-setup-") as out:
        for concurrency in args.concurrency:
            for env in ENVS:
                runs.append(run(env, args.rollouts, concurrency, server.base_url, Path(out)))
    print("\n".join(report(runs)))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in runs], indent=1))
    return runs


if __name__ == "__main__":
    main()
