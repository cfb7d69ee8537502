"""A memory change's own calls into its inbox (the temporary file, its fsync, the rename; a
delete's move to .trash), bounded as the change's look at the inbox is (``Supervisor.looked``:
watch.probeTimeoutSeconds, a share learnt slow as long as a request's look may take), so a share
that hangs there answers the request with a clear error instead of holding it, and its socket
worker, for as long as the share hangs. Nothing is lost either way: the file is put in place by
a rename, so it lands whole or not at all, and the caller is told to look before trying again.

Imports: contracts, vault."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from sidecar.contracts.errors import StorageError
from sidecar.vault.sources import Asking, GivenUp, Root, asked
from sidecar.vault.supervisor import RootUnreachable, Supervisor

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Change:
    """Whether a change began and ended, told between its thread and its request's: the request
    that gives up on it decides under one lock whether nothing was done (it had not begun: it
    never begins now) or whether it lands later, in which case the note's lock is kept until it
    ends (``keep``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._began = self._given_up = self._ended = False
        self._then: list[Callable[[], None]] = []

    def begin(self, slug: str) -> None:
        """The change's thread, before its first call: GivenUp if its request gave up already."""
        with self._lock:
            if self._given_up:
                raise GivenUp(f"{slug}.md")
            self._began = True

    def end(self) -> None:
        """The change's thread, as it ends however it ends: what waits for its end runs now."""
        with self._lock:
            self._ended, then, self._then = True, self._then, []
        for release in then:
            release()

    def give_up(self, keep: Callable[[], Callable[[], None]] | None) -> bool:
        """The request gives up on the change: whether it had begun (it lands whole or not at all
        once its share answers). ``keep``: taken now (the request still holds the note's lock),
        its release called as the change ends."""
        with self._lock:
            self._given_up = True
            if not self._began:
                return False
            if not self._ended and keep is not None:
                self._then.append(keep())
            return True


def in_inbox(
    supervisor: Supervisor,
    root: Root,
    fn: Callable[[], T],
    *,
    call: str,
    slug: str,
    done: str,
    keep: Callable[[], Callable[[], None]] | None = None,
) -> T:
    """``fn()`` (the change: ``call`` on ``slug``'s note, in the inbox ``root``), run as one call
    of a request's look at the inbox, which the daemon's stop neither refuses nor cuts (the stop
    waits for a change under way; one its client was answered ``timeout`` for still lands).
    Refused before it began (the inbox hangs): StorageError, nothing ``done``. Given up on while
    it runs: StorageError saying it lands whole or not at all once the share answers; the inbox
    is marked hanging (or the look cut, on a share learnt slow), so the next change of that
    inbox is refused at once while this one's call is still in. ``keep``: called (the caller
    holding the note's lock) when the change is given up on while it runs; what it returns is
    called once the change has ended: the note stays locked meanwhile (the daily prune and other
    changes of it keep away from a file a write may still rename into place). Raises what ``fn``
    raises."""
    change_of = _Change()

    def change(asking: Asking) -> T:
        try:
            with asked(asking, call, f"{slug}.md"):
                change_of.begin(slug)
                # Each call of the change (a fsync, a rename, a listing's answer) starts the wait
                # again (``timeout.step``, which never ends the change: given up on, answered "not
                # confirmed", it goes on to its end as the answer says): bounded as a sum, a slow
                # share answering each call in time was answered "not confirmed", said hanging,
                # and learnt slow.
                return fn()
        finally:
            change_of.end()

    try:
        return supervisor.looked(root, change, through_stop=True)
    except RootUnreachable as exc:
        if not change_of.give_up(keep):  # refused before the change began: the inbox is untouched
            raise StorageError(f"not {done}: {exc}; nothing {done}: try again once it answers") from exc
        log.error("memory_change_hung root=%s slug=%s call=%s error=%s", root.name, slug, call, exc)
        raise StorageError(
            f"not confirmed: {call} {slug}.md in the inbox did not end ({exc}); the change lands whole "
            "or not at all (a file renamed into place) once the share answers: look at the note "
            "(memory_get, memory_list) before trying again"
        ) from exc
