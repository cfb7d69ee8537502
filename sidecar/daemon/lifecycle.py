"""Composition root: build every part, start, serve, stop.

startup: lock the index, bind the socket, open the stores, finish interrupted deletions, start
the model loader, the indexer thread (first sweep, then scheduled sweeps via APScheduler) and the
vector backfill thread. main loop: the socket server until SIGTERM/SIGINT. shutdown: stop the
threads with a bound, flush the stores, remove the socket, release the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import resource
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import IO, Any

import lancedb
from apscheduler.schedulers.background import BackgroundScheduler

from sidecar.config import Config, model_settings
from sidecar.contracts.errors import DaemonRunningError, EmbedderError, SidecarError, StoreError
from sidecar.daemon.handlers import Handlers, ServiceState
from sidecar.daemon.server import Server, bind_socket
from sidecar.index.indexer import Indexer, open_stores, open_vectors
from sidecar.index.vectoring import Stores
from sidecar.memory.inbox import Inboxes
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import Embedder, EmbedderSlot, load_model
from sidecar.runtime import heap
from sidecar.runtime.notify import Notifier
from sidecar.search.retrieval import Retriever
from sidecar.stores.vectors import VectorStore
from sidecar.vault.confine import tighten_home
from sidecar.vault.watcher import Watcher

log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 10.0
# Compact the vector table a minute after the last write: after a burst of memory writes the
# table held ~900 versions and ~500 fragments until the hourly optimize (bench/soak.py).
COMPACT_AFTER_QUIET_S = 60.0
# Vector searches failing this many times in a row make the table suspect (one bad request does not).
VECTOR_REPAIR_AFTER_FAILURES = 3
VECTOR_REPAIR_EVERY_S = 600.0


@dataclass(frozen=True)
class Job:
    """A sweep request; bursts are merged into one."""

    rebuild: bool = False
    roots: frozenset[str] | None = None  # None: every root
    confirm: frozenset[str] = frozenset()  # roots whose mass deletion the user confirmed
    paths: frozenset[str] = frozenset()  # changed files or folders (file events): only these

    def merge(self, other: Job) -> Job:
        roots = None if self.roots is None or other.roots is None else self.roots | other.roots
        paths = frozenset() if roots is None else self.paths | other.paths
        return Job(self.rebuild or other.rebuild, roots, self.confirm | other.confirm, paths)


class IndexLock:
    """An exclusive lock on the index directory: one writer per index, daemon or `sidecar index`."""

    def __init__(self, index_dir: Path) -> None:
        index_dir.mkdir(parents=True, exist_ok=True)
        self.path = index_dir / ".lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        fh = self.path.open("a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise DaemonRunningError(  # the words README's troubleshooting table promises
                f"another sidecar daemon is already serving {self.path.parent.parent} "
                f"(its index {self.path.parent} is in use by {holder})"
            ) from exc
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def make_private(cfg: Config) -> None:
    """Everything this process creates is readable by the user only (LanceDB's and Tantivy's files
    too), and a home left readable by others is tightened (and the log says so)."""
    os.umask(0o077)
    own = [cfg.index_dir, cfg.agents_dir, cfg.models_dir, cfg.home / "run"]
    tighten_home(cfg.home, own, [p for p in (cfg.vault.path,) if p is not None])


def raise_fd_limit() -> None:
    """Allow as many open connections as the hard limit permits (the default soft limit is often 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def load_embedder(cfg: Config, slot: EmbedderSlot) -> None:
    """Load the model into the slot; on failure say so once and let search run BM25-only."""
    if not cfg.embedder.enabled:
        slot.set_failed("disabled by configuration (embedder.enabled: false)")
        log.warning("embedder_failed reason=disabled by configuration; keyword search only")
        return
    slot.set_loading()
    t0 = time.perf_counter()
    try:
        model = load_model(cfg)
    except EmbedderError as exc:
        slot.set_failed(str(exc))
        log.error("embedder_failed error=%s; keyword search only until the model loads", exc)
        return
    slot.set_ok(model, model.files.origin)
    heap.trim()  # graph optimisation's scratch memory (about 60 MB) goes back to the system
    log.info(
        "embedder_ready model=%s dim=%d seconds=%.2f", model.model_id, model.dim, time.perf_counter() - t0
    )


class Daemon:
    def __init__(self, cfg: Config, reload_config: Callable[[], Config] | None = None) -> None:
        self.cfg = cfg
        self.reload_config = reload_config
        self.notifier = Notifier(cfg.notify_socket)
        self.loop_beat = self.indexer_beat = time.monotonic()
        self._retriever: Retriever | None = None
        self.stop = threading.Event()
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.slot = EmbedderSlot()
        self.started = time.time()
        self._threads: list[threading.Thread] = []
        self._indexer: Indexer | None = None
        self._bm25_repaired = -1e9
        self._vectors_repaired = -1e9
        self._ann_checked = 0.0

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until a signal; raises typed errors for the CLI to map to exit codes."""
        cfg = self.cfg
        raise_fd_limit()
        make_private(cfg)
        lock = IndexLock(cfg.index_dir)
        lock.acquire()
        listener = None
        stores: Stores | None = None
        scheduler: BackgroundScheduler | None = None
        try:
            listener = bind_socket(cfg.socket_path)
            log.info("daemon_starting socket=%s home=%s vault=%s", cfg.socket_path, cfg.home, cfg.vault.path)
            if cfg.vault.path is None:
                log.warning("no_vault configured: only agent memory is indexed")
            elif not cfg.vault.path.is_dir():
                log.warning("watcher_retry root=vault reason=%s is not reachable", cfg.vault.path)
            stores = open_stores(cfg)
            indexer = self._indexer = Indexer(cfg, stores, self.slot)
            indexer.finish_interrupted()
            handlers = self._handlers(indexer)
            self._start_thread("embedder-load", lambda: load_embedder(cfg, self.slot))
            self._start_thread("indexer", lambda: self._index_loop(indexer))
            self._start_thread("vectors", lambda: self._embed_loop(indexer))
            self._start_thread("watcher", self.watcher.run)
            scheduler = self._scheduler(indexer)
            scheduler.start()
            self.jobs.put(Job())
            server = Server(
                handlers.dispatch,
                max_frame=cfg.server.max_frame_bytes,
                workers=cfg.server.workers,
                idle_timeout=cfg.server.idle_timeout_seconds,
                max_connections=cfg.server.max_connections,
                max_buffered=cfg.server.max_buffered_bytes,
                request_timeout=cfg.server.request_timeout_seconds,
                write_workers=cfg.server.write_workers,
            )
            asyncio.run(self._serve(server, listener))
        finally:
            self.stop.set()
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            stuck = self._join_workers()
            if stores is not None:
                if not stuck and self._indexer is not None:
                    with contextlib.suppress(StoreError, sqlite3.Error):
                        self._indexer.vectors.mark_clean()
                stores.bm25.close()
                stores.manifest.close()
            if listener is not None:
                listener.close()
                with contextlib.suppress(FileNotFoundError):
                    cfg.socket_path.unlink()
            lock.release()
            log.info("daemon_stopped")

    def _join_workers(self) -> bool:
        """Wait for the worker threads (an index build's child is ended first: the embedding
        thread waits on it); True if one did not finish in time."""
        if self._indexer is not None:
            self._indexer.vectors.stop_builds()
        stuck = False
        for t in self._threads:
            t.join(_JOIN_TIMEOUT)
            if t.is_alive():
                stuck = True
                log.warning("shutdown_timeout thread=%s", t.name)
        return stuck

    def _handlers(self, indexer: Indexer) -> Handlers:
        cfg = self.cfg
        cfg.agents_dir.mkdir(parents=True, exist_ok=True)
        inboxes = Inboxes(cfg)
        inboxes.clean_temp()  # a write killed mid-way leaves its temp file; none runs yet
        watch = [p for p in (cfg.vault.path, cfg.agents_dir) if p is not None and cfg.watch.events]
        self.watcher = Watcher(watch, self.changed, self.stop, cfg.watch.debounce_ms)
        service = ServiceState(
            self.started, self.jobs.qsize, self.request_sweep, lambda: self.watcher.watching, self.reload
        )
        self._retriever = Retriever(indexer.stores, self.slot, cfg.search, cfg.recall, cfg.embedder.languages)
        return Handlers(
            cfg,
            indexer=indexer,
            retriever=self._retriever,
            slot=self.slot,
            service=service,
            memory=MemoryOps(cfg, inboxes, indexer, self.slot),
        )

    async def _serve(self, server: Server, listener: object) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, self._reload_quietly))
        beat = asyncio.create_task(self._beat())
        try:
            log.info("daemon_ready socket=%s", self.cfg.socket_path)
            self.notifier.send("READY=1", "STATUS=serving; first sweep starting")
            await server.serve(listener, stop)  # type: ignore[arg-type]
        finally:
            beat.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self.notifier.send("STOPPING=1", "STATUS=stopping")
            log.info("daemon_stopping")

    async def _beat(self) -> None:
        """Proves the event loop turns; the watchdog pings only while it does."""
        while True:
            self.loop_beat = time.monotonic()
            await asyncio.sleep(1.0)

    def _notify(self, indexer: Indexer) -> None:
        """STATUS= for `systemctl status`, and WATCHDOG=1 when the loop and the indexer are alive."""
        if not self.notifier.enabled:
            return
        self.notifier.send(f"STATUS={status_line(indexer, self.slot.state)}")
        if self.cfg.watchdog_usec:
            now = time.monotonic()
            limit = self.cfg.watchdog_usec / 1e6
            loop_ok = now - self.loop_beat < limit / 2
            # The indexer thread beats between jobs and after every batch of a sweep.
            indexer_ok = now - self.indexer_beat < max(limit, 300.0)
            if loop_ok and indexer_ok:
                self.notifier.send("WATCHDOG=1")
            else:
                log.error("watchdog_missed event_loop_ok=%s indexer_ok=%s", loop_ok, indexer_ok)

    def _reload_quietly(self) -> None:
        with contextlib.suppress(SidecarError):  # already logged; the running configuration stays
            self.reload()

    def reload(self) -> dict[str, Any]:
        """Re-read the configuration and apply the ranking tunables (SIGHUP or the reload op)."""
        if self.reload_config is None or self._retriever is None:
            return {"reloaded": False, "changed": []}
        try:
            new = self.reload_config()
        except SidecarError as exc:
            log.error("reload_failed error=%s; keeping the running configuration", exc)
            raise
        old = self._retriever.cfg
        changed = [f.name for f in fields(old) if getattr(old, f.name) != getattr(new.search, f.name)]
        self._retriever.cfg = new.search
        self._retriever.recall_cfg = new.recall
        if self._indexer is not None:
            s = new.search
            self._indexer.vectors.tune(s.ann_index, s.ann_probes, s.ann_threshold)
            if self._indexer.set_excludes(new.index.exclude, new.index.obsidian_excludes):
                changed.append("index.exclude")
                self.request_sweep(False, None, frozenset())  # excluded notes leave, included ones come
        log.info("config_reloaded changed=%s", ",".join(changed) or "nothing")
        return {"reloaded": True, "changed": changed}

    def _indexer_alive(self, _activity: object) -> None:
        self.indexer_beat = time.monotonic()

    def _start_thread(self, name: str, target: object) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    def changed(self, paths: set[str]) -> None:
        """File events: look at the changed paths only; none (a watch restarted): every root."""
        if paths:
            self.jobs.put(Job(roots=frozenset(), paths=frozenset(paths)))
        else:
            self.jobs.put(Job())

    def request_sweep(
        self,
        rebuild: bool = False,
        roots: frozenset[str] | None = None,
        confirm: frozenset[str] = frozenset(),
    ) -> None:
        self.jobs.put(Job(rebuild, roots, confirm))

    def _scheduler(self, indexer: Indexer) -> BackgroundScheduler:
        """Full sweeps, the per-root tick (polling, retries), vector compaction, model retries."""
        cfg = self.cfg
        scheduler = BackgroundScheduler(daemon=True, job_defaults={"coalesce": True, "max_instances": 1})
        scheduler.add_job(self.request_sweep, "interval", minutes=cfg.index.rescan_minutes, id="sweep")
        tick = min(1.0, cfg.watch.poll_seconds, cfg.watch.retry_base_seconds)  # due() is a few compares
        scheduler.add_job(lambda: self._tick(indexer), "interval", seconds=tick, id="tick")
        scheduler.add_job(
            indexer.optimize_vectors, "interval", minutes=cfg.index.optimize_minutes, id="optimize"
        )
        scheduler.add_job(
            self._retry_embedder, "interval", minutes=cfg.embedder.retry_minutes, id="model-retry"
        )
        # Native libraries free into malloc's arenas, which keep the pages: hand them back now and
        # then (a few milliseconds; 50-60 MB after loading the model, BENCHMARKS.md).
        scheduler.add_job(heap.trim, "interval", seconds=60, id="trim")
        if self.notifier.enabled:
            every = min(5.0, cfg.watchdog_usec / 2e6) if cfg.watchdog_usec else 5.0
            scheduler.add_job(lambda: self._notify(indexer), "interval", seconds=every, id="notify")
        return scheduler

    def _tick(self, indexer: Indexer) -> None:
        due = indexer.supervisor.due()
        if due and self.jobs.empty():
            self.jobs.put(Job(roots=frozenset(due)))
        self._check_manifest(indexer)
        self._repair_keyword_index(indexer)
        self._repair_vector_table(indexer)

    def _repair_keyword_index(self, indexer: Indexer) -> None:
        """Searches found the BM25 index damaged: rebuild it in place (at most once a minute)."""
        failing = indexer.stores.problems.active_in("keyword_search")
        if failing is None or time.monotonic() - self._bm25_repaired < 60:
            return
        self._bm25_repaired = time.monotonic()
        try:
            indexer.repair_bm25(failing["error"])
        except (StoreError, OSError) as exc:
            log.error("bm25_repair_failed error=%s", exc)

    def _repair_vector_table(self, indexer: Indexer) -> None:
        """Vector searches keep failing with a working model: check the table, replace it if it
        cannot be read (at most every ten minutes: the check reads every vector)."""
        failing = indexer.stores.problems.active_in("vector_search")
        if (
            failing is None
            or failing["count"] < VECTOR_REPAIR_AFTER_FAILURES
            or self.slot.state != "ok"
            or time.monotonic() - self._vectors_repaired < VECTOR_REPAIR_EVERY_S
        ):
            return
        self._vectors_repaired = time.monotonic()
        try:
            indexer.repair_vectors(failing["error"])
        except (StoreError, OSError) as exc:
            log.error("vector_repair_failed error=%s", exc)

    def _check_manifest(self, indexer: Indexer) -> None:
        """sqlite keeps writing to a deleted or replaced file: say so instead of losing work silently."""
        path = indexer.stores.manifest.path
        try:
            same = os.stat(path).st_ino == indexer.stores.manifest.inode
        except OSError:
            same = False
        if not same:
            indexer.stores.problems.report(
                "stores",
                f"{path} was deleted or replaced while running; restart the daemon to rebuild the "
                "index from the notes (searches still answer from the open copy)",
            )

    def _retry_embedder(self) -> None:
        if self.slot.state == "failed" and self.cfg.embedder.enabled:
            log.info("embedder_retry")
            load_embedder(self.cfg, self.slot)

    # --- worker loops --------------------------------------------------------------------------

    def _index_loop(self, indexer: Indexer) -> None:
        # Chunk sizes are counted with the model's tokenizer: give the model a moment to load.
        self.slot.ready.wait(timeout=60)
        delay = 1.0
        # A storage fault (disk full, read-only) is retried often: notes saved meanwhile must be
        # searchable seconds after it clears, not after a backoff of minutes.
        cap = self.cfg.watch.fault_retry_max_seconds
        problems = indexer.stores.problems
        indexer.supervisor.beat = lambda: self._indexer_alive(None)
        while not self.stop.is_set():
            self.indexer_beat = time.monotonic()
            try:
                job = self.jobs.get(timeout=0.5)
            except queue.Empty:
                continue
            while not self.jobs.empty():  # coalesce a burst of requests into one sweep
                job = job.merge(self.jobs.get_nowait())
            try:
                if job.rebuild:
                    indexer.clear()
                summary = indexer.sweep(
                    only=job.roots,
                    stop=self.stop,
                    confirm_deletions=job.confirm,
                    progress=self._indexer_alive,
                    paths=job.paths,
                )
                if summary.get("changed", 0) > 100:
                    heap.trim()  # parsing a large batch leaves freed pages behind
                problems.clear("index")
                delay = 1.0
            except Exception as exc:  # e.g. sqlite "disk is full": keep serving, retry soon
                if isinstance(exc, (StoreError, OSError, sqlite3.Error)):
                    log.error("sweep_failed error=%s retry_in=%.0fs", exc, delay)
                    why = str(exc)
                else:  # unexpected: keep the traceback
                    log.exception("sweep_crashed retry_in=%.0fs", delay)
                    why = f"{type(exc).__name__}: {exc}"
                problems.report("index", f"updating the index failed: {why} (retrying in {delay:.0f} s)")
                self.stop.wait(delay)
                delay = min(delay * 2, cap)
                if indexer.leftover is not None and not job.rebuild:
                    job = Job(roots=frozenset(), confirm=job.confirm, paths=indexer.leftover)
                self.jobs.put(job)

    def _embed_loop(self, indexer: Indexer) -> None:
        # Wait for a model: it may load late (first start) or only after a retry.
        while self.slot.model is None:
            # Poll fast while the model loads, so vectors serve right after it is there.
            if self.stop.wait(0.05 if self.slot.state in ("idle", "loading") else 0.5):
                return
        if not self._attach_vectors(indexer, self.slot.model):
            return
        self._ann_checked = 0.0
        busy = False
        act = indexer.activity
        while not self.stop.is_set():
            # Keyword search first: while a large sweep runs (a cold start, a new vault) the CPU
            # goes to parsing; memory writes still embed at once on their own path.
            if act.phase in ("scanning", "indexing") and act.total - act.done > self.cfg.index.batch_files:
                self.stop.wait(0.2)
                continue
            try:
                stored = indexer.embed_pending()
                busy = busy or stored > 0
                indexer.stores.problems.clear("embedding")
            except Exception as exc:  # ours, or e.g. sqlite "disk is full" while flagging vectors
                if isinstance(exc, (StoreError, EmbedderError)):
                    log.error("embedding_failed error=%s", exc)
                    why = str(exc)
                else:  # unexpected: keep the traceback
                    log.exception("embedding_crashed")
                    why = f"{type(exc).__name__}: {exc}"
                indexer.stores.problems.report("embedding", f"storing vectors failed: {why} (retrying)")
                self.stop.wait(5.0)
                continue
            if stored == 0:
                if busy:
                    busy = False
                    heap.trim()  # an embedding burst is over: give its buffers back
                self._vector_upkeep(indexer)
                indexer.vectors.changed.wait(1.0)
                indexer.vectors.changed.clear()

    def _attach_vectors(self, indexer: Indexer, model: Embedder) -> bool:
        """Serve vectors at start; a table that cannot be attached is checked and, if it cannot be
        read, replaced (it would fail the same way after every restart)."""
        try:
            attach(self.cfg, indexer, model)
        except StoreError as exc:
            log.error("vectors_unavailable error=%s", exc)
            try:
                indexer.repair_vectors(f"attaching failed: {exc}")
            except StoreError as again:
                log.error("vectors_unavailable error=%s; keyword search only", again)
                indexer.stores.problems.report("vector_search", f"vector table unavailable: {again}")
                return False
        heap.trim()  # the reconcile's id sets are garbage now
        return True

    def _vector_upkeep(self, indexer: Indexer) -> None:
        """While nothing waits for a vector: compact after a write burst, build the ANN index."""
        try:
            if indexer.vectors.compact_if_quiet(COMPACT_AFTER_QUIET_S):
                heap.trim()
        except StoreError as exc:
            log.error("vectors_compact_failed error=%s", exc)
        if time.monotonic() - self._ann_checked > 60:
            self._ann_checked = time.monotonic()
            try:
                if indexer.vectors.ensure_ann():
                    heap.trim()  # the build's buffers (hundreds of MB at 100 k vectors)
            except StoreError as exc:
                if self.stop.is_set():  # the build was ended because the daemon stops
                    log.info("vector_index_build_stopped error=%s", exc)
                else:
                    log.error("vector_index_failed error=%s", exc)


def attach(cfg: Config, indexer: Indexer, model: Embedder) -> None:
    """Serve vectors of ``model``; if the index holds another model's vectors, keep serving those
    (queried with that model) while the new table is built, as long as the old model can be loaded."""
    new = open_vectors(cfg, model.model_id, model.dim, model.pooling, indexer.stores.problems)
    old_name = indexer.stores.manifest.get_meta("vector_table")
    if old_name and old_name != new.name:
        previous = open_previous(cfg, old_name)
        if previous is not None:
            indexer.vectors.begin_migration(previous[0], previous[1], new, model)
            return
        log.warning(
            "vectors_rebuild table=%s reason=the previous model cannot be loaded; vectors are recomputed "
            "and search is keyword-only for chunks without one meanwhile",
            new.name,
        )
    indexer.attach_vectors(new, model)


def open_previous(cfg: Config, table: str) -> tuple[VectorStore, Embedder] | None:
    """The serving table of the previous model and that model, if both can still be opened."""
    try:
        db = lancedb.connect(str(cfg.index_dir / "vectors"))
        if table not in db.list_tables().tables:
            return None
        meta = db.open_table(table).schema.metadata or {}
        model_id = meta.get(b"model", b"").decode()
        dim, pooling = int(meta.get(b"dim", b"0")), meta.get(b"pooling", b"mean").decode()
        name = model_id.split("@", 1)[0]
        # The previous model with its own settings (prefixes, languages), not the new one's.
        old_ecfg = replace(model_settings(cfg.embedder, name), path=None, pooling=pooling)
        old_cfg = replace(cfg, embedder=old_ecfg)
        old_model = load_model(old_cfg)
        if old_model.model_id != model_id:
            return None
        return VectorStore(cfg.index_dir / "vectors", model_id, dim, pooling), old_model
    except (EmbedderError, StoreError, OSError, ValueError) as exc:
        log.info("previous_model_unavailable table=%s error=%s", table, exc)
        return None


def status_line(indexer: Indexer, embedder_state: str) -> str:
    """One line for `systemctl status`: what the daemon is doing right now."""
    act = indexer.activity
    offline = [st.name for st in indexer.supervisor.roots.values() if st.offline]
    if not act.first_sweep_done:  # before the first sweep's end (also while it is still starting)
        text = f"building {act.done:,}/{act.total:,} notes"
    else:
        counts = indexer.counts()
        pending = indexer.stores.manifest.pending_count()
        text = f"ready: {counts['files']:,} notes, {counts['chunks']:,} chunks"
        if pending and embedder_state == "ok":
            text += f", {pending:,} waiting for vectors"
        elif embedder_state != "ok":
            text += f", keyword search only (model {embedder_state})"
    if offline:
        text += f"; offline: {', '.join(offline)}"
    return text


def index_once(
    cfg: Config,
    *,
    rebuild: bool,
    progress: Callable[[str, int, int], None] | None = None,
    confirm: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """`sidecar index` with no daemon running: this process is the one writer until it is done."""
    make_private(cfg)
    lock = IndexLock(cfg.index_dir)
    lock.acquire()
    stores = open_stores(cfg)
    try:
        slot = EmbedderSlot()
        load_embedder(cfg, slot)
        indexer = Indexer(cfg, stores, slot)
        indexer.finish_interrupted()
        if slot.model is not None:
            attach(cfg, indexer, slot.model)
        if rebuild:
            indexer.clear()
        report = (lambda a: progress(a.phase, a.done, a.total)) if progress else None
        summary = indexer.sweep(progress=report, confirm_deletions=confirm)
        total = stores.manifest.chunk_count()
        while indexer.embed_pending() > 0:
            if progress:
                progress("embedding", total - stores.manifest.pending_count(), total)
        counts = indexer.counts()
        return {
            **summary,
            "files": counts["files"],
            "chunks": counts["chunks"],
            "pending_vectors": stores.manifest.pending_count(),
        }
    finally:
        stores.bm25.close()
        stores.manifest.close()
        lock.release()
