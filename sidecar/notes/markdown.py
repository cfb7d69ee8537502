"""A note's Markdown read for chunking: top-level blocks grouped under their heading path (with
the raw front matter), wiki-links as readable text, inline and front-matter tags, and pasted
encoded data told apart from language."""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt

from sidecar.notes.frontmatter import front_matter_block

# A wiki-link lies on one line: Obsidian reads "[[a" and "b]]" on two lines as text.
WIKILINK = re.compile(r"(!?)\[\[([^\[\]|#^\n]*)((?:[#^][^\[\]|\n]*)?)(?:\|([^\[\]\n]*))?\]\]")
# A link to one of these is to an attachment, not a note. Any other dotted name is a note's
# ("Node.js", "ASP.NET", "Release 1.5"): Obsidian resolves it by appending ".md".
_ATTACHMENT = re.compile(
    r"\.(?:avif|bmp|gif|heic|ico|jpe?g|png|svg|tiff?|webp"  # images
    r"|3gp|aac|flac|m4a|mp3|oga|ogg|opus|wav"  # audio
    r"|avi|m4v|mkv|mov|mp4|ogv|webm"  # video
    r"|pdf|canvas|base|epub|docx?|xlsx?|pptx?|od[gpst]|rtf"  # documents
    r"|csv|tsv|json|xml|html?|ya?ml"  # data files (Obsidian opens them as attachments)
    r"|7z|bz2|gz|rar|tar|tgz|xz|zip)$",  # archives
    re.I,
)
# "\#word" is an escaped "#", written to show one: no tag (Obsidian renders it as text).
_INLINE_TAG = re.compile(r"(?<![\w/&#\\])#([^\W\d][\w/-]*|\d+[^\W\d][\w/-]*)")
_TICKS = re.compile(r"`+")
# Obsidian's comments and HTML ones: opener -> closer (see ``without_comments``).
_COMMENTS = {"%%": "%%", "<!--": "-->"}
# Possessive (Python 3.11): "](" before a long run of blanks backtracked over every split of it.
_LINK_DEST = re.compile(r"\]\(\s*+(?:<[^<>\n]*+>|[^()\s]*+)(?:\s++\"[^\"\n]*+\")?\s*+\)")
# Base64, hex digests, minified data: runs of "word" characters no language has. A chunk made
# mostly of them means nothing to the model (a pasted 1 MB image was 3,600 embedded chunks).
_DATA_RUN = re.compile(r"[A-Za-z0-9+/=_-]{64,}")
_WEB_LINK = re.compile(r"\bhttps?://\S+")  # ids in links are not pasted data


_EMBED_SIZE = re.compile(r"\d+(?:x\d+)?")


def readable_links(line: str) -> str:
    """``[[target|alias]]`` -> ``alias``; ``[[target#head]]`` -> ``target › head``; image embeds vanish."""

    def repl(m: re.Match[str]) -> str:
        bang, target, anchor, alias = m.group(1), m.group(2).strip(), m.group(3), m.group(4)
        if alias is not None and alias.strip() and not (bang and _EMBED_SIZE.fullmatch(alias.strip())):
            return alias.strip()  # an embed's "|400" or "|640x480" is its size, not text
        if bang and is_attachment(target):
            return ""
        name = target.rsplit("/", 1)[-1]
        if name.lower().endswith(".md"):
            name = name[:-3]
        head = anchor.lstrip("#^").strip() if anchor else ""
        return f"{name} › {head}" if name and head else (name or head)

    return WIKILINK.sub(repl, line)


# Inline Markdown a person does not read as text: a link's destination, emphasis and code marks.
_INLINE_LINK = re.compile(r"(!?)\[([^\[\]\n]*)\]\([^()\n]*\)")
_INLINE_MARKS = re.compile(r"\*\*|~~|`")  # not "__" nor "==": `__init__`, a == b


def plain_inline(line: str) -> str:
    """``line`` as it reads rendered: links as their text (image embeds vanish), without bold,
    strike-through and code marks (an outline's description showed ``[text](https://…`` cut off)."""
    line = readable_links(line)
    line = _INLINE_LINK.sub(lambda m: "" if m.group(1) else m.group(2), line)
    return _INLINE_MARKS.sub("", line)


def is_attachment(path: str) -> bool:
    """Whether a link path names an attachment (an image, a PDF, a canvas, ...), not a note."""
    return _ATTACHMENT.search(path.rsplit("/", 1)[-1]) is not None


def str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in re.split(r"[,\s]+", value) if v.strip()]
    if isinstance(value, list):
        return [str(v).strip() for v in value if isinstance(v, str | int | float) and str(v).strip()]
    return []


def norm_tag(tag: str) -> str:
    return tag.strip().lstrip("#").lower()


