"""The sandbox in each mode: Docker (``docker``) and bubblewrap as this process's user
(``bwrap``: root here, so its cgroups); bubblewrap as an ordinary user runs in child processes
that drop to ``nobody`` (``ordinary_user``).

Docker needs a running engine and the bundled tasks' image (``python -m
stepwise_swe_bench.image``). Without them the Docker tests skip, unless ``STEPWISE_REQUIRE_DOCKER``
is set (CI sets it), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from stepwise_swe_bench.bwrap import BwrapSandbox, hand_over, remove_tree
from stepwise_swe_bench.limits import SandboxLimits
from stepwise_swe_bench.sandbox import Sandbox, SandboxUnavailable

ENGINES = ["docker", "bwrap"]
NOBODY = 65534
REPO_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def docker_missing() -> str | None:
    """Why the Docker tests cannot run here, or None."""
    from stepwise_swe_bench.taskset import check_docker

    try:
        check_docker(bundled=True)
    except SandboxUnavailable as error:
        return str(error)
    return None


def containers() -> set[str]:
    """The ids of the Docker containers the bundle labels: a run's own are those that appear
    during it (this process's ``docker cp`` source container lives until it exits)."""
    done = subprocess.run(["docker", "ps", "-aq", "--filter", "label=stepwise-swe-bench"], capture_output=True)
    return set(done.stdout.decode().split())


def need(engine: str) -> None:
    """Skip (or, under ``STEPWISE_REQUIRE_DOCKER``, fail) a Docker test without an engine."""
    if engine == "docker" and (why := docker_missing()) is not None:
        if os.environ.get("STEPWISE_REQUIRE_DOCKER"):
            pytest.fail(f"STEPWISE_REQUIRE_DOCKER is set: {why}")
        pytest.skip(why)


def limits(engine: str, **fields) -> SandboxLimits:
    """Small caps for tests (fields override them)."""
    base = {"timeout_s": 20, "processes": 64, "memory_mb": 1024, "disk_mb": 256, "inodes": 8192, "tmp_mb": 64}
    return SandboxLimits(engine=engine, **{**base, "output_kill_bytes": 4 * 1024 * 1024, **fields})


@contextlib.contextmanager
def open_sandbox(engine: str, repo: Path, caps: SandboxLimits | None = None) -> Iterator[Sandbox]:
    """A sandbox over a copy of ``repo`` in ``engine``, removed afterwards."""
    need(engine)
    caps = caps or limits(engine)
    if engine == "docker":
        from stepwise_swe_bench.docker import DockerSandbox
        from stepwise_swe_bench.image import TAG

        docker = DockerSandbox.start(TAG, caps, ["tar", "-C", str(repo), "-c", "."])
        try:
            yield docker
        finally:
            docker.remove()
        return
    hand_over(repo)
    try:
        yield BwrapSandbox.create(repo, caps)
    finally:
        remove_tree(repo)


@contextlib.contextmanager
def episode(engine: str, instance, workdir: Path, caps: SandboxLimits | None = None) -> Iterator[Sandbox]:
    """The sandbox of one episode of ``instance`` as task setup prepares it (``workdir``: the
    rollout's runtime folder), closed afterwards."""
    from stepwise_swe_bench.box import close_box, prepare_box

    need(engine)
    runtime = types.SimpleNamespace(type="subprocess", info=types.SimpleNamespace(id=str(workdir)))
    ref, sandbox = asyncio.run(prepare_box(runtime, instance, caps or limits(engine, timeout_s=30)))  # type: ignore[arg-type]
    try:
        yield sandbox
    finally:
        asyncio.run(close_box(ref))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small repository directory."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "hello.txt").write_text("hello\n")
    return path


@pytest.fixture(params=ENGINES)
def sandbox(request, repo: Path) -> Iterator[Sandbox]:
    with open_sandbox(request.param, repo) as opened:
        yield opened


def run(sandbox: Sandbox, command: str, **kwargs):
    return asyncio.run(sandbox.run(command, **kwargs))


@contextlib.contextmanager
def loopback_server() -> Iterator[tuple[int, list]]:
    """A TCP server on the host's 127.0.0.1: yields its port and the connections it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept())

    watcher = threading.Thread(target=accept)
    watcher.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        done.set()
        watcher.join()
        server.close()


def ordinary_user_python(root: Path) -> Path:
    """A venv of the system Python holding pytest and its dependencies: an ordinary user's test
    environment (this suite's own interpreter may live under /root, which others cannot read)."""
    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    for module in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / origin.parent.name)
            for metadata in origin.parent.parent.glob(f"{module}-*.dist-info"):
                shutil.copytree(metadata, site / metadata.name)
        else:
            shutil.copy(origin, site / origin.name)
    return venv / "bin" / "python"


def as_nobody(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``script`` (Python, which drops to ``nobody`` itself once it has imported what it
    needs: call ``drop()``) with ``args``; its standard output. As an ordinary user already,
    ``drop()`` does nothing."""
    prelude = (
        "import os\n"
        "def drop():\n"
        "    if os.geteuid() == 0:\n"
        f"        os.setgroups([]); os.setresgid(*[{NOBODY}] * 3); os.setresuid(*[{NOBODY}] * 3)\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    if "PYTHONPATH" in os.environ:  # the code under test, where it is not the installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    child = subprocess.run(
        [sys.executable, "-c", prelude + script, *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-4000:]
    return child.stdout
