"""The refine env served through ``verifiers.v1.serve`` (the path prime-rl and torchtitan use)
and driven by its ``EnvClient``."""

from __future__ import annotations

import pytest
import verifiers.v1 as vf
from stepwise_refine.arithmetic import ArithmeticTaskset

from verifiers_stepwise import get_estimator, score_group
from verifiers_stepwise.testing.episodes import env_server
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.traces.turns import read_turns, score_differences

KEY_VAR = "STEPWISE_TEST_API_KEY"


async def test_env_server_and_client_run_refine_episodes(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")
    script = scripted({"17 * 23": PerRollout(["400", "391"], ["300", "390", "391"], ["391"])})
    config = vf.resolve_env_config({"taskset": {"id": "stepwise-refine"}, "max_turns": 3})
    (task,) = list(ArithmeticTaskset(config.taskset).take(1))
    with ModelServer(script) as model:
        async with env_server(config) as client:
            deltas: list[dict] = []
            run = dict(
                client=vf.EvalClientConfig(base_url=model.base_url, api_key_var=KEY_VAR),
                model="local-model",
                sampling=vf.SamplingConfig(),
                task_data=task.data.model_dump(mode="json"),
            )
            group = [await client.run(**run, on_delta=deltas.append) for _ in range(3)]
    assert all(isinstance(e, vf.Episode) and e.ok for e in group)
    assert deltas  # the traces streamed in turn by turn
    scores = sorted((e.traces[0].info["turn_scores"] for e in group), key=len)  # refine records scores
    # solved on the last turn; each turn before it asked for another and cost config.turn_cost
    assert [len(r) for r in scores] == [1, 2, 3]
    assert all(r[-1] == pytest.approx(1.0 - config.turn_cost * (len(r) - 1)) for r in scores)
    assert all(read_turns(e.traces[0]).rewards == score_differences(e.traces[0].info["turn_scores"]) for e in group)
    advantages = [credit.advantages for credit in score_group(group, "stepwise").values()]
    assert advantages == get_estimator("stepwise")([read_turns(e.traces[0]).rewards for e in group])
