"""The manifest's file, a mixin of ``Manifest``: its schema and the steps that upgrade an older
file to it, the refusal of a newer one, the read-only open of a full disk, the rewrite at open
that gives the disk back (``_shrink``) and the steps that do so while the daemon runs
(``give_back``), and the close. Its own module because how the file is made, upgraded and
compacted is read and changed apart from what the manifest holds and answers; the connection it
works on is opened in ``Manifest.__init__``. Imports ``errors``, how a chunk's model text is
stored (``embedtext``), the disk's free space (``space``) and the schema versions
(``versions``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from sidecar.contracts.errors import PermissionDeniedError, StoreError, StoreNewerError, is_disk_full
from sidecar.notes import links
from sidecar.stores import closing
from sidecar.stores.closing import ClosingLock
from sidecar.stores.embedtext import embed_hash, split_embed_text
from sidecar.stores.frozen import (
    CLOSED_BESIDE_KEPT,
    CLOSED_UNWRITTEN,
    LEFT_OPEN,
    close_unwritten,
    frozen,
    guarded_connect,
    leave_open,
)
from sidecar.stores.space import PROBE_BYTES, free_bytes, same_disk, sqlite_temp_dir
from sidecar.stores.versions import MANIFEST_SCHEMA, NewerStore, manifest_schema, schema_in_log

SCHEMA_VERSION = MANIFEST_SCHEMA  # read by thin clients from stores.versions

# The manifest's events keep the logger name they always had (log filters and readers name it).
log = logging.getLogger("sidecar.stores.manifest")

# Below this much free space a rewrite at open is not worth its seconds.
_SHRINK_MIN_BYTES = 8 * 2**20
# ... and free pages must be at least 1/_SHRINK_SHARE of the file.
_SHRINK_SHARE = 4
# Pages a step of ``Manifest.give_back`` returns: 8 MB of 4 KB pages, a short write.
_GIVE_BACK_PAGES = 2048

# Chunks without a vector by note and place: the backfill's probe takes a note's first
# index.maxVectorChunksPerNote of them without reading the rest, and status counts those past it
# from this index alone. It replaced chunks_pending(key), which an older version makes again. The
# swap is one transaction: a kill between the two statements left the queue with no index.
_PENDING_INDEX = """
BEGIN;
DROP INDEX IF EXISTS chunks_pending;
CREATE INDEX IF NOT EXISTS chunks_waiting ON chunks(key, ord) WHERE has_vector = 0;
COMMIT;
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
  key TEXT PRIMARY KEY, source TEXT NOT NULL, agent TEXT NOT NULL, rel TEXT NOT NULL,
  mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, hash TEXT NOT NULL, state TEXT NOT NULL,
  title TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]', front_matter TEXT NOT NULL DEFAULT '{}',
  chunks INTEGER NOT NULL DEFAULT 0, error TEXT, indexed_at REAL NOT NULL DEFAULT 0,
  ctime_ns INTEGER NOT NULL DEFAULT 0, dev INTEGER NOT NULL DEFAULT 0, ino INTEGER NOT NULL DEFAULT 0,
  btime_ns INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS chunks (
  chunk_id TEXT PRIMARY KEY, key TEXT NOT NULL, ord INTEGER NOT NULL, text TEXT NOT NULL,
  headings TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
  embed_text TEXT NOT NULL, tokens INTEGER NOT NULL, has_vector INTEGER NOT NULL DEFAULT 0,
  has_next INTEGER NOT NULL DEFAULT 0, embed_hash TEXT NOT NULL DEFAULT '', embed_from INTEGER
);
CREATE INDEX IF NOT EXISTS chunks_by_key ON chunks(key);
CREATE INDEX IF NOT EXISTS chunks_by_text ON chunks(embed_hash) WHERE embed_hash != '';
-- The chunks left to a model switch's table (has_vector 3, NEXT_ONLY): counted for health at
-- every status without reading every chunk; empty but during a switch.
CREATE INDEX IF NOT EXISTS chunks_left_to_switch ON chunks(ord) WHERE has_vector = 3;
-- The backfill queue in priority order: walking this index and probing chunks_waiting answers
-- "the next 256 chunks without a vector" in under a millisecond, where sorting every pending
-- chunk took 0.2 s per call at 100 k chunks (the ORDER BY of pending_vectors must match it).
-- Vectors of deleted chunks, by text and table, so a note that comes back (a remount, a checkout,
-- an undo) is not embedded again; bounded by age and count (Manifest.prune_kept). note: '' for
-- chunks of a note that left the index (deleted, moved, excluded), else the key of the note whose
-- edit replaced them: those are kept for its last few edits only (Manifest.prune_edits).
CREATE TABLE IF NOT EXISTS kept_vectors (
  vec_table TEXT NOT NULL, embed_hash TEXT NOT NULL, vector BLOB NOT NULL, kept_at REAL NOT NULL,
  note TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (vec_table, embed_hash)
);
CREATE INDEX IF NOT EXISTS kept_by_age ON kept_vectors(kept_at);
CREATE INDEX IF NOT EXISTS kept_by_note ON kept_vectors(vec_table, note, kept_at) WHERE note != '';
-- Chunks deleted while no vector table was open (the model loading or failed): their vectors are
-- still in the table on disk, kept by text (kept_vectors) once it is attached, before its rows
-- of unknown chunks are deleted (Vectoring._reconcile).
CREATE TABLE IF NOT EXISTS kept_later (
  chunk_id TEXT PRIMARY KEY, embed_hash TEXT NOT NULL, kept_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS kept_later_by_age ON kept_later(kept_at);
CREATE INDEX IF NOT EXISTS files_queue ON files(
  (CASE source WHEN 'memory' THEN 0 WHEN 'wiki' THEN 1 ELSE 2 END), mtime_ns DESC
) WHERE state = 'indexed';
"""

# Rows whose model text is kept whole (``embed_from`` NULL), found by a partial index that holds
# only them: none once every row is split, so a start asks for them without reading the table.
_WHOLE_INDEX = "CREATE INDEX IF NOT EXISTS chunks_whole ON chunks(embed_from) WHERE embed_from IS NULL"
_WHOLE_ROWS = "SELECT rowid, embed_text, text FROM chunks WHERE embed_from IS NULL"
_WHOLE_ROW = "SELECT 1 FROM chunks WHERE embed_from IS NULL LIMIT 1"
# Rows split in one write transaction of ``Manifest.store_embed_heads``.
_SPLIT_BATCH = 1000
# The meta row saying the file is rewritten (VACUUM) once its rows are split (``_shrink``).
_COMPACT_OWED = "compact_owed"


def _newer(path: Path, version: int) -> StoreNewerError:
    return StoreNewerError(
        f"the index in {path.parent} was written by a newer sidecar (manifest schema "
        f"{version}; this version reads up to {SCHEMA_VERSION}): sidecar was downgraded? "
        "Start the newer version again, or run `sidecar index --rebuild` on purpose (or move that "
        "folder away) to have this version build a new index from the notes"
    )


def _refuse_newer(path: Path) -> None:
    """Refuse a newer version's manifest before the writable open changes it (``journal_mode``
    rewrites the header; even a read-only SQLite open of a WAL file leaves a -wal and -shm): the
    version is read from the file's header (``versions.manifest_schema``). A change still in a
    newer version's write-ahead log is caught by the check after the open, as before."""
    version = manifest_schema(path)
    if version is not None and version > SCHEMA_VERSION:
        raise _newer(path, version)


