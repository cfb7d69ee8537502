"""When a note counts as last changed (pure): its file's mtime, unless that lies more than a day
in the future (a wrong clock), and the local day of such a time; for every listing by date, date
window and day shown (search) and the notes ``list`` shows (memory). Imports nothing of the
project.
"""

from __future__ import annotations

import datetime as dt
import time

# How far past now a file's mtime may lie and still be its last change. A NAS or a VM whose
# clock runs minutes ahead, or a FAT/exFAT file (a camera, a USB stick) whose local time was
# read in a zone up to 14 hours east, is still trusted; more than a day ahead is a wrong clock
# (a sync tool, `touch -d 2031-01-01`), and such a note headed every newest-first listing and
# every open-ended window (`since:yesterday`) for years.
FUTURE_SLACK_S = 86_400.0


def _sane(ns: int, now: float) -> bool:
    """A file or index time (ns) that may be a note's last change: known (not 0) and at most
    ``FUTURE_SLACK_S`` past ``now``."""
    return ns != 0 and ns <= (now + FUTURE_SLACK_S) * 1e9


def last_change(
    mtime_ns: int, ctime_ns: int, indexed_at: float, now: float | None = None
) -> tuple[int, bool]:
    """When a note counts as last changed (ns), for every listing by date, date window and day
    shown, and whether its mtime lies in the future (more than ``FUTURE_SLACK_S`` past ``now``).

    Trusted in this order: the mtime; else the file's status change time (a `touch -d` or a sync
    tool that sets the mtime cannot set it, and a rebuild of the index reads it again from the
    file); else when sidecar indexed this version (reset by every re-index, so only after the
    ctime); else 0 (never now: such a note was "today" on every query and headed every listing):
    it sorts last and falls in no date window (``note_passes``). A ctime or index time ahead too is a
    clock that was ahead when the file was written and indexed, and was corrected since."""
    now = time.time() if now is None else now
    if mtime_ns <= (now + FUTURE_SLACK_S) * 1e9:
        return mtime_ns, False
    if _sane(ctime_ns, now):
        return ctime_ns, True
    indexed_ns = int(indexed_at * 1e9)
    return (indexed_ns if _sane(indexed_ns, now) else 0), True


def local_day(mtime_ns: int) -> str:
    """The local day of a time in ns (a note's last change, ``last_change``: the day of a note
    that names none)."""
    return dt.datetime.fromtimestamp(mtime_ns / 1e9).date().isoformat()
