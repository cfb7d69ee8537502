"""The composition root: every part of the index is built here, once, and handed what it needs.

Problems first (every part reports there), then the stores (a broken one moved aside), the
vectors over them, the root supervisor (its mount memory lives in the manifest), the indexer,
and the store repair. The daemon, ``sidecar index`` and the test harness build the same parts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.config import Config
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.index.repair import Repair
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.model.embedder import EmbedderSlot
from sidecar.stores.lifecycle import open_stores
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.watcher import Watcher


@dataclass(frozen=True)
class Parts:
    """The built parts of the index, for the daemon to pass on."""

    problems: Problems
    stores: Stores
    vectors: Vectoring
    supervisor: Supervisor
    indexer: Indexer
    repair: Repair


def build(cfg: Config, slot: EmbedderSlot, beat: Callable[[], None] | None = None) -> Parts:
    """Open the stores and build the parts over them; ``beat``: the indexer thread's heartbeat."""
    problems = Problems()
    manifest, bm25 = open_stores(cfg, problems)
    stores = Stores(manifest, bm25, problems=problems)
    vectors = Vectoring(
        stores, cfg.index.keep_deleted_vectors_hours * 3600, cfg.index.keep_deleted_vectors_max
    )
    supervisor = Supervisor(cfg, meta=manifest, beat=beat)
    indexer = Indexer(cfg, stores, slot, vectors=vectors, supervisor=supervisor, problems=problems)
    repair = Repair(cfg, stores, vectors, slot, problems)
    return Parts(problems, stores, vectors, supervisor, indexer, repair)


def build_watcher(cfg: Config, on_change: Callable[[set[str]], None], stop: threading.Event) -> Watcher:
    """File events of the vault and the agents' inboxes, with their paths, to ``on_change``."""
    watch = [p for p in (cfg.vault.path, cfg.agents_dir) if p is not None and cfg.watch.events]
    return Watcher(watch, on_change, stop, cfg.watch.debounce_ms)
