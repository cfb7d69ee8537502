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
import json
import os
import re
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

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


# How far ``frozen_in_index`` looks: first the files and folders a write touches (``_written_first``),
# then the index's entries this many levels down (the keyword index's files at the third, its memory
# indexes' and the vector tables' at the fourth), level by level. No more than ``FROZEN_ENTRIES``
# entries are read from folders and no more than that many asked, and a folder's listing is read no
# further than ``FROZEN_CROWDED`` entries: a big vault's vector table holds tens of thousands of data
# and version files, each written once and never again (a write adds new ones: the folder's own
# flag is what stops it), and reading them whole cost tens of milliseconds at every health call.
FROZEN_DEPTH = 4
FROZEN_ENTRIES = 2000
FROZEN_CROWDED = 256

# The index's layout (stores/bm25.py, stores/bm25_search.py, the vector tables' LanceDB folders),
# named here because this module imports the errors only. A keyword index: a Tantivy folder, whose
# commit rewrites ``meta.json`` under its lock files; a pair of them for the vault and for each
# agent's memory (``memory/<agent>/``) and for every agent's memory (``memory-all``). A vector
# table: ``<name>.lance``, whose write adds files to its folders and a manifest to ``_versions``.
_KEYWORD_PAIR = ("chunks", "pages")
_KEYWORD_FILES = ("meta.json", ".managed.json", ".tantivy-writer.lock", ".tantivy-meta.lock")
_LANCE_FOLDERS = ("_versions", "data", "_transactions", "_indices")
_LANCE_HINT = "latest_version_hint.json"
_U64_MAX = 2**64 - 1  # LanceDB's second naming of manifests: this minus the version, 20 digits


class IndexFlags(NamedTuple):
    """What ``frozen_in_index`` found: the first flagged entry (None: none), and whether every
    entry within its reach was asked (False: it stopped at ``FROZEN_ENTRIES`` or passed over a
    crowded folder's files, so a flag may be where it did not look)."""

    found: Path | None
    complete: bool


class _Walk:
    """The entries read and asked so far, each bounded by ``FROZEN_ENTRIES``."""

    def __init__(self) -> None:
        self.read = 0
        self.asked: set[Path] = set()
        self.complete = True

    def ask(self, path: Path) -> bool | None:
        """Whether ``path`` is flagged (False when asked before); None when the budget is spent."""
        if path in self.asked:
            return False
        if len(self.asked) >= FROZEN_ENTRIES:
            self.complete = False
            return None
        self.asked.add(path)
        return frozen(path)

    def listing(self, folder: Path) -> list[os.DirEntry[str]]:
        """The entries of ``folder``, read lazily and no further than ``FROZEN_CROWDED + 1`` (a
        crowded folder) or the budget; [] when it is gone or unreadable (its own error is said
        elsewhere)."""
        entries: list[os.DirEntry[str]] = []
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    if self.read >= FROZEN_ENTRIES or len(entries) > FROZEN_CROWDED:
                        self.complete = False
                        break
                    self.read += 1
                    entries.append(entry)
        except OSError:
            pass
        return entries


