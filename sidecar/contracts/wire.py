"""Typed search results and their JSON on the wire: the one place that spells the reply shapes of
``search``, ``recall`` and ``why`` (docs/protocol.md). The daemon builds its replies with it, the
CLI and the MCP shim parse the same replies back into the same types. Standard library only: a thin
client imports it.
"""

from __future__ import annotations

import datetime as dt
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.contracts.printable import escape_controls

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


def indexing_note(done: int, total: int) -> str:
    """What a client says while a new or rebuilt index has not read every note yet."""
    read = f"{done:,} of {total:,} notes read so far" if total else "not every note is read yet"
    return f"the index is still being built ({read}): notes not read yet cannot be found"


# What each boost that lifts a hit means, for a person and an agent (``ranked_up``); the
# source's words name the source and its weight (``_lift_words``).
_BOOST_WORDS = {
    "name": "the query is its name",
    "fullName": "its name is in the query",
    "slug": "words of its name are in the query",
    "rareTerm": "it holds a rare word of the query",
    "support": "more passages of its note match",
    "linked": "a better hit links to it",
    "rank": "it is among the first of the keyword or meaning results",
}
# Boosts added to the score (the rest multiply it).
_ADDED = frozenset({"name", "support", "rank"})
# What a demotion of the hit below means (``ranked_up``).
_DEMOTION_WORDS = {
    "log": "the hit below is a log or journal page, demoted",
    "hub": "the hit below is a note many notes link to, damped",
}
# Relevance a hit must fall short of a later one's by to be said ranked above it (rounding aside).
_RANKED_UP_BY = 0.005
_GENERIC = "its place in the keyword and meaning results"


def _lifts(name: str, value: float) -> bool:
    """Whether the boost ``name`` (``value``) raises a hit's score at all."""
    return value > 0 if name in _ADDED else value > 1.0


def _boost_words(hit: Hit, name: str, value: float) -> str | None:
    if name == "source":
        return f"{hit.source} notes weighted {value:g}"
    return _BOOST_WORDS.get(name)


def _lifted(hit: Hit, boosts: Sequence[tuple[str, float]]) -> float:
    """``hit``'s relevance lifted by ``boosts`` together."""
    lifted = hit.relevance
    for name, value in boosts:
        lifted = lifted + value if name in _ADDED else lifted * value
    return lifted


def _reaches(hit: Hit, boosts: Sequence[tuple[str, float]], reach: float) -> bool:
    """Whether ``boosts`` of ``hit`` together lift its relevance to ``reach`` (rounding aside)."""
    return _lifted(hit, boosts) >= reach - _RANKED_UP_BY


def _lift_words(hit: Hit, reach: float) -> list[str]:
    """The boosts of ``hit`` that lift it to the relevance ``reach``, in words: each that closes
    the gap by itself; else, when none does, those that do together ("…, together": said as the
    ranking score's own scale before), or that close most of it ("…, most of the gap"). Boosts
    that close less than half of the gap are not named (memory's weight 1.05 on 0.63 does not
    reach 0.74)."""
    lifting = [(n, v) for n, v in hit.boosts.items() if _lifts(n, v) and _boost_words(hit, n, v)]
    alone = [w for n, v in lifting if _reaches(hit, [(n, v)], reach) and (w := _boost_words(hit, n, v))]
    if alone or not lifting:
        return alone
    words = " and ".join(dict.fromkeys(w for n, v in lifting if (w := _boost_words(hit, n, v))))
    if len(lifting) >= 2 and _reaches(hit, lifting, reach):
        return [words + ", together"]
    if _lifted(hit, lifting) - hit.relevance >= (reach - hit.relevance) / 2:
        # Most of the gap, the rest the ranking score's own scale: the boost is the known cause.
        return [f"{words}, most of the gap (the rest: {_GENERIC})"]
    return []


def _demotion_words(hit: Hit) -> list[str]:
    """The demotions of ``hit`` (the best hit listed below), in words."""
    out = []
    for name, value in hit.boosts.items():
        if name == "source" and value < 1.0:
            out.append(f"the hit below is of {hit.source} notes, weighted {value:g}")
        elif (words := _DEMOTION_WORDS.get(name)) is not None and value < (1.0 if name == "log" else 0.0):
            out.append(words)
    return out


