"""Case spellings on case-insensitive disks (macOS, an SMB share), a mixin of ``ChangeFinder``
(``diff``): a name renamed "Tar" -> "tar" still opens by its old spelling, so the events' look
tells the spelling a folder lists from its aliases (``_case_aliases``), finds the indexed
spelling of a note an event names otherwise, and tells a twin ("Note.MD" beside "Note.md") from
the very file under another spelling (``_Sibling``, ``_twin_names``). Its own module because
these are look-ups on the disk and the manifest alone; the state it works on is the
``ChangeFinder``'s own.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Collection, Sequence
from pathlib import Path

from sidecar.notes.markdown import is_attachment
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import folded
from sidecar.vault.notenames import NOTE_SUFFIXES
from sidecar.vault.sources import Asking, Root, _listed, asked


class _Sibling:
    """The names beside ``path`` that are another file (on a case-insensitive share "Note.md"
    names ``Note.MD`` itself: not a twin)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __contains__(self, name: object) -> bool:
        try:
            other, own = os.lstat(self.path.parent / str(name)), os.lstat(self.path)
        except OSError:
            return False
        return (other.st_dev, other.st_ino) != (own.st_dev, own.st_ino)


class CaseSpellings:
    """The spelling look-ups of a ``ChangeFinder`` (which sets the state below)."""

    manifest: Manifest

    def _other_spellings(
        self, root: Root, rels: Sequence[str], asking: Asking
    ) -> tuple[list[str], list[str]]:
        """(gone, to look at): the old spelling of a name whose case changed (a case-insensitive
        disk) is gone as such, also when its event came in an earlier batch than the new
        spelling's (the indexed one). An indexed spelling still listed is looked at: the event
        named another spelling of the same file (a tool writing through it), whose edit was lost
        until a full sweep. ``asking`` is told of each listing (a hung share is given up on)."""
        indexed = self._indexed_spellings(root, rels, asking)
        gone = sorted(_case_aliases(root.path, [*rels, *indexed], asking))
        return gone, [r for r in [*rels, *indexed] if r not in gone]

    def _indexed_spellings(self, root: Root, rels: Sequence[str], asking: Asking) -> list[str]:
        """The files of indexed notes spelled as a new note of ``rels`` but for case, which are
        not among ``rels``: the other half of a case-only rename whose events came in another
        batch ("Tar.md" then "tar.md" on a case-insensitive disk: both open, and the note was
        indexed under both until a full sweep). A note indexed as spelled costs no lookup.
        A new note's folders are looked up too (``_indexed_folder_spellings``): its folder may
        be the one renamed ("Notes" -> "notes"), its own event come before the folder's."""
        manifest = self.manifest
        fresh = [
            rel
            for rel in rels
            if rel.lower().endswith(NOTE_SUFFIXES) and manifest.rel_of(root.key_of(rel)) != rel
        ]
        looked = set(rels)
        found = manifest.spelled_otherwise([root.key_of(r) for r in fresh]) if fresh else {}
        out = [r for r in found.values() if r not in looked]
        folders = sorted({rel.rsplit("/", i)[0] for rel in fresh for i in range(1, rel.count("/") + 1)})
        return out + [
            r
            for r in self._indexed_folder_spellings(root, [*rels, *folders], asking, listed=set(folders))
            if r not in looked
        ]

    def _indexed_folder_spellings(
        self, root: Root, rels: Sequence[str], asking: Asking, listed: Collection[str] = ()
    ) -> list[str]:
        """The folders holding indexed notes spelled as a folder of ``rels`` but for case or
        Unicode form: the other half of a folder's case-only (or form-only) rename whose events
        came in another batch ("Notes" then "notes", or a note's event "notes/Tar.md" first).
        Its notes were read again as new ones, the old keys kept until a full sweep. Each with
        the spelling of ``rels`` that matched it, when that one is among ``listed`` (a new note's
        folder, no event's own: the pair is compared by the listing). A note's path, or an
        attachment's ("Bilder/x.png"), costs no lookup; a folder a few rows' lookup, and a stat
        only once a spelling is found, asked of ``asking`` as every look-up of the events' look
        (a hung share is given up on there, not waited for by the batch)."""
        base = root.key_of("")  # a folder's key is this and its path
        fresh = [
            base + rel
            for rel in dict.fromkeys(rels)
            if not rel.lower().endswith(NOTE_SUFFIXES) and not is_attachment(rel)
        ]
        found = self.manifest.folders_spelled_otherwise(fresh) if fresh else {}
        out: set[str] = set()
        for key, spelled in found.items():
            rel = spelled[len(base) :]
            if rel in listed or _is_folder(root.path / rel, rel, asking):
                out.add(key[len(base) :])
                if rel in listed:
                    out.add(rel)
        return sorted(out)


