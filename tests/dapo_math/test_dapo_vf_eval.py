"""End to end: the real ``vf-eval stepwise-dapo-math`` (a subprocess) against the local model
server, offline, on the bundled data; then the stepwise estimator on the traces it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import verifiers.v1 as vf
from stepwise_dapo_math.loaders import BUNDLED_PATH

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval

ROWS = [json.loads(line) for line in BUNDLED_PATH.read_text().splitlines()[:2]]
FIRST, SECOND = ((r["extra_info"]["problem"], r["reward_model"]["ground_truth"]) for r in ROWS)
FIRST_ID, SECOND_ID = (r["extra_info"]["index"] for r in ROWS)


def vf_eval(server: ModelServer, out: Path, *flags: str) -> list[vf.WireEpisode]:
    """vf-eval with the default dataset, the hub offline (so: the bundled set)."""
    run = run_vf_eval(
        ["stepwise-dapo-math", "-n", "2", "-r", "2", *flags],
        server.base_url,
        output_dir=out / "outputs",
        env={"HOME": str(out)},  # the subprocess runtime's work dirs land here
    )
    assert "running on the bundled offline set" in run.process.stderr + run.process.stdout
    return run.episodes


def groups(episodes: list[vf.WireEpisode]) -> dict[str, list[vf.WireEpisode]]:
    by_task: dict[str, list[vf.WireEpisode]] = {}
    for episode in episodes:
        by_task.setdefault(episode.task.key, []).append(episode)
    return by_task


@pytest.fixture(scope="module")
def server():
    plan = {
        # one rollout of the first problem is right at once, the other on its second turn
        FIRST[0]: PerRollout([f"Answer: {FIRST[1]}"], ["Answer: 0", f"Answer: {FIRST[1]}"]),
        SECOND[0]: ["Answer: 0", "Still thinking.", f"So $\\boxed{{{SECOND[1]}}}$"],
    }
    with ModelServer(scripted(plan)) as server:
        yield server


def test_single_turn_vf_eval_is_standard_dapo(server, tmp_path):
    episodes = vf_eval(server, tmp_path, "--env.taskset.task.math-verify.timeout-s", "3")
    assert len(episodes) == 4 and all(e.ok for e in episodes)
    for episode in episodes:
        (trace,) = episode.traces
        assert trace.num_turns == 1
        assert trace.info["turn_rewards"] == [trace.rewards["correct"].score] == [trace.reward]
    by_task = groups(episodes)
    assert sorted(e.traces[0].reward for e in by_task[FIRST_ID]) == [-1.0, 1.0]
    assert [e.traces[0].reward for e in by_task[SECOND_ID]] == [-1.0, -1.0]
    for group in by_task.values():
        assert score_group(group, "stepwise") == score_group(group, "grpo")


def test_multi_turn_vf_eval_records_a_reward_per_turn(server, tmp_path):
    episodes = vf_eval(server, tmp_path, "--env.max-turns", "3", "--env.wrong-message", "Nope.")
    by_task = groups(episodes)
    first, second = by_task[FIRST_ID], by_task[SECOND_ID]
    assert sorted(e.traces[0].info["turn_rewards"] for e in first) == [[-1.0, 1.0], [1.0]]
    for episode in second:
        (trace,) = episode.traces
        assert trace.info["turn_rewards"] == [-1.0, -1.0, 1.0]
        assert trace.info["turn_nodes"] == [[1], [3], [5]]
        assert trace.rewards["correct"].score == 1.0
        feedback = [n.message.content for n in trace.nodes if n.message.role == "user"][1:]
        assert feedback[0] == "Nope."
    advantages = {len(a): a for a in score_group(first, "stepwise")}
    assert advantages[1] == pytest.approx([0.7071], abs=1e-4)
    assert advantages[2] == pytest.approx([-1.4142, 0.7071], abs=1e-4)
    # identical rollouts: equal credit; the per-turn-index baseline leaves nothing to credit
    pooled = score_group(second, "stepwise")
    assert pooled[0] == pooled[1]
    assert score_group(second, get_estimator("stepwise", baseline="per_turn")) == [[0.0] * 3] * 2
    for episode in first:
        assert episode.traces[0].info["turn_credit"]
