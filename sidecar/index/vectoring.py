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

Here: which table serves and which is built (attach, the switch, its cut-over and the retired
tables), the counters and status, the ANN upkeep. Its parts: ``vector_embed`` (computing vectors),
``vector_rows`` (a table's rows against the manifest, and the vectors kept of deleted chunks).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from threading import Event, Lock, RLock
from typing import Any

from sidecar.contracts.errors import IndexBuildStoppedError, StoreError
from sidecar.index.problems import Problems
from sidecar.index.vector_embed import BACKFILL_RUN, WRITE_RUN, VectorEmbedding
from sidecar.index.vector_rows import WALL_CLOCK_FLOOR, VectorRows
from sidecar.model.embedder import Embedder
from sidecar.runtime.group import GroupCommit
from sidecar.runtime.pace import Pace
from sidecar.stores import closing
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.frozen import IndexFlags, frozen, frozen_in_index
from sidecar.stores.manifest import Manifest
from sidecar.stores.vectors import VectorStore, drop_table

log = logging.getLogger(__name__)

# The old model's table is dropped this long after a switch: searches that took it just before
# still read it (an ANN search reads the table, not a copy in memory).
RETIRE_GRACE_S = 60.0
# A switch undone before it finished (A -> B -> A): B's table is kept this long, so that switching
# to B again resumes it, then dropped (at once when a third model is switched to). The manifest
# keeps when it was paused under this key.
PAUSED_KEEP_S = 7 * 86400.0
PAUSED_SINCE = "vector_table_next_paused"
Counts = dict[str, tuple[int, int, float]]  # table -> (texts embedded, vectors stored, seconds)


@dataclass
class VectorSet:
    """A table and the model whose vectors it holds (and that embeds queries for it)."""

    store: VectorStore
    model: Embedder
    flag: str  # manifest column: has_vector (serving) or has_next (being built)


# The agents whose keyword index files one health call asks (``Stores.flags``), in turn: each
# agent's pair is eleven entries, and at every health all of them (2,000 statx calls at 180
# agents) cost 30-60 ms, 290 ms on a loaded machine; a flag on an agent's index is found within
# as many calls as there are turns, and said at every call after while it stays.
FLAGS_AGENTS_PER_CALL = 8


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
    # What came of the last run that found that rewrite due: (outcome, its reason in words, when
    # by the wall clock), outcome "compacted", "skipped", "stopped", "gave way" or "failed" (a
    # small index's rewrite in place after a large one's run: "compacted in place",
    # ``repair.IN_PLACE``, said once; routine ones leave None: ``repair._in_place_said``); else
    # None. A skipped or given-up one left the deleted documents in the scores, said nowhere.
    keyword_compaction_last: tuple[str, str, float] | None = None
    # What that outcome is about: the index live then, its refills from the manifest then
    # (``Bm25Index.refills``) and when by the monotonic clock (an age no change of the wall clock
    # bends). A rebuild, a repair or an upgrade's swap since: it is about an index no longer
    # there, and health drops it (status said "last rewritten" of it until a restart).
    keyword_compaction_of: tuple[Bm25Index, int, float] | None = None
    # After that rewrite gave way to the notes written meanwhile (its whole fill wasted: a busy
    # vault): (give-ways in a row, runs that find it due still to skip), else None
    # (``repair._backed_off``); also in the manifest's meta, resumed at a start
    # (``repair.remembered_backoff``).
    keyword_backoff: tuple[int, int] | None = None
    # The keyword index that back-off is about (``repair._index_id``): a replaced one starts fresh.
    keyword_backoff_of: str | None = None
    # The notes that could be cut again at the last compaction skipped for them, else None: a run
    # that finds no fewer goes ahead (notes whose read fails, or any the sweep does not get to,
    # must not hold the compaction back for good).
    keyword_recut_seen: int | None = None
    # The roots whose notes the sweep cannot read now (offline, a read hanging, deletions held),
    # by name (set by the indexer): their notes waiting to be cut again do not hold a compaction
    # back (``repair._recut_waiting``).
    roots_away: Callable[[], Collection[str]] = field(default=frozenset, repr=False, compare=False)
    # The notes written continuously now (``sidecar.daemon.hot``, set by the index loop), key ->
    # the chunks its last indexing added: those wait for a vector for a while, no backlog.
    continuous: Callable[[], Mapping[str, int]] = field(default=dict, repr=False, compare=False)
    # The agents with memory as last read, and when (``repair.unsearchable_agents``).
    memory_agents: tuple[float, frozenset[str]] | None = field(default=None, repr=False, compare=False)
    # The parts of the keyword index whose last search failed for want of file handles, by
    # "<part>/<chunks|pages>", and why (``index.keyword_faults.handles_seen``).
    keyword_no_handles: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The last whole look for immutable entries in the index (``look_for_flags``), made at the
    # start and by the scheduled optimize job, off the request path; None before the first.
    index_flags: IndexFlags | None = field(default=None, repr=False, compare=False)
    # Where the next health's share of the agents' keyword indexes begins (``flags``), the agents
    # asked since the last whole look (``complete`` once every open agent was), and the flagged
    # entries health found (kept apart from the look's finding, each said while it stays: the
    # next call asks other agents, and one lifted must not hide another still flagged).
    flags_turn: int = field(default=0, repr=False, compare=False)
    flags_asked: set[str] = field(default_factory=set, repr=False, compare=False)
    flags_kept: list[Path] = field(default_factory=list, repr=False, compare=False)
    # The stop's close (``close(stopping=True)``): whether no vector write may land after it;
    # None before it, False while it runs or when it raised before the vector tables answered.
    vectors_settled: bool | None = field(default=None, repr=False, compare=False)

    @property
    def vectors(self) -> VectorStore | None:
        return self.serving.store if self.serving else None

    def table_names(self) -> list[str]:
        """The vector tables open now (the serving one, and the one a switch builds)."""
        return [vs.store.name for vs in (self.serving, self.building) if vs is not None]

    def look_for_flags(self) -> None:
        """Walk the index for an immutable entry (``frozen_in_index``: up to 2,000 entries, tens
        of milliseconds on a big index) and keep what it found for health, which at each call
        asks only the files a write touches (``flags``): a walk at every health call read the
        disk under status and cost that much each time."""
        self.index_flags = frozen_in_index(self.manifest.path.parent)
        self.flags_asked = set()

    def flags(self) -> IndexFlags:
        """The index's immutable entry, if any (health's ``index.immutable``): the files a write
        touches, asked now by the names of what is open (nothing listed; of the agents' keyword
        indexes ``FLAGS_AGENTS_PER_CALL`` in turn), else an entry an earlier call found, else the
        last whole look's finding, each while it is still flagged. ``complete`` when the last
        whole look was and every open agent's files were asked since it (False before the
        first): with more agents than one call asks, a full turn takes several calls."""
        agents = self.bm25.agents()
        start = self.flags_turn % len(agents) if agents else 0
        turn = (agents[start:] + agents[:start])[:FLAGS_AGENTS_PER_CALL]
        self.flags_turn = start + len(turn)
        index = self.manifest.path.parent
        written = frozen_in_index(index, agents=turn, tables=self.table_names(), deep=False)
        self.flags_asked.update(turn)
        last = self.index_flags
        complete = last is not None and last.complete and self.flags_asked.issuperset(agents)
        self.flags_kept = [path for path in self.flags_kept if path != written.found and frozen(path)]
        if written.found is not None:
            self.flags_kept.insert(0, written.found)
            return IndexFlags(written.found, complete)
        if self.flags_kept:
            return IndexFlags(self.flags_kept[0], complete)
        if last is not None and last.found is not None and frozen(last.found):
            return IndexFlags(last.found, complete)
        return IndexFlags(None, complete)

    def vector_stores(self) -> list[VectorStore]:
        return [s.store for s in (self.serving, self.building) if s is not None]

    def close(self, *, stopping: bool = False, left: Callable[[float], float] | None = None) -> bool:
        """Flush and close BM25 and the manifest (the vector tables' centres' churn written:
        ``VectorStore.keep_centre``); the manifest also when BM25's close raises (its writer
        connection and lock count kept). ``stopping``: the process exits next, and the index
        lock is released after this: each store's close waits for a call under way a moment
        only (``CLOSE_WAIT_S``), every later call is refused ``busy``, and the vector tables
        are closed too (otherwise they need none). True unless a vector write (or an index
        build, or a centre being written) under way may still land: the stop then keeps the
        index locked until the process exits. That answer is kept in ``vectors_settled`` before
        the keyword index and the manifest close: one of those raising (a disk failing under
        both) loses the return value, not the answer. ``left``: the stop's clock
        (``StopClock.left``): each store's wait is what it leaves of ``CLOSE_WAIT_S``, so the
        closes count inside the stop's one bound."""
        if not stopping:
            try:
                for store in self.vector_stores():
                    store.keep_centre()
                self.bm25.close()
            finally:
                self.manifest.close()
            return True

        def wait() -> float:
            return closing.CLOSE_WAIT_S if left is None else left(closing.CLOSE_WAIT_S)

        self.vectors_settled = False
        try:
            settled = True
            for store in self.vector_stores():
                settled = store.close(stopping=True, wait=wait()) and settled
            self.vectors_settled = settled
            self.bm25.close(stopping=True, wait=wait())
        finally:
            self.manifest.close(stopping=True, wait=wait())
        return self.vectors_settled


def _stamp(store: VectorStore) -> str:
    """Table name, version and its files: a table changed by anything else after the stop, or a
    data file damaged meanwhile, does not match (the start then reads every id)."""
    return f"{store.name}@{store.version()}#{store.files_signature()}"


def _rounded(rate: float | None) -> float | None:
    return round(rate, 2) if rate else None


class Vectoring(VectorRows, VectorEmbedding):
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
        self._lead_top = None
        self._jumps = []
        if clock() >= WALL_CLOCK_FLOOR:
            self._seen_ahead(clock())  # the clock as this process found it
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
        # Times the embedding batches (steady). Its own: it replaced ``clock`` once, and the kept
        # vectors were stamped with a counter that restarts at every boot.
        self.timer: Callable[[], float] = time.perf_counter
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
        if not self.manifest.read_only:
            self.mend_kept_times()

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
