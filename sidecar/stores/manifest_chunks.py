"""The manifest's chunks as answers read them, a mixin of ``Manifest`` (:mod:`sidecar.stores.manifest`):
a note's chunks and their views (what a search, get or list shows), the days of daily notes, the
files listed, and the counts status gives. Its own module because it is what is read for an
answer, not what a write changes; the connection is the ``Manifest``'s.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sidecar.notes.dayformat import DayFormats
from sidecar.stores.embedtext import joined_embed_text
from sidecar.stores.manifest_rows import (
    _COUNTED,
    _SHOWN,
    ChunkView,
    HeldNote,
    IndexedNote,
    NoteDay,
    _aliases,
    _strings,
    _under,
)
from sidecar.stores.noteday import daily_note, note_day
from sidecar.stores.vectorbook import NEXT_ONLY, _in_groups

# The notes whose chunks ``all_chunks`` reads at a time (a few thousand chunks).
_PAGE_NOTES = 500


# The same chunks come back search after search (a search builds 150-odd views, and building one,
# 17 fields of a frozen dataclass, cost more than reading its row). A view is a function of its
# row and the daily-note formats alone: a row that changed (its text, its note's front matter,
# its vector) is another key, so nothing is invalidated. Only a search's reads keep views (a
# refill or an agent's chunks read once would push them out); the key holds the front matter by
# its hash and length, not a copy (SQLite gives each row its own: a note of 30 chunks held 30,
# each up to the size of the note's front matter), and the views are bounded by their text's bytes.
VIEW_BYTES = 8 << 20


def _build(r: Sequence[Any], day_formats: DayFormats) -> ChunkView:
    return ChunkView(
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
        *note_day(r[11], r[1], day_formats),
        r[13],
        r[14],
    )


# What a kept view costs beyond its text (the view, its key tuple and their small objects: some
# 1 KB measured): counted, so that the bound holds for many short chunks too.
VIEW_OVERHEAD = 1024


def _row_bytes(r: tuple[Any, ...]) -> int:
    return VIEW_OVERHEAD + sum(len(v) for v in r if isinstance(v, str))


_VIEW_COLUMNS = (
    "c.chunk_id, c.key, f.source, f.agent, f.title, c.text, c.headings, c.start_line, c.end_line, "
    "f.tags, f.mtime_ns, f.front_matter, c.has_vector, f.ctime_ns, f.indexed_at"
)


class KeptViews:
    """Chunk views by row, the least recently used dropped past ``max_bytes`` (their text and
    ``VIEW_OVERHEAD`` each)."""

    def __init__(self, max_bytes: int = VIEW_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[Any, ...], tuple[ChunkView, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def views(self, rows: Sequence[tuple[Any, ...]], day_formats: DayFormats) -> list[ChunkView]:
        """Each row's view, kept or built (and kept)."""
        kept, out = self._kept, []
        for r in rows:
            # The front matter by its hash and length: the key keeps no copy of it (a different
            # front matter of a row otherwise the same, mtime and all, hashing alike: 1 in 2**64).
            fm = r[11]
            key = (*r[:11], hash(fm), len(fm or ""), *r[12:15], day_formats)
            found = kept.get(key)
            if found is None:
                view = self._keep(key, _build(r, day_formats))
            else:
                view = found[0]
                # Not contextlib.suppress: this runs 150 times a search. A KeyError: another
                # thread dropped it meanwhile.
                try:  # noqa: SIM105
                    kept.move_to_end(key)
                except KeyError:
                    pass
            out.append(view)
        return out

    def _keep(self, key: tuple[Any, ...], view: ChunkView) -> ChunkView:
        size = _row_bytes(key)
        if size > self.max_bytes:
            return view
        with self._lock:
            if key not in self._kept:
                self._kept[key] = (view, size)
                self.bytes += size
                while self.bytes > self.max_bytes:
                    _, (_, gone) = self._kept.popitem(last=False)
                    self.bytes -= gone
        return view