def _latest_manifests(versions: Path) -> list[Path]:
    """The vector table's latest manifest, as its hint file names its version (either naming)."""
    try:
        version = int(json.loads((versions / _LANCE_HINT).read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [versions / f"{version}.manifest", versions / f"{_U64_MAX - version:020d}.manifest"]


def _written_first(
    index_dir: Path, walk: _Walk, agents: Sequence[str] | None, tables: Sequence[str] | None
) -> list[Path]:
    """The files and folders a write touches next: the manifest's three files, each keyword
    index's folder, ``meta.json`` and lock files, each vector table's folders, version hint and
    latest manifest. The agents' memory indexes and the vector tables by the names given (the
    ones the daemon has open), else as their folders list them (as far as ``_Walk.listing``
    reads)."""
    manifest = index_dir / "manifest.sqlite"
    # In the order a write meets them, so that status names the file a refused write names: the
    # ``-shm`` (mapped at every transaction's start: ``immutable_words``), the ``-wal`` (the
    # commit), the database (the checkpoint), then the folder (new files). The folder asked first
    # named manifest.sqlite or the folder under `chattr -R +i` while the write said the ``-shm``.
    paths = [*(manifest.with_name(manifest.name + end) for end in ("-shm", "-wal")), manifest, index_dir]
    bm25 = index_dir / "bm25"
    memory = bm25 / "memory"
    paths.append(memory)
    if agents is None:
        agent_dirs = sorted(Path(e.path) for e in walk.listing(memory) if e.is_dir(follow_symlinks=False))
    else:
        agent_dirs = [memory / name for name in sorted(agents)]
    for folder in (bm25, bm25 / "memory-all", *agent_dirs):
        paths.append(folder)
        for pair in _KEYWORD_PAIR:
            paths += [folder / pair, *(folder / pair / name for name in _KEYWORD_FILES)]
    vectors = index_dir / "vectors"
    paths.append(vectors)
    if tables is None:
        table_dirs = sorted(Path(e.path) for e in walk.listing(vectors) if e.name.endswith(".lance"))
    else:
        table_dirs = [vectors / f"{name}.lance" for name in sorted(tables)]
    for table in table_dirs:
        versions = table / "_versions"
        paths += [table, *(table / name for name in _LANCE_FOLDERS), versions / _LANCE_HINT]
        paths += [versions / "_latest.manifest", *_latest_manifests(versions)]
    return paths


def frozen_in_index(
    index_dir: Path,
    *,
    agents: Sequence[str] | None = None,
    tables: Sequence[str] | None = None,
    deep: bool = True,
) -> IndexFlags:
    """The first file or folder of the index that is immutable or append-only (``found``, None
    when none is: while one is, writes to the index fail; ``health``'s ``index.immutable``), and
    whether every entry within reach was asked (``complete``, ``index.immutable_checked``). The
    files a write touches first (``_written_first``; ``agents``/``tables``: the memory indexes and
    vector tables by name, no folder listed), then, with ``deep``, every entry ``FROZEN_DEPTH``
    levels down, level by level in name order, within ``FROZEN_ENTRIES`` and ``FROZEN_CROWDED``: a
    flag past the bound was missed without a word, and a flag on the entries a write touches never
    is. Without ``deep`` nothing is listed, and ``complete`` is False unless a flag was found."""
    walk = _Walk()
    for path in _written_first(index_dir, walk, agents, tables):
        flagged = walk.ask(path)
        if flagged is None:
            return IndexFlags(None, False)
        if flagged:
            return IndexFlags(path, walk.complete)
    if not deep:
        return IndexFlags(None, False)
    level = [index_dir]
    for _ in range(FROZEN_DEPTH):
        below: list[Path] = []
        for folder in level:
            entries = walk.listing(folder)
            if len(entries) > FROZEN_CROWDED:  # its files are written once: only its folders
                entries = [e for e in entries if e.is_dir(follow_symlinks=False)]
                walk.complete = False  # its files not asked (and its listing not read whole)
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                flagged = walk.ask(path)
                if flagged is None:
                    return IndexFlags(None, False)
                if flagged:
                    return IndexFlags(path, walk.complete)
                if entry.is_dir(follow_symlinks=False):
                    below.append(path)
        level = below
    return IndexFlags(None, walk.complete)


# Connections left open (``leave_open``): one per manifest the stop closes, and while the daemon
# runs one per database file at most (``close_unwritten``), only where SQLite's checkpoint at close
# cannot be switched off.
_left_open: list[sqlite3.Connection] = []
# The database files (device, inode) one of those is a connection of: while it stays open, another
# connection's close is never the file's last, so it neither checkpoints nor writes the -shm.
_kept_files: set[tuple[int, int]] = set()

# What ``close_unwritten`` did instead of a plain close (in words for the log).
CLOSED_UNWRITTEN = "closed without its checkpoint"
CLOSED_BESIDE_KEPT = "closed: a connection of the same file is kept open, so this close was not the last"
LEFT_OPEN = "left open: its checkpoint at close could not be switched off here"


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def leave_open(db: sqlite3.Connection, path: Path | None = None) -> None:
    """Never close ``db``, a writer whose ``-shm`` is immutable at the stop: SQLite's close of a
    database's last connection checkpoints and writes that file's mapping, and the kernel kills
    the process with SIGBUS. Referenced for the life of the process, one reference more than any
    holder gives back, so neither a collection nor the interpreter's exit closes it; the exit
    unmaps it, and the next open replays the write-ahead log (nothing lost). While the daemon runs
    a close goes through ``close_unwritten`` instead (each kept connection holds descriptors),
    which comes here only where the checkpoint at close cannot be switched off (``path``: the
    database file, recorded so that its other connections close as always)."""
    _left_open.append(db)
    if path is not None and (kept := _file_id(path)) is not None:
        _kept_files.add(kept)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(db))


# SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (sqlite3.h, SQLite 3.16): the close of a database's last
# connection then neither checkpoints nor removes the write-ahead log, and writes nothing into
# the -shm; the next open replays the log.
_NO_CKPT_ON_CLOSE = 1006


def no_checkpoint_at_close(db: sqlite3.Connection, path: Path) -> bool:
    """Switch off the checkpoint at ``db``'s close (``_NO_CKPT_ON_CLOSE``; ``path``: its database
    file); whether that was done. Python 3.12 has ``setconfig`` for it; on Python 3.11 (Linux)
    SQLite's own call is made on the connection's handle (``_db_config_311``); elsewhere False."""
    setconfig = getattr(db, "setconfig", None)
    if setconfig is not None:
        try:
            setconfig(_NO_CKPT_ON_CLOSE, True)
        except (sqlite3.Error, ValueError):
            return False
        return True
    return _db_config_311(db, path)


def _db_config_311(db: sqlite3.Connection, path: Path) -> bool:
    """``sqlite3_db_config(handle, NO_CKPT_ON_CLOSE, 1, &done)`` through ctypes on CPython 3.11
    (``_handle_311``); True only when SQLite answered SQLITE_OK and reported the setting on (its
    ``done``). Linux only: a variadic call through ctypes passes its arguments where C expects them
    there (not on macOS on arm64). Tested: the -wal outlives the close of the file's last
    connection, which it does not when the call did nothing."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        # The extension module sqlite3 is built on: SQLite's symbols are found through it.
        lib = ctypes.CDLL(sys.modules["_sqlite3"].__file__ or "")
        config = lib.sqlite3_db_config
    except (OSError, AttributeError, KeyError):
        return False
    handle = _handle_311(lib, db, path)
    if handle is None:
        return False
    done = ctypes.c_int(0)
    rc = config(ctypes.c_void_p(handle), ctypes.c_int(_NO_CKPT_ON_CLOSE), ctypes.c_int(1), ctypes.byref(done))
    return rc == 0 and done.value == 1


def _handle_311(lib: Any, db: sqlite3.Connection, path: Path) -> int | None:
    """SQLite's handle of ``db``: CPython 3.11's connection object holds it right after its
    object header (Modules/_sqlite/connection.h; ``object.__basicsize__`` is the header's size on
    this build, a debug build's too). What is checked: that the handle is not NULL (``db``
    closed) and that SQLite names ``path`` as its main database (``sqlite3_db_filename``), which
    catches a valid handle of another database. That question reads through the pointer itself:
    a different layout would crash it, not fail it, which is why only CPython 3.11 is asked, whose
    layout is known (3.12 has ``setconfig``)."""
    handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
    if not handle:
        return None
    try:
        file_of = lib.sqlite3_db_filename
        file_of.restype, file_of.argtypes = ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]
        named = file_of(handle, b"main")
        return int(handle) if named and os.path.samefile(os.fsdecode(named), path) else None
    except (OSError, AttributeError):
        return None


def close_unwritten(db: sqlite3.Connection, path: Path) -> str | None:
    """``db.close()`` (``path``: its database file), which writes nothing into the database's
    ``-shm`` while that file is immutable: the close of the last connection checkpoints into the
    mapped file, and the kernel answered with SIGBUS (a start whose keyword index failed to open
    after the flag came, a failed switch to writable closing its stores). Its checkpoint is
    switched off then (``no_checkpoint_at_close``: the log stays, the next open replays it).
    Where that cannot be done (another Python, another system) the connection is left open
    (``leave_open``), one per database file: once one is, the file's other connections close as
    always, their close not being the last. None when it closed as always, else what was done
    instead: ``CLOSED_UNWRITTEN``, ``CLOSED_BESIDE_KEPT`` or ``LEFT_OPEN``."""
    shm = path.with_name(path.name + "-shm")
    if not frozen(shm):
        db.close()
        return None
    if no_checkpoint_at_close(db, path):
        db.close()
        return CLOSED_UNWRITTEN
    if _file_id(path) in _kept_files:
        db.close()
        return CLOSED_BESIDE_KEPT
    leave_open(db, path)
    return LEFT_OPEN


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
