"""Opening the stores, and moving a broken one aside so that a fresh one is built in its place.

The manifest and BM25 are opened at start; a store in an older layout is replaced (derived data),
one that cannot be opened is renamed ``<name>.broken-<time>`` (kept for inspection, never
deleted) and started fresh. Without the manifest the other stores cannot be trusted, so they are
moved aside with it. What was moved is noted on ``problems`` for health to show.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sidecar.config import Config
from sidecar.contracts.errors import StoreError, StoreOutdatedError
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.manifest import Manifest
from sidecar.stores.vectors import VectorStore

log = logging.getLogger(__name__)


class Notes(Protocol):
    """Where a store that was moved aside is noted (health's problems)."""

    def note(self, area: str, what: str) -> None: ...


def open_stores(cfg: Config, problems: Notes) -> tuple[Manifest, Bm25Index]:
    """Open manifest and BM25; a store that cannot be opened is moved aside and started fresh."""
    index_dir = cfg.index_dir
    index_dir.mkdir(parents=True, exist_ok=True)
    manifest = _open_or_reset(index_dir / "manifest.sqlite", Manifest, cfg, problems)
    bm25 = _open_or_reset(index_dir / "bm25", Bm25Index, cfg, problems)
    return manifest, bm25


def _open_or_reset(path: Path, opener: Callable[[Path], Any], cfg: Config, problems: Notes) -> Any:
    try:
        return opener(path)
    except StoreOutdatedError as exc:
        # Derived data in an older layout (e.g. the BM25 fields of 0.2): replaced, not kept.
        log.info("index_upgraded store=%s reason=%s", path.name, exc)
        shutil.rmtree(path)
        return opener(path)
    except StoreError as exc:
        aside = move_aside(path)
        log.error("index_rebuilt store=%s reason=%s moved_to=%s", path.name, exc, aside)
        problems.note("stores", f"{path.name} could not be opened ({exc}); moved to {aside.name} and rebuilt")
        if path.name == "manifest.sqlite":
            # Without the manifest the other stores cannot be trusted: start them over too.
            for other in (cfg.index_dir / "bm25", cfg.index_dir / "vectors"):
                if other.exists():
                    move_aside(other)
        return opener(path)


def move_aside(path: Path) -> Path:
    """Rename a broken store to ``<name>.broken-<time>`` (kept for inspection, never deleted)."""
    target = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


def open_vectors(
    cfg: Config, model_id: str, dim: int, pooling: str, problems: Notes | None = None
) -> VectorStore:
    """The vector table of this model (created if new); a folder that cannot be opened is moved aside."""
    path = cfg.index_dir / "vectors"
    opts: dict[str, Any] = {
        "optimize_every": cfg.index.optimize_every_writes,
        "ann_threshold": cfg.search.ann_threshold,
        "nprobes": cfg.search.ann_probes,
        "ann_kind": cfg.search.ann_index,
    }
    try:
        return VectorStore(path, model_id, dim, pooling, **opts)
    except StoreError as exc:
        discard_vectors(path, f"could not be opened ({exc})", problems)
        return VectorStore(path, model_id, dim, pooling, **opts)


def discard_vectors(path: Path, why: str, problems: Notes | None) -> None:
    """Move a broken vector folder aside; the chunks are embedded again into a new table."""
    aside = move_aside(path)
    log.error("index_rebuilt store=vectors reason=%s moved_to=%s", why, aside)
    if problems is not None:
        problems.note("stores", f"vectors {why}; moved to {aside.name}, re-embedding")
