"""Deletions judged over the burst of file events they belong to, not batch by batch.

A deletion that file events bring in several batches (an ``rm -r`` under way, a sync client
emptying a folder, a branch switch that removes the old files before it writes the new ones)
was judged by the mass-deletion guard one batch at a time: each batch under the guard's share was
applied, and a root could leave the index batch by batch without the guard ever firing. Here a
root's deletions beyond the few applied at once wait while its event stream is busy; once no event
came for the root for ``index.massDeletionQuietSeconds`` (or they waited ``MAX_WAIT_S``: a root
that never goes quiet is judged anyway), a full sweep of the root judges them with the whole
picture: what is lost, what stays and what came in. Nothing here is kept across a restart: the
start's sweep finds the files missing and judges the root at once. Imports only the sources' Root.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence

from sidecar.vault.sources import Root

# A root whose event stream never goes quiet (a sync running for minutes) has its waiting
# deletions judged after this long anyway, as they stand then.
MAX_WAIT_S = 60.0


class Bursts:
    """When each root last had a file event, and the roots whose deletions wait for it to go quiet."""

    def __init__(self, quiet_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet_s = quiet_s
        self.clock = clock
        self._lock = threading.Lock()
        self._tops: list[tuple[str, str]] = []  # (root folder + "/", root name), longest first
        self._heard: dict[str, float] = {}  # root name -> time of its last file event
        self._waiting: dict[str, tuple[float, int]] = {}  # root name -> (waiting since, deletions)
        # Roots handed to a sweep to be judged (``due``): judged as they stand, busy or not (a root
        # whose events never stop was put back to wait by its own judgment, for good).
        self._judging: dict[str, int] = {}

    def set_roots(self, roots: Sequence[Root]) -> None:
        """The roots whose events count (an agent's inbox never waits: its deletions are the agent's)."""
        tops = sorted(
            ((str(r.path).rstrip("/") + "/", r.name) for r in roots if r.source != "memory"),
            key=lambda t: len(t[0]),
            reverse=True,
        )
        with self._lock:
            self._tops = tops

    def heard(self, paths: Collection[str]) -> None:
        """File events named these paths now (the watcher's thread)."""
        now = self.clock()
        with self._lock:
            for path in paths:
                for top, name in self._tops:
                    if path.startswith(top) or path == top[:-1]:
                        self._heard[name] = now
                        break
                # A folder that holds whole roots (the vault's parent renamed): each of them.
                for top, name in self._tops:
                    if top.startswith(path.rstrip("/") + "/"):
                        self._heard[name] = now

    def busy(self, name: str) -> bool:
        """Whether the root had a file event within the quiet time, and any deletions of it have
        not waited their longest yet."""
        now = self.clock()
        with self._lock:
            heard = self._heard.get(name)
            waiting = self._waiting.get(name)
            judging = name in self._judging
        if judging or heard is None or now - heard >= self.quiet_s:
            return False
        return waiting is None or now - waiting[0] < MAX_WAIT_S

    def wait(self, name: str, count: int) -> None:
        """Deletions of this root wait for its events to go quiet (``count``: those known now)."""
        with self._lock:
            since, known = self._waiting.get(name, (self.clock(), 0))
            self._waiting[name] = (since, max(known, count))

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
                self._judging[name] = self._waiting.pop(name)[1]
        return sorted(out)

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
            if name is not None:
                return self._waiting.get(name, (0.0, 0))[1] or self._judging.get(name, 0)
            counts = {n: c for n, (_, c) in self._waiting.items()}
            return sum({**self._judging, **counts}.values())
