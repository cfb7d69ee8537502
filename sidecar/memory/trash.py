"""What an agent's ``.trash`` folder holds: the texts a write replaced or a delete removed, named
``<slug>--<time>.md``, and the ledger that counts them against the caps without listing the folder
on every write. Imports confine only; the inbox (:mod:`sidecar.memory.inbox`, its pruning in
:mod:`sidecar.memory.retention`) decides what is kept and when the caps are applied.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import stat
import threading
from typing import Any

from sidecar.vault.confine import open_private_dir, open_regular, read_fd
from sidecar.vault.timeout import step

log = logging.getLogger(__name__)

KEPT = re.compile(r"^[a-z0-9][a-z0-9_-]*--(\d{8}T\d{12})\.md$")  # <slug>--<time>.md in .trash
TRASH_TEMP = re.compile(r"^\.[a-z0-9][a-z0-9_-]*--\d{8}T\d{12}\.[0-9a-f]{8}\.tmp$")  # _keep's, in .trash
# A write's hard link to the note it replaces (the fallback without an exchange), or a file a write
# replaced that held no text (waiting in case a program still writes into it): made and used
# outside the ledger's lock, under the note's, so no cap and no removal by age touch it; a start,
# and the daily prune for a note no write is using, judge each (kept as a text, or removed when a
# second name of the note or empty and unchanged for memory.trashDays).
HELD = re.compile(r"^\.([a-z0-9][a-z0-9_-]*)--\d{8}T\d{12}\.[0-9a-f]{8}\.held$")
# Which kept text of a note is the copy its last stamp-only rewrite made (one per note), and that
# copy's state right after the move: ``[name, inode, size, mtime_ns, ctime_ns]`` as JSON. Kept in
# the folder itself, so a restart still knows it (held in memory, every restart left one more).
STAMP = re.compile(r"^\.([a-z0-9][a-z0-9_-]*)\.stamp$")
_STAMP_MAX = 4096

State = tuple[int, int, int, int]  # inode, size, mtime and ctime in ns


def read_stamp(trash_fd: int, slug: str) -> tuple[str, State] | None:
    """The stamp-only copy of ``slug`` and its state when moved, None when none is known (no
    marker, or one a crash cut: that copy stays as a kept text like any other)."""
    try:
        fd = open_regular(f".{slug}.stamp", dir_fd=trash_fd, follow=False)
    except OSError:  # NotRegularError too
        return None
    try:
        name, *state = json.loads(read_fd(fd, _STAMP_MAX))
    except (ValueError, TypeError):
        return None
    if not isinstance(name, str) or KEPT.match(name) is None or len(state) != 4:
        return None
    if not all(isinstance(v, int) for v in state):
        return None
    return name, (state[0], state[1], state[2], state[3])


def write_stamp(trash_fd: int, slug: str, name: str, state: State) -> None:
    """Name ``name`` as the stamp-only copy of ``slug`` (not synced: a marker lost to a crash,
    or not written for an error, only leaves one more kept text; the write it serves goes on).
    Never blocks: a fifo or device at the marker's name (the caller holds the ledger's lock,
    which the agent's other writes wait on) is refused and removed, as is any other file that
    is not a regular one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(f".{slug}.stamp", flags, 0o600, dir_fd=trash_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(0, "not a regular file")
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps([name, *state]).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("memory_stamp_marker_failed slug=%s error=%s", slug, exc)
        drop_stamp(trash_fd, slug)


def drop_stamp(trash_fd: int, slug: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(f".{slug}.stamp", dir_fd=trash_fd)


def trash_dir(inbox_fd: int, *, create: bool = True) -> int:
    return open_private_dir(inbox_fd, ".trash", create=create, what="the trash folder")


class Fd:
    """A folder's descriptor, for ``contextlib.closing``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


def is_time(stamp: str) -> bool:
    try:
        dt.datetime.strptime(stamp, "%Y%m%dT%H%M%S%f")
    except ValueError:  # digits that are no date: not ours to remove
        return False
    return True


def over(used: int, files: int, caps: tuple[int, int]) -> bool:
    return (caps[0] > 0 and used > caps[0]) or (caps[1] > 0 and files > caps[1])


# (time in the name, name, allocated bytes, mtime) of a kept text
_Kept = tuple[str, str, int, float]
# (device, inode, mtime, ctime in ns) of a .trash folder: any entry added or removed moves the times
_Ident = tuple[int, int, int, int]


def _ident(dir_fd: int) -> _Ident:
    st = os.fstat(dir_fd)
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _disk_use(st: os.stat_result) -> int:
    """What a file takes on disk: a 600-byte text takes a 4 KiB block (its size said 6x less)."""
    return st.st_blocks * 512


def _scan(trash_fd: int) -> list[_Kept]:
    """The kept texts of a .trash folder: regular files named by this daemon (no one else's)."""
    out: list[_Kept] = []
    step()
    with os.scandir(trash_fd) as entries:
        for e in entries:
            step()
            m = KEPT.match(e.name)
            if m is None:
                continue
            with contextlib.suppress(OSError):  # gone meanwhile
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    out.append((m.group(1), e.name, _disk_use(st), st.st_mtime))
    return out


def name_time(when: float) -> str:
    """``when`` (epoch seconds) as a kept text's name writes a time (local, fixed width digits,
    so that times compare as text)."""
    return dt.datetime.fromtimestamp(when).strftime("%Y%m%dT%H%M%S%f")


def _last_change(kept: _Kept) -> str:
    """When a kept text was last changed, as its name writes a time: the later of its name's
    time (when it was kept) and its mtime. An untouched one's mtime is its note's last write,
    before the keep, so it goes by its name; one a person edited in .trash goes by that edit.
    Not its ctime (the age prune's third time, see retention): a copy or restore of the folder
    sets that alike for every text, and the caps would then go by the order files were copied."""
    return max(kept[0], name_time(kept[3]))


class Trash:
    """What one agent's .trash holds as the caps count it, kept up to date by this daemon's own
    changes, so that a write does not list and stat the whole folder (it did, and a write over
    100,000 kept texts took 17x as long). ``seen`` is the folder's identity and times after our
    last change: anything else that changed it since (the user, a sync tool, another process)
    makes the next check count it again, so the figures stay right when files are removed
    behind our back (a change within the same clock tick as ours can be missed until the daily
    prune counts afresh). The folder is listed again only when a cap is passed, and then emptied
    down to 95% of the caps, so the writes that follow do not list it again. Use under ``lock``
    (several writers of one agent share its .trash)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files = 0
        self.used = 0  # allocated bytes
        self.seen: _Ident | None = None  # None: count afresh at the next check
        self.busy: set[str] = set()  # kept texts whose write is not done: no cap removes them

    def counted(self, trash_fd: int) -> None:
        """Bring the figures up to date (listing the folder only if it changed behind our back)."""
        ident = _ident(trash_fd)
        if ident != self.seen:
            self._count(_scan(trash_fd), ident)

    def aside(self, trash_fd: int, act: Any) -> None:
        """Do ``act``, our own change of a file the caps do not count (a stamp-only marker), and
        keep the figures valid if they were: else it moved the folder's times like a change
        behind our back, and the next write listed and counted the whole folder again."""
        valid = self.seen is not None and _ident(trash_fd) == self.seen
        act()
        if valid:
            self.seen = _ident(trash_fd)

    def _count(self, kept: list[_Kept], ident: _Ident | None) -> None:
        self.files, self.used, self.seen = len(kept), sum(k[2] for k in kept), ident

    def change(self, trash_fd: int, name: str, sign: int, act: Any) -> None:
        """Do ``act`` (our own change: ``name`` added, sign +1, removed, -1, or put in the place
        of another file so named, 0) and count it, if the figures were right before it; otherwise
        they are counted at the next check."""
        valid = self.seen is not None and _ident(trash_fd) == self.seen
        before = self._kept_size(trash_fd, name) if sign <= 0 and valid else None
        act()
        if not valid:
            return
        after = self._kept_size(trash_fd, name) if sign >= 0 else None
        if sign < 0 and before is not None:
            self.files -= 1
            self.used -= before
        elif sign > 0 and after is not None:
            self.files += 1
            self.used += after
        elif sign == 0:
            self.files += (after is not None) - (before is not None)
            self.used += (after or 0) - (before or 0)
        self.seen = _ident(trash_fd)

    @staticmethod
    def _kept_size(trash_fd: int, name: str) -> int | None:
        try:
            st = os.stat(name, dir_fd=trash_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return _disk_use(st) if stat.S_ISREG(st.st_mode) and KEPT.match(name) else None

    def release(self, name: str) -> None:
        with self.lock:
            self.busy.discard(name)

    def shed(self, trash_fd: int, caps: tuple[int, int], keep: set[str]) -> list[str]:
        """Remove the oldest kept texts (not those in ``keep`` nor busy ones) down to 95% of
        the caps; returns their names. Lists the folder: it alone knows which are the oldest.
        Oldest by last change (see ``_last_change``): ordered by their names alone, the text a
        person had just edited in .trash was the first to go."""
        ident = _ident(trash_fd)
        kept = _scan(trash_fd)
        self._count(kept, ident)
        low = (caps[0] - caps[0] // 20, caps[1] - caps[1] // 20)
        removed: list[str] = []
        # The newest kept text always stays, whoever caps (the prune at start removed a large
        # one a write had just kept and named as its 'previous').
        newest = {max(kept)[1]} if kept else set()
        kept.sort(key=lambda k: (_last_change(k), k[0], k[1]))
        for _when, name, size, _mtime in kept:
            if not over(self.used, self.files, low):
                break
            if name in keep or name in self.busy or name in newest:
                continue
            try:
                os.unlink(name, dir_fd=trash_fd)
                removed.append(name)
            except FileNotFoundError:  # removed meanwhile (by the user)
                pass
            except OSError as exc:  # cannot be removed (immutable): the next oldest goes instead
                log.warning("memory_trash_cap_failed name=%s error=%s", name, exc)
                continue
            self.files -= 1
            self.used -= size
        if removed:
            self.seen = _ident(trash_fd)
        return removed
