"""Storage faults for the reliability tests: a small tmpfs to fill to the last byte, bind mounts
(root and mount(2) needed; without them the tests that use these skip), and fast retries."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# Storage faults are retried from 0.5 s up to 1 s, so a test sees the recovery within seconds.
FAST_RETRY = {"SIDECAR_WATCH_RETRY_BASE_SECONDS": "0.5", "SIDECAR_WATCH_RETRY_MAX_SECONDS": "1"}


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (lazily unmounted after)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (disk-full case)")
    try:
        mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=30)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; the filler file is returned."""
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as fh:  # unbuffered: nothing left to flush on close
        for size in (1 << 16, 1):
            with contextlib.suppress(OSError):
                while fh.write(b"\0" * size):
                    pass
    return filler
