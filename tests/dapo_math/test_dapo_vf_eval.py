"""End to end: the real ``vf-eval stepwise-dapo-math`` (a subprocess) against the local model
server, offline, on the bundled data; then the stepwise estimator on the traces it wrote."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf
from stepwise_dapo_math.loaders import BUNDLED_PATH

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.testing.tokenizer import qwen3_byte_tokenizer
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


@pytest.mark.slow
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
        # one turn: the default stepwise (mean-only) is mean-only grpo (Dr. GRPO), bit for bit
        assert [c.advantages for c in score_group(group, "stepwise").values()] == [
            c.advantages for c in score_group(group, get_estimator("grpo", scale="none")).values()
        ]


@pytest.mark.slow
def test_vf_eval_falls_back_at_once_when_the_hub_does_not_answer(server, tmp_path):
    """Issue 37: not told to be offline, ``vf-eval`` spent 23 s in huggingface_hub's retries (five,
    1 to 8 s apart) before the fallback warning. One probe of the hub decides now: a hub that
    does not answer is read from the cache only, and the run falls back without a retry."""
    with socket.socket() as probe:  # a port nothing listens on once the socket closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hub = {"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{port}"}
    run = run_vf_eval(
        ["stepwise-dapo-math", "-n", "1", "-r", "1"],
        server.base_url,
        output_dir=tmp_path / "outputs",
        env={"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), **hub},
    )
    printed = run.process.stderr + run.process.stdout
    assert f"http://127.0.0.1:{port} did not answer within 3 s" in printed
    assert "running on the bundled offline set" in printed
    assert "Retrying" not in printed and len(run.episodes) == 1


@pytest.mark.slow
def test_vf_eval_says_when_the_file_has_fewer_problems_than_n(server, tmp_path):
    path = tmp_path / "three.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"p{n}", "problem": f"{n} + {n}?", "answer": 2 * n}) + "\n" for n in range(3))
    )
    run = run_vf_eval(
        ["stepwise-dapo-math", "--env.taskset.path", str(path), "-n", "64", "-r", "2"],
        server.base_url,
        output_dir=tmp_path / "outputs",
        env={"HOME": str(tmp_path)},
    )
    assert len(run.episodes) == 6
    assert f"-n 64: {path} has only 3 problems after the selection, so 3 are run" in run.process.stderr


@pytest.mark.slow
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
    # the default (absorbing baseline, γ 1, mean-only): turn 0 is [1] against [-1 + 1]; at turn 1
    # the stopped rollout counts as 0 against the late right answer
    advantages = {len(a): a for a in [c.advantages for c in score_group(first, "stepwise").values()]}
    assert advantages[1] == pytest.approx([0.5])
    assert advantages[2] == pytest.approx([-0.5, 0.5])
    kevin = get_estimator("stepwise", gamma=0.4, baseline="pooled", scale="std")
    pooled = {len(a): a for a in [c.advantages for c in score_group(first, kevin).values()]}
    assert pooled[2] == pytest.approx([-1.4142, 0.7071], abs=1e-4)
    # identical rollouts: nothing to credit under the default; Kevin's pooled credits positions
    assert [c.advantages for c in score_group(second, "stepwise").values()] == [[0.0] * 3] * 2
    identical = [c.advantages for c in score_group(second, kevin).values()]
    assert identical[0] == identical[1] and identical[0][0] != 0.0
    records = score_group(first, "stepwise")  # one record per trace (score_group writes nothing on them)
    assert set(records) == {episode.traces[0].id for episode in first}


@pytest.mark.slow
def test_refine_run_then_vf_stepwise_gives_no_wrong_attempt_of_a_failed_rollout_positive_credit(tmp_path):
    """Issue #16's Done-when: ``vf-eval stepwise-dapo-math --env.max-turns 3`` (rewards ±1), then
    the ``vf-stepwise advantages`` console script with its shipped defaults. One rollout is right
    at once, four are wrong three times; Kevin's pooled baseline pushes their last wrong attempt
    up (+0.215), the default gives every one of their turns a negative advantage."""
    right, wrong = f"Answer: {FIRST[1]}", "Answer: 0"
    plan = {FIRST[0]: PerRollout([right], [wrong], [wrong], [wrong], [wrong])}
    with ModelServer(scripted(plan)) as server:
        run = run_vf_eval(
            ["stepwise-dapo-math", "-n", "1", "-r", "5", "--env.max-turns", "3"],
            server.base_url,
            output_dir=tmp_path / "outputs",
            env={"HOME": str(tmp_path)},
        )
    assert sorted(e.traces[0].info["turn_rewards"] for e in run.episodes) == [[-1.0] * 3] * 4 + [[1.0]]

    def advantages(*flags: str) -> dict[str, list[float]]:
        out = tmp_path / f"turns{len(flags)}.jsonl"
        vf_stepwise = Path(sys.executable).with_name("vf-stepwise")
        done = subprocess.run(
            [str(vf_stepwise), "advantages", str(run.run_dir), "-o", str(out), "--json", *flags],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        by_trace: dict[str, list[float]] = {}
        for row in map(json.loads, out.read_text().splitlines()):
            by_trace.setdefault(row["trace"], []).append(row["advantage"])
        return by_trace

    shipped = advantages()
    assert sorted(len(a) for a in shipped.values()) == [1, 3, 3, 3, 3]
    for values in shipped.values():
        if len(values) == 3:  # a rollout wrong three times
            assert all(a < 0.0 for a in values), values
        else:
            assert values[0] > 0.0
    kevin = advantages("--gamma", "0.4", "--baseline", "pooled", "--scale", "std")
    assert [round(a, 4) for a in next(v for v in kevin.values() if len(v) == 3)] == [-0.6357, -0.3926, 0.215]


@pytest.mark.slow
def test_overlong_shaping_counts_the_tokens_itself_when_the_server_sends_no_usage(tmp_path):
    """Issue #17: a real server that sends no usage in its stream failed every episode once the
    model had answered. With ``overlong.tokenizer`` (here one token per byte) the reply's text is
    counted; without it the episode's error says which option fixes it."""
    reply = f"Work work work.\nAnswer: {FIRST[1]}"
    shaping = ["--env.taskset.task.overlong.enabled", "true", "--env.taskset.task.overlong.max-tokens", "40"]
    shaping += ["--env.taskset.task.overlong.cache-tokens", "30"]
    tokenizer = qwen3_byte_tokenizer(tmp_path / "tokenizer")
    with ModelServer(scripted({FIRST[0]: [reply]}), usage=False) as server:
        counted, unknown = (
            run_vf_eval(
                ["stepwise-dapo-math", "-n", "1", "-r", "1", *shaping, *flags],
                server.base_url,
                output_dir=tmp_path / f"outputs{len(flags)}",
                env={"HOME": str(tmp_path)},
            ).episodes
            for flags in (["--env.taskset.task.overlong.tokenizer", tokenizer], [])
        )
    (trace,) = counted[0].traces
    assert trace.ok and trace.metrics["response_tokens"] == len(reply.encode())
    assert trace.rewards["overlong_penalty"].score == pytest.approx((10 - len(reply.encode())) / 30)
    (failed,) = unknown[0].traces
    assert (
        not failed.ok and "set overlong.tokenizer (--env.taskset.task.overlong.tokenizer)" in failed.errors[-1].message
    )
