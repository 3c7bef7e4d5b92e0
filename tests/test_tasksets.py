"""vf-eval's ``-n`` asking for more tasks than a bundle's taskset holds says so (``CountedTake``)."""

from __future__ import annotations

import warnings

import pytest
import verifiers.v1 as vf

from verifiers_stepwise.testing.server import ModelServer, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval


def tasks_taken(config: dict, n: int) -> tuple[int, list[str]]:
    taskset = vf.load_environment(vf.resolve_env_config(config)).taskset
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count = sum(1 for _ in taskset.take(n))
    return count, [str(w.message) for w in caught]


@pytest.mark.parametrize(
    "config, held",
    [
        ({"taskset": {"id": "stepwise-sums", "split": "test"}}, 90),
        ({"taskset": {"id": "stepwise-refine"}}, 8),
    ],
)
def test_a_short_taskset_warns_and_a_full_one_does_not(config, held):
    name = config["taskset"]["id"]
    assert tasks_taken(config, held + 1) == (
        held,
        [f"-n {held + 1}: taskset {name!r} has only {held} problems after the selection, so {held} are run"],
    )
    assert tasks_taken(config, held) == (held, [])
    assert tasks_taken(config, 2) == (2, [])


@pytest.mark.slow
def test_vf_eval_says_when_n_is_more_than_the_tasks(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPWISE_TEST_API_KEY", "sk-local")
    with ModelServer(scripted({"": ["1"]})) as server:
        run = run_vf_eval(["stepwise-refine", "-n", "64", "-r", "1"], server.base_url, output_dir=tmp_path,
                          env={"HOME": str(tmp_path)})  # fmt: skip
    assert len(run.episodes) == 8
    said = "-n 64: taskset 'stepwise-refine' has only 8 problems after the selection, so 8 are run"
    assert said in run.process.stderr
