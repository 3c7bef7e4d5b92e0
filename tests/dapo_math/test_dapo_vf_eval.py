"""End to end: the real ``vf-eval stepwise-dapo-math`` (a subprocess) against the local model
server, offline, on the bundled data; then the stepwise estimator on the traces it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf

from stepwise_dapo_math.loaders import BUNDLED_PATH
from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.server import ModelServer, scripted

KEY_VAR = "STEPWISE_DAPO_E2E_KEY"
ROWS = [json.loads(line) for line in BUNDLED_PATH.read_text().splitlines()[:2]]
FIRST, SECOND = ((r["extra_info"]["problem"], r["reward_model"]["ground_truth"]) for r in ROWS)
VF_EVAL = Path(sys.executable).with_name("vf-eval")


def vf_eval(server: ModelServer, out: Path, *flags: str) -> list[vf.WireEpisode]:
    """Run vf-eval with the default dataset and the hub offline (so: the bundled set)."""
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        KEY_VAR: "sk-local",
        "HOME": str(out),  # the subprocess runtime's work dirs land here
    }
    command = [
        str(VF_EVAL), "stepwise-dapo-math", "-m", "local-model", "-n", "2", "-r", "2",
        "--client.base-url", server.base_url, "--client.api-key-var", KEY_VAR,
        "--no-push", "--no-rich", "-o", str(out / "outputs"), *flags,
    ]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "using the bundled offline set" in done.stderr + done.stdout
    (traces,) = (out / "outputs").glob("*/traces.jsonl")
    return [vf.WireEpisode.model_validate_json(line) for line in traces.read_text().splitlines()]


def groups(episodes: list[vf.WireEpisode]) -> list[list[vf.WireEpisode]]:
    by_task: dict[str, list[vf.WireEpisode]] = {}
    for episode in episodes:
        by_task.setdefault(episode.task.key, []).append(episode)
    return list(by_task.values())


@pytest.fixture(scope="module")
def server():
    alternate = iter(range(10**6))
    plan = {
        # rollouts of the first problem alternate between right and wrong at first
        FIRST[0]: [lambda call: f"Answer: {FIRST[1] if next(alternate) % 2 else 0}", f"Answer: {FIRST[1]}"],
        SECOND[0]: ["Answer: 0", "Still thinking.", f"So $\\boxed{{{SECOND[1]}}}$"],
    }
    with ModelServer(scripted(plan)) as server:
        yield server


def test_single_turn_vf_eval_is_standard_dapo(server, tmp_path):
    episodes = vf_eval(server, tmp_path, "--env.taskset.task.math-verify.timeout-s", "3")
    assert len(episodes) == 4 and all(e.ok for e in episodes)
    rewards = {}
    for episode in episodes:
        (trace,) = episode.traces
        assert trace.num_turns == 1
        assert trace.info["turn_rewards"] == [trace.rewards["correct"].score]
        rewards.setdefault(episode.task.key, []).append(trace.reward)
    first, second = (ROWS[0]["extra_info"]["index"], ROWS[1]["extra_info"]["index"])
    assert sorted(rewards[first]) == [-1.0, 1.0] and rewards[second] == [-1.0, -1.0]
    for group in groups(episodes):
        assert score_group(group, "stepwise") == score_group(group, "grpo")


def test_multi_turn_vf_eval_records_a_reward_per_turn(server, tmp_path):
    episodes = vf_eval(server, tmp_path, "--env.max-turns", "3", "--env.wrong-message", "Nope.")
    by_task = {group[0].task.key: group for group in groups(episodes)}
    first = by_task[ROWS[0]["extra_info"]["index"]]
    second = by_task[ROWS[1]["extra_info"]["index"]]
    assert sorted(e.traces[0].info["turn_rewards"] for e in first) == [[-1.0, 1.0], [1.0]]
    for episode in second:
        (trace,) = episode.traces
        assert trace.info["turn_rewards"] == [-1.0, -1.0, 1.0]
        assert trace.info["turn_nodes"] == [[1], [3], [5]]
        feedback = [n.message.content for n in trace.nodes if n.message.role == "user"][1:]
        assert feedback[0] == "Nope."
        assert trace.rewards["correct"].score == 1.0
    advantages = {len(a): a for a in score_group(first, "stepwise")}
    assert advantages[1] == pytest.approx([0.7071], abs=1e-4)
    assert advantages[2] == pytest.approx([-1.4142, 0.7071], abs=1e-4)
    # identical rollouts: equal credit; the per-turn-index baseline leaves nothing to credit
    pooled = score_group(second, "stepwise")
    assert pooled[0] == pooled[1]
    assert score_group(second, get_estimator("stepwise", baseline="per_turn")) == [[0.0] * 3] * 2
    for episode in first:
        assert episode.traces[0].info["turn_credit"]
