"""The container image of the bundled tasks, built from Debian packages and imported into Docker.

``python -m stepwise_swe_bench.image`` (as root, with ``debootstrap`` and a running Docker
engine) makes a ``debootstrap --variant=minbase`` root file system of Debian ``SUITE`` with
``PACKAGES`` (Python, pytest, git), empties its package caches and ``docker import``s it as
``TAG``. The tag is a hash of this recipe, so a recipe is built once: run again, the command
finds the tag and does nothing. The episodes' repositories are copied in at setup (``docker``);
the image holds no task.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["MIRROR", "PACKAGES", "SUITE", "TAG", "build", "present"]

SUITE = "bookworm"
PACKAGES = ("python3", "python3-pytest", "python-is-python3", "git", "procps")
MIRROR = "http://deb.debian.org/debian"
_CHANGES = ("ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", "WORKDIR /testbed")
_RECIPE = repr((SUITE, PACKAGES, _CHANGES))
TAG = f"stepwise-swe-bench:{hashlib.sha256(_RECIPE.encode()).hexdigest()[:12]}"
"""The image's name: the recipe's hash (the suite, the packages, the image configuration)."""


def present(tag: str = TAG) -> bool:
    """Whether the engine holds ``tag``."""
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return done.returncode == 0


def build(mirror: str = MIRROR) -> str:
    """Build ``TAG`` unless the engine holds it; its name."""
    if present():
        return TAG
    missing = [tool for tool in ("debootstrap", "docker") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"building {TAG} needs {' and '.join(missing)} (apt-get install -y debootstrap docker.io)")
    with tempfile.TemporaryDirectory(prefix="stepwise-swe-bench-rootfs-") as root:
        include = ",".join(PACKAGES)
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={include}", SUITE, root, mirror], check=True)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            subprocess.run(["find", f"{root}/{cache}", "-type", "f", "-delete"], check=True)
        Path(root, "testbed").mkdir()
        changes = [arg for change in _CHANGES for arg in ("--change", change)]
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", *changes, "-", TAG], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL
        )
        if tar.wait() != 0:
            raise SystemExit(f"tar of {root} failed")
    return TAG


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default=MIRROR, help="Debian mirror debootstrap reads (default: %(default)s)")
    args = parser.parse_args(argv)
    print(build(args.mirror))


if __name__ == "__main__":
    main()
