"""Query -> both arms -> fusion -> rules -> typed hits. Each arm over-fetches, fusion ranks, then
we truncate. ``plan``, ``arms`` and ``rank`` are shared with ``why`` (search.explain) and ``recall``
(search.recall). The ``Retriever`` is cut along what its parts do: reading and weighing the query
(``query_plan``), the two arms finding candidates (``arms``), fusion and the rules ordering them
(``ranking``); here the search itself, the time phrases and listings it answers with. The query's
words as the arms read them: ``querywords``; what a failing keyword index means for the answer and
for status: ``keyword_gaps``.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from sidecar.config import RecallConfig, SearchConfig
from sidecar.contracts.protocol import LIMIT_RANGE
from sidecar.contracts.wire import SearchResult
from sidecar.index.repair import ready_inbox
from sidecar.index.vectoring import Stores
from sidecar.model.embedder import EmbedderSlot
from sidecar.search import listing
from sidecar.search.arms import Arms, Found
from sidecar.search.fusion import Scored
from sidecar.search.query import Filters, QueryAnalysis, analyze, split_filters
from sidecar.search.query_plan import QueryPlan
from sidecar.search.querycache import QueryCache
from sidecar.search.querywords import _language_set
from sidecar.search.ranking import Ranker, Ranking
from sidecar.search.request import SearchRequest, filters_alone, with_filters
from sidecar.search.results import analysis_of, phrase_ignored, to_hit
from sidecar.stores.bm25_folder import one_look
from sidecar.stores.manifest_rows import ChunkView, NoteDay

# The wider looks a limit the fixed pool cannot fill is filled from, in turn: each a whole pool
# of its own, ranked whatever the limit, taken only while too few hits are found (a limit of 50
# mostly stops at 200 and does not pay for 600). The last: three candidates an arm per hit of the
# largest limit (what the largest limit fetched when the pool grew with it).
WIDER_POOLS = (200, 3 * LIMIT_RANGE[1])


class Retriever(QueryPlan, Arms, Ranker):
    def __init__(
        self,
        stores: Stores,
        slot: EmbedderSlot,
        cfg: SearchConfig,
        recall: RecallConfig,
        languages: str = "all",
        *,
        model_stem: bool = False,
        model_gates: Collection[str] = (),
    ) -> None:
        self.languages = _language_set(languages)
        # search.stemFirst was not set: each model's own list counts, the serving one's (see stem).
        self.model_stem = model_stem
        # recall's gates left to the models (recall.minSimilarity, recall.scoreFloor): the
        # serving model's own count, also while a switch migrates (see recall_settings).
        self.model_gates = frozenset(model_gates)
        self.stores = stores
        self.slot = slot
        self.cfg = cfg
        self.recall_cfg = recall
        self.today: Callable[[], dt.date] = dt.date.today  # local day; tests pin it
        self.week_start: Callable[[], int] = lambda: 0  # weeks' first weekday, 0 Monday (the vault's)
        self.queries = QueryCache(cfg.query_cache)
        # (when counted, chunks waiting for a vector, of which of notes written continuously,
        # chunks left to a model switch)
        self._pending: tuple[float, int, int, int] = (-1.0, 0, 0, 0)

    # --- search ---------------------------------------------------------------------------------

    def today_of(self, req: SearchRequest) -> dt.date:
        """The day a request's time phrases are read against: the asker's, when it sent it."""
        return req.today or self.today()

    def read_query(self, req: SearchRequest) -> tuple[str, Filters]:
        """The request's text to rank and its inline filters. A window given as a parameter wins
        over a time phrase of the query, as an inline one does (see split_filters)."""
        given = bool(req.filters.since or req.filters.until)
        return split_filters(req.query, self.today_of(req), window_given=given, week_start=self.week_start())

    def search(self, req: SearchRequest) -> SearchResult:
        text, inline = self.read_query(req)
        if filters_alone(text, inline):
            # Filters alone select notes but give no word to rank them by: the notes they select
            # are the answer (it was an error naming `list`, which the command line lacked).
            return self.listed(with_filters(req, inline))
        windowed = with_filters(req, inline)
        if not inline.phrase:
            return self.search_text(windowed, text)
        # A time phrase asks about its period ("what did I do last week?"): the notes of that
        # period are the answer, those matching the other words first, the rest listed by date.
        # (Deciding by the words' hits alone answered with only the notes holding a word, or,
        # with none, with notes of any date.)
        dated = self.dated_notes(windowed)
        if dated:
            qa = analyze(text)
            # Without a content word ("was habe ich gemacht") the words would rank the period's
            # notes by chance: they are listed by date alone.
            # Twice the limit of word hits: those in the period's own notes further down take the
            # places the notes merely edited in it may not (see with_period).
            deeper = replace(windowed, limit=2 * windowed.limit)
            found = self.search_text(deeper, text) if qa.content_words else _no_hits(qa, windowed.filters)
            return self.with_period(found, dated, windowed)
        # A soft filter: "a daily note for today" may ask about daily notes, not about notes of
        # today. When no note at all is dated in its window, the words are searched instead.
        phrase = inline.phrase
        text, inline = split_filters(req.query, self.today_of(req), phrases=False)
        result = self.search_text(with_filters(req, inline), text)
        return phrase_ignored(result, phrase, "noNote", windowed.filters)

    def listed(self, req: SearchRequest) -> SearchResult:
        """A search of filters alone (``listing.listed``)."""
        return listing.listed(
            self.stores.manifest, req, self.today_of(req), mask_secrets=self.cfg.mask_secrets
        )

    def listed_place(self, req: SearchRequest, key: str) -> int | None:
        """Note ``key``'s place in ``listed``'s order (``listing.listed_place``)."""
        return listing.listed_place(self.stores.manifest, req, key, self.today_of(req))

    def dated_notes(self, req: SearchRequest) -> list[NoteDay]:
        """The notes of a request's date window in the listing order (``listing.dated_notes``)."""
        return listing.dated_notes(self.stores.manifest, req, self.today_of(req))

    def with_period(self, result: SearchResult, dated: Sequence[NoteDay], req: SearchRequest) -> SearchResult:
        """``result`` with the window's other notes listed by date (``listing.with_period``)."""
        floor = self.recall_settings().score_floor
        return listing.with_period(
            self.stores.manifest, result, dated, req, floor=floor, mask_secrets=self.cfg.mask_secrets
        )

    def wider_pools(self, req: SearchRequest) -> list[int]:
        """The wider looks after the fixed pool (none for a request with its own pool: recall)."""
        if req.pool is not None:
            return []
        return [p for p in WIDER_POOLS if p > self.cfg.candidates]

    def looked(
        self,
        req: SearchRequest,
        r: Ranking,
        found: Found,
        widen: Callable[[SearchRequest], tuple[Found, Ranking]],
        until: int,
    ) -> tuple[list[Scored], dict[str, int], dict[str, ChunkView]]:
        """The pool's hits (``r``, ``found``) then, while fewer than ``until`` and an arm of the
        last look filled its pool, each wider look's new hits (``widen`` ranks a look's pool).
        Every look is ranked whole and independent of the limit, so the answer is the same list
        at every limit, cut: the first hits of any limit are those of a smaller one. Returns the
        hits, the look (the pool an arm) of each hit from a wider one by chunk, and the views."""
        kept = [s for s in r.ranked if s.relevance >= req.min_score]
        views = r.views
        wider: dict[str, int] = {}
        last = req
        for pool in self.wider_pools(req):
            if len(kept) >= until or not self.cut(found, last):
                break
            last = replace(req, pool=pool)
            found, r2 = widen(last)
            new = after_pool(
                kept, [s for s in r2.ranked if s.relevance >= req.min_score], self.cfg.max_hits_per_note
            )
            wider.update((s.candidate.chunk_id, pool) for s in new[len(kept) :])
            kept = new
            views = {**r2.views, **views}
        return kept, wider, views

    def search_text(self, req: SearchRequest, text: str) -> SearchResult:
        """The hits for ``text`` (filters already split off) under ``req``."""
        ready_inbox(self.stores, req.agent)  # an agent back after a long while: its index rebuilt
        # One look at the keyword index for the rest (after the rebuild above, which writes):
        # each folder's searcher taken once and each word counted once (``one_look``), not at
        # each of the search's 30-odd reads.
        with one_look():
            return self._search_text(req, text)

    def _search_text(self, req: SearchRequest, text: str) -> SearchResult:
        seen, qa, spelled = self.read_spelling(text, req.agent)
        early = self.start_vectors(req, seen, qa)
        rare, weight, relevant = self.shares(qa, req.agent)
        found = self.arms(req, seen, qa, None, weight, early=early, spelled=spelled)
        r = self.rank(req, qa, found, weight=weight, rare=rare, relevance_weight=relevant)
        mask_secrets = self.cfg.mask_secrets

        def widen(wide: SearchRequest) -> tuple[Found, Ranking]:
            more = self.arms(wide, seen, qa, None, weight, spelled=spelled)
            return more, self.rank(wide, qa, more, weight=weight, rare=rare, relevance_weight=relevant)

        # The pool holds fewer hits than asked and an arm had more: wider looks' hits follow.
        kept, wider, views = self.looked(req, r, found, widen, req.limit)
        # Only the hits returned are masked and built: masking every ranked candidate (a hundred
        # and more) was the largest cost of a search after the query embedding.
        kept = kept[: req.limit]
        agent = req.agent
        dated = bool(req.filters.since or req.filters.until)
        hits = tuple(
            to_hit(
                s,
                views[s.candidate.chunk_id],
                agent,
                mask_secrets=mask_secrets,
                dated=dated,
                look=wider.get(s.candidate.chunk_id, 0),
            )
            for s in kept
        )
        return SearchResult(
            hits,
            found.degraded,
            analysis_of(qa, req.filters, rare),
            pending_vectors=found.pending,
            pending_continuous=found.pending_continuous,
            left_to_switch=found.left_to_switch,
        )


def after_pool(shown: list[Scored], wider: list[Scored], cap: int) -> list[Scored]:
    """``shown`` (the hits of the looks so far, in order), then those of ``wider`` (a wider
    look's hits, in its order) that hold no chunk a shown hit holds (its own and those folded
    into it), at most ``cap`` hits of a note in all (0: no cap). Only what is shown is skipped:
    a chunk the narrower pool ranked below minScore may pass it in the wider one, and skipped it
    was shown at no limit."""
    taken = {s.candidate.chunk_id for s in shown} | {f for s in shown for f in s.folded}
    per_note = Counter(s.candidate.key for s in shown)
    out = list(shown)
    for s in wider:
        key = s.candidate.key
        if s.candidate.chunk_id in taken or taken.intersection(s.folded):
            continue
        if cap > 0 and per_note[key] >= cap:
            continue
        per_note[key] += 1
        out.append(s)
    return out


def _no_hits(qa: QueryAnalysis, filters: Filters) -> SearchResult:
    return SearchResult((), None, analysis_of(qa, filters))
