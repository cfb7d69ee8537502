"""Whether a link's heading or block is in the note it links to (``anchor_found`` of ``get``'s
links), looked up within bounds. Its own module because it reads other notes than the one asked
for, under its own budget of notes, bytes and time, apart from the op that asks for it; the
reads themselves are ``get``'s (``Handlers._read``), given in.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import NotFoundError, SourceError, UnreadableError
from sidecar.notes.frontmatter import parse_front_matter
from sidecar.notes.markdown import note_anchors
from sidecar.stores.manifest import Manifest
from sidecar.vault.canvas import is_canvas_name
from sidecar.vault.ignore import OWN_RULES
from sidecar.vault.timeout import NoAnswer

# ``get`` tells whether a link's heading or block is in its note (``anchor_found``) by reading
# the linked notes, within bounds: at most this many notes, this many bytes read and parsed in all
# (about 0.2 s a 500 KB note), and this long in all (a note with hundreds of block links into a
# large note made each get take seconds, past a client's timeout). The links past a bound are not
# looked into (no ``anchor_found``).
ANCHOR_NOTES = 100
ANCHOR_BYTES = 1024 * 1024
ANCHOR_SECONDS = 1.0
# Excalidraw's links to a drawing's group, area or frame: no heading or block of the note.
_DRAWING_PART = re.compile(r"\^(?:group|area|frame|clippedframe)=", re.IGNORECASE)
log = logging.getLogger(__name__)


def look_up_anchors(
    key: str,
    text: str,
    links: list[dict[str, Any]],
    *,
    reader: Callable[[str, str, int], tuple[Path, str]],
    excluded_by: Callable[[str], str | None],
    manifest: Manifest,
    look: Callable[[str, Callable[[], tuple[Path, str]], float], tuple[Path, str]],
    clock: Callable[[], float],
) -> None:
    """``anchor_found`` of each link to a heading or block of a note (``links``: targets by
    key; ``text``: the note ``key``'s own): whether it is in that note now, as Obsidian
    marks a link whose note is there and whose heading is not. Each note is read as ``get``
    reads it, once, and looked through once for all its anchors, within ``ANCHOR_NOTES``,
    ``ANCHOR_BYTES`` and ``ANCHOR_SECONDS``. Not looked into (no ``anchor_found``): a note
    past a bound or that cannot be read now, a Canvas, an Excalidraw drawing (its links name
    elements, groups and frames that are no blocks of its text), a note sidecar's own rules
    leave out. ``reader``: ``get``'s read of a note (key, reference, most bytes); ``look``:
    how ``get`` waits for a read (key, the read, the seconds left): NoAnswer at once while its
    root hangs, and one still in its call after the probe timeout marks the root hanging (a
    read that hangs is counted apart from ``get``'s own); ``clock``: the handlers' own."""
    wanted: dict[str, list[dict[str, Any]]] = {}
    for link in links:
        target, anchor = link["target"], link["anchor"]
        if anchor and target is not None and not is_canvas_name(target) and not _DRAWING_PART.match(anchor):
            wanted.setdefault(target, []).append(link)
    deadline = clock() + ANCHOR_SECONDS
    budget = ANCHOR_BYTES
    for n, (target, some) in enumerate(wanted.items()):
        left = deadline - clock()
        if n >= ANCHOR_NOTES or left <= 0 or budget <= 0:
            log.info("get_anchors_unchecked key=%s notes=%d of=%d", key, len(wanted) - n, len(wanted))
            return
        if target == key:
            body = text
        else:
            rule = excluded_by(target)  # as get asks it: never shown, never read
            if rule is not None and rule.startswith(f"{OWN_RULES}:"):
                continue
            known = manifest.file_states(target).get(target)
            if known is not None and known.size > budget:
                continue  # larger than what is left to read: smaller notes may still fit
            read = partial(reader, target, target, budget)
            try:
                body = look(target, read, left)[1]
            except NotFoundError:
                continue
            except UnreadableError:
                budget = 0  # up to the budget may have been read (a binary file, one grown)
                continue
            except (SourceError, NoAnswer):
                continue
        size = len(body.encode("utf-8", "replace"))
        if target == key and size > budget:
            continue  # its links to itself, in a note larger than what is left to parse
        budget -= size
        if clock() >= deadline:
            continue  # read too late to be parsed: the next turn stops
        anchors = note_anchors(body)
        if _is_drawing(anchors.fm_raw):
            continue
        for link in some:
            link["anchor_found"] = anchors.has(link["anchor"])


def root_key(key: str) -> str:
    """The root a note's key is under, one per agent's memory (what a hung read is kept by)."""
    return key.rsplit("/", 1)[0] if key.startswith("memory/") else key.split("/", 1)[0]


def _is_drawing(fm_raw: str | None) -> bool:
    """Whether a note's front matter makes it an Excalidraw drawing, as its chunking reads it."""
    return (
        fm_raw is not None
        and "excalidraw-plugin" in fm_raw
        and "excalidraw-plugin" in parse_front_matter(fm_raw)[0]
    )
