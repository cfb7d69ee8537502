"""Notes by date (pure but for the manifest it is given): what a search of filters alone lists,
and the notes of a period a time phrase asks about, listed beside the hits that matched its words.
Nothing ranks these notes: their order is the day they name or were changed on (``listing_order``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from sidecar.contracts.wire import Hit, SearchResult, Window, under_prefix
from sidecar.search.fusion import Candidate, Scored
from sidecar.search.query import Filters, analyze
from sidecar.search.request import SearchRequest
from sidecar.search.results import analysis_of, to_hit
from sidecar.stores.lastchange import last_change, local_day
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import ChunkView, NoteDay
from sidecar.vault.references import public_reference

Order = Callable[[NoteDay], tuple[str, int, int, str]]


def passes(view: ChunkView, filters: Filters) -> bool:
    if not filters.active:  # most searches: every candidate of a search asks (150-odd views)
        return True
    note = NoteDay(
        view.key,
        view.source,
        view.agent,
        view.tags,
        view.mtime_ns,
        view.date,
        False,
        view.ctime_ns,
        view.indexed_at,
    )
    return note_passes(note, filters)


def note_passes(note: NoteDay, filters: Filters) -> bool:
    key, source, tags = note.key, note.source, note.tags
    if filters.tags and not any(t == f or t.startswith(f + "/") for f in filters.tags for t in tags):
        return False
    if filters.path_prefix:
        # A memory note's path follows its agent (memory/<agent>/<path>); its agent sees memory/<path>.
        roots = ("memory", "/".join(key.split("/", 2)[:2])) if source == "memory" else (source,)
        path = key.split("/", 2)[-1] if source == "memory" else key.split("/", 1)[1]
        if not under_prefix(path, filters.path_prefix, *roots):
            return False
    if filters.since or filters.until:
        # The note's own day when it names one (front matter, daily-note name), else that of its
        # last change (an mtime in the future is none: ``last_change``); none known, no window.
        changed, ahead = last_change(note.mtime_ns, note.ctime_ns, note.indexed_at)
        if not note.date and ahead and changed == 0:
            return False
        day = note.date or local_day(changed)
        if (filters.since and day < filters.since) or (filters.until and day > filters.until):
            return False
    return True


def by_date(view: ChunkView) -> Scored:
    """A note listed for its date alone: no arm found it, so no score and no relevance."""
    c = Candidate(view.chunk_id, view.key, view.source, view.start_line, view.end_line)
    return Scored(c, 0.0, 0.0, 0.0)


def selected(manifest: Manifest, req: SearchRequest) -> list[NoteDay]:
    """The indexed notes a request's filters and scope select."""
    return [
        n
        for n in manifest.note_days()
        if (req.sources is None or n.source in req.sources)
        and (req.agent is None or n.source != "memory" or n.agent == req.agent)
        and note_passes(n, req.filters)
    ]


def order_for(req: SearchRequest, today: dt.date) -> Order:
    """``listing_order`` for ``req``: a day after today (or after the window's last day, when
    the window asked about days to come) is no note's day to list it by."""
    return listing_order(max(today.isoformat(), req.filters.until or ""))


def listed(manifest: Manifest, req: SearchRequest, today: dt.date, *, mask_secrets: bool) -> SearchResult:
    """A search of filters alone: the notes they select in the listing order (``listing_order``)
    up to the limit, each with its first chunk, relevance 0 and no arm score (nothing ranked
    them; ``minScore`` does not apply)."""
    notes = dated_notes(manifest, req, today)[: req.limit]
    views = manifest.first_chunks([n.key for n in notes])
    hits = tuple(
        to_hit(by_date(v), v, req.agent, mask_secrets=mask_secrets, dated=True)
        for n in notes
        if (v := views.get(n.key)) is not None
    )
    return SearchResult(hits, None, analysis_of(analyze(""), req.filters), listed=len(hits))


def listed_place(manifest: Manifest, req: SearchRequest, key: str, today: dt.date) -> int | None:
    """The place of note ``key`` in ``listed``'s order for ``req`` at any depth (None when the
    filters do not select it): the notes ordered before it are counted, none is sorted and no
    chunk read (why asked a listing of 10,000 first chunks, each masked, for one place)."""
    notes = selected(manifest, req)
    order = order_for(req, today)
    mine = next((order(n) for n in notes if n.key == key), None)
    if mine is None:
        return None
    return 1 + sum(1 for n in notes if order(n) > mine)


def dated_notes(manifest: Manifest, req: SearchRequest, today: dt.date) -> list[NoteDay]:
    """The notes a request's date window (and its other filters and scope) holds, in the
    listing order (``listing_order``, the one a search of filters alone lists by)."""
    notes = selected(manifest, req)
    notes.sort(key=order_for(req, today), reverse=True)
    return notes


