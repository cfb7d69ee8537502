"""Roots, references and safe paths: which files are notes, and what each one is called.

A *key* names a note inside the index and is unique across agents: ``vault/<path>``, ``wiki/<path>``,
``memory/<agent>/<slug>`` (paths without ``.md``; a Canvas keeps its ``.canvas``: ``vault/Plan.canvas``,
as Obsidian names it beside a ``Plan.md``). The *reference* a client sees is the key, except
that an agent sees its own memory as ``memory/<slug>``.
Imports ``config``, ``confine``, ``canvas`` and ``contracts`` (errors, the source names).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Collection, Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import NotFoundError, SourceError, UnreadableError
from sidecar.contracts.printable import quoted
from sidecar.contracts.wire import SOURCES
from sidecar.vault.birth import birth_ns
from sidecar.vault.canvas import CanvasError, canvas_markdown, is_canvas_name
from sidecar.vault.confine import (
    NotPrivateError,
    NotRegularError,
    decodable,
    open_private_dir,
    open_regular,
    opened_path,
    private_dirs,
    read_fd,
)

log = logging.getLogger(__name__)

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}$")
_DEBRIS = re.compile(r"^~\$|~$|\.(tmp|swp|swx|bak)$", re.IGNORECASE)  # editor temp files
# A sync tool's copy of a note edited on two devices at once: not a note of its own (it would be
# found beside the note), but counted as skipped with this reason: it may hold the other device's
# edits, and status and `why` then say there is a conflict to merge. Each form carries the date
# the tool writes, so a note merely titled "(conflicted copy)" is read as any other.
CONFLICT_REASON = "a sync tool's conflict copy (merge it into the note, then delete it)"
# In an inbox, which the daemon names by slug alone, a file named as a note's copy ("plan (1).md",
# as file managers and some sync tools name a second file of the same name) is the person's text
# beside the note, not a note: skipped with this reason, and counted with the conflict copies as
# text waiting to be merged.
COPY_REASON = "a copy of a note made beside it ('<slug> (1).md'; merge it into the note, then delete it)"
_NUMBERED_COPY = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127} \(\d+\)\.md$")
# A note of an inbox that is a symbolic link: never followed, so never read nor indexed.
LINK_REASON = "symlink in a memory inbox (never followed)"
_CONFLICTS = re.compile(
    "|".join(
        (
            r"\.sync-conflict-\d{8}-\d{6}",  # Syncthing
            r"\([^()]*conflicted copy \d{4}-\d{2}-\d{2}",  # Dropbox, Nextcloud
            # Obsidian Sync: "(Conflicted copy DEVICE YYYYMMDDHHMM)" (its help shows seconds too)
            r"\(Conflicted copy [^()]* \d{12}(?:\d{2})?\)",
            r"_conflict-\d{8}-\d{6}",  # ownCloud
            r"\(SFConflict [^()]*\d{4}-\d{2}-\d{2}",  # Seafile
            r" \(Case Conflict(?: \d+)?\)",  # Dropbox: names differing by case only
            # OneDrive: "-" and the machine's default name, as Windows writes it (upper case, a
            # digit among its seven characters: "buy-laptop-battery.md" is a note).
            r"(?-i:-(?:DESKTOP|LAPTOP)-(?=[A-Z0-9]{0,6}[0-9])[A-Z0-9]{7}(?:-\d+)?\.md)$",
        )
    ),
    re.IGNORECASE,
)  # one pattern: every name of every scan is tried


@dataclass(frozen=True)
class Root:
    """One folder of notes of one source."""

    source: str
    path: Path
    agent: str = ""
    exclude: str | None = None  # a folder to leave out, relative (the wiki inside the vault)
    within: Path | None = None  # the folder this root must lie in, however linked (the wiki: the vault)

    @property
    def name(self) -> str:
        return f"memory/{self.agent}" if self.source == "memory" else self.source

    def key_of(self, rel: str) -> str:
        """Index key of a note at ``rel`` (POSIX, relative to the root, with .md)."""
        stem = rel[:-3] if rel.lower().endswith(".md") else rel
        if self.source == "memory":
            return f"memory/{self.agent}/{stem}"
        return f"{self.source}/{stem}"

    def key_of_path(self, path: Path) -> str:
        """Index key of a note file inside this root."""
        return self.key_of(path.relative_to(self.path).as_posix())


@dataclass(frozen=True)
class NoteFile:
    """A note found by a scan: its key, absolute path and the stat fields the sweep compares."""

    key: str
    root: Root
    path: Path
    rel: str
    mtime_ns: int
    size: int
    ctime_ns: int = 0  # status change time: an edit that keeps size and mtime still changes it
    # The file itself (device, inode): a rename keeps it, a copy never has it. 0 where it is no
    # evidence of that (see ``file_id``).
    dev: int = 0
    ino: int = 0
    # (device, inode) of a file with other links (a hard-linked backup of a note, ``cp -al``):
    # never evidence, and it marks the note it shares them with (``Manifest.forget_ids``).
    shared: tuple[int, int] = (0, 0)

    @classmethod
    def of(
        cls, key: str, root: Root, path: Path, rel: str, st: os.stat_result, *, linked: bool = False
    ) -> NoteFile:
        """The note at ``path`` with its stat; ``linked``: found through a file symlink."""
        dev, ino = (0, 0) if linked else file_id(st)
        shared = (stored_id(st.st_dev), stored_id(st.st_ino)) if st.st_nlink > 1 and not linked else (0, 0)
        return cls(
            key, root, path, rel, stamp_ns(st.st_mtime_ns), st.st_size, stamp_ns(st.st_ctime_ns), dev, ino,
            shared,
        )  # fmt: skip

    def born(self) -> int:
        """Its file's birth time (``birth.birth_ns``; a statx call), 0 where not known or where
        its inode is no evidence: asked only where a note is recorded or a move is decided."""
        return birth_ns(self.path, self.ino % 2**64) if self.ino else 0

    def ids(self) -> tuple[int, int, int]:
        """(device, inode, birth time) as the manifest records them."""
        return self.dev, self.ino, self.born()


_ID_MAX = 2**63  # SQLite keeps signed 64-bit integers; st_dev and st_ino are unsigned 64-bit


def file_id(st: os.stat_result) -> tuple[int, int]:
    """(device, inode) of a file as the manifest stores them (signed 64-bit), or (0, 0) when they
    say nothing of which file it is: no inode (some SMB and FUSE shares report 0), or more links
    than one (a hard-linked backup, ``cp -al`` or ``rsync --link-dest``, shares the inode of the
    note it backs up while that note is still there)."""
    if not st.st_ino or st.st_nlink != 1:
        return 0, 0
    return stored_id(st.st_dev), stored_id(st.st_ino)


def stored_id(n: int) -> int:
    """A device or inode number as the manifest stores it (signed 64-bit)."""
    return n - 2**64 if n >= _ID_MAX else n


# SQLite keeps 64-bit integers: a file time after 2262-04-11 (a bad clock, a restored backup;
# ext4 allows 2446) in nanoseconds does not fit, and one such note failed every sweep's batch.
_NS_MAX = 2**63 - 1


def stamp_ns(ns: int) -> int:
    """A file time in nanoseconds, clamped to what the manifest can store."""
    return max(-_NS_MAX, min(ns, _NS_MAX))


@dataclass(frozen=True)
class Skipped:
    """A file a scan left out, and why (counted in health)."""

    path: Path
    reason: str
    size: int = 0  # its bytes, where the size is the reason (too large); else 0
    cause: str = ""  # the system's words for why it could not be read ("Input/output error")


def unreadable_skip(path: Path, exc: OSError, reason: str) -> Skipped:
    """A folder or note whose listing or stat failed with ``exc``: ``reason`` with the error's
    words, or ``PATH_TOO_LONG`` (no later sweep reads it: not a passing fault of the share)."""
    if exc.errno == errno.ENAMETOOLONG:
        return Skipped(path, PATH_TOO_LONG)
    return Skipped(path, reason, cause=exc.strerror or type(exc).__name__)


def agent_inbox(cfg: Config, agent: str) -> Path:
    return cfg.agents_dir / agent / "memory"


def inbox_root(cfg: Config, agent: str) -> Root:
    return Root("memory", agent_inbox(cfg, agent), agent=agent)


def roots(cfg: Config) -> list[Root]:
    """Every agent inbox with a note in it, the vault (minus the wiki) and the wiki, in priority
    order for vectors. An empty inbox is no root (see ``inboxes_in_use``)."""
    try:
        names = sorted(n for n in os.listdir(cfg.agents_dir) if valid_agent(n))
    except OSError:  # no agents folder yet (or not a folder: nothing of it is read)
        names = []
    _LOOKED.keep(cfg.agents_dir, names)
    return [inbox_root(cfg, n) for n in inboxes_in_use(cfg, names)] + vault_roots(cfg)


def vault_roots(cfg: Config) -> list[Root]:
    """The wiki and the vault around it (none without a vault)."""
    vault = cfg.vault.path
    if vault is None:
        return []
    return [
        Root("wiki", vault / cfg.vault.wiki_subfolder, within=vault),
        Root("vault", vault, exclude=cfg.vault.wiki_subfolder),
    ]


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


def is_debris(name: str) -> bool:
    """Cloud placeholders and temp files (hidden names), editor temp files: never notes, never
    counted."""
    return name.startswith(".") or _DEBRIS.search(name) is not None


def _hidden_note_name(name: str, source: str = "memory") -> bool:
    """A hidden name of a note (counted as skipped): Markdown, and in the vault and the wiki a
    file of the other counted kinds too (``COUNTED_SUFFIXES``: ``.Plan.canvas`` was in no count); not a
    Mac's "._Note.md" (AppleDouble metadata beside each file copied from a Mac to a share)."""
    counted = (".md",) if source == "memory" else COUNTED_SUFFIXES
    return name.lower().endswith(counted) and not name.startswith("._")


