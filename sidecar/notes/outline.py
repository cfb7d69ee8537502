"""The wiki's topology as a short text for an agent's system prompt (pure).

Folders, pages and one-line descriptions, rendered within a token budget: when the full outline
does not fit, descriptions go first, then pages inside folders (shown as counts), then folders
beyond the budget. The text depends only on the pages, never on the clock or the call, so a host
can keep it in a cached system prompt. Imports only the project's pure text helpers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sidecar.contracts.printable import escape_controls
from sidecar.notes.markdown import plain_inline

CountTokens = Callable[[Sequence[str]], list[int]]
DETAILS = ("full", "titles", "folders", "truncated")


@dataclass(frozen=True)
class Page:
    path: str  # relative to the source, without .md ("Projects/Boat")
    title: str
    description: str  # one line, may be empty


@dataclass(frozen=True)
class Outline:
    text: str
    pages: int
    folders: int
    tokens: int
    detail: str  # one of DETAILS


_MARKERS = re.compile(r"^(?:\s*>)*\s*(?:\[![\w-]+\][-+]?\s*)?(?:[-*+]\s+(?:\[.\]\s+)?|\d+[.)]\s+)?")
_NOT_PROSE = ("```", "~~~", "<", "|", "---", "***", "$$", "^")


def lead_line(lines: Iterable[str]) -> str:
    """The first line of prose among a page's lines, as a page's description when its front matter
    has none: headings, code fences, HTML and template tags ("<% tp.date.now() %>"), tables, rules
    and math skipped; quote, callout and list marks dropped ("> [!abstract] Goal" is "Goal")."""
    fence = ""
    for line in lines:
        stripped = line.strip()
        if fence:  # inside a code block until its closing fence
            fence = "" if stripped.startswith(fence) else fence
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if not stripped or stripped.startswith("#") or stripped.startswith(_NOT_PROSE):
            continue
        prose = _MARKERS.sub("", stripped).strip()
        if prose and not prose.startswith(_NOT_PROSE):
            return prose
    return ""


def one_line(text: str, limit: int = 120, show: Callable[[str], str] = str) -> str:
    """The first sentence or line of ``text`` as it reads rendered, at most ``limit`` characters;
    ``show`` (secret masking) sees the rendered text before the cut: Markdown marks split a secret
    that masking would then miss ("**Password**"), and a cut through one leaves a piece of it."""
    line = " ".join(show(plain_inline(text)).split())
    for stop in (". ", "! ", "? "):
        if stop in line:
            line = line[: line.index(stop) + 1]
            break
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _folders(pages: Sequence[Page]) -> dict[str, list[Page]]:
    out: dict[str, list[Page]] = {}
    for p in sorted(pages, key=lambda p: p.path.lower()):
        folder = p.path.rsplit("/", 1)[0] if "/" in p.path else ""
        out.setdefault(folder, []).append(p)
    return out


def _page_line(p: Page, indent: str, describe: bool) -> str:
    name = p.path.rsplit("/", 1)[-1]
    title = f" ({escape_controls(p.title)})" if p.title and p.title != name else ""
    desc = f": {escape_controls(p.description)}" if describe and p.description else ""
    return f"{indent}- {escape_controls(name)}{title}{desc}"


def _render(folders: dict[str, list[Page]], detail: str) -> list[str]:
    lines: list[str] = []
    shown: set[str] = {""}
    for folder, pages in folders.items():
        parts = folder.split("/") if folder else []
        for depth in range(1, len(parts) + 1):  # a folder holding only folders still gets a line
            name = "/".join(parts[:depth])
            if name not in shown:
                shown.add(name)
                count = f" ({len(pages)} page{'s' if len(pages) != 1 else ''})" if name == folder else ""
                lines.append(f"{'  ' * (depth - 1)}- {escape_controls(parts[depth - 1])}/{count}")
        if detail == "folders" and folder:
            continue
        lines.extend(_page_line(p, "  " * len(parts), detail == "full") for p in pages)
    return lines


def _count(n: int, noun: str) -> str:
    """``1 page``, ``2 pages``, ``0 folders``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render(pages: Sequence[Page], budget: int, count: CountTokens, *, label: str = "wiki") -> Outline:
    """The most detailed outline of ``pages`` that fits ``budget`` tokens."""
    folders = _folders(pages)
    n_folders = len({"/".join(f.split("/")[:i]) for f in folders if f for i in range(1, f.count("/") + 2)})
    head = f"Outline of the {label} ({_count(len(pages), 'page')}, {_count(n_folders, 'folder')}); "
    head += f"read a page with memory_get('{label}/<path>')."
    for detail in DETAILS[:3]:
        lines = [head, *_render(folders, detail)]
        tokens = sum(count(lines))
        if tokens <= budget:
            return Outline("\n".join(lines), len(pages), n_folders, tokens, detail)
    # Even folder counts do not fit: keep the lines that do, and say how many were left out.
    lines = [head, *_render(folders, "folders")]
    costs = count(lines)
    kept: list[str] = [head]
    used = costs[0]
    for line, cost in zip(lines[1:], costs[1:], strict=True):
        if used + cost > budget - 12:
            break
        kept.append(line)
        used += cost
    more = _count(len(lines) - len(kept), "more line")
    kept.append(f"… ({more}; pass a larger token budget or a path prefix)")
    text = "\n".join(kept)
    return Outline(text, len(pages), n_folders, sum(count([text])), "truncated")
