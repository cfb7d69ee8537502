"""What ``search``, ``get`` and ``links`` print for people: a hit's text as a one-line snippet
(``plain_text``, ``snippet``) and a note's links (``render_links``). A thin client's: no engine.
"""

from __future__ import annotations

import re
from typing import Any

from sidecar.contracts.notices import anchor_missing, links_state_note
from sidecar.contracts.printable import escape_controls as shown


def render_links(r: dict[str, Any]) -> str:
    """A note's outgoing links, backlinks and unresolved links, one per line."""
    lines = [f"{shown(r['reference'])}: {len(r['links'])} link(s), {len(r['backlinks'])} backlink(s)"]
    for link in r["links"]:
        if link["target"] is not None:
            kind = "embeds" if link["embed"] else "links to"
            anchor = f" #{shown(link['anchor'])}" if link["anchor"] else ""
            rule = link.get("excluded")
            excluded = f" (not indexed: excluded by {shown(rule)})" if rule else ""
            missing = anchor_missing(link)
            excluded += f" ({missing})" if missing else ""
            lines.append(f"  line {link['line']}: {kind} {shown(link['target'])}{anchor}{excluded}")
    for b in r["backlinks"]:
        # The same detail as the outgoing side: which section or block is meant, and embeds.
        kind = "embeds this note" if b.get("embed") else "links here"
        anchor = f" #{shown(b['anchor'])}" if b.get("anchor") else ""
        lines.append(f"  line {b['line']} of {shown(b['reference'])} {kind}{anchor}")
    for link in r["links"]:
        if link["target"] is None and link.get("resolving"):
            lines.append(f"  line {link['line']}: not resolved yet: [[{shown(link['link'])}]]")
    for name in r["unresolved"]:
        lines.append(f"  unresolved: [[{shown(name)}]]")
    if (note := links_state_note(r)) is not None:
        lines.append(f"  note: {shown(note)}")
    return "\n".join(lines)


# Markdown a person reading a one-line snippet does not need to see (the note keeps it: `get`).
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})(.*)$")
_RULE_ROW = re.compile(r"^\s*\|?(?:\s*:?-{2,}:?\s*\|)+\s*(?::?-{2,}:?\s*)?\|?\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_CALLOUT = re.compile(r"^(?:\s*>)+\s*\[!(\w+)\][-+]?\s*")
_QUOTE = re.compile(r"^(?:\s*>)+\s?")
_WIKILINK = re.compile(r"!?\[\[([^\[\]|]*?)(?:\|([^\[\]]*))?\]\]")
_MDLINK = re.compile(r"!?\[([^\[\]]*)\]\([^()\s]*(?:\s+\"[^\"]*\")?\)")
_EMPHASIS = re.compile(r"\*\*|__|~~|==|`+|(?<![\w*])\*(?=[^\s*])|(?<=[^\s*])\*(?![\w*])")
_WORD = re.compile(r"\w{3,}")
# A block id at a line's end or on a line of its own ("… restic. ^backup-cmd"): reading view hides it.
_BLOCK_ID = re.compile(r"(?:^|\s)\^[A-Za-z0-9-]+\s*$")
_MEDIA = re.compile(
    r"\.(?:png|jpe?g|gif|svg|webp|bmp|avif|heic|pdf|mp[34]|m4a|wav|ogg|flac|webm|mov|mkv|canvas)(?:#|$)", re.I
)


def plain_text(text: str) -> str:
    """A chunk's Markdown as one line of prose: headings end with a colon, table rules, quote and
    emphasis marks and block ids dropped, links shown as their text, callouts as their kind. A fenced code
    block's lines are shown as written: its ``# comment`` is no heading, its ``|`` no table."""
    out = []
    fence = ""  # the open fence's marker, "" outside code
    for raw in text.splitlines():
        marker = _FENCE.match(raw)
        if fence:
            # CommonMark: the same character, at least as long, and nothing after it.
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = "" if not marker.group(2).strip() else fence
            if fence:
                out.append(raw)
            continue
        if marker and not (marker.group(1)[0] == "`" and "`" in marker.group(2)):
            fence = marker.group(1)
            continue
        if _RULE_ROW.match(raw):
            continue
        line = _WIKILINK.sub(_link_text, _BLOCK_ID.sub("", raw))
        line = _EMPHASIS.sub("", _MDLINK.sub(r"\1", line))
        heading = _HEADING.match(line)
        if heading:
            title = heading.group(1)
            line = title if title.endswith((":", "?", "!", ".")) else f"{title}:"
        elif line.lstrip().startswith("|"):  # a table row: its cells
            line = " · ".join(c.strip() for c in line.strip().strip("|").split("|") if c.strip()) + ";"
        line = _QUOTE.sub("", _CALLOUT.sub(lambda m: f"{m.group(1).capitalize()}: ", line))
        out.append(line)
    return " ".join(" ".join(out).split())


def _link_text(m: re.Match[str]) -> str:
    target, shown_as = m.group(1), m.group(2)
    if m.group(0).startswith("!") and _MEDIA.search(target):
        return ""  # an embedded image or file: nothing to read
    return shown_as or target.replace("#", " › ").lstrip(" ›")


def snippet(text: str, query: str, width: int = 200) -> str:
    """The ``width`` characters of a hit's text (as ``plain_text``) that hold the most of the
    query's words, cut at words, with "…" where text was left out on either side."""
    plain = plain_text(text)
    if len(plain) <= width:
        return plain
    words = {w.lower()[:5] for w in _WORD.findall(query)}  # "Vorlage" meets "Vorlagen", "Vorlagenordner"
    found = [
        (m.start(), m.group().lower()[:5]) for m in _WORD.finditer(plain) if m.group().lower()[:5] in words
    ]
    start, best = 0, 0
    for i, (at, _w) in enumerate(found):
        inside = {w for pos, w in found[i:] if pos < at + width - 40}
        if len(inside) > best:
            start, best = at, len(inside)
    if start:  # some text before the first matched word, from a word's start
        start = max(0, start - 40)
        start = plain.rfind(" ", 0, start) + 1 if plain.rfind(" ", 0, start) >= 0 else start
        start = min(start, max(0, len(plain) - width))
        if start and plain[start - 1] != " ":
            start = plain.find(" ", start) + 1
    end = start + width
    part = plain[start:end]
    if end < len(plain):
        cut = part.rfind(" ")
        part = (part[:cut] if cut > width // 2 else part).rstrip(" ,;:") + "…"
    return ("…" if start else "") + part
