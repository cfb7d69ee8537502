"""Fusion and the rules, a mixin of ``Retriever`` (``retrieval``): the two arms' candidates
fused on the query's scale (with their whole notes' keyword scores), the ranking rules (names,
rare words held as written, the log folder, links from the best notes), folding and the per-note
cap. Its own module because it orders what the arms found and finds nothing itself; ``why``
reads the same ``Ranking``. The state it works on is the ``Retriever``'s own.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from sidecar.config import SearchConfig
from sidecar.contracts.errors import StoreError
from sidecar.contracts.wire import memory_agent
from sidecar.index.keyword_faults import handles_seen, keyword_damage
from sidecar.index.vectoring import Stores
from sidecar.notes.links import cited_by
from sidecar.search.arms import Found
from sidecar.search.fusion import Candidate, Rules, Scale, Scored, apply_rules, cap_per_note, fold, fuse
from sidecar.search.keyword_gaps import (
    PAGE_FAILURE,
    _inbox_failure_reported,
    _keyword_read,
    _page_failure_active,
)
from sidecar.search.listing import passes
from sidecar.search.query import QueryAnalysis
from sidecar.search.query_plan import QueryPlan
from sidecar.search.querywords import BmParts, _name_words, bm25_text, joined_part, typed_part
from sidecar.search.request import SearchRequest
from sidecar.search.words import fold as fold_word
from sidecar.stores.bm25_search import SHARED, SearchFault
from sidecar.stores.manifest_rows import ChunkView

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.search.retrieval")


@dataclass(frozen=True)
class Ranking:
    ranked: list[Scored]  # the result order (folded, capped)
    views: dict[str, ChunkView]
    scored: list[Scored]  # every candidate after fusion and rules, before folding
    folded: list[Scored]  # after folding, before the per-note cap
    scale: Scale = field(default_factory=Scale)  # how raw scores became relevance


class Ranker(QueryPlan):
    """The fusion and rules of a ``Retriever`` (which sets the state below), over its query plan."""

    stores: Stores
    cfg: SearchConfig

    def rank(
        self,
        req: SearchRequest,
        qa: QueryAnalysis,
        found: Found,
        *,
        weight: float,
        rare: Sequence[str] = (),
        parts: BmParts | None = None,
        relevance_weight: float | None = None,
    ) -> Ranking:
        bm, vec_lists, stem = found.keywords, found.vectors, found.stem
        ids = list(dict.fromkeys([c for c, _ in bm] + [c for vl in vec_lists for c, _, _ in vl]))
        # Not the old entries of moved notes while they are removed: ``views`` leaves them out.
        views = {k: v for k, v in self.stores.manifest.views(ids).items() if passes(v, req.filters)}
        cfg = self.cfg
        boosts = {"vault": cfg.boosts.vault, "wiki": cfg.boosts.wiki, "memory": cfg.boosts.memory}
        bm_scores = dict(bm)
        words = [(bm25_text(qa), 1.0)] if parts is None else parts
        share = self.page_share(weight)
        keys = sorted({v.key for v in views.values()})
        searched = [*words, *typed_part(found.spelled), *joined_part(found.joined)]
        pages = dict(self._pages_or_nothing(searched, keys, req, stem)) if share > 0 and keys else {}
        # The scale is the words' as read, each once: a query is not worth more for being searched
        # in two spellings (a term scores its better part, not the sum), nor less for a spelling
        # the notes lack (an absent word counts its full idf: "Kuendigung" scored a third of
        # "Kündigung").
        scale = self.scale(words, pages=share > 0, stem=stem)
        # fuse decides whether the keyword arm found anything among the candidates (the filters'
        # survivors); the tokenizer is asked only when it found nothing at all. Recall's history
        # words are judged by its own gates, not here: only a search's words.
        answered = found.keywords_answered
        unread = answered and parts is None and not any(cid in views for cid, _ in bm) and self.unread(qa)
        best: dict[str, Scored] = {}
        # Each vector query is fused with BM25 on its own; a chunk keeps its better score.
        for vec in vec_lists or [[]]:
            vec_scores = {cid: cos for cid, cos, _ in vec}
            hubs = {cid: hub for cid, _, hub in vec}
            cands = [
                Candidate(
                    cid,
                    v.key,
                    v.source,
                    v.start_line,
                    v.end_line,
                    vec_scores.get(cid),
                    bm_scores.get(cid),
                    *_name_words(v.key, v.title, v.aliases),
                    v.has_vector,
                    hubs.get(cid, 0.0),
                    pages.get(v.key),
                )
                for cid, v in views.items()
                if cid in vec_scores or cid in bm_scores
            ]
            fused = fuse(
                cands,
                vector_weight=weight,
                source_boosts=boosts,
                scale=scale,
                method=cfg.fusion,
                hub_damping=cfg.hub_damping,
                page_share=share,
                rank_share=cfg.rank_share if cfg.fusion == "calibrated" else 0.0,
                keywords_answered=answered,
                unread=unread,
                relevance_weight=relevance_weight,
            )
            for s in fused:
                if s.candidate.chunk_id not in best or s.score > best[s.candidate.chunk_id].score:
                    best[s.candidate.chunk_id] = s
        rules = Rules(
            cfg.slug_boost,
            cfg.full_name_boost,
            cfg.log_demotion,
            f"wiki/{cfg.log_folder.strip('/')}/",
            cfg.page_support,
            cfg.max_hits_per_note,
            cfg.rare_term_boost,
        )
        content = frozenset(fold_word(w) for w in qa.content_words)
        agents = {a for s in best.values() if (a := memory_agent(s.candidate.key)) is not None}
        rare_chunks = frozenset(self._holding(rare, list(best), agents))
        bare = len(qa.words) == len(qa.content_words)
        ruled = apply_rules(list(best.values()), content, qa.chronicle, rules, rare_chunks, bare=bare)
        if cfg.link_lift > 0:
            ruled = self._link_lift(ruled, cfg.link_lift)
        folded = fold(ruled, cfg.fold)
        return Ranking(cap_per_note(folded, rules.max_hits_per_note), views, ruled, folded, scale)

    def _link_lift(self, ranked: list[Scored], lift: float) -> list[Scored]:
        """A note the best ten notes of this result link to rises (``search.linkLift``)."""
        top = list(dict.fromkeys(s.candidate.key for s in ranked))[:10]
        cited = cited_by(self.stores.manifest.read, top)
        out = [
            replace(s, score=s.score * f, boosts={**s.boosts, "linked": round(f, 3)})
            if (f := 1.0 + lift * cited.get(s.candidate.key, 0) / 10) > 1.0
            else s
            for s in ranked
        ]
        return sorted(out, key=lambda s: -s.score)

    def _pages_or_nothing(
        self, parts: BmParts, keys: Sequence[str], req: SearchRequest, stem: str | None = None
    ) -> list[tuple[str, float]]:
        """The BM25 scores of the candidates' whole notes (none when the page index fails: the
        chunks' own scores then count in full)."""
        if not any(text for text, _ in parts):
            return []
        problems = self.stores.problems
        faults: list[SearchFault] = []
        seen: set[str] = set()
        try:
            found = self.stores.bm25.search_pages(
                parts, len(keys), req.sources, req.agent, keys=keys, stem=stem, faults=faults, read=seen
            )
        except StoreError as exc:  # reported so that the repair rebuilds both parts
            log.warning("keyword_search_failed part=pages error=%s", exc)
            keyword_damage(problems, exc, f"{PAGE_FAILURE}{exc}")
            handles_seen(self.stores, "pages", seen, [(SHARED, exc), *faults])
            return []
        # Said as the chunk search says it (the chunks' own scores count in full for those notes).
        _keyword_read(self.stores, "pages", faults, seen)
        if not _inbox_failure_reported(self.stores.bm25, problems) and _page_failure_active(problems):
            problems.clear("keyword_search")
        return found

    def holding(self, words: Sequence[str], among: Sequence[Scored], lang: str | None = None) -> set[str]:
        """Those of the candidates ``among`` whose text or title holds one of ``words`` as
        written, or with ``lang`` (German, English) whose text holds it in any form of that
        language (``_holding``)."""
        agents = {a for s in among if (a := memory_agent(s.candidate.key)) is not None}
        ids = [s.candidate.chunk_id for s in among]
        fields = ["body", "title"] + ([f"body_{lang}"] if lang in ("de", "en") else [])
        return set().union(*(self._holding(words, ids, agents, f) for f in fields))

    def _holding(
        self, words: Sequence[str], among: Sequence[str], agents: Collection[str], field: str = "body"
    ) -> set[str]:
        """The candidates whose text holds a rare word as written, as it was counted: a chunk
        matching only a stemmed form of it is not lifted, every chunk of a note naming it is."""
        if not words:
            return set()
        try:
            return self.stores.bm25.holding(words, among, agents, field)
        except StoreError:  # the keyword arm has reported it already
            return set()
