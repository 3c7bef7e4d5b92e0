"""The bundle README's shell block, run as a reader copies it (issue 37: its `vf-eval stepwise-sums
--env.taskset.split test` named no model, went to vf-eval's default remote one and ended in 90/90
ProviderError). Against the local model server, every command runs."""

from __future__ import annotations

import json

import pytest

from tests.docs_shell import run_block, shell_blocks


@pytest.mark.slow
def test_the_readmes_block_runs_as_written_against_the_local_server(tmp_path):
    (block,) = shell_blocks("environments/stepwise_sums/README.md")[:1]
    ran = run_block(block, tmp_path)
    assert len(ran) == 2 and all(r.returncode == 0 for r in ran), ran
    runs = sorted(tmp_path.glob("outputs/*/traces.jsonl"), key=lambda p: p.stat().st_mtime)
    episodes = [[json.loads(line) for line in run.read_text().splitlines()] for run in runs]
    assert [len(e) for e in episodes] == [8 * 4, 90]  # the second: every held-out sum, once
    assert all(episode["ok"] for run in episodes for episode in run)