def _is_folder(path: Path, rel: str, asking: Asking) -> bool:
    """Whether ``path`` is a folder, the look-up told to ``asking`` (a stat of ``rel``)."""
    with asked(asking, "stat", rel):
        return os.path.isdir(path)


def _case_aliases(top: Path, rels: Sequence[str], asking: Asking) -> set[str]:
    """Those of ``rels`` that another one spells but for case or Unicode form ("Tar" and "tar")
    and that their folder does not list by that spelling, while it lists another of them: on a
    case-insensitive disk (macOS, an SMB share) the old name of a folder or note renamed "Tar" ->
    "tar", or deleted and made anew as "tar.md", still opens, and its note stayed indexed beside
    the new one's (found twice until a full sweep, whose deletion of the old keys a mass-deletion
    hold could keep). Folders are listed only for such pairs (a save's events cost no listing),
    each listing asked of ``asking`` entry by entry (given up on where a share hangs, as a sweep's;
    a big folder of a slow share is many answers, none hung)."""
    groups: dict[str, list[str]] = {}
    for rel in rels:
        groups.setdefault(folded(rel), []).append(rel)
    listed: dict[Path, tuple[set[str], set[str]] | None] = {}  # folder -> (names, in NFC)

    def on_disk(rel: str, exact: bool) -> bool | None:
        """Whether each part of ``rel`` is listed by its folder: as spelled (``exact``), else in
        either Unicode form."""
        folder = top
        done: list[str] = []  # the parts of ``folder`` below ``top``, for ``asking``
        for part in rel.split("/"):
            if folder not in listed:
                try:  # each entry that comes starts the clock again, as a scan's listing
                    names = {e.name for e in _listed(folder, "/".join(done) or ".", asking)}
                    listed[folder] = names, {unicodedata.normalize("NFC", n) for n in names}
                except OSError:
                    listed[folder] = None
            names_of = listed[folder]
            if names_of is None:
                return None  # not known: taken as spelled
            if (
                (part not in names_of[0])
                if exact
                else (unicodedata.normalize("NFC", part) not in names_of[1])
            ):
                return False
            folder = folder / part
            done.append(part)
        return True

    out: set[str] = set()
    for spellings in groups.values():
        if len(spellings) > 1:
            # A spelling listed as it is makes the others aliases, one in another Unicode form
            # too (a folder renamed from its decomposed name to the composed one); only when
            # none is, the forms compare alike (a listing in another form than the events).
            for exact in (True, False):
                found = {rel: on_disk(rel, exact) for rel in spellings}
                if any(found.values()):  # one spelling listed: the others are only its aliases
                    out.update(rel for rel, there in found.items() if there is False)
                    break
    return out


def _twin_names(rel: str) -> list[str]:
    """The other spellings of a note's ``.md`` ("Note.MD", "Note.mD", ... for "Note.md")."""
    if not rel.lower().endswith(".md"):
        return []
    return [rel[:-3] + ext for ext in (".md", ".mD", ".Md", ".MD") if ext != rel[-3:]]