def ranked_up(hits: Sequence[Hit]) -> list[str | None]:
    """For each hit listed above a later one of higher relevance, why: hits are ordered by
    ``score`` (relevance with the boosts: a rare or named word, the source, ...), and relevance
    is the match alone; a 0.63 above a 0.74 with no word of it read as a wrong order. Named: the
    boosts of the hit that close the gap (``_lift_words``), and the demotions of the best hit
    below it (a log page, hub damping, its source's weight under 1); the general words (the
    ranking score's own scale) only where no boost or demotion is there to name. None for the
    others."""
    out: list[str | None] = []
    for i, h in enumerate(hits):
        below = [x for x in hits[i + 1 :] if x.relevance > h.relevance + _RANKED_UP_BY]
        if not below:
            out.append(None)
            continue
        best = max(below, key=lambda x: x.relevance)
        why = _lift_words(h, best.relevance) + _demotion_words(best)
        out.append("ranked above hits of higher relevance: " + "; ".join(dict.fromkeys(why or [_GENERIC])))
    return out


def links_state_note(result: dict[str, Any]) -> str | None:
    """What a client says of a ``get`` answer's links that are not known yet: links written while
    the index is being built (or re-cut) are resolved once the sweep ends (``"resolving": true``),
    and backlinks from notes not read yet are missing (``indexing``); None when every link is
    known. A link shown with no target read as a fact to an agent that follows links."""
    resolving = sum(1 for link in result.get("links", []) if link.get("resolving"))
    building = result.get("indexing")
    if not resolving and not building:
        return None
    parts = []
    if resolving:
        parts.append(
            f"{resolving} link(s) of this note are not resolved yet (resolved once the index's sweep "
            "ends): they may name a note"
        )
    if building:
        read = result.get("indexed", True)
        unread = "" if read else "this note is not read yet (its links are not known); "
        parts.append(
            f"{indexing_note(building['done'], building['total'])}; {unread}backlinks from notes not "
            "read yet are missing meanwhile"
        )
    return "; ".join(parts)


def catching_up_note(done: int, total: int, recut: int = 0) -> str:
    """What a client says while file changes wait or are being applied (``catchingUp``). Notes
    only cut again (the chunking settings, the model or sidecar's chunker changed) moved nowhere:
    a re-cut alone said "notes moved or deleted may still be found under their old paths"."""
    if recut and recut >= total:
        return (
            f"the notes are being cut into chunks again, their text unchanged ({done:,} of {total:,} "
            f"done, {total - done:,} waiting): a chunk whose text stays keeps its vector, the others "
            "are found by their words until their vectors are computed"
        )
    again = f"; {recut:,} of them only cut into chunks again" if recut else ""
    return (
        f"the index is catching up with changes in the notes ({done:,} of {total:,} applied{again}): "
        "notes moved or deleted may still be found under their old paths, new ones may be missing"
    )


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


def resolved_notes(asked: str, got: dict[str, Any]) -> list[str]:
    """What a client says of a ``get`` answer for a note's name or a link (``Boat``,
    ``[[Boat#Budget]]``): which of several notes it is, a heading or block that is not there, a
    note a rule leaves out of the index."""
    out = []
    reference = escape_controls(got["reference"])
    if got.get("candidates", 1) > 1:
        out.append(
            f"{escape_controls(asked)!r} could mean {got['candidates']} notes: this is {reference}, the one "
            "its link opens in Obsidian (a reference as search returns it names one)"
        )
    if got.get("excluded"):
        out.append(
            f"{reference} is not indexed: excluded by {escape_controls(got['excluded'])}; search never "
            "returns it, its links resolve to it"
        )
    anchor = got.get("anchor")
    if anchor and not anchor["found"]:
        out.append(f"{reference} has no heading or block {escape_controls(anchor['text'])!r}: the whole note")
    return out


def anchor_missing(link: dict[str, Any]) -> str | None:
    """What a client says of a link of ``get``'s ``links`` whose note is there and whose heading
    or block is not (``"anchor_found": false``), in Obsidian's words; None for any other link."""
    if link.get("anchor_found") is not False:
        return None
    return "block not found" if str(link["anchor"]).startswith("^") else "heading not found"


