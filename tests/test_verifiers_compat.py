"""One verifiers range: 0.3.1 (PyPI), prime-rl 559b447's pinned a60a606 (0.3.1.dev62) and 0.4.0.

These run on whichever verifiers is installed: verifiers 0.4.0 in the main CI environment,
a60a606 in .ci/run's prime-rl environment (and 0.3.1 by hand, see docs/prime-rl.md).
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from importlib.util import find_spec
from itertools import islice
from pathlib import Path

import pytest
import verifiers.v1 as vf
from packaging.requirements import Requirement
from packaging.version import Version
from stepwise_refine.arithmetic import ArithmeticTaskset

from verifiers_stepwise.envs import compat
from verifiers_stepwise.testing.episodes import env_server
from verifiers_stepwise.testing.server import ModelServer, PerRollout, scripted
from verifiers_stepwise.traces.turns import read_turns, score_differences

ROOT = Path(__file__).resolve().parents[1]
KEY_VAR = "STEPWISE_TEST_API_KEY"
INSTALLED = Version(version("verifiers"))


def declared() -> Requirement:
    (requirement,) = [
        Requirement(d)
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if Requirement(d).name == "verifiers"
    ]
    return requirement


def test_declared_range_admits_every_supported_verifiers():
    specifier = declared().specifier
    # pip treats an installed pre-release as satisfying a range that names a pre-release, so
    # installing this package next to prime-rl's a60a606 keeps it (.ci/run checks the install).
    assert specifier.prereleases
    for supported in ("0.3.1.dev62", "0.3.1", "0.4.0", str(INSTALLED)):
        assert specifier.contains(supported), supported
    # 0.4.1.dev86, on PyPI, hands token ids as numpy arrays: untested, kept out
    for unsupported in ("0.3.0", "0.3.1.dev61", "0.4.1.dev86", "0.4.1", "0.5.0"):
        assert not specifier.contains(unsupported), unsupported


def test_older_apis_are_detected_not_patched():
    if INSTALLED >= Version("0.4"):
        assert compat.MCP_TOOLS
    else:
        assert find_spec("verifiers.v1.harnesses.utils") is None  # nothing was added to verifiers
        assert not compat.MCP_TOOLS
        with pytest.raises(RuntimeError, match=f"verifiers >= 0.4 only \\(installed: {INSTALLED}\\)"):
            compat.require_mcp_tools({"calc": "http://127.0.0.1:1/mcp"})
    compat.require_mcp_tools({})  # no tool servers: nothing to refuse


async def test_a_refine_episode_runs_through_stepwise_chat_on_this_verifiers(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-local")
    config = vf.resolve_env_config({"taskset": {"id": "stepwise-refine"}, "max_turns": 3})
    assert config.agent.harness.id == "stepwise-chat"
    (task,) = islice(ArithmeticTaskset(config.taskset), 1)
    script = scripted({"17 * 23": PerRollout(["400", "391"], ["391"])})
    with ModelServer(script) as model:
        async with env_server(config) as client:
            run = dict(
                client=vf.EvalClientConfig(base_url=model.base_url, api_key_var=KEY_VAR),
                model="local-model",
                sampling=vf.SamplingConfig(),
                task_data=task.data.model_dump(mode="json"),
            )
            group = [await client.run(**run) for _ in range(2)]
    assert all(e.ok for e in group), [e.errors for e in group]
    scores = sorted((e.traces[0].info["turn_scores"] for e in group), key=len)  # refine records scores
    # solved on the last turn; each turn before it asked for another and cost config.turn_cost
    assert [len(r) for r in scores] == [1, 2]
    assert all(r[-1] == pytest.approx(1.0 - config.turn_cost * (len(r) - 1)) for r in scores)
    assert all(read_turns(e.traces[0]).rewards == score_differences(e.traces[0].info["turn_scores"]) for e in group)
    assert all(e.traces[0].verifiers.version == str(INSTALLED) for e in group)
