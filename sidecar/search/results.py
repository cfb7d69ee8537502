"""Ranked chunks into the typed results of the wire (``sidecar.contracts.wire``): a hit with its
public reference and masked text, and the query analysis a preview shows."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from sidecar.contracts.wire import IGNORED_WHY, Analysis, AnalysisFilters, Hit, SearchResult
from sidecar.notes.redact import mask, masked_line
from sidecar.search.fusion import Scored
from sidecar.search.query import Filters, QueryAnalysis
from sidecar.stores.lastchange import last_change, local_day
from sidecar.stores.manifest_rows import ChunkView
from sidecar.vault.references import public_reference


@functools.lru_cache(maxsize=2048)  # hits repeat across queries; a chunk took 0.3-1.5 ms to mask
def _masked(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    out, counts = mask(text)
    return out, tuple(counts.items())


def to_hit(
    s: Scored, view: ChunkView, agent: str | None, *, mask_secrets: bool, dated: bool = False, look: int = 0
) -> Hit:
    """``dated``: the hit carries its note's day (a search with a date window: an agent can tell
    which day of the period a note belongs to). ``look``: the pool of the wider look that found
    it (0: the search's own pool)."""
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
        look=look,
    )


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