def is_conflict_copy(name: str) -> bool:
    """A sync tool's conflict copy by its name (vault and wiki only: the daemon alone writes an
    inbox, and a slug such as "plan_conflict-20261204-120000" is a note)."""
    return _CONFLICTS.search(name) is not None


def inbox_copy_reason(name: str) -> str | None:
    """Why a file of an inbox is a copy of the person's text waiting to be merged into a note (a
    sync tool's conflict copy, a numbered copy), or None: the one definition status, list and
    memory_status count by."""
    if is_conflict_copy(name):
        return CONFLICT_REASON
    return COPY_REASON if _NUMBERED_COPY.match(name) else None


def is_markdown_name(name: str) -> bool:
    """A Markdown file's name: a note, or a conflict copy counted as skipped."""
    return name.lower().endswith(".md") and not is_debris(name)


NOTE_SUFFIXES = (".md", ".canvas")  # lowercased; an inbox's notes are ".md" only


def is_note_name(name: str, source: str = "vault") -> bool:
    """A note's file name: Markdown, or in the vault and the wiki a Canvas too (read as the
    Markdown of its cards). An inbox holds Markdown only: the daemon alone writes it."""
    return is_markdown_name(name) or (source != "memory" and is_canvas_name(name) and not is_debris(name))


# Obsidian's Bases (``.base``): a view's definition in YAML (filters, columns), no text a person
# wrote. Not indexed, but counted, so that every file is either a note, excluded or skipped.
BASE_REASON = "Bases view definition (no text to index)"
# The Excalidraw plugin's drawing saved as plain JSON (its compatibility mode): not read (its
# ``.excalidraw.md`` form is a note), but counted, so that its text not being found has a reason.
EXCALIDRAW_REASON = "Excalidraw drawing saved as plain .excalidraw (not read; .excalidraw.md is)"
_COUNTED_KINDS = {".base": BASE_REASON, ".excalidraw": EXCALIDRAW_REASON}
# The names of the files a vault's or wiki's scan counts: notes, and the kinds above. File events
# look at the same names, so a file of a counted kind is counted as soon as it appears.
COUNTED_SUFFIXES = NOTE_SUFFIXES + tuple(_COUNTED_KINDS)
# Larger than index.maxFileBytes: the category health counts skipped files under (kept as it is:
# --json readers count by it); the size and the limit are said beside it, not in it.
TOO_LARGE = "too large"
PATH_TOO_LONG = "path too long"  # longer than the system allows (ENAMETOOLONG)


