"""The manifest's vector bookkeeping: which chunks wait for a vector in the serving table and in
the table being built for a newly configured model, which equal texts can share one, and the
vectors of deleted chunks kept by text for a while. A base of :class:`~sidecar.stores.manifest.Manifest`
over the same connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from sidecar.stores.embedtext import joined_embed_text

# has_vector: the chunk is in the serving vector table; has_next: in the table being built for a
# newly configured model (vectors of two models never share a table). Only these two names are
# ever put into SQL. Values: 0 waits for a vector, 1 has one, 2 needs none (an empty or
# front-matter-only note).
FLAGS = ("has_vector", "has_next")
NO_VECTOR = 2
# has_vector only: waits for no vector in the serving table, as the chunk of a note cut again (its
# file unchanged) while a switch to another model builds its table. The model being switched to
# cut it and embeds it; the retiring model embedded every such chunk first, minutes to hours of a
# small CPU for vectors dropped with its table at the switch. Waits again (0) once a table serves
# without a switch (``release_next_only``); the switch's end replaces it (``promote_next``).
NEXT_ONLY = 3
# A chunk at or past this place in its note (``ord``) waits for no vector (index.maxVectorChunksPerNote,
# set by the daemon): it is found by keywords only. Not stored in the flags: a raised limit queues
# the chunks it lets in, a lowered one keeps the vectors computed, with no rewrite of any row.
UNLIMITED = 2**62


_T = TypeVar("_T")

# ``note != ''`` lets SQLite use the partial index kept_by_note (``note = ?`` alone does not imply
# it): without, each edited note scanned the whole kept table under the write lock.
PRUNE_EDITS = (
    "DELETE FROM kept_vectors WHERE vec_table = ? AND note = ? AND note != '' AND kept_at < ("
    "SELECT min(kept_at) FROM (SELECT DISTINCT kept_at FROM kept_vectors "
    "WHERE vec_table = ? AND note = ? AND note != '' ORDER BY kept_at DESC LIMIT ?))"
)

# ``embed_hash != ''`` lets SQLite use the partial index chunks_by_text (``IN (?, ...)`` alone does
# not imply it): without, each call scanned the whole chunk table, 36-60 ms at 76,000 chunks, for
# every backfill batch and every memory write's chunks. ``{marks}``: a group's placeholders.
VECTOR_DONORS = (
    "SELECT embed_hash, min(chunk_id) FROM chunks WHERE embed_hash IN ({marks}) AND embed_hash != '' "
    "AND {flag} = 1 GROUP BY embed_hash"
)


def _in_groups(values: Sequence[_T]) -> Iterator[tuple[list[_T], str]]:
    """``values`` in groups that fit one SQL ``IN (...)``: each group with its placeholders."""
    for start in range(0, len(values), 500):
        part = list(values[start : start + 500])
        yield part, ",".join("?" * len(part))


def _flag(name: str) -> str:
    if name not in FLAGS:  # pragma: no cover - a programming error, never user input
        raise ValueError(f"unknown vector flag {name!r}")
    return name


class VectorBook:
    """Vector flags and kept vectors; the subclass owns the connection."""

    vector_cap = UNLIMITED  # chunks of one note that get a vector (``UNLIMITED``); set per instance

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _committed(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _pairs(self, sql: str, values: Sequence[str], *before: Any) -> dict[str, Any]:
        """Two-column rows of ``sql`` (``{marks}``: the group's placeholders) over ``values`` in
        groups that fit one ``IN (...)``, as a dict; ``before`` are parameters ahead of the group."""
        out: dict[str, Any] = {}
        for part, marks in _in_groups(values):
            out.update(self._query(sql.format(marks=marks), [*before, *part]))
        return out

    def pending_vectors(
        self, limit: int, key: str | None = None, flag: str = "has_vector"
    ) -> list[tuple[str, str, str, str]]:
        """(chunk_id, key, embed_text, embed_hash) still without a vector: memory, then wiki, then
        newest vault notes."""
        only = "AND c.key = ? " if key is not None else ""
        rows = self._query(
            "SELECT c.chunk_id, c.key, c.embed_text, c.text, c.embed_from, c.embed_hash FROM files f "
            "JOIN chunks c ON c.key = f.key "
            f"WHERE c.{_flag(flag)} = 0 AND c.ord < ? AND f.state = 'indexed' {only}"
            "ORDER BY CASE f.source WHEN 'memory' THEN 0 WHEN 'wiki' THEN 1 ELSE 2 END, "
            "f.mtime_ns DESC, c.ord "
            "LIMIT ?",
            (self.vector_cap, key, limit) if key is not None else (self.vector_cap, limit),
        )
        return [(i, k, joined_embed_text(e, t, start), h) for i, k, e, t, start, h in rows]

    def keyword_only(self, examples: int = 5) -> tuple[int, int, list[tuple[str, int, int]]]:
        """Chunks past the per-note limit (``vector_cap``) without a vector in the serving table:
        how many notes, how many chunks, and the notes with most of them, vault and wiki only
        (key, its chunks, those keyword-only; an agent's notes are not named to others). Read
        from the pending index alone (no chunk row); health keeps it a second."""
        rows = self._query(
            "SELECT key, count(*) FROM chunks WHERE has_vector = 0 AND ord >= ? GROUP BY key",
            (self.vector_cap,),
        )
        named = sorted(((n, k) for k, n in rows if not k.startswith("memory/")), reverse=True)[:examples]
        sizes = self._pairs("SELECT key, chunks FROM files WHERE key IN ({marks})", [k for _, k in named])
        return (
            len(rows),
            sum(n for _, n in rows),
            [(k, int(sizes.get(k, 0)), n) for n, k in named],
        )

    def pending_largest(
        self, flag: str = "has_vector", less: Mapping[str, int] | None = None
    ) -> tuple[str, int] | None:
        """The vault or wiki note with the most chunks waiting for a vector, and how many; ``less``:
        so many fewer of these notes count (a note written continuously: what its last indexing
        added is no backlog)."""
        less = less or {}
        # Only the notes in ``less`` lose chunks: the largest is among one more than they are.
        rows = self._query(
            f"SELECT key, count(*) AS n FROM chunks WHERE {_flag(flag)} = 0 AND ord < ? "
            "AND (key < 'memory/' OR key >= 'memory0') GROUP BY key ORDER BY n DESC, key LIMIT ?",
            (self.vector_cap, len(less) + 1),
        )
        counted = sorted(
            ((int(n) - less.get(str(k), 0), str(k)) for k, n in rows), key=lambda x: (-x[0], x[1])
        )
        return (counted[0][1], counted[0][0]) if counted and counted[0][0] > 0 else None

    def vector_donors(self, hashes: Sequence[str], flag: str = "has_vector") -> dict[str, str]:
        """For texts about to be embedded: a chunk with the same text that already has a vector."""
        return self._pairs(VECTOR_DONORS.replace("{flag}", _flag(flag)), hashes)

    def embed_hashes(self, chunk_ids: Sequence[str], flag: str = "has_vector") -> dict[str, str]:
        """chunk_id -> text hash of those chunks that have a vector in ``flag``'s table."""
        return self._pairs(
            "SELECT chunk_id, embed_hash FROM chunks WHERE chunk_id IN ({marks}) "
            f"AND embed_hash != '' AND {_flag(flag)} = 1",
            chunk_ids,
        )

    def keep_vectors(self, table: str, rows: Sequence[tuple[str, bytes, str]], now: float) -> None:
        """Remember (text hash, vector bytes, note) of chunks about to lose their vector; note is
        "" for a note that leaves the index, else the key of the note whose edit replaced them. A
        text kept for a note that left stays so (the note may come back whole)."""
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO kept_vectors(vec_table, embed_hash, vector, kept_at, note) "
                "VALUES (?,?,?,?,?) ON CONFLICT(vec_table, embed_hash) DO UPDATE SET "
                "vector = excluded.vector, kept_at = excluded.kept_at, "
                "note = CASE kept_vectors.note WHEN '' THEN '' ELSE excluded.note END",
                [(table, h, v, now, note) for h, v, note in rows],
            )

    def prune_edits(self, table: str, notes: Iterable[str], edits: int) -> int:
        """Forget the vectors that edits of ``notes`` replaced, but for their last ``edits`` edits
        (an edit's rows share their ``kept_at``): a note rewritten every few seconds for hours
        would otherwise fill the whole budget with texts that never come back."""
        n = 0
        with self.transaction() as db:
            for note in notes:
                n += db.execute(PRUNE_EDITS, (table, note, table, note, edits)).rowcount
        return int(n)

    def chunk_notes(self, chunk_ids: Sequence[str]) -> dict[str, str]:
        """chunk_id -> the key of its note."""
        return self._pairs("SELECT chunk_id, key FROM chunks WHERE chunk_id IN ({marks})", chunk_ids)

    def kept_vectors(self, table: str, hashes: Sequence[str]) -> dict[str, bytes]:
        return self._pairs(
            "SELECT embed_hash, vector FROM kept_vectors WHERE vec_table = ? AND embed_hash IN ({marks})",
            hashes,
            table,
        )

    def newest_kept(self) -> float | None:
        """The newest stamp of a kept vector, None when none is kept (the stamps' index)."""
        got = self._query("SELECT max(kept_at) FROM kept_vectors")[0][0]
        return None if got is None else float(got)

    def kept_span(self) -> tuple[float | None, float | None]:
        """The oldest and the newest stamp of the kept vectors and remembered chunks (None, None
        when none is kept): four reads of their stamps' indexes."""
        row = self._query(
            "SELECT (SELECT min(kept_at) FROM kept_vectors), (SELECT max(kept_at) FROM kept_vectors), "
            "(SELECT min(kept_at) FROM kept_later), (SELECT max(kept_at) FROM kept_later)"
        )[0]
        lows = [float(v) for v in row[0::2] if v is not None]
        highs = [float(v) for v in row[1::2] if v is not None]
        return (min(lows) if lows else None, max(highs) if highs else None)

    def prune_kept(self, older_than: float, keep_at_most: int) -> int:
        """Forget kept vectors older than ``older_than``, and past ``keep_at_most`` those that edits
        replaced first, then the oldest: the notes that left the index have the whole budget."""
        with self.transaction() as db:
            n = db.execute("DELETE FROM kept_vectors WHERE kept_at < ?", (older_than,)).rowcount
            if db.execute("SELECT count(*) FROM kept_vectors").fetchone()[0] > keep_at_most:
                n += db.execute(
                    "DELETE FROM kept_vectors WHERE rowid NOT IN (SELECT rowid FROM kept_vectors "
                    "ORDER BY note = '' DESC, kept_at DESC LIMIT ?)",
                    (keep_at_most,),
                ).rowcount
        return int(n)

    def keep_later(
        self, rows: Sequence[tuple[str, str]], now: float, older_than: float, keep_at_most: int
    ) -> None:
        """Remember (chunk id, text hash) of chunks deleted while no vector table is open (their
        rows stay in the table until it is attached), bounded as the kept vectors are."""
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO kept_later(chunk_id, embed_hash, kept_at) VALUES (?,?,?)",
                [(cid, h, now) for cid, h in rows],
            )
            db.execute("DELETE FROM kept_later WHERE kept_at < ?", (older_than,))
            db.execute(
                "DELETE FROM kept_later WHERE rowid NOT IN "
                "(SELECT rowid FROM kept_later ORDER BY kept_at DESC LIMIT ?)",
                (keep_at_most,),
            )

    def kept_later(self, chunk_ids: Sequence[str], since: float) -> dict[str, tuple[str, float]]:
        """chunk id -> (text hash, when it was deleted) of those of ``chunk_ids`` deleted while no
        table was open, at ``since`` or later."""
        out: dict[str, tuple[str, float]] = {}
        for part, marks in _in_groups(chunk_ids):
            rows = self._query(
                f"SELECT chunk_id, embed_hash, kept_at FROM kept_later WHERE chunk_id IN ({marks}) "
                "AND kept_at >= ?",
                [*part, since],
            )
            out.update((cid, (h, float(at))) for cid, h, at in rows)
        return out

    def restamp_kept(self, before: float, now: float, spread: float, ahead: float) -> tuple[int, int]:
        """Kept vectors and remembered chunks stamped before ``before`` restamped up to ``now``
        in their order: the newest ``now``, the others their distance from it earlier, squeezed
        into ``spread`` seconds if they span more; those stamped after ``ahead`` stamped ``now``.
        How many of each (see ``VectorRows.mend_kept_times``)."""
        tables = ("kept_vectors", "kept_later")
        with self.transaction() as db:
            ends = [
                db.execute(
                    f"SELECT min(kept_at), max(kept_at) FROM {t} WHERE kept_at < ?", (before,)
                ).fetchone()
                for t in tables
            ]
            lows = [lo for lo, _ in ends if lo is not None]
            behind = 0
            if lows:
                newest = max(hi for _, hi in ends if hi is not None)
                span = newest - min(lows)
                scale = min(1.0, spread / span) if span > 0 else 1.0
                for t in tables:
                    behind += db.execute(
                        f"UPDATE {t} SET kept_at = ? - (? - kept_at) * ? WHERE kept_at < ?",
                        (now, newest, scale, before),
                    ).rowcount
            over = sum(
                db.execute(f"UPDATE {t} SET kept_at = ? WHERE kept_at > ?", (now, ahead)).rowcount
                for t in tables
            )
        return int(behind), int(over)

    def forget_kept_later(self) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM kept_later")

    def kept_count(self, note: str | None = None) -> int:
        """Kept vectors; of ``note``: those its edits replaced ("": of notes that left the index)."""
        if note is None:
            return int(self._query("SELECT count(*) FROM kept_vectors")[0][0])
        return int(self._query("SELECT count(*) FROM kept_vectors WHERE note = ?", (note,))[0][0])

    def vector_count(self, flag: str = "has_vector") -> int:
        """Chunks with a vector in ``flag``'s table."""
        return int(self._query(f"SELECT count(*) FROM chunks WHERE {_flag(flag)} = 1")[0][0])

    def pending_count(self, flag: str = "has_vector") -> int:
        """Chunks that wait for a vector in ``flag``'s table (those past the per-note limit wait
        for none)."""
        sql = f"SELECT count(*) FROM chunks WHERE {_flag(flag)} = 0 AND ord < ?"
        # A scan of every chunk (health asks at each call, the watchdog each minute): on a reader,
        # not through the writer's connection under its lock, where every write waited for it.
        return int(self._committed(sql, (self.vector_cap,))[0][0])

    def pending_count_of(self, caps: Mapping[str, int], flag: str = "has_vector") -> int:
        """Of ``pending_count``, the chunks of these notes, at most ``caps[key]`` of each."""
        n = 0
        for part, marks in _in_groups(sorted(caps)):
            sql = (
                f"SELECT key, count(*) FROM chunks WHERE key IN ({marks}) AND {_flag(flag)} = 0 "
                "AND ord < ? GROUP BY key"
            )
            n += sum(min(int(c), caps[k]) for k, c in self._query(sql, [*part, self.vector_cap]))
        return n

    def still_pending(self, chunk_ids: Sequence[str], flag: str) -> set[str]:
        """Those of ``chunk_ids`` that exist and still wait for a vector (asked under the write
        lock, which every writer of chunks and flags holds: the answer holds until it is released)."""
        out: set[str] = set()
        for part, marks in _in_groups(chunk_ids):
            sql = f"SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks}) AND {_flag(flag)} = 0"
            out.update(r[0] for r in self._query(sql, part))
        return out

    def set_has_vector(
        self, chunk_ids: Iterable[str], value: int, db: sqlite3.Connection, flag: str = "has_vector"
    ) -> None:
        db.executemany(
            f"UPDATE chunks SET {_flag(flag)} = ? WHERE chunk_id = ?", [(value, i) for i in chunk_ids]
        )

    def reset_vectors(self, flag: str = "has_vector") -> None:
        with self.transaction() as db:
            db.execute(f"UPDATE chunks SET {_flag(flag)} = 0 WHERE {_flag(flag)} = 1")

    def leave_to_next(self, keys: Sequence[str], db: sqlite3.Connection) -> None:
        """The chunks of these notes still waiting for a serving vector wait for none (``NEXT_ONLY``)."""
        # Not those past the per-note limit: they wait for no vector of either model (keyword-only).
        db.executemany(
            f"UPDATE chunks SET has_vector = {NEXT_ONLY} WHERE key = ? AND has_vector = 0 AND ord < ?",
            [(k, self.vector_cap) for k in keys],
        )

    def leave_ids_to_next(self, chunk_ids: Sequence[str], db: sqlite3.Connection) -> None:
        """These chunks, waiting for a serving vector, wait for none (``NEXT_ONLY``): a vault or
        wiki note's, within the per-note limit (an agent's memory stays found by meaning, as in
        ``Writer._recut_for_switch``)."""
        db.executemany(
            f"UPDATE chunks SET has_vector = {NEXT_ONLY} WHERE chunk_id = ? AND has_vector = 0 "
            "AND ord < ? AND (key < 'memory/' OR key >= 'memory0')",
            [(c, self.vector_cap) for c in chunk_ids],
        )

    def wait_again(self, keys: Sequence[str], db: sqlite3.Connection) -> None:
        """The chunks of these notes left to a switch's table wait for a serving vector again (a
        note edited during the switch is found by meaning with the serving model too)."""
        db.executemany(
            f"UPDATE chunks SET has_vector = 0 WHERE key = ? AND has_vector = {NEXT_ONLY}",
            [(k,) for k in keys],
        )

    def left_to_switch(self) -> int:
        """Chunks within the per-note limit left to a switch's table (``NEXT_ONLY``): no vector
        serves them, search finds them by keywords only until the switch ends."""
        sql = f"SELECT count(*) FROM chunks WHERE has_vector = {NEXT_ONLY} AND ord < ?"
        return int(self._committed(sql, (self.vector_cap,))[0][0])  # on a reader: ``pending_count``

    def release_next_only(self) -> int:
        """Chunks left to a switch's table wait for a serving vector again (the table serves
        without a switch: the switch was undone, or its model could not be loaded); how many."""
        with self.transaction() as db:
            return int(
                db.execute(f"UPDATE chunks SET has_vector = 0 WHERE has_vector = {NEXT_ONLY}").rowcount
            )

    def promote_next(self, db: sqlite3.Connection) -> None:
        """The table being built becomes the serving one."""
        db.execute(
            "UPDATE chunks SET has_vector = has_next, "
            f"has_next = CASE has_next WHEN {NO_VECTOR} THEN {NO_VECTOR} ELSE 0 END"
        )

    def name_tables(self, db: sqlite3.Connection, serving: str, building: str) -> None:
        """The serving table and the one being built ("": none), in the caller's transaction (a
        switch commits them with ``promote_next``: three commits left flags and names disagreeing
        when the second failed, e.g. on a full disk)."""
        db.executemany(
            "INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)",
            [("vector_table", serving), ("vector_table_next", building)],
        )

    def vector_ids(self, flag: str = "has_vector") -> set[str]:
        return {r[0] for r in self._query(f"SELECT chunk_id FROM chunks WHERE {_flag(flag)} = 1")}
