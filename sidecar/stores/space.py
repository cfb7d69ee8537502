"""Whether a folder's disk is full: asked before a store that fails to open is taken for damaged.

SQLite reports a full disk at open as "disk I/O error" (it cannot size its shared-memory file),
not as "database or disk is full"; taken for damage, the manifest and the keyword index were
moved aside and everything rebuilt once there was space again. So before anything is moved the
disk is asked: the space free to this user, then a small write that must reach the disk. SQLite
says "disk I/O error" for a write the OS refuses for want of permission too (EPERM, EACCES), and
Tantivy names no path: ``denied_at`` asks the folder before a failure is taken for damage.

Imports only the standard library and the project's errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
from pathlib import Path

from sidecar.contracts.errors import PermissionDeniedError, is_disk_full

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


def denied_at(path: Path) -> str | None:
    """ "permission denied: <where>" when this process may not write the store at ``path`` (a
    folder, or a SQLite file with its -wal and -shm beside it): a file cannot be made, renamed and
    removed in its folder (EACCES, EPERM: a mode, an immutable folder, a privacy control, a share's
    rights), or a folder of it, or a file SQLite writes in place, may not be written. None when it
    may, or when it cannot be asked. Not the files of Tantivy or LanceDB: they never write one in
    place (a new file, or a rename over the old), so a read-only one (a restore from a backup)
    stops nothing and says nothing of the store's damage."""
    folder = path if path.is_dir() else path.parent
    refused = _probe(folder)
    if refused is not None:
        return refused
    if path.is_dir():
        written = [Path(top, name) for top, dirs, _ in os.walk(path) for name in dirs]
    else:
        written = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    for item in written:
        if not os.access(item, os.W_OK):
            return f"permission denied: {item}"
    return None


def _probe(folder: Path) -> str | None:
    """ "permission denied: <folder>" when a file cannot be made, renamed or removed in
    ``folder`` for want of permission (what a store's writes do there); None otherwise."""
    made = folder / f".write-probe-{secrets.token_hex(4)}"
    moved = made.with_name(made.name + "-renamed")
    try:
        os.close(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.rename(made, moved)
        os.unlink(moved)
    except OSError as exc:
        for left in (made, moved):
            with contextlib.suppress(OSError):
                left.unlink()
        return f"permission denied: {folder}" if exc.errno in (errno.EACCES, errno.EPERM) else None
    return None


# SQLite's result codes a write the OS refused can come back as: no permission, read-only, an
# I/O error (EPERM on a write is "disk I/O error"), a file that cannot be opened.
_REFUSED_SQLITE = frozenset({3, 8, 10, 14})


def fault_words(exc: BaseException, path: Path) -> str:
    """How a failed write of the store at ``path`` reads in status and a reply: SQLite's "disk
    I/O error" for a write the OS refused for want of permission read as a dying disk (status said
    so while the same folder was only immutable); the store is asked then, and says
    "permission denied: <where>". A refusal that says its own words (an immutable ``-shm``:
    which file, ``chattr -i``) keeps them: the folder's "permission denied" hid what to do."""
    if isinstance(exc, PermissionDeniedError):
        return str(exc)
    if isinstance(exc, sqlite3.Error) and not is_disk_full(exc):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None or code & 0xFF in _REFUSED_SQLITE:
            denied = denied_at(path)
            if denied is not None:
                return denied
    return str(exc)
