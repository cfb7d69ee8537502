"""The manifest (stdlib sqlite3): which files are indexed, their chunks, and what waits for vectors.

It is the root of the derived indexes: chunk text and metadata live here, Tantivy and LanceDB hold
only what they search on plus the chunk id. A file's ``state`` is written before the stores are
touched (``indexing`` / ``deleting``) and after they committed (``indexed``), so a start after a
crash knows what to redo. Imports ``errors``, the link graph's table (``notes.links``), its file's
schema, upgrades and compaction (``manifest_file``), its own vector bookkeeping (``vectorbook``), a
rebuild's copy of the notes (``manifest_aside``), its questions about its files
(``manifest_keys``), its chunks as answers read them and the counts (``manifest_chunks``), its
rows as Python holds them (``manifest_rows``), how a chunk's model text is stored
(``embedtext``), the day a note is about (``noteday``), and the disk's free space (``space``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import StoreError, StoresClosedError, store_error_class
from sidecar.notes import links
from sidecar.notes.dayformat import DayFormats
from sidecar.stores.closing import ClosingLock
from sidecar.stores.embedtext import split_embed_text
from sidecar.stores.frozen import FrozenShmError, frozen, guarded_connect
from sidecar.stores.manifest_aside import ManifestAside
from sidecar.stores.manifest_chunks import ManifestChunks
from sidecar.stores.manifest_file import (
    _PENDING_INDEX,
    _SCHEMA,
    SCHEMA_VERSION,
    ManifestFile,
    _newer,
    _refuse_newer,
    close_failed_open,
    close_left_reader,
)
from sidecar.stores.manifest_keys import ManifestKeys
from sidecar.stores.manifest_rows import ChunkRecord, FileRecord, NoteDay, _placed, _under
from sidecar.stores.space import PROBE_BYTES, free_bytes
from sidecar.stores.vectorbook import NO_VECTOR, VectorBook, _in_groups

SOURCE_RANK = {"memory": 0, "wiki": 1, "vault": 2}

# The manifest's own reader connections, shared by every thread (a read takes a free one, waits
# briefly for one when all are reading, then reads through the writer's: ``READER_WAIT_S``).
# Capped: SQLite's WAL has 4 read-mark slots (WAL_NREADER - 1); when all 4 were held by reads in
# flight at different snapshots at a commit, the writer's read after it
# (``frozen.GuardedConnection._settle``) recorded no mark of the new end, and once the ``-shm``
# turned immutable the next read wrote one into the mapped file: SIGBUS. Two of ours leave two
# slots for the settle read and another process's reader (doctor, a backup); two other processes
# in reads at that commit while ours read still take both.
READERS = 2
# How long a read waits for one of them before it reads through the writer's connection (under
# its lock, as the writer's own reads): ``health`` and searches were queued behind two long reads
# (a big vault's note days), and behind a read that never returned (a hung disk) forever.
READER_WAIT_S = 0.05
# A read through the writer's connection gives way to a write that queues for its lock: the write
# interrupts it (``sqlite3_interrupt``, made for a call from another thread), and the read is read
# again after it. A long read (a big vault's note days) held a memory write for as long as it ran.
# Not SQLite's progress handler: each of its questions takes the GIL back from the daemon's other
# threads, and asked every 1,000 steps a read with one busy Python thread beside it took twice as
# long (every 100,000 steps still half as long again on a loaded machine).
# How many times one read through the writer gives way. Once: a read that gave way to every write
# was restarted without end while writes kept coming (an indexing run), where before only the write
# waited; after it the read keeps the lock to its end and the writes wait, as they did.
GIVE_WAY_TIMES = 1

log = logging.getLogger(__name__)


# The properties whose values name a note (``frontmatter._AS_WRITTEN``, lower case).
_NAME_PROPERTIES = ("aliases", "alias", "tags", "tag", "title")


class ManifestClosedError(sqlite3.ProgrammingError, StoresClosedError):
    """A call on the manifest after its close (``ClosingLock``): SQLite's own error for a closed
    connection to the stores' handlers that catch those, a stop's refusal for everyone else."""


def closed_words(path: Path) -> str:
    """What a call on a closed manifest raises (``ManifestClosedError``): that call was refused,
    nothing more (a request that wrote before it says what it did itself: ``Dispatch``)."""
    return f"the index is closed (the daemon is stopping): {path} was not read or written by this step"


class Manifest(ManifestFile, ManifestAside, ManifestKeys, ManifestChunks, VectorBook):
    """Thread-safe wrapper over one sqlite connection (WAL); the daemon is the only writer."""

    _idle: list[sqlite3.Connection]
    _left_to_readers: list[sqlite3.Connection]

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path, self.read_only = path, read_only
        # Writes waiting for this manifest's ``_lock`` (``transaction``) that can run (not one
        # refused for an immutable ``-shm``): a read through its writer's connection gives way to
        # them (``_read_through_writer``). Each manifest's own: another's writes are no reason.
        # ``_waiting_count`` guards its changes and the next two (held for a few steps only):
        # whether a read through the writer that a queued write may interrupt runs, and whether
        # one did.
        self._writes_waiting, self._waiting_count, self._interruptible, self._interrupted = (
            0,
            threading.Lock(),
            False,
            False,
        )
        # The vault's daily-note name formats (Obsidian's settings, set by each sweep's read of
        # them): a note's date is read with them (``note_date``).
        self.day_formats: DayFormats = ()
        self.generation = 0  # committed write transactions: what a cache of rows is keyed by
        self._note_days: tuple[int, DayFormats, list[NoteDay]] | None = None
        # Every call on the writer's connection holds it, and so does ``close``: never run under a
        # statement in flight; after it, a call raises ``ManifestClosedError``.
        self._lock = ClosingLock(lambda: ManifestClosedError(closed_words(path)))
        # Searches read chunk views on connections of their own (``READERS`` at most, shared by
        # the threads): in WAL mode a reader sees the last commit and never waits for the writer,
        # whose transactions hold ``_lock`` for tens of ms under a load of memory writes (a search
        # waited up to 80 ms).
        self._readers: list[sqlite3.Connection] = []  # every one open (closed by ``close``)
        # ``_idle``: those no read holds now. ``_left_to_readers``: those a read held as ``close``
        # began, each closed by its read's own thread as it gives it back (``_give_back``); closed
        # by ``close``, its statement in flight returned into a freed connection (a segmentation
        # fault).
        self._idle, self._left_to_readers = [], []
        # Readers being opened (counted against ``READERS``); the read transaction a thread's
        # ``snapshot`` holds open on a reader (its reads go there).
        self._opening, self._pinned = 0, threading.local()
        self._reader_free = threading.Condition(threading.Lock())
        self._readers_shut = False  # closed: a read after it opens none (it fails on the writer)
        self._write_back_waits = False  # ``written_back`` said it waits for room (said once)
        self._counted = False  # in ``_open_writers``
        # The meta names of the indexer's row mark and the note row there, once it checked them:
        # a note's row written anew or deleted at the mark moves the mark down in the same
        # transaction (moved at the batch's end, a kill before it left the mark on a missing row,
        # taken at the next start for rows numbered elsewhere: every note read again).
        self.row_mark: Callable[[], tuple[str, str]] | None = None
        _refuse_newer(path)  # before anything writes to it (journal_mode=WAL rewrites the header)
        if read_only:
            self._open_read_only()
            return
        try:
            self._db = guarded_connect(path, path, check_same_thread=False, isolation_level=None)
            # A new file gives free pages back a step at a time (``give_back``); only settable
            # before its first page is written (switching WAL on writes one). An older file is
            # switched by ``_shrink``'s rewrite.
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # After a checkpoint the WAL is cut back to this (a bulk sweep grew it as large as the
            # manifest, and it kept that size on disk).
            self._db.execute("PRAGMA journal_size_limit=67108864")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise _newer(path, version)
            if version not in (0, 1, 2, 3, 4, 5, SCHEMA_VERSION):
                raise StoreError(f"manifest {path} has schema {version}, expected {SCHEMA_VERSION}")
            if version == 1:  # 0.1.0 manifests lack the column of the table being built
                self._db.execute("ALTER TABLE chunks ADD COLUMN has_next INTEGER NOT NULL DEFAULT 0")
            if version in (1, 2):
                self._add_embed_hashes()
            self._add_columns()
            self._db.executescript(_SCHEMA + _PENDING_INDEX)
            if links.ensure_schema(self._db) and version != 0:
                # Schema 4 adds the link graph, read from the notes themselves: forget their
                # stat and hash so the next sweep reads each once (chunk ids, and so vectors, stay).
                self._db.execute("UPDATE files SET mtime_ns = 0, hash = '' WHERE state = 'indexed'")
            self._add_embed_from(version, also=links.move_rows)
            if self._db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"manifest {path} failed its integrity check")
            self.store_embed_heads()
            self._shrink()
            self.inode = path.stat().st_ino  # the daemon notices a deleted or replaced file
            self._count_writer()
        except StoreError:
            # The file is not ours to keep open (a newer version's, a damaged one).
            close_failed_open(getattr(self, "_db", None), path)
            raise
        except sqlite3.DatabaseError as exc:
            # A full disk (a schema step or the WAL needs a page) is no damage: taken for one, the
            # manifest was moved aside and the keyword index and every vector with it.
            # Not left open (and its write-ahead log behind) by a failed start.
            close_failed_open(getattr(self, "_db", None), path)
            raise store_error_class(exc)(f"manifest {path} cannot be opened: {exc}") from exc

    @property
    def closed(self) -> bool:
        """Whether ``close`` ran: every call raises ``ManifestClosedError`` now."""
        return self._lock.closed

    def written_back(self) -> bool:
        """Whether every commit is in the main file now (the write-ahead log checkpointed and
        emptied), so that the index can be opened read-only (``_open_read_only``) once this
        writer is closed. False when the checkpoint fails (the file cannot grow: its disk is full):
        only a writer reads those commits then. Not tried while the disk has less room than the
        file must grow by: a failed try left the file grown into whatever space the user had
        freed, at every retry (the space check's, every few seconds), up to the log's size. Tried
        on a full disk when the file need not grow: the checkpoint then only frees space.
        Raises ``FrozenShmError`` while the ``-shm`` is immutable (the checkpoint writes it): said
        as "not enough space", status sent the user to free space the disk had."""
        wal = self.path.with_name(self.path.name + "-wal")
        with self._lock:
            try:
                if self._needs():
                    return False
                busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except FrozenShmError:
                raise
            except (sqlite3.Error, OSError):
                return False
            self._write_back_waits = False
            try:
                return busy == 0 and (not wal.exists() or wal.stat().st_size == 0)
            except OSError:
                return False

    def write_back_needs(self) -> int:
        """The free bytes the disk must have before the write-back is tried; 0 when it is tried now
        (there is room, or the file need not grow). Asked before a switch to writable, which would
        hold the requests and reopen the read-only handlers only to find it waits."""
        with self._lock:
            try:
                return self._needs()
            except (sqlite3.Error, OSError):
                return 0  # the write-back is tried and says what fails

    def _needs(self) -> int:
        """The free bytes the write-back waits for, 0 if none (``index_write_back_waits`` said
        once while it waits)."""
        grows = self._growth()
        free = free_bytes(self.path.parent)
        if not grows or free is None or grows + PROBE_BYTES <= free:
            return 0
        if not self._write_back_waits:
            log.warning(
                "index_write_back_waits needed_bytes=%d free_bytes=%d (tried again once there is room)",
                grows,
                free,
            )
        self._write_back_waits = True
        return grows + PROBE_BYTES

    def _growth(self) -> int:
        """By how many bytes writing the log back grows the main file: the database's size as
        this connection sees it (its log's commits included) past the file's size now."""
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return max(0, int(pages) * int(page_size) - self.path.stat().st_size)

    def _committed(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """A read of what is committed, on a reader connection (``_take_reader``) or the writer's.
        Every statement is read to its end (``fetchall``), so none keeps a read transaction, and
        with it an old snapshot, open past its call."""
        # Read-only (immutable): nothing writes, and a reader of its own would make files.
        if self.read_only or self._snapshot_here() is not None:
            return self._query(sql, args)
        gave_way = 0
        while True:
            db = self._take_reader()
            if db is not None:
                try:
                    return db.execute(sql, args).fetchall()
                finally:
                    self._give_back(db)
            got = self._read_through_writer([(sql, args)], may_give_way=gave_way < GIVE_WAY_TIMES)
            if got is not None:
                return got[0]
            gave_way += 1

    def _committed_together(self, reads: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        """Several reads of what is committed that all see one moment (health's counts: read one
        by one, a batch committed between two of them made ``skipped`` run a batch ahead of
        ``files``). In one read transaction on a reader connection: in WAL mode the writer
        commits meanwhile, unseen by it, and never waits for it (read through the writer's
        connection, each count held the writer's lock for its whole scan). Else through the
        writer's connection as one, under its lock (``_read_through_writer``)."""
        if (pinned := self._snapshot_here()) is not None:
            return [pinned.execute(sql, args).fetchall() for sql, args in reads]
        if self.read_only:
            with self._lock:
                return [self._db.execute(sql, args).fetchall() for sql, args in reads]
        gave_way = 0
        while True:
            db = self._take_reader()
            if db is not None:
                try:
                    return _in_one_transaction(db, reads)
                finally:
                    self._give_back(db)
            got = self._read_through_writer(reads, may_give_way=gave_way < GIVE_WAY_TIMES)
            if got is not None:
                return got
            gave_way += 1

    def _read_through_writer(
        self, reads: Sequence[tuple[str, Sequence[Any]]], *, may_give_way: bool
    ) -> list[list[Any]] | None:
        """``reads`` read on the writer's connection, under its lock (no commit runs amid them, so
        the commit's settle read still finds a read-mark slot: ``READERS``). Where it ``may_give_way``:
        None when a write queued for the lock before the read began or while it ran (the write
        interrupts it, ``_write_lock``: the caller tries again, on a reader or here). Else (it gave
        way ``GIVE_WAY_TIMES`` already) read to its end like any read under the lock, the writes
        waiting meanwhile; so inside this thread's own transaction too: the writes waiting wait
        for that anyway."""
        if self._owned_here() or not may_give_way:
            with self._lock:
                return [self._db.execute(sql, args).fetchall() for sql, args in reads]
        with self._lock:
            with self._waiting_count:  # a write counted after this interrupts the read
                if self._writes_waiting:
                    return None
                self._interruptible, self._interrupted = True, False
            try:
                return [self._db.execute(sql, args).fetchall() for sql, args in reads]
            except sqlite3.OperationalError:
                if not self._interrupted:
                    raise
                return None
            finally:
                # An interrupt that came as the read ended needs no clearing: SQLite clears it when
                # the next statement starts while none is active, and every read here leaves none.
                with self._waiting_count:
                    self._interruptible = False

    def _owned_here(self) -> bool:
        """Whether this thread holds the writer's lock (inside a transaction of its own)."""
        return self._lock._is_owned()

    def _take_reader(self) -> sqlite3.Connection | None:
        """A reader no read holds: an idle one, a new one while fewer than ``READERS`` are open,
        else the first one given back within ``READER_WAIT_S``. None (read through the writer)
        when none can be opened, when all are reading and the writer is idle (no write waits for
        it) or this thread holds it (inside a transaction), or when none came back in time. A read
        through the writer holds its lock, so no commit runs meanwhile and the commit's settle read
        still finds a slot; it gives way to a write that queues (``_read_through_writer``)."""
        deadline = time.monotonic() + READER_WAIT_S
        with self._reader_free:
            while not self._readers_shut and not self._idle and len(self._readers) + self._opening >= READERS:
                left = deadline - time.monotonic()
                if left <= 0 or self._owned_here() or (self._writer_free() and not self._writes_waiting):
                    return None
                self._reader_free.wait(left)
            if self._readers_shut:
                return None
            if self._idle:
                return self._idle.pop()
            self._opening += 1
        try:
            return self._open_reader()
        finally:
            with self._reader_free:
                self._opening -= 1
                self._reader_free.notify()  # one not opened leaves room for another try

    def _writer_free(self) -> bool:
        """Whether this thread could take the writer's lock now (no one holds it, or this thread
        does). Never waits, so it is safe under ``_reader_free``."""
        return self._lock.is_free()

    def _give_back(self, db: sqlite3.Connection) -> None:
        with self._reader_free:
            left = db in self._left_to_readers  # ``close`` began while this read ran: closed here
            if left:
                self._left_to_readers.remove(db)
            elif db in self._readers:
                self._idle.append(db)
            self._reader_free.notify()
        if left:
            close_left_reader(db, self.path)

    def _readers_taken(self) -> list[sqlite3.Connection]:
        """For ``close``: the readers no read holds, to close now; those a read holds are closed
        by that read's thread as it ends (``_give_back``). None is registered or taken after it (a
        read then goes through the writer, which is closed); any read waiting for one goes on."""
        with self._reader_free:
            idle = list(self._idle)
            self._left_to_readers.extend(r for r in self._readers if r not in idle)
            self._readers.clear()
            self._idle.clear()
            self._readers_shut = True
            self._reader_free.notify_all()
        return idle

    def _open_reader(self) -> sqlite3.Connection | None:
        """A reader on the writer's own file; None (read through the writer) when the file was
        deleted or replaced meanwhile (the daemon reports it; a restart repairs it) or cannot be
        opened: a reader must never create an empty manifest or read another one."""
        try:
            if self.path.stat().st_ino != self.inode:
                return None
            uri = "file:" + urllib.parse.quote(str(self.path)) + "?mode=ro"
            db = guarded_connect(uri, self.path, uri=True, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error):
            return None
        try:
            db.execute("PRAGMA query_only=ON")
            db.execute("PRAGMA cache_size=-1024")  # 1 MB a reader (the writer keeps the default)
        except sqlite3.Error:
            close_failed_open(db, self.path)  # was left open, one connection per try
            return None
        # Under ``_reader_free`` alone: a thread holding ``_lock`` (in a transaction) may wait on
        # it, so taking ``_lock`` here too could deadlock.
        with self._reader_free:
            if not self._readers_shut:
                self._readers.append(db)
                return db
        close_failed_open(db, self.path)  # closed meanwhile: its readers are gone
        return None

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """The writer's lock, taken for a write: counted in ``_writes_waiting`` while it waits, so
        that a read through the writer's connection gives way (``_read_through_writer``). Not
        counted while the ``-shm`` is immutable: the write will be refused (``FrozenShmError``),
        and a read stopped for it was read again for nothing. Raises ``ManifestClosedError``
        after ``close``."""
        with self._queued(counted=not frozen(self.path.with_name(self.path.name + "-shm"))):
            self._lock.__enter__()
        try:
            yield
        finally:
            self._lock.release()

    @contextmanager
    def _queued(self, *, counted: bool) -> Iterator[None]:
        """A wait for the writer's lock, ``counted`` in ``_writes_waiting``: a read through the
        writer's connection gives way to it (it is interrupted)."""
        try:
            if counted:
                with self._waiting_count:
                    self._writes_waiting += 1
                    if self._interruptible and not self._interrupted:
                        self._interrupted = True
                        # The read through the writer's connection gives way. Inside the try: a
                        # raise (the connection closed by a racing stop) leaves the count as it was.
                        # SQLite's interrupt is safe from any thread, and Python refuses it on a
                        # closed connection before it reaches SQLite.
                        with suppress(sqlite3.ProgrammingError):
                            self._db.interrupt()
            yield
        finally:
            if counted:
                with self._waiting_count:
                    self._writes_waiting -= 1

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self.generation += 1  # after the commit: a reader that saw the old count recomputes

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        if (pinned := self._snapshot_here()) is not None:
            return pinned.execute(sql, args).fetchall()
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read of this thread's in the block sees one committed moment and holds no write
        back (health: its counts, the largest waiting note, the links' totals...; through the
        writer's connection, each held its lock for its whole scan, and the links' count of a
        large vault alone made a write wait over 100 ms). One read transaction on a reader
        connection: in WAL mode the writer commits meanwhile, unseen by it. Reads inside this
        thread's own transaction stay on the writer (``_snapshot_here``). With no reader to be
        had (read-only, all busy), the reads run as without it, each on its own."""
        if self.read_only or getattr(self._pinned, "db", None) is not None:
            yield
            return
        db = self._take_reader()
        if db is None:
            yield
            return
        try:
            db.execute("BEGIN")
            self._pinned.db = db
            try:
                yield
            finally:
                self._pinned.db = None
                db.execute("ROLLBACK")  # nothing written: only the snapshot let go
        finally:
            self._give_back(db)

    def _snapshot_here(self) -> sqlite3.Connection | None:
        """The reader this thread's ``snapshot`` holds, unless this thread is inside a write
        transaction of its own (its reads must see what it wrote)."""
        db: sqlite3.Connection | None = getattr(self._pinned, "db", None)
        return None if db is None or self._owned_here() else db

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """A read-only query for modules that keep their own tables here (the link graph)."""
        return self._query(sql, args)

    # --- meta ----------------------------------------------------------------------------

    def get_meta(self, name: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def set_meta(self, name: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)", (name, value))

    @staticmethod
    def set_meta_in(db: sqlite3.Connection, rows: Mapping[str, str]) -> None:
        """Meta rows written in a transaction of the caller's (with what they describe)."""
        db.executemany("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)", list(rows.items()))

    def meta_names(self, prefix: str) -> list[str]:
        """The names of the meta rows that start with ``prefix``."""
        where, args = _under(prefix, "name")
        return [r[0] for r in self._query(f"SELECT name FROM meta WHERE {where}", args)]

    def delete_meta(self, names: Collection[str]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM meta WHERE name = ?", [(n,) for n in names])

    def reread_typed_names(self) -> int:
        """``reread_all`` for the notes whose front matter, as stored, gives ``aliases``,
        ``alias``, ``tags``, ``tag`` or ``title`` (any case) a number, a yes/no or a time
        ("2024-01-01T10:00:00"), alone or in its lists: what YAML made of the text written
        (``010`` stored as 8), which a reader of the text as written reads otherwise. Also those
        an older reader could not read for such a value and a reader of the text reads now: a tag
        YAML has no constructor for (``title: =``, ``title: !wichtig Plan``), stored as an error
        (any key's tag may be the cause: such a note is read once more for nothing), and
        ``.inf``/``.nan`` stored as ``Infinity``/``NaN``, which is no JSON to look into."""
        named = " OR ".join(f"k = '$.{n}' OR k GLOB '$.{n}[[]*'" for n in _NAME_PROPERTIES)
        # Key as json.dumps writes it: '"title": '; LIKE is case-blind for ASCII, as keys are read.
        keyed = " OR ".join(f"front_matter LIKE '%\"{n}\":%'" for n in _NAME_PROPERTIES)
        time = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:*"
        with self.transaction() as db:
            return int(
                db.execute(
                    "UPDATE files SET size = -1, hash = '' WHERE ((front_matter LIKE '%alias%' OR "
                    "front_matter LIKE '%tag%' OR front_matter LIKE '%title%') AND json_valid(front_matter) "
                    "AND EXISTS (SELECT 1 FROM (SELECT lower(fullkey) AS k, type, atom FROM "
                    f"json_tree(files.front_matter)) WHERE ({named}) AND (type IN ('integer', 'real', "
                    f"'true', 'false') OR (type = 'text' AND atom GLOB '{time}')))) "
                    f"OR (NOT json_valid(front_matter) AND ({keyed})) "
                    "OR (state = 'indexed' AND error LIKE "
                    "'invalid YAML in front matter: could not determine a constructor%')"
                ).rowcount
            )

    # --- files ---------------------------------------------------------------------------

    def mark(self, records: Iterable[FileRecord]) -> None:
        """Write intent rows (state indexing/deleting) before the stores are touched."""
        with self.transaction() as db:
            for r in records:
                db.execute(
                    "INSERT INTO files(key, source, agent, rel, mtime_ns, size, hash, state, ctime_ns, "
                    "dev, ino, btime_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                    "ON CONFLICT(key) DO UPDATE SET state = excluded.state",
                    (
                        *(r.key, r.source, r.agent, r.rel, r.mtime_ns, r.size, r.hash, r.state),
                        *(r.ctime_ns, r.dev, r.ino, r.btime_ns),
                    ),
                )

    def mark_state(self, keys: Iterable[str], state: str) -> None:
        with self.transaction() as db:
            db.executemany("UPDATE files SET state = ? WHERE key = ?", [(state, k) for k in keys])

    def touch(
        self, key: str, mtime_ns: int, size: int, ctime_ns: int = 0, file_id: tuple[int, int, int] = (0, 0, 0)
    ) -> None:
        """Same content, new stat (a `touch`, a copy that kept the bytes): remember the stat only
        (``file_id``: device, inode, birth time)."""
        with self.transaction() as db:
            db.execute(
                "UPDATE files SET mtime_ns = ?, size = ?, ctime_ns = ?, dev = ?, ino = ?, btime_ns = ? "
                "WHERE key = ?",
                (mtime_ns, size, ctime_ns, *file_id, key),
            )

    def stamp(self, stats: Sequence[tuple[str, int, int, int, int, int, int]]) -> None:
        """Remember what a sweep saw of unchanged notes, (key, mtime, size, ctime, dev, ino, btime):
        the ctime of those indexed without one, and the device, inode and birth time of the file
        each is now (recorded first by an upgrade's first sweep, or changed by a remount), unless
        their row changed since they were looked at (a memory write in between keeps its own stat)."""
        with self.transaction() as db:
            db.executemany(
                "UPDATE files SET ctime_ns = CASE ctime_ns WHEN 0 THEN ? ELSE ctime_ns END, "
                "dev = ?, ino = ?, btime_ns = ? WHERE key = ? AND mtime_ns = ? AND size = ?",
                [(c, d, i, b, k, m, s) for k, m, s, c, d, i, b in stats],
            )

    def forget_ids(self, ids: Collection[tuple[int, int]]) -> list[str]:
        """The notes whose recorded (device, inode) is one of ``ids`` (files seen with other
        links: a hard-linked backup of them) lose those ids, so that a backup left alone when they
        are deleted never passes for them moved (held, as any loss). Their keys."""
        keys: list[str] = []
        ids = set(ids)
        inos = sorted({i for _, i in ids if i})
        with self.transaction() as db:
            for part, marks in _in_groups(inos):
                rows = db.execute(f"SELECT key, dev, ino FROM files WHERE ino IN ({marks})", part).fetchall()
                keys.extend(k for k, d, i in rows if (d, i) in ids)
            db.executemany(
                "UPDATE files SET dev = 0, ino = 0, btime_ns = 0 WHERE key = ?", [(k,) for k in keys]
            )
        return keys

    def _mark_leaving(self, key: str, db: sqlite3.Connection) -> int | None:
        """The row mark when ``key``'s row is the one at it (about to be written anew or deleted)."""
        if self.row_mark is None:
            return None
        got = db.execute("SELECT value FROM meta WHERE name = ?", (self.row_mark()[0],)).fetchone()
        try:
            mark = int(float(got[0])) if got and got[0] else 0
        except (ValueError, OverflowError):  # another form: the indexer's check says so
            return None
        row = db.execute("SELECT rowid FROM files WHERE key = ?", (key,)).fetchone() if mark >= 1 else None
        return mark if row is not None and row[0] == mark else None

    def _mark_down(self, mark: int | None, db: sqlite3.Connection) -> None:
        """The row mark moved to the latest row below ``mark`` (its row just left), with its note."""
        if mark is None or self.row_mark is None:
            return
        below = db.execute("SELECT coalesce(max(rowid), 0) FROM files WHERE rowid <= ?", (mark,))
        row = int(below.fetchone()[0])
        note = db.execute("SELECT key, indexed_at FROM files WHERE rowid = ?", (row,)).fetchone()
        names = self.row_mark()
        self.set_meta_in(
            db, {names[0]: repr(row), names[1]: json.dumps([str(note[0]), float(note[1])]) if note else ""}
        )

    def commit_file(self, record: FileRecord, chunks: Sequence[ChunkRecord], db: sqlite3.Connection) -> None:
        """Replace a file's row and chunks inside an open transaction; unchanged chunk ids keep
        vectors, and rows that stay as they are are not written again (a line appended to a long
        note rewrote its 2,000 rows)."""
        old = {
            r[0]: tuple(r[1:])
            for r in db.execute(
                "SELECT chunk_id, ord, text, headings, start_line, end_line FROM chunks WHERE key = ?",
                (record.key,),
            )
        }
        new_ids = {c.chunk_id for c in chunks}
        gone = old.keys() - new_ids
        db.executemany("DELETE FROM chunks WHERE chunk_id = ?", [(i,) for i in gone])
        changed = [c for c in chunks if old.get(c.chunk_id) != _placed(c)]
        db.executemany(
            "INSERT INTO chunks(chunk_id, key, ord, text, headings, start_line, end_line, embed_text, "
            "embed_from, tokens, embed_hash, has_vector, has_next) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(chunk_id) DO UPDATE SET ord = excluded.ord, "
            "text = excluded.text, headings = excluded.headings, start_line = excluded.start_line, "
            # The model's text is the same (the id says so), its part kept beside the text is not.
            "end_line = excluded.end_line, embed_text = excluded.embed_text, "
            "embed_from = excluded.embed_from",
            [
                (
                    c.chunk_id,
                    c.key,
                    c.ord,
                    c.text,
                    json.dumps(c.headings, ensure_ascii=False),
                    c.start_line,
                    c.end_line,
                    *split_embed_text(c.embed_text, c.text),
                    c.tokens,
                    c.embed_hash,
                    0 if c.embed_hash else NO_VECTOR,
                    0 if c.embed_hash else NO_VECTOR,
                )
                for c in changed
            ],
        )
        leaving = self._mark_leaving(record.key, db)
        db.execute(
            "INSERT OR REPLACE INTO files(key, source, agent, rel, mtime_ns, size, hash, state, title, tags, "
            "front_matter, chunks, error, indexed_at, ctime_ns, dev, ino, btime_ns) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record.key,
                record.source,
                record.agent,
                record.rel,
                record.mtime_ns,
                record.size,
                record.hash,
                record.state,
                record.title,
                json.dumps(record.tags, ensure_ascii=False),
                record.front_matter,
                len(chunks),
                record.error,
                time.time(),
                record.ctime_ns,
                record.dev,
                record.ino,
                record.btime_ns,
            ),
        )
        self._mark_down(leaving, db)

    def clear(self, db: sqlite3.Connection) -> None:
        links.clear(db)
        db.execute("DELETE FROM chunks")
        db.execute("DELETE FROM files")

    def delete_file(self, key: str, db: sqlite3.Connection) -> None:
        links.drop_links(db, [key])
        db.execute("DELETE FROM chunks WHERE key = ?", (key,))
        leaving = self._mark_leaving(key, db)
        db.execute("DELETE FROM files WHERE key = ?", (key,))
        self._mark_down(leaving, db)

    # --- chunks and vectors ----------------------------------------------------------------

    # --- health --------------------------------------------------------------------------


def _in_one_transaction(
    db: sqlite3.Connection, reads: Sequence[tuple[str, Sequence[Any]]]
) -> list[list[Any]]:
    """``reads`` on a reader connection in one read transaction: its first read fixes the moment
    all of them see; ended (its snapshot released) whatever happens."""
    db.execute("BEGIN")
    try:
        return [db.execute(sql, args).fetchall() for sql, args in reads]
    finally:
        db.execute("ROLLBACK")  # nothing written: only the snapshot let go
