"""Root's own state directories (uid claims, volume records), where no sandbox user can write."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["root_only_dir"]


def root_only_dir(name: str) -> Path:
    """``/run/<name>`` (the temp directory when /run is not writable), made 0700 if missing;
    refused unless it is a directory only root can write, since its entries are trusted."""
    base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    path = base / name
    path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        raise PermissionError(f"{path} must be a directory only root can write")
    return path