def filter_tag(tag: str) -> str:
    """A tag asked for by a filter: as a note's (``norm_tag``), and "#project/" as the tag pane
    shows a parent is the tag and those below it."""
    return norm_tag(tag).rstrip("/")


def inline_tags(lines: Sequence[str], code: Container[int] = frozenset(), start: int = 0) -> list[str]:
    """``#tags`` in ``lines[start:]``, outside the ``code`` lines (see ``code_lines``), inline code,
    comments and link targets."""
    prose = "\n".join("" if i in code else without_code_spans(lines[i]) for i in range(start, len(lines)))
    # Obsidian reads no tags in what it does not render (comments, over lines too) nor in where a
    # link points: "[[#Heading]]" and "[text](#anchor)" name a heading, not a tag.
    prose = _LINK_DEST.sub("]", WIKILINK.sub(" ", without_comments(prose)))
    return [m.group(1) for m in _INLINE_TAG.finditer(prose)]


def without_code_spans(line: str, fill: str = "") -> str:
    """``line`` with each code span (a backtick run up to the next run of the same length) made a
    blank. Linear in the runs: a regular expression tried each run against the rest of the line
    (half a megabyte of backticks took 7 s)."""
    if "`" not in line:
        return line
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(line)]
    by_length: dict[int, list[int]] = {}  # run length -> indices of runs of that length, in order
    for j, (a, b) in enumerate(runs):
        by_length.setdefault(b - a, []).append(j)
    taken = dict.fromkeys(by_length, 0)  # per length: how many of its runs lie behind the scan
    out: list[str] = []
    i = j = 0
    while j < len(runs):
        a, b = runs[j]
        same = by_length[b - a]
        while same[taken[b - a]] <= j:  # move past this run and those already passed
            taken[b - a] += 1
            if taken[b - a] == len(same):
                break
        if taken[b - a] == len(same):
            j += 1  # no closer of its length: literal backticks
            continue
        close = same[taken[b - a]]
        # ``fill``: the span kept as long as it was (offsets into the line stay valid)
        out += [line[i:a], fill * (runs[close][1] - a) if fill else " "]
        i = runs[close][1]
        j = close + 1
    out.append(line[i:])
    return "".join(out)


def comment_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``%% … %%`` and ``<!-- … -->`` in ``text``, markers included; an
    unclosed one hides nothing. Linear: a regular expression tried every opener against the rest
    of the text (a note of 32,000 unclosed ``<!--`` took 73 s)."""
    spans: list[tuple[int, int]] = []
    i = 0
    nxt = {o: text.find(o) for o in _COMMENTS}  # each kind's next opener at or after i (-1: none)
    while True:
        live = [(p, o) for o, p in nxt.items() if p >= 0]
        if not live:
            break
        p, o = min(live)
        end = text.find(_COMMENTS[o], p + len(o))
        if end < 0:  # unclosed: no later opener of its kind can close either
            nxt[o] = -1
            continue
        i = end + len(_COMMENTS[o])
        spans.append((p, i))
        for k, q in nxt.items():
            if 0 <= q < i:
                nxt[k] = text.find(k, i)
    return spans


def without_comments(text: str, keep_lines: bool = False) -> str:
    """``text`` with each comment (``comment_spans``) made a blank (with its line ends when
    ``keep_lines``, so what follows keeps its line number)."""
    out: list[str] = []
    i = 0
    for p, end in comment_spans(text):
        out += [text[i:p], " " + "\n" * text.count("\n", p, end) if keep_lines else " "]
        i = end
    out.append(text[i:])
    return "".join(out)


def code_lines(text: str) -> frozenset[int]:
    """The 0-based lines of ``text``'s fenced and indented code blocks (see ``split_sections``)."""
    return _code_lines(_PARSER.parse(_without_front_matter(text)[0]))


def _without_front_matter(text: str) -> tuple[str, str | None, int]:
    """``text`` with its front matter's lines left empty (so every line keeps its number), the
    raw YAML and the lines the block takes. The block is found as ``front_matter_block`` finds
    it, one rule for every reader (markdown-it's plugin also ended a block at an indented
    "---", a line inside a quoted value, and the note lost its whole front matter)."""
    block = front_matter_block(text)
    if block is None:
        return text, None, 0
    raw, end = block
    rest = text.split("\n", end)
    return "\n" * end + (rest[end] if len(rest) > end else ""), raw, end


def _code_lines(tokens: Sequence[Any]) -> frozenset[int]:
    # CommonMark's reading, not a toggle on every fence-like line: a fence closes only on a line of
    # its own character, at least as long and without an info string (a ```` fence may hold ```),
    # an unclosed one runs to the end of its container, and an indented line is code only where it
    # cannot continue a paragraph or a list item.
    return frozenset(
        line for tok in tokens if tok.type in ("fence", "code_block") and tok.map for line in range(*tok.map)
    )


