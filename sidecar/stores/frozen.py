"""A SQLite connection that starts no transaction while its database's shared-memory file (``-shm``)
is immutable (``chattr +i``, a backup tool's or an admin's flag; macOS's ``uchg``): SQLite maps
that file and writes into the mapping, and the kernel answers a write into an immutable file's
mapping with SIGBUS, which kills the whole daemon without a word. Refused instead, as SQLite's
own error saying "permission denied: <file> is immutable", a fault that passes: the stores say so
and catch up once the flag is gone. A file immutable before the connection first maps it is
mapped read-only by SQLite and never written. Imports the errors only."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import PermissionDeniedError

# statx(2)'s attributes (<linux/stat.h>): immutable and append-only, either of which refuses the
# writes into the mapping; the offsets of ``stx_attributes`` and ``stx_attributes_mask`` in its
# 256-byte ``struct statx``.
_STATX_FROZEN = 0x10 | 0x20
_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
# BSD and macOS flags in st_flags: UF_IMMUTABLE, UF_APPEND, SF_IMMUTABLE, SF_APPEND.
_FROZEN_BSD = 0x2 | 0x4 | 0x20000 | 0x40000


def _libc_statx() -> Any:
    """glibc's (or musl's) ``statx``, None where the C library has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.statx
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    call.restype = ctypes.c_int
    return call


_statx = _libc_statx() if sys.platform.startswith("linux") else None


def frozen(path: Path) -> bool:
    """Whether the file at ``path`` is immutable or append-only (False when it is not there or
    its flags cannot be asked: a file system or C library without them).

    Asked by path alone, never through a descriptor of the file: closing any descriptor of a file
    drops every POSIX lock the process holds on it, and SQLite keeps its cross-process WAL locks
    on the ``-shm`` (an open and close per statement let another process's open rebuild the
    shared memory under the daemon's mapping: SIGBUS, or "database disk image is malformed")."""
    if _statx is not None:
        buf = ctypes.create_string_buffer(256)
        if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, 0, buf) != 0:
            return False
        attributes = int.from_bytes(buf.raw[8:16], sys.byteorder)
        supported = int.from_bytes(buf.raw[56:64], sys.byteorder)
        return bool(attributes & supported & _STATX_FROZEN)
    if sys.platform.startswith("linux"):
        return False  # no statx in this C library: no check
    try:
        return bool(getattr(os.lstat(path), "st_flags", 0) & _FROZEN_BSD)
    except OSError:
        return False


# Connections left open at the stop (``leave_open``): one per manifest the stop closes, never more.
_left_open: list[sqlite3.Connection] = []


def leave_open(db: sqlite3.Connection) -> None:
    """Never close ``db``, a writer whose ``-shm`` is immutable at the stop: SQLite's close of a
    database's last connection checkpoints and writes that file's mapping, and the kernel kills
    the process with SIGBUS. Referenced for the life of the process, one reference more than any
    holder gives back, so neither a collection nor the interpreter's exit closes it; the exit
    unmaps it, and the next open replays the write-ahead log (nothing lost). For the stop only:
    a close while the daemon runs must close (each kept connection holds descriptors)."""
    _left_open.append(db)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(db))


class FrozenShmError(sqlite3.OperationalError, PermissionDeniedError):
    """A statement not run: the database's ``-shm`` is immutable (see the module). SQLite's error
    for the stores' handling of a failed statement, a permission denied for everyone else (a
    request answers it in words, never as an internal error)."""


