"""Roots and their scan: a root (a folder of notes of one source, and a note's key in it), the
notes a scan of a root finds with the stat the sweep compares and the files it leaves out with a
reason, and the rules that keep a scan inside its root (a symlink leading out, a wiki behind a
link, an inbox that is a link or another user's: refused). Imports ``config``, ``confine``,
``birth``, ``canvas`` and ``notenames`` (which file names are notes)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config
from sidecar.vault.birth import birth_ns
from sidecar.vault.confine import (
    NotPrivateError,
    decodable,
    private_dirs,
)
from sidecar.vault.notenames import (
    _COUNTED_KINDS,
    CONFLICT_REASON,
    LINK_REASON,
    PATH_TOO_LONG,
    SLUG_RE,
    TOO_LARGE,
    TWIN_REASON,
    _hidden_note_name,
    inbox_copy_reason,
    is_conflict_copy,
    is_debris,
    is_note_name,
    twin_reason,
)


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


def vault_roots(cfg: Config) -> list[Root]:
    """The wiki and the vault around it (none without a vault)."""
    vault = cfg.vault.path
    if vault is None:
        return []
    return [
        Root("wiki", vault / cfg.vault.wiki_subfolder, within=vault),
        Root("vault", vault, exclude=cfg.vault.wiki_subfolder),
    ]


def kind_skipped(root: Root, path: Path, st: os.stat_result) -> Skipped | None:
    """A file whose name is no note's, counted as skipped when it is of a counted kind (a Bases
    file, a plain Excalidraw drawing), else None (an attachment). Scans and file events both ask
    here, so a file is counted alike whichever found it."""
    if root.source == "memory" or not stat.S_ISREG(st.st_mode) or is_debris(path.name):
        return None
    reason = _COUNTED_KINDS.get(path.suffix.lower())
    return None if reason is None else Skipped(path, reason)


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

    def again(self) -> None:
        """The call under way is followed by another of the same (``timeout.step``: a change's
        fsync after its write): its wait starts anew. Never ends the work (a change given up on
        runs to its end, as its answer says)."""
        self._ended()
        now = self.now
        if now is not None:
            self.now = (now[0], now[1], time.monotonic())

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
