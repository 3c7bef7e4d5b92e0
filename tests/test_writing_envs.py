"""docs/writing-envs.md's claim: its `pyproject.toml` and env module, pip-installed as a package,
make `vf-eval guess-env` resolve (checked with verifiers 0.4.0's loader and the real vf-eval).

The package is built by pip from the page's own code blocks (pip fetches the build backend,
hatchling, from the package index, as any user's `pip install` does) and installed into a
directory of its own that the tests put on the import path, so the test venv is not changed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers_stepwise.testing.server import ModelServer, scripted
from verifiers_stepwise.testing.vf_eval import run_vf_eval

PAGE = Path(__file__).resolve().parents[1] / "docs" / "writing-envs.md"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The page's package, `pip install`ed into its own target directory."""
    text = PAGE.read_text()
    module = re.search(r"^## The env\n.*?```python\n(.*?)```", text, re.S | re.M).group(1)
    package = text[text.index("## Package it") :]
    pyproject = re.search(r"```toml\n(.*?)```", package, re.S).group(1)
    root = tmp_path_factory.mktemp("guess-env")
    (root / "guess-env").mkdir()
    (root / "guess-env" / "guess_env.py").write_text(module)
    (root / "guess-env" / "pyproject.toml").write_text(pyproject)
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), "./guess-env"]
    result = subprocess.run(pip, cwd=root, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return site


def test_verifiers_loader_resolves_the_installed_env_id(installed, monkeypatch):
    from verifiers.v1.utils import loaders

    from verifiers_stepwise import available_environments

    monkeypatch.syspath_prepend(str(installed))
    try:
        assert loaders.environment_class("guess-env").__name__ == "GuessEnv"
        assert loaders.taskset_class("guess-env").__name__ == "GuessTaskset"
        assert available_environments()["guess-env"] == "guess_env"
    finally:
        sys.modules.pop("guess_env", None)


def test_vf_eval_runs_the_installed_env_with_a_reward_per_turn(installed, tmp_path):
    # Game 3 is guessed right on the second turn, game 7 never (0.6 partial credit a turn).
    script = scripted({"Game 3": ["5", "3"], "Game 7": ["3"]})
    path = os.pathsep.join(filter(None, [str(installed), os.environ.get("PYTHONPATH")]))
    with ModelServer(script) as server:
        run = run_vf_eval(
            ["guess-env", "-n", "2", "-r", "2", "--env.max-turns", "3"],
            server.base_url,
            output_dir=tmp_path,
            env={"PYTHONPATH": path},
        )
    rewards = sorted(trace.info["turn_rewards"] for episode in run.episodes for trace in episode.traces)
    assert rewards == [[0.6, 0.6, 0.6], [0.6, 0.6, 0.6], [0.8, 1.0], [0.8, 1.0]]
