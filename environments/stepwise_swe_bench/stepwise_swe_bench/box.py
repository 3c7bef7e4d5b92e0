"""The task repository of one rollout, and the sandbox that reaches it.

Task setup prepares the repository in the rollout's runtime and describes it with a ``BoxRef``
(plain data, kept in the rollout's shared state). The environment (grading) and the tool server
(the model's commands), two different processes, each open their own ``Sandbox`` from it:

- ``local`` (the ``subprocess`` runtime): the bundled task's repository is materialized in the
  runtime's working directory and every command runs in a bubblewrap sandbox over it;
- ``docker`` / ``podman``: the instance's official image holds the repository at /testbed;
  commands run in that container (the tool server borrows it with ``DockerRuntime.attach``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from .container import RuntimeSandbox
from .instances import SweInstance
from .limits import SandboxLimits
from .sandbox import BwrapSandbox, Sandbox, remove_tree
from .volume import make_volume

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["BoxRef", "UnsupportedRuntime", "open_sandbox", "prepare_box"]

CONTAINER_RUNTIMES = ("docker", "podman")


class UnsupportedRuntime(RuntimeError):
    """The rollout's runtime cannot host this environment's tools."""


class BoxRef(BaseModel):
    """Where a rollout's repository is, for processes that did not create it."""

    kind: Literal["local", "docker", "podman"]
    repo: str
    """Host path of the repository (local), or its path in the container."""
    container: str | None = None
    python: str | None = None
    """Interpreter whose environment the local sandbox exposes (the environment's own)."""
    limits: SandboxLimits = SandboxLimits()


async def prepare_box(runtime: vf.Runtime, instance: SweInstance, limits: SandboxLimits) -> tuple[BoxRef, Sandbox]:
    """Make the instance's repository ready in ``runtime`` at its base commit."""
    if runtime.type == "subprocess":
        if instance.image is not None:
            raise UnsupportedRuntime(
                f"instance {instance.instance_id!r} runs in the image {instance.image!r}; "
                "use a container runtime (--env.agent.runtime.type docker)"
            )
        from .fixtures import base_checkout, materialize

        def local() -> BwrapSandbox:
            # The runtime's folder holds the repository and its grading copies: no other user
            # may reach them (a file there could be setuid to the repository's owner).
            repo.parent.chmod(0o700)
            make_volume(repo, limits.disk_mb, limits.inodes)  # where it can: the disk caps
            try:
                materialize(instance, repo)
                return BwrapSandbox(repo, limits, base=base_checkout(instance))
            except BaseException:
                remove_tree(repo)
                raise

        repo = Path(runtime.info.id) / "repo"
        # File copies and (once per process) git and a probe sandbox: off the event loop.
        sandbox: Sandbox = await asyncio.to_thread(local)
        return BoxRef(kind="local", repo=str(repo), python=sys.executable, limits=limits), sandbox
    if runtime.type in CONTAINER_RUNTIMES:
        sandbox = RuntimeSandbox(runtime, limits, workdir=runtime.config.workdir)
        head = await sandbox.run("git rev-parse HEAD")
        if head.exit_code != 0 or head.output.strip() != instance.base_commit:
            raise UnsupportedRuntime(
                f"instance {instance.instance_id!r}: {runtime.config.image!r} has no git checkout "
                f"of {instance.base_commit} at {sandbox.workdir} ({head.output.strip()[-300:]})"
            )
        ref = BoxRef(kind=runtime.type, repo=sandbox.workdir, container=runtime.info.id, limits=limits)
        return ref, sandbox
    raise UnsupportedRuntime(
        f"the {runtime.type!r} runtime cannot host the SWE-bench tools: use subprocess (bundled "
        "tasks, bubblewrap sandbox) or docker/podman (official SWE-bench images)"
    )


@contextlib.asynccontextmanager
async def open_sandbox(ref: BoxRef) -> AsyncIterator[Sandbox]:
    """A sandbox over an existing box (the tool server's view)."""
    if ref.kind == "local":
        python = Path(ref.python) if ref.python else None
        yield BwrapSandbox(Path(ref.repo), ref.limits, python=python)
        return
    from verifiers.v1.runtimes import DockerConfig, DockerRuntime, PodmanConfig, PodmanRuntime

    runtime_cls, config = (DockerRuntime, DockerConfig()) if ref.kind == "docker" else (PodmanRuntime, PodmanConfig())
    assert ref.container is not None
    async with runtime_cls.attach(config, ref.container) as runtime:
        yield RuntimeSandbox(runtime, ref.limits, workdir=ref.repo)