def kind_skipped(root: Root, path: Path, st: os.stat_result) -> Skipped | None:
    """A file whose name is no note's, counted as skipped when it is of a counted kind (a Bases
    file, a plain Excalidraw drawing), else None (an attachment). Scans and file events both ask
    here, so a file is counted alike whichever found it."""
    if root.source == "memory" or not stat.S_ISREG(st.st_mode) or is_debris(path.name):
        return None
    reason = _COUNTED_KINDS.get(path.suffix.lower())
    return None if reason is None else Skipped(path, reason)


# "Note.md" and "Note.MD" in one folder are one note to Obsidian's links and one key here.
TWIN_REASON = "same name as another note but for the case of .md (not read)"


# "Plan.canvas.md" (a Markdown note) and "Plan.canvas" (a Canvas) are both "vault/Plan.canvas":
# the Markdown note keeps the reference it had before canvases were read, the canvas is left out.
CANVAS_TWIN_REASON = "Canvas beside a Markdown note of its name + .md, which has its reference (not read)"


def twin_reason(name: str, names: Container[str]) -> str | None:
    """Why ``name`` is not read because a sibling in ``names`` has its key; None if none has."""
    if is_canvas_name(name) and any(name + md in names for md in (".md", ".MD", ".Md", ".mD")):
        return CANVAS_TWIN_REASON
    return TWIN_REASON if extension_twin(name, names) is not None else None


