"""Typed search results on the wire: the one place that spells the reply shapes of ``search``,
``recall`` and ``why`` (docs/protocol.md), shared by the daemon, the CLI and the MCP shim. Their
JSON both ways is ``wire_json``; what a client says of an answer in words is ``notices``. Standard
library only: a thin client imports it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

# The sources a note can come from (and a search can be limited to).
SOURCES = ("vault", "wiki", "memory")


def memory_agent(reference: str) -> str | None:
    """The agent whose inbox holds the note ``reference`` (``memory/<agent>/<path>``; an agent's
    name holds no '/'); None for a vault or wiki note."""
    if not reference.startswith("memory/"):
        return None
    return reference.split("/", 2)[1]


def under_prefix(path: str, prefix: str, *roots: str) -> bool:
    """Whether a note's ``path`` (after its source) starts with ``prefix`` (a ``pathPrefix``),
    compared without case and in one Unicode form (a Mac names "Bücher" in NFD, a keyboard types
    NFC). The prefix may also start as the note's reference does (``roots``: ``vault``, ``wiki``,
    ``memory``, ``memory/<agent>``): an agent that copied "vault/Projects/" from a reference got
    nothing. A prefix ending in "/" names a folder ("en/Test/" is not "en/Testing/")."""
    want = unicodedata.normalize("NFC", prefix.lstrip("/")).lower()
    if not want:
        return True
    have = unicodedata.normalize("NFC", path).lower()
    return have.startswith(want) or any(f"{r.lower()}/{have}".startswith(want) for r in roots)


@dataclass(frozen=True)
class Hit:
    """One ranked passage: where it is, how it scored, its (masked) text."""

    reference: str
    source: str
    score: float
    relevance: float
    vec_score: float | None
    bm25_score: float | None
    boosts: Mapping[str, float]
    title: str
    headings: tuple[str, ...]
    lines: tuple[int, int]
    text: str
    masked: Mapping[str, int] = field(default_factory=dict)  # secrets masked in ``text``, by kind
    agent: str | None = None  # owner of a memory note
    page_bm25_score: float | None = None  # BM25 of the chunk's whole note (search.pageKeywords)
    # The note's day as a date window judged it (a search with since/until or a time phrase):
    # ISO day, and what gave it ("name", "property" or "modified", the file's last change).
    date: str | None = None
    dated_by: str | None = None
    # With dated_by "modified": the file's own mtime day when that lies in the future (a wrong
    # clock); ``date`` is then the day of its status change, else of its indexing
    # (``sidecar.stores.lastchange.last_change``).
    modified_ahead: str | None = None
    # recall's preview only: the figures its gates compare (the calibrated cosine against
    # recall.minSimilarity; the keyword share of the message's own words, 0-1) and, for a
    # candidate a gate kept out, that gate's name (``RECALL_GATES``).
    similarity: float | None = None
    keywords: float | None = None
    gate: str | None = None
    # The note's file is gone from disk while the mass-deletion guard holds its deletion (many
    # notes went at once): its indexed text is still found until the deletion is confirmed or
    # the hold ends, and read as current it misled (``get`` says it is gone).
    deletion_held: bool = False
    # Found by a wider look (its pool of candidates an arm), after the hits of the search's own
    # pool: its scores are of that look's own scale, so it may outscore the hit above it. 0: the
    # search's own pool.
    look: int = 0


# What kept a recall candidate out of the block (a preview lists them under ``dropped``).
RECALL_GATES = ("scoreFloor", "minSimilarity", "keywordShare", "limit")


@dataclass(frozen=True)
class AnalysisFilters:
    tags: tuple[str, ...] = ()
    path_prefix: str | None = None
    since: str | None = None
    until: str | None = None
    time_phrase: str | None = None
    window_given: bool = False  # since/until given as such won over the time phrase
    no_value: tuple[str, ...] = ()  # keys at the end of the query ("tag:"): searched as words


@dataclass(frozen=True)
class Analysis:
    """How the query was read: its words, their class, the filters taken from it."""

    text: str
    content_words: tuple[str, ...]
    rare_words: tuple[str, ...]
    word_class: int
    chronicle: bool
    filters: AnalysisFilters
    language: str | None = None  # "de" or "en" when the query's words say so, else None
    history_turns: int | None = None  # recall only
    history_share: float | None = None  # recall with history: the turns' share of the query
    refers_back: bool | None = None  # recall: the message continues an earlier turn
    time_phrase_ignored: str | None = None  # a time phrase not applied (see IGNORED_WHY)
    time_phrase_why: str | None = None  # why: a key of IGNORED_WHY
    time_phrase_since: str | None = None  # the window it was read as (the dates tried)
    time_phrase_until: str | None = None


@dataclass(frozen=True)
class Window:
    """The date window a time phrase of the query became, or that it was given up."""

    phrase: str
    applied: bool
    since: str | None = None
    until: str | None = None
    # Hits there for their date alone (relevance 0: no other word of the query found them): a
    # question about a period lists the period's notes.
    listed: int = 0
    why: str | None = None  # not applied: a key of IGNORED_WHY
    # Applied: since/until were given as such (parameters, options, inline) and won over the
    # phrase, which only said that the notes of a period were asked for.
    given: bool = False


@dataclass(frozen=True)
class SearchResult:
    """The answer of ``search`` and ``recall``; ``context`` is recall's rendered block."""

    hits: tuple[Hit, ...]
    degraded: str | None  # why the vector arm did not take part, if it did not
    analysis: Analysis | None  # always set by the daemon; on the client only with ``preview``
    context: str | None = None
    window: Window | None = None
    pending_vectors: int = 0  # chunks not yet searchable by meaning (vectors being computed)
    # Of those, chunks of notes written continuously (a log appended to all the time): each of
    # their indexings leaves a few waiting; no backlog, so no notice of an answer counts them.
    pending_continuous: int = 0
    # Chunks cut again during a model switch (or whose vector the retiring table lacked): the
    # new model computes their vectors as the switch goes, but none serves them until it ends
    # (not in ``pending_vectors``, which counts what the serving model computes now).
    left_to_switch: int = 0
    # recall's preview: the candidates its gates kept out (each with its ``gate``), best first,
    # and the gates' values in force (recall.scoreFloor, recall.minSimilarity).
    dropped: tuple[Hit, ...] = ()
    gates: Mapping[str, float] | None = None
    # A new or rebuilt index is still reading the notes (read so far, of how many; 0: still
    # listing): the hits come from part of the notes only.
    indexing: tuple[int, int] | None = None
    # A search of filters alone (no word to rank by): how many hits are the notes they select,
    # listed newest first, relevance 0 (0: they select none); None for any other search.
    listed: int | None = None
    # Index updates have been failing since then (seconds since the epoch; a full disk): notes
    # added or changed since may be missing from the hits, deleted ones still among them.
    stale_since: float | None = None
    # File changes are waiting or being applied (changes applied, changes known, those of them
    # only cut again; a branch switch): notes moved or deleted may still be found under their old
    # paths, new ones missed. Notes cut again (chunking settings changed) moved nowhere.
    catching_up: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class ChunkExplanation:
    lines: tuple[int, int]
    vec_score: float | None
    bm25_score: float | None
    score: float | None
    relevance: float | None
    boosts: Mapping[str, float]
    outcome: str


