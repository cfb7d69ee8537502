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

import logging
import threading
import time
from pathlib import Path

from sidecar.contracts.errors import PassingFaultError, StoreError, StoreNewerError
from sidecar.index.beside import UPGRADE_AREA, lose, refill_beside
from sidecar.index.bm25fill import fill_bm25
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25 import Bm25Index, open_bm25
from sidecar.stores.bm25_folder import copy_room, folder_size, free_space
from sidecar.stores.bm25_side import (
    remove_index,
    settle,
)
from sidecar.stores.lifecycle import move_aside
from sidecar.stores.versions import BM25_LAYOUT

log = logging.getLogger(__name__)

UPGRADE_FAILED = "the keyword index could not be rebuilt for this version"


def upgrade_bm25(stores: Stores, stop: threading.Event | None = None) -> bool:
    """The keyword index refilled in this version's layout beside the old one, then swapped in
    (``beside.refill_beside``); True once it is. Nothing is done for an index of this layout, or
    one open read-only."""
    old = stores.bm25
    if old.layout == BM25_LAYOUT or old.read_only or old.unavailable is not None:
        return False  # a lost index is opened again first (``reopen_bm25``), upgraded at a start
    index_dir = old.path.parent
    size, free = folder_size(old.path), free_space(index_dir)
    if free is not None and free < copy_room(size):
        return _upgrade_in_place(stores, old, size, free, stop)
    started = time.monotonic()
    log.info("bm25_upgrade_started from_layout=%d to_layout=%d", old.layout, BM25_LAYOUT)
    stores.upgrading = True
    try:
        swapped = refill_beside(stores, stop)  # waits for a compaction's refill beside, if one runs
    except (StoreError, OSError) as exc:
        # A full disk, most likely: the old index answers on; the next start tries again.
        if stores.bm25.unavailable is None:  # else said by ``lose``: no index answers
            log.error("bm25_upgrade_failed error=%s (the old index answers; retried at the next start)", exc)
            _report_old_answers(stores, exc)
        else:
            log.error("bm25_upgrade_failed error=%s (no index answers until it is opened again)", exc)
        return False
    finally:
        stores.upgrading = False
    if swapped is None:
        if stop is not None and stop.is_set():
            log.info("bm25_upgrade_stopped (the next start refills)")
        return False
    log.info(
        "index_rebuilt store=bm25 reason=layout %d to %d chunks=%d written_meanwhile=%s seconds=%.2f",
        old.layout,
        BM25_LAYOUT,
        stores.bm25.num_docs(),
        "all" if swapped.everything else swapped.written_meanwhile,
        time.monotonic() - started,
    )
    stores.problems.clear(UPGRADE_AREA)
    return True


def _upgrade_in_place(
    stores: Stores, old: Bm25Index, size: int, free: int, stop: threading.Event | None
) -> bool:
    """The old index removed and the new one filled in its place, the write lock held (as before
    the refill beside): on a disk without room for a second copy the refill beside failed at
    every start (the disk full for a moment each time) and the upgrade never ended. The keyword
    arm answers nothing and writes wait until the refill ends."""
    beside = copy_room(size)
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
            total = stores.manifest.indexed_chunk_count()
            stores.upgrade_in_place = (0, total)
            remove_index(path)
            stores.bm25 = Bm25Index(path)
            old.retire(stores.bm25)
            fill_bm25(stores.bm25, stores.manifest, stop, lambda done: _filled(stores, done, total))
    except (StoreError, OSError) as exc:
        had = free + size  # the old index's room freed for the new one: not enough
        log.error(
            "bm25_upgrade_failed in_place error=%s free_mb=%.1f needed_mb=%.1f", exc, had / 1e6, beside / 1e6
        )
        if stores.bm25 is old:  # removed, the new one not made: an empty one if it can be
            try:
                stores.bm25 = Bm25Index(old.path)
            except (StoreError, OSError) as again:
                lose(stores, old, again)
                return False
            old.retire(stores.bm25)
        stores.problems.report(
            UPGRADE_AREA,
            f"{UPGRADE_FAILED} ({exc}); about {beside / 1e6:.0f} MB free are needed on the index's "
            f"disk, {had / 1e6:.0f} MB were; keyword search finds nothing until it is rebuilt, which "
            "is tried again by itself every few seconds",
        )
        return False
    finally:
        stores.upgrading = False
        stores.upgrade_in_place = None
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
    stores.problems.clear(UPGRADE_AREA)
    return True


def _filled(stores: Stores, done: int, total: int) -> None:
    stores.upgrade_in_place = (done, total)


def _report_old_answers(stores: Stores, exc: BaseException) -> None:
    """The upgrade failed and the old index answers: said, with when it is tried again."""
    stores.problems.report(
        UPGRADE_AREA,
        f"{UPGRADE_FAILED} ({exc}); searches answer from the old index (words joined by "
        "underscores at their edges, as in _emphasis_, are not found); tried again at the next start",
    )


def reopen_bm25(stores: Stores) -> bool:
    """A keyword index marked lost (``lose``) opened again, as ``stores.bm25``: the old one
    where the undone swap put it back (a swap undone half-way is finished by ``settle``), or, in
    place, a new one refilled from the manifest. True when the stores hold an open index (also
    when none was lost); StoreError or OSError while it still cannot be opened (too many open
    files: the caller tries again later). A search holding the lost object reads the new one."""
    with stores.write_lock:
        lost = stores.bm25
        if lost.unavailable is None:
            return True
        index_dir = lost.path.parent
        # Its folders whose close raised as it was lost let go of their writers' locks first:
        # held, every open here took the index for another daemon's.
        try:
            lost.close()
        except Exception as exc:  # a writer that fails to end is dropped all the same
            log.warning("bm25_lost_close_failed error=%s", exc)
        settle(index_dir)
        fresh = _open_or_replace(index_dir / "bm25")
        try:
            manifest = stores.manifest
            if (fresh.num_docs(), fresh.num_pages()) != (
                manifest.indexed_chunk_count(),
                manifest.indexed_page_count(),
            ):  # in place: a new, empty index; refilled before it serves
                fill_bm25(fresh, manifest)
        except BaseException:
            fresh.close()
            raise
        stores.bm25 = fresh
        lost.retire(fresh)
    log.info("bm25_reopened path=%s layout=%d chunks=%d", fresh.path, fresh.layout, fresh.num_docs())
    if fresh.layout == BM25_LAYOUT:
        stores.problems.clear(UPGRADE_AREA)
    else:  # the swap's old index: the upgrade is tried again at the next start
        _report_old_answers(stores, StoreError(f"the old index was opened again after: {lost.unavailable}"))
    stores.problems.clear("keyword_search")  # searches that failed meanwhile: it answers again
    return True


def _open_or_replace(path: Path) -> Bm25Index:
    """The keyword index in ``path`` opened; one whose files are damaged moved aside and made
    anew (refilled from the manifest by the caller), as a start does: a refill in place cut
    half-way left files the open refused at every try. A fault that passes (no file handles,
    a full disk), another daemon's or a newer version's index: raised, nothing moved."""
    try:
        return open_bm25(path)
    except (PassingFaultError, StoreNewerError):
        raise
    except StoreError as exc:
        moved = move_aside(path)
        log.error("index_rebuilt store=bm25 reason=%s moved_to=%s", exc, moved)
        return open_bm25(path)
