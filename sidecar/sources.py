"""Roots, references and safe paths: which files are notes, and what each one is called.

A *key* names a note inside the index and is unique across agents: ``vault/<path>``, ``wiki/<path>``,
``memory/<agent>/<slug>`` (paths without ``.md``). The *reference* a client sees is the key, except
that an agent sees its own memory as ``memory/<slug>`` (DESIGN.md §1). Imports ``config`` and ``errors``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config, valid_agent
from sidecar.errors import NotFoundError, SourceError

SOURCES = ("vault", "wiki", "memory")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}$")
_DEBRIS = (
    re.compile(r"\.sync-conflict-", re.IGNORECASE),  # Syncthing
    re.compile(r" \(conflicted copy", re.IGNORECASE),  # Dropbox
    re.compile(r" \(Case Conflict", re.IGNORECASE),
    re.compile(r"^~\$|~$|\.(tmp|swp|swx|bak)$", re.IGNORECASE),  # editor temp files
)


@dataclass(frozen=True)
class Root:
    """One folder of notes of one source."""

    source: str
    path: Path
    agent: str = ""
    exclude: str | None = None  # a folder to leave out, relative (the wiki inside the vault)

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


@dataclass(frozen=True)
class Skipped:
    """A file a scan left out, and why (counted in health)."""

    path: Path
    reason: str


def agent_inbox(cfg: Config, agent: str) -> Path:
    return cfg.agents_dir / agent / "memory"


def roots(cfg: Config) -> list[Root]:
    """Vault (minus the wiki), wiki, and every agent inbox that exists, in priority order for vectors."""
    out: list[Root] = []
    if cfg.agents_dir.is_dir():
        try:
            names = sorted(os.listdir(cfg.agents_dir))
        except OSError:
            names = []
        out.extend(Root("memory", agent_inbox(cfg, n), agent=n) for n in names if valid_agent(n))
    vault = cfg.vault.path
    if vault is not None:
        out.append(Root("wiki", vault / cfg.vault.wiki_subfolder))
        out.append(Root("vault", vault, exclude=cfg.vault.wiki_subfolder))
    return out


def is_debris(name: str) -> bool:
    """Sync-conflict copies, cloud placeholders, editor temp files: never notes."""
    return name.startswith(".") or any(p.search(name) for p in _DEBRIS)


def is_note_name(name: str) -> bool:
    return name.lower().endswith(".md") and not is_debris(name)


def scan(root: Root, max_bytes: int, start: str = "") -> Iterator[NoteFile | Skipped]:
    """Walk a root (or its subfolder ``start``, relative): notes with their stat, and the files
    left out with a reason.

    Dot-folders are skipped; a file symlink is followed only when it stays inside the root; a
    folder symlink is never followed (outside: refused; inside: already indexed under its real
    path, and loops are impossible); the memory inbox is flat. Raises OSError when
    the root itself (or ``start``) cannot be listed (the caller decides what that means).
    """
    base = root.path.resolve()
    stack: list[tuple[Path, str]] = [(root.path / start, f"{start}/")] if start else [(root.path, "")]
    first = True
    while stack:
        folder, rel_dir = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            if first:
                raise
            yield Skipped(folder, "unreadable folder")
            continue
        first = False
        for entry in sorted(entries, key=lambda e: e.name):
            rel = f"{rel_dir}{entry.name}"
            if entry.name.startswith("."):
                continue
            try:
                is_link = entry.is_symlink()
                st = entry.stat(follow_symlinks=True)
            except OSError:
                if entry.name.lower().endswith(".md"):
                    yield Skipped(Path(entry.path), "unreadable" if not is_link else "broken symlink")
                continue
            if is_link and not _inside(Path(entry.path), base):
                yield Skipped(Path(entry.path), "symlink leads outside the root")
                continue
            if stat.S_ISDIR(st.st_mode):
                if root.source == "memory" or rel == root.exclude:
                    continue
                if is_link:  # its target lies inside the root and is indexed under its real path
                    continue
                stack.append((Path(entry.path), rel + "/"))
                continue
            if not stat.S_ISREG(st.st_mode) or not is_note_name(entry.name):
                continue
            if root.source == "memory" and not SLUG_RE.fullmatch(entry.name[:-3]):
                yield Skipped(Path(entry.path), "memory note name is not a valid slug")
                continue
            if st.st_size > max_bytes:
                yield Skipped(Path(entry.path), "too large")
                continue
            yield NoteFile(root.key_of(rel), root, Path(entry.path), rel, st.st_mtime_ns, st.st_size)


def _inside(path: Path, base: Path) -> bool:
    try:
        return path.resolve().is_relative_to(base)
    except (OSError, RuntimeError):  # RuntimeError: symlink loop
        return False


class NoteUnreadable(Exception):  # noqa: N818 - a reason to skip a file, not a failure
    """A file that exists but cannot be indexed as text; ``reason`` is counted in health."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_note(path: Path, max_bytes: int) -> tuple[bytes, str]:
    """Raw bytes and text of a note; raise NoteUnreadable for binary, non-UTF-8 or huge files."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise NoteUnreadable(f"unreadable ({exc.strerror})") from exc
    if len(data) > max_bytes:
        raise NoteUnreadable("too large")
    if b"\0" in data[:8192]:
        raise NoteUnreadable("binary")
    try:
        text = data.decode("utf-8-sig")  # -sig strips a BOM that would hide the front matter
    except UnicodeDecodeError as exc:
        raise NoteUnreadable("not UTF-8") from exc
    return data, text


# --- references --------------------------------------------------------------------------


def public_reference(key: str, agent: str | None) -> str:
    """What a client sees: an agent's own memory is ``memory/<slug>``."""
    if agent and key.startswith(f"memory/{agent}/"):
        return "memory/" + key[len(f"memory/{agent}/") :]
    return key


