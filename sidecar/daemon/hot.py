"""Notes that change again right after they were indexed (a plugin's log note appended to every
second): each is indexed at most every few times what its last indexing cost, so one hot note
cannot keep the indexer busy and the other notes' edits waiting.

A file event for such a note is held until its quiet time ends, counted from the end of its last
indexing and never pushed back by later events, so its last state is always indexed. A cheap
note (most notes: milliseconds) is never held, nor the deletion of a hot one.

A held note whose file then settles (no event for ``SETTLE_S``) is handed out before its quiet
time ends once nothing else waits: one slow save (a large file written over seconds, whose first
indexing caught it half written) is indexed whole seconds after it ends, not a minute later. Such
early indexings are bounded for the whole daemon (``BUDGET_SHARE`` of ``BUDGET_WINDOW_S``: at most
a twentieth of a core more than the quiet times allow) and never come twice in a row for a note:
a note written every few seconds settles at every pause, and handing each pause out doubled its
CPU, per note and at every burst.

A note indexed at a cost again and again and held or in its quiet time now is written
continuously (``continuous``): each of its indexings leaves a few chunks waiting for a vector.
Those its last indexing added (no more: a backlog from before is still one) are not counted as
waiting by search answers while the model computes vectors, and status says them apart; a
rebuild's clear forgets which notes are so.
"""

from __future__ import annotations

import math
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
# A held note with no file event for this long is settled (a save ended, see above).
SETTLE_S = 2.0
# Early indexings of settled notes, all notes together, cost at most this share of this window.
BUDGET_WINDOW_S = 600.0
BUDGET_SHARE = 0.05
# A note indexed at a cost this many times within ``BUDGET_WINDOW_S`` and held or in its quiet
# time now is written continuously: status names it, and search answers do not count the chunks
# each of its indexings leaves waiting for a vector (one edit of a large note is no such note).
CONTINUOUS_INDEXINGS = 3


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
        self._last_event: dict[str, float] = {}  # held path -> when its latest event came
        self._early: set[str] = set()  # handed out settled, not indexed since
        self._early_last: set[str] = set()  # last indexed early: the next one waits its quiet time
        self._early_spent: list[tuple[float, float]] = []  # (end, cost) of early indexings lately
        self._spent: dict[str, list[tuple[float, float]]] = {}  # costly note -> its indexings lately
        # Costly note -> its key in the index and the chunks its last indexing added.
        self._keys: dict[str, tuple[str, int]] = {}
        self._cleared = -math.inf  # the index was cleared (a rebuild): indexings before do not count

    def indexed(self, costs: Mapping[str, float], keys: Mapping[str, tuple[str, int]] | None = None) -> None:
        """Notes just indexed, with what each cost in seconds (and, by path, their keys in the index
        and the chunks the indexing added)."""
        now = self.clock()
        with self._lock:
            for path in costs:
                if keys and path in keys:
                    self._keys[path] = keys[path]
            for path, cost in costs.items():
                if path in self._early:
                    self._early.discard(path)
                    self._early_last.add(path)
                    self._early_spent.append((now, cost))
                else:
                    self._early_last.discard(path)
                wait = quiet_seconds(cost)
                if wait >= HOT_MIN_S:
                    self._quiet_until[path] = now + wait
                    self._spent.setdefault(path, []).append((now, cost))
                else:
                    self._quiet_until.pop(path, None)
            self._quiet_until = {p: t for p, t in self._quiet_until.items() if t > now}
            kept = self._quiet_until.keys() | self._held.keys()
            self._early_last &= kept
            since = now - BUDGET_WINDOW_S
            self._early_spent = [x for x in self._early_spent if x[0] > since]
            recent = ((p, [x for x in v if x[0] > since]) for p, v in self._spent.items())
            self._spent = {p: v for p, v in recent if v}
            self._keys = {p: k for p, k in self._keys.items() if p in self._spent}

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
                    self._last_event[path] = now
                elif path in self._held:
                    self._last_event[path] = now
                else:
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
                self._last_event.pop(path, None)
                self._spent.pop(path, None)
                self._keys.pop(path, None)
                self._early.discard(path)
                self._early_last.discard(path)

    def due(self, late: float = 0.0) -> frozenset[str]:
        """Held paths whose time came at least ``late`` seconds ago, no longer held."""
        now = self.clock()
        with self._lock:
            out = frozenset(p for p, t in self._held.items() if t + late <= now)
            for path in out:
                del self._held[path]
                self._last_event.pop(path, None)
        return out

    def settled(self) -> frozenset[str]:
        """Held paths whose file settled (no event for ``SETTLE_S``), within the budget and not
        early the last time, no longer held: for when nothing else waits."""
        now = self.clock()
        with self._lock:
            out = frozenset(p for p in self._held if self._settles(p, now) <= now)
            for path in out:
                del self._held[path]
                self._last_event.pop(path, None)
                self._early.add(path)
        return out

    def _settles(self, path: str, now: float) -> float:
        """Caller holds the lock. When held ``path`` counts as settled: never after an early one,
        nor while this one, counted at its note's last cost, would take the early indexings of the
        window past the budget, or the note's own indexings (a note written to all the time has
        spent its share on its quiet-time ones)."""
        if path in self._early_last or path in self._early:
            return math.inf
        since, budget = now - BUDGET_WINDOW_S, BUDGET_SHARE * BUDGET_WINDOW_S
        # A held note's last indexing is in the window (its quiet time is at most a minute).
        own = [c for end, c in self._spent.get(path, ()) if end > since]
        cost = own[-1] if own else 0.0
        early = sum(c for end, c in self._early_spent if end > since)
        if early + cost > budget or sum(own) + cost > budget:
            return math.inf
        return self._last_event.get(path, -math.inf) + SETTLE_S

    def wait(self, most: float) -> float:
        """Seconds until the next held path is due, at most ``most`` (0: one is due now)."""
        now = self.clock()
        with self._lock:
            first = min((min(t, self._settles(p, now)) for p, t in self._held.items()), default=None)
        return most if first is None else max(0.0, min(most, first - now))

    def quiet(self, paths: Collection[str]) -> frozenset[str]:
        """The paths among these whose events are held now, or would be (a note saved over and
        over: no change to catch up with, ``IndexLoop.catching_up``)."""
        now = self.clock()
        with self._lock:
            return frozenset(p for p in paths if p in self._held or self._quiet_until.get(p, now) > now)

    def cleared(self) -> None:
        """The index was cleared (a rebuild): its first indexing of each note adds every chunk, so
        no note is written continuously until indexed again ``CONTINUOUS_INDEXINGS`` times."""
        with self._lock:
            self._cleared = self.clock()
            self._keys.clear()

    def continuous(self) -> dict[str, int]:
        """The notes written continuously now (``CONTINUOUS_INDEXINGS``): key -> the chunks its last
        indexing added (of its chunks waiting for a vector, at most so many are no backlog)."""
        now = self.clock()
        with self._lock:
            since = max(now - BUDGET_WINDOW_S, self._cleared)
            return {
                key: added
                for path, (key, added) in self._keys.items()
                if sum(1 for end, _ in self._spent.get(path, ()) if end > since) >= CONTINUOUS_INDEXINGS
                and (path in self._held or self._quiet_until.get(path, now) > now)
            }

    def held(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)
