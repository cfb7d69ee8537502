"""The roots a sweep reads (``roots``): every agent inbox with something in it to report, the wiki
and the vault. Whether an inbox is in use is looked at again only when its folder changed.
Imports ``config``, ``confine``, ``sources`` and ``notenames``."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from sidecar.config import Config, valid_agent
from sidecar.vault.confine import (
    NotPrivateError,
    decodable,
    open_private_dir,
    private_dirs,
)
from sidecar.vault.notenames import _hidden_note_name, is_markdown_name
from sidecar.vault.sources import Root, inbox_root, vault_roots


def roots(cfg: Config) -> list[Root]:
    """Every agent inbox with a note in it, the vault (minus the wiki) and the wiki, in priority
    order for vectors. An empty inbox is no root (see ``inboxes_in_use``)."""
    try:
        names = sorted(n for n in os.listdir(cfg.agents_dir) if valid_agent(n))
    except OSError:  # no agents folder yet (or not a folder: nothing of it is read)
        names = []
    _LOOKED.keep(cfg.agents_dir, names)
    return [inbox_root(cfg, n) for n in inboxes_in_use(cfg, names)] + vault_roots(cfg)


def inboxes_in_use(cfg: Config, agents: Sequence[str]) -> list[str]:
    """The agents of ``agents`` whose inbox a sweep has to read: one whose scan has something to
    report (a note, or a file it leaves out and counts), or that it refuses to read (a symlink,
    another user's: its scan says so). An inbox with nothing in it but its .trash and temp
    files, or no inbox at all, is no root: every agent that wrote once kept a status line and a
    scan per sweep for good. One listing of each inbox, stopped at its first such entry, and only
    when its folder changed since the last look (see ``_Looked``); not bounded by the probe
    timeout as a share's listing is: the inboxes lie in the home, on the disk the index itself
    is written to."""
    if not agents:
        return []
    agents_dir = cfg.agents_dir
    try:
        with private_dirs(agents_dir.parent, [agents_dir.name], create=False, what="agents") as (fd,):
            return [a for a in agents if _LOOKED.in_use(fd, agents_dir, a)]
    except FileNotFoundError:
        return []
    except (NotPrivateError, OSError):
        return list(agents)  # each inbox's scan says why it is not read


# A folder changed this recently may change again within the same tick of the file system's
# clock, its times unchanged: its answer is not kept (as git does with racy entries).
_SETTLED_NS = 2_000_000_000
_Ident = tuple[int, ...]


class _Looked:
    """What ``_in_use`` said of each inbox, kept with the identity and times of its folders: an
    entry added, removed or renamed in ``memory/`` moves its mtime and ctime, a chmod or chown
    its ctime, so an unchanged folder says the same again. It costs two stats instead of two
    opens and a listing: every sweep (file events' too) looked at every agent folder there is,
    358 ms at 10,000. Only private folders changed more than ``_SETTLED_NS`` ago are kept; a
    folder that is a link or another user's is looked at each time (its scan refuses it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[Path, str], tuple[_Ident, bool]] = {}

    def in_use(self, agents_fd: int, agents_dir: Path, agent: str) -> bool:
        key = (agents_dir, agent)
        ident = _inbox_ident(agents_fd, agent)  # before the listing: a change after it is seen
        if ident is not None:
            with self._lock:
                seen = self._seen.get(key)
            if seen is not None and seen[0] == ident:
                return seen[1]
        used = _in_use(agents_fd, agent)
        with self._lock:
            if ident is not None and time.time_ns() - max(ident[-2:]) > _SETTLED_NS:
                self._seen[key] = (ident, used)
            else:
                self._seen.pop(key, None)
        return used

    def keep(self, agents_dir: Path, agents: Collection[str]) -> None:
        """Forget the inboxes of ``agents_dir`` not in ``agents`` (their folders are gone)."""
        names = set(agents)
        with self._lock:
            for key in [k for k in self._seen if k[0] == agents_dir and k[1] not in names]:
                del self._seen[key]


_LOOKED = _Looked()


def _inbox_ident(agents_fd: int, agent: str) -> _Ident | None:
    """Identity, mode and owner of ``<agent>/`` and ``<agent>/memory/``, and the times of the
    latter (last); None unless both are private folders (nothing of them is kept then)."""
    try:
        outer = os.stat(agent, dir_fd=agents_fd, follow_symlinks=False)
        if not _private_dir(outer):
            return None  # a link (the second stat would follow it), another user's, not 0700
        inbox = os.stat(f"{agent}/memory", dir_fd=agents_fd, follow_symlinks=False)
    except OSError:
        return None
    if not _private_dir(inbox):
        return None
    return (
        outer.st_dev,
        outer.st_ino,
        outer.st_mode,
        inbox.st_dev,
        inbox.st_ino,
        inbox.st_mode,
        inbox.st_mtime_ns,
        inbox.st_ctime_ns,
    )


def _private_dir(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077


def _in_use(agents_fd: int, agent: str) -> bool:
    """Whether the inbox of ``agent`` (in the open agents folder) is to be swept."""
    try:
        agent_fd = open_private_dir(agents_fd, agent, create=False, what="inbox")
        try:
            inbox_fd = open_private_dir(agent_fd, "memory", create=False, what="inbox")
        finally:
            os.close(agent_fd)
    except FileNotFoundError:
        return False
    except (NotPrivateError, OSError):
        return True
    try:
        with os.scandir(inbox_fd) as entries:
            return any(_reported(e) for e in entries)
    except OSError:
        return True  # its scan says what fails
    finally:
        os.close(inbox_fd)


def _reported(entry: os.DirEntry[str]) -> bool:
    """Whether a scan of a (flat) inbox yields something for this entry (see ``_entry``): a note
    name, a hidden note, a name that does not decode, a folder. From the listing's file type
    (a stat only for a symlink)."""
    name = entry.name
    try:
        if name.startswith("."):  # .trash and temp files are not reported; a hidden note is
            return _hidden_note_name(name) and entry.is_file(follow_symlinks=False)
        return not decodable(name) or is_markdown_name(name) or entry.is_dir()
    except OSError:
        return True
