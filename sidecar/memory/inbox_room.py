"""An inbox's room, a mixin of ``Inboxes`` (:mod:`sidecar.memory.inbox`): its notes' bytes against
``memory.maxInboxBytes``, its .trash held to its caps after each change, and the usage status
shows. Its own module because it is how full an inbox is, not how a note is written; the state
it works on is the ``Inboxes``' own.
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.contracts.errors import SourceError
from sidecar.memory.inbox_files import _file_sizes, _is_copy, _note_sizes, _notes_bytes
from sidecar.memory.inbox_types import InboxFullError, check_agent
from sidecar.memory.trash import Fd, Trash, over, trash_dir

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.memory.inbox")


class Room:
    """How full an agent's inbox and its .trash are, for ``Inboxes`` (which sets ``cfg``)."""

    cfg: Config

    if TYPE_CHECKING:  # the inboxes' own (``Inboxes``, ``Notes``)

        def _dirs(self, agent: str, *, create: bool) -> AbstractContextManager[tuple[int, int]]: ...

        def _trash_of(self, agent: str) -> Trash: ...

    def _cap_after(self, ledger: Trash, inbox_fd: int, newest: str | None) -> tuple[str, ...]:
        """``_cap_trash`` after a write that kept ``newest`` (if any); housekeeping: the write is
        made whatever happens here."""
        if newest is None:
            return ()
        try:
            with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash:
                return self._cap_trash(ledger, trash.fd, newest)
        except (OSError, SourceError) as exc:
            ledger.release(newest)
            log.warning("memory_trash_cap_failed error=%s", exc)
            return ()

    def _check_room(
        self,
        inbox_fd: int,
        name: str,
        growth: int,
        sizes: dict[str, int] | None = None,
        old: bytes | None = None,
    ) -> None:
        """Refuse a write that takes the inbox's notes past ``memory.maxInboxBytes`` (an agent in
        a loop would otherwise fill the disk the index shares). Writes of other notes running at
        the same time may pass it by a note each. ``sizes``: the other notes as the write's look
        found them (its own, ``old``, as read now), so no note is stat again."""
        if self.cfg.memory.max_inbox_bytes > 0 and growth > 0:
            if sizes is None:
                used = _notes_bytes(inbox_fd)
            else:
                others = sum(size for n, size in sizes.items() if n != name)
                used = others + (len(old) if old is not None else 0)
            self._check_room_of(used, name, growth)

    def _check_room_of(self, used: int, name: str, growth: int) -> None:
        limit = self.cfg.memory.max_inbox_bytes
        if limit <= 0 or growth <= 0:
            return  # a note that shrinks or keeps its size is always let through
        if used + growth > limit:
            raise InboxFullError(
                f"the inbox is full: its notes hold {used:,} bytes, {name} would add {growth:,}, the "
                f"limit is {limit:,} (memory.maxInboxBytes): delete notes you no longer need, or "
                "merge them with memory_edit"
            )

    def _cap_trash(self, ledger: Trash, trash_fd: int, newest: str) -> tuple[str, ...]:
        """Remove the oldest kept texts while .trash holds more than ``memory.maxTrashBytes`` or
        ``memory.maxTrashFiles`` (``newest``, the one just kept, stays): rewrites in a loop would
        fill the disk within ``memory.trashDays``. Returns the names removed: the reply says
        which texts are gone. Costs no listing of the folder until a cap is passed (see Trash)."""
        caps = self._caps()
        removed: list[str] = []
        try:  # housekeeping: the change it follows is made and must be reported as made
            with ledger.lock:
                ledger.busy.discard(newest)  # its write is done: from now on the newest only
                if caps == (0, 0):
                    return ()
                ledger.counted(trash_fd)
                if over(ledger.used, ledger.files, caps):
                    removed = ledger.shed(trash_fd, caps, keep={newest})
        except OSError as exc:
            log.warning("memory_trash_cap_failed error=%s", exc)
        if removed:
            log.info(
                "memory_trash_capped removed=%d limit_bytes=%d limit_files=%d", len(removed), caps[0], caps[1]
            )
        return tuple(removed)

    def _caps(self) -> tuple[int, int]:
        return self.cfg.memory.max_trash_bytes, self.cfg.memory.max_trash_files

    def usage(self, agent: str) -> dict[str, int]:
        """What the agent's inbox holds against its limits (zeros before its first note)."""
        notes = used = trash = trash_files = copies = 0
        try:
            with self._dirs(check_agent(agent), create=False) as (_agent_fd, inbox_fd):
                for _name, size in _note_sizes(inbox_fd):
                    notes += 1
                    used += size
                copies = sum(1 for name, _size in _file_sizes(inbox_fd) if _is_copy(name))
                ledger = self._trash_of(agent)
                with (
                    contextlib.suppress(FileNotFoundError),
                    contextlib.closing(Fd(trash_dir(inbox_fd, create=False))) as kept,
                    ledger.lock,
                ):
                    ledger.counted(kept.fd)  # what the cap counts (a file of the user's is not)
                    trash, trash_files = ledger.used, ledger.files
        except FileNotFoundError:
            pass
        limits = self.cfg.memory
        return {
            "notes": notes,
            "bytes": used,
            "max_bytes": limits.max_inbox_bytes,
            "trash_bytes": trash,
            "max_trash_bytes": limits.max_trash_bytes,
            "trash_files": trash_files,
            "max_trash_files": limits.max_trash_files,
            "copies": copies,
        }
