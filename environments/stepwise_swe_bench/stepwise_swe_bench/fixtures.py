"""The repositories of the bundled offline tasks (``instances.FIXTURES``).

Each task of the bundled task repository adds one directory to swebench's layout, ``repo/``:
the project's files at the base commit.

A task's repository is committed once per process into a template git repository whose commit
is fixed by content (author, committer and dates are constants), so it must equal the task's
``base_commit``. Episode setup copies that template (bubblewrap) or streams it into the episode's
container as a tar archive (Docker): no git process.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .bwrap import hand_over, remove_tree
from .instances import FIXTURES, SweInstance

__all__ = ["FixtureError", "base_checkout", "commit_tree", "materialize"]

_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "stepwise-swe-bench",
    "GIT_AUTHOR_EMAIL": "fixtures@stepwise-swe-bench.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "stepwise-swe-bench",
    "GIT_COMMITTER_EMAIL": "fixtures@stepwise-swe-bench.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00",
    # The user's git configuration (signing, hooks, templates) must not change the commit.
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class FixtureError(RuntimeError):
    """A bundled task is inconsistent with its own files."""


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FixtureError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def commit_tree(source: Path, dest: Path, message: str) -> str:
    """Copy ``source`` to ``dest`` as a fresh git repository with one commit; its hash."""
    shutil.copytree(source, dest, ignore=_IGNORE)
    _git(dest, "-c", "init.defaultBranch=main", "init", "--quiet", "--template=")
    _git(dest, "add", "--all")
    _git(dest, "commit", "--quiet", "--no-verify", "--message", message)
    return _git(dest, "rev-parse", "HEAD")


@functools.cache
def _templates() -> Path:
    root = Path(tempfile.mkdtemp(prefix="stepwise-swe-bench-repos-"))
    atexit.register(remove_tree, root)
    return root


_TEMPLATES_LOCK = threading.Lock()


def _template(instance_id: str, base_commit: str) -> Path:
    """The task's template repository, built on first use (rollouts set up in threads)."""
    with _TEMPLATES_LOCK:
        return _build_template(instance_id, base_commit)


@functools.cache
def _build_template(instance_id: str, base_commit: str) -> Path:
    source = FIXTURES / "tasks" / instance_id / "repo"
    if not source.is_dir():
        raise FixtureError(f"bundled task {instance_id!r} has no repo/ directory at {source}")
    dest = Path(tempfile.mkdtemp(dir=_templates())) / instance_id
    head = commit_tree(source, dest, f"{instance_id}: base")
    if head != base_commit:
        raise FixtureError(
            f"bundled task {instance_id!r}: its repo/ commits to {head}, but task.yaml says "
            f"base_commit {base_commit}; the files or the recorded commit are wrong"
        )
    return dest


def base_checkout(instance: SweInstance) -> Path:
    """The bundled task's template: a git checkout of its base commit that no sandbox can
    write (grading copies it, ``BwrapSandbox.pristine``)."""
    return _template(instance.instance_id, instance.base_commit)


def materialize(instance: SweInstance, dest: Path) -> None:
    """Put the bundled task's repository, a git checkout of its base commit, at ``dest``
    (missing, or an empty directory: a volume) and hand it to the sandbox identity."""
    shutil.copytree(base_checkout(instance), dest, symlinks=True, dirs_exist_ok=True)
    hand_over(dest)
