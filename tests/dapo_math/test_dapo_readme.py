"""The bundle README's usage block, run as a reader copies it (issue 37): against the local
model server, offline, on the bundled set; and the flags its text names that cannot load here
(a hub dataset offline, a file that is not there) stop with one line, not a traceback."""

from __future__ import annotations

import json

import pytest

from tests.docs_shell import ROOT, commands, run_block, shell_blocks

README = "environments/stepwise_dapo_math/README.md"
(BLOCK,) = shell_blocks(README, after="## Usage")[:1]


@pytest.mark.slow
def test_the_readmes_usage_block_runs_as_written(tmp_path):
    ran = run_block(BLOCK, tmp_path)
    assert [r.command.split(" #")[0].split()[-1] for r in ran] == ["8", "3"]  # standard DAPO, then refine
    assert all(r.returncode == 0 for r in ran), ran
    assert all("running on the bundled offline set" in r.stderr for r in ran)
    runs = sorted(tmp_path.glob("outputs/*/traces.jsonl"), key=lambda p: p.stat().st_mtime)
    episodes = [[json.loads(line) for line in run.read_text().splitlines()] for run in runs]
    assert [len(e) for e in episodes] == [64 * 8, 8 * 4]
    assert all(episode["ok"] for run in episodes for episode in run)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "line"),
    [
        (
            "--env.taskset.dataset aime-2024",
            "stepwise-dapo-math: cannot load the dataset 'aime-2024' (HuggingFaceH4/aime_2024) from the Hugging Face "
            "hub: offline mode (HF_HUB_OFFLINE), and it is not in the local cache. To run offline on the bundled "
            "problems instead, pass --env.taskset.dataset bundled",
        ),
        ("--env.taskset.path problems.parquet", "stepwise-dapo-math: dataset file 'problems.parquet' does not exist"),
    ],
)
def test_a_readme_flag_that_cannot_load_here_stops_with_one_line(tmp_path, flag, line):
    """Each ended in a ~40-line traceback around the one line that says what is wrong."""
    assert f"`{flag}`" in (ROOT / README).read_text()
    server, export, standard, *_, stop = commands(BLOCK)
    ran = run_block("\n".join([server, export, f"{standard.split(' #')[0]} {flag}", stop]), tmp_path)
    assert [(r.returncode, r.stderr.strip()) for r in ran] == [(1, line)]
