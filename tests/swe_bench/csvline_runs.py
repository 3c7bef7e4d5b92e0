"""One real ``vf-eval`` of the bundled task stepwise__csvline-7, a scripted plan per rollout, read
back as each rollout's one graded round (``max_turns`` 1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval
from verifiers_stepwise.traces.turns import read_turns

from .conftest import need

TASK = "stepwise__csvline-7"


def graded_rounds(home: Path, plans: list, name_of: Callable[[str], str]) -> dict[str, dict]:
    """Each rollout's round (with its turn rewards) under ``name_of(the round's patch)``, in the
    default sandbox (Docker)."""
    need("docker")
    flags = [
        "stepwise-swe-bench", "-n", "1", "-r", str(len(plans)), "--env.max-turns", "1",
        "--env.taskset.instance-ids", json.dumps([TASK]),
    ]  # fmt: skip
    with ModelServer(scripted({"csvline": PerRollout(*plans)})) as server:
        run = run_vf_eval(flags, server.base_url, output_dir=home / "outputs", env={"HOME": str(home)})
    found = {}
    for episode in run.episodes:
        trace = episode.traces[0]
        assert trace.ok, trace.errors
        (round_,) = trace.info["swe_bench"]["rounds"]
        found[name_of(round_["patch"])] = {**round_, "turn_rewards": read_turns(trace).rewards}
    return found
