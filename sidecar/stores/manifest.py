"""The manifest (stdlib sqlite3): which files are indexed, their chunks, and what waits for vectors.

It is the root of the derived indexes: chunk text and metadata live here, Tantivy and LanceDB hold
only what they search on plus the chunk id. A file's ``state`` is written before the stores are
touched (``indexing`` / ``deleting``) and after they committed (``indexed``), so a start after a
crash knows what to redo. Imports ``errors``, the link graph's table (``notes.links``) and its
own vector bookkeeping (``vectorbook``), a rebuild's copy of the notes (``manifest_aside``), how a
chunk's model text is stored (``embedtext``), the day a note is about (``noteday``), and the disk's
free space (``space``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import (
    StoreError,
    StoreNewerError,
    is_disk_full,
    store_error_class,
)
from sidecar.contracts.wire import memory_agent
from sidecar.notes import links
from sidecar.notes.dayformat import DayFormats
from sidecar.notes.frontmatter import aliases_of
from sidecar.stores.embedtext import split_embed_text
from sidecar.stores.manifest_aside import ManifestAside
from sidecar.stores.noteday import daily_note, note_day
from sidecar.stores.space import PROBE_BYTES, free_bytes, same_disk, sqlite_temp_dir
from sidecar.stores.vectorbook import NEXT_ONLY, NO_VECTOR, VectorBook, _in_groups
from sidecar.stores.versions import MANIFEST_SCHEMA, manifest_schema

SCHEMA_VERSION = MANIFEST_SCHEMA  # read by thin clients from stores.versions
SOURCE_RANK = {"memory": 0, "wiki": 1, "vault": 2}

log = logging.getLogger(__name__)
# Below this much free space a rewrite at open is not worth its seconds.
_SHRINK_MIN_BYTES = 8 * 2**20
# ... and free pages must be at least 1/_SHRINK_SHARE of the file.
_SHRINK_SHARE = 4
# Pages a step of ``Manifest.give_back`` returns: 8 MB of 4 KB pages, a short write.
_GIVE_BACK_PAGES = 2048

# The notes status counts: those indexed, and those indexed before that a batch is writing again
# (marked ``indexing``, their old chunks still found meanwhile): a re-cut of every note showed
# "0 notes, 0 chunks" while its batches were written. A new note counts once it is in.
_COUNTED = "(state = 'indexed' OR (state = 'indexing' AND indexed_at > 0 AND chunks > 0))"

# The rows a read that answers may show: a note on its way out (``deleting``: deleted, or a moved
# note's old entry once its new one is written) is found by no answer (search, get, why, list,
# related): the moved note is answered under its new path only, the deleted one not at all.
_SHOWN = "f.state != 'deleting'"

# A file's columns as ``FileState`` holds them.
_STATE_COLUMNS = "key, mtime_ns, size, hash, state, ctime_ns, dev, ino, btime_ns"

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


def prefix_end(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None: no such bound, the
    prefix is empty): its last character plus one. SQLite compares TEXT as UTF-8 bytes, which is
    code point order; ``prefix + "\\uffff"`` as the bound left out every key whose next character
    lies above U+FFFF (a folder named "📥 Inbox": never deleted, never excluded)."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(0xE000 if 0xD800 <= last <= 0xDFFF else last)
        prefix = prefix[:-1]
    return None


def _under(prefix: str, column: str = "key") -> tuple[str, tuple[str, ...]]:
    """A WHERE clause (and its arguments) for the values of ``column`` that start with ``prefix``."""
    end = prefix_end(prefix)
    return (
        (f"{column} >= ?", (prefix,)) if end is None else (f"{column} >= ? AND {column} < ?", (prefix, end))
    )


def embed_hash(embed_text: str) -> str:
    """Identity of a chunk's text for the model: equal texts anywhere share one embedding."""
    return hashlib.blake2b(embed_text.encode(), digest_size=12).hexdigest()