# Writable connections open in this process, by file (``_open_read_only``).
# How long a stop's close waits for the call that holds the writer's connection (a read through
# it gives way at once) before it hands the close to that call's thread (``ClosingLock``).
CLOSE_WAIT_S = closing.CLOSE_WAIT_S
_open_writers: Counter[Path] = Counter()
_writers_lock = threading.Lock()


def _older(path: Path, version: int) -> StoreError:
    return StoreError(
        f"manifest {path} has schema {version}, this version reads {SCHEMA_VERSION} (an upgrade writes)"
    )


def close_failed_open(db: sqlite3.Connection | None, path: Path) -> None:
    """Close the connection of an open that failed; an error of the close is logged, never
    raised: raised, it hid the open's error, the one that says what is wrong (and decides whether
    the file is damage or a fault that passes). Without writing into an immutable ``-shm``
    (``frozen.close_unwritten``: a flag set after the writer's open, its close a SIGBUS)."""
    if db is None:
        return
    try:
        _close(db, path)
    except Exception as exc:
        log.warning("manifest_close_failed path=%s error=%s (after a failed open)", path, exc)


def close_left_reader(db: sqlite3.Connection, path: Path) -> None:
    """Close a reader the manifest's close left to the read that held it, on that read's thread as
    it ends (``Manifest._give_back``); an error of it is logged, never raised: the read went well."""
    try:
        _close(db, path)
    except Exception as exc:
        log.warning("manifest_close_failed path=%s error=%s (a reader, as its read ended)", path, exc)


