"""Deletions judged over the burst of file events they belong to, not batch by batch.

A deletion that file events bring in several batches (an ``rm -r`` under way, a sync client
emptying a folder, a branch switch that removes the old files before it writes the new ones)
was judged by the mass-deletion guard one batch at a time: each batch under the guard's share was
applied, and a root could leave the index batch by batch without the guard ever firing. Here a
root's deletions that no move explains, beyond the few applied at once, wait while it is busy;
once no deletion or new note came for the root for ``index.massDeletionQuietSeconds`` (or
they waited ``MAX_WAIT_S``: a root that never goes quiet is judged anyway), a full sweep of the
root judges them with the whole picture: what is lost, what stays and what came in. Nothing here
is kept across a restart: the start's sweep finds the files missing and judges the root at once.
Only a deletion or a new note makes a root busy (``heard``). Imports nothing of the project.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

# A root whose event stream never goes quiet (a sync running for minutes) has its waiting
# deletions judged after this long anyway, as they stand then.
MAX_WAIT_S = 60.0


class Bursts:
    """When each root last had a deletion or a new note, and the roots whose deletions wait for
    it to go quiet."""

    def __init__(self, quiet_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet_s = quiet_s
        self.clock = clock
        self._lock = threading.Lock()
        self._heard: dict[str, float] = {}  # root name -> time of its last deletion or new note
        # root name -> (waiting since, the keys of its waiting deletions): a set, so a note named
        # by two batches counts once and one that came back counts no more.
        self._waiting: dict[str, tuple[float, set[str]]] = {}
        # Roots handed to a sweep to be judged (``due``): judged as they stand, busy or not (a root
        # whose events never stop was put back to wait by its own judgment, for good).
        self._judging: dict[str, int] = {}

    def heard(self, name: str) -> None:
        """File events of this root brought a deletion or a new note now. Only these count: a
        burst (an ``rm -r``, a sync, a branch switch) is made of them, while an editor saving a
        note every second (or a hot note's saves) says nothing about one, and kept the root
        "busy" for good."""
        with self._lock:
            self._heard[name] = self.clock()

    def busy(self, name: str) -> bool:
        """Whether the root had a deletion or a new note within the quiet time, and any deletions
        of it have not waited their longest yet."""
        now = self.clock()
        with self._lock:
            heard = self._heard.get(name)
            waiting = self._waiting.get(name)
            judging = name in self._judging
        if judging or heard is None or now - heard >= self.quiet_s:
            return False
        return waiting is None or now - waiting[0] < MAX_WAIT_S

    def wait(self, name: str, keys: Collection[str], back: Collection[str] = (), whole: bool = False) -> None:
        """Deletions of this root wait for its events to go quiet: ``keys`` more of them (a full
        sweep's are the ``whole`` of them); ``back``: notes there again, waiting no more."""
        with self._lock:
            since, known = self._waiting.get(name, (self.clock(), set()))
            now = set(keys) if whole else (known | set(keys))
            self._waiting[name] = (since, now - set(back))

    def keys(self, name: str) -> set[str]:
        """The keys of the root's waiting deletions."""
        with self._lock:
            return set(self._waiting.get(name, (0.0, set()))[1])

    def among(self, keys: Collection[str]) -> set[str]:
        """Those of ``keys`` whose deletion waits (in any root)."""
        with self._lock:
            waiting = [known for _, known in self._waiting.values()]
            return {k for k in keys if any(k in known for known in waiting)}

    def judged(self, name: str) -> None:
        """A full sweep judged the root's deletions (or could not list the root: its offline
        retry looks again): none wait any more."""
        with self._lock:
            self._waiting.pop(name, None)
            self._judging.pop(name, None)

    def due(self) -> list[str]:
        """The roots whose waiting deletions are to be judged now (quiet, or waited their
        longest), handed over: a sweep of each judges them (one that cannot list the root leaves
        it to the offline retry; it is not asked again every turn)."""
        now = self.clock()
        with self._lock:
            out = [
                name
                for name, (since, _) in self._waiting.items()
                if now - self._heard.get(name, 0.0) >= self.quiet_s or now - since >= MAX_WAIT_S
            ]
            for name in out:
                self._judging[name] = len(self._waiting.pop(name)[1])
        return sorted(out)

    def judging(self) -> frozenset[str]:
        """The roots handed to a sweep to be judged that it has not judged yet (a sweep that
        failed: its retry must judge them, or they said "waiting" until the next scheduled sweep)."""
        with self._lock:
            return frozenset(self._judging)

    def next_in(self, most: float) -> float:
        """Seconds until waiting deletions are due, at most ``most`` (0: due now)."""
        now = self.clock()
        with self._lock:
            times = [
                min(self._heard.get(name, 0.0) + self.quiet_s, since + MAX_WAIT_S)
                for name, (since, _) in self._waiting.items()
            ]
        return most if not times else max(0.0, min(most, min(times) - now))

    def waiting(self, name: str | None = None) -> int:
        """Deletions waiting to be judged (of one root, or of all)."""
        with self._lock:
            counts = {n: len(k) for n, (_, k) in self._waiting.items()}
            if name is not None:
                return counts.get(name, 0) or self._judging.get(name, 0)
            return sum({**self._judging, **counts}.values())