def offline_note(roots: list[str]) -> str:
    """What a client says when the vault or the wiki is offline (``offline`` of an answer)."""
    names = " and the ".join(roots)
    return (
        f"the {names} {'is' if len(roots) == 1 else 'are'} offline (share unmounted or unreachable; "
        f"`sidecar status` says why): the hits are {'its' if len(roots) == 1 else 'their'} notes as last "
        "indexed, what changed there since cannot be found"
    )


def refused_note(reason: str) -> str:
    """What a client says when the agent's inbox is not read (``inboxRefused``)."""
    return f"the agent's inbox is not read: {reason}"


# Why a time phrase of the query was not applied: its window held no dated note (search and
# recall), or the message did not ask about that period's notes (recall lists them only then).
IGNORED_WHY = ("noNote", "notAsked")


def clock_said(clock: Mapping[str, Any]) -> str:
    """The daemon's day and time zone in words (``health``'s ``clock``)."""
    day = str(clock.get("today", "?"))
    try:
        weekday = dt.date.fromisoformat(day).strftime("%A ")
    except ValueError:
        weekday = ""
    named = [str(clock["timeZone"])] if clock.get("timeZone") else []
    zone = ", ".join(named + ([f"UTC{clock['utcOffset']}"] if clock.get("utcOffset") else []))
    return (
        f"the daemon's day is {weekday}{day} (time zone {zone or 'unknown'}); "
        "'today', 'yesterday' and the like count from the asker's date when the client sends it, "
        "else from this one"
    )


def dates_said(since: str | None, until: str | None) -> str:
    """A window in words: one day, a range, or an end open on one side; never "None"."""
    if since and until:
        return since if since == until else f"{since} to {until}"
    if since:
        return f"from {since}"
    return f"until {until}" if until else "any date"


def window_said(w: Window, given_as: str = "the dates given") -> str:
    """An applied window in words: its dates, and when dates given as such won over the phrase,
    that the phrase's own period was not used (an open end stays open: later notes count too)."""
    dates = dates_said(w.since, w.until)
    if not w.given:
        return f"notes dated {dates}"
    open_end = ", with no end" if w.since and not w.until else ""
    return f"notes dated {dates}{open_end} ({given_as}; the phrase '{w.phrase}' was not used)"


def ignored_phrase_note(
    phrase: str, why: str | None = None, since: str | None = None, until: str | None = None
) -> str:
    """What a client says when a time phrase was not applied (the hits are of any day): why, and
    the dates it was read as."""
    tried = f"'{phrase}' ({dates_said(since, until)})" if since or until else f"'{phrase}'"
    if why == "notAsked":
        return (
            f"{tried}: the message does not ask about the notes of that time, so they were not "
            "listed; its other words were searched in notes of any date"
        )
    return f"{tried}: no note has that date, so it was searched as words"


def stale_note(since: float, now: float | None = None) -> str:
    """What a client says when the index could not be updated since ``since`` (``staleSince``)."""
    passed = max((time.time() if now is None else now) - since, 0.0)
    if passed < 60:
        took = "less than a minute"
    else:
        took = "the last " + (f"{passed / 3600:.0f} h" if passed >= 5400 else f"{passed // 60:.0f} min")
    return (
        f"the index could not be updated for {took} (`sidecar status` says why): notes "
        "added or changed since may be missing here, deleted ones may still be found"
    )


def waiting_vectors(result: SearchResult) -> int:
    """The chunks an answer's notice counts as waiting for their vector: not those of notes written
    continuously (each indexing of a log appended to all the time leaves a few for seconds; said
    on every answer for hours, the notice taught people to ignore it)."""
    return max(result.pending_vectors - result.pending_continuous, 0)


def modified_said(note: dict[str, Any]) -> str:
    """A listed note's ``modified`` as the clients show it; with ``modifiedAhead`` as a hit says it:
    the time shown is its last change seen here, the file's own date lies in the future."""
    if not note.get("modifiedAhead"):
        return str(note["modified"])
    if not note["modified"]:  # no sane time of it seen here either
        return f"no last change seen here; its file's date {note['modifiedAhead']} lies in the future"
    return (
        f"{note['modified']}, its last change seen here; its file's date {note['modifiedAhead']} "
        "lies in the future"
    )


