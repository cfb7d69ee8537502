"""The manifest's rows as Python holds them: a file's record and state, a chunk's record and view,
a note held or indexed, a daily note's day; the SQL fragments its reads share (which rows count,
which an answer may show, a file's state columns) and the key helpers (a prefix's bound, a name
folded as a case-insensitive disk compares it). Its own module because the indexer, the searches
and the manifest's parts (:mod:`sidecar.stores.manifest`) all name them. Imports frontmatter.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from sidecar.notes.frontmatter import aliases_of

# The notes status counts: those indexed, and those indexed before that a batch is writing again
# (marked ``indexing``, their old chunks still found meanwhile): a re-cut of every note showed
# "0 notes, 0 chunks" while its batches were written. A new note counts once it is in.
_COUNTED = "(state = 'indexed' OR (state = 'indexing' AND indexed_at > 0 AND chunks > 0))"


# The rows a read that answers may show: a note on its way out (``deleting``: deleted, or a moved
# note's old entry once its new one is written) is found by no answer (search, get, why, list,
# related): the moved note is answered under its new path only, the deleted one not at all.
_SHOWN = "f.state != 'deleting'"


# A file's columns as ``FileState`` holds them.
_STATE_COLUMNS = "key, mtime_ns, size, hash, state, ctime_ns, dev, ino, btime_ns"


def prefix_end(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None: no such bound, the
    prefix is empty): its last character plus one. SQLite compares TEXT as UTF-8 bytes, which is
    code point order; ``prefix + "\\uffff"`` as the bound left out every key whose next character
    lies above U+FFFF (a folder named "📥 Inbox": never deleted, never excluded)."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(0xE000 if 0xD800 <= last <= 0xDFFF else last)
        prefix = prefix[:-1]
    return None


def folded(name: str) -> str:
    """A name as a case-insensitive disk compares it: either Unicode form, either case (a Mac
    wrote "Über" in NFD, a name typed again is NFC; "ß" and "ẞ" are one letter)."""
    return unicodedata.normalize("NFC", name).casefold()


def _spelling_starts(letter: str) -> set[str]:
    """What another spelling of a name whose first letter is ``letter`` (NFC) begins with: either
    case, in either Unicode form (a decomposed letter begins with its base letter)."""
    fold = letter.casefold()
    alike = {letter, letter.lower(), letter.upper(), fold, fold.upper()}
    if fold == "ss":
        alike |= {"ß", "ẞ"}  # "ẞ".lower() is "ß", whose upper() is "SS"
    return {unicodedata.normalize("NFD", a)[0] for a in alike} | {a[0] for a in alike}


def _under(prefix: str, column: str = "key") -> tuple[str, tuple[str, ...]]:
    """A WHERE clause (and its arguments) for the values of ``column`` that start with ``prefix``."""
    end = prefix_end(prefix)
    return (
        (f"{column} >= ?", (prefix,)) if end is None else (f"{column} >= ? AND {column} < ?", (prefix, end))
    )


@functools.lru_cache(maxsize=16_384)  # every chunk of a note carries the same front matter
def _aliases(front_matter: str) -> tuple[str, ...]:
    """The note's aliases as the sweep reads them (``aliases_of``), so a keyword index refilled from
    the manifest holds what a sweep wrote."""
    try:
        return aliases_of(json.loads(front_matter))
    except ValueError:
        return ()


@functools.lru_cache(maxsize=16_384)
def _strings(encoded: str) -> tuple[str, ...]:
    """A JSON list of strings (a chunk's heading path, a note's tags) as stored, decoded once:
    a search's candidates repeat them (every chunk of a note, the same notes query after query)."""
    return tuple(json.loads(encoded))


@dataclass(frozen=True)
class FileRecord:
    key: str
    source: str
    agent: str
    rel: str
    mtime_ns: int
    size: int
    hash: str
    state: str
    title: str = ""
    tags: tuple[str, ...] = ()
    front_matter: str = "{}"
    error: str | None = None
    ctime_ns: int = 0  # the file's status change time; 0 where unknown
    dev: int = 0  # the file's device and inode (sources.file_id); 0 where unknown
    ino: int = 0
    btime_ns: int = 0  # its birth time (vault.birth); 0 where unknown


@dataclass(frozen=True)
class ChunkRecord:
    chunk_id: str
    key: str
    ord: int
    text: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    embed_text: str
    tokens: int
    embed_hash: str = ""  # "" = nothing to embed


@dataclass(frozen=True)
class IndexedNote:
    """A note as indexed: its title and front matter (the keyword index's title field) and
    each chunk's text and heading path (JSON), by chunk id."""

    title: str
    front_matter: str
    chunks: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class HeldNote:
    """An indexed note as its rows hold it: the file's title, tags and front matter (JSON), front
    matter error, and per chunk (ord, text, heading path JSON, start and end line, model text,
    tokens, text hash), in order."""

    title: str
    tags: str
    front_matter: str
    error: str | None
    chunks: list[tuple[int, str, str, int, int, str, int, str]]


def _placed(c: ChunkRecord) -> tuple[Any, ...]:
    """The columns of a chunk row that can change while its id stays (as ``commit_file`` reads them)."""
    return (c.ord, c.text, json.dumps(c.headings, ensure_ascii=False), c.start_line, c.end_line)


@dataclass(frozen=True)
class FileState:
    mtime_ns: int
    size: int
    hash: str
    state: str
    ctime_ns: int = 0  # 0: not known (written before it was kept)
    dev: int = 0  # the file's device and inode as last seen; 0: not known (or no evidence)
    ino: int = 0
    btime_ns: int = 0  # that file's birth time; 0: not known


@dataclass(frozen=True)
class ChunkView:
    """A chunk joined with its file: everything a hit shows."""

    chunk_id: str
    key: str
    source: str
    agent: str
    title: str
    text: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    tags: tuple[str, ...]
    mtime_ns: int = 0
    aliases: tuple[str, ...] = ()
    has_vector: bool = True  # in the serving vector table
    date: str = ""  # the note's own day (front matter or daily-note name), '' when it has none
    dated_by: str = ""  # what gave ``date``: "name" or "property" (note_day)
    # The file's status change time (ns; 0 unknown) and when this version was indexed (s): what
    # stands for an mtime in the future (``sidecar.stores.lastchange.last_change``).
    ctime_ns: int = 0
    indexed_at: float = 0.0


@dataclass(frozen=True)
class NoteDay:
    """An indexed note with chunks, and the day it is about (``note_date``; '' means its mtime's)."""

    key: str
    source: str
    agent: str
    tags: tuple[str, ...]
    mtime_ns: int
    date: str
    named: bool  # a daily note: its name, not a property, gave the day (``daily_note``)
    ctime_ns: int = 0  # as ChunkView's: what stands for an mtime in the future
    indexed_at: float = 0.0
