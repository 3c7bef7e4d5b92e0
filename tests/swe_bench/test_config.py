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
    assert (limits.engine, limits.timeout_s, limits.memory_mb, limits.cpus, limits.processes) == (
        "docker",
        60,
        8192,
        1,
        256,
    )
    assert (limits.process_memory_mb, limits.open_files, limits.file_size_mb, limits.disk_mb, limits.inodes) == (
        4096,
        1024,
        256,
        4096,
        262_144,
    )
    assert (limits.tmp_mb, limits.shm_mb, limits.output_kept_bytes, limits.output_kill_bytes) == (
        512,
        64,
        64 * 1024,
        16 * 1024 * 1024,
    )


def test_docker_memory_must_hold_its_in_memory_disk():
    with pytest.raises(ValueError, match="memory_mb=4096 must exceed disk_mb"):
        vf.resolve_env_config({"taskset": {"id": "stepwise-swe-bench", "task": {"sandbox": {"memory_mb": 4096}}}})
    bwrap = {"engine": "bwrap", "memory_mb": 4096}  # bubblewrap's repository is on the host's disk
    vf.resolve_env_config({"taskset": {"id": "stepwise-swe-bench", "task": {"sandbox": bwrap}}})


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


def test_bubblewrap_says_at_load_which_caps_it_does_not_enforce(caplog):
    from stepwise_swe_bench.taskset import SweBenchTaskset, SweBenchTasksetConfig

    config = SweBenchTasksetConfig(id="stepwise-swe-bench", task={"sandbox": {"engine": "bwrap"}})
    with caplog.at_level("WARNING", logger="stepwise_swe_bench.taskset"):
        assert len(SweBenchTaskset(config).load()) == 5
    (record,) = caplog.records
    assert "does not enforce these caps" in record.message and "disk_mb: not enforced" in record.message
