"""A keyword index refilled beside the one that answers (an upgrade to a new layout), and its swap.

The new index is filled in ``bm25.next``; the swap renames ``bm25`` to ``bm25.previous``, then
``bm25.next`` to ``bm25``, then removes ``bm25.previous``. The first rename is made only once the
new index holds everything, so ``settle`` at the next start finishes a swap a kill cut short
(``bm25`` missing beside ``bm25.previous``: the new one goes in) or undoes a refill cut short
(``bm25`` there: the half-made ``bm25.next`` is removed): either the old index or the new one,
never a mix. An index removed (the swap undone, a refill in place) is first renamed to
``bm25.undone`` (``bm25.undone-<ns>`` beside one that would not go), which nothing promotes. A
newer version's swap cut short is undone by this one (a downgrade): it reads the old index, not
the new one (finishing it refused the start).
Imports only the standard library and ``stores.versions``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from sidecar.stores.versions import BM25_LAYOUT, bm25_layout

log = logging.getLogger(__name__)

NEXT = "bm25.next"
PREVIOUS = "bm25.previous"
# An index being removed (the swap's new one undone, the old one refilled in place): renamed here
# first, in one step, so that a removal cut short leaves nothing ``settle`` promotes or a start
# opens as the index; ``settle`` removes it.
UNDONE = "bm25.undone"
# The file in a side folder naming the refill that made it (``marked_side``).
MARK = "refill.mark"


def settle(index_dir: Path) -> None:
    """A swap or refill cut short (a kill, a crash, a full disk) put right, before the keyword
    index is opened: a swap is finished, a half-made side folder removed."""
    current, side, previous = index_dir / "bm25", index_dir / NEXT, index_dir / PREVIOUS
    if not current.exists() and previous.is_dir():
        if side.is_dir() and not _newer_than_read(side, previous):
            side.rename(current)  # cut between the two renames: the new index is whole
            log.info("bm25_upgrade_swap_finished path=%s", current)
        else:
            # No new index beside it, or a newer version's (a downgrade after a swap it cut
            # short): finished, the index this version reads was removed and the start refused.
            previous.rename(current)
            log.warning("bm25_upgrade_swap_undone path=%s (no new index beside it to read)", current)
        _sync(index_dir)
    for leftover in (side, previous, *_undone(index_dir)):
        if leftover.exists():
            _remove(leftover)
            if leftover.exists():  # left for the next start; nothing opens or promotes it
                log.warning("bm25_upgrade_leftover_not_removed path=%s", leftover)
            else:
                log.info("bm25_upgrade_leftover_removed path=%s", leftover)


def _undone(index_dir: Path) -> list[Path]:
    """The indexes being removed (``UNDONE``, and those renamed beside one that would not go)."""
    return sorted(index_dir.glob(f"{UNDONE}*"))


def _remove(path: Path) -> None:
    """A folder removed as far as it can be (also a file under its name)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _newer_than_read(side: Path, previous: Path) -> bool:
    """Whether the new index beside is of a layout newer than this version reads while the old
    one is not: the swap of a newer version, cut short before a downgrade."""
    new, old = bm25_layout(side), bm25_layout(previous)
    return new is not None and new > BM25_LAYOUT and old is not None and old <= BM25_LAYOUT


def side_folder(index_dir: Path) -> Path:
    """The empty side folder a new keyword index is filled in (a leftover removed first)."""
    side = index_dir / NEXT
    if side.exists():
        shutil.rmtree(side)
    return side


def marked_side(index_dir: Path) -> tuple[Path, str]:
    """The empty side folder made for one refill, and the mark it carries (``MARK``): a refill
    given up removes the folder only while it still carries its mark (``discard``)."""
    side = side_folder(index_dir)
    mark = uuid.uuid4().hex
    side.mkdir()
    (side / MARK).write_text(mark, encoding="utf-8")
    return side, mark


def carries(side: Path, mark: str) -> bool:
    """Whether ``side`` is still the folder made with ``mark`` (not removed, nor made again)."""
    try:
        return (side / MARK).read_text(encoding="utf-8") == mark
    except OSError:
        return False


def unmark(side: Path) -> None:
    """The mark removed from a side folder about to be swapped in (the index keeps no trace)."""
    with contextlib.suppress(FileNotFoundError):
        (side / MARK).unlink()


def discard(index_dir: Path, mark: str | None = None) -> bool:
    """A refill given up (a stop, a full disk): its side folder removed; with ``mark``, only
    while the folder is still the one made with it (False when not). A step left running at a
    stop ends seconds later: by then the folder may be another refill's (the home opened again
    in the same process, whose start removed it and whose refill made it anew), and removing it
    by name swapped an empty index in. Renamed away first, so nothing is removed by name."""
    side = index_dir / NEXT
    if mark is not None and not carries(side, mark):
        return False
    try:
        doomed = _renamed_away(side)
    except FileNotFoundError:
        return True
    except OSError:  # not renamed: removed where it is
        doomed = side
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def swap_out(index_dir: Path) -> Path:
    """The first rename of the swap: the old index to ``bm25.previous`` (the new one is whole)."""
    previous = index_dir / PREVIOUS
    (index_dir / "bm25").rename(previous)
    return previous


def swap_in(index_dir: Path) -> Path:
    """The second rename: the new index to ``bm25`` (the old one is removed by ``drop_previous``
    once nothing reads it)."""
    current = index_dir / "bm25"
    (index_dir / NEXT).rename(current)
    _sync(index_dir)
    return current


def swap_undone(index_dir: Path) -> None:
    """The swap taken back (the new index would not open): the new one removed (a refill makes
    it again), the old one back to ``bm25``."""
    current = index_dir / "bm25"
    # Renamed away before anything is removed: removed first, then renamed to ``bm25.next``, a
    # stop between left a part of it that ``settle`` promoted, removing the old index.
    doomed = _renamed_away(current)
    (index_dir / PREVIOUS).rename(current)
    _sync(index_dir)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_index(path: Path) -> None:
    """The keyword index in ``path`` removed (a refill in place makes it anew): renamed away in
    one step first, so that a removal that fails part-way (too many open files) leaves no
    half-removed index where the next open looks (it refused it for ever)."""
    shutil.rmtree(_renamed_away(path), ignore_errors=True)


def _renamed_away(path: Path) -> Path:
    """``path`` renamed to ``bm25.undone`` beside it (a leftover of one removed first). A
    leftover that cannot be removed (a file the share refuses to delete) is left to ``settle``
    and the index goes to a name of its own beside it: raised, it failed the swap's undo (the
    index was lost until a restart) and every refill in place."""
    doomed = path.parent / UNDONE
    if os.path.lexists(doomed):
        _remove(doomed)
    if os.path.lexists(doomed):
        log.warning("bm25_upgrade_leftover_not_removed path=%s", doomed)
        doomed = path.parent / f"{UNDONE}-{time.time_ns()}"
    path.rename(doomed)
    _sync(path.parent)
    return doomed


def drop_previous(index_dir: Path) -> None:
    """The old index removed after a swap (searches under way keep the files they have open)."""
    shutil.rmtree(index_dir / PREVIOUS, ignore_errors=True)


def _sync(folder: Path) -> None:
    """The renames in ``folder`` made durable (a power cut after the swap keeps it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
