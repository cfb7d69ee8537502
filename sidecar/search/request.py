"""A search as asked (pure): the query, its limit and scope, and the filters given as parameters
or inline in the query."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from sidecar.contracts.wire import SOURCES
from sidecar.search.day_calendar import FilterError
from sidecar.search.query import Filters

_LETTER_OR_DIGIT = re.compile(r"[^\W_]")  # "\w" but the underscore: "_" alone is no word


@dataclass(frozen=True)
class SearchRequest:
    query: str
    limit: int
    min_score: float
    sources: tuple[str, ...] | None = None
    agent: str | None = None  # scope: own memory plus vault and wiki
    filters: Filters = field(default_factory=Filters)
    token_budget: int | None = None  # recall: this call's block budget (else recall.tokenBudget)
    # The asker's local date ("today", "gestern" are the asker's days, not the daemon's); None:
    # the daemon's own.
    today: dt.date | None = None
    # Candidates each arm fetches (before the filters' x4); None: ``search.candidates``. Never the
    # limit's: the ranking sees one pool whatever the limit (``Retriever.search_text``).
    pool: int | None = None


def with_filters(req: SearchRequest, inline: Filters) -> SearchRequest:
    """The request with the query's inline filters: tags add to the parameter's (any of them), an
    inline ``path:``, ``since:``, ``until:`` or ``source:`` replaces the parameter. A window left
    empty by the two together (``since`` given, an inline ``until:`` before it) is refused."""
    filters = req.filters.merged(inline)
    if filters.since and filters.until and filters.since > filters.until:
        raise FilterError(f"the date window is empty: since {filters.since} is after until {filters.until}")
    sources = req.sources
    if inline.sources:
        sources = tuple(s for s in inline.sources if s in SOURCES) or sources
    return replace(req, sources=sources, filters=filters)


def filters_alone(text: str, inline: Filters) -> bool:
    """Whether a query held inline filters and no other word (a time phrase is words). What is
    left beside them without a letter or digit ("- tag:x", "tag:x ?", "tag:x _", a list bullet
    pasted with it) is no word: searched, it was a query of no content word, which found nothing."""
    return (
        _LETTER_OR_DIGIT.search(text) is None
        and inline.phrase is None
        and bool(inline.tags or inline.path_prefix or inline.since or inline.until or inline.sources)
    )