@functools.lru_cache(maxsize=16_384)  # every chunk of a note carries the same front matter
def _aliases(front_matter: str) -> tuple[str, ...]:
    """The note's aliases as the sweep reads them (``aliases_of``), so a keyword index refilled from
    the manifest holds what a sweep wrote."""
    try:
        return aliases_of(json.loads(front_matter))
    except ValueError:
        return ()


@functools.lru_cache(maxsize=16_384)
def _strings(encoded: str) -> tuple[str, ...]:
    """A JSON list of strings (a chunk's heading path, a note's tags) as stored, decoded once:
    a search's candidates repeat them (every chunk of a note, the same notes query after query)."""
    return tuple(json.loads(encoded))


@dataclass(frozen=True)
class FileRecord:
    key: str
    source: str
    agent: str
    rel: str
    mtime_ns: int
    size: int
    hash: str
    state: str
    title: str = ""
    tags: tuple[str, ...] = ()
    front_matter: str = "{}"
    error: str | None = None
    ctime_ns: int = 0  # the file's status change time; 0 where unknown
    dev: int = 0  # the file's device and inode (sources.file_id); 0 where unknown
    ino: int = 0
    btime_ns: int = 0  # its birth time (vault.birth); 0 where unknown


@dataclass(frozen=True)
class ChunkRecord:
    chunk_id: str
    key: str
    ord: int
    text: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    embed_text: str
    tokens: int
    embed_hash: str = ""  # "" = nothing to embed


@dataclass(frozen=True)
class IndexedNote:
    """A note as indexed: its title and front matter (the keyword index's title field) and
    each chunk's text and heading path (JSON), by chunk id."""

    title: str
    front_matter: str
    chunks: dict[str, tuple[str, str]]


def _placed(c: ChunkRecord) -> tuple[Any, ...]:
    """The columns of a chunk row that can change while its id stays (as ``commit_file`` reads them)."""
    return (c.ord, c.text, json.dumps(c.headings, ensure_ascii=False), c.start_line, c.end_line)


@dataclass(frozen=True)
class FileState:
    mtime_ns: int
    size: int
    hash: str
    state: str
    ctime_ns: int = 0  # 0: not known (written before it was kept)
    dev: int = 0  # the file's device and inode as last seen; 0: not known (or no evidence)
    ino: int = 0
    btime_ns: int = 0  # that file's birth time; 0: not known


@dataclass(frozen=True)
class ChunkView:
    """A chunk joined with its file: everything a hit shows."""

    chunk_id: str
    key: str
    source: str
    agent: str
    title: str
    text: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    tags: tuple[str, ...]
    mtime_ns: int = 0
    aliases: tuple[str, ...] = ()
    has_vector: bool = True  # in the serving vector table
    date: str = ""  # the note's own day (front matter or daily-note name), '' when it has none
    dated_by: str = ""  # what gave ``date``: "name" or "property" (note_day)
    # The file's status change time (ns; 0 unknown) and when this version was indexed (s): what
    # stands for an mtime in the future (``sidecar.stores.lastchange.last_change``).
    ctime_ns: int = 0
    indexed_at: float = 0.0


@dataclass(frozen=True)
class NoteDay:
    """An indexed note with chunks, and the day it is about (``note_date``; '' means its mtime's)."""

    key: str
    source: str
    agent: str
    tags: tuple[str, ...]
    mtime_ns: int
    date: str
    named: bool  # a daily note: its name, not a property, gave the day (``daily_note``)
    ctime_ns: int = 0  # as ChunkView's: what stands for an mtime in the future
    indexed_at: float = 0.0


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
_open_writers: Counter[Path] = Counter()
_writers_lock = threading.Lock()


