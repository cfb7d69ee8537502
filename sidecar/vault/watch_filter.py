"""Which file events the watch lets through (``NoteFilter``: notes, folders, Obsidian's settings
that decide what is indexed, and the folders they lie in), and where those settings are. Moved
out of ``watcher``.

Imports: vault."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import watchfiles

from sidecar.vault.notenames import COUNTED_SUFFIXES, is_debris

# Obsidian's settings that decide what is indexed and how (Excluded files; the daily notes' name
# format, which dates a note): a change to one is a reason to sweep, not a note.
OBSIDIAN_SETTINGS = frozenset(
    {
        ".obsidian/app.json",
        ".obsidian/daily-notes.json",
        ".obsidian/plugins/periodic-notes/data.json",
        ".obsidian/templates.json",  # the templates folder (left out of the index)
        ".obsidian/plugins/templater-obsidian/data.json",
        ".obsidian/plugins/calendar/data.json",  # the week start time phrases read weeks by
        ".obsidian/community-plugins.json",  # the plugins switched on (the Calendar plugin's start)
        ".obsidian/core-plugins.json",  # the core plugins switched on (the Templates plugin's folder)
    }
)

# The folders they lie in (.obsidian, .obsidian/plugins, ...): one made or removed (renamed away,
# a vault synced in) makes or takes its settings with one event, or none of their own.
SETTINGS_FOLDERS = frozenset(
    "/".join(parts[:i])
    for s in OBSIDIAN_SETTINGS
    if (parts := s.split("/")[:-1])
    for i in range(1, len(parts) + 1)
)


def obsidian_setting(path: str, vault: Path | None) -> bool:
    """Whether ``path`` is one of the vault's ``OBSIDIAN_SETTINGS`` or a folder they lie in."""
    if vault is None:
        return False
    top = str(vault).rstrip("/") + "/"
    return path.startswith(top) and path[len(top) :] in OBSIDIAN_SETTINGS | SETTINGS_FOLDERS


def settings_folders(paths: Sequence[Path]) -> list[Path]:
    """The folders of ``SETTINGS_FOLDERS`` there are under ``paths`` (a link to one too: a
    shared .obsidian is watched without its subfolders, never walked)."""
    out = []
    for p in paths:
        for rel in sorted(SETTINGS_FOLDERS):
            with contextlib.suppress(OSError):
                if (p / rel).is_dir():
                    out.append(p / rel)
    return out


class NoteFilter:
    """Accept changes to Markdown notes and to folders (a new folder may hold notes) under the roots,
    and to Obsidian's settings at a root's top (``OBSIDIAN_SETTINGS``), and folders of theirs
    made or removed (``SETTINGS_FOLDERS``)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = [str(r).rstrip("/") + "/" for r in roots]

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        root = next((r for r in self.roots if path.startswith(r)), None)
        rel = path[len(root) :] if root else Path(path).name
        if rel in OBSIDIAN_SETTINGS:
            return True
        if rel in SETTINGS_FOLDERS:
            return change in (watchfiles.Change.added, watchfiles.Change.deleted)
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts):
            return False
        name = parts[-1]
        if _other_kind(name):
            # Another kind of file, or a folder named so ("Node.js", "Trip 2026.12"): moving or
            # renaming a folder gives one event, for the folder only, so one that appears or may
            # have been one (its keys go by prefix) is let through; which added ones are folders
            # the watcher asks per batch, with a deadline (no stat here: it could hang).
            return change in (watchfiles.Change.added, watchfiles.Change.deleted)
        return not is_debris(name)


def _other_kind(name: str) -> bool:
    """A name with a dot that is not one a scan counts (a note's, a Bases file's, ...: a file of a
    counted kind is counted by its events as a sweep counts it): an attachment, or a folder named so."""
    return "." in name and not name.lower().endswith(COUNTED_SUFFIXES)


def _in_settings(path: str, roots: Sequence[Path]) -> bool:
    """A path in the Obsidian settings folder of one of ``roots``, or that folder."""
    return any(path == f"{r}/.obsidian" or path.startswith(f"{r}/.obsidian/") for r in roots)
