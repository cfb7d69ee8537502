"""A SQLite connection that runs no statement while its database's shared-memory file (``-shm``)
is immutable (``chattr +i``, a backup tool's or an admin's flag; macOS's ``uchg``): SQLite maps
that file and writes into the mapping, and the kernel answers a write into an immutable file's
mapping with SIGBUS, which kills the whole daemon without a word. Refused instead, as SQLite's
own error saying "permission denied: <file> is immutable", a fault that passes: the stores say so
and catch up once the flag is gone. A file immutable before the connection first maps it is
mapped read-only by SQLite and never written. Imports the errors only."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import PermissionDeniedError

# Linux's inode flags (<linux/fs.h>): FS_IOC_GETFLAGS, and the immutable and append-only flags,
# either of which refuses the writes into the mapping.
_GETFLAGS = 0x80086601
_FROZEN_LINUX = 0x10 | 0x20
# BSD and macOS flags in st_flags: UF_IMMUTABLE, UF_APPEND, SF_IMMUTABLE, SF_APPEND.
_FROZEN_BSD = 0x2 | 0x4 | 0x20000 | 0x40000


def frozen(path: Path) -> bool:
    """Whether the file at ``path`` is immutable or append-only (False when it is not there or
    its flags cannot be asked: a file system without them)."""
    if sys.platform.startswith("linux"):
        import fcntl

        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            flags = bytearray(8)
            fcntl.ioctl(fd, _GETFLAGS, flags)
        except OSError:  # ENOTTY and the like: no flags on this file system
            return False
        finally:
            os.close(fd)
        return bool(int.from_bytes(flags[:4], sys.byteorder) & _FROZEN_LINUX)
    try:
        return bool(getattr(os.lstat(path), "st_flags", 0) & _FROZEN_BSD)
    except OSError:
        return False


class FrozenShmError(sqlite3.OperationalError, PermissionDeniedError):
    """A statement not run: the database's ``-shm`` is immutable (see the module). SQLite's error
    for the stores' handling of a failed statement, a permission denied for everyone else (a
    request answers it in words, never as an internal error)."""


class GuardedConnection(sqlite3.Connection):
    """``sqlite3.connect(..., factory=GuardedConnection)``: each statement is run only while the
    database's ``-shm`` may be written (``shm``: that file, set by ``guarded_connect``)."""

    shm: Path | None = None

    def _check(self) -> None:
        if self.shm is not None and frozen(self.shm):
            raise FrozenShmError(
                f"permission denied: {self.shm} is immutable (chattr -i or chflags nouchg it): "
                "SQLite writes into that file's mapping, which an immutable file refuses"
            )

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check()
        return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check()
        return super().executemany(*args, **kwargs)

    def executescript(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check()
        return super().executescript(*args, **kwargs)


def guarded_connect(database: str | Path, path: Path, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(database, **kwargs)`` whose statements are refused while the ``-shm`` of
    the database file at ``path`` is immutable."""
    db = sqlite3.connect(database, factory=GuardedConnection, **kwargs)
    assert isinstance(db, GuardedConnection)
    db.shm = path.with_name(path.name + "-shm")
    try:
        db._check()  # nothing mapped yet: refused before the first statement
    except FrozenShmError:
        db.close()
        raise
    return db