def no_value_note(keys: Sequence[str]) -> str:
    """What a search answer says of filter keys with nothing after them ("tag:" ending the query):
    they were searched as words, not taken as filters (a query with a colon never fails)."""
    named = ", ".join(f"{k}:" for k in keys)
    return (
        f"{named} {'has' if len(keys) == 1 else 'have'} no value, searched as a word (write {keys[0]}:VALUE)"
    )


def pending_note(n: int) -> str:
    """What a client says when some chunks had no vector yet (the hits may miss them)."""
    chunks = "1 chunk still waits for its vector" if n == 1 else f"{n:,} chunks still wait for their vectors"
    return f"{chunks} (being computed): until then found by words only, not by meaning"


def switch_note(n: int) -> str:
    """What a client says of the chunks left to a model switch (found by words only until it ends)."""
    chunks = "1 chunk waits" if n == 1 else f"{n:,} chunks wait"
    return (
        f"{chunks} for the new model's vectors (cut again during the model switch, or whose vector "
        "was lost): found by words only, not by meaning, until the switch ends"
    )


def window_of(analysis: Analysis) -> Window | None:
    if analysis.time_phrase_ignored:
        return Window(
            analysis.time_phrase_ignored,
            applied=False,
            since=analysis.time_phrase_since,
            until=analysis.time_phrase_until,
            why=analysis.time_phrase_why,
        )
    f = analysis.filters
    if f.time_phrase:
        return Window(f.time_phrase, applied=True, since=f.since, until=f.until, given=f.window_given)
    return None


# --- to JSON (the daemon) -----------------------------------------------------------------------


def hit_json(h: Hit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "reference": h.reference,
        "source": h.source,
        "score": h.score,
        "relevance": h.relevance,
        "vecScore": h.vec_score,
        "bm25Score": h.bm25_score,
        "boosts": dict(h.boosts),
        "title": h.title,
        "headings": list(h.headings),
        "lines": list(h.lines),
        "text": h.text,
    }
    if h.masked:
        out["masked"] = dict(h.masked)
    if h.agent:
        out["agent"] = h.agent
    if h.page_bm25_score is not None:
        out["pageBm25Score"] = h.page_bm25_score
    if h.date is not None:
        out["date"] = h.date
        out["datedBy"] = h.dated_by
    if h.modified_ahead is not None:
        out["modifiedAhead"] = h.modified_ahead
    if h.similarity is not None:
        out["similarity"] = h.similarity
    if h.keywords is not None:
        out["keywords"] = h.keywords
    if h.gate is not None:
        out["gate"] = h.gate
    if h.deletion_held:
        out["deletionHeld"] = True
    return out


DELETION_HELD_MARK = "deleted on disk, deletion held"


def held_note(references: list[str]) -> str:
    """What the recall block says of hits whose files are gone while their deletion is held."""
    many = len(references) > 1
    return (
        f"{', '.join(references)} {'were' if many else 'was'} deleted on disk; sidecar holds "
        f"{'their' if many else 'its'} deletion (many notes went at once) until confirmed: "
        "the text shown may be gone"
    )


def analysis_json(a: Analysis) -> dict[str, Any]:
    f = a.filters
    out: dict[str, Any] = {
        "text": a.text,
        "contentWords": list(a.content_words),
        "rareWords": list(a.rare_words),
        "wordClass": a.word_class,
        "chronicle": a.chronicle,
        "language": a.language,
        "filters": {
            "tags": list(f.tags),
            "pathPrefix": f.path_prefix,
            "since": f.since,
            "until": f.until,
            "timePhrase": f.time_phrase,
        },
    }
    if f.window_given:
        out["filters"]["windowGiven"] = True
    if f.no_value:
        out["filters"]["noValue"] = list(f.no_value)
    if a.history_turns is not None:
        out["historyTurns"] = a.history_turns
    if a.history_share is not None:
        out["historyShare"] = a.history_share
    if a.refers_back is not None:
        out["refersBack"] = a.refers_back
    if a.time_phrase_ignored:
        out["timePhraseIgnored"] = a.time_phrase_ignored
        for key, value in (
            ("timePhraseWhy", a.time_phrase_why),
            ("timePhraseSince", a.time_phrase_since),
            ("timePhraseUntil", a.time_phrase_until),
        ):
            if value:
                out[key] = value
    return out