class ManifestFile:
    """The manifest's file: made or upgraded at open (``Manifest.__init__`` calls the steps),
    opened read-only, compacted, closed; the state it works on is the manifest's own."""

    path: Path
    read_only: bool
    inode: int
    _db: sqlite3.Connection
    _lock: ClosingLock
    _readers: list[sqlite3.Connection]
    _counted: bool

    def _readers_taken(self) -> list[sqlite3.Connection]:
        raise NotImplementedError  # ``Manifest``'s: the readers, taken under their own lock

    def _queued(self, *, counted: bool) -> AbstractContextManager[None]:
        raise NotImplementedError  # ``Manifest``'s: a wait for the writer's lock

    def _count_writer(self) -> None:
        with _writers_lock:
            _open_writers[self.path] += 1
        self._counted = True

    def _open_read_only(self) -> None:
        """Open the file as it is, writing nothing (its disk is full): SQLite's ``immutable`` mode,
        which makes no -wal or -shm file (a plain read-only open of a WAL database makes both, and
        cannot on a full disk) and takes no lock (the index lock keeps every writer away); a
        write-ahead log holding commits not yet in the file (a stop that was not clean) is read
        through its existing -shm instead. Refused (StoreError) where that would not read the index
        whole: such a log without its -shm, or a schema older than 5 (its upgrade is a write). A
        schema-5 file, whose upgrade only moves the links (it needs room the full disk may not
        have), is read as it is, its links table seen through the graph's table names
        (``links.old_table_views``); the next writable start upgrades it."""
        path = self.path
        version = manifest_schema(path)
        if version is None:
            if path.exists() and not os.access(path, os.R_OK):  # a mode, a privacy control
                raise PermissionDeniedError(f"manifest {path} cannot be read: permission denied: {path}")
            raise StoreError(f"there is no readable manifest {path} (no index yet?)")
        wal = path.with_name(path.name + "-wal")
        shm = path.with_name(path.name + "-shm")
        pending = wal.exists() and wal.stat().st_size > 0
        # Commits still in the log may hold the schema (a kill before the first checkpoint left
        # a header of 0; one amid an upgrade, the old schema's): it is asked through the log once open.
        in_log = schema_in_log(path, version)
        if version not in (5, SCHEMA_VERSION) and not in_log:
            raise _older(path, version)
        if pending and not shm.exists():
            raise StoreError(
                f"manifest {path} has changes in its write-ahead log {wal.name} not yet written into "
                f"the file, and no {shm.name} to read them with (making one writes; a stop on a full "
                "disk could not write them back, or the daemon was not stopped cleanly)"
            )
        # Commits still in the write-ahead log (a kill or a stop on the full disk): a plain read-only
        # connection reads them through the existing -shm, makes no new file and never checkpoints
        # (immutable would read the file without them); SQLite may rebuild the -shm in place, and
        # one it cannot rebuild on the full disk fails the open (exit 5, as before this read).
        # Immutable neither while a writer of this process still has the file open (a thread of a
        # failed switch to writable, its stores closed once it ends): its commits would change the
        # file under a reader that takes it for unchanging.
        mode = "mode=ro" if pending or _open_writers[path] > 0 else "mode=ro&immutable=1"
        uri = "file:" + urllib.parse.quote(str(path)) + "?" + mode
        try:
            # A -shm immutable already is mapped read-only by SQLite (never written: no guard);
            # one that may be written now is guarded against turning immutable (``frozen``).
            if frozen(shm):
                self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            else:
                self._db = guarded_connect(uri, path, uri=True, check_same_thread=False, isolation_level=None)
            if in_log:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:  # a newer sidecar's, only in its log: not an older one
                    raise StoreError(NewerStore("manifest", path, version, SCHEMA_VERSION).describe())
                if version not in (5, SCHEMA_VERSION):
                    raise _older(path, version)
            if version != SCHEMA_VERSION:
                # Temporary views, kept in memory: nothing is written to the file or its disk.
                self._db.execute("PRAGMA temp_store=MEMORY")
                links.old_table_views(self._db)
            self._db.execute("PRAGMA query_only=ON")
            if self._db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"manifest {path} failed its integrity check")
            self.inode = path.stat().st_ino
        except StoreError:
            # A schema read through the log refused (newer, or older than 5): the connection
            # stayed open, holding the file (its last close is the writer's checkpoint).
            close_failed_open(getattr(self, "_db", None), path)
            raise
        except (sqlite3.Error, OSError) as exc:
            close_failed_open(getattr(self, "_db", None), path)
            hint = f" (reading {wal.name} rebuilds {shm.name}: free some space)" if pending else ""
            raise StoreError(f"manifest {path} cannot be opened read-only: {exc}{hint}") from exc

    def _shrink(self) -> None:
        """Give the disk back after mass deletions: SQLite reuses free pages but never returns
        them, so a vault that once held 40,000 notes kept its manifest's size for good. Rewritten
        at open (nothing else holds the file yet, no search waits on it) when free pages are a
        quarter of it or more: 5,000 of 17,000 notes deleted left 110 MB free in 350, under the
        half this once asked for. Not tried without room on the disk (``_vacuum_room``).
        Whatever the free pages while a rewrite is owed (``_COMPACT_OWED``: the schema-5 upgrade
        made every row shorter and left its pages part empty, which no free page counts), once
        every row is split: until then, and without room, it stays owed for a later start."""
        page = self._db.execute("PRAGMA page_size").fetchone()[0]
        total = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        owed = self._db.execute("SELECT 1 FROM meta WHERE name = ?", (_COMPACT_OWED,)).fetchall() != []
        if owed and self._db.execute(_WHOLE_ROW).fetchall():
            owed = False  # rows left whole (no room to split them): compacted once they are split
        if not owed and (free * page < _SHRINK_MIN_BYTES or free * _SHRINK_SHARE < total):
            return
        short = _vacuum_room((total - free) * page, self.path.parent)
        if short is not None:
            log.info(
                "manifest_shrink_skipped path=%s folder=%s needed_bytes=%d free_bytes=%d", self.path, *short
            )
            return
        started = time.monotonic()
        try:
            # The rewrite also lets later free pages go back without one (``give_back``).
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if owed:  # after the rewrite: a kill before it leaves it owed
                self._db.execute("DELETE FROM meta WHERE name = ?", (_COMPACT_OWED,))
        except sqlite3.Error as exc:  # a full disk: the manifest works as it is
            log.warning("manifest_shrink_failed path=%s error=%s", self.path, exc)
            return
        log.info(
            "manifest_shrunk path=%s freed_mb=%.1f seconds=%.2f",
            self.path,
            (total - self._db.execute("PRAGMA page_count").fetchone()[0]) * page / 2**20,
            time.monotonic() - started,
        )

    def give_back(self, between: Callable[[], object] = lambda: None) -> int:
        """Free pages returned to the disk while the daemon runs (the daily housekeeping's: a
        daemon that runs for weeks past a mass deletion kept 110 MB free in a 350 MB manifest),
        under ``_shrink``'s rule (a quarter of the file, 8 MB at least). Only in incremental
        auto-vacuum mode (new files, and those ``_shrink`` rewrote): ``_GIVE_BACK_PAGES`` per
        step, each a short write of its own, ``between()`` after each, so no search waits for
        more than one step; never a VACUUM, which holds the file for as long as it rewrites it
        all. Not tried without room on the disk for a step. Returns the pages given back."""
        if self.read_only:
            return 0
        with self._lock:
            mode, page, total, free = (
                self._db.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("auto_vacuum", "page_size", "page_count", "freelist_count")
            )
        if mode != 2 or free * page < _SHRINK_MIN_BYTES or free * _SHRINK_SHARE < total:
            return 0
        room = free_bytes(self.path.parent)
        if room is not None and room < _GIVE_BACK_PAGES * page + PROBE_BYTES:
            log.info("manifest_give_back_skipped path=%s free_bytes=%d", self.path, room)
            return 0
        given, started = 0, time.monotonic()
        while free > 0:
            with self._lock:
                if self._db.in_transaction:
                    # executescript would commit it first, half done (a call from within one).
                    raise sqlite3.ProgrammingError("give_back called within an open transaction")
                # executescript steps the pragma to its end (``execute`` frees one page a call).
                self._db.executescript(f"PRAGMA incremental_vacuum({_GIVE_BACK_PAGES});")
                left = self._db.execute("PRAGMA freelist_count").fetchone()[0]
            if left >= free:
                break
            given, free = given + free - left, left
            between()
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log back to its limit
        log.info(
            "manifest_pages_given_back path=%s freed_mb=%.1f seconds=%.2f",
            self.path,
            given * page / 2**20,
            time.monotonic() - started,
        )
        return int(given)

    def _add_columns(self) -> None:
        """Columns added to existing tables without a schema version of their own, each where missing."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(files)").fetchall()}
        if columns and "ctime_ns" not in columns:
            # Edits that keep size and mtime (mtime restored, coarse clocks) change ctime.
            self._db.execute("ALTER TABLE files ADD COLUMN ctime_ns INTEGER NOT NULL DEFAULT 0")
        # The file's device, inode and birth time tell a note renamed into an excluded folder
        # from a copy of it there (index.moves). 0 is "not known": such a note is held as before
        # until a sweep has recorded them (no note is read again for it). Each column on its
        # own: each ALTER commits alone, and one interrupted between two made the next open
        # add the first again ("duplicate column"), which took the manifest for damaged.
        for column in ("dev", "ino", "btime_ns"):
            if columns and column not in columns:
                self._db.execute(f"ALTER TABLE files ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
        # The note whose edit replaced a kept vector (``kept_vectors.note``). Rows kept before the
        # column was are taken for notes that left the index (the longer-kept kind); an older
        # version writes rows without it: the default.
        kept = {r[1] for r in self._db.execute("PRAGMA table_info(kept_vectors)").fetchall()}
        if kept and "note" not in kept:
            self._db.execute("ALTER TABLE kept_vectors ADD COLUMN note TEXT NOT NULL DEFAULT ''")

    def _add_embed_hashes(self) -> None:
        """Schema 3: the text identity that lets equal chunks share one embedding."""
        self._db.execute("ALTER TABLE chunks ADD COLUMN embed_hash TEXT NOT NULL DEFAULT ''")
        rows = self._db.execute("SELECT chunk_id, embed_text FROM chunks").fetchall()
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(
            "UPDATE chunks SET embed_hash = ? WHERE chunk_id = ?", [(embed_hash(t), i) for i, t in rows]
        )
        self._db.execute("COMMIT")

    def _add_embed_from(self, version: int, also: Callable[[sqlite3.Connection], object]) -> None:
        """Schema 5: each chunk's model text kept as what it adds to the chunk's text
        (``embedtext``). One transaction adds the column (NULL: the row's model text is whole, as
        every reader takes it), labels the file with this schema and, for an older file, records
        that a rewrite is owed once its rows are split (``store_embed_heads``, ``_shrink``): no row
        is split under an older label, which an older version would read as whole. A rebuild's copy
        (``aside_chunks``) gets the column too, so the two tables keep one column order. ``also``:
        the other steps to this schema, in the same transaction (schema 6: the link graph's rows
        by note number, ``links.move_rows``); the rewrite gives back the pages they leave."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(chunks)").fetchall()}
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if "embed_from" not in columns:
                self._db.execute("ALTER TABLE chunks ADD COLUMN embed_from INTEGER")
            aside = {r[1] for r in self._db.execute("PRAGMA table_info(aside_chunks)").fetchall()}
            if aside and "embed_from" not in aside:
                self._db.execute("ALTER TABLE aside_chunks ADD COLUMN embed_from INTEGER")
            self._db.execute(_WHOLE_INDEX)
            also(self._db)
            if version not in (0, SCHEMA_VERSION):
                self._db.execute("INSERT OR REPLACE INTO meta(name, value) VALUES (?, '1')", (_COMPACT_OWED,))
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # the error may have ended it
                self._db.execute("ROLLBACK")
            raise

    def store_embed_heads(self, between: Callable[[], object] = lambda: None) -> int:
        """Rows still holding their model text whole (``embed_from`` NULL: the schema-5 upgrade's,
        or put back from a rebuild's copy written before) split into head and ``embed_from``,
        ``_SPLIT_BATCH`` rows a transaction, ``between()`` after each: one transaction over every row
        needed about the chunk table's size free for its write-ahead log, and a start on a disk
        short of that failed. Each batch leaves the file whole (texts, hashes and vector flags
        stay); a full disk ends the pass, the rest is split at a later start or housekeeping.
        Returns the rows split."""
        if self.read_only:
            return 0
        done, started = 0, time.monotonic()
        while True:
            with self._lock:
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                    rows = self._db.execute(f"{_WHOLE_ROWS} LIMIT ?", (_SPLIT_BATCH,)).fetchall()
                    self._db.executemany(
                        "UPDATE chunks SET embed_text = ?, embed_from = ? WHERE rowid = ?",
                        [(*split_embed_text(e, t), r) for r, e, t in rows],
                    )
                    self._db.execute("COMMIT")
                except sqlite3.Error as exc:
                    with contextlib.suppress(sqlite3.Error):  # the error may have ended it
                        self._db.execute("ROLLBACK")
                    if not is_disk_full(exc):
                        raise
                    log.warning(  # the rows left read whole; split at a later start or housekeeping
                        "manifest_embed_heads_paused path=%s chunks=%d error=%s", self.path, done, exc
                    )
                    return done
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                    raise
            if not rows:
                break
            done += len(rows)
            between()
        if done:
            log.info(
                "manifest_embed_heads_stored path=%s chunks=%d seconds=%.2f",
                self.path,
                done,
                time.monotonic() - started,
            )
        return done

    def close(self, *, stopping: bool = False, wait: float | None = None) -> None:
        """Close every connection and release the writer's count, each even when a step before
        raises (the first error is raised after): a reader whose close raised left the writer's
        connection open, its log unwritten and its count taken (a read-only open of this file in
        the process then read it as changing, never ``immutable``). ``stopping``: the process
        exits next, and the writer's connection is left open while the ``-shm`` is immutable
        (``_left_at_stop``).

        Never under a statement in flight (closed under it, the process died of a segmentation
        fault): a reader a read holds is closed by that read's thread as it ends; the writer's
        connection once the call holding it lets go (a read through it gives way at once), at the
        stop waited for ``CLOSE_WAIT_S`` only, then closed by that call's thread as it ends. From
        here on every call raises ``ManifestClosedError`` (the daemon is stopping). ``wait``: the
        stop's wait instead of ``CLOSE_WAIT_S`` (less once the stop's time runs out)."""
        with self._queued(counted=True):  # a read through the writer gives way to the close
            # Bounded at the stop only: the process exits next. Any other close (a repair moving the
            # file aside, a failed switch) waits as long as it takes: a connection still open on a
            # file moved aside and made anew could write into the new one's log.
            bound = (CLOSE_WAIT_S if wait is None else wait) if stopping else -1
            ran = self._lock.close_with(lambda: self._close_now(stopping=stopping), bound)
        if not ran:
            log.warning(
                "manifest_close_handed path=%s (a call under way holds the index's connection: "
                "its thread closes it as it ends; no call begins meanwhile)",
                self.path,
            )

    def _close_now(self, *, stopping: bool) -> None:
        """``close``'s work, under the writer's lock."""
        if getattr(self, "_left", False) or (stopping and self._left_at_stop()):
            return
        failed: BaseException | None = None
        # Readers first: the last connection to close checkpoints the WAL into the file and
        # removes it, which a read-only one cannot do (a clean stop left 45-79 MB of WAL). A
        # reader a read still holds is closed by it (``Manifest._give_back``).
        for reader in self._readers_taken():
            try:
                reader.close()
            except BaseException as exc:  # raised below, once the rest is closed
                failed = failed or exc
        try:
            if not self.read_only:
                # At a stop, PASSIVE: it never waits for a read still in its snapshot (a reader
                # left to its read, another program's), where TRUNCATE waited SQLite's busy
                # timeout (5 s) past the stop's bound. What it leaves, the last connection's close
                # checkpoints when nothing reads, or the next open replays.
                mode = "PASSIVE" if stopping else "TRUNCATE"
                with contextlib.suppress(sqlite3.Error):  # a full disk: the next open replays it
                    self._db.execute(f"PRAGMA wal_checkpoint({mode})")
        finally:
            try:
                self._release_writer()
            finally:
                _close(self._db, self.path)
        if failed is not None:
            try:
                raise failed
            finally:
                failed = None  # no cycle through this frame

    def close_after_failure(self) -> None:
        """``close`` after another step failed (a start's): an error of the close is logged, never
        raised over the step's error, which says what is wrong."""
        try:
            self.close()
        except Exception as exc:
            log.warning("manifest_close_failed path=%s error=%s (after a failed start)", self.path, exc)

    def _left_at_stop(self) -> bool:
        """At the stop, a writer whose ``-shm`` is immutable: its readers closed (none is the last
        connection, the writer's is open: their close writes nothing), the writer's left open
        (``frozen.leave_open``); its close, the last, would checkpoint into the mapped ``-shm``:
        SIGBUS, the stop a crash with a core. A read-only manifest is closed as always (a
        ``mode=ro`` connection writes nothing at its close), and so is everything at any other
        close: one left open per close while the flag stayed ran out of descriptors."""
        shm = self.path.with_name(self.path.name + "-shm")
        if self.read_only or not frozen(shm):
            return False
        for reader in self._readers_taken():
            with contextlib.suppress(sqlite3.Error):
                reader.close()
        self._release_writer()
        leave_open(self._db, self.path)
        self._left = True
        log.warning(
            "manifest_close_skipped path=%s reason=immutable (left open at the stop: the next "
            "start replays its write-ahead log, nothing is lost)",
            shm,
        )
        return True

    def _release_writer(self) -> None:
        if self._counted:  # a second close counts nothing
            self._counted = False
            with _writers_lock:
                _open_writers[self.path] -= 1
                if _open_writers[self.path] <= 0:
                    del _open_writers[self.path]


