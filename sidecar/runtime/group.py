"""Group commit: callers queued behind one lock share one run of the work.

Each caller puts its item in the queue and takes the lock; whoever holds it takes every queued
item (in arrival order, stopping at one that conflicts with an item already taken) and does the
work for all of them at once; the others find theirs done when they get the lock and return (or
raise the error the shared run raised). Nothing is deferred: each call returns only once its own
item is done, so what a single call guaranteed (e.g. "searchable on return") holds for each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False)
class _Ticket(Generic[T]):
    item: T
    keys: frozenset[Hashable]
    done: bool = False
    error: BaseException | None = None


@dataclass
class GroupCommit(Generic[T]):
    """One queue in front of ``lock`` (held by the work, and possibly by other writers too)."""

    lock: threading.RLock | threading.Lock
    max_items: int = 64
    runs: int = 0  # shared runs done
    items: int = 0  # items they covered
    _queue: list[_Ticket[T]] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def run(self, item: T, keys: Sequence[Hashable], work: Callable[[list[T]], None]) -> None:
        """Do ``work`` for ``item``, with whatever else is queued; ``keys``: what it changes (two
        items with a key in common never share a run, so their order stays the callers' order)."""
        ticket = _Ticket(item, frozenset(keys))
        with self._guard:
            self._queue.append(ticket)
        with self.lock:
            while not ticket.done:  # an earlier conflicting item may go first, then ours
                batch = self._take()
                try:
                    work([t.item for t in batch])
                except BaseException as exc:
                    for t in batch:
                        t.error = exc
                    if any(t is ticket for t in batch):
                        raise
                finally:
                    for t in batch:
                        t.done = True
                    self.runs += 1
                    self.items += len(batch)
                if any(t is ticket for t in batch):
                    return
        if ticket.error is not None:
            raise ticket.error

    def _take(self) -> list[_Ticket[T]]:
        """Queued tickets from the front, up to the first that shares a key with one taken."""
        with self._guard:
            taken: list[_Ticket[T]] = []
            seen: set[Hashable] = set()
            for t in self._queue:
                if len(taken) >= self.max_items or t.keys & seen:
                    break
                taken.append(t)
                seen |= t.keys
            del self._queue[: len(taken)]
            return taken
