"""docs/tinker.md as a reader with a Tinker account meets it (issue 37): it says that Tinker is a
hosted service needing an account and a key, what the ``tinker`` extra brings, and its train
command, as written, parses into tinker-cookbook's own ``train.Config`` and reaches
``train.main`` with the estimator in place (``train.main`` itself needs the Tinker service and
is replaced here, as in ``test_host_tinker.py``)."""

from __future__ import annotations

import re
import shlex
import tomllib

import chz
from tinker_cookbook.rl import data_processing
from tinker_cookbook.rl import train as tinker_train

from tests.docs_shell import ROOT, commands, shell_blocks
from verifiers_stepwise.hosts import tinker as adapter

GUIDE = "docs/tinker.md"
MODULE = "python -m verifiers_stepwise.hosts.tinker "


def test_the_guide_says_tinker_is_hosted_and_what_the_extra_brings():
    text = " ".join((ROOT / GUIDE).read_text().split())
    install = text[text.index("## Install") : text.index("## Train")]
    assert "hosted training service" in install and "Tinker account" in install and "`TINKER_API_KEY`" in install
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tinker"]
    for requirement in extra:
        name = re.match(r"[\w-]+", requirement).group()
        assert f"`{name}`" in install, f"the install section does not say the tinker extra brings {name}"
    block = commands(shell_blocks(GUIDE, after="## Install")[0])
    assert 'pip install "$STEPWISE[tinker]"' in block and "pip install --no-deps tinker-cookbook==0.6.1" in block
    assert any(line.startswith("export TINKER_API_KEY=") and "needs" in line for line in block)


def test_the_guides_train_command_reaches_tinkers_training_loop_with_its_estimator(monkeypatch):
    (command,) = [c for c in commands(shell_blocks(GUIDE, after="## Train")[0]) if c.startswith(MODULE)]
    assert "# needs TINKER_API_KEY" in command
    argv = shlex.split(command.removeprefix(MODULE), comments=True)
    seen = {}

    async def tinker_main(config):  # the loop needs the Tinker service: record what it would run with
        seen["config"] = config
        seen["estimator_in_place"] = tinker_train.compute_advantages is not data_processing.compute_advantages

    monkeypatch.setattr(tinker_train, "main", tinker_main)
    adapter.main(chz.Blueprint(adapter.CLIConfig).make_from_argv(argv))
    config = seen["config"]
    assert isinstance(config, tinker_train.Config) and seen["estimator_in_place"]
    assert (config.model_name, config.log_path, config.dataset_builder.group_size) == (
        "Qwen/Qwen3-8B",
        "runs/stepwise",
        16,
    )
    assert tinker_train.compute_advantages is data_processing.compute_advantages  # restored after


def test_the_healthy_runs_metric_names_are_the_ones_tinker_cookbook_logs():
    """The ``env/all/*`` rows come out of tinker-cookbook's own ``compute_trajectory_metrics`` on
    groups whose transitions carry what its ``ProblemEnv`` records (``correct``, ``format``); the
    ``optim/*`` and ``progress/*`` rows are keys its RL loop writes (``rl/train.py``,
    ``rl/metrics.py``: the KL needs Tinker's trainer to compute)."""
    from pathlib import Path

    import tinker_cookbook.rl.metrics as kl_metrics
    from tinker_cookbook.rl.metric_util import compute_trajectory_metrics

    from tests.hosts.test_host_tinker import group, trajectory

    solved = trajectory([(1.0, 2, False, False)])
    missed = trajectory([(0.0, 2, False, False)])
    for traj, right in ((solved, 1.0), (missed, 0.0)):
        traj.transitions[0].metrics.update(correct=right, format=1.0)
    logged = set(compute_trajectory_metrics([group([solved, missed], [0.0, 0.0])], [["arithmetic"]]))
    written = Path(tinker_train.__file__).read_text() + Path(kl_metrics.__file__).read_text()
    text = (ROOT / GUIDE).read_text()
    section = text[text.index("### What a healthy run prints") : text.index("## What it does")]
    named = set(re.findall(r"`((?:env|optim|progress)/[\w/]+)`", section))
    assert len(named) >= 8, named
    unknown = {n for n in named if n not in logged and f'"{n}"' not in written}
    assert not unknown, f"the guide names metrics tinker-cookbook does not log: {unknown}"
