"""The composition root: every part of the index is built here, once, and handed what it needs.

Problems first (every part reports there), then the stores (a broken one moved aside), the
vectors over them, the root supervisor (its mount memory lives in the manifest), the indexer,
and the store repair; then the op handlers over those parts and the socket server in front of
them. The daemon, ``sidecar index`` and the tests' harness and in-process server build the same
parts the same way.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.config import Config
from sidecar.contracts.protocol import Request
from sidecar.daemon.handlers import Handlers, ServiceState
from sidecar.daemon.server import Server
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.index.repair import Repair
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.memory.counting import BoundedCounts
from sidecar.memory.inbox import Inboxes
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime.release import (
    WRITERS_META,
    downgraded_from,
    newer_writer,
    record_writer,
    said,
    this_release,
)
from sidecar.runtime.steadyclock import SteadyClock
from sidecar.search.retrieval import Retriever
from sidecar.stores.bm25 import open_bm25
from sidecar.stores.lifecycle import open_stores
from sidecar.stores.manifest import Manifest
from sidecar.vault.homeguard import clock_path
from sidecar.vault.remembered import CLOCK_META
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.watcher import Watcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parts:
    """The built parts of the index, for the daemon to pass on."""

    problems: Problems
    stores: Stores
    vectors: Vectoring
    supervisor: Supervisor
    indexer: Indexer
    repair: Repair
    # Real elapsed time, for the waits a wall-clock step must not end.
    clock: SteadyClock = field(default_factory=lambda: SteadyClock(None))


def build(
    cfg: Config,
    slot: EmbedderSlot,
    beat: Callable[[], None] | None = None,
    clock: SteadyClock | None = None,
    *,
    replace_newer: bool = False,
) -> Parts:
    """Open the stores and build the parts over them; ``beat``: the indexer thread's heartbeat;
    ``clock``: the steady clock (one kept beside the home's record by default);
    ``replace_newer``: a store a newer sidecar wrote is replaced (a rebuild on purpose)."""
    clock = clock if clock is not None else SteadyClock(clock_path(cfg))
    problems = Problems()
    manifest, bm25 = open_stores(cfg, problems, replace_newer=replace_newer)
    manifest.vector_cap = cfg.index.max_vector_chunks_per_note
    stores = Stores(manifest, bm25, problems=problems)
    try:
        vectors = Vectoring(
            stores, cfg.index.keep_deleted_vectors_hours * 3600, cfg.index.keep_deleted_vectors_max
        )
        clock.floor(manifest.get_meta(CLOCK_META))  # the clock file lost: the index's copy of it
        with contextlib.suppress(sqlite3.Error):  # kept fresh: an old copy would lag by many reboots
            manifest.set_meta(CLOCK_META, clock.record())
        _record_writer(manifest)
        supervisor = Supervisor(cfg, meta=manifest, beat=beat, hold_clock=clock.now, hold_record=clock.record)
        indexer = Indexer(cfg, stores, slot, vectors=vectors, supervisor=supervisor, problems=problems)
        repair = Repair(cfg, stores, vectors, slot, problems)
    except BaseException:
        # Not left open: the daemon's switch to writable is tried again in the same process, and
        # an open keyword writer's lock made that "in use by another process". An error of the
        # close is logged: raised, it hid the build's, the one that says what is wrong.
        try:
            stores.close()
        except Exception as exc:
            log.warning("stores_close_failed error=%s (after a failed start)", exc)
        raise
    return Parts(problems, stores, vectors, supervisor, indexer, repair, clock)


def _record_writer(manifest: Manifest) -> None:
    """This release recorded as the index's last writer (``runtime.release``); a newer one that
    wrote it before is said (a downgrade, or a daemon still running the code from before an
    upgrade) and stays recorded as the newest, for status and doctor."""
    previous = manifest.get_meta(WRITERS_META)
    newer = newer_writer(previous)
    if newer is not None:
        log.warning(
            "index_written_by_newer_release writer=%s this=%s: run that one, or rebuild the index "
            "(`sidecar index --rebuild` with the daemon stopped)",
            said(newer),
            said(this_release()),
        )
    else:  # builds of one release are ordered by their first write: a later one's is said
        other = downgraded_from(previous, this_release()["build"])
        if other is not None:
            log.warning(
                "index_written_by_later_build writer=%s this=%s: this build wrote the index first, "
                "another of this release since (builds are ordered by their first write, not by "
                "age): if that one is the newer, run it; if this one is, nothing is wrong",
                said(other),
                said(this_release()),
            )
    with contextlib.suppress(sqlite3.Error):  # a full disk: said at the next start that writes
        # Notes and no record: written by a release that recorded none (kept, for doctor).
        unrecorded = previous is None and manifest.has_notes("")
        manifest.set_meta(WRITERS_META, record_writer(previous, unrecorded=unrecorded))


def build_read_only(cfg: Config, slot: EmbedderSlot, clock: SteadyClock | None = None) -> Parts:
    """The parts over the index as it is on disk, opened for reading only (its disk is full):
    nothing in the index folder is made, moved aside or written. StoreError when a store cannot
    be read that way (``Manifest._open_read_only``, a missing keyword index)."""
    clock = clock if clock is not None else SteadyClock(clock_path(cfg))
    problems = Problems()
    manifest = Manifest(cfg.index_dir / "manifest.sqlite", read_only=True)
    manifest.vector_cap = cfg.index.max_vector_chunks_per_note
    try:
        bm25 = open_bm25(cfg.index_dir / "bm25", read_only=True)  # an older layout's as it is
    except BaseException:
        manifest.close_after_failure()
        raise
    stores = Stores(manifest, bm25, problems=problems)
    vectors = Vectoring(
        stores, cfg.index.keep_deleted_vectors_hours * 3600, cfg.index.keep_deleted_vectors_max
    )
    clock.floor(manifest.get_meta(CLOCK_META))
    supervisor = Supervisor(cfg, meta=manifest, hold_clock=clock.now, hold_record=clock.record)
    indexer = Indexer(cfg, stores, slot, vectors=vectors, supervisor=supervisor, problems=problems)
    repair = Repair(cfg, stores, vectors, slot, problems)
    return Parts(problems, stores, vectors, supervisor, indexer, repair, clock)


def build_watcher(
    cfg: Config,
    on_change: Callable[[set[str], frozenset[str]], None],
    stop: threading.Event,
    supervisor: Supervisor | None = None,
) -> Watcher:
    """File events of the vault and the agents' inboxes, with their paths, to ``on_change``; a
    watched folder's stat and walk asked through ``supervisor`` (one that hangs marks its roots
    hanging)."""
    watch = [p for p in (cfg.vault.path, cfg.agents_dir) if p is not None and cfg.watch.events]
    stat = supervisor.watched_stat if supervisor is not None else None
    walk = supervisor.watched_walk if supervisor is not None else None
    return Watcher(
        watch,
        on_change,
        stop,
        cfg.watch.debounce_ms,
        cfg.watch.probe_timeout_seconds,
        stat=stat,
        walk=walk,
        walk_timeout=cfg.watch.scan_timeout_seconds,
        slow=supervisor.slow_folder if supervisor is not None else None,
    )


def model_stem(cfg: Config) -> bool:
    """Whether ``search.stemFirst`` is left to the models (not given by the user): then the
    serving model's own list counts, also while a switch to another model migrates."""
    return _left_to_models(cfg, "search.stemFirst")


