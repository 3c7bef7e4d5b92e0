"""torchtitan main's Verifiers integration as a test input, and stand-ins for what it imports
that torchtitan 0.3.0 lacks (README.md here says which files, from where, at which commit).

torchtitan main is not on PyPI, and its code stays out of this repository (as prime-rl's does:
a test input, never the project's code): ``STEPWISE_TORCHTITAN_MAIN`` names a folder holding
``torchtitan/rl/examples/verifiers/{rollouter,data,env_server,generation_server}.py`` as the
code search stores them, unedited; ``stored()`` checks each against its sha256 below.
``install(folder)`` puts that folder and ``tree/`` (the stand-ins) on ``torchtitan.__path__``,
so ``torchtitan.rl.*`` resolves to main's files where stored and to a stand-in elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

STORED_VAR = "STEPWISE_TORCHTITAN_MAIN"
REQUIRE_VAR = "STEPWISE_REQUIRE_TORCHTITAN_MAIN"  # set: a missing or edited folder fails, not skips
TREE = Path(__file__).parent / "tree"
VERIFIERS = "torchtitan/rl/examples/verifiers"

# file -> (commit of pytorch/torchtitan the code search stored it at, sha256 of the stored text)
MANIFEST = {
    "rollouter.py": (
        "13714917089c66e0823293e32ae2210ddd24119f",
        "a170036df9ae86597a0614bd648558bcf71ce4128f57b4af6423e3f3f03ce484",
    ),
    "data.py": (
        "13714917089c66e0823293e32ae2210ddd24119f",
        "d274ee14bb1a8dac69d100d90a02604b71df47c587a64710a847cb5b1c412565",
    ),
    "generation_server.py": (
        "17621c88c5d6fff8d6bf57fb0a930871e383ca0c",
        "98cce10d5f5d4fbab2ffc187fadcc2cffaa2c5305bb6516b4568068c3bdd0547",
    ),
    "env_server.py": (
        "1a89b4ece65eead515ae7827b58709098d1ca993",
        "22c7d035ed01c02ec8591fe4508c86659371d8ac5652a7318dfab634a4856bb7",
    ),
}


def stored() -> tuple[Path | None, str]:
    """The folder ``STEPWISE_TORCHTITAN_MAIN`` names, if every manifest file is there unedited;
    else None and why not."""
    folder = os.environ.get(STORED_VAR)
    if not folder:
        return None, f"{STORED_VAR} is not set (see tests/hosts/torchtitan_main/README.md)"
    for name, (_, sha256) in MANIFEST.items():
        path = Path(folder, VERIFIERS, name)
        if not path.is_file():
            return None, f"{STORED_VAR}={folder} has no {VERIFIERS}/{name}"
        if hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            return None, f"{path} is not the stored text (sha256 differs from the manifest)"
    return Path(folder), ""


def install(folder: str | os.PathLike[str]) -> Callable[[], None]:
    """Make ``torchtitan.rl`` (and ``torchtitan.components.renderer``) importable: main's stored
    files first, then the stand-ins. Both are namespace portions (no ``__init__.py``), so they
    merge. Returns the undo, which also forgets every module imported from them (other tests
    see torchtitan 0.3.0 alone again)."""
    import torchtitan
    import torchtitan.components

    added = [
        (torchtitan.__path__, str(Path(folder, "torchtitan"))),
        (torchtitan.__path__, str(TREE / "torchtitan")),
        (torchtitan.components.__path__, str(TREE / "torchtitan" / "components")),
    ]
    for path, root in added:
        if root not in path:
            path.append(root)

    def undo() -> None:
        for path, root in added:
            if root in path:
                path.remove(root)
        gone = ("torchtitan.rl", "torchtitan.components.renderer", "verifiers_stepwise.hosts.torchtitan.main")
        for name in [n for n in sys.modules if n in gone or n.startswith("torchtitan.rl.")]:
            del sys.modules[name]
        for package, name in ((torchtitan, "rl"), (torchtitan.components, "renderer")):
            if hasattr(package, name):
                delattr(package, name)

    return undo


def child_site(folder: Path, into: Path) -> Path:
    """A ``sitecustomize.py`` in ``into`` that installs ``folder`` in every Python started with
    ``into`` on PYTHONPATH: main's env server is a spawned process that imports main's files."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "sitecustomize.py").write_text(
        f"from tests.hosts.torchtitan_main import install\ninstall({str(folder)!r})\n"
    )
    return into
