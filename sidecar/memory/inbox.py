"""An agent's memory inbox: write, edit, delete, with an audit log; replaced and deleted texts are
kept in the inbox's .trash folder.

The path is always built from a validated slug, never taken from the client. Confinement is by
construction: ``agents/``, ``agents/<agent>/`` and its ``memory/`` are created 0700 by the daemon
and, before every write, opened one level at a time without following symlinks and checked to be
this user's folders (:mod:`sidecar.vault.confine`); the note is read, written and renamed relative to
the inbox's own descriptor, so a folder swapped for a link mid-write cannot redirect it, and a
note that is a symlink is refused. Writes are atomic (temp file, fsync, an exchange with the note
that never loses another program's save made meanwhile, fsync of the folder) and serialised per
note; ``created`` and ``updated`` are managed in the front matter, every other key is kept as
given; secrets are redacted before anything reaches disk. Imports config, confine, sources,
frontmatter, redact, errors, replace (putting the written text in place), trash (the kept texts'
ledger) and retention (how long kept texts, empty agents and their audit history stay).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.config import Config, agent_name_problem, valid_agent
from sidecar.contracts.errors import NotFoundError, SourceError, StorageError
from sidecar.contracts.printable import quoted
from sidecar.memory import replace
from sidecar.memory.retention import Retention
from sidecar.memory.trash import HELD, KEPT, Fd, Trash, drop_stamp, over, read_stamp, trash_dir, write_stamp
from sidecar.notes.frontmatter import (
    dump_front_matter,
    front_matter_problem,
    is_name_property,
    parse_front_matter,
    split_front_matter,
)
from sidecar.notes.redact import redact_entry, redact_written
from sidecar.runtime.steadyclock import SteadyClock
from sidecar.vault.confine import (
    NotRegularError,
    open_regular,
    private_dirs,
    read_fd,
)
from sidecar.vault.homeguard import HomeGuard
from sidecar.vault.sources import SLUG_RE, agent_inbox, inbox_copy_reason, is_markdown_name

_MANAGED = ("created", "updated")
# write_in's temp files, no one else's (and those of versions that named them by mkstemp: eight of
# a-z, 0-9 and "_", left by a killed write and never removed)
_TEMP = re.compile(r"^\.[a-z0-9][a-z0-9_-]*\.[a-z0-9_]{8}\.tmp$")
# The empty file made to read the folder's clock (``_clock_there``): no one's text
_PROBE = re.compile(r"^\.[a-z0-9][a-z0-9_-]*\.[0-9a-f]{8}\.clock$")

log = logging.getLogger(__name__)


class MemoryWriteError(SourceError):
    """A memory write was refused (bad slug, too large, bad front matter)."""

    code = "bad_memory_write"


class InboxFullError(MemoryWriteError):
    """The agent's notes together would pass ``memory.maxInboxBytes``."""

    code = "inbox_full"


# A write refused for the note that is there, not for what was sent (the sender's values are
# fine: the CLI exits 7 for these, 2 for a bad_memory_write).
class MemoryConflictError(MemoryWriteError):
    """The note changed while the write was made: read it again and retry."""

    code = "conflict"


class MemoryBeingSavedError(MemoryConflictError):
    """Another program is saving the note right now (emptied a moment ago, or still changing):
    what is there is no whole text to keep or replace; try again in a moment."""


class MemoryUnreadableError(MemoryWriteError):
    """The note there cannot be read as a write needs it (its front matter, its size)."""

    code = "unreadable"


# Refused for what lies under the note's name, as an inbox that is a link is (``forbidden``, the
# CLI exits 7): no text of the inbox's own is there to read, keep or edit.
class MemoryRefusedError(MemoryWriteError):
    """The note's name is a symbolic link or another non-file placed in the inbox."""

    code = "forbidden"


class InboxGoneError(StorageError):
    """An agent's inbox is gone while the index holds its notes: not made anew by a write."""


@dataclass(frozen=True)
class Written:
    slug: str
    path: Path
    created: bool  # a new note (not a replacement)
    redacted: dict[str, int] = field(default_factory=dict)
    sha256: str = ""
    size: int = 0
    data: bytes = b""  # what was written (indexed as is, never read back through the path)
    mtime_ns: int = 0
    previous: Path | None = None  # where the replaced text was kept (in .trash), if any
    audit_error: str | None = None  # the change is made, but its audit line could not be appended
    ctime_ns: int = 0  # kept in the manifest: a hand edit that keeps size and mtime is still seen
    trash_dropped: tuple[str, ...] = ()  # older texts .trash let go to stay under its cap