def model_gates(cfg: Config) -> frozenset[str]:
    """recall's gates left to the models (not given by the user): the serving model's own count,
    also while a switch to another model migrates."""
    return frozenset(k for k in ("recall.minSimilarity", "recall.scoreFloor") if _left_to_models(cfg, k))


def _left_to_models(cfg: Config, dotted: str) -> bool:
    origin = cfg.origins.get(dotted, "default")
    return origin == "default" or origin.startswith("model ")


def build_handlers(
    cfg: Config,
    parts: Parts,
    slot: EmbedderSlot,
    service: ServiceState,
    inboxes: Inboxes,
    *,
    counts: BoundedCounts | None = None,
) -> Handlers:
    """One handler per protocol op, over the built parts; ``counts``: the daemon's inbox counts,
    kept across handler builds."""
    stores = parts.stores
    retriever = Retriever(
        stores,
        slot,
        cfg.search,
        cfg.recall,
        cfg.embedder.languages,
        model_stem=model_stem(cfg),
        model_gates=model_gates(cfg),
        word_lists=cfg.prepared_dir,
    )
    week = parts.indexer.week_start
    retriever.week_start = lambda: week.value  # Obsidian's, as the last sweep read it
    return Handlers(
        cfg,
        indexer=parts.indexer,
        manifest=stores.manifest,
        supervisor=parts.supervisor,
        vectors=parts.vectors,
        problems=parts.problems,
        retriever=retriever,
        slot=slot,
        service=service,
        memory=MemoryOps(
            cfg, inboxes, parts.indexer, slot, stores=stores, problems=parts.problems, counts=counts
        ),
    )


class Dispatcher(Protocol):
    """What the server hands each request to (the handlers, or what chooses them)."""

    def dispatch(self, req: Request) -> dict[str, Any]: ...


def build_server(cfg: Config, handlers: Dispatcher) -> Server:
    """The socket loop in front of the handlers, with the configured limits."""
    s = cfg.server
    return Server(
        handlers.dispatch,
        max_frame=s.max_frame_bytes,
        workers=s.workers,
        idle_timeout=s.idle_timeout_seconds,
        max_connections=s.max_connections,
        max_buffered=s.max_buffered_bytes,
        request_timeout=s.request_timeout_seconds,
        write_workers=s.write_workers,
    )
