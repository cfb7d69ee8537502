"""What a client says of an answer, in words a person and an agent read: the index still being
built or catching up, vectors still coming, a share offline, a stale index, a time phrase not
applied, a note's links or name resolved, why a hit is listed above one of higher relevance. The
daemon puts a few of them into its replies (recall's block, a search's notes); the CLI and the MCP
shim say the rest. Standard library and ``contracts`` only: a thin client imports it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.contracts.printable import escape_controls
from sidecar.contracts.wire import Hit, SearchResult, Window


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
    others. Only hits of the same look are compared: a wider look's hits follow the pool's own
    on their own scale (``Hit.look``), and the place they take says nothing of a boost."""
    out: list[str | None] = []
    for i, h in enumerate(hits):
        below = [x for x in hits[i + 1 :] if x.look == h.look and x.relevance > h.relevance + _RANKED_UP_BY]
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


DELETION_HELD_MARK = "deleted on disk, deletion held"

# A search's first hit from a wider look (``Hit.look``): the pool held too few hits for the
# limit; this hit and the next are ranked on that look's own scale, after the pool's hits.
WIDER_LOOK_MARK = (
    "from a wider look ({pool} candidates an arm), as are the hits after it: "
    "ranked on its own scale, after the hits above"
)


def held_note(references: list[str]) -> str:
    """What the recall block says of hits whose files are gone while their deletion is held."""
    many = len(references) > 1
    return (
        f"{', '.join(references)} {'were' if many else 'was'} deleted on disk; sidecar holds "
        f"{'their' if many else 'its'} deletion (many notes went at once) until confirmed: "
        "the text shown may be gone"
    )
