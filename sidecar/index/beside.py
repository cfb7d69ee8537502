"""A keyword index refilled from the manifest beside the one that answers, then swapped in: the
upgrade to a new layout (``index.upgrade``) and the compaction of a large vault's index
(``repair.compact_bm25``) share it.

The new index is filled in ``bm25.next`` (``stores.bm25_side``) with no lock held: searches read
the old index, writes go to it as ever (the write lock is taken for moments) and their notes are
noted (``Bm25Index.changes_since``). At the swap, under the write lock, each of those is written
into the new index as the manifest holds it then, the new index committed and renamed in: the
lock is held for what was written meanwhile, not for the whole fill. A stop or a failure leaves
the old index answering and the side folder removed; a kill at any point leaves the old index
or the new one whole and the side folder to the next start (``bm25_side.settle`` finishes the
swap or removes it). It needs the disk's room for a second copy (``bm25_folder.copy_room``):
the callers judge it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sidecar.contracts.errors import StoreError
from sidecar.index.bm25fill import catch_up, fill_bm25
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25 import Bm25Index, open_bm25, put_back_times
from sidecar.stores.bm25_side import discard, drop_previous, side_folder, swap_in, swap_out, swap_undone

log = logging.getLogger(__name__)

# The problem area of a keyword index that could not be upgraded or opened (``index.upgrade``).
UPGRADE_AREA = "keyword_index"


@dataclass(frozen=True)
class Swapped:
    """A refill beside swapped in: the notes written meanwhile and written again at the swap
    (``everything``: the old index was emptied meanwhile, a rebuild, and every note was)."""

    written_meanwhile: int
    everything: bool
    lock_seconds: float  # the write lock held for the swap (the last catch-up, commit, renames)


# Told where a refill beside is: its phase ("filling", "catching up", "swapping") and the
# chunks written of the chunks in all (of the fill; the notes of a catch-up).
Progress = Callable[[str, int, int], None]


def refill_beside(
    stores: Stores,
    stop: threading.Event | None = None,
    *,
    wait: bool = True,
    progress: Progress | None = None,
) -> Swapped | None:
    """``stores.bm25`` refilled from the manifest in a side folder in this version's layout and
    swapped in (the old index answering until the swap); None when a stop ended it, when the
    index was replaced meanwhile (a repair), or, without ``wait``, when another refill beside
    runs (one at a time: they share the side folder). A stop is looked at before each step
    up to the renames (the fill's commit, the catch-up, its commit, the reopen, the swap's
    catch-up and commits): until the renames begin the old index is whole and the side folder
    is dropped, so a stop waits at most for the one step under way, not for the rest of the
    refill. ``progress`` is told each phase. Raises StoreError or OSError after a
    failure (a full disk): the old index answers on, or, when none could be opened after the
    swap, the stores hold it marked lost (``lose``)."""
    beside = stores.beside_lock
    if not beside.acquire(blocking=wait):
        return None
    try:
        return _refill(stores, stop, progress or _untold)
    finally:
        beside.release()


def _untold(phase: str, done: int, total: int) -> None:
    pass


class _StoppedError(Exception):
    """A stop asked before the renames: the refill is given up (the side folder dropped)."""


def _looked_at(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _StoppedError


def _refill(stores: Stores, stop: threading.Event | None, progress: Progress) -> Swapped | None:
    old = stores.bm25
    index_dir = old.path.parent
    new: Bm25Index | None = None
    try:
        side = side_folder(index_dir)
        with stores.write_lock:  # a moment: every write from now on is noted
            old.changes_since()
        new = Bm25Index(side)
        total = stores.manifest.indexed_chunk_count()
        progress("filling", 0, total)
        fill_bm25(  # the manifest read in one query, no lock held; no commit begun after a stop
            new, stores.manifest, stop, lambda done: progress("filling", done, total)
        )
        _looked_at(stop)
        new = _caught_up_unlocked(stores, old, new, side, stop=stop, progress=progress)
        _looked_at(stop)
        with stores.write_lock:
            if stores.bm25 is not old:  # replaced meanwhile (a repair): this refill is stale
                return None
            # Each step below waits on the disk (seconds on a loaded machine, a commit tens of
            # them): a stop asked while one ran ends the refill before the next, the side folder
            # dropped, as long as the renames have not begun.
            _looked_at(stop)
            keys, everything = old.changes()
            progress("swapping", 0, len(keys))
            held = steps = time.monotonic()
            catch_up(new, stores.manifest, keys, everything=everything, stop=stop)
            _looked_at(stop)
            new.commit()
            _looked_at(stop)
            # The agents' own indexes as the old index had them: one removed as idle stays
            # removed, the others keep their time of last use (taken for used at each compaction,
            # an idle agent's index was never removed).
            kept = new.inboxes_as_in(old.path)
            taken = [time.monotonic() - steps]
            new.close()
            _looked_at(stop)  # closed and whole, but not swapped in: dropped as at any stop
            new = None
            put_back_times(kept)
            taken.append(time.monotonic() - steps - sum(taken))
            # From here on the swap is not ended by a stop: the old index is closed, then the
            # folders renamed (a kill among them is finished by the next start's ``settle``).
            old.close()  # its searchers still answer searches under way
            taken.append(time.monotonic() - steps - sum(taken))
            old.move(lambda: swap_out(index_dir))
            swap_in(index_dir)
            _open_swapped_in(stores, old, index_dir)
            old.retire(stores.bm25)
            held = time.monotonic() - held
            log.debug(  # where the swap's hold of the write lock went
                "bm25_swap_steps catch_up=%.2f close_new=%.2f close_old=%.2f open=%.2f notes=%d",
                *taken,
                held - sum(taken),
                len(keys),
            )
        drop_previous(index_dir)
    except _StoppedError:
        return None  # ``new`` (closed or not: a second close does nothing) closed and dropped below
    finally:
        if stores.bm25 is old and old.unavailable is None:  # not swapped in: nothing more noted
            old.changes_since(False)
        if new is not None:
            new.close()
            discard(index_dir)
    return Swapped(len(keys), everything, held)


def _caught_up_unlocked(
    stores: Stores,
    old: Bm25Index,
    new: Bm25Index,
    side: Path,
    *,
    stop: threading.Event | None,
    progress: Progress,
) -> Bm25Index:
    """The notes written during the fill, written into ``new`` with no lock held, committed, and
    ``new`` closed and opened again (its background merges of the fill waited for here): the
    swap's hold of the write lock is then what was written during this pass alone. Each key is
    taken, and the noting begun anew, under the lock for a moment, so no write is half done; one
    written again after that is noted again and caught up at the swap. Raises _StoppedError at a
    stop asked before one of its steps (``new`` left to the caller to close and drop)."""
    with stores.write_lock:
        keys, everything = old.changes()
        if not everything:  # emptied meanwhile (a rebuild): all of it caught up at the swap
            old.changes_since()
    progress("catching up", 0, len(keys))
    if not everything:
        catch_up(new, stores.manifest, keys, everything=False, stop=stop)
        _looked_at(stop)
        new.commit()
        _looked_at(stop)
    new.close()
    _looked_at(stop)
    return Bm25Index(side)


def _open_swapped_in(stores: Stores, old: Bm25Index, index_dir: Path) -> None:
    """The new index opened where the swap put it, as ``stores.bm25``. When it cannot be (too
    many open files, a full disk), the swap is undone and the old index opened again before the
    error goes on: kept closed and renamed, it failed every write ("IndexWriter was consumed").
    The old object points at ``bm25`` again (left at ``bm25.previous``, a search holding it made
    an empty inbox there); when the old index will not open either, it is marked lost
    (``lose``) and opened again in the background (``upgrade.reopen_bm25``)."""
    try:
        stores.bm25 = Bm25Index(index_dir / "bm25")
    except StoreError:
        current = index_dir / "bm25"
        try:
            swap_undone(index_dir)
            old.move(lambda: current)
            stores.bm25 = open_bm25(current)
        except (StoreError, OSError) as again:
            old.move(lambda: current)  # where ``settle`` puts it back, if the undo was cut short
            lose(stores, old, again)
            raise
        old.retire(stores.bm25)  # a search holding the old object reads the one opened again
        raise


def lose(stores: Stores, index: Bm25Index, exc: BaseException) -> None:
    """No keyword index could be opened (the old one, the swap undone, or the new one in place):
    ``index`` (closed) stays in the stores marked lost, so that searches and writes fail with a
    StoreError saying so (a sweep's batch fails and is redone; a memory write is saved and said
    not searchable yet, and indexed once it opens), and it is said as a problem until
    ``reopen_bm25`` opens one. All of it also when the close in ``lost`` raises (it is marked
    lost all the same): the stores kept the index they held, which nothing reopened, said nowhere."""
    try:
        index.lost(str(exc))
    finally:
        stores.bm25 = index
        log.error("bm25_unavailable error=%s (opened again in the background)", exc)
        stores.problems.report(
            UPGRADE_AREA,
            f"the keyword index could not be opened ({exc}); keyword search finds nothing and notes "
            "and memory cannot be indexed until it is (they are kept and indexed then); it is tried "
            "again by itself every few seconds",
        )
