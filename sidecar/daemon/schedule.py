"""Scheduled work (APScheduler, in its own thread): full sweeps, the per-root tick, upkeep.

The tick (about once a second; a few compares) asks the supervisor which roots are due (a retry
of an offline root, a poll of a network share) and runs the repair policy. Vector compaction, the
model retry, giving freed memory back and the systemd status run on their own intervals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from sidecar.config import Config
from sidecar.contracts.errors import StoreError
from sidecar.daemon.indexing import IndexLoop
from sidecar.daemon.repairs import RepairPolicy
from sidecar.index.repair import compact_bm25
from sidecar.index.vectoring import Vectoring
from sidecar.runtime import heap
from sidecar.vault.supervisor import Supervisor

log = logging.getLogger(__name__)


def build_scheduler(
    cfg: Config,
    loop: IndexLoop,
    supervisor: Supervisor,
    policy: RepairPolicy,
    *,
    vectors: Vectoring,
    retry_embedder: Callable[[], None],
    notify: Callable[[], None] | None,
    daily: Callable[[], None] | None = None,
) -> BackgroundScheduler:
    """The scheduler with every job added, not started. ``notify``: None without systemd."""
    scheduler = BackgroundScheduler(daemon=True, job_defaults={"coalesce": True, "max_instances": 1})
    scheduler.add_job(loop.request_sweep, "interval", minutes=cfg.index.rescan_minutes, id="sweep")

    def tick() -> None:
        loop.sweep_roots(supervisor.due())
        policy.tick()

    every = min(1.0, cfg.watch.poll_seconds, cfg.watch.retry_base_seconds)  # due() is a few compares
    scheduler.add_job(tick, "interval", seconds=every, id="tick")
    scheduler.add_job(
        lambda: optimize(vectors), "interval", minutes=cfg.index.optimize_minutes, id="optimize"
    )
    scheduler.add_job(retry_embedder, "interval", minutes=cfg.embedder.retry_minutes, id="model-retry")
    # Native libraries free into malloc's arenas, which keep the pages: hand them back now and
    # then (a few milliseconds; 50-60 MB after loading the model, BENCHMARKS.md).
    scheduler.add_job(heap.trim, "interval", seconds=60, id="trim")
    if daily is not None:  # housekeeping: old texts in the inboxes' .trash
        scheduler.add_job(daily, "interval", hours=24, id="daily")
    if notify is not None:
        seconds = min(5.0, cfg.watchdog_usec / 2e6) if cfg.watchdog_usec else 5.0
        scheduler.add_job(notify, "interval", seconds=seconds, id="notify")
    return scheduler


def optimize(vectors: Vectoring) -> None:
    """Scheduled compaction of the vector tables (also done after every N writes), and of the
    keyword index once deleted documents outnumber its live ones."""
    try:
        vectors.optimize()
    except StoreError as exc:
        log.error("optimize_failed error=%s", exc)
    try:
        compact_bm25(vectors.stores)
    except StoreError as exc:
        log.error("bm25_compact_failed error=%s", exc)
