"""Foreground first: requests someone waits on get the cores before write-side and background work.

The server counts the read requests in flight (``serving``). Work nobody is waiting on right now,
or that can wait a moment without harm (a memory write's embeddings, commits and vector adds, the
backfill's batches, compactions), calls ``yield_to`` at its checkpoints: it waits while any
request is in flight, but never longer than the bound it passes, so writes are slowed, never
starved. Thread priorities cannot do this: a nice value ranks a thread against every process of
the machine, not only against this daemon's own searches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Foreground:
    """A count of foreground requests in flight, and a bounded wait for it to reach zero."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self.yields = 0  # checkpoints that found a request in flight
        self.waited_s = 0.0  # time spent waiting at them
        self.overrun = 0  # waits that ended at their bound, requests still in flight

    @property
    def active(self) -> int:
        return self._active

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around one foreground request, from its arrival (it may wait for a worker) to its reply."""
        with self._cond:
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def yield_to(self, max_wait: float) -> float:
        """Wait until no foreground request is in flight, at most ``max_wait`` seconds; the time waited."""
        if self._active == 0 or max_wait <= 0:  # unlocked read: a stale answer costs one checkpoint
            return 0.0
        t0 = time.monotonic()
        deadline = t0 + max_wait
        with self._cond:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.overrun += 1
                    break
                self._cond.wait(left)
            waited = time.monotonic() - t0
            self.yields += 1
            self.waited_s += waited
        return waited

    def describe(self) -> dict[str, float | int]:
        return {
            "active": self._active,
            "yields": self.yields,
            "waited_seconds": round(self.waited_s, 3),
            "overrun": self.overrun,
        }


# One per process: the server marks requests, the write side and the backfill yield to them.
FOREGROUND = Foreground()
