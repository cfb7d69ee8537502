"""Whether a folder's disk is full: asked before a store that fails to open is taken for damaged.

SQLite reports a full disk at open as "disk I/O error" (it cannot size its shared-memory file),
not as "database or disk is full"; taken for damage, the manifest and the keyword index were
moved aside and everything rebuilt once there was space again. So before anything is moved the
disk is asked: the space free to this user, then a small write that must reach the disk.

Imports only the standard library and the project's errors.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from sidecar.contracts.errors import is_disk_full

# About what SQLite's shared-memory file takes at open (32 KiB) with room to spare.
PROBE_BYTES = 64 * 1024


def disk_full_at(folder: Path) -> bool:
    """True when ``folder``'s disk has no room for ``PROBE_BYTES`` (free space, then a written
    and synced probe file, removed again). A folder that cannot be asked is not called full."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    if st.f_bavail * st.f_frsize < PROBE_BYTES:
        return True
    probe = folder / f".space-probe-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            written = os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return is_disk_full(exc)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return written < PROBE_BYTES
