"""Ranked chunks into the typed results of the wire (``sidecar.contracts.wire``): a hit with its
public reference and masked text, and the query analysis a preview shows."""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Sequence
from dataclasses import replace

from sidecar.contracts.wire import IGNORED_WHY, Analysis, AnalysisFilters, Hit, SearchResult
from sidecar.notes.redact import mask, masked_line
from sidecar.search.fusion import Scored
from sidecar.search.query import Filters, QueryAnalysis
from sidecar.stores.manifest import ChunkView
from sidecar.vault.sources import public_reference


@functools.lru_cache(maxsize=2048)  # hits repeat across queries; a chunk took 0.3-1.5 ms to mask
def _masked(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    out, counts = mask(text)
    return out, tuple(counts.items())


def to_hit(s: Scored, view: ChunkView, agent: str | None, *, mask_secrets: bool, dated: bool = False) -> Hit:
    """``dated``: the hit carries its note's day (a search with a date window: an agent can tell
    which day of the period a note belongs to)."""
    c = s.candidate
    changed, ahead = last_change(view.mtime_ns, view.ctime_ns, view.indexed_at)  # one clock for both
    text, masked = _masked(view.text) if mask_secrets else (view.text, ())
    title, headings = view.title, tuple(view.headings)
    if mask_secrets:
        title, headings = masked_line(title), tuple(map(masked_line, headings))
    return Hit(
        reference=public_reference(view.key, agent),
        source=view.source,
        score=round(s.score, 6),
        relevance=round(s.relevance, 4),
        vec_score=None if c.vec is None else round(c.vec, 6),
        bm25_score=None if c.bm25 is None else round(c.bm25, 6),
        boosts=dict(s.boosts),
        title=title,
        headings=headings,
        lines=(c.start_line, c.end_line),
        text=text,
        masked=dict(masked),
        agent=view.agent or None,
        page_bm25_score=None if c.page_bm25 is None else round(c.page_bm25, 6),
        date=(view.date or local_day(changed)) if dated else None,
        dated_by=(view.dated_by or "modified") if dated else None,
        modified_ahead=local_day(view.mtime_ns) if dated and ahead and not view.date else None,
    )


# How far past now a file's mtime may lie and still be its last change. A NAS or a VM whose
# clock runs minutes ahead, or a FAT/exFAT file (a camera, a USB stick) whose local time was
# read in a zone up to 14 hours east, is still trusted; more than a day ahead is a wrong clock
# (a sync tool, `touch -d 2031-01-01`), and such a note headed every newest-first listing and
# every open-ended window (`since:yesterday`) for years.
FUTURE_SLACK_S = 86_400.0


def _sane(ns: int, now: float) -> bool:
    """A file or index time (ns) that may be a note's last change: known (not 0) and at most
    ``FUTURE_SLACK_S`` past ``now``."""
    return ns != 0 and ns <= (now + FUTURE_SLACK_S) * 1e9


def last_change(
    mtime_ns: int, ctime_ns: int, indexed_at: float, now: float | None = None
) -> tuple[int, bool]:
    """When a note counts as last changed (ns), for every listing by date, date window and day
    shown, and whether its mtime lies in the future (more than ``FUTURE_SLACK_S`` past ``now``).

    Trusted in this order: the mtime; else the file's status change time (a `touch -d` or a sync
    tool that sets the mtime cannot set it, and a rebuild of the index reads it again from the
    file); else when sidecar indexed this version (reset by every re-index, so only after the
    ctime); else 0 (never now: such a note was "today" on every query and headed every listing):
    it sorts last and falls in no date window (``note_passes``). A ctime or index time ahead too is a
    clock that was ahead when the file was written and indexed, and was corrected since."""
    now = time.time() if now is None else now
    if mtime_ns <= (now + FUTURE_SLACK_S) * 1e9:
        return mtime_ns, False
    if _sane(ctime_ns, now):
        return ctime_ns, True
    indexed_ns = int(indexed_at * 1e9)
    return (indexed_ns if _sane(indexed_ns, now) else 0), True


def local_day(mtime_ns: int) -> str:
    """The local day of a time in ns (a note's last change, ``last_change``: the day of a note
    that names none)."""
    return dt.datetime.fromtimestamp(mtime_ns / 1e9).date().isoformat()


def analysis_of(qa: QueryAnalysis, filters: Filters, rare: Sequence[str] = ()) -> Analysis:
    return Analysis(
        text=qa.text,
        content_words=tuple(qa.content_words),
        rare_words=tuple(rare),
        word_class=qa.word_class,
        chronicle=qa.chronicle,
        language=qa.language,
        filters=AnalysisFilters(
            tags=tuple(filters.tags),
            path_prefix=filters.path_prefix,
            since=filters.since,
            until=filters.until,
            time_phrase=filters.phrase,
            window_given=filters.given,
            no_value=filters.no_value,
        ),
    )


def phrase_ignored(result: SearchResult, phrase: str, why: str, tried: Filters) -> SearchResult:
    """``result`` (searched without the time phrase's window) marked so: the phrase, why it was
    not applied (a key of ``IGNORED_WHY``) and the dates it was read as."""
    assert result.analysis is not None
    assert why in IGNORED_WHY
    analysis = replace(
        result.analysis,
        time_phrase_ignored=phrase,
        time_phrase_why=why,
        time_phrase_since=tried.since,
        time_phrase_until=tried.until,
    )
    return replace(result, analysis=analysis)
