"""Markdown -> chunks (pure): heading-aware, sized in the embedding model's own tokens, overlapping.

Front matter is parsed with PyYAML (never embedded as raw YAML), wiki-links become readable text,
every chunk keeps its title, heading path, line range and tags. Token counting is injected
(``count_tokens``) so this module imports no model. Imports only ``notes`` modules (front matter,
Markdown).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import regex

from sidecar.notes.frontmatter import aliases_of, note_names, parse_front_matter, property_value
from sidecar.notes.markdown import (
    Block,
    Section,
    inline_tags,
    mostly_data,
    norm_tag,
    readable_links,
    split_sections,
    str_list,
    without_comment_lines,
)

CountTokens = Callable[[Sequence[str]], list[int]]

_MIN_BUDGET = 24

# Bumped whenever the same note would be cut or embedded differently: an index made by another
# version re-reads every note once (``stores.manifest`` keeps the version with the settings).
# 2: the embed text says each line once (no H1 repeating the title, no heading line repeating the
#    heading path, no first paragraph repeating the description).
# 3: text and title in one Unicode form (NFC).
# 4: code blocks as CommonMark reads them; no tags from links or comments; dotted names are links.
# 5: no links in comments; a wiki-link on one line (tags beside "[[a" … "b]]" over lines count);
#    no tag after an escaping backslash ("\#1").
# 6: no text from comments (a plugin's data), query fences (Dataview, Tasks, embedded search,
#    Bases), <style>/<script> blocks, inline queries, an Excalidraw note's drawing; data URIs
#    shortened; front matter ends at a "---" at a line's start; links in properties; a long
#    table's header again in each of its chunks; an embed's size ("|400") is no text.
# 7: the words carried into the next chunk keep their line breaks and lie within its lines (they
#    were glued onto the previous piece's last line).
# 8: the first "---" line after the opening one ends the front matter ("---/---/---" is an empty
#    block and a rule, which was lost).
# 9: a note's aliases are read beside its title in its first chunk.
CHUNKER_VERSION = 9
# How Excalidraw drawings (notes with ``excalidraw-plugin`` in their front matter) are read; when
# it changes, only the drawings are read again (``Indexer.reread_drawings_if_read_differently``),
# not the whole vault as a CHUNKER_VERSION change does.
# 2: the element links and the text elements' ids are no text.
DRAWING_READER_VERSION = 2
# How aliases written as a list in a list are read (``aliases: [[Bar]]``, a wiki-link unquoted);
# when it changes, only the notes whose stored aliases hold such a list are read again
# (``Indexer.reread_link_aliases_if_read_differently``): a chunker version read every note again
# for a form few notes use.
# 2: an unquoted wiki-link is the alias it names (it was none).
LINK_ALIAS_READER_VERSION = 2
# How the names a note's properties give it are read (``aliases``, ``tags``, ``title``); when it
# changes, only the notes whose stored names hold a value that may have been written otherwise
# are read again (``Indexer.reread_property_names_if_read_differently``).
# 2: an unquoted name is the text written (``010`` was 8, ``1.50`` 1.5, ``yes`` true).
PROPERTY_NAME_READER_VERSION = 2


def _norm(line: str) -> str:
    """A line as compared for repeats: without heading marks, case and outer space."""
    return line.strip().lstrip("#").strip().casefold()


# What the first chunk says after the title at most (characters): its prefix is cut to a third of
# the chunk's tokens anyway, and a note with 60 KB of aliases or description was tokenized whole.
_LEAD_CHARS = 500


def _cut(text: str, most: int = _LEAD_CHARS) -> str:
    """``text`` within ``most`` characters, cut before a space or line break where it is longer
    (a word ending at the limit stays whole)."""
    if len(text) <= most:
        return text
    head = text[: most + 1]
    at = max(head.rfind(" "), head.rfind("\n"))
    return head[:at] if at > 0 else text[:most]


def _lead(names: Sequence[str], description: str) -> str:
    """What the note's first chunk says after the title: its description, then its other names
    (its aliases, ``note_names``), within ``_LEAD_CHARS``. The description first: where the prefix
    is cut, the end of a long alias list goes, not the description's. The aliases are said once:
    in every chunk they crowded the text (a help page's three aliases cost its later sections
    their questions)."""
    return _cut("\n".join(x for x in (_cut(description), ", ".join(names[1:])) if x))


def _prefix(title: str, headings: Sequence[str], lead: str = "") -> str:
    """What every chunk of a section starts with: the note's title, its heading path (without a
    heading that only repeats the title, as an H1 named like the file does) and, for the first
    section, the lead (the description; in the first chunk ``_lead``: description and aliases)."""
    path = [h for h in headings if _norm(h) != _norm(title)]
    return title + ("\n" + " › ".join(path) if path else "") + ("\n" + lead if lead else "")


@dataclass(frozen=True)
class Chunk:
    ord: int
    text: str  # readable text of the lines (wiki-links resolved), shown in hits, indexed by BM25
    headings: tuple[str, ...]
    start_line: int  # 1-based, inclusive
    end_line: int
    embed_text: str  # what the model sees: title, heading path, text
    tokens: int
    embed: bool = True  # False: nothing to embed (empty, front matter only, or data); BM25 only


@dataclass(frozen=True)
class ParsedNote:
    title: str
    aliases: tuple[str, ...]
    description: str
    tags: tuple[str, ...]
    front_matter: dict[str, Any]
    front_matter_error: str | None
    chunks: tuple[Chunk, ...] = field(default=())


def _split_long(text: str, budget: int, count: CountTokens) -> list[str]:
    """Split one over-long line at word boundaries into pieces of at most ``budget`` tokens."""
    words = text.split(" ")
    out: list[str] = []
    i = 0
    while i < len(words):
        # A word is at least one token, so a piece has at most `budget` words: binary search for
        # the longest run that fits (a few bounded counts per piece, even for a 1 MB line).
        lo, hi = 1, min(budget, len(words) - i)
        if count([" ".join(words[i : i + hi])])[0] <= budget:
            lo = hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count([" ".join(words[i : i + mid])])[0] <= budget:
                lo = mid
            else:
                hi = mid - 1
        piece = " ".join(words[i : i + lo])
        i += lo
        if lo > 1 or count([piece])[0] <= budget:
            out.append(piece)
        else:  # a single "word" longer than the budget (a base64 blob): cut by characters
            out.extend(_split_chars(piece, budget, count))
    return out


def _split_chars(text: str, budget: int, count: CountTokens) -> list[str]:
    """Cut a text without spaces into pieces of at most ``budget`` tokens, looking at a bounded
    window each time (counting the whole rest again and again is quadratic)."""
    out: list[str] = []
    rest = text
    while rest:
        window = rest[: budget * 8]
        n = count([window])[0]
        cut = len(window) if n <= budget else max(1, len(window) * budget // n)
        while cut > 1 and count([rest[:cut]])[0] > budget:
            cut = max(1, cut * 9 // 10)
        cut = _grapheme_floor(rest, cut)
        out.append(rest[:cut])
        rest = rest[cut:]
    return out


_GRAPHEME = regex.compile(r"\X")


def _grapheme_floor(text: str, cut: int) -> int:
    """``cut`` moved back to the start of the character a reader sees there: an emoji sequence
    (👨‍👩‍👧, a flag) or a letter with combining marks is not split between two pieces (one ended
    in a dangling joiner and the next began with half a family). Unchanged when the character
    starting before it is longer than the piece."""
    if cut >= len(text):
        return cut
    # From the piece's start (itself a character's start): a flag's two letters pair up counted
    # from the start of their run.
    for m in _GRAPHEME.finditer(text, 0, min(len(text), cut + 64)):
        if m.end() > cut:
            return m.start() if m.start() > 0 else cut
    return cut


@dataclass
class _Piece:
    line: int  # 0-based line this piece starts on
    end: int  # exclusive
    text: str
    tokens: int
    head: str = ""  # a table row's header and rule rows: said again where a chunk starts with it
    head_tokens: int = 0


@dataclass(frozen=True)
class NoteDraft:
    """A note parsed and not yet cut: everything but the token counts, which need the model's
    tokenizer (a first start parses while that still loads)."""

    lines: list[str]
    sections: list[Section]
    fm_end: int
    readable: list[str]
    note: ParsedNote  # title, aliases, description, tags, front matter; no chunks yet
    code: frozenset[int] = frozenset()  # 0-based lines of code blocks (``markdown.code_lines``)


def chunk_note(
    text: str,
    *,
    title: str,
    count_tokens: CountTokens,
    max_tokens: int = 200,
    overlap: float = 0.2,
) -> ParsedNote:
    """Parse a note and cut it into chunks whose embed text never exceeds ``max_tokens``."""
    return cut_note(parse_note(text, title=title), count_tokens, max_tokens=max_tokens, overlap=overlap)


def line_count(text: str) -> int:
    """How many lines ``text`` has, numbered as hits number them (``\r\n`` and ``\r`` end a line
    as ``\n`` does): a final line break ends the last line, it starts no other (``wc -l``)."""
    breaks = text.count("\n") + text.count("\r") - text.count("\r\n")
    return breaks + (not text.endswith(("\n", "\r"))) if text else 0


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def line_range(text: str, first: int, last: int) -> str:
    """Lines ``first`` to ``last`` (1-based, inclusive) of ``text``, numbered as ``line_count``
    numbers them, with their line breaks."""
    out = []
    for number, m in enumerate(_LINE.finditer(text), 1):
        if number > last:
            break
        if number >= first:
            out.append(m.group(0))
    return "".join(out)


def lines_within(text: str, most: int) -> tuple[str, int, bool]:
    """The first whole lines of ``text`` within ``most`` characters, how many, and whether the
    first line alone was longer (then its first ``most`` characters, and True)."""
    size = count = 0
    for m in _LINE.finditer(text):
        if size + len(m.group(0)) > most:
            break
        size += len(m.group(0))
        count += 1
    if count == 0:
        return text[:most], 1, True
    return text[:size], count, False


def parse_note(text: str, *, title: str) -> NoteDraft:
    """The part of ``chunk_note`` that needs no tokenizer: sections, front matter, tags, links."""
    # One Unicode form (NFC) for text and title: a Mac (and text pasted from its PDFs) writes "ü"
    # as "u" plus a combining mark, which no query typed on a keyboard meets, and where a tag or
    # word pattern stops. Lines stay where they were: NFC never joins across a line break.
    text = unicodedata.normalize("NFC", text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n"))
    title = unicodedata.normalize("NFC", title)
    # What reading view hides (comments: a plugin's data) is no text of the note.
    text = without_comment_lines(text)
    lines = text.split("\n")
    parsed = split_sections(text)
    sections, fm_raw, fm_end, code = parsed.sections, parsed.fm_raw, parsed.fm_end, parsed.code
    fm, fm_error = parse_front_matter(fm_raw) if fm_raw is not None else ({}, None)
    drawing = "excalidraw-plugin" in fm
    hidden = parsed.hidden | (_drawing_lines(sections, lines) if drawing else frozenset())
    if hidden:
        lines = ["" if i in hidden else line for i, line in enumerate(lines)]
    if drawing:  # each text element ends in its element's id, which reading view hides
        for i in _element_ends(sections, code):
            lines[i] = _ELEMENT_ID.sub("", lines[i])
    fm_title = property_value(fm, "title")
    note_title = (
        str(fm_title).strip() if isinstance(fm_title, str | int | float) and str(fm_title).strip() else title
    )
    aliases = aliases_of(fm)
    fm_description = property_value(fm, "description")
    description = fm_description.strip() if isinstance(fm_description, str) else ""
    tags = str_list(property_value(fm, "tags", "tag")) + inline_tags(lines, code, fm_end)
    tag_set = tuple(dict.fromkeys(norm_tag(t) for t in tags if norm_tag(t)))
    readable = [_readable(line) for line in lines]
    note = ParsedNote(note_title, aliases, description, tag_set, fm, fm_error)
    return NoteDraft(lines, sections, fm_end, readable, note, code)


# Dataview's inline queries ("`= this.file.name`", "`$= dv.pages()`"): shown as their answer.
_CODE_SPAN = re.compile(r"`([^`\n]*)`")
_QUERY_TEXT = re.compile(r"\$?=\s*[^=\s]")
# A file pasted into the note as a data URI (a web clipping's image): its letters are no words.
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=]{32,}")
# What the Excalidraw plugin keeps in a drawing's note besides the drawing's text: the drawing
# (JSON, compressed or not), the list of embedded files, the elements' links ("e1f2g3: [[Note]]",
# read as links all the same), and a banner telling to switch views.
_DRAWING_SECTIONS = frozenset({"drawing", "embedded files", "element links"})
# A text element's id at its end ("Zwiebelturm ^abc123XY"), as the plugin writes it.
_ELEMENT_ID = re.compile(r"(?:^|[ \t]+)\^[A-Za-z0-9_-]+[ \t]*$")


def _readable(line: str) -> str:
    if "`" in line and "=" in line:  # each code span on its own ("`a`=5 and `b`": no query)
        line = _CODE_SPAN.sub(lambda m: " " if _QUERY_TEXT.match(m.group(1)) else m.group(0), line)
    if "data:" in line:
        line = _DATA_URI.sub("data:…", line)
    return readable_links(line)


def _drawing_lines(sections: Sequence[Section], lines: Sequence[str]) -> frozenset[int]:
    """The lines of an Excalidraw note that are not its text elements (see ``_DRAWING_SECTIONS``)."""
    out: set[int] = set()
    for n, section in enumerate(sections):
        drawing = bool(section.headings) and section.headings[-1].casefold() in _DRAWING_SECTIONS
        for block in section.blocks:
            if drawing or (n == 0 and lines[block.start].lstrip().startswith("==⚠")):
                out.update(range(block.start, block.end))
    return frozenset(out)


def _element_ends(sections: Sequence[Section], code: Container[int]) -> list[int]:
    """The last line of each text element of an Excalidraw note (each a block of its ``Text
    Elements`` section), where the plugin writes the element's id: a "^2" inside the text
    ("Fläche m ^2" on a line of its own within the element) is the text's."""
    return [
        block.end - 1
        for section in sections
        if section.headings and section.headings[-1].casefold() == "text elements"
        for block in section.blocks
        if not block.heading and block.end - 1 not in code
    ]