@dataclass(frozen=True)
class Explanation:
    """The answer of ``why``: a note's place (or absence) in the results of a query."""

    indexed: bool
    analysis: Analysis
    reference: str | None = None
    chunks: tuple[ChunkExplanation, ...] = ()
    vector_weight: float | None = None
    degraded: str | None = None
    page_bm25_score: float | None = None  # the whole note's BM25 for the query (search.pageKeywords)
    exists: bool | None = None  # the rest: only for a note that is not indexed
    reason: str | None = None
    excluded: str | None = None


# Why a time phrase of the query was not applied: its window held no dated note (search and
# recall), or the message did not ask about that period's notes (recall lists them only then).
IGNORED_WHY = ("noNote", "notAsked")


def hold_advice(kind: str, confirm: str) -> str:
    """What to do about a root's held deletions of this ``kind``; ``confirm``: the command that
    applies them. Beside an unmounted share or another device it comes after mounting again and
    with its condition (named bare, it read as the way to clear the problem and emptied the index
    of a share that was merely away; not named, a vault that lives on another mount for good was
    held for ever with no way out shown)."""
    if kind == "mass":
        return f"to apply them now: {confirm}"
    if kind == "empty":
        return f"mount it again if it is a share; if its notes were deleted on purpose: {confirm}"
    return (
        "mount it again, or wait for it (nothing is removed meanwhile); if its notes live on this "
        f"disk from now on: {confirm}"
    )
