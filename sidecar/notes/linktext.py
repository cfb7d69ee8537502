"""Links as written in a note's raw Markdown: wiki-links ``[[target#heading|alias]]``, block
references ``[[target#^id]]``, embeds ``![[target]]`` and Markdown links ``[text](path.md#anchor)``;
code blocks, inline code, comments (``%% … %%``, ``<!-- … -->``) and front matter hold none, and
links to attachments and web pages are left out."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container
from dataclasses import dataclass
from urllib.parse import unquote

from sidecar.notes.frontmatter import front_matter_block
from sidecar.notes.markdown import WIKILINK, code_lines, without_code_spans, without_comments
from sidecar.notes.markdown import is_attachment as _attached

_MDLINK = re.compile(r"(!?)\[([^\[\]]*)\]\(\s*(<[^<>\n]+>|[^()\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# The reader's version, recorded with the index: a reader that reads links differently has every
# unchanged note's links read again once (``sidecar.index.linkreread``), not only those edited.
# 1 (unrecorded): before the twenty-ninth session. 2: ``[[Note#Heading\|alias]]`` keeps no
#    backslash in its anchor; ``[[Plan.canvas]]`` is a link to a note (was an attachment).
LINKS_VERSION = 2


@dataclass(frozen=True)
class Link:
    """One link as written in a note."""

    target: str  # the link path as written, without anchor and alias ("" = this note)
    anchor: str  # heading ("Setup › Linux" for nested ones), "^block-id", or ""
    display: str  # the alias or the link text, "" when none
    embed: bool
    kind: str  # "wiki" | "markdown"
    line: int  # 1-based


def is_attachment(target: str) -> bool:
    """A link to an attachment, not a note. A Canvas is a note here (its cards are indexed), though
    a note's text shows an embedded one as nothing to read."""
    return _attached(target) and not target.lower().endswith(".canvas")


def _anchor(raw: str) -> str:
    parts = [p.strip() for p in raw.split("#") if p.strip()]
    return " › ".join(parts)


def _wiki_parts(m: re.Match[str], prose: bool = True) -> tuple[str, str, str]:
    """(target, anchor, alias) of a wiki-link match. Inside a table Obsidian needs the alias's pipe
    escaped (``[[Note#Heading\\|alias]]``): that one backslash belongs to neither the target nor
    the anchor; any other (``[[Note#C:\\dir\\]]``) is the link's own."""
    target, anchor, alias = m.group(2), (m.group(3) or "").rstrip(), m.group(4)
    if alias is not None:
        if anchor:
            anchor = _unescaped(anchor)
        else:
            target = _unescaped(target)
    target = target.strip()
    if prose:  # a note's text: trailing backslashes were never part of a target (as before)
        target = target.rstrip("\\").strip()
    return target, _anchor(anchor), (alias or "").strip()


def _unescaped(part: str) -> str:
    part = part.rstrip()
    return part[:-1] if part.endswith("\\") else part


def extract_links(text: str, code: Container[int] | None = None) -> list[Link]:
    """Every link to a note in ``text``, in order (links to attachments and web pages left out).
    ``code``: the lines of code blocks when known (``NoteDraft.code``), else the text is parsed."""
    text = unicodedata.normalize("NFC", text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n"))
    lines = text.split("\n")
    if code is None:
        code = code_lines(text)
    block = front_matter_block(text)
    start = block[1] if block is not None else 0
    # What Obsidian does not render links nothing: code (blanked first, so a "%%" in code opens no
    # comment) and comments, which may span lines (kept, so each link keeps its line number).
    prose = "\n".join("" if i in code else without_code_spans(lines[i]) for i in range(start, len(lines)))
    out: list[Link] = []
    # Links in properties ("[[Projekt Alpha]]" as a value, or in a list): Obsidian's properties
    # are links as much as the text's (backlinks, graph, renames).
    for i in range(1, max(start - 1, 1)):
        for m in WIKILINK.finditer(lines[i]) if "[[" in lines[i] else ():
            target, anchor, display = _wiki_parts(m, prose=False)
            if target and not is_attachment(target):
                out.append(Link(target, anchor, display, False, "property", i + 1))
    for i, line in enumerate(without_comments(prose, keep_lines=True).split("\n"), start):
        if "[" not in line:
            continue
        for m in WIKILINK.finditer(line):
            target, anchor, display = _wiki_parts(m)
            if target and is_attachment(target):
                continue
            if not target and not anchor:
                continue
            out.append(Link(target, anchor, display, bool(m.group(1)), "wiki", i + 1))
        for m in _MDLINK.finditer(WIKILINK.sub("", line)):
            raw = m.group(3).strip()
            raw = raw[1:-1].strip() if raw.startswith("<") else raw
            if _SCHEME.match(raw) or (raw.startswith("#") and not raw[1:].strip()):
                continue
            path, _, anchor = raw.partition("#")
            path = unquote(path).strip()
            if path and is_attachment(path):
                continue
            if not path and not anchor:
                continue
            out.append(
                Link(path, _anchor(unquote(anchor)), m.group(2).strip(), bool(m.group(1)), "markdown", i + 1)
            )
    return out


def strip_md(path: str) -> str:
    return path[:-3] if path.lower().endswith(".md") else path


def link_name(target: str) -> str:
    """What a link is looked up by: its last path segment, lowercased, without ``.md``."""
    return strip_md(target.replace("\\", "/").rstrip("/")).rsplit("/", 1)[-1].strip().lower()


def pasted_link(text: str) -> tuple[str, str]:
    """(link path, anchor) of a note's name or a link as a person or an agent pastes it:
    ``[[Note#Setup|shown]]``, ``![[Note]]``, ``[text](Folder/Note.md#Setup)``, ``Note#Setup``,
    ``Note#^block``, ``Folder/Note.md``. The anchor as ``Link.anchor`` has it ("" for none)."""
    text = unicodedata.normalize("NFC", text.strip())
    links = extract_links(text) if "[" in text else []
    if len(links) == 1 and (links[0].target or links[0].anchor):
        return links[0].target, links[0].anchor
    # A note's name holds no "#" nor "^" (Obsidian refuses both in file names).
    cut = min((i for i in (text.find("#"), text.find("^")) if i >= 0), default=len(text))
    path, anchor = text[:cut].strip(), text[cut:].lstrip("#")
    return path, _anchor(anchor)
