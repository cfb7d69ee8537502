"""The manifest's questions about its files, a mixin of ``Manifest`` (:mod:`sidecar.stores.manifest`):
which keys it holds and in what state, under which spelling, which agents have notes, the row
marks of the last writes, and the notes marked to be read again. Its own module because it is
what the file table answers, not how a note is written; the connection is the ``Manifest``'s.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sidecar.contracts.wire import memory_agent
from sidecar.stores.manifest_rows import _COUNTED, _STATE_COLUMNS, FileState, _spelling_starts, _under, folded
from sidecar.stores.vectorbook import _in_groups

# ``reread_written_after`` without a row mark: no row is above it (SQLite's largest rowid).
_NO_ROW = 2**63 - 1


class ManifestKeys:
    """The file table's reads and its marks of notes to read again, for ``Manifest``."""

    if TYPE_CHECKING:  # the manifest's own (``Manifest``)

        def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...

        def _committed(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...

        def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def reread_all(self) -> int:
        """Make every note look changed (a size no file has, the hash forgotten): the next sweep
        reads and cuts it again, while its chunks stay searchable until then. The mtime stays: date
        filters read it for notes without a date of their own. Returns how many notes."""
        with self.transaction() as db:
            return int(db.execute("UPDATE files SET size = -1, hash = ''").rowcount)

    def reread_waiting(self) -> dict[str, int]:
        """How many indexed notes wait to be read and cut again (``reread_all`` and the others),
        by root name (``Root.name``: vault, wiki, memory/<agent>): one pass over the notes' rows
        (about 0.15 s at 60,000), on a reader connection, so that no write waits for it."""
        rows = self._committed(
            "SELECT CASE source WHEN 'memory' THEN 'memory/' || agent ELSE source END, count(*) "
            "FROM files WHERE state = 'indexed' AND size = -1 GROUP BY 1"
        )
        return {str(root): int(n) for root, n in rows}

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
