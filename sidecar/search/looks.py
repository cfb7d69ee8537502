"""The wider looks of a search or a recall, a mixin of ``Retriever`` (``retrieval``): when the
fixed pool (``search.candidates``, or the request's own, recall's ``recall.candidates``) holds
fewer hits than the limit asks and an arm filled it (``cut``), wider pools follow in turn
(``wider_pools``), each ranked whole whatever the limit; their new hits follow those shown
(``looked``, ``after_pool``), so the answer for a limit is always the first hits of a larger
limit's. A wider look runs the query as the first look read it (``Reading``) with the first
look's query vector, not embedded again. Its own module so that deciding, taking and joining the
looks has one owner (the cut sat with the arms, the looks with the search).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sidecar.contracts.protocol import LIMIT_RANGE
from sidecar.search.arms import Arms, Found, QueryVector
from sidecar.search.fusion import Scored
from sidecar.search.query import QueryAnalysis
from sidecar.search.querywords import BmParts
from sidecar.search.ranking import Ranker, Ranking
from sidecar.search.request import SearchRequest
from sidecar.stores.manifest_rows import ChunkView

# The wider looks a limit the fixed pool cannot fill is filled from, in turn: each a whole pool
# of its own, ranked whatever the limit, taken only while too few hits are found (a limit of 50
# mostly stops at 200 and does not pay for 600). The last: three candidates an arm per hit of the
# largest limit (what the largest limit fetched when the pool grew with it).
WIDER_POOLS = (200, 3 * LIMIT_RANGE[1])


@dataclass(frozen=True)
class Reading:
    """A query as the first look read it, to run again over a wider pool: the text the arms
    search, its analysis, the shares (``QueryPlan.shares``), the words read with umlauts, and
    recall's own query vectors and keyword parts (None: a search's)."""

    seen: str
    qa: QueryAnalysis
    rare: tuple[str, ...]
    weight: float
    relevant: float
    spelled: Mapping[str, str] = field(default_factory=dict)
    vectors: Sequence[np.ndarray[Any, Any]] | None = None
    parts: BmParts | None = None


@dataclass(frozen=True)
class Looked:
    """The hits of the looks taken, in order; the look (its pool an arm) of each hit a wider one
    found, by chunk; the chunks' views of every look; each look's ranking by its pool (0: the
    first look's)."""

    hits: list[Scored]
    wider: dict[str, int]
    views: dict[str, ChunkView]
    rankings: dict[int, Ranking]


class WiderLooks(Arms, Ranker):
    """The wider looks of a ``Retriever``: its arms and ranking run again over wider pools."""

    def wider_pools(self, req: SearchRequest) -> list[int]:
        """The wider looks after the request's fixed pool (its own, or ``search.candidates``)."""
        pool = req.pool if req.pool is not None else self.cfg.candidates
        return [p for p in WIDER_POOLS if p > pool]

    def cut(self, found: Found, req: SearchRequest) -> bool:
        """Whether an arm returned as many candidates as it fetched: a wider pool may hold more."""
        fetch = self._fetch(req)
        return len(found.keywords) >= fetch or any(len(v) >= fetch for v in found.vectors)

    def look(
        self, req: SearchRequest, read: Reading, embedded: QueryVector | None = None
    ) -> tuple[Found, Ranking]:
        """The arms and the ranking of ``read`` over ``req``'s pool; ``embedded``: the query
        vector an earlier look made (the vector arm embeds it only for another model)."""
        found = self.arms(
            req,
            read.seen,
            read.qa,
            read.vectors,
            read.weight,
            parts=read.parts,
            spelled=read.spelled,
            embedded=embedded,
        )
        ranking = self.rank(
            req,
            read.qa,
            found,
            weight=read.weight,
            rare=read.rare,
            parts=read.parts,
            relevance_weight=read.relevant,
        )
        return found, ranking

    def looked(
        self,
        req: SearchRequest,
        first: tuple[Found, Ranking],
        read: Reading,
        until: int,
        *,
        shown: Callable[[Found, Ranking], list[Scored]] | None = None,
        ran_out: Callable[[Found, Ranking, int], bool] | None = None,
    ) -> Looked:
        """The first look's hits, then, while fewer than ``until`` and an arm of the last look
        filled its pool (and ``ran_out``, given the arms' fetch size, says the last look's pool,
        not what it shows, ended its hits), each wider look's new hits. ``shown``: the hits a
        look shows, in its order (a search's: those at or above minScore; recall's: those its
        gates pass). Every look is ranked whole and independent of the limit, and whether the
        next is taken depends on the limit only through the count of hits, so the answer is the
        same list at every limit, cut: the first hits of any limit are those of a smaller one."""
        pick = shown or (lambda _f, r: [s for s in r.ranked if s.relevance >= req.min_score])
        found, ranking = first
        kept = pick(found, ranking)
        views = dict(ranking.views)
        wider: dict[str, int] = {}
        rankings = {0: ranking}
        last = req
        for pool in self.wider_pools(req):
            if len(kept) >= until or not self.cut(found, last):
                break
            if ran_out is not None and not ran_out(found, ranking, self._fetch(last)):
                break
            last = replace(req, pool=pool)
            found, ranking = self.look(last, read, found.embedded or first[0].embedded)
            new = after_pool(kept, pick(found, ranking), self.cfg.max_hits_per_note)
            wider.update((s.candidate.chunk_id, pool) for s in new[len(kept) :])
            kept = new
            views = {**ranking.views, **views}
            rankings[pool] = ranking
        return Looked(kept, wider, views, rankings)


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