@dataclass
class Block:
    start: int  # 0-based line, inclusive
    end: int  # exclusive
    heading: bool = False


@dataclass
class Section:
    headings: tuple[str, ...]
    blocks: list[Block]


def _md() -> MarkdownIt:
    # Only the block structure is used (a heading's text is its inline token's content), so the
    # inline rule, 40 % of parsing time, stays off.
    return MarkdownIt("commonmark").enable("table").disable("inline")


_PARSER = _md()


# Fenced blocks a plugin replaces with the answer to a query (Dataview, Tasks, Obsidian's embedded
# search, Bases): their text is a question about the vault, not the note's content, and it matched
# every question naming a folder or a status ("TASK FROM "Projects" WHERE !completed").
QUERY_FENCES = frozenset({"dataview", "dataviewjs", "tasks", "query", "base"})
# HTML blocks of style sheets and scripts (web clippings carry them): no one reads them.
_HIDDEN_HTML = re.compile(r"\s*<(style|script)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Parsed:
    """A note's Markdown as ``split_sections`` reads it."""

    sections: list[Section]
    fm_raw: str | None  # the front matter's YAML, None without a block
    fm_end: int  # the lines the front matter takes
    code: frozenset[int]  # 0-based lines of code blocks
    hidden: frozenset[int]  # 0-based lines no reader sees as text: query fences, <style>, <script>


def split_sections(text: str) -> Parsed:
    """Top-level blocks grouped under their heading path, the front matter, the lines of code
    blocks (``code_lines``) and of blocks that are not text to read (``Parsed.hidden``)."""
    body, fm_raw, fm_end = _without_front_matter(text)
    tokens = _PARSER.parse(body)
    sections = [Section((), [])]
    stack: list[tuple[int, str]] = []
    hidden: set[int] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.map and (
            (tok.type == "fence" and tok.info.strip().split(" ", 1)[0].lower() in QUERY_FENCES)
            or (
                tok.type == "html_block"
                and (m := _HIDDEN_HTML.match(tok.content)) is not None
                and f"</{m.group(1).lower()}" in tok.content.lower()
            )  # an unclosed one hides nothing
        ):
            hidden.update(range(*tok.map))
        if tok.level == 0 and tok.map and tok.nesting >= 0:
            start, end = tok.map
            if tok.type == "heading_open":
                level = int(tok.tag[1:])
                title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, readable_links(title)))
                sections.append(Section(tuple(h for _, h in stack), [Block(start, end, heading=True)]))
            else:
                sections[-1].blocks.append(Block(start, end))
        i += 1
    return Parsed(sections, fm_raw, fm_end, _code_lines(tokens), frozenset(hidden))


def without_comment_lines(text: str) -> str:
    """``text`` as reading view shows it as far as comments go: each ``%% … %%`` and ``<!-- … -->``
    taken out, lines kept (what follows keeps its line number). Plugins keep their data there (an
    Excalidraw drawing, a Kanban board's settings). A marker inside code or front matter opens no
    comment; a code block inside a comment is hidden with it."""
    if "%%" not in text and "<!--" not in text:
        return text
    lines = text.split("\n")
    body, _raw, fm_end = _without_front_matter(text)  # once: code_lines would find it again
    shielded = _code_lines(_PARSER.parse(body)) | set(range(fm_end))
    # Found on a copy of the same length where code and front matter hold no marker, taken out
    # of the text itself: the inline code beside a comment stays.
    probe = "\n".join(
        "\x01" * len(line) if i in shielded else without_code_spans(line, "\x01")
        for i, line in enumerate(lines)
    )
    out: list[str] = []
    i = 0
    for start, end in comment_spans(probe):
        out.append(text[i:start])
        breaks = text.count("\n", start, end)
        mid_line = start > 0 and not text[start - 1].isspace() and end < len(text) and not text[end].isspace()
        # Nothing where it stood: a blank left at a line's start would make the rest of the line
        # an indented code block.
        out.append("\n" * breaks if breaks else (" " if mid_line else ""))
        i = end
    out.append(text[i:])
    return "".join(out)


def mostly_data(text: str) -> bool:
    """Whether at least half of the text's visible characters are encoded data, not language."""
    text = _WEB_LINK.sub(" ", text)
    visible = len(text) - text.count(" ") - text.count("\n")
    if visible < 64:
        return False
    return 2 * sum(len(run) for run in _DATA_RUN.findall(text) if _looks_encoded(run)) >= visible


def _looks_encoded(run: str) -> bool:
    """Digits among letters all along (base64, hex), not a rule of dashes or a long-slug link."""
    digits = sum(ch.isdigit() for ch in run)
    letters = sum(ch.isalpha() for ch in run)
    return digits * 20 >= len(run) and letters * 5 >= len(run)