def cut_note(
    draft: NoteDraft, count_tokens: CountTokens, *, max_tokens: int = 200, overlap: float = 0.2
) -> ParsedNote:
    """Cut a parsed note into chunks whose embed text never exceeds ``max_tokens``."""
    sections, fm_end, readable = draft.sections, draft.fm_end, draft.readable
    note_title = draft.note.title
    description = _cut(draft.note.description)
    lead = _lead(note_names(note_title, draft.note.aliases), description)
    count = _Counter(count_tokens)
    # Ask the tokenizer about every block and every section's prefix at once (one batch per
    # note, not one call per piece or section). The first section's prefixes with description
    # and aliases are counted where they are used: one section's, not every section's.
    count(
        ["\n".join(readable[b.start : b.end]).strip("\n") for s in sections for b in s.blocks]
        + [_prefix(note_title, s.headings) for s in sections]
    )
    spec = _Budget(count, max_tokens, overlap)
    chunks: list[Chunk] = []
    carry: list[Block] = []  # heading lines of sections with no content, glued to the next one
    for section in sections:
        content = [b for b in section.blocks if not b.heading]
        if not content:
            carry.extend(section.blocks)
            continue
        blocks = carry + section.blocks
        carry = []
        if chunks:
            prefix, first = _prefix(note_title, section.headings), None
        else:  # the first section: its chunks say the description, the first one the aliases too
            prefix = _prefix(note_title, section.headings, description)
            first = _prefix(note_title, section.headings, lead) if lead != description else None
        chunks.extend(
            _pack(blocks, readable, section.headings, prefix, first_ord=len(chunks), spec=spec, first=first)
        )
    if carry:  # trailing headings with no content still deserve a chunk
        heads = sections[-1].headings
        prefix = _prefix(note_title, heads)
        chunks.extend(_pack(carry, readable, heads, prefix, first_ord=len(chunks), spec=spec))
    if not chunks:  # an empty note (or front matter only) is still findable by its title
        body = draft.note.description
        embed = _fit(note_title + ("\n" + body if body else ""), max_tokens, count_tokens)
        # Its lines are the front matter it comes from (line 1 of an empty note): after the front
        # matter there is nothing, and "lines 5-4" is no range.
        chunks.append(Chunk(0, body, (), 1, max(fm_end, 1), embed, count([embed])[0], embed=False))
    chunks = [replace(c, embed=False) if c.embed and mostly_data(c.text) else c for c in chunks]
    return replace(draft.note, chunks=tuple(chunks))