def window_json(w: Window) -> dict[str, Any]:
    if not w.applied:
        ignored: dict[str, Any] = {"phrase": w.phrase, "applied": False}
        ignored.update({k: v for k, v in (("why", w.why), ("since", w.since), ("until", w.until)) if v})
        return ignored
    out: dict[str, Any] = {"phrase": w.phrase, "since": w.since, "until": w.until, "applied": True}
    if w.listed:
        out["listed"] = w.listed
    if w.given:
        out["given"] = True
    return out


def state_json(result: SearchResult) -> dict[str, Any]:
    """What an answer says of the index it came from (degraded, vectors or notes still coming,
    a stale share, a catch-up), as the socket and the MCP shim both put it: one place, so a
    mark added for one is not missing from the other."""
    out: dict[str, Any] = {}
    if result.degraded:
        out["degraded"] = result.degraded
    if result.pending_vectors:
        out["pendingVectors"] = result.pending_vectors
    if result.pending_continuous:
        out["pendingContinuous"] = result.pending_continuous
    if result.left_to_switch:
        out["leftToSwitch"] = result.left_to_switch
    if result.indexing is not None:
        out["indexing"] = {"done": result.indexing[0], "total": result.indexing[1]}
    if result.stale_since is not None:
        out["staleSince"] = result.stale_since
    if result.catching_up is not None:
        done, total, recut = result.catching_up
        out["catchingUp"] = {"done": done, "total": total, **({"recut": recut} if recut else {})}
    return out


def search_json(result: SearchResult, *, preview: bool) -> dict[str, Any]:
    """The reply of ``search`` (and of ``recall``, with its ``context``)."""
    out: dict[str, Any] = {"hits": [hit_json(h) for h in result.hits]}
    if result.context is not None:
        out["context"] = result.context
    out.update(state_json(result))
    if result.listed is not None:
        out["listed"] = result.listed
    window = result.window or (window_of(result.analysis) if result.analysis else None)
    if window is not None:
        out["window"] = window_json(window)
    if preview and result.analysis is not None:
        out["analysis"] = analysis_json(result.analysis)
    if preview and result.gates is not None:
        out["gates"] = dict(result.gates)
        out["dropped"] = [hit_json(h) for h in result.dropped]
    return out


def explanation_json(e: Explanation) -> dict[str, Any]:
    """The reply of ``why``."""
    if not e.indexed:
        out: dict[str, Any] = {"indexed": False, "analysis": analysis_json(e.analysis)}
        if e.exists is not None:
            out["exists"] = e.exists
        if e.reason is not None:
            out["reason"] = e.reason
        if e.excluded is not None:
            out["excluded"] = e.excluded
        return out
    chunks = [
        {
            "lines": list(c.lines),
            "vecScore": c.vec_score,
            "bm25Score": c.bm25_score,
            "score": c.score,
            "relevance": c.relevance,
            "boosts": dict(c.boosts),
            "outcome": c.outcome,
        }
        for c in e.chunks
    ]
    return {
        "indexed": True,
        "reference": e.reference,
        "chunks": chunks,
        "vectorWeight": e.vector_weight,
        "pageBm25Score": e.page_bm25_score,
        "degraded": e.degraded,
        "analysis": analysis_json(e.analysis),
    }


# --- from JSON (the clients) --------------------------------------------------------------------


def _lines(value: Any) -> tuple[int, int]:
    return int(value[0]), int(value[1])


