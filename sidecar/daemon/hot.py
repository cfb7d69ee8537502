"""Notes that change again right after they were indexed (a plugin's log note appended to every
second): each is indexed at most every few times what its last indexing cost, so one hot note
cannot keep the indexer busy and the other notes' edits waiting.

A file event for such a note is held until its quiet time ends, counted from the end of its last
indexing and never pushed back by later events, so its last state is always indexed. A cheap
note (most notes: milliseconds) is never held, nor the deletion of a hot one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping

# A note waits this many times what its last indexing cost before it is indexed again (a note
# that costs 1.5 s to read, cut and write is indexed at most every 15 s: about a tenth of a core).
HOT_FACTOR = 10.0
# ... but never longer than this (a log note a minute stale in search is fine).
HOT_MAX_S = 60.0
# Shorter waits are not kept: the debounce and the sweep itself space such notes already.
HOT_MIN_S = 1.0


def quiet_seconds(cost: float) -> float:
    """How long after its indexing a note that cost ``cost`` seconds waits before the next one."""
    return min(HOT_MAX_S, HOT_FACTOR * cost)


class HotNotes:
    """The notes indexed lately at a cost, and the file events held for them (paths as the file
    events name them). Thread-safe: a memory write indexes on its own thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._quiet_until: dict[str, float] = {}  # path -> end of its quiet time
        self._held: dict[str, float] = {}  # path -> when its held event is due

    def indexed(self, costs: Mapping[str, float]) -> None:
        """Notes just indexed, with what each cost in seconds."""
        now = self.clock()
        with self._lock:
            for path, cost in costs.items():
                wait = quiet_seconds(cost)
                if wait >= HOT_MIN_S:
                    self._quiet_until[path] = now + wait
                else:
                    self._quiet_until.pop(path, None)
            self._quiet_until = {p: t for p, t in self._quiet_until.items() if t > now}

    def hold(self, paths: Collection[str]) -> frozenset[str]:
        """The paths to look at now; the others are held until their note's quiet time ends (a
        path held already keeps its due time: more events do not postpone it)."""
        now = self.clock()
        ready: set[str] = set()
        with self._lock:
            for path in paths:
                until = self._quiet_until.get(path)
                if until is not None and until > now:
                    self._held.setdefault(path, until)
                elif path not in self._held:
                    ready.add(path)
        return frozenset(ready)

    def release(self, paths: Collection[str]) -> None:
        """Paths whose next event is looked at at once (their note is gone: nothing to parse)."""
        if not paths:
            return
        with self._lock:
            for path in paths:
                self._quiet_until.pop(path, None)
                self._held.pop(path, None)

    def due(self, late: float = 0.0) -> frozenset[str]:
        """Held paths whose time came at least ``late`` seconds ago, no longer held."""
        now = self.clock()
        with self._lock:
            out = frozenset(p for p, t in self._held.items() if t + late <= now)
            for path in out:
                del self._held[path]
        return out

    def wait(self, most: float) -> float:
        """Seconds until the next held path is due, at most ``most`` (0: one is due now)."""
        with self._lock:
            first = min(self._held.values(), default=None)
        return most if first is None else max(0.0, min(most, first - self.clock()))

    def quiet(self, paths: Collection[str]) -> frozenset[str]:
        """The paths among these whose events are held now, or would be (a note saved over and
        over: no change to catch up with, ``IndexLoop.catching_up``)."""
        now = self.clock()
        with self._lock:
            return frozenset(p for p in paths if p in self._held or self._quiet_until.get(p, now) > now)

    def held(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)
