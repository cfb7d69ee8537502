"""Query -> both arms -> fusion -> rules -> typed hits. Each arm over-fetches, fusion ranks, then
we truncate. ``plan``, ``arms`` and ``rank`` are shared with ``why`` (search.explain) and ``recall``
(search.recall). The ``Retriever`` is cut along what its parts do: reading and weighing the query
(``query_plan``), the two arms finding candidates (``arms``), fusion and the rules ordering them
(``ranking``), the wider looks a limit the pool cannot fill takes (``looks``); here the search
itself, the time phrases and listings it answers with. The query's
words as the arms read them: ``querywords``; what a failing keyword index means for the answer and
for status: ``keyword_gaps``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path

from sidecar.config import RecallConfig, SearchConfig
from sidecar.contracts.wire import SearchResult
from sidecar.index.repair import ready_inbox
from sidecar.index.vectoring import Stores
from sidecar.model.embedder import EmbedderSlot
from sidecar.search import listing
from sidecar.search.looks import Reading, WiderLooks
from sidecar.search.query import Filters, QueryAnalysis, analyze, split_filters
from sidecar.search.querycache import QueryCache
from sidecar.search.querywords import _language_set
from sidecar.search.request import SearchRequest, filters_alone, with_filters
from sidecar.search.results import analysis_of, phrase_ignored, to_hit
from sidecar.stores.bm25_folder import one_look
from sidecar.stores.manifest_rows import NoteDay


class Retriever(WiderLooks):
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
        word_lists: Path | None = None,
    ) -> None:
        self.languages = _language_set(languages)
        # search.stemFirst was not set: each model's own list counts, the serving one's (see stem).
        self.model_stem = model_stem
        # recall's gates left to the models (recall.minSimilarity, recall.scoreFloor): the
        # serving model's own count, also while a switch migrates (see recall_settings).
        self.model_gates = frozenset(model_gates)
        # The model cache the German word list's file is kept in (``wordlist``); None: no list.
        self.word_lists = word_lists
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
        read = Reading(seen, qa, tuple(rare), weight, relevant, spelled)
        # The pool holds fewer hits than asked and an arm had more: wider looks' hits follow.
        looked = self.looked(req, (found, r), read, req.limit)
        kept, wider, views = looked.hits, looked.wider, looked.views
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


def _no_hits(qa: QueryAnalysis, filters: Filters) -> SearchResult:
    return SearchResult((), None, analysis_of(qa, filters))
