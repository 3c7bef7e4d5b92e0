"""docs/prime-rl.md's "Run it", command by command, against prime-rl 559b447 itself.

Every command line of the guide's shell blocks is in exactly one of three tables below: run
here as written (the install in prime-rl's checkout, the rest in a fresh directory holding the
guide's ``rl.toml``; ``STEPWISE`` set to this checkout, ``VIRTUAL_ENV`` to this interpreter's
environment and its folder first on ``PATH``, which is what the guide's activated environment
is), provided by this test's environment, or not run, with the reason. A command
added to the guide without a decision fails ``test_every_command_of_the_guide_is_accounted_for``.
All but that one need prime-rl (``STEPWISE_PRIME_RL``; .ci/run's prime-rl environment requires it).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.hosts.conftest import PRIME_RL_VAR, needs_prime_rl

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "prime-rl.md"
COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"  # ../shared/reference/upstream-sources.md
CONFIGS = "outputs/stepwise-refine/configs"

INSTALL = 'uv pip install -e "$STEPWISE" -e "$STEPWISE/environments/stepwise_refine"'
DRY_RUN = "python -m verifiers_stepwise.hosts.prime_rl rl @ rl.toml --dry-run"
ENV_SERVER = f"python -m prime_rl.entrypoints.env_server @ {CONFIGS}/envs/train/refine.json"
ORCHESTRATOR = f"python -m verifiers_stepwise.hosts.prime_rl orchestrator @ {CONFIGS}/orchestrator.json"
RUN = (INSTALL, 'python -c "import verifiers_stepwise.hosts.prime_rl"', DRY_RUN, ENV_SERVER, ORCHESTRATOR)
PROVIDED = {
    "source .venv/bin/activate": "this interpreter is prime-rl's environment (first on PATH)",
    "export STEPWISE=/path/to/verifiers-stepwise  # your checkout of this repository": "STEPWISE is this checkout",
}
NOT_RUN = {
    "git clone https://github.com/PrimeIntellect-ai/prime-rl.git && cd prime-rl": (
        "network; the stage reads the commit's extracted tree"
    ),
    f"git checkout {COMMIT}": "the tree the stage reads is this commit (test_the_guide_checks_out_the_tested…)",
    "git submodule update --init -- deps/verifiers deps/renderers deps/prime-envs deps/pydantic-config": (
        "network; the stage installs verifiers a60a606 from its extracted tree"
    ),
    "uv sync --all-extras": "network and prime-rl's CUDA wheels (vLLM, flash-attn)",
    "python -m verifiers_stepwise.hosts.prime_rl rl @ rl.toml  # needs the 2 GPUs and steps 1 to 4": "the training run",
}


def run_it() -> str:
    text = GUIDE.read_text()
    return text[text.index("## Run it\n") : text.index("\n## ", text.index("## Run it\n") + 1)]


def commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", run_it(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def rl_toml() -> str:
    (toml,) = re.findall(r"```toml\n(.*?)```", run_it(), re.S)
    return toml


@pytest.fixture
def guide_dir(tmp_path: Path) -> Path:
    (tmp_path / "rl.toml").write_text(rl_toml())
    return tmp_path


def environment() -> dict[str, str]:
    """The guide's activated environment (``VIRTUAL_ENV`` and this interpreter's folder first on
    PATH, as ``source .venv/bin/activate`` sets them), prime-rl importable."""
    roots = [p for p in sys.path if Path(p, "prime_rl").is_dir()]
    return {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PYTHONPATH": os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")]),
        "VIRTUAL_ENV": sys.prefix,
        "STEPWISE": str(ROOT),
        "HF_HUB_OFFLINE": "1",
    }


def shell(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=environment(), capture_output=True, text=True, timeout=timeout
    )


def test_every_command_of_the_guide_is_accounted_for():
    found = commands()
    assert sorted(found) == sorted([*RUN, *PROVIDED, *NOT_RUN]), set(found) ^ {*RUN, *PROVIDED, *NOT_RUN}


@needs_prime_rl
def test_the_guide_checks_out_the_tested_commit_on_prime_rls_python():
    checkout = Path(os.environ[PRIME_RL_VAR])
    # the tree the tests run on is the commit the guide checks out: a git checkout's HEAD, or an
    # extracted tree named for its commit as docs/contributing.md lays the upstream folder out
    if (checkout / ".git").exists():
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert head.stdout.strip() == COMMIT
    else:
        assert checkout.name == f"prime-rl-{COMMIT[:7]}"
    requires = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f'`requires-python = "{requires}"`' in " ".join(run_it().split())


@needs_prime_rl
def test_the_deployment_block_is_prime_rls_default_of_two_gpus(guide_dir):
    from prime_rl.configs.rl import RLConfig, SingleNodeDeploymentConfig

    from verifiers_stepwise.hosts.prime_rl import register

    register()
    written = tomllib.loads(rl_toml())["deployment"]
    default = SingleNodeDeploymentConfig()
    assert SingleNodeDeploymentConfig(**written) == default  # the example needs no more than the default
    assert default.num_infer_gpus + default.num_train_gpus == 2
    config = RLConfig.model_validate(tomllib.loads(rl_toml()))
    assert config.deployment.num_infer_gpus + config.deployment.num_train_gpus == 2
    assert "**2 NVIDIA GPUs**" in run_it()


def installed() -> dict[str, str]:
    """Every distribution of this environment, name -> version, read in a fresh process."""
    script = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    return json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)


@needs_prime_rl
@pytest.mark.slow
def test_the_guides_uv_install_runs_as_written_and_changes_nothing_else():
    """Step 2's install with uv, in prime-rl's checkout (where the guide's user is, so uv applies
    prime-rl's ``[tool.uv]``: its ``required-version``, its ``exclude-newer``), into this
    environment: both packages come back from this checkout, installed by uv (.ci/run installed
    them with pip, so this is the line's own work), and no other distribution changes."""
    assert sys.prefix != sys.base_prefix, "the guide installs into prime-rl's virtual environment"
    before = installed()
    done = shell(INSTALL, Path(os.environ[PRIME_RL_VAR]))
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert installed() == before
    for name, folder in (("verifiers-stepwise", ROOT), ("stepwise-refine", ROOT / "environments" / "stepwise_refine")):
        dist = importlib.metadata.distribution(name)
        assert (dist.read_text("INSTALLER") or "").strip() == "uv", name
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        assert url["dir_info"] == {"editable": True} and url["url"] == folder.as_uri(), url


@needs_prime_rl
@pytest.mark.slow
def test_the_guides_cpu_commands_run_as_written(guide_dir):
    _, check, dry_run, env_server, orchestrator = RUN
    for command in (check, dry_run):
        done = shell(command, guide_dir)
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    configs = guide_dir / CONFIGS
    assert {p.name for p in configs.rglob("*.json")} == {
        "orchestrator.json",
        "trainer.json",
        "inference.json",
        "refine.json",
    }

    # The env server comes up and serves the taskset until Ctrl-C, at the address the dry run wrote.
    address = json.loads((configs / "envs" / "train" / "refine.json").read_text())["serve"]["address"]
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.socket() as probe:
        assert probe.connect_ex((host, int(port))) != 0, f"{address} (the guide's env server address) is in use"
    log = guide_dir / "env-server.log"
    with open(log, "w") as out:
        # Its own process group, so that Ctrl-C reaches the server and its pool's workers together,
        # as a terminal delivers it to the foreground group.
        server = subprocess.Popen(
            ["bash", "-c", f"exec {env_server}"],
            cwd=guide_dir,
            env=environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A terminal's Ctrl-C reaches a program whose SIGINT is the default; a run started in the
            # background of a script inherits it ignored, and Python then never raises KeyboardInterrupt.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        # Up means the env server and its interception pool: a Ctrl-C while the pool still starts
        # can leave the server hung (seen under load), which is not what the guide's user does.
        deadline = time.monotonic() + 180
        up = ("EnvServer up: taskset=stepwise-refine", "interception pool:")
        while not all(line in log.read_text() for line in up):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            group = subprocess.run(
                ["ps", "-o", "pid,stat,etime,args", "--sid", str(server.pid)], capture_output=True, text=True
            )
            os.killpg(server.pid, signal.SIGKILL)  # never leave the guide's port taken for the next run
            pytest.fail(f"the env server did not exit 60 s after Ctrl-C:\n{group.stdout}{log.read_text()[-3000:]}")
    # The pool reports down and exits cleanly. (Its worker, interrupted by the same Ctrl-C, is
    # stopped by the pool before it logs its own "EnvServer down": verifiers a60a606's behaviour.)
    assert server.returncode == 0 and "EnvServerPool down" in log.read_text(), log.read_text()[-3000:]

    # The orchestrator registers `stepwise`, validates its config, then stops where the guide says.
    done = shell(orchestrator, guide_dir)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "validation error" not in output and "ConfigFileError" not in output, output[-3000:]
    assert "No module named 'modelexpress'" in output and "No module named 'modelexpress'" in run_it(), output[-3000:]


def prime_rl_source() -> Path:
    """prime-rl 559b447's tree: ``STEPWISE_PRIME_RL``, else the upstream folder's copy."""
    upstream = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "verifiers-stepwise", "upstream")
    checkout = Path(
        os.environ.get(PRIME_RL_VAR) or Path(os.environ.get("STEPWISE_UPSTREAM", upstream), "prime-rl-559b447")
    )
    if not (checkout / "src" / "prime_rl").is_dir():
        pytest.skip(f"no prime-rl sources at {checkout} (docs/contributing.md says how to provide them)")
    return checkout / "src" / "prime_rl"


def test_what_a_healthy_run_prints_is_what_prime_rl_prints():
    """The guide's "What a healthy run prints", held to prime-rl 559b447's own source: each message
    and step-line field it quotes is printed there, and each W&B key it names is built there."""
    source = prime_rl_source()
    orchestrator = (source / "orchestrator" / "orchestrator.py").read_text()
    trainer = (source / "trainer" / "rl" / "train.py").read_text()
    launcher = (source / "entrypoints" / "rl.py").read_text()
    metrics = (source / "orchestrator" / "metrics.py").read_text()
    text = run_it()
    section = text[text.index("### What a healthy run prints") :]
    flat = " ".join(section.split())
    assert "Startup complete. Showing orchestrator logs..." in flat and "Startup complete. Showing" in launcher
    for message in ("Starting orchestrator (algorithm:", "Train environment(s) ready", "Policy inference pool ready"):
        assert message in flat and message in orchestrator, message
    assert 'f"Starting orchestrator loop (max_steps=' in orchestrator
    step = re.search(r"```\n(Step <n> \| .*?)\n```", section).group(1)
    for field in re.findall(r"\| ([A-Z][\w. -]+?) <", step):
        assert f"{field} {{" in orchestrator, field
    for field in ("Loss", "Entropy", "Mismatch KL", "Grad. Norm", "LR", "Throughput", "MFU", "Peak Mem."):
        assert f"| {field} " in flat and f"{field} {{" in trainer, field
    # W&B: train/agg/{subset}/{agent}/{metric}/{stat}, built by EpisodeMetrics.to_wandb and Stat.to_dict
    assert 'prefix="train/agg"' in orchestrator and 'f"{prefix}/{subset}"' in metrics and 'f"{prefix}/mean"' in metrics
    for key in ("reward", "num_turns", "is_trainable"):
        assert f"`train/agg/effective/agent/{key}/mean`" in flat
    assert "`train/agg/all/has_error/mean`" in flat and 'f"{metric_prefix}/has_error/mean"' in metrics
    for key in ("loss/mean", "entropy/all/mean", "mismatch_kl/all/mean"):
        assert f"`{key}`" in flat and (f"'{key}'" in trainer or f'"{key}"' in trainer), key
    assert '"optim/grad_norm"' in trainer
