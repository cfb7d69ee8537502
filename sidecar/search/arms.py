"""The two arms of a search, a mixin of ``Retriever`` (``retrieval``): the keyword arm (BM25)
and the vector arm (the query embedded, the serving table searched, started early in a helper
thread), each over-fetching its candidates, and what was degraded when one fails (the other
answers alone; neither: an error, not an empty answer). Its own module because finding the
candidates decides nothing about their order (``ranking``); the state it works on is the
``Retriever``'s own, made in ``Retriever.__init__``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sidecar.config import SearchConfig
from sidecar.contracts.errors import EmbedderError, StoreError
from sidecar.contracts.plainerror import plain_error
from sidecar.index.keyword_faults import handles_seen, keyword_damage
from sidecar.index.vectoring import Stores, VectorSet
from sidecar.model.embedder import Embedder, EmbedderSlot
from sidecar.search.keyword_gaps import (
    _inbox_failure_reported,
    _inboxes_failing,
    _joined,
    _keyword_read,
    _memory_unindexed,
    _memory_unread,
    _page_failure_active,
)
from sidecar.search.query import QueryAnalysis
from sidecar.search.query_plan import QueryPlan
from sidecar.search.querycache import QueryCache
from sidecar.search.querywords import BmParts, bm25_text, joined_part, typed_part
from sidecar.search.request import SearchRequest
from sidecar.stores.bm25_search import SHARED, SearchFault

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.search.retrieval")


VecList = list[tuple[str, float, float]]  # (chunk id, cosine, hubness) of one vector query


@dataclass(frozen=True)
class QueryVector:
    """The query's vector by one model, as the vector arm embedded it: a wider look of the same
    query searches with it (with the query cache off it embedded the query a second time)."""

    model: Embedder
    vector: np.ndarray[Any, Any]


# The vector arm of a search runs here while the calling thread runs the keyword arm: the model
# and LanceDB release the GIL, so the two overlap. Shared by every Retriever of the process (the
# tests build hundreds); as many workers as the socket has request threads by default.
_ARM_WORKERS = 4
_arm_pool: ThreadPoolExecutor | None = None
_arm_pool_lock = threading.Lock()


def _vector_pool() -> ThreadPoolExecutor:
    global _arm_pool
    with _arm_pool_lock:
        if _arm_pool is None:
            _arm_pool = ThreadPoolExecutor(max_workers=_ARM_WORKERS, thread_name_prefix="vector-arm")
        return _arm_pool


@dataclass(frozen=True)
class Found:
    """What the two arms found for one query (``Retriever.arms``)."""

    keywords: list[tuple[str, float]]  # (chunk id, BM25) of the keyword arm
    vectors: list[VecList]  # each vector query's hits
    degraded: str | None = None  # what was degraded, as the result reports it
    # The keyword arm ran and did not fail: finding none of the words is then evidence (fuse).
    keywords_answered: bool = False
    stem: str | None = None  # the language whose stemmed forms the keyword arm searched first
    pending: int = 0  # chunks the vector arm could not see: their vectors are still being computed
    pending_continuous: int = 0  # of those, chunks of notes written continuously (``Stores.continuous``)
    left_to_switch: int = 0  # chunks it could not see either: left to a model switch until it ends
    # The query's words read with umlauts, by the word as typed (``Retriever.read_spelling``).
    spelled: Mapping[str, str] = field(default_factory=dict)
    # German verbs split from their particle, joined again (``Retriever.separated``).
    joined: tuple[str, ...] = ()
    embedded: QueryVector | None = None  # the query's vector the arm embedded (none given)


@dataclass(frozen=True)
class EarlyVectors:
    """The vector arm of a search, started before the keyword arm; for one serving table."""

    serving: VectorSet
    found: Future[tuple[np.ndarray[Any, Any], list[VecList]]]  # the query's vector, the hits


class Arms(QueryPlan):
    """The two arms of a ``Retriever`` (which sets the state below), over its query plan."""

    stores: Stores
    slot: EmbedderSlot
    cfg: SearchConfig
    queries: QueryCache
    _pending: tuple[float, int, int, int]

    def pending_vectors(self) -> tuple[int, int, int]:
        """Chunks waiting for a vector in the serving table, how many of those are of notes
        written continuously, and the chunks left to a model switch's table (no vector serves
        them until it ends, though the new model computes theirs meanwhile), counted at most once a second
        (a search during a backfill or after a table was replaced says so)."""
        at, n, continuous, left = self._pending
        now = time.monotonic()
        if now - at > 1.0:
            try:
                n = self.stores.manifest.pending_count()
                left = self.stores.manifest.left_to_switch()
                caps = self.stores.continuous() if n else {}
                continuous = min(n, self.stores.manifest.pending_count_of(caps)) if caps else 0
            except sqlite3.Error:  # the answer is a courtesy: never fail a search for it
                n = continuous = left = 0
            self._pending = (now, n, continuous, left)
        return n, continuous, left

    def query_vector(self, model: Embedder, text: str) -> np.ndarray[Any, Any]:
        """The query's vector by ``model`` (``search.queryCache`` recent ones are kept per model)."""
        self.queries.size = self.cfg.query_cache  # a reload may change it
        return self.queries.vector(model, text)

    # --- the arms -----------------------------------------------------------------------------

    def arms(
        self,
        req: SearchRequest,
        text: str,
        qa: QueryAnalysis,
        vectors: Sequence[np.ndarray[Any, Any]] | None,
        weight: float,
        *,
        parts: BmParts | None = None,
        early: EarlyVectors | None = None,
        spelled: Mapping[str, str] | None = None,
        embedded: QueryVector | None = None,
    ) -> Found:
        """The keyword arm's hits and each vector query's hits (``early``: a vector arm already
        started by ``start_vectors``), and what was degraded. ``spelled``: the words read with
        umlauts (``read_spelling``), also searched as typed. ``embedded``: the query's vector an
        earlier look of the same query made (``looks``), searched with when its model serves."""
        fetch = self._fetch(req)
        sources = req.sources
        stem = self.stem(qa)
        # An arm with no share in the fused score is not run at all (recall always blends vectors).
        problems = self.stores.problems
        bm: list[tuple[str, float]] = []
        bm_note: str | None = None
        bm_error: StoreError | None = None
        answered = False
        read = spelled or {}
        # German verbs split from their particle, joined again: asked only when keywords count.
        joined = (
            tuple(s.form for s in self.separated(qa, req.agent))
            if weight < 1.0 or vectors is not None
            else ()
        )
        if weight < 1.0 or vectors is not None:
            faults: list[SearchFault] = []
            seen: set[str] = set()
            try:
                words = [(bm25_text(qa), 1.0)] if parts is None else parts
                bm = self.stores.bm25.search(
                    [*words, *typed_part(read), *joined_part(joined)],
                    fetch,
                    sources,
                    req.agent,
                    stem=stem,
                    faults=faults,
                    read=seen,
                )
                answered = True
                faults = _keyword_read(self.stores, "chunks", faults, seen)
                # A failing page index stays reported until a page search succeeds (or the
                # repair rebuilds it): cleared here, it would flap on every search. So does an
                # agent's failing inbox until a search of it succeeds (other agents' searches,
                # which never read it, cleared it before the repair saw it).
                if not _inbox_failure_reported(self.stores.bm25, problems) and not _page_failure_active(
                    problems
                ):
                    problems.clear("keyword_search")
                bm_note = _joined(
                    _memory_unread(self.stores, faults),
                    _inboxes_failing(self.stores.bm25, req),
                    _memory_unindexed(self.stores, req),
                )
            except StoreError as exc:  # a damaged keyword index: answer from vectors alone
                log.warning("keyword_search_failed error=%s", exc)
                keyword_damage(problems, exc, str(exc))
                handles_seen(self.stores, "chunks", seen, [(SHARED, exc), *faults])
                bm_note, bm_error = (
                    f"keyword search failed ({plain_error(str(exc))}); vector results only",
                    exc,
                )

        def found(vec_lists: list[VecList], note: str | None) -> Found:
            return Found(bm, vec_lists, note, answered, stem, spelled=read, joined=joined)

        def no_arm(vector_why: str) -> StoreError:
            # Neither arm searched: an empty answer would read as "nothing relevant".
            return StoreError(
                f"search failed: the keyword index cannot be read ({bm_error}) and {vector_why}; "
                "a damaged index is rebuilt by itself: try again shortly"
            )

        serving = self.stores.serving
        if weight <= 0.0 and vectors is None:
            return found([], bm_note)
        if serving is None:
            why = "the vector table is opening" if self.slot.state == "ok" else f"embedder {self.slot.state}"
            if bm_error is not None:
                raise no_arm(f"vector search is unavailable ({why})")
            return found([], _joined(bm_note, f"vector search unavailable ({why}); keyword results only"))
        if not qa.words and vectors is None:
            return found([], None)
        try:
            hits, query = self._vector_hits(
                serving,
                vectors,
                text,
                req,
                early=early,
                embedded=embedded,
                # The query's scale is the keyword index's alone: counted while the query embeds.
                meanwhile=(lambda: self._scale_meanwhile(qa, parts, weight, stem)) if answered else None,
            )
            problems.clear("vector_search")
            pending, continuous, left = self.pending_vectors()
            return replace(
                found(hits, bm_note),
                pending=pending,
                pending_continuous=continuous,
                left_to_switch=left,
                embedded=query,
            )
        except (EmbedderError, StoreError) as exc:
            if self.stores.serving is not serving:
                # A model switch overtook this search (the old table went): no damage, nothing
                # to report or repair; the next search asks the new table.
                log.info("vector_search_overtaken reason=model switch error=%s", exc)
                why = "the vector table was just switched to another model"
            else:
                log.warning("vector_search_failed error=%s", exc)
                problems.report("vector_search", str(exc))
                why = f"vector search failed ({plain_error(str(exc))})"
            if bm_error is not None:
                raise no_arm(f"{why} too") from exc
            return found([], _joined(bm_note, f"{why}; keyword results only"))

    def _scale_meanwhile(
        self, qa: QueryAnalysis, parts: BmParts | None, weight: float, stem: str | None
    ) -> None:
        """The query's scale, which is the keyword index's alone, counted while the query embeds
        rather than after it: ``ideal_score`` keeps it for the ranking within this search's look."""
        self.scale(
            [(bm25_text(qa), 1.0)] if parts is None else parts, pages=self.page_share(weight) > 0, stem=stem
        )

    def _vector_hits(
        self,
        serving: VectorSet,
        vectors: Sequence[np.ndarray[Any, Any]] | None,
        text: str,
        req: SearchRequest,
        *,
        early: EarlyVectors | None,
        embedded: QueryVector | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> tuple[list[VecList], QueryVector | None]:
        """Each vector query's hits from ``serving``, and the query's vector when this arm
        embedded it (or took ``embedded``, the same query's vector by the serving model); a
        search overtaken by a model switch (its table dropped under it) asks the new serving
        table, with that table's model, once. ``meanwhile``: run while the early arm is still
        embedding (not once it is done: then it would only delay the answer)."""
        fetch = self._fetch(req)
        try:
            if early is not None and early.serving is serving:
                if meanwhile is not None and not early.found.done():
                    meanwhile()  # work of this thread's that needs no vector, done as it waits
                query, hits = early.found.result()
                return hits, QueryVector(serving.model, query)
            # No early start, or the serving table changed meanwhile.
            if vectors is not None:
                return [serving.store.search(q, fetch, req.sources, req.agent) for q in vectors], None
            if embedded is not None and embedded.model is serving.model:
                query = embedded.vector
            else:
                query = self.query_vector(serving.model, text)
            return [serving.store.search(query, fetch, req.sources, req.agent)], QueryVector(
                serving.model, query
            )
        except (EmbedderError, StoreError) as exc:
            current = self.stores.serving
            if current is None or current is serving or vectors is not None:
                raise  # the given query vectors are the old model's: not for the new table
            log.info("vector_search_retried reason=model switch error=%s", exc)
            query = self.query_vector(current.model, text)
            return [current.store.search(query, fetch, req.sources, req.agent)], QueryVector(
                current.model, query
            )

    def _fetch(self, req: SearchRequest) -> int:
        """Candidates each arm fetches: a fixed pool (``search.candidates``, or the request's
        ``pool``), never sized by the limit. Calibration and every rule (page support, a note's
        clear keyword lead, rare words held, the per-note cap) are computed over the pool, so a
        pool grown with the limit reordered the first hits (``search_text``)."""
        pool = req.pool if req.pool is not None else self.cfg.candidates
        return pool * (4 if req.filters.active else 1)

    def start_vectors(self, req: SearchRequest, text: str, qa: QueryAnalysis) -> EarlyVectors | None:
        """Embed the query and search the vector table in a helper thread, for ``arms``; None when
        the vector arm will not run (no model yet, no words, no share whatever the rare words)."""
        serving = self.stores.serving
        if serving is None or not qa.words or self.vector_weight(qa) <= 0.0:
            return None
        fetch = self._fetch(req)

        def run() -> tuple[np.ndarray[Any, Any], list[VecList]]:
            query = self.query_vector(serving.model, text)
            return query, [serving.store.search(query, fetch, req.sources, req.agent)]

        return EarlyVectors(serving, _vector_pool().submit(run))