class _Counter:
    """Token counts for one note, cached: packing asks about the same texts more than once."""

    def __init__(self, count: CountTokens) -> None:
        self._count = count
        self._known: dict[str, int] = {}

    def __call__(self, texts: Sequence[str]) -> list[int]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._known]
        if missing:
            self._known.update(zip(missing, self._count(missing), strict=True))
        return [self._known[t] for t in texts]


def _fit(text: str, budget: int, count: CountTokens) -> str:
    """Cut ``text`` so it has at most ``budget`` tokens (used for overlong prefixes)."""
    if count([text])[0] <= budget:
        return text
    return _split_long(text.replace("\n", " "), budget, count)[0]


@dataclass(frozen=True)
class _Budget:
    count: CountTokens
    max_tokens: int
    overlap: float


def _pack(
    blocks: list[Block],
    readable: list[str],
    headings: tuple[str, ...],
    prefix: str,
    *,
    first_ord: int,
    spec: _Budget,
    first: str | None = None,
) -> list[Chunk]:
    """Greedy packing of a section's lines into chunks within the token budget, with overlap.
    ``first``: the first chunk's prefix when it says more than the others' (the note's aliases)."""
    count, max_tokens, overlap = spec.count, spec.max_tokens, spec.overlap
    prefix = _fit(prefix, max(max_tokens // 3, 8), count)
    prefix_tokens = count([prefix])[0]
    budget = max(max_tokens - prefix_tokens, _MIN_BUDGET)
    opening = _fit(first, max(max_tokens // 3, 8), count) if first is not None else prefix
    opening_tokens = count([opening])[0]
    first_budget = max(max_tokens - opening_tokens, _MIN_BUDGET)
    pieces = _pieces(blocks, readable, budget, count)
    if pieces and pieces[0].tokens > first_budget:
        # The first piece does not fit beside the longer first prefix: cut finer (rare: a first
        # paragraph near the whole budget).
        pieces = _pieces(blocks, readable, first_budget, count)
    # The model sees each line once: a heading line or paragraph that repeats the prefix (the
    # section's heading, an H1 named like the note, a lead paragraph that is the description) is
    # shown and keyword-indexed, not embedded twice.
    said_first, said_rest = _said(opening, headings), _said(prefix, headings)
    out: list[Chunk] = []
    keep = int(budget * overlap)
    i = 0
    while i < len(pieces):
        if i == 0:
            pfx, pfx_tokens, cap, said = opening, opening_tokens, first_budget, said_first
        else:
            pfx, pfx_tokens, cap, said = prefix, prefix_tokens, budget, said_rest
        # A chunk that starts inside a table says its header again: its rows' columns are named.
        fits = pieces[i].head_tokens + pieces[i].tokens <= cap
        head, head_tokens = (pieces[i].head, pieces[i].head_tokens) if fits else ("", 0)
        used = head_tokens
        j = i
        while j < len(pieces) and (j == i or used + pieces[j].tokens <= cap):
            used += pieces[j].tokens
            j += 1
        group = pieces[i:j]
        lead = [head] if head else []
        body = "\n".join(lead + [p.text for p in group])
        fresh = [p for p in group if _norm(p.text) not in said] or group
        embed = pfx + "\n" + "\n".join(lead + [p.text for p in fresh])
        out.append(
            Chunk(
                ord=first_ord + len(out),
                text=body,
                headings=headings,
                start_line=group[0].line + 1,
                end_line=group[-1].end,
                embed_text=embed,
                # The model's pre-tokenizer splits at whitespace, so the pieces (joined by line
                # breaks) and the prefix add up exactly: no second pass over the text.
                tokens=pfx_tokens + head_tokens + sum(p.tokens for p in fresh),
            )
        )
        if j >= len(pieces):
            break
        # Start the next chunk with trailing pieces worth at most `keep` tokens (the overlap);
        # when the last piece alone is larger, its tail words serve as the overlap.
        back, carried = j, 0
        while back - 1 > i and carried + pieces[back - 1].tokens <= keep:
            back -= 1
            carried += pieces[back].tokens
        if back == j and keep > 0 and j - 1 > i:
            tail = _tail(pieces[j - 1], keep, count)
            if tail is not None:
                pieces.insert(j, tail)
        i = back
    return out


def _pieces(blocks: list[Block], readable: list[str], budget: int, count: CountTokens) -> list[_Piece]:
    """A section's pieces: whole blocks where they fit, else their lines, else parts of lines."""
    raw = ["\n".join(readable[b.start : b.end]).strip("\n") for b in blocks]
    sizes = count(raw)
    pieces: list[_Piece] = []
    for block, text, size in zip(blocks, raw, sizes, strict=True):
        if size <= budget:
            if text.strip():
                # Its first line is the first one with text (a comment's lines are blanked).
                lead = next(k for k, line in enumerate(readable[block.start : block.end]) if line)
                pieces.append(_Piece(block.start + lead, block.end, text, size))
            continue
        line_texts = readable[block.start : block.end]
        head = "\n".join(line_texts[:2]) if _is_table(line_texts) else ""
        head_tokens = count([head])[0] if head else 0
        if head_tokens > budget // 3:  # a header too wide to repeat
            head, head_tokens = "", 0
        for offset, (line_text, n) in enumerate(zip(line_texts, count(line_texts), strict=True)):
            ln = block.start + offset
            if not line_text.strip():
                continue
            row_head = (head, head_tokens) if head and offset >= 2 else ("", 0)
            if n <= budget:
                pieces.append(_Piece(ln, ln + 1, line_text, n, *row_head))
            else:
                for part in _split_long(line_text, budget, count):
                    pieces.append(_Piece(ln, ln + 1, part, count([part])[0], *row_head))
    return pieces


_TABLE_RULE = re.compile(r"\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*")


def _is_table(lines: Sequence[str]) -> bool:
    """Whether a block's lines are a table: a header row, its rule, rows."""
    return len(lines) >= 3 and "|" in lines[0] and "|" in lines[1] and bool(_TABLE_RULE.fullmatch(lines[1]))


def _said(prefix: str, headings: Sequence[str]) -> frozenset[str]:
    """Lines a chunk's prefix already says: its own lines and each heading of the path."""
    return frozenset(_norm(x) for x in (*prefix.split("\n"), *headings) if _norm(x))


def _tail(piece: _Piece, keep: int, count: CountTokens) -> _Piece | None:
    """The last words of a piece, at most ``keep`` tokens, carried into the next chunk as they
    stand in the note (line breaks kept) and starting on the line its first word is on: the
    chunk's ``lines`` cover what it carries (the words were glued into one line and placed on the
    piece's last line, so a callout's '>' stood mid-line and the first words lay outside the
    chunk's lines). It starts where the words allow, mid-sentence too: starting at a line or a
    sentence carried less and cost ranking (BENCHMARKS.md)."""
    text = piece.text
    starts = [m.start() for m in re.finditer(r"\S+", text)]
    if not starts:
        return None
    n = max(1, len(starts) * keep // max(piece.tokens, 1))
    while n > 0:
        carried = text[starts[-n] :]
        tokens = count([carried])[0]
        if tokens <= keep:
            line = piece.line + text.count("\n", 0, starts[-n])
            return _Piece(line, piece.end, carried, tokens, piece.head, piece.head_tokens)
        n = n * keep // max(tokens, 1) if tokens > keep and n > 1 else n - 1
    return None
