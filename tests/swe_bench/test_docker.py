"""The Docker engine, run for real: every cap is a flag the engine holds, an instance image that
carries its repository at /testbed (as the official SWE-bench images do) is graded in fresh
containers of it, and what the environment says where an engine or image is missing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import types
import uuid
from pathlib import Path

import pytest
from stepwise_swe_bench.box import UnsupportedRuntime, close_box, prepare_box
from stepwise_swe_bench.docker import USER, DockerSandbox
from stepwise_swe_bench.fixtures import base_checkout
from stepwise_swe_bench.grading import grade, model_patch, round_score
from stepwise_swe_bench.image import TAG
from stepwise_swe_bench.instances import load_instances
from stepwise_swe_bench.sandbox import SandboxUnavailable
from stepwise_swe_bench.taskset import check_docker

from .conftest import limits, need, run

MIB = 1024 * 1024
(SLUGS,) = load_instances(instance_ids=["stepwise__slugs-21"])


def docker(*argv: str) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=True).stdout


def test_every_cap_is_a_flag_the_engine_holds(tmp_path: Path):
    need("docker")
    caps = limits("docker", memory_mb=768, cpus=0.5, processes=77, open_files=321, file_size_mb=9, disk_mb=100)
    sandbox = DockerSandbox.start(TAG, caps, ["tar", "-C", str(tmp_path), "-c", "."])
    try:
        (info,) = json.loads(docker("inspect", sandbox.container))
    finally:
        sandbox.remove()
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["Init"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and not host["Privileged"]
    assert host["SecurityOpt"] == ["no-new-privileges"]  # the default seccomp profile: not turned off
    assert host["Memory"] == host["MemorySwap"] == 768 * MIB  # swap off
    assert (host["NanoCpus"], host["PidsLimit"], host["ShmSize"]) == (500_000_000, 77, 64 * MIB)
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits == {"nofile": (321, 321), "fsize": (9 * MIB, 9 * MIB), "core": (0, 0)}
    assert "size=100m" in host["Tmpfs"]["/testbed"] and "size=64m" in host["Tmpfs"]["/tmp"]
    assert info["Config"]["User"] == USER and not host["Binds"]
    assert docker("ps", "-aq", "--filter", f"name={sandbox.container}") == ""


@pytest.fixture(scope="module")
def image_with_repository():
    """A stand-in for an official SWE-bench image: the bundle's image with a task's repository
    committed at /testbed (made with ``docker create``, ``cp`` and ``commit``: no builder)."""
    need("docker")
    name, tag = f"stepwise-swe-bench-test-{uuid.uuid4().hex[:8]}", f"stepwise-swe-bench-test:{uuid.uuid4().hex[:8]}"
    docker("create", "--name", name, TAG, "true")
    try:
        docker("cp", f"{base_checkout(SLUGS)}/.", f"{name}:/testbed")
        docker("commit", name, tag)
    finally:
        docker("rm", "-f", name)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_an_image_that_holds_its_repository_is_graded_in_fresh_containers_of_it(tmp_path, image_with_repository):
    """The repository comes out of the image itself (its /testbed, read from a created
    container), so the sandbox's tmpfs holds it; gold resolves, no change does not."""
    instance = SLUGS.model_copy(update={"image": image_with_repository})
    runtime = types.SimpleNamespace(type="subprocess", info=types.SimpleNamespace(id=str(tmp_path)))

    async def rounds():
        ref, sandbox = await prepare_box(runtime, instance, limits("docker", timeout_s=60))  # type: ignore[arg-type]
        try:
            head = await sandbox.run("git rev-parse HEAD; git status --porcelain; stat -c %U .")
            graded = []
            for fix in (False, True):
                if fix:
                    await sandbox.run("git apply -", stdin=instance.patch.encode())
                patch = await model_patch(sandbox, instance.base_commit, timeout_s=60)
                graded.append(await grade(instance, sandbox, patch, timeout_s=60, kept_log_bytes=1 << 20))
            return head, graded, ref
        finally:
            await close_box(ref)

    head, (before, after), ref = asyncio.run(rounds())
    assert head.output == f"{instance.base_commit}\n1000\n" or head.output.startswith(instance.base_commit)
    assert round_score(before, "resolved") == 0.0 and not before.tampered
    assert round_score(after, "resolved") == 1.0 and not after.tampered
    assert docker("ps", "-q", "--filter", f"name={ref.container}") == ""


def test_an_instance_image_needs_docker_and_the_tools_need_the_subprocess_runtime(tmp_path):
    instance = SLUGS.model_copy(update={"image": "swebench/sweb.eval.x86_64.any:latest"})
    runtime = types.SimpleNamespace(type="subprocess", info=types.SimpleNamespace(id=str(tmp_path)))
    with pytest.raises(UnsupportedRuntime, match="engine docker"):
        asyncio.run(prepare_box(runtime, instance, limits("bwrap")))  # type: ignore[arg-type]
    runtime.type = "docker"
    with pytest.raises(UnsupportedRuntime, match="leave the rollout's runtime at subprocess"):
        asyncio.run(prepare_box(runtime, SLUGS, limits("docker")))  # type: ignore[arg-type]


def test_without_an_engine_or_its_image_the_load_says_what_to_do(monkeypatch, tmp_path):
    need("docker")
    from stepwise_swe_bench import image

    monkeypatch.setattr(image, "TAG", "stepwise-swe-bench:not-built")
    with pytest.raises(SandboxUnavailable, match=r"python -m stepwise_swe_bench.image.*engine bwrap"):
        check_docker(bundled=True)
    check_docker(bundled=False)  # an instance image is pulled when its container starts
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI
    with pytest.raises(SandboxUnavailable, match=r"no Docker engine answers.*engine bwrap"):
        check_docker(bundled=False)


def test_a_command_past_its_time_is_stopped_inside_the_container(repo):
    """coreutils ``timeout`` ends the command in the container; the client is not left waiting."""
    need("docker")
    sandbox = DockerSandbox.start(TAG, limits("docker"), ["tar", "-C", str(repo), "-c", "."])
    try:
        result = run(sandbox, "sleep 60", timeout_s=1)
        left = run(sandbox, "ps -eo args | grep -c '^sleep 60$' || true")
    finally:
        sandbox.remove()
    assert result.termination == "timeout" and result.duration_s < 10
    assert left.output == "0\n"
