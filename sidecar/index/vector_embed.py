"""Vectors computed for chunks: the backfill's batches (the serving table first, then the one a
model switch builds), a memory write's own note (``embed_key``, ``expect``), and the vectors that
need no model run (an equal text's in the table, one kept after a deletion, a batch's that could
not be stored, a duplicate check's). A part of ``Vectoring`` (``sidecar.index.vectoring``), which
owns the stores, the counters and the locks. Imports ``contracts``, ``model``, ``runtime`` and
``stores``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from threading import Event, Lock
from typing import TYPE_CHECKING, Any

import numpy as np

from sidecar.contracts.errors import StoreError
from sidecar.contracts.wire import memory_agent
from sidecar.model.embedder import Embedder
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.group import GroupCommit
from sidecar.runtime.pace import Pace
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import ChunkRecord

if TYPE_CHECKING:
    from sidecar.index.vectoring import Stores, VectorSet
    from sidecar.stores.vectors import VectorStore

log = logging.getLogger(__name__)

# Waits for the searches in flight, per checkpoint: a memory write's embedding and table add (the
# caller waits for it too), and a backfill batch (nobody waits for it).
WRITE_YIELD_S = 0.5
BACKFILL_YIELD_S = 2.0
# Vectors a duplicate check computed, kept by text hash until its write embeds (bounded).
MAX_EXPECTED = 512
# Vectors of batches that could not be stored (a full disk), kept for the retry: four batches,
# 1.5 MB at 384 dimensions.
MAX_STASHED = 1024
# The ETA's rate is taken over this many of the backfill's last batches of a table (about 2,000
# chunks): recent enough to follow a machine that got busier, long enough to be steady.
RATE_BATCHES = 8
# The model runs over a batch this many texts at a time, so that a stop waits for one slice (a
# batch of 256 took 10-60 s on a loaded machine and ran past the stop's bound); as fast as one run.
MODEL_SLICE = 16
# The kinds of run ``vectors_embedded`` is written for: the backfill's batches (in the daemon and
# in ``sidecar index``), and the embedding a memory write does of its own note.
BACKFILL_RUN = "backfill"
WRITE_RUN = "memory write"


def _source_agent(key: str) -> tuple[str, str]:
    """A vector row's source and agent columns ("" for a vault or wiki note)."""
    return key.split("/", 1)[0], memory_agent(key) or ""


