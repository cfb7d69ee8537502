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
given; secrets are redacted before anything reaches disk.

``Inboxes`` keeps here the reading of what a note holds (settled, never a save under way), its
replacement with the old text kept in .trash, the audit log and the settling of an emptied note,
with the module names tests stand in for (``pause``, ``now_ns``, ``reference_ns``, ``write_in``,
``read_fd``, ``_MAX_EXISTING``, ``_AUDIT_ROTATE_BYTES``); its other parts are mixins:
``inbox_notes`` (the write and delete of a note, its folders and lock), ``inbox_room`` (an
inbox's room and its .trash caps), ``inbox_tidy`` (the start's tidying), ``inbox_text`` (a
note's text checked, rendered and redacted), with ``inbox_types`` (errors, results, checks of
names) and ``inbox_files`` (the inbox's files, functions only). Imports config, confine,
sources, errors, replace (putting the written text in place), trash (the kept texts' ledger)
and retention (how long kept texts, empty agents and their audit history stay).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.config import Config
from sidecar.contracts.errors import StorageError
from sidecar.memory import replace
from sidecar.memory.inbox_files import (
    _MAX_EXISTING,
    _empty,
    _move_kept,
    _recent,
    _stamp,
    _State,
    _state,
    _trash_fd,
)
from sidecar.memory.inbox_notes import Notes
from sidecar.memory.inbox_room import Room
from sidecar.memory.inbox_text import NoteText, _now, _unstamped_bytes
from sidecar.memory.inbox_tidy import Tidy
from sidecar.memory.inbox_types import (
    MemoryBeingSavedError,
    MemoryConflictError,
    MemoryRefusedError,
    MemoryUnreadableError,
)
from sidecar.memory.retention import Retention
from sidecar.memory.trash import HELD, Fd, Trash, drop_stamp, read_stamp, trash_dir, write_stamp
from sidecar.runtime.steadyclock import SteadyClock
from sidecar.vault.confine import (
    NotRegularError,
    open_regular,
    read_fd,
)
from sidecar.vault.homeguard import HomeGuard
from sidecar.vault.timeout import step

log = logging.getLogger(__name__)


class Inboxes(Notes, Room, Tidy, NoteText, Retention):
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
        # Per agent: a change whose audit line hangs in one agent's share (left there by a bounded
        # change) holds no other agent's change (one lock for all held every agent's).
        self._audit_locks: dict[str, threading.Lock] = {}
        self._trashes: dict[str, Trash] = {}
        # The state each note was left in by this daemon's last write of it (the most recent
        # ones): a note found so is no other program's save under way, and needs no wait.
        self._left: OrderedDict[tuple[str, str], _State] = OrderedDict()

    def _trash_of(self, agent: str) -> Trash:
        with self._guard:
            return self._trashes.setdefault(agent, Trash())

    def _read_settled(self, inbox_fd: int, name: str, slug: str, left: _State) -> tuple[bytes | None, _State]:
        """The note's bytes and state, once no other program is seen saving it. A note that
        changed while read is read again (what was read may be half of it). One changed a moment
        ago by someone else (not as this daemon's last write left it) is looked at again after a
        pause: still changing, or empty (an editor that truncates, then writes its buffer), it is
        being saved, and its bytes are no text to keep as "previous" nor to replace (the save then
        went into the replaced file, lost)."""
        empty = False
        for _attempt in range(_READ_ATTEMPTS):
            step()
            old, seen = _read_existing(inbox_fd, name, slug)
            step()
            if _state(inbox_fd, name) != seen:
                continue
            # ctime too: a tool that writes in place and then sets the old mtime back
            if seen is None or seen == left or not _recent(seen[3], reference_ns(inbox_fd, name)):
                return old, seen
            pause(_SETTLE_S)
            empty = not old
            step()
            if _state(inbox_fd, name) == seen and not empty:
                return old, seen
        why = "is empty, changed a moment ago" if empty else "kept changing while it was read"
        raise MemoryBeingSavedError(
            f"{slug!r} {why}: another program is saving it (an editor, a sync tool); nothing was "
            "written: try again in a moment"
        )

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
                        step()
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

    def _audit(self, agent_fd: int, op: str, slug: str, digest: str, size: int, *, agent: str) -> str | None:
        """Append one JSON line to the agent's audit log (append-only, never rewritten). Called
        after the change is made: a line that cannot be appended (disk full, an immutable log)
        is returned as the reason, for the caller to report beside the change, never as if the
        change had failed."""
        line = json.dumps({"time": _now(), "op": op, "slug": slug, "sha256": digest, "bytes": size}) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            # One lock per log for the rotation: two writers rotating at once would put the fresh
            # log over the generation just kept.
            with self._guard:
                lock = self._audit_locks.setdefault(agent, threading.Lock())
            with lock:
                step()
                fd = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        return "the audit log is not a regular file"
                    if st.st_size >= _AUDIT_ROTATE_BYTES:
                        # One earlier generation is kept (audit.log.1): bounded over the years.
                        step()
                        os.replace("audit.log", "audit.log.1", src_dir_fd=agent_fd, dst_dir_fd=agent_fd)
                        fresh = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                        os.close(fd)
                        fd = fresh
                    os.write(fd, line.encode("utf-8"))
                    step()
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.error("memory_audit_failed op=%s slug=%s error=%s", op, slug, exc)
            return exc.strerror or str(exc)
        return None

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
            step()
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


_READ_ATTEMPTS = 3
_SETTLE_S = 0.1
pause = time.sleep  # a module function: tests stand in for the other program during the pause
now_ns = time.time_ns  # this machine's clock: the reference only where no file can be made
_DAY_NS = 86_400 * 10**9
_AUDIT_ROTATE_BYTES = 8 << 20  # about 50,000 changes per generation


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
            step()
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
        step()
        os.fsync(fd)
        if install is None:
            step()
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
    step()
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
