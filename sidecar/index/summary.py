"""One INFO line a minute at most for the notes indexed from file events.

Each such sweep logged ``sweep_done`` at INFO: 1,800 lines an hour of normal typing, 32,000 for
a note written every 100 ms. They are DEBUG now and summed here into ``index_activity
changes=N notes=M seconds=S`` (notes written, distinct notes among them, seconds spent), logged once the
minute that began with the first of them is over. Full sweeps and sweeps that delete or skip
notes still log their own ``sweep_done`` at INFO.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

log = logging.getLogger(__name__)

SUMMARY_EVERY_S = 60.0


class ActivitySummary:
    """Counts quiet sweeps and logs their sum at most every ``SUMMARY_EVERY_S``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the first change of this window was counted
        self._changes = 0
        self._notes: set[str] = set()
        self._seconds = 0.0

    def add(self, changes: int, keys: Collection[str], seconds: float) -> None:
        """A sweep of file events that wrote ``changes`` notes (``keys``) in ``seconds``."""
        with self._lock:
            if self._since is None:
                self._since = self.clock()
            self._changes += changes
            self._notes.update(keys)
            self._seconds += seconds
        self.flush()

    def flush(self, final: bool = False) -> None:
        """Log the window's sum once its minute is over (``final``: now, at a stop)."""
        with self._lock:
            if self._since is None or (not final and self.clock() - self._since < SUMMARY_EVERY_S):
                return
            line = (self._changes, len(self._notes), self._seconds)
            self._since, self._changes, self._notes, self._seconds = None, 0, set(), 0.0
        log.info("index_activity changes=%d notes=%d seconds=%.2f", *line)