def extension_twin(name: str, names: Container[str]) -> str | None:
    """The sibling that owns ``name``'s key: ``Note.md`` for ``Note.MD`` when both are there."""
    if name.endswith(".md") or not name.lower().endswith(".md"):
        return None
    twin = name[:-3] + ".md"
    return twin if twin in names else None


class GivenUp(Exception):  # noqa: N818 - the end of a scan whose waiter left, not a bug
    """Raised in a scan whose waiter gave up on it, at its next call (none is left hanging)."""


class Asking:
    """The file-system call a scan waits on now (``listing`` of a folder, ``stat`` of an entry),
    its relative path and since when (monotonic), or None: another thread tells a share that
    hangs on one call from a long scan of a slow one by it. One tuple, swapped whole.
    ``longest`` is the longest call so far (seconds); once ``abandon`` is called the scan ends
    with ``GivenUp`` at its next call (its waiter left: nothing would use what it finds)."""

    def __init__(self) -> None:
        self.now: tuple[str, str, float] | None = None
        self.longest = 0.0
        self._abandoned = False
        # Folders (relative paths) not to ask at all, each with the thread still in a call there:
        # a watch's walk goes around an inbox whose share hangs (``Supervisor.watched_walk``).
        self.avoid: dict[str, threading.Thread] = {}

    def ask(self, call: str, rel: str) -> None:
        self._ended()
        if self._abandoned:
            raise GivenUp(rel)
        self.now = (call, rel, time.monotonic())

    def answered(self) -> None:
        self._ended()
        self.now = None

    def abandon(self) -> None:
        self._abandoned = True

    def _ended(self) -> None:
        now = self.now
        if now is not None:
            self.longest = max(self.longest, time.monotonic() - now[2])


@contextlib.contextmanager
def asked(asking: Asking, call: str, rel: str) -> Iterator[None]:
    """``asking`` told of one call (``stat``: a look-up, ``listing``) for as long as the block
    runs: a resolve of a path of the share hangs as a stat does, and is given up on as one."""
    asking.ask(call, rel)
    try:
        yield
    finally:
        asking.answered()


def _listed(folder: Path, rel: str, asking: Asking | None) -> list[os.DirEntry[str]]:
    """The entries of ``folder``; each entry that comes starts ``asking``'s clock again (a
    large folder of a slow share is listed in many answers, none of which hangs)."""
    if asking is None:
        return list(os.scandir(folder))
    out = []
    asking.ask("listing", rel)
    try:
        with os.scandir(folder) as it:
            for e in it:
                out.append(e)
                asking.ask("listing", rel)
    finally:
        asking.answered()
    return out


def scan(
    root: Root, max_bytes: int, start: str = "", asking: Asking | None = None
) -> Iterator[NoteFile | Skipped]:
    """Walk a root (or its subfolder ``start``, relative): notes with their stat, and the files
    left out with a reason.

    Dot-folders are skipped and hidden notes (``.x.md``, ``..md``) reported as skipped; a name
    that is not valid UTF-8 is skipped (file or folder, counted); a file symlink is followed only
    when its target stays inside the root and outside dot-folders (and, for the vault, outside the
    wiki); a folder symlink is never followed (outside: refused; inside: already indexed under its
    real path, and loops are impossible); only regular files are notes. The memory inbox is flat,
    must be a real folder of this user (not a symlink, nor the agent's folder) and its symlinks are
    never followed. Raises OSError when the root itself (or ``start``) cannot be listed (the caller
    decides what an unreachable root means). ``asking`` is kept told of each listing and stat.
    """
    asking = asking if asking is not None else Asking()  # told of each stat whoever asks
    # Resolving the root asks the share as a stat does (one look-up per folder on the way).
    with asked(asking, "stat", "."):
        refusal = refusal_of(root)
        base = real_path(root.path) if refusal is None else root.path  # refused: not resolved
    if refusal is not None:
        yield Skipped(root.path, refusal)
        return
    stack: list[tuple[Path, str]] = [(root.path / start, f"{start}/")] if start else [(root.path, "")]
    first = True
    while stack:
        folder, rel_dir = stack.pop()
        try:
            entries = _listed(folder, rel_dir.rstrip("/") or ".", asking)
        except OSError as exc:
            if first:
                raise
            yield unreadable_skip(folder, exc, "unreadable folder")
            continue
        first = False
        names = {e.name for e in entries}
        keys: set[str] = set()
        for entry in sorted(entries, key=lambda e: e.name):
            found = _entry(root, entry, rel_dir, base, max_bytes, asking=asking)
            if isinstance(found, str):
                stack.append((Path(entry.path), found))
            elif isinstance(found, NoteFile):
                twin = twin_reason(entry.name, names) if found.key not in keys else TWIN_REASON
                if twin is not None:  # one key, two files: the first one (`.md` before all) is the note
                    yield Skipped(found.path, twin)
                    continue
                keys.add(found.key)
                yield found
            elif found is not None:
                yield found