def with_period(
    manifest: Manifest,
    result: SearchResult,
    dated: Sequence[NoteDay],
    req: SearchRequest,
    *,
    floor: float,
    mask_secrets: bool,
) -> SearchResult:
    """``result`` (hits in the window, in rank order, possibly more than the limit) with the
    window's other notes listed by date, up to the request's limit, each with its first chunk;
    the window says how many were listed."""
    limit, agent = req.limit, req.agent
    of = {public_reference(n.key, agent): n for n in dated}
    # A hit no word of the query is in, found by meaning alone and weaker than recall would
    # inject (recall.scoreFloor), follows the period's own notes: in a small window the model
    # always finds some nearest notes ("was habe ich gestern notiert?" put nine notes edited
    # yesterday before yesterday's daily note).

    def strong(h: Hit) -> bool:
        return h.bm25_score is not None or h.relevance >= floor

    def own(h: Hit) -> bool:  # in a note of the period's own: dated by its name or a property
        n = of.get(h.reference)
        return n is not None and bool(n.date) and strong(h)

    # The words' hits in the period's own notes ("budget this year": this year's budget notes)
    # take every place they rank for. Other hits, in notes merely edited in the window or
    # found by meaning alone, leave up to half the places to the period's own notes: a plugin
    # touching every file makes the whole vault "yesterday", and must not crowd out
    # yesterday's daily note.
    owned = sum(1 for n in dated if n.date)
    others_cap = limit - min(owned, limit // 2)
    kept: list[Hit] = []
    others = 0
    for h in result.hits:
        if len(kept) == limit:
            break
        if not own(h):
            if others == others_cap:
                continue
            others += 1
        kept.append(h)
    shown = {h.reference for h in kept}
    more = period_listing(dated, shown, agent)[: limit - len(kept)]
    views = manifest.first_chunks([n.key for n in more])

    def listed(dated_by_name_or_property: bool) -> tuple[Hit, ...]:
        return tuple(
            to_hit(by_date(v), v, agent, mask_secrets=mask_secrets, dated=True)
            for n in more
            if bool(n.date) == dated_by_name_or_property and (v := views.get(n.key))
        )

    own_listed, edited_listed = listed(True), listed(False)
    ordered = (
        tuple(h for h in kept if strong(h))
        + own_listed
        + tuple(h for h in kept if not strong(h))
        + edited_listed
    )
    f = req.filters
    listed_n = len(own_listed) + len(edited_listed)
    window = Window(f.phrase or "", True, f.since, f.until, listed=listed_n, given=f.given)
    return replace(result, hits=ordered, window=window)


def listing_order(horizon: str) -> Callable[[NoteDay], tuple[str, int, int, str]]:
    """The key notes are listed by, highest first, where nothing ranked them (a search of filters
    alone, the notes of a period a time phrase asked about): newest day first, the day being the
    one the note names (a daily note's name, a date property) up to ``horizon`` (ISO), else that of
    its last change; at one day its daily note, then a note dated by a property, then a note only
    changed that day (the record of the day before what merely touched it: a sync or a plugin
    changes any note on any day); then the last change; then the key (a total order, so that a
    place can be counted). A day after the horizon gives way to the last change: by it, a note
    dated 2099 headed every listing for good; so does an mtime in the future give way to the
    file's status change or indexing time (``last_change``). (The two listings ordered apart: a
    period's daily notes of any day came before its other notes, a listing of filters alone knew
    no daily note.)
    """

    now = time.time()  # one clock for the whole listing: its order is total

    def order(n: NoteDay) -> tuple[str, int, int, str]:
        changed = last_change(n.mtime_ns, n.ctime_ns, n.indexed_at, now)[0]
        if n.date and n.date <= horizon:
            return n.date, 2 if n.named else 1, changed, n.key
        return local_day(changed), 0, changed, n.key

    return order


def period_listing(dated: Sequence[NoteDay], shown: Collection[str], agent: str | None) -> list[NoteDay]:
    """The notes of a period a search lists by date beside its hits (``shown``, references): the
    period's own notes (named by it, or dated by a property) before those merely changed in it,
    each in the listing order. That is which notes take the places, not an order: a plugin that
    touches every file makes the whole vault "yesterday", and must not take yesterday's daily
    note's place. A listing of filters alone has no such rule: its notes are the ones asked for."""
    rest = [n for n in dated if public_reference(n.key, agent) not in shown]
    return [n for n in rest if n.date] + [n for n in rest if not n.date]