def parse_hit(d: Mapping[str, Any]) -> Hit:
    return Hit(
        reference=d["reference"],
        source=d["source"],
        score=d["score"],
        relevance=d["relevance"],
        vec_score=d.get("vecScore"),
        bm25_score=d.get("bm25Score"),
        boosts=dict(d.get("boosts") or {}),
        title=d.get("title", ""),
        headings=tuple(d.get("headings") or ()),
        lines=_lines(d["lines"]),
        text=d["text"],
        masked=dict(d.get("masked") or {}),
        agent=d.get("agent"),
        page_bm25_score=d.get("pageBm25Score"),
        date=d.get("date"),
        dated_by=d.get("datedBy"),
        modified_ahead=d.get("modifiedAhead"),
        similarity=d.get("similarity"),
        keywords=d.get("keywords"),
        gate=d.get("gate"),
        deletion_held=bool(d.get("deletionHeld")),
    )


def parse_analysis(d: Mapping[str, Any]) -> Analysis:
    f = d.get("filters") or {}
    return Analysis(
        text=d["text"],
        content_words=tuple(d.get("contentWords") or ()),
        rare_words=tuple(d.get("rareWords") or ()),
        word_class=d.get("wordClass", 0),
        chronicle=bool(d.get("chronicle")),
        language=d.get("language"),
        filters=AnalysisFilters(
            tags=tuple(f.get("tags") or ()),
            path_prefix=f.get("pathPrefix"),
            since=f.get("since"),
            until=f.get("until"),
            time_phrase=f.get("timePhrase"),
            window_given=bool(f.get("windowGiven")),
            no_value=tuple(f.get("noValue") or ()),
        ),
        history_turns=d.get("historyTurns"),
        history_share=d.get("historyShare"),
        refers_back=d.get("refersBack"),
        time_phrase_ignored=d.get("timePhraseIgnored"),
        time_phrase_why=d.get("timePhraseWhy"),
        time_phrase_since=d.get("timePhraseSince"),
        time_phrase_until=d.get("timePhraseUntil"),
    )


def parse_window(w: Mapping[str, Any]) -> Window:
    return Window(
        w["phrase"],
        bool(w["applied"]),
        w.get("since"),
        w.get("until"),
        int(w.get("listed") or 0),
        w.get("why"),
        bool(w.get("given")),
    )


def parse_search(d: Mapping[str, Any]) -> SearchResult:
    w = d.get("window")
    window = parse_window(w) if w else None
    analysis = d.get("analysis")
    return SearchResult(
        hits=tuple(parse_hit(h) for h in d["hits"]),  # no hits key: not a search's answer
        degraded=d.get("degraded"),
        analysis=parse_analysis(analysis) if analysis else None,
        context=d.get("context"),
        window=window,
        pending_vectors=int(d.get("pendingVectors") or 0),
        pending_continuous=int(d.get("pendingContinuous") or 0),
        left_to_switch=int(d.get("leftToSwitch") or 0),
        indexing=(int(d["indexing"]["done"]), int(d["indexing"]["total"])) if d.get("indexing") else None,
        listed=int(d["listed"]) if d.get("listed") is not None else None,
        stale_since=float(d["staleSince"]) if d.get("staleSince") is not None else None,
        catching_up=(
            (
                int(d["catchingUp"]["done"]),
                int(d["catchingUp"]["total"]),
                int(d["catchingUp"].get("recut", 0)),
            )
            if d.get("catchingUp")
            else None
        ),
        dropped=tuple(parse_hit(h) for h in d.get("dropped") or ()),
        gates=dict(d["gates"]) if d.get("gates") else None,
    )


def parse_explanation(d: Mapping[str, Any]) -> Explanation:
    chunks = tuple(
        ChunkExplanation(
            lines=_lines(c["lines"]),
            vec_score=c.get("vecScore"),
            bm25_score=c.get("bm25Score"),
            score=c.get("score"),
            relevance=c.get("relevance"),
            boosts=dict(c.get("boosts") or {}),
            outcome=c["outcome"],
        )
        for c in d.get("chunks", [])
    )
    return Explanation(
        indexed=bool(d["indexed"]),
        analysis=parse_analysis(d["analysis"]),
        reference=d.get("reference"),
        chunks=chunks,
        vector_weight=d.get("vectorWeight"),
        degraded=d.get("degraded"),
        page_bm25_score=d.get("pageBm25Score"),
        exists=d.get("exists"),
        reason=d.get("reason"),
        excluded=d.get("excluded"),
    )
