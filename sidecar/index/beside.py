"""A keyword index refilled from the manifest beside the one that answers, then swapped in: the
upgrade to a new layout (``index.upgrade``) and the compaction of a large vault's index
(``repair.compact_bm25``) share it.

The new index is filled in ``bm25.next`` (``stores.bm25_side``) with no lock held: searches read
the old index, writes go to it as ever (the write lock is taken for moments) and their notes are
noted (``Bm25Index.changes_since``). At the swap, under the write lock, each of those is written
into the new index as the manifest holds it then, the new index committed and renamed in: the
lock is held for what was written meanwhile, not for the whole fill. A stop or a failure leaves
the old index answering and the side folder removed (after a stop, by the thread of the step that
was under way: the stop does not wait for it); a compaction also gives way to a rebuild; a
kill at any point leaves the old index or the new one whole and the side folder to the next
start (``bm25_side.settle`` finishes the swap or removes it). It needs the disk's room for a
second copy (``bm25_folder.copy_room``): the callers judge it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sidecar.contracts.errors import StoreError
from sidecar.index.bm25fill import catch_up, fill_bm25
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25 import Bm25Index, open_bm25
from sidecar.stores.bm25_rewrite import put_back_times
from sidecar.stores.bm25_side import (
    carries,
    discard,
    drop_previous,
    marked_side,
    swap_in,
    swap_out,
    swap_undone,
    unmark,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

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
# Told why a refill beside returned None: "busy" (another one holds the side folder), "stop",
# "rebuild" (the old index emptied meanwhile), "behind" (more notes written meanwhile than a swap
# writes), "count" (the new index disagreed with the manifest) or "replaced" (a repair replaced
# the old index meanwhile).
Ended = Callable[[str], None]


def refill_beside(
    stores: Stores,
    stop: threading.Event | None = None,
    *,
    wait: bool = True,
    progress: Progress | None = None,
    give_way: bool = False,
    ended: Ended | None = None,
) -> Swapped | None:
    """``stores.bm25`` refilled from the manifest in a side folder in this version's layout and
    swapped in (the old index answering until the swap); None when a stop ended it, when the
    index was replaced meanwhile (a repair), when it gave way (``give_way``: to a rebuild, or to
    more notes written meanwhile than a swap writes under the lock), or, without ``wait``, when
    another refill beside runs (one at a time: they share the side folder).

    A stop is not waited for: each step up to the renames that waits on the disk (the fill, a
    commit of the new index, its close that waits for its merges, its reopen, a catch-up) runs
    in a thread of its own while this one looks at the stop; a stop asked meanwhile ends the
    refill at once (a commit alone took 12.9 s on a loaded machine, against the stop's 10 s).
    Until the renames begin the old index is whole: the step left running ends in its thread,
    which then closes the new index and removes the side folder (a process that exits first
    leaves it to the next start's ``settle``), and only then lets another refill begin.
    ``progress`` is told each phase. Raises StoreError or OSError after a failure (a full disk):
    the old index answers on, or, when none could be opened after the swap, the stores hold it
    marked lost (``lose``). ``ended`` is told why, when it returns None (``Ended``)."""
    beside = stores.beside_lock
    if not beside.acquire(blocking=wait):
        if ended is not None:
            ended("busy")
        return None
    refill = _Refill(stores, stop, progress or _untold, give_way=give_way)
    try:
        swapped = refill.run()
    finally:
        refill.release(beside)
    if swapped is None and ended is not None:
        ended(refill.quit.why or "replaced")
    return swapped


def _untold(phase: str, done: int, total: int) -> None:
    pass


class _StoppedError(Exception):
    """A stop asked before the renames (or a reason to give way): the refill is given up (the
    side folder dropped)."""


class _LeftRunningError(_StoppedError):
    """A stop asked while a step ran in its own thread: given up without waiting for it."""

    def __init__(self, step: str, done: threading.Event, got: list[tuple[bool, Any]]) -> None:
        super().__init__()
        self.step, self.done, self.got = step, done, got


# How often a refill waiting for a step looks at the stop (the stop is a flag, not a wake-up).
_LOOK_SECONDS = 0.05
# A swap writes at most this many notes under the write lock: more were written meanwhile (a
# model switch cutting every note again, a large sweep) and the notes are caught up once more
# with no lock held first, up to ``_PASSES`` times; a compaction still behind then gives way
# (the next run tries again), an upgrade swaps all the same. A large vault's compaction waits
# while more notes than this wait to be cut again (``repair._recut_waiting``): those would be
# written meanwhile.
SWAP_NOTES = 500
_PASSES = 3
# Each refill's number, in its threads' names: a step left running by one and the next refill's
# steps are told apart in the log.
_NUMBERS = itertools.count(1)


class _Quit:
    """What ends a refill before its renames, read as a stop event (``is_set``): the stop, and
    for a compaction (``give_way``) a rebuild that emptied the old index meanwhile: its swap had
    refilled the whole index under the write lock (40 s and more at 60,000 documents)."""

    def __init__(self, stop: threading.Event | None, old: Bm25Index, give_way: bool) -> None:
        self.stop, self.old, self.give_way = stop, old, give_way
        self.why = ""

    def is_set(self) -> bool:
        if self.stop is not None and self.stop.is_set():
            self.why = "stop"
            return True
        if self.give_way and self.old.emptied_meanwhile():
            self.why = "rebuild"
            return True
        return False


class _Refill:
    """One refill beside: its steps, and who ends it when it is given up (this thread, or the
    thread of a step left running)."""

    def __init__(
        self, stores: Stores, stop: threading.Event | None, progress: Progress, *, give_way: bool
    ) -> None:
        self.stores, self.old = stores, stores.bm25
        self.index_dir = self.old.path.parent
        self.quit = _Quit(stop, self.old, give_way)
        self.given_up = threading.Event()  # no more progress told (health said it ran)
        self._progress = progress
        self._told = threading.Lock()
        self.new: Bm25Index | None = None
        self.left: _LeftRunningError | None = None  # a step left running at a stop
        self.mark: str | None = None  # what the side folder it made carries (``marked_side``)
        self.number = next(_NUMBERS)

    def progress(self, phase: str, done: int, total: int) -> None:
        # Under a lock with ``given_up``: a step left running told a phase after its caller
        # had cleared it, and health said a compaction ran that had ended.
        with self._told:
            if not self.given_up.is_set():
                self._progress(phase, done, total)

    def _looked_at(self) -> None:
        if self.quit.is_set():
            raise _StoppedError

    def _step(self, name: str, work: Callable[[], _T]) -> _T:
        """``work`` run in a thread of its own, waited for while no stop is asked; at a stop it is
        left running (_LeftRunningError) and ends in its thread."""
        got: list[tuple[bool, Any]] = []
        done = threading.Event()

        def run() -> None:
            try:
                got.append((True, work()))
            except BaseException as exc:  # handed to the waiting thread, raised there
                got.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name=f"bm25-refill-{name}-{self.number}", daemon=True).start()
        while not done.wait(_LOOK_SECONDS):
            if self.quit.is_set():
                raise _LeftRunningError(name, done, got)
        ok, result = got[0]
        if ok:
            return result  # type: ignore[no-any-return]
        raise result

    def run(self) -> Swapped | None:
        stores, old, index_dir = self.stores, self.old, self.index_dir
        try:
            side, self.mark = marked_side(index_dir)
            with stores.write_lock:  # a moment: every write from now on is noted
                old.changes_since()
            self.new = Bm25Index(side)
            new = self.new
            total = stores.manifest.indexed_chunk_count()
            self.progress("filling", 0, total)
            # The manifest read a page of notes at a time, no lock held; no commit begun after a stop.
            self._step(
                "fill",
                lambda: fill_bm25(
                    new, stores.manifest, self.quit, lambda done: self.progress("filling", done, total)
                ),
            )
            self._looked_at()
            self._caught_up_unlocked(side)
            self._looked_at()
            with stores.write_lock:
                if stores.bm25 is not old:  # replaced meanwhile (a repair): this refill is stale
                    return None
                self._looked_at()
                swapped = self._swap()
            drop_previous(index_dir)
            return swapped
        except _LeftRunningError as left:
            self.left = left
            self._said_given_up()
            return None
        except _StoppedError:
            self._said_given_up()
            return None
        finally:
            if stores.bm25 is old and old.unavailable is None:  # not swapped in: nothing more noted
                old.changes_since(False)

    def _said_given_up(self) -> None:
        with self._told:
            self.given_up.set()
        if self.quit.why == "rebuild":
            log.info("bm25_refill_gave_way reason=rebuild (the old index was emptied; the refill is dropped)")
        elif self.quit.why == "behind":
            log.info("bm25_refill_gave_way reason=notes written meanwhile (more than a swap writes)")

    def _swap(self) -> Swapped:
        """Under the write lock: the notes written since the last catch-up, the new index
        committed and closed, then (no longer ended by a stop) the old one closed and the folders
        renamed."""
        stores, old, index_dir = self.stores, self.old, self.index_dir
        new = self.new
        assert new is not None
        keys, everything = old.changes()
        self.progress("swapping", 0, len(keys))
        held = steps = time.monotonic()
        self._step(
            "catch-up", lambda: catch_up(new, stores.manifest, keys, everything=everything, stop=self.quit)
        )
        self._looked_at()
        self._step("commit", new.commit)
        self._looked_at()
        self._counted(new)
        # The agents' own indexes as the old index had them: one removed as idle stays
        # removed, the others keep their time of last use (taken for used at each compaction,
        # an idle agent's index was never removed).
        kept = new.inboxes_as_in(old.path)
        taken = [time.monotonic() - steps]
        self._step("close", new.close)
        self._looked_at()  # closed and whole, but not swapped in: dropped as at any stop
        self.new = None
        put_back_times(kept)
        unmark(index_dir / "bm25.next")
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
        return Swapped(len(keys), everything, held)

    def _caught_up_unlocked(self, side: Path) -> None:
        """The notes written during the fill, written into the new index with no lock held,
        committed, and the index closed and opened again (its background merges of the fill
        waited for here): the swap's hold of the write lock is then what was written during the
        last pass alone. Each key is taken, and the noting begun anew, under the lock for a
        moment, so no write is half done; one written again after that is noted again and
        caught up at the next pass or the swap. While more than ``SWAP_NOTES`` were noted
        again, another pass (``_PASSES`` in all); a compaction still behind gives way. Raises
        _StoppedError at a stop asked before one of its steps (the new index left to the
        caller to close and drop)."""
        stores, old = self.stores, self.old
        for done_passes in range(1, _PASSES + 1):
            with stores.write_lock:
                keys, everything = old.changes()
                if not everything:  # emptied meanwhile (a rebuild): all of it caught up at the swap
                    old.changes_since()
            self.progress("catching up", 0, len(keys))
            new = self.new
            assert new is not None
            if not everything:
                self._step(
                    "catch-up",
                    partial(catch_up, new, stores.manifest, keys, everything=False, stop=self.quit),
                )
                self._looked_at()
                self._step("commit", new.commit)
                self._looked_at()
            if done_passes == 1 or not everything:
                self._step("close", new.close)
                self._looked_at()
                self.new = self._step("reopen", partial(self._reopened, side))
                self._looked_at()
            if everything or old.noted_count() <= SWAP_NOTES:
                return
        if self.quit.give_way:
            self.quit.why = "behind"
            raise _StoppedError

    def _reopened(self, side: Path) -> Bm25Index:
        """The new index opened again after its close; a StoreError when its folder is no longer
        the one this refill made (removed meanwhile): opened as ever, an empty index was made in
        its place, caught up with the few notes written meanwhile and swapped in."""
        if self.mark is None or not carries(side, self.mark):
            log.error("bm25_refill_side_gone path=%s (removed meanwhile; the refill is given up)", side)
            raise StoreError(f"the keyword index refilled in {side} was removed meanwhile")
        return Bm25Index(side)

    def _counted(self, new: Bm25Index) -> None:
        """Under the write lock, the new index caught up and committed: it holds what the manifest
        says, else the swap is abandoned (logged) and the old index kept. A refill that lost part
        of its index (its folder removed under it, a document dropped) swapped in an index that
        found nothing, and said it had compacted."""
        manifest = self.stores.manifest
        want = (manifest.indexed_chunk_count(), manifest.indexed_page_count())
        have = (new.num_docs(), new.num_pages())
        if have != want:
            log.warning(
                "bm25_refill_count_mismatch chunks=%d expected=%d pages=%d expected_pages=%d "
                "(the swap is abandoned; the old index answers)",
                have[0],
                want[0],
                have[1],
                want[1],
            )
            self.quit.why = "count"
            raise _StoppedError

    def release(self, beside: threading.Lock) -> None:
        """The refill ended (swapped in, given up or failed): a new index not swapped in closed and
        its side folder removed, then ``beside`` released for the next refill. A step left
        running at a stop does it in its thread when it ends (closing waits for merges: a
        stopping daemon does not wait for them; its exit leaves the folder to ``settle``)."""
        left = self.left
        if left is None and not self.given_up.is_set():  # swapped in, or failed: said at once
            self._drop(beside)
            return

        def after() -> None:
            try:
                if left is not None:
                    left.done.wait()
                    ok, result = left.got[0] if left.got else (False, None)
                    if ok and isinstance(result, Bm25Index):  # the reopen's: closed with the rest
                        self.new = result
                    elif not ok:  # its error reached no caller: said here (a full disk, say)
                        log.warning(
                            "bm25_refill_step_failed step=%s error=%s (after a stop: the refill is given up)",
                            left.step,
                            result,
                        )
            finally:  # whatever raised above, the next refill is not kept out until a restart
                self._drop(beside)

        threading.Thread(target=after, name=f"bm25-refill-dropped-{self.number}", daemon=True).start()

    def _drop(self, beside: threading.Lock) -> None:
        try:
            if self.new is not None:
                try:
                    self.new.close()
                except (StoreError, OSError) as exc:  # its folder is removed all the same
                    log.debug("bm25_refill_close error=%s", exc)
                side = self.index_dir / "bm25.next"
                if discard(self.index_dir, self.mark):
                    log.debug("bm25_refill_dropped path=%s", side)
                else:  # made anew meanwhile by another refill (the home opened again): left to it
                    log.info("bm25_refill_side_not_ours path=%s (another refill's folder: left)", side)
        finally:
            beside.release()


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