class Manifest(ManifestAside, VectorBook):
    """Thread-safe wrapper over one sqlite connection (WAL); the daemon is the only writer."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        # The vault's daily-note name formats (Obsidian's settings, set by each sweep's read of
        # them): a note's date is read with them (``note_date``).
        self.day_formats: DayFormats = ()
        self.generation = 0  # committed write transactions: what a cache of rows is keyed by
        self._note_days: tuple[int, DayFormats, list[NoteDay]] | None = None
        self._lock = threading.RLock()
        # Searches read chunk views on connections of their own (one per thread): in WAL mode a
        # reader sees the last commit and never waits for the writer, whose transactions hold
        # ``_lock`` for tens of ms under a load of memory writes (a search waited up to 80 ms).
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._write_back_waits = False  # ``written_back`` said it waits for room (said once)
        self._counted = False  # in ``_open_writers``
        _refuse_newer(path)  # before anything writes to it (journal_mode=WAL rewrites the header)
        if read_only:
            self._open_read_only()
            return
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
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
            if version not in (0, 1, 2, 3, 4, SCHEMA_VERSION):
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
            self._add_embed_from(version)
            if self._db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"manifest {path} failed its integrity check")
            self.store_embed_heads()
            self._shrink()
            self.inode = path.stat().st_ino  # the daemon notices a deleted or replaced file
            self._count_writer()
        except StoreError:
            if (db := getattr(self, "_db", None)) is not None:
                db.close()  # the file is not ours to keep open (a newer version's, a damaged one)
            raise
        except sqlite3.DatabaseError as exc:
            # A full disk (a schema step or the WAL needs a page) is no damage: taken for one, the
            # manifest was moved aside and the keyword index and every vector with it.
            if (db := getattr(self, "_db", None)) is not None:
                db.close()  # not left open (and its write-ahead log behind) by a failed start
            raise store_error_class(exc)(f"manifest {path} cannot be opened: {exc}") from exc

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
        whole: such a log without its -shm, or an older schema (its upgrade is a write)."""
        path = self.path
        version = manifest_schema(path)
        if version is None:
            raise StoreError(f"there is no readable manifest {path} (no index yet?)")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"manifest {path} has schema {version}, this version reads {SCHEMA_VERSION} "
                "(an upgrade writes)"
            )
        wal = path.with_name(path.name + "-wal")
        shm = path.with_name(path.name + "-shm")
        pending = wal.exists() and wal.stat().st_size > 0
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
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA query_only=ON")
            if self._db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"manifest {path} failed its integrity check")
            self.inode = path.stat().st_ino
        except (sqlite3.Error, OSError) as exc:
            if (db := getattr(self, "_db", None)) is not None:
                db.close()
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
        # from a copy of it there (index.diff). 0 is "not known": such a note is held as before
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

    def _add_embed_from(self, version: int) -> None:
        """Schema 5: each chunk's model text kept as what it adds to the chunk's text
        (``embedtext``). One transaction adds the column (NULL: the row's model text is whole, as
        every reader takes it), labels the file schema 5 and, for an older file, records that a
        rewrite is owed once its rows are split (``store_embed_heads``, ``_shrink``): no row is
        split under an older label, which an older version would read as whole. A rebuild's copy
        (``aside_chunks``) gets the column too, so the two tables keep one column order."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(chunks)").fetchall()}
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if "embed_from" not in columns:
                self._db.execute("ALTER TABLE chunks ADD COLUMN embed_from INTEGER")
            aside = {r[1] for r in self._db.execute("PRAGMA table_info(aside_chunks)").fetchall()}
            if aside and "embed_from" not in aside:
                self._db.execute("ALTER TABLE aside_chunks ADD COLUMN embed_from INTEGER")
            self._db.execute(_WHOLE_INDEX)
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

    def close(self) -> None:
        with self._lock:
            # Readers first: the last connection to close checkpoints the WAL into the file and
            # removes it, which a read-only one cannot do (a clean stop left 45-79 MB of WAL).
            for reader in self._readers:
                reader.close()
            self._readers.clear()
            if not self.read_only:
                with contextlib.suppress(sqlite3.Error):  # a full disk: the next open replays it
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                if self._counted:  # a second close counts nothing
                    self._counted = False
                    with _writers_lock:
                        _open_writers[self.path] -= 1
                        if _open_writers[self.path] <= 0:
                            del _open_writers[self.path]
            self._db.close()

    def written_back(self) -> bool:
        """Whether every commit is in the main file now (the write-ahead log checkpointed and
        emptied), so that the index can be opened read-only (``_open_read_only``) once this
        writer is closed. False when the checkpoint fails (the file cannot grow: its disk is full):
        only a writer reads those commits then. Not tried while the disk has less room than the
        file must grow by: a failed try left the file grown into whatever space the user had
        freed, at every retry (the space check's, every few seconds), up to the log's size. Tried
        on a full disk when the file need not grow: the checkpoint then only frees space."""
        wal = self.path.with_name(self.path.name + "-wal")
        with self._lock:
            try:
                if self._needs():
                    return False
                busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
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
        """A read of what is committed, on this thread's own connection (opened on first use).
        Every statement is read to its end (``fetchall``), so none keeps a read transaction, and
        with it an old snapshot, open past its call."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            # Read-only (immutable): nothing writes, and a reader of its own would make files.
            db = None if self.read_only else self._open_reader()
            if db is None:
                return self._query(sql, args)
        return db.execute(sql, args).fetchall()

    def _open_reader(self) -> sqlite3.Connection | None:
        """This thread's reader on the writer's own file; None (read through the writer) when the
        file was deleted or replaced meanwhile (the daemon reports it; a restart repairs it) or
        cannot be opened: a reader must never create an empty manifest or read another one."""
        try:
            if self.path.stat().st_ino != self.inode:
                return None
            uri = "file:" + urllib.parse.quote(str(self.path)) + "?mode=ro"
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA query_only=ON")
            db.execute("PRAGMA cache_size=-1024")  # 1 MB a reader (the writer keeps the default)
        except (OSError, sqlite3.Error):
            return None
        with self._lock:
            self._readers.append(db)
        self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self.generation += 1  # after the commit: a reader that saw the old count recomputes

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

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

    def reread_all(self) -> int:
        """Make every note look changed (a size no file has, the hash forgotten): the next sweep
        reads and cuts it again, while its chunks stay searchable until then. The mtime stays: date
        filters read it for notes without a date of their own. Returns how many notes."""
        with self.transaction() as db:
            return int(db.execute("UPDATE files SET size = -1, hash = ''").rowcount)

    def reread_suffix(self, suffix: str) -> int:
        """``reread_all`` for the notes whose file name ends in ``suffix`` (any case)."""
        with self.transaction() as db:
            return int(
                db.execute(
                    "UPDATE files SET size = -1, hash = '' WHERE lower(substr(rel, -?)) = ?",
                    (len(suffix), suffix.lower()),
                ).rowcount
            )

    def reread_drawings(self) -> int:
        """``reread_all`` for the Excalidraw drawings: notes whose front matter, as stored, has
        ``excalidraw-plugin`` (of any value, null too)."""
        with self.transaction() as db:
            return int(
                db.execute(
                    "UPDATE files SET size = -1, hash = '' WHERE front_matter LIKE '%excalidraw-plugin%' "
                    "AND json_type(front_matter, '$.\"excalidraw-plugin\"') IS NOT NULL"
                ).rowcount
            )

    def reread_link_aliases(self) -> int:
        """``reread_all`` for the notes whose front matter, as stored, has ``aliases`` or ``alias``
        (any case) holding a list in its list: a wiki-link written unquoted (``[[Bar]]``) as YAML
        reads it."""
        with self.transaction() as db:
            return int(
                db.execute(
                    "UPDATE files SET size = -1, hash = '' WHERE front_matter LIKE '%alias%[%[%' "
                    "AND json_valid(front_matter) AND EXISTS (SELECT 1 FROM json_tree(files.front_matter) t "
                    "WHERE t.type = 'array' AND lower(t.path) IN ('$.aliases', '$.alias'))"
                ).rowcount
            )

    def reread_keys(self, keys: Sequence[str], db: sqlite3.Connection) -> None:
        """``reread_all`` for these notes only, inside the caller's transaction."""
        db.executemany("UPDATE files SET size = -1, hash = '' WHERE key = ?", [(k,) for k in keys])

    # --- files ---------------------------------------------------------------------------

    def has_files(self, prefix: str) -> bool:
        """Whether any note is indexed under ``prefix`` (one row read, not all of them)."""
        where, args = _under(prefix)
        return bool(self._query(f"SELECT 1 FROM files WHERE {where} LIMIT 1", args))

    def file_states(self, prefix: str = "") -> dict[str, FileState]:
        where, args = _under(prefix)
        rows = self._query(f"SELECT {_STATE_COLUMNS} FROM files WHERE {where}", args)
        return {r[0]: FileState(*r[1:]) for r in rows}

    def memory_agents(self) -> list[str]:
        """The agents with entries in the index, in key order: one lookup per agent, jumping past
        its keys (each sweep asked; reading every memory entry for the names cost a row each)."""
        out: list[str] = []
        start = "memory/"
        while rows := self._query(
            "SELECT key FROM files WHERE key >= ? AND key < ? ORDER BY key LIMIT 1", (start, "memory0")
        ):
            agent = memory_agent(str(rows[0][0])) or ""
            out.append(agent)
            start = f"memory/{agent}0"  # past its keys ('/' + 1): an agent's name holds no '/'
        return out

    def file_states_of(self, keys: Sequence[str]) -> dict[str, FileState]:
        out: dict[str, FileState] = {}
        for part, marks in _in_groups(keys):
            rows = self._query(f"SELECT {_STATE_COLUMNS} FROM files WHERE key IN ({marks})", part)
            out.update((r[0], FileState(*r[1:])) for r in rows)
        return out

    def keys_like(self, stats: Collection[tuple[int, int, str]]) -> dict[tuple[int, int, str], list[str]]:
        """Indexed keys by (mtime_ns, size, hash), for those in ``stats``: where the same bytes,
        written at the same time, are indexed under other keys (a move a sweep saw half of).
        Keys being deleted too: a move undone after the removal of its old entries failed brings
        those notes back (the caller takes only keys whose file it sees now, with that stat)."""
        wanted = set(stats)
        out: dict[tuple[int, int, str], list[str]] = {}
        mtimes = sorted({s[0] for s in wanted})
        for start in range(0, len(mtimes), 500):
            part = mtimes[start : start + 500]
            rows = self._query(
                "SELECT key, mtime_ns, size, hash FROM files WHERE state IN ('indexed', 'deleting') "
                "AND hash != '' "
                f"AND mtime_ns IN ({','.join('?' * len(part))})",
                part,
            )
            for key, mtime_ns, size, digest in rows:
                if (mtime_ns, size, digest) in wanted:
                    out.setdefault((mtime_ns, size, digest), []).append(key)
        return out

    def rel_of(self, key: str) -> str | None:
        """The file name (relative to its root, with its extension as on disk) of an indexed key."""
        rows = self._query("SELECT rel FROM files WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def key_in_any_form(self, key: str) -> str:
        """``key`` when it is indexed, else the one indexed key that is the same text in another
        Unicode form (a file a Mac named "Übersicht" in NFD, asked for as typed, in NFC); else
        ``key`` unchanged. Only the keys sharing its ASCII beginning are compared."""
        if self._query("SELECT 1 FROM files WHERE key = ?", (key,)):
            return key
        want = unicodedata.normalize("NFC", key)
        head = want[: next((i for i, ch in enumerate(want) if ord(ch) > 127), len(want))]
        if head == want:
            return key  # all ASCII: there is no other form
        # On the reader of this thread: a miss may list many keys, and the writer's lock is not
        # to be held for it (a sweep's batch would wait).
        where, args = _under(head)
        rows = self._committed(f"SELECT key FROM files WHERE {where}", args)
        same = [r[0] for r in rows if unicodedata.normalize("NFC", r[0]) == want]
        return same[0] if len(same) == 1 else key

    def keys_in_state(self, *states: str) -> list[str]:
        marks = ",".join("?" * len(states))
        return [r[0] for r in self._query(f"SELECT key FROM files WHERE state IN ({marks})", states)]

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

    def chunk_ids(self, key: str) -> set[str]:
        return {r[0] for r in self._query("SELECT chunk_id FROM chunks WHERE key = ?", (key,))}

    def indexed_chunks(self, key: str) -> IndexedNote | None:
        """What the keyword index holds of a note as the manifest recorded it: None unless the
        note is ``indexed`` (a note marked ``indexing`` may have been written half-way)."""
        rows = self._query(
            "SELECT title, front_matter FROM files WHERE key = ? AND state = 'indexed'", (key,)
        )
        if not rows:
            return None
        chunks = self._query("SELECT chunk_id, text, headings FROM chunks WHERE key = ?", (key,))
        return IndexedNote(rows[0][0], rows[0][1], {r[0]: (r[1], r[2]) for r in chunks})

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

    def clear(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM links")
        db.execute("DELETE FROM chunks")
        db.execute("DELETE FROM files")

    def delete_file(self, key: str, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM links WHERE src = ?", (key,))
        db.execute("DELETE FROM chunks WHERE key = ?", (key,))
        db.execute("DELETE FROM files WHERE key = ?", (key,))

    # --- chunks and vectors ----------------------------------------------------------------

    def all_chunks(self) -> Iterator[ChunkView]:
        """Every indexed chunk, for rebuilding the BM25 index without reading a file."""
        yield from self._views("f.state = 'indexed'", ())

    def chunks_under(self, prefix: str) -> Iterator[ChunkView]:
        """The indexed chunks of the notes below a key prefix (one agent's memory)."""
        where, args = _under(prefix, "c.key")
        yield from self._views(f"f.state = 'indexed' AND {where}", args)

    def indexed_chunks_of(self, key: str) -> list[ChunkView]:
        """The chunks of note ``key`` if it is indexed (none while it is being written or deleted)."""
        return list(self._views("f.state = 'indexed' AND c.key = ?", (key,)))

    def chunks_of(self, key: str) -> list[ChunkView]:
        """The chunks of note ``key`` as answers show them (also while a batch writes it again)."""
        return list(self._views(f"{_SHOWN} AND c.key = ?", (key,)))

    def views(self, chunk_ids: Sequence[str]) -> dict[str, ChunkView]:
        """The chunks' views as last committed (a search's read: it never waits for a writer),
        those of notes on their way out left out."""
        out: dict[str, ChunkView] = {}
        for part, marks in _in_groups(chunk_ids):
            where = f"{_SHOWN} AND c.chunk_id IN ({marks})"
            out.update((v.chunk_id, v) for v in self._views(where, part, committed=True))
        return out

    def _views(self, where: str, args: Sequence[Any], *, committed: bool = False) -> Iterator[ChunkView]:
        rows = (self._committed if committed else self._query)(
            "SELECT c.chunk_id, c.key, f.source, f.agent, f.title, c.text, c.headings, c.start_line, "
            "c.end_line, f.tags, f.mtime_ns, f.front_matter, c.has_vector, f.ctime_ns, f.indexed_at "
            "FROM chunks c JOIN files f ON f.key = c.key "
            f"WHERE {where} "
            "ORDER BY c.key, c.ord",
            args,
        )
        for r in rows:
            yield ChunkView(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                _strings(r[6]),
                r[7],
                r[8],
                _strings(r[9]),
                r[10],
                _aliases(r[11]),
                r[12] not in (0, NEXT_ONLY),  # left to a switch's table: no vector to serve
                *note_day(r[11], r[1], self.day_formats),
                r[13],
                r[14],
            )

    def note_days(self) -> list[NoteDay]:
        """Every indexed note that has chunks, with its day (a time phrase lists a period's notes).
        Days are read from names and front matter here, as for any view: nothing stores them.
        Kept until the next write or a change of the daily-note formats (read anew, every time-
        phrase query parsed every note's front matter: about 90 ms for 10,000 notes)."""
        generation, formats = self.generation, self.day_formats
        cached = self._note_days
        if cached is not None and cached[0] == generation and cached[1] == formats:
            return list(cached[2])
        rows = self._committed(
            "SELECT key, source, agent, tags, mtime_ns, front_matter, ctime_ns, indexed_at FROM files "
            "WHERE state = 'indexed' AND chunks > 0"
        )
        days = [
            NoteDay(
                key,
                source,
                agent,
                _strings(tags),
                mtime_ns,
                day,
                how == "name" and daily_note(key, formats),
                ctime_ns,
                indexed_at,
            )
            for key, source, agent, tags, mtime_ns, fm, ctime_ns, indexed_at in rows
            for day, how in (note_day(fm, key, formats),)
        ]
        self._note_days = (generation, formats, days)
        return list(days)

    def first_chunks(self, keys: Sequence[str]) -> dict[str, ChunkView]:
        """Each note's first chunk, by key (a note listed for its date shows its beginning)."""
        out: dict[str, ChunkView] = {}
        for part, marks in _in_groups(keys):
            where = (
                f"{_SHOWN} AND c.key IN ({marks}) AND c.ord = (SELECT min(ord) FROM chunks WHERE key = c.key)"
            )
            out.update((v.key, v) for v in self._views(where, part, committed=True))
        return out

    def chunk_ids_of(self, keys: Sequence[str]) -> list[str]:
        out: list[str] = []
        for part, marks in _in_groups(keys):
            out.extend(r[0] for r in self._query(f"SELECT chunk_id FROM chunks WHERE key IN ({marks})", part))
        return out

    def list_files(self, where: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """(key, source, agent, title, tags json, mtime_ns, chunks, front matter json, ctime_ns,
        indexed_at) of indexed files matching ``where``."""
        return self._query(
            "SELECT key, source, agent, title, tags, mtime_ns, chunks, front_matter, ctime_ns, indexed_at "
            "FROM files "
            f"WHERE state = 'indexed' AND ({where}) ORDER BY key",
            args,
        )

    def unindexed_files(self, where: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """(key, source, mtime_ns, state, error, ctime_ns) of known files that are not indexed
        (skipped), not those on their way out (listed as "deleting", a moved note showed its old
        path)."""
        return self._query(
            "SELECT key, source, mtime_ns, state, error, ctime_ns FROM files "
            f"WHERE state NOT IN ('indexed', 'deleting') AND ({where}) ORDER BY key",
            args,
        )

    def all_chunk_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT chunk_id FROM chunks")}

    # --- health --------------------------------------------------------------------------

    def counts(self) -> dict[str, Any]:
        """Files and chunks per source and per agent, plus skipped files by reason."""
        by_source: dict[str, dict[str, int]] = {}
        for source, files, chunks in self._query(
            f"SELECT source, count(*), coalesce(sum(chunks), 0) FROM files WHERE {_COUNTED} GROUP BY source"
        ):
            by_source[source] = {"files": files, "chunks": chunks}
        by_agent = {
            agent: {"files": files, "chunks": chunks}
            for agent, files, chunks in self._query(
                "SELECT agent, count(*), coalesce(sum(chunks), 0) FROM files "
                f"WHERE {_COUNTED} AND source = 'memory' GROUP BY agent"
            )
        }
        skipped = dict(
            self._query("SELECT error, count(*) FROM files WHERE state = 'skipped' GROUP BY error")
        )
        # Indexed notes whose front matter could not be read (invalid YAML): found by their text,
        # without their title, tags, aliases and dates. Vault and wiki only: an inbox's notes are
        # checked as they are written, and health must not name one agent's notes to another.
        unread = self._query(
            "SELECT key, error FROM files WHERE state = 'indexed' AND error IS NOT NULL "
            "AND source != 'memory' ORDER BY key"
        )
        return {
            "files": sum(v["files"] for v in by_source.values()),
            "chunks": sum(v["chunks"] for v in by_source.values()),
            "by_source": by_source,
            "by_agent": by_agent,
            "skipped": skipped,
            "front_matter_unread": {
                "notes": len(unread),
                "examples": [{"reference": k, "reason": e} for k, e in unread[:5]],
            },
        }

    def skipped_files(self, limit: int) -> list[tuple[str, str | None]]:
        """(key, reason) of vault and wiki notes skipped when read (binary, not UTF-8, ...), by
        key, at most ``limit``."""
        return [
            (str(k), e)
            for k, e in self._query(
                "SELECT key, error FROM files WHERE state = 'skipped' "
                "AND (key < 'memory/' OR key >= 'memory0') ORDER BY key LIMIT ?",
                (limit,),
            )
        ]

    def indexed_chunk_count(self) -> int:
        """Chunks of files in state indexed: what BM25 must hold."""
        return int(
            self._query(
                "SELECT count(*) FROM chunks c JOIN files f ON f.key = c.key WHERE f.state = 'indexed'"
            )[0][0]
        )

    def indexed_shared_chunk_count(self) -> int:
        """Chunks of vault and wiki files in state indexed: what their keyword index must hold
        (memory's are held by the agents' indexes)."""
        return int(
            self._query(
                "SELECT count(*) FROM chunks c JOIN files f ON f.key = c.key "
                "WHERE f.state = 'indexed' AND f.source != 'memory'"
            )[0][0]
        )

    def indexed_page_count(self) -> int:
        """Files in state indexed that have chunks: what BM25's page index must hold."""
        return int(
            self._query(
                "SELECT count(DISTINCT c.key) FROM chunks c JOIN files f ON f.key = c.key "
                "WHERE f.state = 'indexed'"
            )[0][0]
        )

    def inbox_counts(self) -> dict[str, tuple[int, int]]:
        """Chunks and pages (notes with chunks) in state indexed, per agent: what each inbox's
        keyword index must hold."""
        rows = self._query(
            "SELECT f.agent, count(*), count(DISTINCT c.key) FROM chunks c JOIN files f ON f.key = c.key "
            "WHERE f.state = 'indexed' AND f.source = 'memory' GROUP BY f.agent"
        )
        return {str(agent): (int(chunks), int(pages)) for agent, chunks, pages in rows}

    def holds_memory_of(self, agent: str) -> bool:
        """Whether ``agent`` has an indexed memory note with chunks (what its own keyword index
        must hold): one row read, as last committed (a search asks, it never waits for a writer)."""
        where, args = _under(f"memory/{agent}/", "c.key")
        return bool(
            self._committed(
                "SELECT 1 FROM chunks c JOIN files f ON f.key = c.key "
                f"WHERE f.state = 'indexed' AND {where} LIMIT 1",
                args,
            )
        )

    def agents_with_memory(self) -> set[str]:
        """The agents that have an indexed memory note with chunks, as last committed."""
        # The key range lets the primary key find memory's rows: with the source alone every file
        # was scanned (58 ms at 100,000 files), on each health call and person's search while the
        # index of all memory is not filled.
        where, args = _under("memory/", "f.key")
        rows = self._committed(
            f"SELECT DISTINCT f.agent FROM files f WHERE {where} AND f.source = 'memory' "
            "AND f.state = 'indexed' AND EXISTS (SELECT 1 FROM chunks c WHERE c.key = f.key)",
            args,
        )
        return {str(r[0]) for r in rows}

    def chunk_count(self) -> int:
        return int(self._query("SELECT count(*) FROM chunks")[0][0])


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
