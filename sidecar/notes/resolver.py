"""Link path -> note key, resolved the way Obsidian resolves a link.

A link path resolves, case-insensitively, in one Unicode form (NFC) and without ``.md``:

1. relative (``./`` or ``../``) or absolute (``/``) paths against the source's folder or the vault root;
2. a full path from the vault root (``Folder/Note``);
3. otherwise every note whose path ends with the link path (``Note``, ``Folder/Note``): one in the
   source's own folder first, then the shortest path, then alphabetical;
4. failing all of that, a note whose front matter ``aliases`` holds the link text.

The vault and its wiki subfolder form one vault (wiki notes are at ``<wikiSubfolder>/...``). A memory
note links like a note of its own inbox folder: its agent's own notes (by slug) first, then the vault.
Vault notes never resolve into memory.
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.contracts.wire import memory_agent
from sidecar.notes.linktext import strip_md


@dataclass(frozen=True)
class Target:
    """A note links can point at: its key and its path inside the vault (or inbox)."""

    key: str
    path: str  # vault-relative without .md ("Plugins/Audio recorder", "wiki/Backups"); memory: the slug
    aliases: tuple[str, ...] = ()
    agent: str = ""  # memory notes only


def _low(name: str) -> str:
    """A name as links compare it: case-insensitive, and one Unicode form (a Mac writes "ü" as
    "u" plus a combining mark over SMB; a keyboard on Linux types the single letter)."""
    return unicodedata.normalize("NFC", name).lower()


def vault_path(key: str, wiki_subfolder: str) -> str:
    """A key's path inside the vault (without .md): the wiki is one of its folders."""
    source, rest = key.split("/", 1)
    if source == "wiki":
        return f"{wiki_subfolder.strip('/')}/{rest}"
    if source == "memory":
        return rest.split("/", 1)[1]
    return rest


class Resolver:
    """Link path -> key over a set of notes, by the rules in the module docstring."""

    def __init__(self, targets: Iterable[Target]) -> None:
        self.by_path: dict[str, str] = {}
        self.by_name: dict[str, list[Target]] = defaultdict(list)
        self.by_alias: dict[str, list[Target]] = defaultdict(list)
        self.memory: dict[tuple[str, str], str] = {}
        self.paths: dict[str, str] = {}
        for t in targets:
            self.paths[t.key] = t.path
            if t.agent:
                self.memory[t.agent, _low(t.path)] = t.key
                continue
            self.by_path[_low(t.path)] = t.key
            self.by_name[_low(t.path.rsplit("/", 1)[-1])].append(t)
            for a in t.aliases:
                if a.strip():
                    self.by_alias[_low(a.strip())].append(t)

    def resolve(self, target: str, src_key: str) -> tuple[str | None, int]:  # noqa: PLR0911 - one rule each
        """(key or None, how many notes the name could mean) for a link written in ``src_key``."""
        t = strip_md(target.replace("\\", "/").strip()).strip()
        if not t:
            return src_key, 1
        low = _low(t)
        src_path = self.paths.get(src_key, "")
        src_dir = _low(posixpath.dirname(src_path)) if not src_key.startswith("memory/") else ""
        if (agent := memory_agent(src_key)) is not None:
            own = self.memory.get((agent, low))
            if own is not None:
                return own, 1
        if low.startswith("/"):
            hit = self.by_path.get(posixpath.normpath(low.lstrip("/")))
            return hit, int(hit is not None)
        if low.startswith(("./", "../")):
            joined = posixpath.normpath(posixpath.join(src_dir, low))
            hit = self.by_path.get(joined)
            return hit, int(hit is not None)
        exact = self.by_path.get(low)
        if exact is not None:
            return exact, 1
        name = low.rsplit("/", 1)[-1]
        matches = [c for c in self.by_name.get(name, ()) if _low(c.path).endswith("/" + low)]
        if not matches and "/" not in low:
            matches = list(self.by_alias.get(low, ()))
        if not matches:
            return None, 0
        best = min(
            matches,
            key=lambda c: (
                _low(posixpath.dirname(c.path)) != src_dir,
                c.path.count("/"),
                len(c.path),
                c.path,
            ),
        )
        return best.key, len({c.key for c in matches})