class GuardedConnection(sqlite3.Connection):
    """``sqlite3.connect(..., factory=GuardedConnection)``: while the database's ``-shm`` is
    immutable (``shm``: that file, set by ``guarded_connect``) each transaction (its ``BEGIN``, or
    an autocommit statement) may only read: the connection is made ``query_only`` then, and a write
    is refused (``FrozenShmError``) before SQLite touches the file. The statements inside a
    transaction are not asked again: a bulk batch's inserts cost one question, and a flag set
    mid-transaction is the same race as one set between the question and the statement.

    A read writes into the ``-shm`` only to record the log's end it reads up to (a read mark) when
    no mark records it yet: after each commit the connection reads once (``_settle``), so a mark
    is there before the flag can come, and a read while it stays writes nothing. The search, the
    status and the memory list keep working on the connections already open; a new connection is
    refused while the flag stays (``guarded_connect``)."""

    shm: Path | None = None
    _settled = 0  # total_changes when the last commit was followed by a read
    _reading_only = False  # query_only set by ``_check`` while the -shm is immutable

    def _check(self, sql: object = "") -> None:
        if self.shm is None or self.in_transaction:
            return
        if frozen(self.shm):
            if isinstance(sql, str) and _WRITES_OUTSIDE_QUERY_ONLY.search(sql):
                raise FrozenShmError(immutable_words(self.shm))
            if not self._reading_only and not super().execute("PRAGMA query_only").fetchone()[0]:
                super().execute("PRAGMA query_only=ON")
                self._reading_only = True
        elif self._reading_only:
            super().execute("PRAGMA query_only=OFF")
            self._reading_only = False

    def _refused(self, exc: sqlite3.Error) -> BaseException:
        """A write refused by ``query_only`` while the -shm is immutable, said so; else ``exc``."""
        if self._reading_only and (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_READONLY:
            return FrozenShmError(immutable_words(self.shm))
        return exc

    def _settle(self) -> None:
        """Read once after a commit, so that a read mark records the log's new end (see the class)."""
        if not self.in_transaction and self.total_changes != self._settled:
            self._settled = self.total_changes
            with contextlib.suppress(sqlite3.Error):  # a busy file: the next read sets it
                super().execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check(args[0] if args else kwargs.get("sql", ""))
        try:
            cursor = super().execute(*args, **kwargs)
        except sqlite3.Error as exc:
            raise self._refused(exc) from exc
        self._settle()
        return cursor

    def executemany(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check(args[0] if args else kwargs.get("sql", ""))
        try:
            cursor = super().executemany(*args, **kwargs)
        except sqlite3.Error as exc:
            raise self._refused(exc) from exc
        self._settle()
        return cursor

    def executescript(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        self._check(args[0] if args else kwargs.get("sql", ""))
        try:
            cursor = super().executescript(*args, **kwargs)
        except sqlite3.Error as exc:
            raise self._refused(exc) from exc
        self._settle()
        return cursor


# SQLite's result code of a write refused (here: by query_only).
_SQLITE_READONLY = 8
# Statements that write the -shm though query_only lets them run: a checkpoint writes how far the
# log is copied back (and a restart of the log its header), a vacuum or a journal mode change too.
_WRITES_OUTSIDE_QUERY_ONLY = re.compile(
    r"\b(wal_checkpoint|incremental_vacuum|optimize|journal_mode|vacuum)\b", re.IGNORECASE
)


def immutable_words(shm: Path | None) -> str:
    """What a write refused for an immutable ``-shm`` says: what, which file, what to do."""
    return (
        f"the index is immutable: permission denied: {shm} is immutable (a backup tool's or an "
        "admin's flag), so nothing can be written to the index (searches are answered from it as "
        "it is); chattr -i it (chflags nouchg on macOS) and the daemon catches up by itself"
    )


def guarded_connect(database: str | Path, path: Path, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(database, **kwargs)`` whose writes are refused while the ``-shm`` of the
    database file at ``path`` is immutable; refused itself (``FrozenShmError``) while it is: a new
    connection's first read may write its read mark into the file."""
    shm = path.with_name(path.name + "-shm")
    if frozen(shm):
        raise FrozenShmError(immutable_words(shm))
    db = sqlite3.connect(database, factory=GuardedConnection, **kwargs)
    assert isinstance(db, GuardedConnection)
    db.shm = shm
    return db