def _entry(  # noqa: PLR0911 - one return per kind of entry
    root: Root,
    entry: os.DirEntry[str],
    rel_dir: str,
    base: Path,
    max_bytes: int,
    *,
    asking: Asking,
) -> NoteFile | Skipped | str | None:
    """One entry of a scanned folder: a note, a skip, a folder to descend (its rel prefix), or None."""
    rel = f"{rel_dir}{entry.name}"
    if entry.name.startswith("."):
        # Hidden, as in Obsidian; a hidden note (even one named "..md") is still counted.
        if _hidden_note_name(entry.name, root.source) and entry.is_file(follow_symlinks=False):
            return Skipped(Path(entry.path), "hidden file name")
        return None
    if not decodable(entry.name):
        return Skipped(Path(entry.path), "name is not valid UTF-8")
    is_link = False
    # Asked as one call: without a file type from the listing (a FUSE share's), is_symlink is
    # the lstat that hangs.
    asking.ask("stat", rel)
    try:
        is_link = entry.is_symlink()
        st = stat_of(entry)
    except OSError as exc:
        if is_note_name(entry.name, root.source):
            return unreadable_skip(Path(entry.path), exc, "unreadable" if not is_link else "broken symlink")
        if is_link:
            return None  # a link to nothing: no notes lie behind it
        # A folder that does not answer a stat (no search permission on its parent, a dead share
        # mounted below the root) still holds its notes: kept, not counted as gone. The listing's
        # own file type says whether it is one; when that fails too, it may be.
        try:
            folder = entry.is_dir(follow_symlinks=False)
        except OSError:
            folder = True
        return unreadable_skip(Path(entry.path), exc, "unreadable folder") if folder else None
    finally:
        asking.answered()
    if is_link and rel != root.exclude:  # the wiki folder, a link: the wiki root reports it
        with asked(asking, "stat", rel):  # the link's target resolved: a look-up on the share
            why = link_refusal(root, Path(entry.path), base)
        if why is not None:
            return (
                Skipped(Path(entry.path), why)
                if stat.S_ISDIR(st.st_mode) or is_note_name(entry.name, root.source)
                else None
            )
    if stat.S_ISDIR(st.st_mode):
        if is_link or rel == root.exclude:
            # A folder symlink's target lies inside the root and is indexed under its real path.
            return None
        # An inbox is flat (notes are named by their slug): a folder placed in it by hand is
        # counted, so its notes do not go unseen without a word.
        return (
            Skipped(Path(entry.path), "folder in a memory inbox (not read)")
            if root.source == "memory"
            else rel + "/"
        )
    if not is_note_name(entry.name, root.source):
        return kind_skipped(root, Path(entry.path), st)
    if not stat.S_ISREG(st.st_mode):
        return Skipped(Path(entry.path), "not a regular file")
    why = name_refusal(root, entry.name) or (TOO_LARGE if st.st_size > max_bytes else None)
    return (
        Skipped(Path(entry.path), why, st.st_size if why == TOO_LARGE else 0)
        if why
        else NoteFile.of(root.key_of(rel), root, Path(entry.path), rel, st, linked=is_link)
    )


def stat_of(entry: os.DirEntry[str]) -> os.stat_result:
    """An entry's stat, its symlink followed (a module function: tests make one hang)."""
    return entry.stat(follow_symlinks=True)


def name_refusal(root: Root, name: str) -> str | None:
    """Why a Markdown file of this name is not read as a note of ``root``, or None."""
    if root.source == "memory":
        if SLUG_RE.fullmatch(name[:-3]):
            return None
        return inbox_copy_reason(name) or "memory note name is not a valid slug"
    return CONFLICT_REASON if is_conflict_copy(name) else None


def link_refusal(root: Root, link: Path, base: Path) -> str | None:
    """Why a symlink inside a root is not followed, or None when it may be."""
    if root.source == "memory":
        return LINK_REASON
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):  # RuntimeError: symlink loop
        return "broken symlink"
    return _where_refusal(root, target, base)


