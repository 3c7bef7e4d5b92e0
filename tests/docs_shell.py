"""The docs' shell blocks, run as a reader copies them (issue 37: every shown command runs as
copied against the local model server, or says on its own line what it needs).

    block = shell_blocks("environments/stepwise_sums/README.md")[0]
    for ran in run_block(block, tmp_path):
        assert ran.returncode == 0, ran

A block runs in one ``bash`` from ``cwd``, as written, but for three things a test must do:
the local server's documented port 8000 becomes a free one, this interpreter's scripts come
first on ``PATH`` (the reader's activated environment) with the Hugging Face hub offline, and
``pip install`` lines are left out (this environment already has what they install, editable
from this checkout; installing again would replace that). Each other command's exit status and
output are kept; a backgrounded command (the server), ``export`` and ``kill`` run as they are.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Ran", "commands", "run_block", "shell_blocks"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str


def shell_blocks(doc: str, after: str | None = None) -> list[str]:
    """The ```` ```bash ```` blocks of ``doc`` (a path from the repository root), from the line
    ``after`` on when given."""
    text = (ROOT / doc).read_text()
    if after is not None:
        text = text[text.index(after) :]
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    """The block's commands as bash reads them: a line, or lines joined by a trailing backslash."""
    return [line.strip() for line in re.sub(r"\\\n", " ", block).splitlines() if line.strip()]


def run_block(block: str, cwd: Path, *, timeout: float = 600) -> list[Ran]:
    """Run ``block`` (see the module docstring); one :class:`Ran` per command it keeps."""
    port = _free_port()
    script, kept = [], []
    for command in commands(block.replace("8000", str(port))):
        if command.startswith("pip install"):
            continue
        if command.split("#")[0].rstrip().endswith("&") or command.startswith(("export ", "kill ")):
            script.append(command)
            continue
        n = len(kept)
        kept.append(command)
        script.append(f"{{ {command}\n}} >.ran{n}.out 2>.ran{n}.err; echo $? >.ran{n}.rc")
    script.append("wait")
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "200",
    }
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=environment, timeout=timeout, check=True)
    return [
        Ran(
            command,
            int((cwd / f".ran{n}.rc").read_text()),
            (cwd / f".ran{n}.out").read_text(),
            (cwd / f".ran{n}.err").read_text(),
        )
        for n, command in enumerate(kept)
    ]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
