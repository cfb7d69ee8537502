"""Vectors for chunks: the serving table, backfill, reconcile, and the switch to a new model.

Vectors of different models never mix: each model has its own table. When
the configured model differs from the serving table's, a second table is filled in the background
with the new model while the old table keeps answering (queries embedded with the old model); when
every chunk has its new vector the new table takes over and the old one is dropped. The manifest
keeps one flag per chunk and table (``has_vector`` serving, ``has_next`` being built).

A memory write embeds its own note (``embed_key``): writers queued behind one another share one
model run and one table add, the vectors its duplicate check computed for the same texts with
the same model are used instead of running the model again (``expect``), and the backfill leaves
such a note's chunks alone meanwhile. Both yield to searches in flight before the model runs and
before the table changes (bounded; ``sidecar.runtime.foreground``).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from threading import Event, Lock, RLock
from typing import Any

import numpy as np

from sidecar.contracts.errors import IndexBuildStoppedError, StoreError
from sidecar.contracts.wire import memory_agent
from sidecar.index.problems import Problems
from sidecar.model.embedder import Embedder
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.group import GroupCommit
from sidecar.runtime.pace import Pace
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import ChunkRecord
from sidecar.stores.vectors import VectorStore, drop_table

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
# The old model's table is dropped this long after a switch: searches that took it just before
# still read it (an ANN search reads the table, not a copy in memory).
RETIRE_GRACE_S = 60.0
# A switch undone before it finished (A -> B -> A): B's table is kept this long, so that switching
# to B again resumes it, then dropped (at once when a third model is switched to). The manifest
# keeps when it was paused under this key.
PAUSED_KEEP_S = 7 * 86400.0
PAUSED_SINCE = "vector_table_next_paused"
# The vectors that an edit of a note replaced are kept for its last this many edits only (an undo,
# a checkout and back); those of notes that left the index (deleted, moved, excluded) have the
# whole budget (index.keepDeletedVectorsMax). A note rewritten every minute for hours filled it
# in an afternoon, and a folder moved the day before was embedded again in full.
EDITS_KEPT_PER_NOTE = 3
# The kinds of run ``vectors_embedded`` is written for: the backfill's batches (in the daemon and
# in ``sidecar index``), and the embedding a memory write does of its own note.
BACKFILL_RUN = "backfill"
WRITE_RUN = "memory write"
Counts = dict[str, tuple[int, int, float]]  # table -> (texts embedded, vectors stored, seconds)


@dataclass
class VectorSet:
    """A table and the model whose vectors it holds (and that embeds queries for it)."""

    store: VectorStore
    model: Embedder
    flag: str  # manifest column: has_vector (serving) or has_next (being built)


@dataclass
class Stores:
    """The stores and the lock that keeps their writes in one order."""

    manifest: Manifest
    bm25: Bm25Index
    serving: VectorSet | None = None
    building: VectorSet | None = None
    write_lock: RLock = field(default_factory=RLock)
    problems: Problems = field(default_factory=Problems)
    # The keyword index is being refilled in this version's layout beside the old one, which
    # answers meanwhile (``index.upgrade``).
    upgrading: bool = False
    # Held by a refill of the keyword index beside the old one (an upgrade, a large vault's
    # compaction: ``index.beside``): one at a time, they share the side folder and the noting of
    # the notes written meanwhile.
    beside_lock: Lock = field(default_factory=Lock, repr=False, compare=False)
    # The refill in place instead (no room on the disk for a second copy; the keyword arm finds
    # nothing until it ends): (chunks added, chunks in all), else None.
    upgrade_in_place: tuple[int, int] | None = None
    # A large vault's keyword index being rewritten beside the live one, which answers meanwhile
    # (``repair.compact_bm25``): (phase, done, total), else None. Minutes at 60,000 documents, a
    # second copy on the disk and writes slower: health says why.
    keyword_compaction: tuple[str, int, int] | None = None
    # The notes written continuously now (``sidecar.daemon.hot``, set by the index loop), key ->
    # the chunks its last indexing added: those wait for a vector for a while, no backlog.
    continuous: Callable[[], Mapping[str, int]] = field(default=dict, repr=False, compare=False)
    # The agents with memory as last read, and when (``repair.unsearchable_agents``).
    memory_agents: tuple[float, frozenset[str]] | None = field(default=None, repr=False, compare=False)
    # The parts of the keyword index whose last search failed for want of file handles, by
    # "<part>/<chunks|pages>", and why (``index.keyword_faults.handles_seen``).
    keyword_no_handles: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def vectors(self) -> VectorStore | None:
        return self.serving.store if self.serving else None

    def vector_stores(self) -> list[VectorStore]:
        return [s.store for s in (self.serving, self.building) if s is not None]

    def close(self, *, stopping: bool = False) -> None:
        """Flush and close BM25 and the manifest (the vector tables need no closing); the
        manifest also when BM25's close raises (its writer connection and lock count kept).
        ``stopping``: the process exits next (``ManifestFile.close``)."""
        try:
            self.bm25.close()
        finally:
            self.manifest.close(stopping=stopping)


def _stamp(store: VectorStore) -> str:
    """Table name, version and its files: a table changed by anything else after the stop, or a
    data file damaged meanwhile, does not match (the start then reads every id)."""
    return f"{store.name}@{store.version()}#{store.files_signature()}"


def _rounded(rate: float | None) -> float | None:
    return round(rate, 2) if rate else None


def _source_agent(key: str) -> tuple[str, str]:
    """A vector row's source and agent columns ("" for a vault or wiki note)."""
    return key.split("/", 1)[0], memory_agent(key) or ""