def _where_refusal(root: Root, target: Path, base: Path) -> str | None:
    """Why a file whose real path is ``target`` is no note of ``root`` (real path ``base``)."""
    if not target.is_relative_to(base):
        return "symlink leads outside the root"
    parts = target.relative_to(base).parts
    if any(p.startswith(".") for p in parts):
        return "symlink leads into a hidden folder"
    inside = "/".join(parts)
    if root.exclude and (inside == root.exclude or inside.startswith(root.exclude + "/")):
        return "symlink leads into the wiki (indexed there)"
    return None


def real_path(path: Path) -> Path:
    """``path`` resolved; a symlink loop (RuntimeError from ``Path.resolve``) is the OSError
    it is (ELOOP), which the callers take for a folder that cannot be read."""
    try:
        return path.resolve()
    except RuntimeError as exc:
        raise OSError(errno.ELOOP, "symlink loop (it cannot be resolved)", str(path)) from exc


def root_refusal(root: Root) -> str | None:
    """Why a root folder itself may not be read: a wiki folder that is (or lies behind) a symlink
    leading out of the vault or into a hidden folder of it, where another agent's memory, the
    index or any file of the machine may lie. None when it may (or does not exist)."""
    if root.within is None:
        return None
    try:
        real = root.path.resolve(strict=True)
        outer = root.within.resolve(strict=True)
    except FileNotFoundError:
        return None  # a missing folder is the caller's matter (empty, or the share is away)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop
        return "folder cannot be resolved (broken symlink or loop)"
    if real == outer or not real.is_relative_to(outer):
        return f"folder is a symlink leading outside {root.within}"
    # No link on the way: the folder configured (even a hidden one) is the wiki.
    linked = real != outer / root.path.relative_to(root.within)
    if linked and any(p.startswith(".") for p in real.relative_to(outer).parts):
        return f"folder is a symlink leading into a hidden folder of {root.within}"
    return None


def refusal_of(root: Root) -> str | None:
    """Why a root may not be read at all: an agent's inbox that is not private
    (``inbox_refusal``), a wiki folder behind a link out of the vault (``root_refusal``). One
    rule for a sweep's scan and a file event's look (the look read a linked inbox's notes)."""
    return inbox_refusal(root) if root.source == "memory" else root_refusal(root)


def inbox_refusal(root: Root) -> str | None:
    """Why an agent's inbox may not be read or written: its folder or the inbox is a symlink,
    not a folder, or another user's. None when it is private (or does not exist yet)."""
    agents = root.path.parent.parent
    try:
        with private_dirs(agents.parent, [agents.name, root.agent, "memory"], create=False, what="inbox"):
            return None
    except FileNotFoundError:
        return None
    except NotPrivateError as exc:
        return str(exc)


class NoteUnreadable(Exception):  # noqa: N818 - a reason to skip a file, not a failure
    """A file that exists but cannot be indexed as text; ``reason`` is counted in health."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_note(path: Path, max_bytes: int, root: Root | None = None) -> tuple[bytes, str]:
    """Raw bytes and text of a note; raise NoteUnreadable for binary, non-UTF-8, huge files and
    anything that is not a regular file (a pipe is never opened for a blocking read). With
    ``root``, the file actually opened must be one ``scan`` would read: a symlink swapped after the
    scan's check (to a file outside the root, in a hidden folder) is refused, not read."""
    try:
        fd = open_regular(path)
        try:
            why = _opened_refusal(root, fd) if root is not None else None
        except BaseException:
            os.close(fd)
            raise
        if why is not None:
            os.close(fd)
            if not os.path.lexists(path):  # moved away meanwhile (Obsidian's delete: into .trash)
                raise FileNotFoundError(2, "gone while it was read", str(path))
            raise NoteUnreadable(why)
        data = read_fd(fd, max_bytes + 1)
    except FileNotFoundError:
        raise
    except NotRegularError as exc:
        raise NoteUnreadable(exc.strerror or "not a regular file") from exc
    except OSError as exc:
        raise NoteUnreadable(f"unreadable ({exc.strerror})") from exc
    text = decode_note(data, max_bytes, path)
    return data, canvas_text(text, path) if is_canvas_name(path.name) else text


def read_refusal(path: Path) -> str | None:
    """Why the note at ``path`` cannot be read now ("unreadable (Permission denied)", as
    ``read_note`` says it), or None: it opens and its first byte reads. Nothing else is looked at
    (a note gone, or no regular file any more, is the sweep's to find)."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotRegularError):
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        os.read(fd, 1)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    finally:
        os.close(fd)
    return None


def canvas_text(text: str, path: Path) -> str:
    """A Canvas's JSON read as its Markdown (``vault.canvas``); one that is no Canvas is skipped."""
    try:
        return canvas_markdown(text)
    except CanvasError as exc:
        log.warning("canvas_unreadable path=%s reason=%s", path, exc.detail)
        raise NoteUnreadable(f"malformed Canvas ({exc})") from None


