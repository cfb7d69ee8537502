"""Which file names are notes (pure): Markdown, and in the vault and the wiki Canvas too; a memory
note's slug; and the names that are no note, each with the reason a file left out is counted
under (hidden names, editor temp files, sync tools' conflict copies and numbered copies, Bases
and plain Excalidraw files, two files with one key). Imports ``canvas`` only."""

from __future__ import annotations

import re
from collections.abc import Container

from sidecar.vault.canvas import is_canvas_name

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