def key_for_reference(reference: str, agent: str | None) -> str:
    """Validate a client's reference and return the index key; refuse anything that could escape.

    Refused: NUL bytes, absolute paths, ``..`` or ``.`` segments, backslashes, empty segments,
    unknown sources, another agent's memory, vault paths inside the wiki or dot-folders.
    """
    if not isinstance(reference, str) or not reference:
        raise SourceError("reference is empty")
    if "\0" in reference:
        raise SourceError("reference contains a NUL byte")
    if reference.startswith("/") or "\\" in reference or re.match(r"^[A-Za-z]:", reference):
        raise SourceError(f"reference {reference!r} is an absolute path; use a reference returned by search")
    ref = reference[:-3] if reference.lower().endswith(".md") else reference
    parts = ref.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise SourceError(f"reference {reference!r} leaves its root or has empty segments")
    if any(p.startswith(".") for p in parts):
        raise SourceError(f"reference {reference!r} points into a hidden folder")
    source = parts[0]
    if source not in SOURCES or len(parts) < 2:
        raise SourceError(f"reference {reference!r} must start with vault/, wiki/ or memory/")
    if source == "memory":
        if agent is not None:
            if len(parts) != 2:
                raise SourceError(f"reference {reference!r}: memory references are memory/<slug>")
            owner, slug = agent, parts[1]
        else:
            if len(parts) != 3:
                raise SourceError(f"reference {reference!r}: without an agent, use memory/<agent>/<slug>")
            owner, slug = parts[1], parts[2]
        if not valid_agent(owner):
            raise SourceError(f"reference {reference!r}: invalid agent name")
        if not SLUG_RE.fullmatch(slug):
            raise SourceError(f"reference {reference!r}: invalid slug")
        return f"memory/{owner}/{slug}"
    return "/".join(parts)


def path_for_key(cfg: Config, key: str) -> tuple[Root, Path]:
    """The file behind a key, checked to resolve inside its root (symlinks included)."""
    source, rest = key.split("/", 1)
    if source == "memory":
        agent, slug = rest.split("/", 1)
        root = Root("memory", agent_inbox(cfg, agent), agent=agent)
        rel = f"{slug}.md"
    else:
        if cfg.vault.path is None:
            raise NotFoundError("no vault is configured")
        wiki = cfg.vault.wiki_subfolder
        if source == "wiki":
            root = Root("wiki", cfg.vault.path / wiki)
        else:
            if rest == wiki or rest.startswith(wiki + "/"):
                raise SourceError(f"{key!r} lies in the wiki; use wiki/{rest[len(wiki) + 1 :]}")
            root = Root("vault", cfg.vault.path, exclude=wiki)
        rel = f"{rest}.md"
    path = root.path / rel
    try:
        resolved = path.resolve(strict=True)
        base = root.path.resolve(strict=True)
    except FileNotFoundError as exc:
        raise NotFoundError(f"no note {key!r}") from exc
    except (OSError, RuntimeError) as exc:
        raise SourceError(f"{key!r} cannot be resolved") from exc
    if not resolved.is_relative_to(base):
        raise SourceError(f"{key!r} resolves outside its root; refused")
    return root, resolved
