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
# Less free than this beside a store that failed to open: the failure is taken for the disk's (an
# open, a schema step or a log may want more than the probe; a damaged store there is moved aside
# once there is room).
LOW_BYTES = 1 << 20


def free_bytes(folder: Path) -> int | None:
    """The space free to this user on ``folder``'s disk (root may use the reserve); None when it
    cannot be asked."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def sqlite_temp_dir() -> Path | None:
    """The folder SQLite puts its temporary files in on Unix (a VACUUM's copy of the whole
    database among them): the first writable folder of $SQLITE_TMPDIR, $TMPDIR, /var/tmp,
    /usr/tmp, /tmp and the working folder, as SQLite looks for it; None when none is."""
    # Only asked how much room they have: nothing is written there.
    fixed = ("/var/tmp", "/usr/tmp", "/tmp", ".")  # noqa: S108
    for name in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), *fixed):
        if name and os.path.isdir(name) and os.access(name, os.W_OK | os.X_OK):
            return Path(name)
    return None


def same_disk(a: Path, b: Path) -> bool:
    """Whether two folders are on one file system (True when either cannot be asked: the space
    both need is then counted on one)."""
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return True


def disk_full_at(folder: Path) -> bool:
    """True when ``folder``'s disk is (nearly) full: less than ``LOW_BYTES`` free to this user
    (root may use the filesystem's reserve), or a written and synced probe file of
    ``PROBE_BYTES`` fails for lack of space. A folder that cannot be asked is not called full."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    if free * st.f_frsize < LOW_BYTES:
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
