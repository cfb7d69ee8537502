"""An Obsidian Canvas (``.canvas``, JSON Canvas) as the Markdown a person reads on it: its text
cards' Markdown, its groups' labels as headings, its file cards as links and its link cards'
addresses, in reading order. The index and ``get`` both read a canvas through this, so a hit's
lines are lines of this text. Pure: imports only ``json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CANVAS_SUFFIX = ".canvas"


class CanvasError(ValueError):
    """The file is no Canvas: not JSON, or not an object with a list of nodes. Its text is one of
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
    cards = [c for c in (_card(n) for n in data.get("nodes", [])) if c is not None]
    parents = {i: _parent(c, cards) for i, c in enumerate(cards)}
    return "\n\n".join(_blocks(cards, parents, None, 1)) + "\n" if cards else ""


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
    box = [node.get(k, 0) for k in ("x", "y", "width", "height")]
    x, y, w, h = (float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0 for v in box)
    return _Card(kind, text.replace("\r\n", "\n").strip(), x, y, w, h)


def _blocks(cards: list[_Card], parents: dict[int, int | None], group: int | None, depth: int) -> list[str]:
    """The Markdown blocks of the cards directly in ``group`` (None: on the canvas itself): the
    loose cards first, top to bottom and left to right, then each group, its label a heading and
    its cards below it (a card after a group would read as part of that group's section)."""
    mine = [i for i in parents if parents[i] == group]
    out: list[str] = []
    for i in sorted(mine, key=lambda i: (cards[i].kind == "group", cards[i].y, cards[i].x)):
        card = cards[i]
        if card.kind != "group":
            if card.text:
                out.append(card.text)
            continue
        if card.text:
            out.append(f"{'#' * min(depth, 6)} {' '.join(card.text.split())}")
        out.extend(_blocks(cards, parents, i, depth + 1))
    return out


def _parent(card: _Card, cards: list[_Card]) -> int | None:
    """The smallest group that holds the whole card (Obsidian's reading of membership); a group
    only in a larger one (two groups on the same box would hold each other)."""
    area = card.width * card.height
    holders = [
        i
        for i, g in enumerate(cards)
        if g.kind == "group" and card.inside(g) and (card.kind != "group" or g.width * g.height > area)
    ]
    return min(holders, key=lambda i: cards[i].width * cards[i].height, default=None)
