"""The manifest (stdlib sqlite3): which files are indexed, their chunks, and what waits for vectors.

It is the root of the derived indexes: chunk text and metadata live here, Tantivy and LanceDB hold
only what they search on plus the chunk id. A file's ``state`` is written before the stores are
touched (``indexing`` / ``deleting``) and after they committed (``indexed``), so a start after a
crash knows what to redo. Imports ``errors``, the link graph's table (``notes.links``), its file's
schema, upgrades and compaction (``manifest_file``), its own vector bookkeeping (``vectorbook``), a
rebuild's copy of the notes (``manifest_aside``), how a chunk's model text is stored
(``embedtext``), the day a note is about (``noteday``), and the disk's free space (``space``).
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
import time
import unicodedata
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import StoreError, store_error_class
from sidecar.contracts.wire import memory_agent
from sidecar.notes import links
from sidecar.notes.dayformat import DayFormats
from sidecar.notes.frontmatter import aliases_of
from sidecar.stores.embedtext import joined_embed_text, split_embed_text
from sidecar.stores.frozen import guarded_connect
from sidecar.stores.manifest_aside import ManifestAside
from sidecar.stores.manifest_file import (
    _PENDING_INDEX,
    _SCHEMA,
    SCHEMA_VERSION,
    ManifestFile,
    _newer,
    _refuse_newer,
    close_failed_open,
)
from sidecar.stores.noteday import daily_note, note_day
from sidecar.stores.space import PROBE_BYTES, free_bytes
from sidecar.stores.vectorbook import NEXT_ONLY, NO_VECTOR, VectorBook, _in_groups

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

log = logging.getLogger(__name__)

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


# The properties whose values name a note (``frontmatter._AS_WRITTEN``, lower case).
_NAME_PROPERTIES = ("aliases", "alias", "tags", "tag", "title")


def folded(name: str) -> str:
    """A name as a case-insensitive disk compares it: either Unicode form, either case (a Mac
    wrote "Über" in NFD, a name typed again is NFC; "ß" and "ẞ" are one letter)."""
    return unicodedata.normalize("NFC", name).casefold()


def _spelling_starts(letter: str) -> set[str]:
    """What another spelling of a name whose first letter is ``letter`` (NFC) begins with: either
    case, in either Unicode form (a decomposed letter begins with its base letter)."""
    fold = letter.casefold()
    alike = {letter, letter.lower(), letter.upper(), fold, fold.upper()}
    if fold == "ss":
        alike |= {"ß", "ẞ"}  # "ẞ".lower() is "ß", whose upper() is "SS"
    return {unicodedata.normalize("NFD", a)[0] for a in alike} | {a[0] for a in alike}


def _under(prefix: str, column: str = "key") -> tuple[str, tuple[str, ...]]:
    """A WHERE clause (and its arguments) for the values of ``column`` that start with ``prefix``."""
    end = prefix_end(prefix)
    return (
        (f"{column} >= ?", (prefix,)) if end is None else (f"{column} >= ? AND {column} < ?", (prefix, end))
    )


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


# ``reread_written_after`` without a row mark: no row is above it (SQLite's largest rowid).
_NO_ROW = 2**63 - 1


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


@dataclass(frozen=True)
class HeldNote:
    """An indexed note as its rows hold it: the file's title, tags and front matter (JSON), front
    matter error, and per chunk (ord, text, heading path JSON, start and end line, model text,
    tokens, text hash), in order."""

    title: str
    tags: str
    front_matter: str
    error: str | None
    chunks: list[tuple[int, str, str, int, int, str, int, str]]


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


class Manifest(ManifestFile, ManifestAside, VectorBook):
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
        # Searches read chunk views on connections of their own (``READERS`` at most, shared by
        # the threads): in WAL mode a reader sees the last commit and never waits for the writer,
        # whose transactions hold ``_lock`` for tens of ms under a load of memory writes (a search
        # waited up to 80 ms).
        self._readers: list[sqlite3.Connection] = []  # every one open (closed by ``close``)
        self._idle: list[sqlite3.Connection] = []  # those no read holds now
        self._opening = 0  # readers being opened (counted against ``READERS``)
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
        """A read of what is committed, on a reader connection (``_take_reader``) or the writer's.
        Every statement is read to its end (``fetchall``), so none keeps a read transaction, and
        with it an old snapshot, open past its call."""
        # Read-only (immutable): nothing writes, and a reader of its own would make files.
        db = None if self.read_only else self._take_reader()
        if db is None:
            return self._query(sql, args)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            self._give_back(db)

    def _take_reader(self) -> sqlite3.Connection | None:
        """A reader no read holds: an idle one, a new one while fewer than ``READERS`` are open,
        else the first one given back within ``READER_WAIT_S``. None (read through the writer)
        when none can be opened, when all are reading and the writer is idle or this thread holds
        it (inside a transaction), or when none came back in time. A read through the writer holds
        its lock, so no commit runs meanwhile and the commit's settle read still finds a slot."""
        deadline = time.monotonic() + READER_WAIT_S
        with self._reader_free:
            while not self._readers_shut and not self._idle and len(self._readers) + self._opening >= READERS:
                left = deadline - time.monotonic()
                if left <= 0 or self._writer_free():
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
        if not self._lock.acquire(blocking=False):
            return False
        self._lock.release()
        return True

    def _give_back(self, db: sqlite3.Connection) -> None:
        with self._reader_free:
            if db in self._readers:  # not closed meanwhile (``close``)
                self._idle.append(db)
            self._reader_free.notify()

    def _readers_taken(self) -> list[sqlite3.Connection]:
        """For ``close``: every reader, none registered or taken after it (a read then goes
        through the writer), any read waiting for one goes on."""
        with self._reader_free:
            readers = list(self._readers)
            self._readers.clear()
            self._idle.clear()
            self._readers_shut = True
            self._reader_free.notify_all()
        return readers

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

    def reread_written_after(self, since: float, row: int | None = None) -> int:
        """``reread_all`` for the notes whose rows were written after ``since`` (``indexed_at``)
        or, ``row`` given, that were written as a row after it (``last_row``): a wall clock set
        back or ahead moves the times, not the rows (every write of a note is a new row)."""
        after_row = row if row is not None else _NO_ROW
        with self.transaction() as db:
            marked = db.execute(
                "UPDATE files SET size = -1, hash = '' WHERE indexed_at > ? OR rowid > ?", (since, after_row)
            )
            return int(marked.rowcount)

    def last_written(self) -> float:
        """When the latest note row was written (``indexed_at``; 0 in an empty index)."""
        return float(self._query("SELECT coalesce(max(indexed_at), 0) FROM files")[0][0])

    def last_row(self) -> int:
        """The latest note row (its rowid: a note's row is written anew, INSERT OR REPLACE, with a
        rowid above every other; 0 in an empty index). Read from the end of the table's b-tree."""
        return int(self._query("SELECT coalesce(max(rowid), 0) FROM files")[0][0])

    def last_row_up_to(self, row: int) -> int:
        """The latest note row numbered ``row`` or below (0 when none): one b-tree seek."""
        return int(self._query("SELECT coalesce(max(rowid), 0) FROM files WHERE rowid <= ?", (row,))[0][0])

    def row_note(self, row: int) -> list[Any] | None:
        """[key, indexed_at] of the note row numbered ``row``; None when no row has it."""
        rows = self._query("SELECT key, indexed_at FROM files WHERE rowid = ?", (row,))
        return [str(rows[0][0]), float(rows[0][1])] if rows else None

    def reread_keys(self, keys: Sequence[str], db: sqlite3.Connection) -> None:
        """``reread_all`` for these notes only, inside the caller's transaction."""
        db.executemany("UPDATE files SET size = -1, hash = '' WHERE key = ?", [(k,) for k in keys])

    # --- files ---------------------------------------------------------------------------

    def has_files(self, prefix: str) -> bool:
        """Whether the index holds any entry under ``prefix``, in any state (a note skipped, or
        being deleted, too); one row read, not all of them."""
        where, args = _under(prefix)
        return bool(self._query(f"SELECT 1 FROM files WHERE {where} LIMIT 1", args))

    def has_notes(self, prefix: str) -> bool:
        """Whether a note under ``prefix`` is indexed (counted as the index's notes are: not one
        skipped, too large or hidden, whose row says only why it is left out)."""
        where, args = _under(prefix)
        return bool(self._query(f"SELECT 1 FROM files WHERE {where} AND {_COUNTED} LIMIT 1", args))

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

    def spelled_otherwise(self, keys: Collection[str]) -> dict[str, str]:
        """Indexed keys that one of ``keys`` spells but for case or Unicode form ("vault/Tar"
        for "vault/tar"), each with its file's ``rel``; none of ``keys`` among them. Read by
        ranges of the key index: per first letter of the names of a folder (deduplicated: a
        checkout of many notes reads each once), in either case and form, its direct names only
        (a name without letters has no other spelling). Was: a folder's whole subtree read for
        each batch of more than 16 new notes in it."""
        wanted: dict[str, set[str]] = {}  # folder -> the names as a case-insensitive disk has them
        ranges: set[tuple[str, int]] = set()  # (a key range's prefix, where names of its folder begin)
        for key in keys:
            folder, _, name = key.rpartition("/")
            nfc = unicodedata.normalize("NFC", name)
            first = next((i for i, ch in enumerate(nfc) if ch.lower() != ch.upper()), None)
            if not folder or first is None:
                continue
            wanted.setdefault(folder, set()).add(folded(name))
            start = len(folder) + 2 if folder else 1  # SQL counts from 1
            ranges.update((f"{folder}/{nfc[:first]}{s}", start) for s in _spelling_starts(nfc[first]))
        own = set(keys)
        out: dict[str, str] = {}
        for prefix, start in sorted(ranges):
            where, args = _under(prefix)
            # The folder's own names only: a subfolder whose name begins alike holds no spelling.
            sql = f"SELECT key, rel FROM files WHERE {where} AND instr(substr(key, ?), '/') = 0"
            for k, rel in self._query(sql, (*args, start)):
                folder, _, name = str(k).rpartition("/")
                if k not in own and folded(name) in wanted.get(folder, ()):
                    out[str(k)] = str(rel)
        return out

    def folders_spelled_otherwise(self, folders: Collection[str]) -> dict[str, str]:
        """Indexed folders (the folder part of indexed keys) that one of ``folders`` (a folder's
        key) spells but for case or Unicode form in its last name ("vault/Notes" for
        "vault/notes"), each with the one of ``folders`` it is; none of ``folders`` among them.
        Read by ranges of the key index per first letter of that name, in either case and form,
        as ``spelled_otherwise`` reads a folder's notes."""
        own = set(folders)
        out: dict[str, str] = {}
        for folder in folders:
            parent, _, name = folder.rpartition("/")
            nfc = unicodedata.normalize("NFC", name)
            first = next((i for i, ch in enumerate(nfc) if ch.lower() != ch.upper()), None)
            if not parent or first is None:
                continue
            start = len(parent) + 2  # where the names of ``parent``'s entries begin (SQL from 1)
            # The folder part of each key below a folder of ``parent`` whose name begins alike.
            head = "substr(key, 1, ? + instr(substr(key, ?), '/') - 2)"
            for s in _spelling_starts(nfc[first]):
                where, args = _under(f"{parent}/{nfc[:first]}{s}")
                sql = f"SELECT DISTINCT {head} FROM files WHERE {where} AND instr(substr(key, ?), '/') > 0"
                for (found,) in self._query(sql, (start, start, *args, start)):
                    if found not in own and folded(str(found).rpartition("/")[2]) == folded(name):
                        out[str(found)] = folder
        return out

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

    def held_note(self, key: str) -> HeldNote | None:
        """What the index holds of a note (None unless it is ``indexed``): what reading and
        cutting its file gave."""
        rows = self._query(
            "SELECT title, tags, front_matter, error FROM files WHERE key = ? AND state = 'indexed'", (key,)
        )
        if not rows:
            return None
        chunks = [
            (o, text, headings, start, end, joined_embed_text(head, text, cut), tokens, hashed)
            for o, text, headings, start, end, head, cut, tokens, hashed in self._query(
                "SELECT ord, text, headings, start_line, end_line, embed_text, embed_from, tokens, "
                "embed_hash FROM chunks WHERE key = ? ORDER BY ord",
                (key,),
            )
        ]
        title, tags, front_matter, error = rows[0]
        return HeldNote(title, tags, front_matter, error, chunks)

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
