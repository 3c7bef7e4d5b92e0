"""What the model's tools do, over a ``Sandbox``: run a command, view a file, edit or create one.

File access goes through the sandbox too (``cat``, ``base64``), never through the host's file
system, so a path or a symlink the model made can only reach what its commands can reach. Every
function returns the text the model sees and the ``CommandResult`` it came from.
"""

from __future__ import annotations

import base64
import shlex

from .output import CommandResult, printable
from .sandbox import Sandbox

__all__ = ["ToolError", "create_file", "edit_file", "run_command", "view_path"]

MAX_EDIT_BYTES = 2 * 1024 * 1024
_SNIPPET_CONTEXT = 4


class ToolError(ValueError):
    """The tool call cannot be carried out as asked; the message says why, for the model."""


def _cap(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]}\n[... {len(text) - max_chars} characters omitted ...]\n{text[-half:]}"


async def run_command(sandbox: Sandbox, command: str, max_chars: int) -> tuple[str, CommandResult]:
    result = await sandbox.run(command)
    return _cap(result.describe(), max_chars), result


async def view_path(
    sandbox: Sandbox, path: str, start_line: int, end_line: int | None, max_chars: int
) -> tuple[str, CommandResult]:
    """A directory's entries (two levels, without .git), or a file's lines with numbers."""
    if start_line < 1 or (end_line is not None and end_line < start_line):
        raise ToolError("start_line must be >= 1 and end_line >= start_line")
    # find reads a leading "-" as an expression (``-delete``!): such a path gets a "./".
    quoted = shlex.quote(f"./{path}" if path.startswith("-") else path)
    last = "$" if end_line is None else str(end_line)
    command = (
        f"if [ -d {quoted} ]; then find {quoted} -maxdepth 2 -not -path '*/.git*' | sort; "
        f"else nl -ba -w6 -s'  ' -- {quoted} | sed -n '{start_line},{last}p'; fi"
    )
    result = await sandbox.run(command)
    if result.exit_code != 0 or result.termination != "exit":
        return _cap(result.describe(), max_chars), result
    return _cap(printable(result.output) or "(empty)\n", max_chars), result


async def _read(sandbox: Sandbox, path: str) -> bytes:
    quoted = shlex.quote(path)
    result = await sandbox.run(
        f"test -f {quoted} || {{ echo 'not a regular file' >&2; exit 2; }}; "
        f"test $(stat -c %s -- {quoted}) -le {MAX_EDIT_BYTES} || "
        f"{{ echo 'file too large to edit' >&2; exit 3; }}; base64 -w0 -- {quoted}",
        kept_bytes=MAX_EDIT_BYTES * 2,
    )
    if result.exit_code != 0 or result.truncated:
        raise ToolError(f"cannot read {path}: {result.output.strip()[-300:]}")
    return base64.b64decode(result.output.strip())


async def _write(sandbox: Sandbox, path: str, data: bytes) -> CommandResult:
    quoted = shlex.quote(path)
    result = await sandbox.run(f'mkdir -p -- "$(dirname -- {quoted})" && cat > {quoted}', stdin=data)
    if result.exit_code != 0:
        raise ToolError(f"cannot write {path}: {result.output.strip()[-300:]}")
    return result


def _snippet(text: str, around: int) -> str:
    """Numbered lines around character offset ``around``."""
    lines = text.splitlines()
    line = text.count("\n", 0, around)
    first, last = max(0, line - _SNIPPET_CONTEXT), min(len(lines), line + _SNIPPET_CONTEXT + 1)
    return "\n".join(f"{n + 1:6}  {lines[n]}" for n in range(first, last))


async def edit_file(sandbox: Sandbox, path: str, old: str, new: str, max_chars: int) -> tuple[str, CommandResult]:
    """Replace the one occurrence of ``old`` in the file with ``new``."""
    if not old:
        raise ToolError("`old` must not be empty; use `create` to write a whole file")
    try:
        text = (await _read(sandbox, path)).decode()
    except UnicodeDecodeError:
        raise ToolError(f"{path} is not UTF-8 text") from None
    count = text.count(old)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise ToolError(f"`old` {where} in {path}; it must occur exactly once (add context)")
    at = text.index(old)
    edited = text[:at] + new + text[at + len(old) :]
    result = await _write(sandbox, path, edited.encode())
    return _cap(f"Edited {path}:\n{_snippet(edited, at)}", max_chars), result


async def create_file(sandbox: Sandbox, path: str, content: str, max_chars: int) -> tuple[str, CommandResult]:
    """Write ``content`` to ``path`` (creating parent directories), replacing any file there."""
    result = await _write(sandbox, path, content.encode())
    return _cap(f"Wrote {len(content.encode())} bytes to {path}.", max_chars), result
