"""A store's lock whose close never runs under a call in flight.

SQLite's C code on one thread and a close of the same connection on another: the statement
returns into a freed connection and the process dies of a segmentation fault (a memory write let
go after the stop, reading the manifest as the stop closed it). Every call on the connection holds
this lock, and so does the close: it waits for the call that holds it, but only so long
(``close_with``): past that the close is handed to that call's thread, which runs it as it lets go
of the lock (a call hung on a disk must not hang the stop). From the close on, taking the lock
raises the store's own "closed" error: nothing reaches the engine any more.

Imports nothing of the project."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# How long a stop's close waits for the call that holds a store (a transaction or a commit takes
# tens of ms) before it hands the close to that call's thread: a call hung on a disk must not
# hang the stop.
CLOSE_WAIT_S = 2.0


class ClosingLock:
    """Re-entrant per thread, like ``threading.RLock`` (``with``, ``acquire``, ``release``);
    ``with`` raises ``closed_error()`` once ``close_with`` closed the store. ``acquire`` does not
    (``Manifest._writer_free`` only asks whether the lock is free)."""

    def __init__(self, closed_error: Callable[[], BaseException]) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # the holder's entries: changed by the holder only
        self._handed: Callable[[], None] | None = None  # a close the holder runs at its last release
        # The handing and a release's look for a close handed, each with its step on the lock, as
        # one: a holder that looked (none handed) and let go as the close was handed, its try
        # failing meanwhile, left a close that nobody ran.
        self._hand = threading.Lock()
        self._closed_error = closed_error
        self.closed = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        return True

    def release(self) -> None:
        with self._hand:
            close = self._handed if self._depth == 1 else None
            if close is None:
                self._depth -= 1
                self._lock.release()
                return
            self._handed = None
        try:
            self._run(close)
        except (KeyboardInterrupt, SystemExit):
            raise
        # Nobody to hand it to (the close was asked for long before), and not the holder's: its
        # call ended well, and an engine's error here (a Rust panic is a BaseException) in its
        # place read as that call failing.
        except BaseException:
            log.exception("store_close_failed (run by the call that held the store as the close began)")
        finally:
            self._depth -= 1
            self._lock.release()

    def __enter__(self) -> ClosingLock:
        self.acquire()
        if self.closed:
            self.release()
            raise self._closed_error()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def refuse_if_closed(self) -> None:
        """Raise the store's closed error once ``close_with`` closed it (a call that reads without
        the lock: a search)."""
        if self.closed:
            raise self._closed_error()

    def try_free(self) -> bool:
        """Take the lock only when nobody holds it, this thread included: a plain ``Lock``'s
        ``acquire(blocking=False)``, for a look that must not run under a write of its own thread
        (the keyword index's eviction of idle inboxes, asked from a write that had just opened the
        inbox it writes: re-entrant, it closed that inbox before its first document and the
        commit never reached it). True: taken, released by ``release``."""
        if self._is_owned():
            return False
        return self.acquire(blocking=False)

    def is_free(self) -> bool:
        """Whether this thread could take the lock now (no one holds it, or this thread does).
        Never waits, never takes the lock, and so never runs a close handed to the holder (the
        caller may hold a lock the close takes: ``Manifest._take_reader`` asks under the readers'
        lock). It took the lock for an instant: a close's try then failed, with none left to run
        it. The holder's count read without the lock is a look, as the instant's was."""
        return self._depth == 0 or self._is_owned()

    def _is_owned(self) -> bool:
        """Whether this thread holds the lock (``threading.RLock``'s own question)."""
        owned: Any = self._lock._is_owned()  # type: ignore[attr-defined]
        return bool(owned)

    def _run(self, close: Callable[[], None]) -> None:
        """``close`` once (the caller holds the lock); closed from here on even when it raises."""
        if self.closed:
            return
        try:
            close()
        finally:
            self.closed = True

    def close_with(self, close: Callable[[], None], wait: float) -> bool:
        """Run ``close`` under the lock, closing the store for good (a second call does nothing).
        True when it ran here (raising what it raises); False when the call that holds the lock did
        not let go within ``wait`` seconds: that call's thread runs it as it lets go (from now on no
        other call begins), and an error of it is logged there."""
        if self.acquire(timeout=wait):
            try:
                self._run(close)
            finally:
                self.release()
            return True
        # The holder may have let go between the wait and the handing: then nobody would run it.
        # Handed and tried as one step (``_hand``): a failed try means a call holds the lock, and
        # its last release looks for the close after this.
        with self._hand:
            self._handed = close
            got = self.acquire(blocking=False)
        if got:
            self.release()  # runs the close handed
            return True
        return False
