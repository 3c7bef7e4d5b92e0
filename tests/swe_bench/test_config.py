from __future__ import annotations

import pytest
import verifiers.v1 as vf

from verifiers_stepwise import available_environments


def test_the_bundle_registers_its_env_id():
    assert "stepwise-swe-bench" in available_environments()


def test_documented_defaults():
    config = vf.resolve_env_config({"taskset": {"id": "stepwise-swe-bench"}})
    assert type(config).__name__ == "SweBenchEnvConfig"
    assert (config.reward, config.max_turns, config.agent.runtime.type) == ("resolved", 3, "subprocess")
    assert config.agent.harness.id == "stepwise-chat"
    task = config.taskset.task
    budget = task.budget
    assert (budget.max_steps_per_round, budget.max_steps, budget.round_timeout_s, budget.episode_timeout_s) == (
        40,
        120,
        900,
        3600,
    )
    assert task.grading_timeout_s == 1800 and config.taskset.source == "fixtures"
    limits = task.sandbox
    assert (limits.timeout_s, limits.cpu_s, limits.memory_mb, limits.processes, limits.file_size_mb) == (
        60,
        120,
        4096,
        256,
        256,
    )
    assert (limits.open_files, limits.tmp_mb, limits.output_kept_bytes, limits.output_kill_bytes) == (
        1024,
        512,
        64 * 1024,
        16 * 1024 * 1024,
    )


def test_flags_narrow_to_the_env_config():
    config = vf.resolve_env_config(
        {
            "taskset": {"id": "stepwise-swe-bench", "task": {"budget": {"max_steps": 7}}},
            "reward": "partial",
            "max_turns": 5,
        }
    )
    assert (config.reward, config.max_turns, config.taskset.task.budget.max_steps) == ("partial", 5, 7)
    with pytest.raises(ValueError, match="reward"):
        vf.resolve_env_config({"taskset": {"id": "stepwise-swe-bench"}, "reward": "sometimes"})