class ManifestChunks:
    """The chunk reads and counts of a ``Manifest`` (which sets the state below)."""

    day_formats: DayFormats
    generation: int
    _note_days: tuple[int, DayFormats, list[NoteDay]] | None

    if TYPE_CHECKING:  # the manifest's own (``Manifest``)

        def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...

        def _committed(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...

        def _committed_together(self, reads: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]: ...

    @functools.cached_property
    def kept_views(self) -> KeptViews:
        """A search's chunk views, kept by their rows."""
        return KeptViews()

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

    def all_chunks(self) -> Iterator[ChunkView]:
        """Every indexed chunk, for rebuilding the BM25 index without reading a file, in note
        order, read ``_PAGE_NOTES`` notes at a time: read at once, a 67,000-document vault's
        text was held in memory for the whole refill (minutes, on a small NAS box), and the
        manifest's lock for the whole read. A note written between two pages is read as it is
        then (a refill beside notes it and writes it again)."""
        after = ""
        while True:
            keys = self._query(
                "SELECT key FROM files WHERE state = 'indexed' AND key > ? ORDER BY key LIMIT ?",
                (after, _PAGE_NOTES),
            )
            if not keys:
                return
            last = keys[-1][0]
            yield from self._views("f.state = 'indexed' AND c.key > ? AND c.key <= ?", (after, last))
            after = last

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
        those of notes on their way out left out; kept for the next search (``KeptViews``)."""
        out: dict[str, ChunkView] = {}
        kept, formats = self.kept_views, self.day_formats
        for part, marks in _in_groups(chunk_ids):
            rows = self._committed(
                f"SELECT {_VIEW_COLUMNS} FROM chunks c JOIN files f ON f.key = c.key "
                f"WHERE {_SHOWN} AND c.chunk_id IN ({marks}) ORDER BY c.key, c.ord",
                part,
            )
            out.update((v.chunk_id, v) for v in kept.views(rows, formats))
        return out

    def _views(self, where: str, args: Sequence[Any], *, committed: bool = False) -> Iterator[ChunkView]:
        rows = (self._committed if committed else self._query)(
            f"SELECT {_VIEW_COLUMNS} FROM chunks c JOIN files f ON f.key = c.key "
            f"WHERE {where} ORDER BY c.key, c.ord",
            args,
        )
        formats = self.day_formats
        for r in rows:
            yield _build(r, formats)

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

    def counts(self) -> dict[str, Any]:
        """Files and chunks per source and per agent, plus skipped files by reason: all of one
        moment (one read transaction), the writer not waiting for them (``_committed_together``)."""
        sources, agents, skips, unread = self._committed_together(
            [
                (
                    f"SELECT source, count(*), coalesce(sum(chunks), 0) FROM files WHERE {_COUNTED} "
                    "GROUP BY source",
                    (),
                ),
                (
                    "SELECT agent, count(*), coalesce(sum(chunks), 0) FROM files "
                    f"WHERE {_COUNTED} AND source = 'memory' GROUP BY agent",
                    (),
                ),
                ("SELECT error, count(*) FROM files WHERE state = 'skipped' GROUP BY error", ()),
                # Indexed notes whose front matter could not be read (invalid YAML): found by their
                # text, without their title, tags, aliases and dates. Vault and wiki only: an
                # inbox's notes are checked as they are written, and health must not name one
                # agent's notes to another.
                (
                    "SELECT key, error FROM files WHERE state = 'indexed' AND error IS NOT NULL "
                    "AND source != 'memory' ORDER BY key",
                    (),
                ),
            ]
        )
        by_source = {source: {"files": files, "chunks": chunks} for source, files, chunks in sources}
        by_agent = {agent: {"files": files, "chunks": chunks} for agent, files, chunks in agents}
        skipped = dict(skips)
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
