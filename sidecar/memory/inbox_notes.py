"""A note's write and delete, a mixin of ``Inboxes`` (:mod:`sidecar.memory.inbox`): the path built
from a checked slug, the inbox's folders opened one level at a time, the per-note lock, the write
(new, replaced or edited) and the delete, each audited. Its own module because it is the order of
a change; the reading of what is there and its keeping in .trash are the ``Inboxes``' own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.config import Config
from sidecar.contracts.errors import NotFoundError
from sidecar.memory.inbox_files import _move_kept, _note_sizes_asked, _State
from sidecar.memory.inbox_text import _names_as_text, _now, _plain, _unstamped
from sidecar.memory.inbox_types import (
    ChangeUnderWayError,
    Deleted,
    InboxGoneError,
    MemoryUnreadableError,
    Written,
    check_agent,
    check_slug,
)
from sidecar.memory.trash import Fd, Trash, trash_dir
from sidecar.notes.frontmatter import front_matter_problem, split_front_matter
from sidecar.vault.confine import open_regular, private_dirs, read_fd
from sidecar.vault.homeguard import HomeGuard
from sidecar.vault.sources import Asking, agent_inbox, asked
from sidecar.vault.timeout import step

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.memory.inbox")

_MANAGED = ("created", "updated")


_REMEMBERED = 4096  # notes whose last written state is kept (see ``Inboxes._left``)


class Notes:
    """The writes and deletes of an agent's notes, for ``Inboxes`` (which sets the state below)."""

    cfg: Config
    home: HomeGuard
    indexed: Callable[[str], bool] | None
    _locks: dict[tuple[str, str], list[Any]]
    _guard: threading.Lock
    _busy: dict[str, int]
    _retiring: set[str]
    _retired: threading.Condition
    _left: OrderedDict[tuple[str, str], _State]

    if TYPE_CHECKING:  # the inboxes' own (``Inboxes``, ``Room``, ``NoteText``)

        def _trash_of(self, agent: str) -> Trash: ...

        def _read_settled(
            self, inbox_fd: int, name: str, slug: str, left: _State
        ) -> tuple[bytes | None, _State]: ...

        def _replace(
            self,
            inbox_fd: int,
            name: str,
            seen: _State,
            old: bytes | None,
            data: bytes,
            *,
            ledger: Trash,
            previous: Path | None,
            swapped: list[str],
            inbox: Path,
            agent: str,
        ) -> os.stat_result: ...

        def _keep(self, ledger: Trash, inbox_fd: int, slug: str, old: bytes) -> str: ...

        def _audit(
            self, agent_fd: int, op: str, slug: str, digest: str, size: int, *, agent: str
        ) -> str | None: ...

        def _check_room(
            self,
            inbox_fd: int,
            name: str,
            growth: int,
            sizes: dict[str, int] | None = None,
            old: bytes | None = None,
        ) -> None: ...

        def _check_room_of(self, used: int, name: str, growth: int) -> None: ...

        def _cap_after(self, ledger: Trash, inbox_fd: int, newest: str | None) -> tuple[str, ...]: ...

        def _cap_trash(self, ledger: Trash, trash_fd: int, newest: str) -> tuple[str, ...]: ...

        def _check_content(self, content: Any, front_matter: Any) -> None: ...

        def _sized(
            self, meta: dict[str, Any], body: str, content: str, *, edit_of: dict[str, Any] | None
        ) -> tuple[str, dict[str, int]]: ...

    def path_of(self, agent: str, slug: str) -> Path:
        """Where the note lives; refuses at once an inbox that is not a private folder."""
        inbox = agent_inbox(self.cfg, check_agent(agent))
        path = inbox / f"{check_slug(slug)}.md"
        with contextlib.suppress(FileNotFoundError), self._dirs(agent, create=False):
            pass
        return path

    def precheck(self, agent: str, slug: str, content: Any, front_matter: Any) -> None:
        """Refuse at once what ``write`` would refuse for its size or the inbox's room, before any
        similarity work: a write of 1 MB was refused after 21 s of embedding it for the duplicate
        check (and held one of the two write workers meanwhile). ``write`` checks again, exactly:
        the room here leaves out the stamp a write adds, so it refuses nothing ``write`` would
        let through. Unbounded: the daemon's writes look through ``look`` and ``check_room``."""
        self.check_room(slug, content, front_matter, self.look(agent, Asking(), room=True))

    def look(self, agent: str, asking: Asking, *, room: bool) -> dict[str, int] | None:
        """A change's look at the inbox before anything is done, each call into the share told
        to ``asking`` (its caller bounds each call, not their sum): its folders opened and checked
        (NotPrivateError: not a private folder), and with ``room`` (and memory.maxInboxBytes set)
        the size of each of its notes, for ``check_room``. None when no room is counted or the
        inbox is not there yet (the write makes it)."""
        agent = check_agent(agent)
        try:
            with contextlib.ExitStack() as stack:
                with asked(asking, "stat", "."):  # the folders of the path, one at a time
                    _agent_fd, inbox_fd = stack.enter_context(self._dirs(agent, create=False))
                if not room or self.cfg.memory.max_inbox_bytes <= 0:
                    return None
                return _note_sizes_asked(inbox_fd, asking)
        except FileNotFoundError:
            return None

    def check_room(self, slug: str, content: Any, front_matter: Any, sizes: dict[str, int] | None) -> None:
        """``precheck`` on the note sizes a ``look`` found (None: no room counted); pass the same
        sizes to ``write``, which then stats no note again."""
        self._check_content(content, front_matter)
        if sizes is None or self.cfg.memory.max_inbox_bytes <= 0:
            return
        name = f"{check_slug(slug)}.md"
        self._check_room_of(sum(sizes.values()), name, len(content.encode("utf-8")) - sizes.get(name, 0))

    @contextlib.contextmanager
    def _dirs(self, agent: str, *, create: bool) -> Iterator[tuple[int, int]]:
        """Descriptors of ``agents/<agent>/`` and its inbox, each checked (see the module doc)."""
        agents = self.cfg.agents_dir
        parts = [agents.name, agent, "memory"]
        what = f"the inbox of {agent!r}"
        home = self.home
        existing = 0
        if create:
            # Made here only while none was seen yet; once kept, a gone or other agents folder
            # (the home unmounted) refuses the change, as one found so through its descriptor.
            home.check()
            existing = 1 if home.remembered else 0
            self._check_inbox_there(agent)
        try:
            with private_dirs(agents.parent, parts, create=create, what=what, existing=existing) as fds:
                if create:
                    home.check_fd(fds[0])
                    home.know(agent)  # its inbox there now tells this home from a bare folder
                yield fds[1], fds[2]
        except FileNotFoundError:
            if create:
                home.check()  # gone meanwhile: said so
            raise

    def _check_inbox_there(self, agent: str) -> None:
        """An agent's inbox that is gone while the index still holds its notes is not made anew
        (on a share away, it would hide the write once back): refused until a sweep saw the notes
        gone and let go of them. A new agent's first inbox is made."""
        if self.indexed is None or os.path.lexists(agent_inbox(self.cfg, agent)) or not self.indexed(agent):
            return
        raise InboxGoneError(
            f"the inbox of {agent!r} ({agent_inbox(self.cfg, agent)}) is gone although its notes are "
            "indexed (moved? unmounted?); nothing was changed: it is made anew once the index has let "
            "go of them (the next sweep)"
        )

    @contextlib.contextmanager
    def locked(self, agent: str, slug: str) -> Iterator[None]:
        """The note's lock: held by the inbox's own changes, and by a caller around a change and
        its index update, so a delete cannot fall between a write's file and its index entry
        (which left an index entry without a file). Re-entrant. Kept past its holder by a change
        given up on that still runs (``keep``): refused then (StorageError, nothing done) instead
        of waited for, as long as that change's share hangs."""
        key = (agent, slug)
        with self._guard:
            while agent in self._retiring:  # its folders go: the write makes fresh ones after
                self._retired.wait()
            self._busy[agent] = self._busy.get(agent, 0) + 1
            held = self._locks.setdefault(key, [threading.RLock(), 0, 0])  # lock, holders, kept
            held[1] += 1
        try:
            again = held[0]._is_owned()  # this thread's own re-entry: no new change begins
            with held[0]:
                if held[2] and not again:
                    raise ChangeUnderWayError(
                        f"not changed: an earlier change of {slug!r} that was not confirmed (its "
                        "inbox's share did not answer) is still under way; nothing was done: look at "
                        "the note (memory_get) and try again once the share answers"
                    )
                yield
        finally:
            self._let_go(key)

    def _let_go(self, key: tuple[str, str], *, kept: bool = False) -> None:
        """One holder (or, ``kept``, one change kept) of the note's lock gone."""
        agent = key[0]
        with self._guard:
            held = self._locks[key]
            held[1] -= 1
            held[2] -= kept
            if held[1] == 0:
                del self._locks[key]
            self._busy[agent] -= 1
            if self._busy[agent] == 0:
                del self._busy[agent]

    def keep(self, agent: str, slug: str) -> Callable[[], None]:
        """Keep the note's lock, which the caller holds, past the caller's release: a change of
        the note it gave up on (a share that hangs) may still rename its file into place, and the
        daily prune (which leaves alone a note whose lock is held) and other changes of the note
        must wait for that. Returns the release, called once the change has ended (or never: the
        process stops). The agent counts as busy meanwhile (its folders are not retired)."""
        key = (agent, slug)
        with self._guard:
            held = self._locks[key]
            held[1] += 1
            held[2] += 1
            self._busy[agent] += 1
        return lambda: self._let_go(key, kept=True)

    def write(
        self,
        agent: str,
        slug: str,
        content: str,
        front_matter: dict[str, Any] | None,
        *,
        must_exist: bool,
        sizes: dict[str, int] | None = None,
        held: bool = False,
    ) -> Written:
        """Create or replace (``must_exist=False``) or edit (``must_exist=True``) a memory note.
        ``sizes``: the note sizes this write's ``look`` found, its room counted from them (each
        note stat once per write, not again here); None: counted here. ``held``: the caller holds
        the note's lock for this write, which runs in a thread of its own (a bounded write: the
        lock, re-entrant per thread, would wait for the caller that waits for it)."""
        path = self.path_of(agent, slug)
        name = path.name
        self._check_content(content, front_matter)
        front_matter = _names_as_text(front_matter)
        lock = contextlib.nullcontext() if held else self.locked(agent, slug)
        with lock, self._dirs(agent, create=True) as (agent_fd, inbox_fd):
            with self._guard:
                left = self._left.get((agent, slug))
            old, seen = self._read_settled(inbox_fd, name, slug, left)
            existing: dict[str, Any] = {}
            if old is not None:
                old_text = old.decode("utf-8", errors="replace")
                problem = front_matter_problem(old_text) if must_exist else None
                if problem is not None:  # an edit keeps the keys: it cannot when it cannot read them
                    raise MemoryUnreadableError(
                        f"the front matter of {slug!r} cannot be read ({problem}): fix it, or replace "
                        "the whole note with memory_write"
                    )
                existing, _old_body = split_front_matter(old_text, as_written=True)
            elif must_exist:
                raise NotFoundError(f"no memory note {slug!r} to edit; use memory_write to create it")
            # Values as written: a re-typed value written back (``zeit: 12:30`` as 750) is a
            # value nobody sent, in the note and to the next edit.
            inline, body = split_front_matter(content, as_written=True)
            meta: dict[str, Any] = dict(existing) if must_exist else {}
            meta.update({k: _plain(v) for k, v in inline.items()})
            meta.update(front_matter or {})
            for key in _MANAGED:
                meta.pop(key, None)
            meta["created"] = _plain(existing.get("created")) or _now()
            meta["updated"] = _now()
            text, counts = self._sized(meta, body, content, edit_of=existing if must_exist else None)
            data = text.encode("utf-8")
            self._check_room(inbox_fd, name, len(data) - (len(old) if old is not None else 0), sizes, old)
            # The text being replaced stays recoverable, as a deleted note does (a rewrite that
            # changes only the 'updated' stamp names no previous: there is nothing to lose; its
            # file replaced is still kept, see ``_replace``).
            previous = None
            ledger = self._trash_of(agent)
            # An empty note holds no text to lose (and a "previous" of 0 bytes read as kept text).
            if old and _unstamped(old.decode("utf-8", errors="replace")) != _unstamped(text):
                previous = path.parent / ".trash" / self._keep(ledger, inbox_fd, slug, old)
            swapped: list[str] = []  # the file replaced, kept anew when ``previous`` is None
            try:
                st = self._replace(
                    inbox_fd,
                    name,
                    seen,
                    old,
                    data,
                    ledger=ledger,
                    previous=previous,
                    swapped=swapped,
                    inbox=path.parent,
                    agent=agent,
                )
            except BaseException:
                for kept in [*([previous.name] if previous is not None else []), *swapped]:
                    ledger.release(kept)  # its write failed: no cap of this write will run
                raise
            mtime_ns, ctime_ns = st.st_mtime_ns, st.st_ctime_ns
            self._remember((agent, slug), (st.st_ino, st.st_size, mtime_ns, ctime_ns))
            # Only now: a write that fails must not have cost older texts.
            newest = previous.name if previous is not None else next(iter(swapped), None)
            dropped = self._cap_after(ledger, inbox_fd, newest)
            digest = hashlib.sha256(data).hexdigest()
            audit_error = self._audit(
                agent_fd, "edit" if must_exist else "write", slug, digest, len(data), agent=agent
            )
        return Written(
            slug,
            path,
            old is None,
            counts,
            digest,
            len(data),
            data,
            mtime_ns,
            previous,
            audit_error,
            ctime_ns,
            dropped,
        )

    def _remember(self, key: tuple[str, str], state: _State) -> None:
        with self._guard:
            self._left[key] = state
            self._left.move_to_end(key)
            while len(self._left) > _REMEMBERED:
                self._left.popitem(last=False)

    def _rescue(self, ledger: Trash, inbox_fd: int, slug: str, name: str) -> str:
        """Move a file of another program's that lies at ``name`` into .trash as a kept text;
        returns its name there."""
        with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash, ledger.lock:
            target = _move_kept(ledger, inbox_fd, name, trash.fd, slug)
        log.warning("memory_write_raced_kept slug=%s kept=.trash/%s", slug, target)
        return target

    def delete(self, agent: str, slug: str, *, held: bool = False) -> Deleted | None:
        """Move the note to ``<inbox>/.trash/<slug>--<time>.md``; None if there was nothing to
        delete. ``held``: as ``write``'s."""
        path = self.path_of(agent, slug)
        name = path.name
        lock = contextlib.nullcontext() if held else self.locked(agent, slug)
        with lock, self._dirs(agent, create=True) as (agent_fd, inbox_fd):
            try:
                st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(st.st_mode):
                # A link or pipe placed under a note's name holds no text to keep: it is removed,
                # never opened or followed (moved into .trash, a relative link pointed elsewhere
                # from there, and the reply said a text was kept).
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                os.unlink(name, dir_fd=inbox_fd)
                step()
                os.fsync(inbox_fd)
                audit_error = self._audit(
                    agent_fd, "delete", slug, hashlib.sha256(b"").hexdigest(), 0, agent=agent
                )
                return Deleted(None, audit_error, removed=what)
            data = b""
            with contextlib.suppress(OSError):
                data = read_fd(open_regular(name, dir_fd=inbox_fd, follow=False), st.st_size + 1)
            ledger = self._trash_of(agent)
            with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash:
                stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
                target = f"{slug}--{stamp}.md"
                with ledger.lock:
                    ledger.change(
                        trash.fd,
                        target,
                        +1,
                        lambda: os.replace(name, target, src_dir_fd=inbox_fd, dst_dir_fd=trash.fd),
                    )
                step()
                os.fsync(trash.fd)
                dropped = self._cap_trash(ledger, trash.fd, target)
            step()
            os.fsync(inbox_fd)
            audit_error = self._audit(
                agent_fd, "delete", slug, hashlib.sha256(data).hexdigest(), len(data), agent=agent
            )
        return Deleted(path.parent / ".trash" / target, audit_error, dropped)