_ANCHOR_WORDS = re.compile(r"\w+")


def _anchor_key(heading: str) -> str:
    """A heading as a link's anchor matches it: words only, any case (``[[Note#Set up: Linux]]``
    is written ``[[Note#Set up Linux]]`` too, Obsidian dropping the characters links cannot hold)."""
    return " ".join(_ANCHOR_WORDS.findall(plain_inline(heading).lower()))


def anchor_lines(text: str, anchor: str) -> tuple[int, int] | None:
    """The 1-based first and last line a link's anchor points at: a heading's section (its
    subsections included; "Setup › Linux" is Linux under Setup), or the block ``^id`` ends (a
    paragraph, a list item, or the block before an id on a line of its own). None: not there."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # lines as get numbers them
    parsed = split_sections(text)
    sections, code = parsed.sections, parsed.code
    lines = text.split("\n")
    if anchor.startswith("^"):
        return _block_lines(sections, lines, code, anchor[1:])
    want = [_anchor_key(part) for part in anchor.split(" › ")]
    for n, section in enumerate(sections):
        path = [_anchor_key(h) for h in section.headings]
        if not path or path[-1] != want[-1] or not _in_order(want[:-1], path[:-1]):
            continue
        depth = len(section.headings)
        end = len(lines)
        for later in sections[n + 1 :]:
            if len(later.headings) <= depth:  # a heading of the same or a higher level
                end = later.blocks[0].start
                break
        start = section.blocks[0].start
        while end - 1 > start and not lines[end - 1].strip():
            end -= 1
        return start + 1, end
    return None


# A block's id ending a line (outside code), as ``_block_lines`` looks for one.
_BLOCK_ID = re.compile(r"(?:^|\s)\^(\S+)\s*$")


@dataclass(frozen=True)
class Anchors:
    """What links into one note can name, collected in one pass (``note_anchors``): its
    headings' paths (as anchor keys, by last heading) and its block ids (lower case)."""

    headings: dict[str, list[tuple[str, ...]]]
    blocks: frozenset[str]
    fm_raw: str | None  # the note's front matter, unparsed

    def has(self, anchor: str) -> bool:
        """Whether ``anchor`` (as a link writes it) is there: ``anchor_lines`` is not None."""
        if anchor.startswith("^"):
            return bool(anchor[1:]) and anchor[1:].lower() in self.blocks
        want = [_anchor_key(part) for part in anchor.split(" › ")]
        return any(_in_order(want[:-1], path[:-1]) for path in self.headings.get(want[-1], ()))


def note_anchors(text: str) -> Anchors:
    """The headings and block ids of a note, in one parse and one look at each line: a note
    linked a hundred times by block is not searched a hundred times."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    parsed = split_sections(text)
    headings: dict[str, list[tuple[str, ...]]] = {}
    for path in {tuple(_anchor_key(h) for h in s.headings) for s in parsed.sections} - {()}:
        headings.setdefault(path[-1], []).append(path)
    code = parsed.code
    blocks = frozenset(
        m.group(1).lower()
        for i, line in enumerate(text.split("\n"))
        if "^" in line and i not in code and (m := _BLOCK_ID.search(line))
    )
    return Anchors(headings, blocks, parsed.fm_raw)


def _in_order(parts: Sequence[str], path: Sequence[str]) -> bool:
    it = iter(path)
    return all(any(p == q for q in it) for p in parts)


_LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s")


def _block_lines(
    sections: Sequence[Section], lines: Sequence[str], code: Container[int], block_id: str
) -> tuple[int, int] | None:
    tail = re.compile(rf"(?:^|\s)\^{re.escape(block_id)}\s*$", re.IGNORECASE)
    at = next((i for i, line in enumerate(lines) if i not in code and tail.search(line)), None)
    if at is None or not block_id:
        return None
    blocks = [b for s in sections for b in s.blocks]
    if lines[at].strip().startswith("^"):
        # Right under a callout, quote, list item or paragraph (no blank line between) the id line
        # continues it and names it (Obsidian's help writes callout ids so); after a blank line it
        # names the block before it.
        under = next((b for b in blocks if b.start < at < b.end and lines[at - 1].strip()), None)
        if under is not None:
            first = under.start
            for i in range(at - 1, under.start - 1, -1):  # the list item the line continues
                if _LIST_ITEM.match(lines[i]):
                    first = i
                    break
            return first + 1, at
        before = [b for b in blocks if b.end <= at and not (b.start <= at < b.end)]
        if before:
            return before[-1].start + 1, before[-1].end
        return at + 1, at + 1
    if _LIST_ITEM.match(lines[at]):  # one item of a list
        return at + 1, at + 1
    block = next((b for b in blocks if b.start <= at < b.end), None)
    return (block.start + 1, at + 1) if block is not None else (at + 1, at + 1)
