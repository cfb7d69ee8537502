"""A rebuild's copy of the notes indexed before it, a mixin of ``Manifest``: kept in tables of the
manifest (``aside_files``, ``aside_chunks``, ``aside_links``) while the rebuild empties the index,
then the notes it did not read back are put back from it and the copy is dropped. Its own module
because this copy's life (room for it, a copy kept from a failed rebuild, one written by another
version) is read and changed apart from the manifest's everyday reads and writes. Not the copies
of damaged stores moved aside on disk (``aside``). Imports ``errors``, the link graph's rows
(``notes.links``) and the disk's free space (``space``); the connection and transactions are the
manifest's own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.contracts.errors import DiskFullError
from sidecar.notes.links import put_back
from sidecar.stores.space import PROBE_BYTES, free_bytes

# Whether a rebuild's copy of the notes indexed before it is kept (``Manifest.set_aside``).
_ASIDE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'aside_files'"
_ASIDE_LINKS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'aside_links'"


class ManifestAside:
    """A rebuild's copy of the indexed notes (``set_aside``), put back (``restore_aside``) or
    dropped (``drop_aside``); the state it works on is the manifest's own."""

    path: Path

    if TYPE_CHECKING:  # the manifest's own (``Manifest``)

        def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...
        def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...
        @staticmethod
        def set_meta_in(db: sqlite3.Connection, rows: Mapping[str, str]) -> None: ...
        def reread_keys(self, keys: Sequence[str], db: sqlite3.Connection) -> None: ...

    def set_aside(self, db: sqlite3.Connection) -> None:
        """Keep a copy of the indexed notes and their chunks before a rebuild empties the index
        (``restore_aside``): a note the rebuild does not read back (its share went away during
        it) comes back from here instead of leaving the index while its share is away."""
        short = self.aside_room(db)
        if short is not None:
            raise DiskFullError(short)
        indexed = "SELECT key FROM files WHERE state = 'indexed'"
        if db.execute(_ASIDE).fetchall():
            # A rebuild's copy not put back yet (its sweep failed, or was stopped before it ended):
            # the notes this index holds now replace theirs there, the others stay.
            db.execute(f"DELETE FROM aside_files WHERE key IN ({indexed})")
            db.execute(f"DELETE FROM aside_chunks WHERE key IN ({indexed})")
            _merge_aside(db, "files", "WHERE state = 'indexed'")
            _merge_aside(db, "chunks", f"WHERE key IN ({indexed})")
            if db.execute(_ASIDE_LINKS).fetchall():
                db.execute(f"DELETE FROM aside_links WHERE src IN ({indexed})")
                _merge_aside(db, "links", f"WHERE src IN ({indexed})")
            return
        db.execute("CREATE TABLE aside_files AS SELECT * FROM files WHERE state = 'indexed'")
        db.execute(f"CREATE TABLE aside_chunks AS SELECT * FROM chunks WHERE key IN ({indexed})")
        # Their outgoing links too: a note put back without them showed none, and no backlinks
        # pointed from it, until read again.
        db.execute(f"CREATE TABLE aside_links AS SELECT * FROM links WHERE src IN ({indexed})")

    def aside_room(self, db: sqlite3.Connection | None = None) -> str | None:
        """Why a rebuild's copy (``set_aside``) does not fit on the index's disk now, else None.
        The copy is at most what the manifest holds, and is written twice (its log, then the
        file): a rebuild on a nearly full disk failed partway with an error of the database."""
        pragmas = ("page_size", "page_count", "freelist_count")
        if db is None:
            size, pages, free_pages = (int(self._query(f"PRAGMA {p}")[0][0]) for p in pragmas)
        else:
            size, pages, free_pages = (int(db.execute(f"PRAGMA {p}").fetchone()[0]) for p in pragmas)
        need = 2 * (pages - free_pages) * size + PROBE_BYTES
        free = free_bytes(self.path.parent)
        if free is None or free >= need:
            return None
        return (
            f"not rebuilt: the disk of the index ({self.path.parent}) has {free // 2**20} MiB free and a "
            f"rebuild needs about {need // 2**20} MiB to keep a copy of the notes indexed until they are "
            "read back. Nothing was changed. Free some space and run `sidecar index --rebuild` again"
        )

    def has_aside(self) -> bool:
        """Whether a rebuild's copy of the notes indexed before it is kept (``set_aside``)."""
        return bool(self._query(_ASIDE))

    def aside_candidates(self) -> list[tuple[str, str, bool]]:
        """The notes of a rebuild's copy (``set_aside``) that it did not read back: (key, file
        name in its root, whether its read failed in the rebuild: skipped with size -1, see
        ``records.file_record``). Which of them are put back is the indexer's choice."""
        if not self._query(_ASIDE):
            return []
        sql = (
            "SELECT a.key, a.rel, f.key IS NOT NULL FROM aside_files a LEFT JOIN files f ON f.key = a.key "
            "WHERE f.key IS NULL OR (f.state = 'skipped' AND f.size = -1)"
        )
        return [(k, rel, bool(failed)) for k, rel, failed in self._query(sql)]

    def restore_aside(self, wanted: Collection[str], kept_as: str | None = None) -> list[str]:
        """Put back the notes ``wanted`` of the copy a rebuild kept that are not in the index now
        (or whose read failed in it), marked to be read again (``reread_all``) with no vector;
        the copy is dropped. Returns their keys, also kept (as JSON) in the meta row ``kept_as``
        in the same transaction: a fault between the two lost them, and status said the rebuild
        finished."""
        with self.transaction() as db:
            if not db.execute(_ASIDE).fetchall():
                if kept_as is not None:
                    self.set_meta_in(db, {kept_as: ""})
                return []
            db.execute("CREATE TEMP TABLE IF NOT EXISTS aside_back (key TEXT PRIMARY KEY)")
            db.execute("DELETE FROM aside_back")
            db.executemany("INSERT OR IGNORE INTO aside_back VALUES (?)", [(k,) for k in wanted])
            # Those whose read failed in the rebuild (``records.file_record``: skipped, size -1)
            # are put back too: a folder made unreadable during it dropped them.
            db.execute(
                "DELETE FROM files WHERE state = 'skipped' AND size = -1 AND key IN "
                "(SELECT key FROM aside_back) AND key IN (SELECT key FROM aside_files)"
            )
            back = "key IN (SELECT key FROM aside_back) AND key NOT IN (SELECT key FROM files)"
            keys = [r[0] for r in db.execute(f"SELECT key FROM aside_files WHERE {back}")]
            if keys:
                # Columns named, those both tables have: a copy written by another version may
                # order them otherwise, or hold one the index no longer has.
                files = _shared_columns(db, "files")
                chunks = _shared_columns(db, "chunks")
                db.execute(  # before the files: the notes not in the index now
                    f"INSERT OR IGNORE INTO chunks ({chunks}) SELECT {chunks} FROM aside_chunks WHERE {back}"
                )
                if db.execute(_ASIDE_LINKS).fetchall():
                    put_back(  # their outgoing links, resolved again with every link after
                        db,
                        "aside_links",
                        "a.src IN (SELECT key FROM aside_back) AND a.src NOT IN (SELECT key FROM files)",
                    )
                db.execute(f"INSERT INTO files ({files}) SELECT {files} FROM aside_files WHERE {back}")
                self.reread_keys(keys, db)
                db.executemany("UPDATE chunks SET has_vector = 0 WHERE key = ?", [(k,) for k in keys])
            self._drop_aside(db)
            if kept_as is not None:
                self.set_meta_in(db, {kept_as: json.dumps(sorted(keys)) if keys else ""})
            return keys

    def drop_aside(self) -> None:
        """Drop a rebuild's copy without putting anything back (one that cannot be read back)."""
        with self.transaction() as db:
            self._drop_aside(db)

    @staticmethod
    def _drop_aside(db: sqlite3.Connection) -> None:
        db.execute("DROP TABLE IF EXISTS aside_files")
        db.execute("DROP TABLE IF EXISTS aside_chunks")
        db.execute("DROP TABLE IF EXISTS aside_links")
        db.execute("DROP TABLE IF EXISTS temp.aside_back")


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def _shared_columns(db: sqlite3.Connection, table: str) -> str:
    """The columns of ``table`` its rebuild copy ``aside_<table>`` has too, named (comma-separated)."""
    kept = set(_columns(db, f"aside_{table}"))
    return ", ".join(f'"{c}"' for c in _columns(db, table) if c in kept)


def _merge_aside(db: sqlite3.Connection, table: str, where: str) -> None:
    """``table``'s rows ``where`` into a rebuild's copy kept already, by the columns both have
    (one written by another version may order its columns otherwise, or lack one or have one
    more: what it lacks takes its default when put back). By position, it failed ("11 columns
    but 12 values") and so did every retry of the rebuild, or values went to the wrong columns."""
    columns = _shared_columns(db, table)
    db.execute(f"INSERT INTO aside_{table} ({columns}) SELECT {columns} FROM {table} {where}")