def _opened_refusal(root: Root, fd: int) -> str | None:
    """Why the open file ``fd`` may not be read as a note of ``root`` (see ``link_refusal``)."""
    real = opened_path(fd)
    if real is None:  # no way to ask this system: the scan's check stands
        return None
    try:
        base = _real_root(root.path)
    except (OSError, RuntimeError):
        return "root cannot be resolved"
    rel = _below(real, base)
    if rel is None:
        return "symlink leads outside the root"
    return _where_refusal(root, base / rel, base)


def _below(real: Path, base: Path) -> Path | None:
    """``real`` relative to the folder ``base``, or None when it is not inside. The folder is
    compared by identity where the spelling differs: a case-insensitive file system (macOS by
    default) reports the name's case on disk, which the configured path may not share."""
    if real.is_relative_to(base):
        return real.relative_to(base)
    for depth in range(len(real.parts) - 1, 0, -1):
        with contextlib.suppress(OSError):
            if os.path.samefile(Path(*real.parts[:depth]), base):
                return Path(*real.parts[depth:])
    return None


_REAL_ROOTS: dict[Path, tuple[float, Path]] = {}
_REAL_ROOT_TTL_S = 10.0


def _real_root(path: Path) -> Path:
    """A root's real path, resolved at most every few seconds (not once per note read: a sweep
    of a large vault on a share reads thousands)."""
    now = time.monotonic()
    known = _REAL_ROOTS.get(path)
    if known is not None and now - known[0] < _REAL_ROOT_TTL_S:
        return known[1]
    real = path.resolve(strict=True)
    _REAL_ROOTS[path] = (now, real)
    return real


def read_inbox_note(root: Root, name: str, max_bytes: int) -> tuple[bytes, str]:
    """A memory note, opened through its inbox's checked folders and never through a symlink."""
    agents = root.path.parent.parent
    try:
        with private_dirs(
            agents.parent, [agents.name, root.agent, "memory"], create=False, what="inbox"
        ) as fds:
            fd = open_regular(name, dir_fd=fds[-1], follow=False)
        data = read_fd(fd, max_bytes + 1)
    except FileNotFoundError:
        raise
    except NotPrivateError as exc:
        raise NoteUnreadable(str(exc)) from exc
    except NotRegularError as exc:
        raise NoteUnreadable(exc.strerror or "not a regular file") from exc
    except OSError as exc:
        raise NoteUnreadable(f"unreadable ({exc.strerror})") from exc
    return data, decode_note(data, max_bytes)


def decode_note(data: bytes, max_bytes: int, where: object = "-") -> str:
    """The text of a note's bytes; NoteUnreadable when it cannot be indexed as text."""
    if len(data) > max_bytes:
        raise NoteUnreadable(TOO_LARGE)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # its NUL bytes are no binary data, but text
        raise NoteUnreadable("not UTF-8 (UTF-16)")
    if b"\0" in data[:8192]:
        raise NoteUnreadable("binary")
    try:
        return data.decode("utf-8-sig")  # -sig strips a BOM that would hide the front matter
    except UnicodeDecodeError:
        # A few bad bytes (a paste, a truncated sync) in UTF-8 text: keep the note, mark them.
        # Mostly undecodable bytes mean another encoding or binary data: skipped, counted.
        text = data.decode("utf-8-sig", errors="replace")
        bad = text.count("\ufffd")
        if bad * 100 > max(len(text), 1):
            raise NoteUnreadable("not UTF-8") from None
        log.warning("note_invalid_utf8 path=%s replaced=%d", where, bad)
        return text


# --- references --------------------------------------------------------------------------


def public_reference(key: str, agent: str | None) -> str:
    """What a client sees: an agent's own memory is ``memory/<slug>``."""
    if agent and key.startswith(f"memory/{agent}/"):
        return "memory/" + key[len(f"memory/{agent}/") :]
    return key


