"""The task repository of one rollout, and the sandbox that reaches it.

Task setup prepares the repository in the sandbox its limits name (``SandboxLimits.engine``)
and describes it with a ``BoxRef`` (plain data, kept in the rollout's shared state). The
environment (grading) and the tool server (the model's commands), two different processes, each
open their own ``Sandbox`` from it:

- ``docker``: a container of the instance's image (the bundled tasks: ``image.TAG``, the
  repository streamed in from the host's template; an official SWE-bench image holds its own);
- ``bwrap``: the bundled task's repository in the rollout's working directory on the host,
  every command a bubblewrap sandbox over it.

The rollout's own runtime stays verifiers' ``subprocess``: the bundle hands its sandbox to the
engine itself.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from .bwrap import BwrapSandbox, remove_tree
from .docker import DockerSandbox
from .instances import SweInstance
from .limits import SandboxLimits
from .sandbox import Sandbox

if TYPE_CHECKING:
    import verifiers.v1 as vf

__all__ = ["BoxRef", "UnsupportedRuntime", "close_box", "open_sandbox", "prepare_box"]


class UnsupportedRuntime(RuntimeError):
    """The rollout's runtime or the instance cannot host this environment's sandbox."""


class BoxRef(BaseModel):
    """Where a rollout's repository is, for processes that did not create it."""

    limits: SandboxLimits
    repo: str | None = None
    """bwrap: the repository's host path."""
    python: str | None = None
    """bwrap: the interpreter whose environment the sandbox exposes (the environment's own)."""
    container: str | None = None
    """docker: the episode's container."""
    image: str | None = None


def instance_image(instance: SweInstance) -> str:
    """The image an instance runs in with Docker: its own, or the bundle's for a bundled task."""
    from .image import TAG

    return instance.image or TAG


async def prepare_box(runtime: vf.Runtime, instance: SweInstance, limits: SandboxLimits) -> tuple[BoxRef, Sandbox]:
    """Make the instance's repository ready at its base commit, in its sandbox."""
    if runtime.type != "subprocess":
        raise UnsupportedRuntime(
            f"the {runtime.type!r} runtime cannot host the SWE-bench tools: the bundle starts its own sandbox "
            "(--env.taskset.task.sandbox.engine docker|bwrap); leave the rollout's runtime at subprocess"
        )
    from .fixtures import base_checkout, materialize

    if limits.engine == "docker":
        image = instance_image(instance)
        source = None if instance.image else ["tar", "-C", str(base_checkout(instance)), "-c", "."]
        sandbox = await asyncio.to_thread(DockerSandbox.start, image, limits, source)
        return BoxRef(limits=limits, container=sandbox.container, image=image), sandbox
    if instance.image is not None:
        raise UnsupportedRuntime(
            f"instance {instance.instance_id!r} runs in the image {instance.image!r}: "
            "use Docker (--env.taskset.task.sandbox.engine docker)"
        )
    repo = Path(runtime.info.id) / "repo"

    def local() -> BwrapSandbox:
        # The runtime's folder holds the repository and its grading copies: no other user may
        # reach them (a file there could be setuid to the sandbox's user).
        repo.parent.chmod(0o700)
        try:
            materialize(instance, repo)
            return BwrapSandbox.create(repo, limits, base=base_checkout(instance))
        except BaseException:
            remove_tree(repo)
            raise

    return BoxRef(limits=limits, repo=str(repo), python=sys.executable), await asyncio.to_thread(local)


def open_sandbox(ref: BoxRef) -> Sandbox:
    """A sandbox over an existing box (the tool server's view; it cannot grade)."""
    if ref.container is not None:
        assert ref.image is not None
        return DockerSandbox(ref.container, ref.image, ref.limits, source=None)
    assert ref.repo is not None
    return BwrapSandbox(Path(ref.repo), ref.limits, python=Path(ref.python) if ref.python else None)


async def close_box(ref: BoxRef) -> None:
    """Remove the episode's container or repository."""
    if ref.container is not None:
        await asyncio.to_thread(DockerSandbox(ref.container, ref.image or "", ref.limits, None).remove)
    elif ref.repo is not None:
        await asyncio.to_thread(remove_tree, Path(ref.repo))
