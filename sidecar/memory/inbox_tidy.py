"""An inbox's tidying at start, a mixin of ``Inboxes`` (:mod:`sidecar.memory.inbox`): the temp files
a killed write left, and the empty files held in .trash for an editor's late write (settled once
no save can still come). Its own module because it runs on what other runs left, not on a write;
the state it works on is the ``Inboxes``' own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import SourceError
from sidecar.memory.inbox_files import _MAX_EXISTING, _move_kept, _newest_kept, _state
from sidecar.memory.inbox_types import ChangeUnderWayError
from sidecar.memory.trash import HELD, Fd, Trash, trash_dir
from sidecar.vault.confine import NotRegularError, open_regular, read_fd
from sidecar.vault.homeguard import HomeGuard

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.memory.inbox")

# write_in's temp files, no one else's (and those of versions that named them by mkstemp: eight of
# a-z, 0-9 and "_", left by a killed write and never removed)
_TEMP = re.compile(r"^\.[a-z0-9][a-z0-9_-]*\.[a-z0-9_]{8}\.tmp$")


# The empty file made to read the folder's clock (``_clock_there``): no one's text
_PROBE = re.compile(r"^\.[a-z0-9][a-z0-9_-]*\.[0-9a-f]{8}\.clock$")


class Tidy:
    """The start's tidying of every agent's inbox, for ``Inboxes`` (which sets the state below)."""

    cfg: Config
    home: HomeGuard
    _guard: threading.Lock
    _locks: dict[tuple[str, str], list[Any]]

    if TYPE_CHECKING:  # the inboxes' own (``Inboxes``, ``Notes``)

        def _dirs(self, agent: str, *, create: bool) -> AbstractContextManager[tuple[int, int]]: ...

        def _trash_of(self, agent: str) -> Trash: ...

        def locked(self, agent: str, slug: str) -> AbstractContextManager[None]: ...

        def _settle_empty(
            self,
            agent: str,
            ledger: Trash,
            *,
            fds: tuple[int, int, int],
            name: str,
            slug: str,
            opened: tuple[int, os.stat_result],
        ) -> bool: ...

    def _agent_names(self) -> list[str]:
        """The agents with a folder in the home (names the protocol accepts); none while the
        agents folder is gone or another one (its share unmounted: what lies there is not the
        agents' to prune or retire)."""
        if self.home.problem() is not None:
            return []
        try:
            return [a for a in sorted(os.listdir(self.cfg.agents_dir)) if valid_agent(a)]
        except OSError:
            return []

    def clean_temp(self) -> int:
        """Clear the temp files a killed write left in the inboxes (at start, before any write),
        and the hard links of the fallback in .trash; returns how many. Such a file can hold the
        person's save (a write killed between an exchange and its swap back) or be the file a
        write replaced, still open in an editor: see ``_clear``. The daily prune settles the
        inboxes' temp files the same way (``_settle_temps``), a daemon running for months kept
        them until its next start."""
        cleared = 0
        for agent in self._agent_names():
            try:
                with self._dirs(agent, create=False) as (_agent_fd, inbox_fd):
                    cleared += self._settle_temps(agent, inbox_fd, running=False)
                    try:
                        trash_fd = trash_dir(inbox_fd, create=False)
                    except FileNotFoundError:
                        continue
                    with contextlib.closing(Fd(trash_fd)):
                        for name in os.listdir(trash_fd):
                            if (m := HELD.match(name)) is not None:
                                cleared += self._clear(agent, inbox_fd, trash_fd, name, m.group(1))
            except (OSError, SourceError):
                continue  # no inbox, or not a private one (never written to either)
        return cleared

    def _settle_temps(self, agent: str, inbox_fd: int, *, running: bool) -> int:
        """Clear the leftovers of killed writes in one inbox: the folder-clock probes (no text)
        and the temp files (judged by ``_clear``); how many. ``running``: writes may be under
        way (the daily prune), so each is settled under its note's lock, which every write that
        makes such a file holds until it is gone; one whose note a write holds or waits for is
        in use, or left to the next prune."""
        cleared = 0
        for name in os.listdir(inbox_fd):
            probe = _PROBE.match(name) is not None
            if not probe and _TEMP.match(name) is None:
                continue
            slug = name[1:].rsplit(".", 2)[0]
            try:
                with self._held_if(running, agent, slug) as free:
                    if not free:
                        continue
                    if probe:
                        os.unlink(name, dir_fd=inbox_fd)
                        cleared += 1
                    else:
                        cleared += self._clear(agent, inbox_fd, inbox_fd, name, slug)
            except FileNotFoundError:  # its write finished meanwhile
                continue
            except (OSError, SourceError) as exc:
                if not running:
                    raise
                log.warning("inbox_temp_not_settled agent=%s file=%s error=%s", agent, name, exc)
        return cleared

    @contextlib.contextmanager
    def _held_if(self, running: bool, agent: str, slug: str) -> Iterator[bool]:
        """The note's lock when writes may run (yields False, taking nothing, while a write of
        the note runs or waits); nothing at a start, before any write (yields True)."""
        if not running:
            yield True
            return
        with self._guard:
            busy = (agent, slug) in self._locks
        if busy:
            yield False
            return
        with contextlib.ExitStack() as lock:
            try:
                lock.enter_context(self.locked(agent, slug))
            except ChangeUnderWayError:  # kept by a change given up on since the look above
                free = False
            else:
                free = True
            yield free

    def _clear(self, agent: str, inbox_fd: int, dir_fd: int, name: str, slug: str) -> bool:
        """One leftover of a killed write, or an empty file a write replaced. A second name of the
        note itself is removed at once, and so is a copy of the note's own text (below); any
        other may be a file a write replaced, which a program can still be writing into, and is
        kept. An empty one waits (see ``_settle_empty``); one
        holding the newest text kept of its note takes that copy's place; one holding the note's
        own text is removed (a copy of the note carries nothing; only a write killed over a note
        already holding its text, open in an editor that saves into the old file, would lose a
        later save); any other is kept. False when it was left as it was."""
        try:
            fd = open_regular(name, dir_fd=dir_fd, follow=False)
        except NotRegularError:
            return False  # not a file a write makes: left alone
        try:
            st = os.fstat(fd)
            data = read_fd(os.dup(fd), _MAX_EXISTING + 1)
            ledger = self._trash_of(agent)
            with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash, ledger.lock:
                note = _state(inbox_fd, f"{slug}.md")
                if note is not None and note[0] == st.st_ino:
                    os.unlink(name, dir_fd=dir_fd)
                    log.info("inbox_temp_removed agent=%s file=%s", agent, name)
                    return True
                if not data:
                    return self._settle_empty(
                        agent,
                        ledger,
                        fds=(inbox_fd, dir_fd, trash.fd),
                        name=name,
                        slug=slug,
                        opened=(fd, st),
                    )
                newest = _newest_kept(trash.fd, slug)
                if newest is not None and newest[1] == data:
                    target = newest[0]
                    move = lambda: os.replace(name, target, src_dir_fd=dir_fd, dst_dir_fd=trash.fd)  # noqa: E731
                    ledger.change(trash.fd, target, 0, move)
                    log.info("inbox_temp_removed agent=%s file=%s kept=.trash/%s", agent, name, target)
                    return True
                if note is not None and note[1] == st.st_size and _note_text(inbox_fd, slug) == data:
                    # The note's own text: a copy in .trash carries nothing (it took a place of
                    # the caps' and a line of every listing of kept texts).
                    os.unlink(name, dir_fd=dir_fd)
                    log.info("inbox_temp_removed agent=%s file=%s reason=the note's text", agent, name)
                    return True
                target = _move_kept(ledger, dir_fd, name, trash.fd, slug)
        finally:
            os.close(fd)
        log.warning("inbox_temp_kept agent=%s file=%s kept=.trash/%s", agent, name, target)
        return True

    def _settle_held(self, agent: str, inbox_fd: int, trash_fd: int) -> None:
        """The prune's part (once a day): each file waiting in .trash under a hidden ``.held``
        name is judged as at a start (``_clear``): one an editor wrote into late becomes a kept
        text (counted by the caps, shown as a kept text) without waiting for a restart, which a
        daemon never restarted never had; an empty one goes once past ``memory.trashDays``. Under
        the note's lock, which every write that makes or uses such a file holds: none is in use
        then (one whose note a write holds or waits for is left to the next prune). Not under
        the ledger's lock (taken after the note's, as writes do)."""
        for name in os.listdir(trash_fd):
            if (m := HELD.match(name)) is None:
                continue
            with self._guard:
                if (agent, m.group(1)) in self._locks:  # a write of the note runs: the next prune
                    continue
            try:
                with self.locked(agent, m.group(1)):
                    self._clear(agent, inbox_fd, trash_fd, name, m.group(1))
            except FileNotFoundError:  # settled by a write meanwhile
                continue
            except ChangeUnderWayError:  # kept by a change given up on since the look above
                continue  # the next prune, as for a note a write holds
            except (OSError, SourceError) as exc:  # the prune's other work goes on (the caps)
                log.warning("inbox_held_not_settled agent=%s file=.trash/%s error=%s", agent, name, exc)


def _note_text(inbox_fd: int, slug: str) -> bytes | None:
    """The note's text (None: no regular file, or longer than any text a leftover is compared by)."""
    try:
        fd = open_regular(f"{slug}.md", dir_fd=inbox_fd, follow=False)
    except (NotRegularError, FileNotFoundError):
        return None
    data = read_fd(fd, _MAX_EXISTING + 1)
    return data if len(data) <= _MAX_EXISTING else None
