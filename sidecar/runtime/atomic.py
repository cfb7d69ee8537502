"""Atomic file replacement: a reader sees the old bytes or the new ones, never a torn file.

Temp file in the target's folder (same filesystem, so the rename is atomic), fsync, rename over the
target, fsync the folder (so the rename itself survives a power cut). Imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, *, make_folder: bool = True) -> None:
    """Temp file in the same folder, fsync, rename over the target, fsync the folder.
    ``make_folder=False``: a missing folder fails (FileNotFoundError) and is not made again (a
    file kept inside a store's folder, which a drop of the store removed)."""
    if make_folder:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