# Why a table's rows of chunks the index no longer has are there, by why the table is checked:
# at a start (an upgrade's first sweep cut notes anew) a bare count read as damage.
_ORPHANS_WHY = {
    "start": "their notes were edited, cut again or removed while no vector table was open",
    "failed write": "rows a write that failed half-way added for chunks replaced or removed since",
    "paused switch": "their notes were edited, cut again or removed while the switch to this "
    "table was paused",
}


class Vectoring:
    """The vector tables of the stores: attach, embed what is pending, delete, keep, switch models."""

    def __init__(
        self,
        stores: Stores,
        keep_seconds: float = 7 * 86400.0,
        keep_max: int = 20_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stores = stores
        self.clock = clock  # when vectors are kept (wall clock: the rows outlive the process)
        self.manifest = stores.manifest
        self._changed = Event()
        self.embedded = 0  # vectors computed by the model
        self.reused = 0  # vectors copied from an equal text (or a deleted chunk's kept vector) instead
        self.kept_reused = 0  # of which came from vectors kept after a deletion
        # Vectors of deleted chunks are kept by text this long and up to this many (0: not at all).
        self.keep_seconds = keep_seconds
        self.keep_max = keep_max
        self.embed_seconds = 0.0  # time spent storing ``stored`` vectors
        self.stored = 0  # vectors stored, computed or reused
        # The same per kind of run (``BACKFILL_RUN``, ``WRITE_RUN``) and table: [texts the model
        # embedded, vectors stored, seconds], for the ``vectors_embedded`` lines. One sum gave
        # both models of a switch as one, and a memory write's own embedding went in no line.
        self._tally: dict[tuple[str, str], list[Any]] = {}
        self._tally_lock = Lock()
        # The backfill's last batches per table, (stored, seconds): the rate of status' ETA. Per
        # table (a switch's old model catching up ran at a third of the new one's speed) and
        # recent only (the lifetime average was 3x off).
        self._recent: dict[str, Pace] = {}
        # Chunks the model computed in the backfill batch running now, not stored yet: status
        # counts them done (its count moved in steps of a whole batch, minutes apart on a slow CPU).
        self.computing = 0
        self.clock = time.perf_counter
        self._failed_seconds = 0.0  # time of batches not stored yet (counted once one is)
        # Vectors of a batch that could not be stored, by (table, text hash), for its retry.
        self._stashed: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._retired: dict[str, tuple[VectorStore, float]] = {}  # name -> (table, drop after)
        self.last_optimize: float | None = None
        # The embedding thread waits for an index build (the first index, built as soon as the
        # table crosses search.annThreshold): status says that new vectors wait meanwhile.
        self.embedding_waits_for_index = False
        self._unsure: set[str] = set()  # flags whose table may disagree with the manifest
        self._claims: Counter[str] = Counter()  # keys a memory write embeds itself (the backfill skips)
        self._expected: OrderedDict[tuple[int, str], Any] = OrderedDict()  # (id(model), hash) -> vector
        self._expect_lock = Lock()
        self._key_group: GroupCommit[str] = GroupCommit(Lock())
        self.expected_used = 0  # vectors taken from a duplicate check instead of the model
        # Until the first sweep of a start has ended the manifest may not name every chunk yet
        # (deleted or damaged: rebuilt from the notes): rows of the serving table it does not
        # know are held, not deleted, and taken as the vectors of the chunks the sweep finds
        # with their ids (an id is the note's key and the embedded text). ``settle`` ends it.
        self.first_sweep_done = False
        self._held: tuple[VectorStore, set[str]] | None = None
        self.adopted = 0  # held vectors taken for chunks the rebuilt manifest named again

    def counts(self, kind: str = BACKFILL_RUN) -> Counts:
        """Per table, (texts the model embedded, vectors stored, seconds storing them) so far by
        runs of ``kind``: a run's own are the difference of two readings (``log_embedded``)."""
        with self._tally_lock:
            return {t: (c[0], c[1], c[2]) for (k, t), c in self._tally.items() if k == kind}

    def _count(self, kind: str, table: str, embedded: int = 0, stored: int = 0, seconds: float = 0.0) -> None:
        with self._tally_lock:
            c = self._tally.setdefault((kind, table), [0, 0, 0.0])
            c[0] += embedded
            c[1] += stored
            c[2] += seconds

    def _embedded_by_table(self) -> dict[str, int]:
        """``embedded`` per vector table in use (serving, or being built), every kind of run:
        during a switch each model's own. A table retired by a switch leaves it (status named
        an old model's table for as long as the daemon ran); ``embedded`` still counts it."""
        live = {vs.store.name for vs in (self.stores.serving, self.stores.building) if vs is not None}
        out: dict[str, int] = {}
        with self._tally_lock:
            for (_kind, table), c in self._tally.items():
                if table in live:
                    out[table] = out.get(table, 0) + c[0]
        return out

    def embedded_for_write(self, table: str, texts: int) -> None:
        """Count texts the model embedded for a memory write outside this class (its duplicate
        check, whose vectors its indexing then takes from ``expect``): they were counted as
        reused, and a write's line said ``texts=0``."""
        self.embedded += texts
        self._count(WRITE_RUN, table, embedded=texts)

    def log_embedded(self, since: Counts, why: str, kind: str = BACKFILL_RUN) -> None:
        """One line per table (a switch fills two, each with its model) for the vectors stored
        by runs of ``kind`` since ``since`` (``counts``): how many texts the model embedded, how
        many vectors were copied from equal texts instead. No line said it: a sweep or a backfill
        that cut every note again told nothing of its cost."""
        for table, now in sorted(self.counts(kind).items()):
            embedded, stored, seconds = (
                a - b for a, b in zip(now, since.get(table, (0, 0, 0.0)), strict=True)
            )
            if stored <= 0 and embedded <= 0:
                continue
            log.info(
                "vectors_embedded texts=%d stored=%d reused=%d seconds=%.1f table=%s run=%s "
                "(texts: run through the model; reused: copied from an equal text's vector)",
                embedded,
                stored,
                max(stored - embedded, 0),
                seconds,
                table,
                why,
            )

    def notify_written(self) -> None:
        """Chunks were written: the backfill looks for pending vectors now, not at its next poll."""
        self._changed.set()

    def wait_for_writes(self, timeout: float) -> None:
        """Wait until chunks are written (or ``timeout``), for the backfill while nothing is pending."""
        self._changed.wait(timeout)
        self._changed.clear()

    # --- attaching ---------------------------------------------------------------------------

    def serving_table(self) -> str | None:
        """The table the manifest's vector flags belong to (another model's after a switch)."""
        return self.manifest.get_meta("vector_table")

    def attach(self, store: VectorStore, model: Embedder, *, switching: bool = False) -> None:
        """Serve from ``store``; reconcile it with the manifest so no chunk is missing or doubled.
        ``switching``: a switch to another model begins next (``begin_migration``)."""
        manifest = self.manifest
        with self.stores.write_lock:
            self._retired.pop(store.name, None)  # wanted again: not dropped by its old due time
            if not switching and (released := manifest.release_next_only()):
                # Left to a switch that does not go on (undone, or its model does not load).
                log.info(
                    "vectors_wait_again table=%s chunks=%d reason=no switch builds", store.name, released
                )
            if manifest.get_meta("vector_table_next") == store.name:
                # The table a switch was building serves without it (the retiring model could
                # not be loaded, or its table attached): no paused switch's any more, whose
                # expiry dropped it, the serving table, a week later.
                manifest.reset_vectors("has_next")
                manifest.set_meta("vector_table_next", "")
                manifest.set_meta(PAUSED_SINCE, "")
                log.info("vectors_switch_ended table=%s reason=it serves without the switch", store.name)
            if manifest.get_meta("vector_table") != store.name:
                log.info("vectors_reset table=%s reason=new model or new table", store.name)
                manifest.reset_vectors()
                manifest.set_meta("vector_table", store.name)
            if manifest.get_meta("vectors_clean") == _stamp(store):
                log.info("vectors_clean table=%s (stopped cleanly: no reconcile)", store.name)
                self._unstamp(store.name)
            else:
                self._reconcile(store, "has_vector", hold=not self.first_sweep_done, to_next=switching)
                manifest.set_meta("vectors_clean", "")  # until the next clean stop
            self.stores.serving = VectorSet(store, model, "has_vector")
        self._changed.set()

    def _unstamp(self, table: str) -> None:
        """Clear the clean-stop stamp of a table that serves as it is; on a full disk it serves
        all the same (read-only until there is space): a change to the table no longer matches
        the stamp anyway, and the first write checks table and flags (``_unsure``) first."""
        try:
            self.manifest.set_meta("vectors_clean", "")
        except sqlite3.Error as exc:
            log.warning("vectors_clean_kept table=%s error=%s", table, exc)
            self._unsure.add("has_vector")

    def begin_migration(
        self, old: VectorStore, old_model: Embedder, new: VectorStore, model: Embedder
    ) -> None:
        """Keep serving ``old`` (queried with ``old_model``) while ``new`` is filled with ``model``."""
        manifest = self.manifest
        with self.stores.write_lock:
            for wanted in (old.name, new.name):  # wanted again: not dropped by an old due time
                self._retired.pop(wanted, None)
            before = manifest.get_meta("vector_table_next")
            if before != new.name:
                manifest.reset_vectors("has_next")
                manifest.set_meta("vector_table_next", new.name)
                if before and before != old.name:  # a third model: the paused switch's table goes
                    drop_table(new.path, before)
                    log.info("vectors_dropped table=%s reason=a switch to another model began", before)
            if manifest.get_meta(PAUSED_SINCE):
                manifest.set_meta(PAUSED_SINCE, "")
            serving = self.stores.serving
            if serving is None or serving.store is not old:  # else attached (and reconciled) already
                # The chunks deleted while no table was open are remembered for the second table too.
                self._reconcile(old, "has_vector", forget=False, to_next=True)
            self._reconcile(new, "has_next", cause="paused switch" if before == new.name else "start")
            self.stores.serving = VectorSet(old, old_model, "has_vector")
            self.stores.building = VectorSet(new, model, "has_next")
        log.info("vectors_migration_started serving=%s building=%s", old.name, new.name)
        self._changed.set()

    def mark_clean(self) -> None:
        """At a clean stop (every writer joined): the serving table agrees with the manifest, so
        the next start can skip reading every vector id (seconds and ~40 MB at 100 k chunks)."""
        serving = self.stores.serving
        if serving is not None and not self._unsure and self.stores.building is None and not self._held:
            self.manifest.set_meta("vectors_clean", _stamp(serving.store))

    def _reconcile(
        self,
        store: VectorStore,
        flag: str,
        hold: bool = False,
        forget: bool = True,
        to_next: bool = False,
        *,
        cause: str = "start",
    ) -> int:
        """Table and flags in agreement: doubled rows and rows of unknown chunks deleted (held
        instead with ``hold``, see ``first_sweep_done``), flags set as the table has them. How
        many chunks were flagged (their vector was in the table). ``forget``: the chunks deleted
        while no table was open are forgotten after (not while another table is attached next).
        ``to_next``: a switch to another model begins next; the chunks whose vector the table
        lacks (a table repaired, rows lost) are left to it, as notes cut again are (the retiring
        model embedded them all first, for vectors dropped with its table). ``cause``: why the
        table is checked (a key of ``_ORPHANS_WHY``), said in the log of the rows it removes."""
        manifest = self.manifest
        # The serving table checked while a switch builds (a write that failed half-way, the held
        # rows settled): its lost chunks are the new model's alone, as at the switch's begin.
        to_next = to_next or (flag == "has_vector" and self.stores.building is not None)
        listed = store.id_list()
        in_table = set(listed)
        known = manifest.all_chunk_ids()
        flagged = manifest.vector_ids(flag)
        doubled = [i for i, n in Counter(listed).items() if n > 1] if len(listed) != len(in_table) else []
        if doubled:  # rows of one chunk twice: drop every copy, embed it once more
            log.warning("reconcile_vectors table=%s doubled=%d", store.name, len(doubled))
            store.delete_ids(doubled)
            in_table -= set(doubled)
        orphans = sorted(in_table - known)
        if orphans and hold:
            log.info(
                "reconcile_vectors table=%s orphans=%d held=until the first sweep ends (the chunks "
                "it finds again keep them)",
                store.name,
                len(orphans),
            )
            self._held = (store, set(orphans))
        elif orphans:
            # Plain words: at an upgrade's start these are the chunks its first sweep cut anew,
            # and a bare count read as damage.
            log.info(
                "reconcile_vectors table=%s orphans=%d (vectors of chunks the index no longer has: "
                "%s; removed from the table, nothing is lost)",
                store.name,
                len(orphans),
                _ORPHANS_WHY[cause],
            )
            self._keep_orphans(store, orphans, cause)
            store.delete_ids(orphans)
            if forget:
                self.manifest.forget_kept_later()
        found = sorted((in_table & known) - flagged)
        with manifest.transaction() as db:
            manifest.set_has_vector(found, 1, db, flag)
            lost = sorted(flagged - in_table)
            manifest.set_has_vector(lost, 0, db, flag)
            if to_next and lost:
                manifest.leave_ids_to_next(lost, db)
                log.info(
                    "vectors_left_to_switch table=%s chunks=%d reason=not in the table", store.name, len(lost)
                )
        return len(found)

    def _keep_orphans(self, store: VectorStore, orphans: list[str], cause: str = "start") -> None:
        """Keep by text the vectors of the rows about to be deleted whose chunks were deleted
        while no table was open (``_keep``), as of when they were deleted (those deleted longer
        ago than ``keep_seconds`` are not kept)."""
        if self.keep_max <= 0 or self.keep_seconds <= 0:
            return
        now = self.clock()
        later = self.manifest.kept_later(orphans, now - self.keep_seconds)
        if later:
            vecs = store.vectors_of(sorted(later))
            # Kept as of their deletion: their age counts from then, not from this attach.
            by_age: dict[float, list[tuple[str, bytes, str]]] = {}
            for cid, v in vecs.items():
                digest, at = later[cid]
                # kept as of notes that left the index ("" note): their whole budget
                by_age.setdefault(at, []).append((digest, np.asarray(v, dtype=np.float32).tobytes(), ""))
            for at, rows in by_age.items():
                self.manifest.keep_vectors(store.name, rows, at)
            self.manifest.prune_kept(now - self.keep_seconds, self.keep_max)
            log.info(
                "vectors_kept table=%s chunks=%d reason=%s: kept by text, an equal text takes its "
                "vector instead of the model",
                store.name,
                len(vecs),
                _ORPHANS_WHY[cause],
            )

    def settle(self) -> None:
        """The first sweep of a start has ended: the manifest names every chunk. Held rows it
        did not name again are deleted, those it did are flagged (one reconcile)."""
        with self.stores.write_lock:
            self.first_sweep_done = True
            held, self._held = self._held, None
            serving = self.stores.serving
            if held is None or serving is None or serving.store is not held[0] or held[0].closed:
                return
            found = self._reconcile(held[0], "has_vector")
            self.adopted += found
            self.reused += found
        log.info("vectors_settled table=%s adopted=%d", held[0].name, self.adopted)

    def _adopt(
        self, vs: VectorSet, rows: list[tuple[str, str, str, str]]
    ) -> tuple[list[tuple[str, str, str, str]], int]:
        """Flag the rows whose vector the table holds already (held at the start, see
        ``first_sweep_done``): the rows left to embed, and how many were flagged."""
        held = self._held
        if held is None or held[0] is not vs.store or vs.flag != "has_vector":
            return rows, 0
        ids = [r[0] for r in rows if r[0] in held[1]]
        if not ids:
            return rows, 0
        with self.stores.write_lock:
            if self._held is not held or not self._current(vs):
                return rows, 0
            live = set(self.manifest.still_pending(ids, vs.flag))
            with self.manifest.transaction() as db:
                self.manifest.set_has_vector(sorted(live), 1, db, vs.flag)
            held[1].difference_update(ids)
        self.adopted += len(live)
        self.reused += len(live)
        return [r for r in rows if r[0] not in live], len(live)

    # --- embedding ---------------------------------------------------------------------------

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
        t0 = self.clock()
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
                self._failed_seconds += self.clock() - t0
                raise
        finally:
            if timed:
                self.computing = 0
        seconds = self.clock() - t0 + self._failed_seconds
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

    def _finish_migration(self) -> None:
        stores = self.stores
        with stores.write_lock:
            building, serving = stores.building, stores.serving
            if building is None:
                return
            with stores.manifest.transaction() as db:
                stores.manifest.promote_next(db)
                stores.manifest.name_tables(db, building.store.name, "")
            self._serve_building(building, serving)
        log.info(
            "vectors_switched table=%s retired=%s (dropped in %.0f s)",
            building.store.name,
            serving.store.name if serving else None,
            RETIRE_GRACE_S,
        )

    def _serve_building(self, building: VectorSet, serving: VectorSet | None) -> None:
        """The cut-over (under the write lock, the manifest named already): the table being
        built serves, the one that served is retired."""
        self.stores.serving = VectorSet(building.store, building.model, "has_vector")
        self.stores.building = None
        if serving is not None:
            self._retire(serving.store)

    def _retire(self, store: VectorStore) -> None:
        """Drop ``store`` once the searches that took it just before a switch are done (they
        read it after the switch: dropped at once, they failed, answered keyword-only, reported
        a damaged table and set off a repair that ended the new table's index build)."""
        self._retired[store.name] = (store, time.monotonic() + RETIRE_GRACE_S)

    def retired_tables(self) -> set[str]:
        """Tables a switch retired, not dropped yet."""
        return set(self._retired)

    def drop_retired(self, now: float | None = None) -> list[str]:
        """Drop the retired tables whose grace has passed (the backfill calls this while idle);
        one that cannot be dropped now is tried again next time. Their names."""
        now = time.monotonic() if now is None else now
        dropped = []
        for name, (store, due) in list(self._retired.items()):
            if due > now:
                continue
            try:
                store.drop()
            except StoreError as exc:
                log.warning("vectors_drop_failed table=%s error=%s", name, exc)
                continue
            del self._retired[name]
            log.info("vectors_dropped table=%s reason=retired by a model switch", name)
            dropped.append(name)
        return dropped

    # --- upkeep ------------------------------------------------------------------------------

    def delete_ids(self, chunk_ids: list[str]) -> None:
        if self._held is not None:
            self._held[1].difference_update(chunk_ids)
        self._keep(chunk_ids, edited=True)
        for store in self._stores_for_deletion():
            store.delete_ids(chunk_ids)

    def delete_keys(self, keys: list[str]) -> None:
        if self.keep_max > 0:
            self._keep(self.manifest.chunk_ids_of(keys), edited=False)
        for store in self._stores_for_deletion():
            store.delete_keys(keys)

    def _stores_for_deletion(self) -> list[VectorStore]:
        """The open tables; with none open (model off, loading, failed), the table on disk is no
        longer known clean: attached again, it is checked against the manifest (with the stamp
        of the last clean stop it skipped the check, and the deleted chunks' vectors stayed)."""
        stores = self.stores.vector_stores()
        if not stores and self.manifest.get_meta("vectors_clean"):
            self.manifest.set_meta("vectors_clean", "")
        return stores

    def _keep(self, chunk_ids: list[str], *, edited: bool) -> None:
        """Remember the vectors of chunks about to be deleted, by text, for a while (bounded):
        a note that comes back (a remount, a checkout, an undo, a move) is not embedded again.
        ``edited``: chunks an edit of their note replaced (``delete_ids``), kept for the note's
        last ``EDITS_KEPT_PER_NOTE`` edits; else their notes leave the index (``delete_keys``)."""
        if self.keep_max <= 0 or self.keep_seconds <= 0 or not chunk_ids:
            return
        manifest = self.manifest
        if self.stores.serving is None:
            # No table open (the model loads, or failed): its rows stay on disk until it is
            # attached, which deletes them as unknown; their texts are remembered, so that it
            # keeps their vectors first (lost, a folder excluded meanwhile was embedded again
            # when it was let back in).
            now = self.clock()
            known = manifest.embed_hashes(chunk_ids[: self.keep_max])
            manifest.keep_later(sorted(known.items()), now, now - self.keep_seconds, self.keep_max)
            return
        notes = manifest.chunk_notes(chunk_ids[: self.keep_max]) if edited else {}
        for vs in (self.stores.serving, self.stores.building):
            if vs is None:
                continue
            hashes = manifest.embed_hashes(chunk_ids[: self.keep_max], vs.flag)
            if not hashes:
                continue
            vecs = vs.store.vectors_of(list(hashes))
            rows = [
                (hashes[cid], np.asarray(v, dtype=np.float32).tobytes(), notes.get(cid, ""))
                for cid, v in vecs.items()
            ]
            now = self.clock()
            manifest.keep_vectors(vs.store.name, rows, now)
            manifest.prune_edits(vs.store.name, {n for _, _, n in rows if n}, EDITS_KEPT_PER_NOTE)
            manifest.prune_kept(now - self.keep_seconds, self.keep_max)

    def clear(self) -> None:
        """Empty the tables (a rebuild; the manifest's chunks are gone already). A rebuild during
        a switch ends it: every chunk is embedded again anyway, so only with the configured model
        (the retiring one's table was filled first, then dropped minutes later: twice the work)."""
        stores = self.stores
        with stores.write_lock:
            self._held = None  # emptied: no row is left to keep
            building, serving = stores.building, stores.serving
            if building is None:
                for store in stores.vector_stores():
                    store.clear()
                self._forget_paused()
                return
            building.store.clear()
            with self.manifest.transaction() as db:
                self.manifest.name_tables(db, building.store.name, "")
            self._serve_building(building, serving)
            self._unsure.clear()  # every table and flag is empty now
        log.info(
            "vectors_switch_ended table=%s retired=%s reason=index rebuilt",
            building.store.name,
            serving.store.name if serving else None,
        )

    def _forget_paused(self) -> None:
        """A rebuild drops a paused switch's table too: its vectors' chunks are gone."""
        table = self.manifest.get_meta("vector_table_next")
        serving = self.stores.serving
        if not table or serving is None:
            return
        self.manifest.set_meta("vector_table_next", "")
        self.manifest.set_meta(PAUSED_SINCE, "")
        drop_table(serving.store.path, table)
        log.info("vectors_dropped table=%s reason=index rebuilt (a paused switch)", table)

    def optimize(self) -> None:
        for store in self.stores.vector_stores():
            store.optimize()
            with contextlib.suppress(IndexBuildStoppedError):  # ended on purpose, and logged so
                store.ensure_ann()
        self.last_optimize = time.time()

    def compact_if_quiet(self, quiet_seconds: float) -> bool:
        """Compact the tables whose writes have paused for ``quiet_seconds``; True if any was."""
        compacted = [store.compact_if_quiet(quiet_seconds) for store in self.stores.vector_stores()]
        return any(compacted)

    def ensure_ann(self, *, retrain: bool = False) -> bool:
        """Index the serving table once it is large, and with ``retrain`` train its index again
        once the table has grown enough (``VectorStore.ann_due``); True if an index was built by
        this call (a build's buffers are then worth giving back)."""
        if not self.ann_build_due(retrain=retrain):
            return False
        serving = self.stores.serving
        return serving is not None and serving.store.ensure_ann(retrain=retrain)

    def ann_build_due(self, *, retrain: bool = False) -> bool:
        """``ensure_ann`` has a build to start (cheap: the row count kept between writes)."""
        serving = self.stores.serving
        if serving is None or serving.store.build_running is not None:
            return False
        return not (serving.store.indexed and serving.store.ann_due(retrain=retrain) is None)

    def first_index_due(self) -> bool:
        """The serving table has reached ``search.annThreshold`` rows and has no index of the
        configured kind yet (cheap: the row count kept between writes)."""
        serving = self.stores.serving
        if serving is None or serving.store.build_running is not None:  # the upkeep's, running
            return False
        return serving.store.ann_due(retrain=False) == "threshold"

    def stop_builds(self) -> None:
        """End every index build and start none (the daemon stops); a retired table's too (a
        retrain begun before its switch), or the stop waited for it past its bound."""
        # A copy at once: the backfill thread drops retired tables from the dict meanwhile.
        retired = list(self._retired.values())
        for store in self.stores.vector_stores() + [store for store, _ in retired]:
            store.stop_build()

    def tune(self, ann_kind: str, nprobes: int, ann_threshold: int) -> None:
        for vs in (self.stores.serving, self.stores.building):
            if vs is not None:
                vs.store.tune(ann_kind, nprobes, ann_threshold)

    def _index_build(self, store: VectorStore | None) -> dict[str, Any] | None:
        """The serving table's index build running now, for status."""
        running = store.build_running if store is not None else None
        if running is None or store is None:
            return None
        return {
            **running,
            "vectors_wait": self.embedding_waits_for_index,
            "last_seconds": store.last_build_seconds,
        }

    def paused_switch(self) -> dict[str, Any] | None:
        """A switch undone before it finished: the manifest still names its table as the next one,
        but nothing builds it (the configured model is the serving one's again, or cannot load)."""
        stores = self.stores
        if stores.serving is None or stores.building is not None:  # not attached yet, or building
            return None
        table = self.manifest.get_meta("vector_table_next")
        if not table:
            return None
        since = float(self.manifest.get_meta(PAUSED_SINCE) or 0) or None
        return {
            "table": table,
            "vectors": self.manifest.vector_count("has_next"),
            "since": since,
            "drop_at": since + PAUSED_KEEP_S if since else None,
        }

    def describe(self) -> dict[str, Any]:
        s, b = self.stores.serving, self.stores.building
        building_rate = self.rate(b)
        return {
            "serving": s.store.name if s else None,
            "serving_model": s.model.model_id if s else None,
            "ann_index": bool(s and s.store.indexed),
            "ann_kind": s.store.ann_kind if s else None,
            "building": b.store.name if b else None,
            "building_pending": self.manifest.pending_count("has_next") if b else 0,
            "building_rate_chunks_per_second": _rounded(building_rate),
            "building_rate_rough": self.rough(b) if building_rate else None,  # null as the rate
            "computing": self.computing,
            "paused": self.paused_switch(),
            "retired": sorted(self._retired),
            "last_optimize": self.last_optimize,
            "index_build": self._index_build(s.store if s else None),
            "embedded": self.embedded,
            "embedded_by_table": self._embedded_by_table(),
            "reused": self.reused,
            "reused_after_deletion": self.kept_reused,
            "reused_from_duplicate_check": self.expected_used,
            "kept_deleted": self.manifest.kept_count(),
        }
