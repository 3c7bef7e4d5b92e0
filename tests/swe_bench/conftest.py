from __future__ import annotations

from pathlib import Path

import pytest

from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import BwrapSandbox, hand_over


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small repository directory the sandbox may write."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "hello.txt").write_text("hello\n")
    hand_over(path)
    return path


@pytest.fixture
def sandbox(repo: Path) -> BwrapSandbox:
    limits = SandboxLimits(timeout_s=20, processes=64, output_kill_bytes=4 * 1024 * 1024)
    return BwrapSandbox(repo, limits)
