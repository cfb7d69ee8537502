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
from sidecar.vault.sources import Asking, Root, asked
from sidecar.vault.supervisor import RootUnreachable, Supervisor

log = logging.getLogger(__name__)

T = TypeVar("T")


def in_inbox(
    supervisor: Supervisor, root: Root, fn: Callable[[], T], *, call: str, slug: str, done: str
) -> T:
    """``fn()`` (the change: ``call`` on ``slug``'s note, in the inbox ``root``), run as one call
    of a request's look at the inbox, which the daemon's stop neither refuses nor cuts (the stop
    waits for a change under way; one its client was answered ``timeout`` for still lands).
    Refused before it began (the inbox hangs): StorageError, nothing ``done``. Given up on while
    it runs: StorageError saying it lands whole or not at all once the share answers; the inbox
    is marked hanging (or the look cut, on a share learnt slow), so the next change of that
    inbox is refused at once while this one's call is still in. Raises what ``fn`` raises."""
    began = threading.Event()

    def change(asking: Asking) -> T:
        # Each call of the change (a fsync, a rename, a listing's answer) starts the wait again
        # (``timeout.step``, which never ends the change: given up on, answered "not confirmed",
        # it goes on to its end as the answer says): bounded as a sum, a slow share answering
        # each call in time was answered "not confirmed", said hanging, and learnt slow.
        with asked(asking, call, f"{slug}.md"):
            began.set()
            return fn()

    try:
        return supervisor.looked(root, change, through_stop=True)
    except RootUnreachable as exc:
        if not began.is_set():  # refused before the change began: the inbox is untouched
            raise StorageError(f"not {done}: {exc}; nothing {done}: try again once it answers") from exc
        log.error("memory_change_hung root=%s slug=%s call=%s error=%s", root.name, slug, call, exc)
        raise StorageError(
            f"not confirmed: {call} {slug}.md in the inbox did not end ({exc}); the change lands whole "
            "or not at all (a file renamed into place) once the share answers: look at the note "
            "(memory_get, memory_list) before trying again"
        ) from exc