def key_for_reference(reference: str, agent: str | None) -> str:
    """Validate a client's reference and return the index key; refuse anything that could escape.

    Refused: NUL bytes, absolute paths, ``..`` or ``.`` segments, empty segments, unknown
    sources, another agent's memory, vault paths inside the wiki or dot-folders. A reference is
    the note's path with ``/`` between folders and no escaping: every other character (a
    backslash too) is part of a name, so each reference search returns is accepted here.
    """
    if not isinstance(reference, str) or not reference:
        raise SourceError("reference is empty")
    if "\0" in reference:
        raise SourceError("reference contains a NUL byte")
    if reference.startswith("/") or re.match(r"^[A-Za-z]:", reference):
        raise SourceError(
            f"reference {quoted(reference)} is an absolute path; use a reference returned by search"
        )
    ref = reference[:-3] if reference.lower().endswith(".md") else reference
    parts = ref.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise SourceError(f"reference {quoted(reference)} leaves its root or has empty segments")
    if any(p.startswith(".") for p in parts):
        raise SourceError(f"reference {quoted(reference)} points into a hidden folder")
    source = parts[0]
    if source not in SOURCES or len(parts) < 2:
        raise SourceError(f"reference {quoted(reference)} must start with vault/, wiki/ or memory/")
    if source == "memory":
        if agent is not None:
            # memory/<slug> is the agent's own; memory/<agent>/<slug> (as the CLI prints it) too.
            if len(parts) == 3 and parts[1] == agent:
                parts = [parts[0], parts[2]]
            if len(parts) != 2:
                raise SourceError(
                    f"reference {quoted(reference)}: memory references are memory/<slug> (your own notes)"
                )
            owner, slug = agent, parts[1]
        else:
            if len(parts) != 3:
                raise SourceError(
                    f"reference {quoted(reference)}: without an agent, use memory/<agent>/<slug> "
                    "(or name the agent: --agent NAME)"
                )
            owner, slug = parts[1], parts[2]
        if not valid_agent(owner):
            raise SourceError(f"reference {quoted(reference)}: invalid agent name")
        if not SLUG_RE.fullmatch(slug):
            raise SourceError(f"reference {quoted(reference)}: invalid slug")
        return f"memory/{owner}/{slug}"
    return "/".join(parts)


def path_for_key(cfg: Config, key: str, rel: str | None = None) -> tuple[Root, Path]:
    """The file behind a key, checked by the rules of ``scan``: a vault or wiki note (or its
    symlink target) must lie inside its root and outside dot-folders; a memory note must be in a
    private inbox and is never a symlink (it is then read with ``read_inbox_note``). ``rel``: the
    file name the index recorded for the key (``Note.MD``, ``a.md.md``), else ``<path>.md``."""
    source, rest = key.split("/", 1)
    if source == "memory":
        agent, slug = rest.split("/", 1)
        root = Root("memory", agent_inbox(cfg, agent), agent=agent)
        refusal = inbox_refusal(root)
        if refusal is not None:
            raise UnreadableError(f"{quoted(key)}: {refusal}")
        path = root.path / f"{slug}.md"
        try:
            st = path.lstat()
        except FileNotFoundError as exc:
            raise NotFoundError(f"no note {quoted(key)}") from exc
        except OSError as exc:
            raise UnreadableError(f"{quoted(key)} cannot be read: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise UnreadableError(f"{quoted(key)} is a symbolic link in a memory inbox; refused")
        return root, path
    if cfg.vault.path is None:
        raise NotFoundError("no vault is configured")
    wiki = cfg.vault.wiki_subfolder
    if source == "wiki":
        root = Root("wiki", cfg.vault.path / wiki, within=cfg.vault.path)
        refusal = root_refusal(root)
        if refusal is not None:
            raise UnreadableError(f"{quoted(key)}: {refusal}; refused")
    else:
        if rest == wiki or rest.startswith(wiki + "/"):
            raise SourceError(f"{quoted(key)} lies in the wiki; use wiki/{rest[len(wiki) + 1 :]}")
        root = Root("vault", cfg.vault.path, exclude=wiki)
    # A canvas's key names its file, unless a Markdown note "<name>.canvas.md" has that key.
    markdown = is_canvas_name(rest) and not os.path.lexists(root.path / f"{rest}.md")
    named = rest if markdown else f"{rest}.md"
    path = root.path / (rel if rel is not None and root.key_of(rel) == key else named)
    try:
        resolved = path.resolve(strict=True)
        base = root.path.resolve(strict=True)
    except FileNotFoundError as exc:
        raise NotFoundError(f"no note {quoted(key)}") from exc
    except (OSError, RuntimeError) as exc:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else "a symlink loop"
        raise UnreadableError(f"{quoted(key)} cannot be resolved ({cause})") from exc
    if not resolved.is_relative_to(base):
        raise UnreadableError(f"{quoted(key)} resolves outside its root; refused")
    if path.is_symlink() or resolved != path.absolute():
        why = link_refusal(root, path, base)
        if why is not None:
            raise UnreadableError(f"{quoted(key)}: {why}; refused")
    return root, resolved
