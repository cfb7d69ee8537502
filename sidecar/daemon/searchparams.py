"""The parameters of ``search`` and ``recall`` (and ``why``'s ``today``), validated and read
into a ``SearchRequest``: the query, limit, score floor, sources, tags, path, date window and the
asker's date. Its own module because both ops read them alike, apart from what each op does with
its request; the defaults are the retriever's settings as reloaded.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import unicodedata
from typing import Any

from sidecar.contracts.errors import ProtocolError
from sidecar.contracts.protocol import (
    LIMIT_RANGE,
    MAX_DAY_CHARS,
    MAX_PATH_PREFIX_CHARS,
    MAX_QUERY_CHARS,
    MAX_TAG_CHARS,
    MIN_SCORE_RANGE,
    TOKEN_BUDGET_RANGE,
    param_float,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.contracts.wire import SOURCES
from sidecar.notes.markdown import filter_tag
from sidecar.search.day_calendar import FilterError, parse_day
from sidecar.search.query import MAX_TAGS, Filters
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever

log = logging.getLogger(__name__)

# Filters and options shared by `search` and `recall`.
SEARCH_PARAMS = ("limit", "minScore", "source", "tag", "pathPrefix", "since", "until", "preview", "today")
# How far the asker's date ("today") may be from the daemon's: time zones lie at most 26 hours
# apart, two calendar days; further is a wrong clock: the daemon's date is used, and said so.
_TODAY_SLACK_DAYS = 2
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def search_request(
    retriever: Retriever, p: dict[str, Any], agent: str | None, text_param: str, limit: int
) -> tuple[SearchRequest, str | None]:
    """The search parameters shared by search and recall, validated, and the note saying a
    ``today`` too far from the daemon's was ignored (read once: a second reading may fall on
    the other side of midnight, and logs its warning twice)."""
    query = param_str(p, text_param, max_len=MAX_QUERY_CHARS)
    if "\0" in query:
        raise ProtocolError(f"'{text_param}' contains a NUL byte")
    # One Unicode form: text pasted from a Mac's file names is decomposed (NFD), and the
    # model's words for "ä" split apart ("Tastenkürzel ändern" lost its page to another).
    query = unicodedata.normalize("NFC", query)
    limit = param_int(p, "limit", default=limit, lo=LIMIT_RANGE[0], hi=LIMIT_RANGE[1])
    lo, hi = MIN_SCORE_RANGE
    min_score = param_float(p, "minScore", default=retriever.cfg.min_score, lo=lo, hi=hi)
    source = p.get("source")
    sources: tuple[str, ...] | None
    if source is None:
        sources = None
    elif isinstance(source, str) and source in SOURCES:
        sources = (source,)
    elif isinstance(source, list) and source and all(isinstance(s, str) and s in SOURCES for s in source):
        sources = tuple(dict.fromkeys(source))
    else:
        raise ProtocolError(f"'source' must be one of {', '.join(SOURCES)} or a list of them")
    asker, far = asker_today(retriever, p)
    today = asker or retriever.today()
    since = _day(p, "since", today)
    until = _day(p, "until", today, end=True)
    if since and until and since > until:
        raise ProtocolError(f"the date window is empty: 'since' {since} is after 'until' {until}")
    filters = Filters(
        tags=_tags(p),
        path_prefix=param_opt_str(p, "pathPrefix", max_len=MAX_PATH_PREFIX_CHARS),
        since=since,
        until=until,
    )
    budget = None
    if text_param == "message":
        budget = param_int(
            p,
            "tokenBudget",
            default=retriever.recall_cfg.token_budget,
            lo=TOKEN_BUDGET_RANGE[0],
            hi=TOKEN_BUDGET_RANGE[1],
        )
    return SearchRequest(query, limit, min_score, sources, agent, filters, budget, today=asker), far


def asker_today(retriever: Retriever, p: dict[str, Any]) -> tuple[dt.date | None, str | None]:
    """The ``today`` parameter: the asker's local date, which "today", "gestern", "last
    Monday" count from (a client in another time zone than the daemon's); None when not sent,
    or, with a note saying so, when it is days from the daemon's own (a wrong clock)."""
    value = param_opt_str(p, "today", max_len=MAX_DAY_CHARS)
    if value is None:
        return None, None
    try:
        day = dt.date.fromisoformat(value) if _ISO_DAY.fullmatch(value) else None
    except ValueError:
        day = None
    if day is None:
        raise ProtocolError(f"'today' must be the asker's local date as YYYY-MM-DD, not {value!r}")
    own = retriever.today()
    apart = abs((day - own).days)
    if apart > _TODAY_SLACK_DAYS:
        log.warning("asker_today_ignored today=%s daemon_today=%s", value, own.isoformat())
        return None, (
            f"the asker's date ('today' {value}) is {apart} days from the daemon's date "
            f"{own.isoformat()}, more than time zones explain ({_TODAY_SLACK_DAYS}): time phrases "
            "were read against the daemon's date (one of the two clocks is wrong)"
        )
    return day, None


def _day(p: dict[str, Any], name: str, today: dt.date, *, end: bool = False) -> str | None:
    """A ``since``/``until`` parameter as an ISO day (``2026-9-1``, ``2026-09``, ``yesterday``, ``3d``)."""
    value = param_opt_str(p, name, max_len=MAX_DAY_CHARS)
    if value is None:
        return None
    try:
        return parse_day(value, today, name=name, end=end).isoformat()
    except FilterError as exc:
        raise ProtocolError(f"'{name}': {exc}") from exc


def _tags(p: dict[str, Any]) -> tuple[str, ...]:
    """``tag``: one tag, ``"a,b"`` or a list; a note with any of them passes."""
    value = p.get("tag")
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items) or len(items) > MAX_TAGS:
        raise ProtocolError(f"'tag' must be a tag, 'a,b' or a list of at most {MAX_TAGS} tags")
    if any(len(t) > MAX_TAG_CHARS for t in items):
        raise ProtocolError(f"'tag' holds a tag longer than {MAX_TAG_CHARS} characters")
    tags = tuple(dict.fromkeys(filter_tag(t) for t in items))
    if not all(tags):
        raise ProtocolError("'tag' has an empty tag")
    return tags
