"""An Obsidian Canvas (``.canvas``, JSON Canvas) as the Markdown a person reads on it: its text
cards' Markdown, its groups' labels as headings, its file cards as links and its link cards'
addresses, in reading order. The index and ``get`` both read a canvas through this, so a hit's
lines are lines of this text. Pure: imports only ``bisect``, ``json`` and ``math``.

A canvas is user data of any size and shape (generated, synced, hostile): its reading is
O(n log n) in its cards for every canvas Obsidian draws (groups side by side or nested), never
recursive, and bounded by ``MAX_WORK`` steps otherwise; whatever fails is a ``CanvasError``."""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

CANVAS_SUFFIX = ".canvas"
# The reader's version, recorded with the index: a reader that reads canvases differently has the
# indexed ones read again once (their bytes did not change, so no sweep would). 1 (unrecorded):
# the first. 2: a first card opening with "---" is no front matter.
CANVAS_READER_VERSION = 2
# Obsidian's coordinates are pixels; far beyond any screen is no canvas (and 1e308 + w overflows).
MAX_COORD = 1e12
# Steps (a card tried against a group, a group filed in a grid cell) before a canvas whose groups
# overlap in pathological ways is given up as unreadable: about a second of Python at most.
MAX_WORK = 2_000_000


class CanvasError(ValueError):
    """The file is no Canvas: not JSON, not an object with a list of nodes, a coordinate out of
    range, or groups too tangled to read within ``MAX_WORK``. Its text is one of
    a few fixed reasons (counted by reason in ``status``); ``detail`` says where it failed."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail or reason


@dataclass(frozen=True)
class _Card:
    kind: str  # "text" | "file" | "link" | "group"
    text: str  # the card's Markdown, a file card's link, a group's label
    x: float
    y: float
    width: float
    height: float

    def inside(self, group: _Card) -> bool:
        return (
            self is not group
            and group.x <= self.x
            and group.y <= self.y
            and self.x + self.width <= group.x + group.width
            and self.y + self.height <= group.y + group.height
        )


def is_canvas_name(name: str) -> bool:
    return name.lower().endswith(CANVAS_SUFFIX)


def canvas_markdown(text: str) -> str:
    """The Markdown of a canvas's JSON text; CanvasError when it is none."""
    try:
        data = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise CanvasError("not JSON", str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes", []), list):
        raise CanvasError("no list of nodes")
    try:
        cards = [c for c in (_card(n) for n in data.get("nodes", [])) if c is not None]
        text = "\n\n".join(_blocks(cards, _parents(cards))) + "\n" if cards else ""
    except CanvasError:
        raise
    except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        # A safety net: one odd file must be a skipped note, never a crashed sweep.
        raise CanvasError("unreadable", f"{type(exc).__name__}: {exc}") from None
    # A canvas has no properties: a first card opening with a "---" line (a rule, a card that
    # holds a note's properties as text) read as the canvas's front matter (its title, tags and
    # dates, its text gone from search). A blank line first keeps it the card's text.
    return "\n" + text if text.startswith("---") else text


def _card(node: Any) -> _Card | None:
    """One node as a card; None for one without text to read (or not shaped as a node)."""
    if not isinstance(node, dict):
        return None
    kind = node.get("type")
    if kind == "text":
        text = node.get("text")
    elif kind == "group":
        text = node.get("label") or ""
    elif kind == "file":
        file = node.get("file")
        sub = node.get("subpath") if isinstance(node.get("subpath"), str) else ""
        text = f"[[{file}{sub}]]" if isinstance(file, str) and file.strip() else None
    elif kind == "link":
        text = node.get("url")
    else:
        return None
    if not isinstance(text, str):
        return None
    x, y, w, h = (_coord(node.get(k, 0)) for k in ("x", "y", "width", "height"))
    # A negative size is no box; as a point it still sits where it was drawn.
    return _Card(kind, text.replace("\r\n", "\n").strip(), x, y, max(w, 0.0), max(h, 0.0))


def _coord(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not -MAX_COORD <= number <= MAX_COORD:  # also NaN and Infinity, which json accepts
        raise CanvasError("coordinate out of range", f"coordinate {str(value)[:40]} out of range")
    return number


def _parents(cards: list[_Card]) -> list[int | None]:
    """Each card's smallest group that holds the whole card (Obsidian's reading of membership);
    a group only in a larger one (two groups on the same box would hold each other); ties go to
    the group first in the file. A card's top left corner lies in every group holding it, so a
    grid of the groups' boxes leaves to try only the groups filed in that corner's cell, smallest
    first: O(n log n) for groups side by side or nested, ``MAX_WORK`` steps at most otherwise."""
    parents: list[int | None] = [None] * len(cards)
    groups = sorted((i for i, c in enumerate(cards) if c.kind == "group"), key=lambda i: (_area(cards[i]), i))
    if not groups:
        return parents
    grid = _Grid([cards[i] for i in groups])
    work = 0
    cells: dict[tuple[int, int], list[int]] = {}
    for rank, i in enumerate(groups):  # smallest first, so each cell's list is in that order
        for cell in grid.cells(cards[i]):
            cells.setdefault(cell, []).append(rank)
            work = _step(work)
    areas = [_area(cards[i]) for i in groups]
    for n, card in enumerate(cards):
        # A group holds only groups strictly larger: skip the ranks of smaller or equal areas.
        floor = bisect_right(areas, _area(card)) if card.kind == "group" else 0
        filed = cells.get(grid.cell(card.x, card.y), [])
        for at in range(bisect_left(filed, floor), len(filed)):
            work = _step(work)
            rank = filed[at]
            if card.inside(cards[groups[rank]]):
                parents[n] = groups[rank]
                break
    return parents


def _step(work: int) -> int:
    if work >= MAX_WORK:
        raise CanvasError("too many overlapping groups", f"more than {MAX_WORK:,} steps to place its cards")
    return work + 1


def _area(card: _Card) -> float:
    return card.width * card.height


class _Grid:
    """Square cells over the groups' bounding box: about one group per cell for groups side by
    side, fewer cells where big groups would be filed in most of them (groups nested in groups)."""

    def __init__(self, groups: list[_Card]) -> None:
        self.x0 = min(g.x for g in groups)
        self.y0 = min(g.y for g in groups)
        self.x1 = max(g.x + g.width for g in groups)
        self.y1 = max(g.y + g.height for g in groups)
        self._size(max(1, min(64, math.isqrt(len(groups)))))
        while self.side > 1 and sum(self.count(g) for g in groups) > 8 * len(groups):
            self._size(self.side // 2)

    def _size(self, side: int) -> None:
        self.side = side
        self.w = (self.x1 - self.x0) / side or 1.0
        self.h = (self.y1 - self.y0) / side or 1.0

    def count(self, box: _Card) -> int:
        left, top = self.cell(box.x, box.y)
        right, bottom = self.cell(box.x + box.width, box.y + box.height)
        return (right - left + 1) * (bottom - top + 1)

    def cell(self, x: float, y: float) -> tuple[int, int]:
        # Monotonic in x and y, so a point in a box has a cell in the box's range of cells.
        return self._index((x - self.x0) / self.w), self._index((y - self.y0) / self.h)

    def _index(self, at: float) -> int:
        return min(self.side - 1, max(0, math.floor(at)))

    def cells(self, box: _Card) -> list[tuple[int, int]]:
        left, top = self.cell(box.x, box.y)
        right, bottom = self.cell(box.x + box.width, box.y + box.height)
        return [(cx, cy) for cx in range(left, right + 1) for cy in range(top, bottom + 1)]


def _blocks(cards: list[_Card], parents: list[int | None]) -> list[str]:
    """The Markdown blocks of the canvas: in each group (and on the canvas itself) the loose cards
    first, top to bottom and left to right, then each group, its label a heading and its cards
    below it (a card after a group would read as part of that group's section). A loop with its
    own stack: groups nested a thousand deep are user data, not a reason for a RecursionError."""
    children: dict[int | None, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)

    def ordered(group: int | None) -> list[int]:
        mine = children.get(group, [])
        return sorted(mine, key=lambda i: (cards[i].kind == "group", cards[i].y, cards[i].x))

    out: list[str] = []
    stack: list[tuple[list[int], int, int]] = [(ordered(None), 0, 1)]  # (cards, next one, depth)
    while stack:
        mine, at, depth = stack.pop()
        if at == len(mine):
            continue
        stack.append((mine, at + 1, depth))
        card = cards[mine[at]]
        if card.kind != "group":
            if card.text:
                out.append(card.text)
            continue
        if card.text:
            out.append(f"{'#' * min(depth, 6)} {' '.join(card.text.split())}")
        stack.append((ordered(mine[at]), 0, depth + 1))
    return out