@dataclass(frozen=True)
class Deleted:
    trash: Path | None  # where the note's text now lies; None: it held none (``removed``)
    audit_error: str | None = None  # as for Written
    trash_dropped: tuple[str, ...] = ()  # as for Written
    removed: str | None = None  # what was removed in place of a note: "a symbolic link", …


def check_agent(agent: str | None) -> str:
    if agent is None:
        raise MemoryWriteError("this operation needs an agent name (the 'agent' field of the request)")
    if not valid_agent(agent):
        raise MemoryWriteError(agent_name_problem(agent))
    return agent


def check_slug(slug: Any) -> str:
    if slug is None:
        raise MemoryWriteError("'slug' is missing: name the note, e.g. 'nas-backup-setup'")
    if not isinstance(slug, str) or not SLUG_RE.fullmatch(slug):
        raise MemoryWriteError(
            f"invalid slug {quoted(slug)}: use 1-128 characters a-z, 0-9, '_' and '-', starting with a "
            "letter or digit (no folders, no extension), e.g. 'nas-backup-setup'"
        )
    return slug


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _plain(value: Any) -> Any:
    """YAML gives dates as date objects; keep them as the ISO text the user wrote."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


class Inboxes(Retention):
    """Memory writes for every agent of one home; one lock per note serialises writers."""

    def __init__(self, cfg: Config, home: HomeGuard | None = None, clock: SteadyClock | None = None) -> None:
        self.cfg = cfg
        # What a kept text's age is measured against besides the wall clock: time that really
        # passed (a forward step of the wall clock emptied every .trash at once).
        self.clock = clock if clock is not None else SteadyClock(None)
        # The home's agents folder as the daemon started on it (the supervisor's, shared): never
        # written through once it is gone or replaced (an unmounted share's bare mount point).
        self.home = home if home is not None else HomeGuard(cfg)
        # Whether the index holds notes of an agent (set by the memory ops): an inbox gone while
        # they are is not made anew by a write (see ``_dirs``).
        self.indexed: Callable[[str], bool] | None = None
        # Per note: its lock and how many threads hold or wait for it; dropped at 0, or every note
        # ever written kept a lock for the daemon's life.
        self._locks: dict[tuple[str, str], list[Any]] = {}
        self._guard = threading.Lock()
        # The agent-wide side of the note locks: how many threads hold or wait for a note lock
        # of each agent, and the agents whose folders are being retired (``locked`` waits for
        # that to end, so a write never lands in a folder being removed; see ``_retire``).
        self._busy: dict[str, int] = {}
        self._retiring: set[str] = set()
        self._retired = threading.Condition(self._guard)
        self._audit_lock = threading.Lock()
        self._trashes: dict[str, Trash] = {}
        # The state each note was left in by this daemon's last write of it (the most recent
        # ones): a note found so is no other program's save under way, and needs no wait.
        self._left: OrderedDict[tuple[str, str], _State] = OrderedDict()

    def _trash_of(self, agent: str) -> Trash:
        with self._guard:
            return self._trashes.setdefault(agent, Trash())

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
        let through."""
        self._check_content(content, front_matter)
        limit = self.cfg.memory.max_inbox_bytes
        if limit <= 0:
            return
        name = f"{check_slug(slug)}.md"
        try:
            with self._dirs(check_agent(agent), create=False) as (_agent_fd, inbox_fd):
                sizes = dict(_note_sizes(inbox_fd))
        except FileNotFoundError:
            return
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
        (which left an index entry without a file). Re-entrant."""
        key = (agent, slug)
        with self._guard:
            while agent in self._retiring:  # its folders go: the write makes fresh ones after
                self._retired.wait()
            self._busy[agent] = self._busy.get(agent, 0) + 1
            held = self._locks.setdefault(key, [threading.RLock(), 0])
            held[1] += 1
        try:
            with held[0]:
                yield
        finally:
            with self._guard:
                held[1] -= 1
                if held[1] == 0:
                    del self._locks[key]
                self._busy[agent] -= 1
                if self._busy[agent] == 0:
                    del self._busy[agent]

    def write(
        self,
        agent: str,
        slug: str,
        content: str,
        front_matter: dict[str, Any] | None,
        *,
        must_exist: bool,
    ) -> Written:
        """Create or replace (``must_exist=False``) or edit (``must_exist=True``) a memory note."""
        path = self.path_of(agent, slug)
        name = path.name
        self._check_content(content, front_matter)
        front_matter = _names_as_text(front_matter)
        with self.locked(agent, slug), self._dirs(agent, create=True) as (agent_fd, inbox_fd):
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
            self._check_room(inbox_fd, name, len(data) - (len(old) if old is not None else 0))
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
            audit_error = self._audit(agent_fd, "edit" if must_exist else "write", slug, digest, len(data))
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

    def _read_settled(self, inbox_fd: int, name: str, slug: str, left: _State) -> tuple[bytes | None, _State]:
        """The note's bytes and state, once no other program is seen saving it. A note that
        changed while read is read again (what was read may be half of it). One changed a moment
        ago by someone else (not as this daemon's last write left it) is looked at again after a
        pause: still changing, or empty (an editor that truncates, then writes its buffer), it is
        being saved, and its bytes are no text to keep as "previous" nor to replace (the save then
        went into the replaced file, lost)."""
        empty = False
        for _attempt in range(_READ_ATTEMPTS):
            old, seen = _read_existing(inbox_fd, name, slug)
            if _state(inbox_fd, name) != seen:
                continue
            # ctime too: a tool that writes in place and then sets the old mtime back
            if seen is None or seen == left or not _recent(seen[3], reference_ns(inbox_fd, name)):
                return old, seen
            pause(_SETTLE_S)
            empty = not old
            if _state(inbox_fd, name) == seen and not empty:
                return old, seen
        why = "is empty, changed a moment ago" if empty else "kept changing while it was read"
        raise MemoryBeingSavedError(
            f"{slug!r} {why}: another program is saving it (an editor, a sync tool); nothing was "
            "written: try again in a moment"
        )

    def _remember(self, key: tuple[str, str], state: _State) -> None:
        with self._guard:
            self._left[key] = state
            self._left.move_to_end(key)
            while len(self._left) > _REMEMBERED:
                self._left.popitem(last=False)

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
    ) -> os.stat_result:
        """Write the note unless it is no longer the text read (changed during the rendering and
        the .trash copy, or during the temp file's write and fsync): replacing it then would lose
        that change (see :mod:`sidecar.memory.replace`); the copy kept of the old text goes.
        The file replaced is kept in .trash: as ``previous``, else under a name added to
        ``swapped``."""
        slug = name[:-3]

        def install(tmp: str, fd: int) -> None:
            if old is None:
                replace.install_new(inbox_fd, tmp, name)
                return
            hold = f".{slug}--{_stamp()}.{secrets.token_hex(4)}.held"  # trash.HELD: no cap removes it
            replace.install_over(
                inbox_fd,
                tmp,
                name,
                fd,
                old,
                trash_fd=lambda: _trash_fd(inbox_fd),
                hold_name=hold,
                rescue=lambda left: self._rescue(ledger, inbox_fd, slug, left),
                keep=keep,
            )

        def keep(src_fd: int, src: str) -> None:
            # The file replaced takes the place of its copy kept as ``previous`` (same text); with
            # no such copy (it held no text to lose) it is kept anew: a program may still write
            # into it, and the caps and ``memory.trashDays`` decide its stay as for any kept text.
            with _trash_fd(inbox_fd) as trash_fd, ledger.lock:
                if previous is None and _empty(src_fd, src):
                    # No text, and an empty file is no kept text to restore: it waits under a
                    # hidden name (no cap counts or removes it); a start keeps it as a text once a
                    # program wrote into it, and removes it only once it stayed empty and
                    # unchanged for ``memory.trashDays`` (see ``_settle_empty``).
                    if src_fd != trash_fd or not HELD.match(src):
                        hidden = f".{slug}--{_stamp()}.{secrets.token_hex(4)}.held"
                        os.rename(src, hidden, src_dir_fd=src_fd, dst_dir_fd=trash_fd)
                    return
                if previous is None:
                    swapped.append(_move_kept(ledger, src_fd, src, trash_fd, slug))
                    ledger.busy.add(swapped[-1])
                    self._one_stamp_copy(ledger, trash_fd, slug, swapped[-1])
                    return
                kept = previous.name
                ledger.change(
                    trash_fd, kept, 0, lambda: os.replace(src, kept, src_dir_fd=src_fd, dst_dir_fd=trash_fd)
                )

        try:
            try:
                st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if (st and (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)) != seen:
                raise replace.RacedError
            # A replacement keeps the note's permissions (a person's 0644 note stayed no 0600).
            mode = stat.S_IMODE(st.st_mode) & 0o777 if st is not None else None
            return write_in(inbox_fd, name, data, install=install, mode=mode)
        except replace.StrandedError as stranded:  # the note changed: its previous copy stays
            raise StorageError(
                f"{slug!r} was changed by someone else while this write was made, and their save "
                f"could not be put back ({stranded.error.strerror or stranded.error}): the note holds "
                f"this write's text, their save lies in {inbox / stranded.left} (a hidden file, "
                "moved into .trash at the next start): merge it into the note"
            ) from stranded.error
        except replace.RacedError as raced:
            if previous is not None:
                kept = previous.name
                with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash, ledger.lock:
                    ledger.change(trash.fd, kept, -1, lambda: os.unlink(kept, dir_fd=trash.fd))
            if raced.later is not None:  # two saves: the first is the note, the later one kept
                where = (
                    f"is kept in {raced.later}"
                    if raced.later.startswith(".trash/")
                    else f"could not be moved into .trash and lies in {inbox / raced.later} (a hidden "
                    "file, moved into .trash at the next start)"
                )
                raise MemoryConflictError(
                    f"{slug!r} was saved twice by someone else while this write was made; nothing "
                    f"was written: the note holds the earlier save, the later one {where}; merge "
                    "them, then retry"
                ) from None
            raise MemoryConflictError(
                f"{slug!r} was changed by someone else while this write was made; nothing was "
                "written (their text is the note): read it again and retry"
            ) from None

    def _one_stamp_copy(self, ledger: Trash, trash_fd: int, slug: str, kept: str) -> None:
        """At most one copy per note of a file a rewrite replaced with no text to lose (only
        'updated' changed): ``kept`` takes the place of the one before it when that one is still
        as it was moved into .trash (same inode, size, mtime and ctime: no program wrote into it
        since) and holds the same text apart from the stamp (the note may have been edited in
        between: that copy is then its text's only one). Else an agent re-saving an unchanged
        note pushed older kept texts (a deleted note's only copy) out past the caps. Which copy
        that is lies in .trash itself (its ``.<slug>.stamp``), so it holds across restarts.
        Under the ledger's lock, held by the caller."""
        before = read_stamp(trash_fd, slug)
        state = _state(trash_fd, kept)
        # The marker is no kept text: the figures stay valid (no listing of .trash at the next write)
        if state is None:
            ledger.aside(trash_fd, lambda: drop_stamp(trash_fd, slug))
        else:
            ledger.aside(trash_fd, lambda: write_stamp(trash_fd, slug, kept, state))
        if before is None or before[0] == kept or _state(trash_fd, before[0]) != before[1]:
            return  # none, or written into since: a kept text like any other
        name = before[0]
        # The same text apart from the stamp, or it goes on as a kept text: the note may have been
        # edited to another text between the two stamp-only saves (across a restart too), and
        # that copy is then the only one of the text it holds.
        earlier = _kept_text(trash_fd, name)
        if earlier is None or earlier != _kept_text(trash_fd, kept):
            return
        with contextlib.suppress(FileNotFoundError):
            ledger.change(trash_fd, name, -1, lambda: os.unlink(name, dir_fd=trash_fd))
            log.info("memory_stamp_copy_replaced removed=.trash/%s kept=.trash/%s", name, kept)

    def _rescue(self, ledger: Trash, inbox_fd: int, slug: str, name: str) -> str:
        """Move a file of another program's that lies at ``name`` into .trash as a kept text;
        returns its name there."""
        with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash, ledger.lock:
            target = _move_kept(ledger, inbox_fd, name, trash.fd, slug)
        log.warning("memory_write_raced_kept slug=%s kept=.trash/%s", slug, target)
        return target

    def _keep(self, ledger: Trash, inbox_fd: int, slug: str, old: bytes) -> str:
        """Put the replaced text in ``.trash/<slug>--<time>.md`` through the inbox's descriptor
        (the caller holds the note's lock; it caps .trash once its write is made, and releases
        the name from ``ledger.busy`` whatever happens); returns the file name."""
        target = f"{slug}--{_stamp()}.md"
        with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash, ledger.lock:
            ledger.change(trash.fd, target, +1, lambda: write_in(trash.fd, target, old))
            ledger.busy.add(target)
            # its stamp-only copy holds an older text: kept as any other
            ledger.aside(trash.fd, lambda: drop_stamp(trash.fd, slug))
        return target

    def _check_room(self, inbox_fd: int, name: str, growth: int) -> None:
        """Refuse a write that takes the inbox's notes past ``memory.maxInboxBytes`` (an agent in
        a loop would otherwise fill the disk the index shares). Writes of other notes running at
        the same time may pass it by a note each."""
        if self.cfg.memory.max_inbox_bytes > 0 and growth > 0:
            self._check_room_of(_notes_bytes(inbox_fd), name, growth)

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

    def _check_content(self, content: Any, front_matter: Any) -> None:
        if not isinstance(content, str):
            raise MemoryWriteError("'content' must be text")
        if "\0" in content:
            raise MemoryWriteError("'content' contains a NUL byte")
        problem = front_matter_problem(content)
        if problem is not None:  # it would be stored as body text, its keys lost to every reader
            raise MemoryWriteError(
                f"the front matter at the top of 'content' cannot be read ({problem}): fix it, or "
                "give the keys as 'frontmatter'; text that opens with a '---' rule and has no front "
                "matter: put an empty block ('---' and '---' lines) before it"
            )
        if len(content.encode("utf-8")) > self.cfg.memory.max_note_bytes:
            raise MemoryWriteError(
                f"'content' is larger than {self.cfg.memory.max_note_bytes:,} bytes (memory.maxNoteBytes)"
            )
        if front_matter is not None:
            if not isinstance(front_matter, dict) or not all(isinstance(k, str) for k in front_matter):
                raise MemoryWriteError("'frontmatter' must be an object with text keys")
            try:
                json.dumps(front_matter)
            except (TypeError, ValueError) as exc:
                raise MemoryWriteError(f"'frontmatter' is not plain data: {exc}") from exc

    def _sized(
        self, meta: dict[str, Any], body: str, content: str, *, edit_of: dict[str, Any] | None
    ) -> tuple[str, dict[str, int]]:
        """The note's text as written, within ``memory.maxNoteBytes``. An edit that fails for what
        the note there holds (its own large front matter), not for what was sent, is no malformed
        request: unreadable (the CLI exits 7, not 2)."""
        theirs = MemoryUnreadableError if edit_of else MemoryWriteError
        try:
            text, counts = self._render(meta, body)
        except MemoryWriteError as exc:
            raise theirs(str(exc)) from exc
        size, limit = len(text.encode("utf-8")), self.cfg.memory.max_note_bytes
        if size > limit:
            sent = len(content.encode("utf-8")) > limit
            raise (MemoryWriteError if sent else theirs)(
                f"the note would be {size:,} bytes; the limit is {limit:,} "
                "(memory.maxNoteBytes): split it into several notes"
            )
        return text, counts

    def _render(self, meta: dict[str, Any], body: str) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        if self.cfg.memory.redact_secrets:
            body = _redact_into(body, counts)
            meta = _redact_values(meta, counts)
        dumped = dump_front_matter(meta)
        # What the reader would refuse (larger than it reads, too many nodes) must not be written:
        # the note's keys would be lost to every reader and to the next edit.
        _, problem = parse_front_matter(dumped)
        if problem is not None:
            raise MemoryWriteError(f"the front matter cannot be stored: {problem}; keep it small")
        body = body.lstrip("\n")
        return f"---\n{dumped}---\n{body if body.endswith(chr(10)) or not body else body + chr(10)}", counts

    def delete(self, agent: str, slug: str) -> Deleted | None:
        """Move the note to ``<inbox>/.trash/<slug>--<time>.md``; None if there was nothing to delete."""
        path = self.path_of(agent, slug)
        name = path.name
        with self.locked(agent, slug), self._dirs(agent, create=True) as (agent_fd, inbox_fd):
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
                os.fsync(inbox_fd)
                audit_error = self._audit(agent_fd, "delete", slug, hashlib.sha256(b"").hexdigest(), 0)
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
                os.fsync(trash.fd)
                dropped = self._cap_trash(ledger, trash.fd, target)
            os.fsync(inbox_fd)
            audit_error = self._audit(agent_fd, "delete", slug, hashlib.sha256(data).hexdigest(), len(data))
        return Deleted(path.parent / ".trash" / target, audit_error, dropped)

    def _audit(self, agent_fd: int, op: str, slug: str, digest: str, size: int) -> str | None:
        """Append one JSON line to the agent's audit log (append-only, never rewritten). Called
        after the change is made: a line that cannot be appended (disk full, an immutable log)
        is returned as the reason, for the caller to report beside the change, never as if the
        change had failed."""
        line = json.dumps({"time": _now(), "op": op, "slug": slug, "sha256": digest, "bytes": size}) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            # One lock for the rotation: two writers rotating at once would put the fresh log
            # over the generation just kept.
            with self._audit_lock:
                fd = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        return "the audit log is not a regular file"
                    if st.st_size >= _AUDIT_ROTATE_BYTES:
                        # One earlier generation is kept (audit.log.1): bounded over the years.
                        os.replace("audit.log", "audit.log.1", src_dir_fd=agent_fd, dst_dir_fd=agent_fd)
                        fresh = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                        os.close(fd)
                        fd = fresh
                    os.write(fd, line.encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.error("memory_audit_failed op=%s slug=%s error=%s", op, slug, exc)
            return exc.strerror or str(exc)
        return None

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
        with self.locked(agent, slug):
            yield True

    def _clear(self, agent: str, inbox_fd: int, dir_fd: int, name: str, slug: str) -> bool:
        """One leftover of a killed write, or an empty file a write replaced. Only a second name
        of the note itself is removed at once: any other may be a file a write replaced, which a
        program can still be writing into. An empty one waits (see ``_settle_empty``); one
        holding the newest text kept of its note takes that copy's place; any other is kept.
        False when it was left as it was."""
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
            except (OSError, SourceError) as exc:  # the prune's other work goes on (the caps)
                log.warning("inbox_held_not_settled agent=%s file=.trash/%s error=%s", agent, name, exc)

    def _settle_empty(
        self,
        agent: str,
        ledger: Trash,
        *,
        fds: tuple[int, int, int],
        name: str,
        slug: str,
        opened: tuple[int, os.stat_result],
    ) -> bool:
        """An empty leftover holds no text, but a program may still hold it open and write into
        it later (an editor's in-place save that went into the file a write replaced): it waits
        in .trash under a hidden ``.held`` name (no kept text of 0 bytes, no cap counts it) for
        as long as a kept text stays, ``memory.trashDays`` since its last change by the folder's
        clock (for ever with 0), and is removed only then, still empty and unchanged. A write
        into it meanwhile makes it a kept text at the next start or daily prune; one landing
        during the removal is read back through the descriptor still open and kept so. Under
        the ledger's lock; False when it waits on."""
        inbox_fd, dir_fd, trash_fd = fds
        fd, st = opened
        if dir_fd == inbox_fd:  # a temp file in the inbox: it waits in .trash, out of the notes' way
            hidden = f".{slug}--{_stamp()}.{secrets.token_hex(4)}.held"
            os.rename(name, hidden, src_dir_fd=dir_fd, dst_dir_fd=trash_fd)
            log.info("inbox_temp_held agent=%s file=%s held=.trash/%s", agent, name, hidden)
            return True
        days = self.cfg.memory.trash_days
        if days <= 0 or reference_ns(inbox_fd, f"{slug}.md") - st.st_ctime_ns < days * _DAY_NS:
            return False
        if _state(dir_fd, name) != (st.st_ino, 0, st.st_mtime_ns, st.st_ctime_ns):
            return False  # written into or replaced since it was read: judged again at the next prune
        os.unlink(name, dir_fd=dir_fd)
        os.lseek(fd, 0, os.SEEK_SET)
        late = read_fd(os.dup(fd), _MAX_EXISTING + 1)
        if not late:
            log.info("inbox_temp_removed agent=%s file=.trash/%s", agent, name)
            return True
        target = f"{slug}--{_stamp()}.md"
        ledger.change(trash_fd, target, +1, lambda: write_in(trash_fd, target, late))
        log.warning("inbox_temp_kept agent=%s file=.trash/%s kept=.trash/%s", agent, name, target)
        return True


def _file_sizes(dir_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the regular files of a folder (not its folders or links)."""
    with os.scandir(dir_fd) as entries:
        for e in entries:
            with contextlib.suppress(OSError):  # gone meanwhile
                if e.is_file(follow_symlinks=False):
                    yield e.name, e.stat(follow_symlinks=False).st_size


def _note_sizes(inbox_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the inbox's notes: the files memory list shows as its notes (a hidden
    '.x.md', a sync-conflict copy or a numbered copy or a link is none: status counted them while
    list did not)."""
    return (
        (name, size) for name, size in _file_sizes(inbox_fd) if is_markdown_name(name) and not _is_copy(name)
    )


def _is_copy(name: str) -> bool:
    """A copy of the person's text beside a note, waiting to be merged (``inbox_copy_reason``)."""
    return is_markdown_name(name) and inbox_copy_reason(name) is not None


def _notes_bytes(inbox_fd: int) -> int:
    """The size of the inbox's notes together."""
    return sum(size for _name, size in _note_sizes(inbox_fd))


_READ_ATTEMPTS = 3
# A note changed this recently by another program may be in the middle of its save (an editor
# truncates, then writes its buffer; a slow or network disk stretches that gap): looked at again
# after a pause of ``_SETTLE_S`` before it is read as a whole text.
_RECENT_NS = 2_000_000_000
_SETTLE_S = 0.1
pause = time.sleep  # a module function: tests stand in for the other program during the pause
now_ns = time.time_ns  # this machine's clock: the reference only where no file can be made
_DAY_NS = 86_400 * 10**9
_REMEMBERED = 4096  # notes whose last written state is kept (see ``Inboxes._left``)
_AUDIT_ROTATE_BYTES = 8 << 20  # about 50,000 changes per generation
_MAX_EXISTING = 1 << 26  # the largest note an edit or a replacement reads (and keeps in .trash)
# (inode, size, mtime, ctime in ns) of a note, None when there is none: ctime moves with any save,
# even one of the same size within a coarse clock's tick.
_State = tuple[int, int, int, int] | None


def _empty(dir_fd: int, name: str) -> bool:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size == 0


def _state(inbox_fd: int, name: str) -> _State:
    try:
        st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_existing(inbox_fd: int, name: str, slug: str) -> tuple[bytes | None, _State]:
    """The current bytes of a note and its state when read (None, None if there is none); a
    symlink or pipe is refused."""
    try:
        fd = open_regular(name, dir_fd=inbox_fd, follow=False)
    except FileNotFoundError:
        return None, None
    except NotRegularError as exc:
        raise MemoryRefusedError(
            f"memory note {slug!r} is {exc.strerror}, placed in the inbox by hand; nothing was "
            "written: delete the note (that removes the link, never its target), then write it anew"
        ) from exc
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    data = read_fd(fd, _MAX_EXISTING + 1)
    if len(data) > _MAX_EXISTING:  # its copy in .trash would be cut: the note would be lost in part
        raise MemoryUnreadableError(
            f"memory note {slug!r} is larger than {_MAX_EXISTING >> 20} MiB (placed by hand?): sidecar "
            "does not replace it; move it out of the inbox first"
        )
    return data, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _recent(ctime_ns: int, reference: int) -> bool:
    """Whether a note changed a moment ago, judged by its ctime (which only the kernel sets: a
    sync tool or ``touch`` sets mtime to anything) against ``reference``, the time now by the
    clock that set it (see ``_clock_there``); a time ahead of it (that clock stepped back)
    counts as not recent, else such a note would be "being saved" for ever."""
    return 0 <= reference - ctime_ns <= _RECENT_NS


def _clock_there(dir_fd: int, name: str) -> int:
    """The time now by the clock that sets the folder's ctimes: the ctime of a file made there
    (and removed at once). On a share that is the server's clock, which may run seconds or
    hours off this machine's: against this one, a note saved a moment ago looked old (the
    being-saved guard off) or stayed "recent" for hours. This machine's clock when no file
    can be made."""
    probe = f".{name.removesuffix('.md')}.{secrets.token_hex(4)}.clock"  # _PROBE: removed at start
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(probe, flags, 0o600, dir_fd=dir_fd)
    except OSError:
        return now_ns()
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe, dir_fd=dir_fd)


reference_ns = _clock_there  # a module name: tests stand in for a share's clock


def _read_back(dir_fd: int, name: str) -> bytes | None:
    """A file's bytes (up to what a write reads), None when there is none to read."""
    try:
        return read_fd(open_regular(name, dir_fd=dir_fd, follow=False), _MAX_EXISTING + 1)
    except (FileNotFoundError, NotRegularError):
        return None


def _newest_kept(trash_fd: int, slug: str) -> tuple[str, bytes | None] | None:
    """The name and text of the newest text kept of ``slug`` in .trash (lists the folder: at
    start only)."""
    names = [n for n in os.listdir(trash_fd) if (m := KEPT.match(n)) and n[: m.start(1) - 2] == slug]
    if not names:
        return None
    newest = max(names, key=lambda n: n[len(slug) + 2 :])
    return newest, _read_back(trash_fd, newest)


def _move_kept(ledger: Trash, src_fd: int, name: str, trash_fd: int, slug: str) -> str:
    """Rename ``name`` (in ``src_fd``) into .trash as a new kept text of ``slug``, under the
    ledger's lock (held by the caller); returns the name given."""
    target = f"{slug}--{_stamp()}.md"
    while replace.exists_in(trash_fd, target):
        target = f"{slug}--{_stamp()}.md"
    move = lambda: os.rename(name, target, src_dir_fd=src_fd, dst_dir_fd=trash_fd)  # noqa: E731
    ledger.change(trash_fd, target, +1, move)
    return target


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")


@contextlib.contextmanager
def _trash_fd(inbox_fd: int) -> Iterator[int]:
    with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash:
        yield trash.fd


def write_in(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    install: Callable[[str, int], None] | None = None,
    mode: int | None = None,
) -> os.stat_result:
    """Atomic write of ``name`` inside the folder ``dir_fd``: a new temp file (O_EXCL, no
    symlink followed; 0600, or ``mode``), fsync, rename within the same descriptor (or
    ``install(temp name, its descriptor)``, which puts it in place or raises), fsync of the
    folder. Returns the written file's stat, taken through its descriptor once in place (the
    rename moves ctime; a stat by name could see a file put there since)."""
    stem = name[:-3] if name.endswith(".md") else name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = f".{stem}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        if mode is not None and mode != 0o600:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        if install is None:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            install(tmp, fd)
        st = os.fstat(fd)
    except BaseException:
        # Only our own file: after an exchange the temp name can hold another program's.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(tmp, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)
    os.fsync(dir_fd)
    return st


def _kept_text(trash_fd: int, name: str) -> bytes | None:
    """A kept text's bytes apart from its front matter's ``updated`` line; None when it cannot be
    read. Bytes, not the parsed note: YAML drops comments and quoting, and a text that is no UTF-8
    decodes two different names alike, so copies that differ there are two texts."""
    try:
        data = read_fd(open_regular(name, dir_fd=trash_fd, follow=False), _MAX_EXISTING + 1)
    except OSError:  # NotRegularError too
        return None
    return _unstamped_bytes(data)


def _unstamped_bytes(data: bytes) -> bytes:
    """``data`` without the ``updated:`` lines of its leading front matter (all of it when it has
    none: then only the very same bytes are the same text)."""
    lines = data.splitlines(keepends=True)
    if not lines or lines[0].rstrip(b"\r\n") != b"---":
        return data
    for end in range(1, len(lines)):
        if lines[end].rstrip(b"\r\n") in (b"---", b"..."):
            head = [line for line in lines[1:end] if not line.startswith(b"updated:")]
            return b"".join([lines[0], *head, *lines[end:]])
    return data


def _unstamped(text: str) -> tuple[dict[str, Any], str]:
    meta, body = split_front_matter(text)
    return {k: v for k, v in meta.items() if k != "updated"}, body


def _names_as_text(front_matter: dict[str, Any] | None) -> dict[str, Any] | None:
    """The names an agent gives (``aliases``, ``tags``, ``title``, any case) as the text it
    sent: a number is written as its text, quoted (``aliases: [7]`` names the note "7", which
    every reader reads alike). A yes/no is refused: JSON ``true`` is no name an agent means (the
    text "true" is sent as text)."""
    if front_matter is None:
        return None

    def text(key: str, value: Any, depth: int) -> Any:
        if isinstance(value, bool):
            raise MemoryWriteError(
                f"'frontmatter' {key!r} holds {json.dumps(value)}, a yes/no, not a name: send a "
                f'name as text (["{json.dumps(value)}"] for the name "{json.dumps(value)}")'
            )
        if isinstance(value, int | float):
            return str(value)
        if isinstance(value, list) and depth > 0:  # a link written as a list: [[Bar]]
            return [text(key, item, depth - 1) for item in value]
        return value

    return {k: text(k, v, 2) if is_name_property(k) else v for k, v in front_matter.items()}


def _redact_into(text: str, counts: dict[str, int], key: str | None = None) -> str:
    clean, found = redact_written(text) if key is None else redact_entry(key, text)
    for kind, n in found.items():
        counts[kind] = counts.get(kind, 0) + n
    return clean


def _redact_values(value: Any, counts: dict[str, int], key: str | None = None) -> Any:
    """Redact every value inside front matter, each read with its key (``password: …``); keys
    are names, not secrets. A number under a secret's key (``password: 12345678``) is read as text."""
    if isinstance(value, dict):
        return {k: _redact_values(v, counts, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v, counts, key) for v in value]
    if isinstance(value, str):
        clean = _redact_into(value, counts, key)
        return value if clean == value else clean  # a Written value stays as written
    if isinstance(value, int | float) and not isinstance(value, bool) and key is not None:
        clean = _redact_into(str(value), counts, key)
        return value if clean == str(value) else clean
    return value
