"""Folders whose notes' paths are longer than the system allows, in the words of a PROBLEM line.

A folder renamed longer (or moved deeper) can push its notes' paths past PATH_MAX: the system then
refuses every call on them (ENAMETOOLONG), so they leave the index; a skip count alone did not say
why notes vanished from search. Pure: imports only ``notenames`` (the reason and note names).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sidecar.contracts.printable import few_names
from sidecar.vault.notenames import PATH_TOO_LONG, is_note_name

AREA = "path_too_long"
_SHOWN = 3  # folders named in the line; the count says how many more
_ENDS = 60  # characters kept at each end of a path too long to read whole


def too_long_folders(skips: Mapping[tuple[str, str], str]) -> list[str]:
    """The folders (sorted) of the ``skips`` (by (root name, path): reason) whose path is too
    long: a folder's own, or the folder of each note skipped for it (one per folder)."""
    folders: set[str] = set()
    for (name, where), reason in skips.items():
        if reason != PATH_TOO_LONG:
            continue
        path = Path(where)
        source = name.split("/", 1)[0]  # "memory/<agent>" is a memory inbox
        folders.add(str(path.parent) if is_note_name(path.name, source) else where)
    return sorted(folders)


def too_long_problem(folders: list[str]) -> str | None:
    """One PROBLEM line naming the ``folders`` (None when there are none)."""
    if not folders:
        return None
    named = few_names([_abridged(f) for f in folders], _SHOWN)
    return (
        f"{len(folders)} folder(s) may hold notes whose paths are longer than the system allows "
        f"({named}): their notes are not indexed (left out of search) until the folder's "
        "name or path is made shorter"
    )


def _abridged(path: str) -> str:
    """``path`` whole, or its two ends around an ellipsis (it is thousands of characters long)."""
    return path if len(path) <= 2 * _ENDS + 1 else f"{path[:_ENDS]}…{path[-_ENDS:]}"