class VectorEmbedding:
    """Embedding what is pending; mixed into ``Vectoring``, which sets the state below."""

    stores: Stores
    manifest: Manifest
    timer: Callable[[], float]
    keep_max: int
    embedded: int
    reused: int
    kept_reused: int
    expected_used: int
    stored: int
    embed_seconds: float
    computing: int
    _failed_seconds: float
    _recent: dict[str, Pace]
    _stashed: OrderedDict[tuple[str, str], Any]
    _unsure: set[str]
    _claims: Counter[str]
    _expected: OrderedDict[tuple[int, str], Any]
    _expect_lock: Lock
    _key_group: GroupCommit[str]

    if TYPE_CHECKING:

        def _count(
            self, kind: str, table: str, embedded: int = 0, stored: int = 0, seconds: float = 0.0
        ) -> None: ...

        def _finish_migration(self) -> None: ...

        def _adopt(
            self, vs: VectorSet, rows: list[tuple[str, str, str, str]]
        ) -> tuple[list[tuple[str, str, str, str]], int]: ...

        def _reconcile(
            self,
            store: VectorStore,
            flag: str,
            hold: bool = False,
            forget: bool = True,
            to_next: bool = False,
            *,
            cause: str = "start",
        ) -> int: ...

    def embed_pending(self, batch: int = 256, stop: Event | None = None) -> int:
        """One batch for the serving table, else for the table being built; how many were stored.
        ``stop`` set (the daemon stops) ends the batch after the model's slice that runs, and what
        was computed is stored."""
        stores = self.stores
        if stores.serving is not None:
            rows = self._unclaimed(stores.manifest.pending_vectors(batch))
            done = self._embed(stores.serving, rows, stop=stop, timed=True)
            if done:
                return done
        if stores.building is not None:
            rows = self._unclaimed(stores.manifest.pending_vectors(batch, flag="has_next"))
            done = self._embed(stores.building, rows, stop=stop, timed=True)
            if done == 0 and not self._claims and stores.manifest.pending_count("has_next") == 0:
                self._finish_migration()
            return done
        return 0

    def _unclaimed(self, rows: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
        """Rows the backfill may embed: not of a note whose memory write embeds it right now (both
        would run the model for the same chunks, and only the first one's vectors are stored)."""
        if not self._claims:
            return rows
        claimed = set(self._claims)
        return [r for r in rows if r[1] not in claimed]

    @contextmanager
    def expect(
        self, key: str, model: Embedder | None = None, vectors: Mapping[str, Any] | None = None
    ) -> Iterator[None]:
        """Around a memory write that embeds ``key`` itself: the backfill leaves its chunks alone,
        and ``vectors`` (text hash -> vector, computed by ``model`` for the duplicate check) stand
        in for the model's run on equal texts."""
        with self._expect_lock:
            self._claims[key] += 1
            if model is not None and vectors:
                for h, vec in vectors.items():
                    self._expected[(id(model), h)] = vec
                    self._expected.move_to_end((id(model), h))
                while len(self._expected) > MAX_EXPECTED:
                    self._expected.popitem(last=False)
        try:
            yield
        finally:
            with self._expect_lock:
                self._claims[key] -= 1
                if self._claims[key] <= 0:
                    del self._claims[key]
                if model is not None and vectors:
                    for h in vectors:
                        self._expected.pop((id(model), h), None)

    def embed_key(self, key: str) -> None:
        """Vectors for one note now, in every table (a memory write is searchable on return).
        Callers queued behind a running one share the next run (one model call, one add)."""
        self._key_group.run(key, [key], self._embed_keys)

    def _embed_keys(self, keys: list[str]) -> None:
        for vs in (self.stores.serving, self.stores.building):
            if vs is not None:
                rows = [r for k in keys for r in self.manifest.pending_vectors(10_000, key=k, flag=vs.flag)]
                self._embed(vs, rows, WRITE_YIELD_S)

    def _embed(
        self,
        vs: VectorSet,
        rows: list[tuple[str, str, str, str]],
        wait: float = BACKFILL_YIELD_S,
        *,
        stop: Event | None = None,
        timed: bool = False,
    ) -> int:
        """Vectors for ``rows`` into ``vs``'s table; how many were stored. ``timed``: a backfill
        batch, whose rate status' ETA uses (a memory write's few chunks say little about it)."""
        rows, adopted = self._adopt(vs, rows)
        if not rows:
            return adopted
        t0 = self.timer()
        try:
            rows, vecs = self._vectors_for(vs, rows, wait, stop, counted=timed)
            computed = self.computing
            try:
                stored = self._store(vs, rows, vecs, wait)
                if stored is None:  # made for a table that was replaced meanwhile
                    self._stash(vs, rows, vecs)
                    return adopted
            except BaseException:
                # Not stored (a full disk): the vectors wait for the retry instead of the model
                # running over the same batch again, and the time counts once the batch is stored.
                self._stash(vs, rows, vecs)
                self._failed_seconds += self.timer() - t0
                raise
        finally:
            if timed:
                self.computing = 0
        seconds = self.timer() - t0 + self._failed_seconds
        self._failed_seconds = 0.0
        self.embed_seconds += seconds
        self.stored += stored
        self._count(BACKFILL_RUN if timed else WRITE_RUN, vs.store.name, stored=stored, seconds=seconds)
        if timed and computed:
            # The model's pace: a batch of vectors copied from equal texts took a second for 256
            # and made the ETA "0s left" with hundreds of chunks still to compute.
            self._recent.setdefault(vs.store.name, Pace(RATE_BATCHES)).add(computed, seconds)
        return stored + adopted

    def rate(self, vs: VectorSet | None) -> float | None:
        """Vectors stored per second over the backfill's last batches for ``vs``'s table."""
        pace = self._recent.get(vs.store.name) if vs is not None else None
        return pace.rate if pace is not None else None

    def rough(self, vs: VectorSet | None) -> bool:
        """Whether an ETA from ``rate`` is a rough one yet (``Pace.rough``)."""
        pace = self._recent.get(vs.store.name) if vs is not None else None
        return pace is None or pace.rough

    def _stash(self, vs: VectorSet, rows: list[tuple[str, str, str, str]], vecs: Any) -> None:
        """Keep the vectors of a batch that could not be stored, by text (bounded)."""
        with self._expect_lock:
            for row, vec in zip(rows, vecs, strict=True):
                if row[3]:
                    self._stashed[(vs.store.name, row[3])] = vec
                    self._stashed.move_to_end((vs.store.name, row[3]))
            while len(self._stashed) > MAX_STASHED:
                self._stashed.popitem(last=False)

    def _current(self, vs: VectorSet) -> bool:
        """``vs``'s table is still the one its flag belongs to (the caller holds the write lock)."""
        now = self.stores.serving if vs.flag == "has_vector" else self.stores.building
        return now is not None and now.store is vs.store and not vs.store.closed

    def _store(
        self, vs: VectorSet, rows: list[tuple[str, str, str, str]], vecs: Any, wait: float
    ) -> int | None:
        """Add the rows still pending to the table and flag them; how many were. None when the
        table the batch was computed for is no longer the one of its flag: a repair replaced it
        (a new table at the same path), a switch promoted or ended it. Stored through the old
        handle, the rows landed in the new table as a version naming the old table's data
        files, which every search of it then failed on. The chunks stay pending, the vectors
        are kept for the next batch of the same table (same name: same model)."""
        stores = self.stores
        FOREGROUND.yield_to(wait)
        with stores.write_lock:
            if not self._current(vs):
                log.info(
                    "vectors_batch_dropped table=%s rows=%d reason=the table was replaced while the "
                    "batch was computed (its chunks stay pending)",
                    vs.store.name,
                    len(rows),
                )
                return None
            if vs.flag in self._unsure:
                # A write failed half-way (disk full: rows added, flags not committed): put table
                # and flags back in agreement first, or these chunks would get a second vector.
                self._reconcile(vs.store, vs.flag, cause="failed write")
                self._unsure.discard(vs.flag)
            try:
                # Still there and still without a vector: the backfill and a memory write's own
                # embedding can race for the same new chunk; only the first one stores it. Every
                # writer of chunks and flags holds the write lock, so the answer holds until the
                # flags are set. The table add runs outside the manifest's transaction, which
                # searches would wait for (tens of ms for an add, longer for a compaction); a
                # crash between the two leaves rows without flags, which the reconcile of the
                # next start flags (it never adds a second vector).
                live = stores.manifest.still_pending([r[0] for r in rows], vs.flag)
                keep = [i for i, r in enumerate(rows) if r[0] in live]
                if keep:
                    added = [(rows[i][0], rows[i][1], *_source_agent(rows[i][1])) for i in keep]
                    vs.store.add(added, vecs[keep])
                    with stores.manifest.transaction() as db:
                        stores.manifest.set_has_vector([rows[i][0] for i in keep], 1, db, vs.flag)
            except BaseException:
                self._unsure.add(vs.flag)
                raise
        return len(keep)

    def _vectors_for(
        self,
        vs: VectorSet,
        rows: list[tuple[str, str, str, str]],
        wait: float,
        stop: Event | None = None,
        *,
        counted: bool = False,
    ) -> tuple[list[tuple[str, str, str, str]], Any]:
        """Vectors for rows of (chunk_id, key, embed_text, embed_hash): each distinct text is embedded
        once, and a text that already has a vector in this table (a template, a copied block, a
        moved note) reuses it instead of running the model. The rows that got one (all, unless
        ``stop`` ended the model's run early) and their vectors."""
        ident = [r[3] or "#" + r[0] for r in rows]  # a row without a hash shares with nobody
        first: dict[str, int] = {}
        for i, h in enumerate(ident):
            first.setdefault(h, i)
        donors = self.manifest.vector_donors([h for h in first if not h.startswith("#")], vs.flag)
        stored = vs.store.vectors_of(list(donors.values())) if donors else {}
        known = {h: stored[cid] for h, cid in donors.items() if cid in stored}
        # Texts a memory write's duplicate check ran through the model already (counted in
        # ``embedded`` by ``embedded_for_write``): an equal text's vector copied for one is no
        # reuse too (a write of a text already indexed, an agent saving a copy, counted its one
        # vector twice).
        ready_made = self._expected_of(vs, known)
        wanted = [h for h in first if h not in known and not h.startswith("#")]
        if wanted and self.keep_max > 0:
            kept = {
                h: vec
                for h, blob in self.manifest.kept_vectors(vs.store.name, wanted).items()
                if (vec := np.frombuffer(blob, dtype=np.float32)).shape[0] == vs.store.dim
            }
            known.update(kept)
            ready_made |= self._expected_of(vs, kept)
            self.kept_reused += sum(1 for x in ident if x in kept and x not in ready_made)
        ready_made |= self._take_ready(vs, [h for h in first if h not in known], known)
        todo = [i for h, i in first.items() if h not in known]
        fresh = self._run_model(vs, rows, todo, wait, stop, counted=counted)
        known.update((ident[i], vec) for i, vec in fresh.items())
        done = [i for i, h in enumerate(ident) if h in known]
        # A stashed vector was computed (and counted) before its batch failed, a write's by its
        # duplicate check (``embedded_for_write``): embedded once, not a reuse too.
        self.reused += len(done) - len(fresh) - sum(1 for i in done if ident[i] in ready_made)
        return [rows[i] for i in done], np.stack([known[ident[i]] for i in done]).astype(np.float32)

    def reuse_kept(self, chunks: Sequence[ChunkRecord]) -> int:
        """Store now the vectors kept of deleted chunks (``_keep``) for chunks just written with
        the same text (the caller holds the write lock); how many. A folder whose exclusion is
        removed, an undo, a remount: left to the backfill, which waits for a long sweep to end,
        their chunks had no vector meanwhile and status counted them as waiting for the model,
        with an ETA at its pace (2,106 chunks of a folder let back in). A failure to store leaves
        them to the backfill, which takes the same kept vectors."""
        wanted = [c for c in chunks if c.embed_hash and c.ord < self.manifest.vector_cap]
        if self.keep_max <= 0 or not wanted:
            return 0
        done = 0
        for vs in (self.stores.serving, self.stores.building):
            if vs is None or vs.store.closed:
                continue
            kept = self.manifest.kept_vectors(vs.store.name, sorted({c.embed_hash for c in wanted}))
            vecs = {
                h: v
                for h, b in kept.items()
                if (v := np.frombuffer(b, dtype=np.float32)).shape[0] == vs.store.dim
            }
            rows = [(c.chunk_id, c.key, c.embed_text, c.embed_hash) for c in wanted if c.embed_hash in vecs]
            try:
                # A row the table holds for the chunk already (held at a start) is taken first:
                # a kept vector stored beside it doubled the chunk.
                rows, adopted = self._adopt(vs, rows)
                done += adopted
                if not rows:
                    continue
                stored = self._store(vs, rows, np.stack([vecs[r[3]] for r in rows]), 0.0)
            except (StoreError, OSError, sqlite3.Error) as exc:
                log.warning(
                    "vectors_reuse_failed table=%s chunks=%d error=%s (the backfill stores them)",
                    vs.store.name,
                    len(rows),
                    exc,
                )
                continue
            if stored:
                self.reused += stored
                self.kept_reused += stored
                self.stored += stored
                self._count(BACKFILL_RUN, vs.store.name, stored=stored)
                done += stored
        return done

    def _run_model(
        self,
        vs: VectorSet,
        rows: list[tuple[str, str, str, str]],
        todo: list[int],
        wait: float,
        stop: Event | None,
        *,
        counted: bool = False,
    ) -> dict[int, Any]:
        """The model over the texts of ``todo`` (row indices), shortest first, a slice at a time:
        a stop ends it after the slice that runs (a second, not the batch's ten or more, which
        the stop then lost), and the slices done are stored. Row index -> vector."""
        out: dict[int, Any] = {}
        if not todo:
            return out
        FOREGROUND.yield_to(wait)
        order = sorted(todo, key=lambda i: len(rows[i][2]))  # little padding, as in one run
        for start in range(0, len(order), MODEL_SLICE):
            if start and stop is not None and stop.is_set():
                log.info("embedding_stopped computed=%d of=%d (those are stored)", start, len(order))
                break
            part = order[start : start + MODEL_SLICE]
            vecs = vs.model.embed_passages([rows[i][2] for i in part])
            out.update(zip(part, vecs, strict=True))
            self.embedded += len(part)
            self._count(BACKFILL_RUN if counted else WRITE_RUN, vs.store.name, embedded=len(part))
            if counted:  # the backfill's batch (one at a time): status counts these done
                self.computing += len(part)
        return out

    def _expected_of(self, vs: VectorSet, hashes: Iterable[str]) -> set[str]:
        """Those of ``hashes`` a memory write's duplicate check embedded with ``vs``'s model."""
        if not self._expected:
            return set()
        with self._expect_lock:
            return {h for h in hashes if (id(vs.model), h) in self._expected}

    def _take_ready(self, vs: VectorSet, hashes: list[str], known: dict[str, Any]) -> set[str]:
        """Into ``known``: vectors computed already for these texts, of a batch that could not be
        stored (taken) or of a memory write's duplicate check; the hashes of both (the model's
        run made them, counted in ``embedded`` then: no reuse)."""
        ready_made: set[str] = set()
        if not (self._expected or self._stashed):
            return ready_made
        with self._expect_lock:
            for h in hashes:
                ready = self._stashed.pop((vs.store.name, h), None)
                if ready is None:
                    ready = self._expected.get((id(vs.model), h))
                    self.expected_used += ready is not None
                if ready is not None:
                    known[h] = ready
                    ready_made.add(h)
        return ready_made
