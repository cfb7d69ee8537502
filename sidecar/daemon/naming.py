"""Which note a reference names (``Named``): one as search returns it (``vault/Projects/Boat``),
or a note's name or a link as written in a note (``Boat``, ``[[Boat#Budget|costs]]``), resolved
as Obsidian resolves a link. Its own module because ``get``, ``related`` and ``why`` all name
their note this way, apart from what each does with it; a look at the disk goes through the
handlers' bounded one (``on_disk``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sidecar.config import Config
from sidecar.contracts.errors import NotFoundError, SourceError
from sidecar.contracts.printable import quoted
from sidecar.contracts.wire import SOURCES
from sidecar.notes.links import LinkGraph
from sidecar.notes.linktext import pasted_link
from sidecar.stores.manifest import Manifest
from sidecar.vault.references import key_for_reference, path_for_key
from sidecar.vault.timeout import NoAnswer

# A look at the file behind a key within the probe timeout (``Handlers._on_disk``).
OnDisk = Callable[[str, Callable[[], Any]], Any]


@dataclass(frozen=True)
class Named:
    """The note a reference names, the part of it a link's anchor points at, and how many notes
    a bare name could mean (the one Obsidian's link opens is taken)."""

    key: str
    anchor: str = ""
    candidates: int = 1


def named_note(
    reference: str, agent: str | None, *, cfg: Config, manifest: Manifest, on_disk: OnDisk
) -> Named:
    """The note a reference names: one as search returns it (``vault/Projects/Boat``), or a
    note's name or a link as written in a note (``Boat``, ``[[Boat#Budget|costs]]``), resolved
    as Obsidian resolves a link from the vault's top folder (the vault and the wiki only)."""
    try:
        key = key_for_reference(reference, agent)
    except SourceError:
        path, anchor = pasted_link(reference)
        if not path and anchor:
            raise SourceError(
                f"{quoted(reference)} names a heading or block of the note it is written in: put that "
                "note's name before the '#' (e.g. [[Boat#Budget]])"
            ) from None
        if not path or path.startswith(("/", "./", "../")) or path[1:2] == ":":
            raise  # an absolute or relative path: refused as it was
        if path.split("/", 1)[0] in SOURCES:
            if path == reference:
                raise  # a reference refused for itself (a ".." in it, a hidden folder, ...)
            return replace(
                named_note(path, agent, cfg=cfg, manifest=manifest, on_disk=on_disk), anchor=anchor
            )  # [[wiki/Boat#Budget]]
        found, candidates = LinkGraph(manifest.read).resolve_name(path, cfg.vault.wiki_subfolder)
        if found is None:
            own = f"memory/{agent}/{path.lower()}" if agent else None
            hint = (
                f"; your memory note is memory/{path.lower()}"
                if own is not None and manifest.rel_of(own) is not None
                else " (a reference as search returns it starts with vault/, wiki/ or memory/)"
            )
            raise NotFoundError(f"no note named {quoted(path)} in the vault or the wiki{hint}") from None
        return Named(found, anchor, candidates)
    if not key.startswith("memory/") and key != reference:
        # "vault/a.md" may name the note a.md.md (its reference as search returns it).
        exact = key_for_reference(reference + ".md", agent)
        if manifest.rel_of(exact) is not None:
            key = exact
    key = manifest.key_in_any_form(key)  # typed in NFC, named in NFD by a Mac
    if manifest.rel_of(key) is None and ("#" in reference or "^" in reference):
        path, anchor = pasted_link(reference)  # vault/Boat#Budget: a note's name holds no "#"
        if path != reference and path:
            try:
                return replace(
                    named_note(path, agent, cfg=cfg, manifest=manifest, on_disk=on_disk), anchor=anchor
                )
            except SourceError:
                pass
    if manifest.rel_of(key) is None and not key.startswith("memory/"):
        return _in_root(key, cfg=cfg, manifest=manifest, on_disk=on_disk) or Named(key)
    return Named(key)


def _in_root(key: str, *, cfg: Config, manifest: Manifest, on_disk: OnDisk) -> Named | None:
    """``vault/Boat`` with no note at that path: the note a bare name ``Boat`` opens, taken
    within that root only (``Boat`` worked and ``vault/Boat`` said no such note); None when
    a file is there (not indexed yet), or no note of the root has that name."""
    try:
        on_disk(key, lambda: path_for_key(cfg, key))
        return None
    except NotFoundError:
        pass
    except (SourceError, NoAnswer):
        return None  # refused or not answering: reading it says why
    source, rest = key.split("/", 1)
    graph = LinkGraph(manifest.read)
    found, candidates = graph.resolve_name(rest, cfg.vault.wiki_subfolder, source)
    return None if found is None else Named(found, "", candidates)
