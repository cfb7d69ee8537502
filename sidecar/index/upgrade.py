"""A keyword index of an older layout brought to this version's while it answers: refilled from
the manifest into a side folder (``stores.bm25_side``), the notes written meanwhile written into
it again, then swapped in.

Searches read the old index until the swap, with its own analyzers. Writes go to it as ever
(the write lock is taken for moments, not for the refill) and their notes are noted
(``Bm25Index.changes_since``): at the swap, under the write lock, each is written into the new
index as the manifest holds it then. A stop or a failure (a full disk) leaves the old index
answering and the side folder removed; the next start refills again. Filled in place, the new
index answered nothing for as long as the refill took (12-37 s for 10,643 chunks) and memory
writes waited for it, for every user at the upgrade. It still is, on a disk without room for a
second copy (the old index's size x1.5 and a writer's flush; ``bm25_upgrade_in_place``): the
old index removed first, the keyword arm answers nothing until the refill ends, but it ends
(beside, it failed at every start and filled the disk for a moment).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from sidecar.contracts.errors import StoreError
from sidecar.index.repair import bm25_doc, fill_bm25
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25 import Bm25Index, open_bm25
from sidecar.stores.bm25_folder import WRITER_HEAP
from sidecar.stores.bm25_side import discard, drop_previous, side_folder, swap_in, swap_out, swap_undone
from sidecar.stores.manifest import Manifest
from sidecar.stores.versions import BM25_LAYOUT

log = logging.getLogger(__name__)

UPGRADE_FAILED = "the keyword index could not be rebuilt for this version"
# A refill beside needs room for a second copy: the old index's size with a margin (a new
# index's segments before their merges), plus a writer's flush.
_BESIDE_MARGIN = 1.5


def upgrade_bm25(stores: Stores, stop: threading.Event | None = None) -> bool:
    """The keyword index refilled in this version's layout beside the old one, then swapped in;
    True once it is. Nothing is done for an index of this layout, or one open read-only."""
    old = stores.bm25
    if old.layout == BM25_LAYOUT or old.read_only:
        return False
    index_dir = old.path.parent
    size, free = folder_size(old.path), free_space(index_dir)
    if free is not None and free < size * _BESIDE_MARGIN + WRITER_HEAP:
        return _upgrade_in_place(stores, old, size, free, stop)
    started = time.monotonic()
    log.info("bm25_upgrade_started from_layout=%d to_layout=%d", old.layout, BM25_LAYOUT)
    stores.upgrading = True
    new: Bm25Index | None = None
    try:
        side = side_folder(index_dir)
        with stores.write_lock:  # a moment: every write from now on is noted
            old.changes_since()
        new = Bm25Index(side)
        fill_bm25(new, stores.manifest, stop)  # the manifest read in one query, no lock held
        if stop is not None and stop.is_set():
            log.info("bm25_upgrade_stopped (the next start refills)")
            return False
        with stores.write_lock:
            if stores.bm25 is not old:  # replaced meanwhile (a repair): this refill is stale
                return False
            keys, everything = old.changes()
            _catch_up(new, stores.manifest, keys, everything=everything)
            new.commit()
            new.close()
            new = None
            old.close()  # its searchers still answer searches under way
            old.move(lambda: swap_out(index_dir))
            swap_in(index_dir)
            _open_swapped_in(stores, index_dir)
            old.retire(stores.bm25)
        drop_previous(index_dir)
    except (StoreError, OSError) as exc:
        # A full disk, most likely: the old index answers on; the next start tries again.
        log.error("bm25_upgrade_failed error=%s (the old index answers; retried at the next start)", exc)
        stores.problems.report(
            "keyword_index",
            f"{UPGRADE_FAILED} ({exc}); searches answer from the old index (words joined by "
            "underscores at their edges, as in _emphasis_, are not found); tried again at the next start",
        )
        if stores.bm25 is old:
            old.changes_since(False)
        return False
    finally:
        stores.upgrading = False
        if new is not None:
            new.close()
            discard(index_dir)
    log.info(
        "index_rebuilt store=bm25 reason=layout %d to %d chunks=%d written_meanwhile=%s seconds=%.2f",
        old.layout,
        BM25_LAYOUT,
        stores.bm25.num_docs(),
        "all" if everything else len(keys),
        time.monotonic() - started,
    )
    stores.problems.clear("keyword_index")
    return True


def free_space(path: Path) -> int | None:
    """The bytes free on ``path``'s disk; None when it cannot be told."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def folder_size(path: Path) -> int:
    """The bytes of the files under ``path``."""
    size = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile (a merge)
                size += os.stat(os.path.join(folder, name)).st_size
    return size


