"""Query -> both arms -> fusion -> hits. Each arm over-fetches, fusion ranks, then we truncate.

Imports query, fusion, sources, the stores and the embedder slot (for the query vector).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.config import SearchConfig
from sidecar.embedder import EmbedderSlot
from sidecar.errors import EmbedderError, StoreError
from sidecar.fusion import Candidate, fold, fuse
from sidecar.query import analyze, is_stopword
from sidecar.sources import public_reference
from sidecar.vectoring import Stores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchRequest:
    query: str
    limit: int
    min_score: float
    sources: tuple[str, ...] | None = None
    agent: str | None = None  # scope: own memory plus vault and wiki


@dataclass(frozen=True)
class SearchResult:
    hits: list[dict[str, Any]]
    degraded: str | None  # why the vector arm did not take part, if it did not


def bm25_terms(query: str, analyze_text: Any) -> list[str]:
    """Analysed query terms minus filler words; all terms if nothing else is left."""
    terms: list[str] = list(analyze_text(query))
    content = [t for t in terms if not is_stopword(t)]
    return content or terms


class Retriever:
    def __init__(self, stores: Stores, slot: EmbedderSlot, cfg: SearchConfig) -> None:
        self.stores = stores
        self.slot = slot
        self.cfg = cfg

    def search(self, req: SearchRequest) -> SearchResult:
        cfg = self.cfg
        qa = analyze(req.query)
        fetch = max(cfg.candidates, req.limit * 3)
        scope = req.agent
        bm = self.stores.bm25.search(bm25_terms(qa.text, self.stores.bm25.analyze), fetch, req.sources, scope)
        vec: Sequence[tuple[str, float]] = []
        degraded = None
        serving = self.stores.serving
        if serving is None:
            degraded = f"vector search unavailable (embedder {self.slot.state}); keyword results only"
        elif qa.words:
            try:
                vec = serving.store.search(serving.model.embed_query(qa.text), fetch, req.sources, scope)
            except (EmbedderError, StoreError) as exc:
                log.warning("vector_search_failed error=%s", exc)
                degraded = f"vector search failed ({exc}); keyword results only"
        scores: dict[str, dict[str, float]] = {}
        for cid, score in bm:
            scores.setdefault(cid, {})["bm25"] = score
        for cid, score in vec:
            scores.setdefault(cid, {})["vec"] = score
        views = self.stores.manifest.views(list(scores))
        candidates = [
            Candidate(
                cid,
                v.key,
                v.source,
                v.start_line,
                v.end_line,
                scores[cid].get("vec"),
                scores[cid].get("bm25"),
            )
            for cid, v in views.items()
        ]
        vector_weight = cfg.vector_weight
        if qa.word_class == 1:
            vector_weight = 1.0 - cfg.short_query_bm25_weight
        boosts = {"vault": cfg.boosts.vault, "wiki": cfg.boosts.wiki, "memory": cfg.boosts.memory}
        ranked = fold(fuse(candidates, vector_weight=vector_weight, source_boosts=boosts))
        hits = []
        for s in ranked:
            if s.score < req.min_score:
                continue
            v = views[s.candidate.chunk_id]
            c = s.candidate
            hit: dict[str, Any] = {
                "reference": public_reference(v.key, req.agent),
                "source": v.source,
                "score": round(s.score, 6),
                "vecScore": None if c.vec is None else round(c.vec, 6),
                "bm25Score": None if c.bm25 is None else round(c.bm25, 6),
                "boosts": dict(s.boosts),
                "title": v.title,
                "headings": list(v.headings),
                "lines": [c.start_line, c.end_line],
                "text": v.text,
            }
            if v.agent:
                hit["agent"] = v.agent
            hits.append(hit)
            if len(hits) >= req.limit:
                break
        return SearchResult(hits, degraded)