def _close(db: sqlite3.Connection, path: Path) -> None:
    """Close ``db``, a connection to the manifest at ``path``; while its ``-shm`` is immutable
    without the checkpoint SQLite's last close writes into that file's mapping (SIGBUS: a start
    whose keyword index failed to open after the flag came, a failed switch closing its stores),
    said in the log (the next open replays the write-ahead log, nothing is lost)."""
    done = close_unwritten(db, path)
    if done is None:
        return
    # Each its own event: a fallback (the checkpoint could not be switched off) shows in the log.
    event = {
        CLOSED_UNWRITTEN: "manifest_closed_unwritten",
        CLOSED_BESIDE_KEPT: "manifest_closed_beside_kept",
        LEFT_OPEN: "manifest_left_open",
    }[done]
    log.warning(
        "%s path=%s reason=immutable (%s; the next open replays its write-ahead log, nothing is lost)",
        event,
        path,
        done,
    )


def _vacuum_room(live: int, folder: Path) -> tuple[Path, int, int] | None:
    """Where a VACUUM of a database of ``live`` bytes of pages in ``folder`` lacks room: (the
    folder, bytes it needs, bytes free there), or None when there is room. The VACUUM copies the
    live pages into a temporary database (in SQLite's temporary folder), then writes them back
    through the write-ahead log beside the database: twice the live pages when both are on one
    disk. A folder that cannot be asked counts as roomy."""
    temp = sqlite_temp_dir()
    if temp is None or same_disk(folder, temp):
        needs = [(folder, 2 * live + PROBE_BYTES)]
    else:
        needs = [(folder, live + PROBE_BYTES), (temp, live + PROBE_BYTES)]
    for where, needed in needs:
        room = free_bytes(where)
        if room is not None and room < needed:
            return where, needed, room
    return None