def _upgrade_in_place(
    stores: Stores, old: Bm25Index, size: int, free: int, stop: threading.Event | None
) -> bool:
    """The old index removed and the new one filled in its place, the write lock held (as before
    the refill beside): on a disk without room for a second copy the refill beside failed at
    every start (the disk full for a moment each time) and the upgrade never ended. The keyword
    arm answers nothing and writes wait until the refill ends."""
    beside = int(size * _BESIDE_MARGIN) + WRITER_HEAP
    log.warning(
        "bm25_upgrade_in_place reason=no room beside free_mb=%.1f needed_mb=%.1f from_layout=%d to_layout=%d",
        free / 1e6,
        beside / 1e6,
        old.layout,
        BM25_LAYOUT,
    )
    started = time.monotonic()
    stores.upgrading = True
    try:
        with stores.write_lock:
            if stores.bm25 is not old:
                return False
            path = old.path
            old.close()  # its searchers still answer searches under way
            old.retire()  # nothing made again in the folder removed now
            shutil.rmtree(path)
            stores.bm25 = Bm25Index(path)
            old.retire(stores.bm25)
            fill_bm25(stores.bm25, stores.manifest, stop)
    except (StoreError, OSError) as exc:
        if stores.bm25 is old:  # removed, the new one not made: an empty one if it can be
            with contextlib.suppress(StoreError):
                stores.bm25 = Bm25Index(old.path)
        had = free + size  # the old index's room freed for the new one: not enough
        log.error(
            "bm25_upgrade_failed in_place error=%s free_mb=%.1f needed_mb=%.1f", exc, had / 1e6, beside / 1e6
        )
        stores.problems.report(
            "keyword_index",
            f"{UPGRADE_FAILED} ({exc}); about {beside / 1e6:.0f} MB free are needed on the index's "
            f"disk, {had / 1e6:.0f} MB were; searches find no words until it is rebuilt; tried "
            "again at the next start",
        )
        return False
    finally:
        stores.upgrading = False
    if stop is not None and stop.is_set():
        log.info("bm25_upgrade_stopped (the next start refills)")
        return False
    log.info(
        "index_rebuilt store=bm25 reason=layout %d to %d in place chunks=%d seconds=%.2f",
        old.layout,
        BM25_LAYOUT,
        stores.bm25.num_docs(),
        time.monotonic() - started,
    )
    stores.problems.clear("keyword_index")
    return True


def _open_swapped_in(stores: Stores, index_dir: Path) -> None:
    """The new index opened where the swap put it, as ``stores.bm25``. When it cannot be (too
    many open files, a full disk), the swap is undone and the old index opened again before the
    error goes on: kept closed and renamed, it failed every write ("IndexWriter was consumed")."""
    try:
        stores.bm25 = Bm25Index(index_dir / "bm25")
    except StoreError:
        swap_undone(index_dir)
        stores.bm25 = open_bm25(index_dir / "bm25")
        raise


def _catch_up(new: Bm25Index, manifest: Manifest, keys: set[str], *, everything: bool) -> None:
    """The notes written or deleted during the refill, into ``new`` as the manifest holds them
    now (the write lock held); every note when the old index was emptied meanwhile (a rebuild)."""
    if everything:
        fill_bm25(new, manifest)
        return
    for key in sorted(keys):
        docs = [bm25_doc(v) for v in manifest.indexed_chunks_of(key)]
        if docs:
            new.replace_note(key, docs)
        else:
            new.delete_key(key)
