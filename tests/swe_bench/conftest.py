from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
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
