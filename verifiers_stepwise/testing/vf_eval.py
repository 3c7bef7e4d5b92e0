"""Run the real ``vf-eval`` command against a local model server and read its traces back.

    result = run_vf_eval(["stepwise-refine", "-n", "2"], server.base_url, output_dir=tmp_path)
    result.episodes        # list[vf.WireEpisode], parsed from <output_dir>/<run>/traces.jsonl

The command runs as a subprocess of the current interpreter's environment, offline
(``HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1``), with ``--no-push --no-rich`` and the client
pointed at ``base_url`` under a throwaway API-key variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf

__all__ = ["VfEvalRun", "run_vf_eval"]

API_KEY_VAR = "STEPWISE_LOCAL_API_KEY"


@dataclass(frozen=True)
class VfEvalRun:
    process: subprocess.CompletedProcess
    run_dir: Path
    episodes: list[vf.WireEpisode]


def run_vf_eval(
    args: Sequence[str],
    base_url: str,
    *,
    output_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> VfEvalRun:
    """Run ``vf-eval *args`` to completion; raise with its output if it fails or writes no run."""
    command = [
        str(Path(sys.executable).with_name("vf-eval")),
        *args,
        "-m",
        "local-model",
        "--client.base-url",
        base_url,
        "--client.api-key-var",
        API_KEY_VAR,
        "--no-push",
        "--no-rich",
        "-o",
        str(output_dir),
    ]
    variables = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        API_KEY_VAR: "sk-local",
        **(env or {}),
    }
    process = subprocess.run(command, env=variables, capture_output=True, text=True, timeout=timeout)
    runs = sorted(output_dir.glob("*/traces.jsonl"), key=lambda p: p.stat().st_mtime)
    if process.returncode != 0 or not runs:
        raise RuntimeError(
            f"{' '.join(command)} exited {process.returncode}\n"
            f"--- stdout ---\n{process.stdout[-4000:]}\n--- stderr ---\n{process.stderr[-4000:]}"
        )
    traces = runs[-1]
    episodes = [vf.WireEpisode.model_validate_json(line) for line in traces.read_text().splitlines() if line]
    return VfEvalRun(process, traces.parent, episodes)
