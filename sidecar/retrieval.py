"""Query -> both arms -> fusion -> rules -> hits. Each arm over-fetches, fusion ranks, then we
truncate. ``recall`` (auto-injection) blends the previous turns into the query vector and renders
a context block. Imports query, fusion, sources, the stores and the embedder protocol.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sidecar.config import RecallConfig, SearchConfig
from sidecar.embedder import EmbedderSlot, cosine_range
from sidecar.errors import EmbedderError, StoreError
from sidecar.fusion import Candidate, Rules, Scale, Scored, apply_rules, cap_per_note, fold, fuse
from sidecar.links import cited_by
from sidecar.query import Filters, QueryAnalysis, analyze, is_stopword, split_filters
from sidecar.query import fold as fold_word
from sidecar.redact import mask
from sidecar.sources import public_reference
from sidecar.stores.manifest import ChunkView
from sidecar.vectoring import Stores

log = logging.getLogger(__name__)

_NAME_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class SearchRequest:
    query: str
    limit: int
    min_score: float
    sources: tuple[str, ...] | None = None
    agent: str | None = None  # scope: own memory plus vault and wiki
    filters: Filters = field(default_factory=Filters)
    token_budget: int | None = None  # recall: this call's block budget (else recall.tokenBudget)


@dataclass(frozen=True)
class Ranking:
    ranked: list[Scored]  # the result order (folded, capped)
    views: dict[str, ChunkView]
    scored: list[Scored]  # every candidate after fusion and rules, before folding
    folded: list[Scored]  # after folding, before the per-note cap
    scale: Scale = field(default_factory=Scale)  # how raw scores became relevance


@dataclass(frozen=True)
class SearchResult:
    hits: list[dict[str, Any]]
    degraded: str | None  # why the vector arm did not take part, if it did not
    analysis: dict[str, Any] = field(default_factory=dict)


def bm25_text(qa: QueryAnalysis) -> str:
    """The words BM25 looks for: content words, or every word when the query has none."""
    return " ".join(qa.content_words or qa.words)


BmParts = list[tuple[str, float]]  # (words, weight): the message's words, then the history's


@functools.lru_cache(maxsize=65_536)  # titles repeat across queries; folding them was 4 ms a query
def _words(text: str) -> frozenset[str]:
    return frozenset(fold_word(w) for w in _NAME_WORD.findall(text) if not is_stopword(w))


def _passes(view: ChunkView, filters: Filters) -> bool:
    if filters.tags and not any(t == f or t.startswith(f + "/") for f in filters.tags for t in view.tags):
        return False
    if filters.path_prefix:
        path = view.key.split("/", 2)[-1] if view.source == "memory" else view.key.split("/", 1)[1]
        if not path.lower().startswith(filters.path_prefix.strip("/").lower()):
            return False
    if filters.since or filters.until:
        # The note's own day when it names one (front matter, daily-note name), else its local mtime.
        day = view.date or dt.datetime.fromtimestamp(view.mtime_ns / 1e9).date().isoformat()
        if (filters.since and day < filters.since) or (filters.until and day > filters.until):
            return False
    return True


class Retriever:
    def __init__(
        self,
        stores: Stores,
        slot: EmbedderSlot,
        cfg: SearchConfig,
        recall: RecallConfig,
        languages: str = "all",
    ) -> None:
        self.languages = {x.strip().lower() for x in languages.split(",") if x.strip()}
        self.stores = stores
        self.slot = slot
        self.cfg = cfg
        self.recall_cfg = recall
        self.today: Callable[[], dt.date] = dt.date.today  # local day; tests pin it

    def vector_weight(self, qa: QueryAnalysis, rare: Sequence[str] = ()) -> float:
        """Share of the vector arm: less for short queries, for languages the model reads poorly
        and for queries naming something rare the model cannot read (see ``rare_words``)."""
        cfg = self.cfg
        weight = 1.0 - cfg.short_query_bm25_weight if qa.word_class == 1 else cfg.vector_weight
        if qa.language and "all" not in self.languages and qa.language not in self.languages:
            weight = min(weight, cfg.foreign_vector_weight)
        if rare:
            weight = min(weight, cfg.rare_term_vector_weight)
        return weight

    def _plan(self, qa: QueryAnalysis) -> tuple[tuple[str, ...], float]:
        """The query's rare words and the vector share they lead to."""
        rare = self.rare_words(qa)
        return rare, self.vector_weight(qa, rare)

    def rare_words(self, qa: QueryAnalysis) -> tuple[str, ...]:
        """Content words the model splits into word pieces and few chunks contain: names, codes,
        identifiers. The vector arm is blind to them (a made-up token still has nearest
        neighbours) while BM25 gives them their full weight, so for such a query keywords lead."""
        serving = self.stores.serving
        if self.cfg.rare_term_chunks <= 0 or serving is None or not qa.content_words:
            return ()
        words = list(dict.fromkeys(qa.content_words))
        pieces = serving.model.count_tokens(words)
        try:
            limit = self.rare_limit()
            return tuple(
                w
                for w, n in zip(words, pieces, strict=True)
                if n >= 2 and 0 < self.stores.bm25.doc_freq(w) <= limit
            )
        except (ValueError, OSError, RuntimeError):  # a damaged index: the search reports it
            return ()

    def rare_limit(self) -> int:
        """How many chunks may hold a word that still counts as rare (relative in a small index)."""
        share = int(self.stores.bm25.num_docs() * self.cfg.rare_term_share)
        return min(self.cfg.rare_term_chunks, max(1, share))

    # --- the arms -----------------------------------------------------------------------------

    def _arms(
        self,
        req: SearchRequest,
        text: str,
        qa: QueryAnalysis,
        vectors: Sequence[np.ndarray[Any, Any]] | None,
        weight: float,
        *,
        parts: BmParts | None = None,
    ) -> tuple[list[tuple[str, float]], list[list[tuple[str, float, float]]], str | None]:
        fetch = max(self.cfg.candidates, req.limit * 3) * (4 if req.filters.active else 1)
        sources = req.sources
        # An arm with no share in the fused score is not run at all (recall always blends vectors).
        problems = self.stores.problems
        bm: list[tuple[str, float]] = []
        bm_note: str | None = None
        if weight < 1.0 or vectors is not None:
            try:
                bm = self.stores.bm25.search(
                    bm25_text(qa) if parts is None else parts, fetch, sources, req.agent
                )
                problems.clear("keyword_search")
            except StoreError as exc:  # a damaged keyword index: answer from vectors alone
                log.warning("keyword_search_failed error=%s", exc)
                problems.report("keyword_search", str(exc))
                bm_note = f"keyword search failed ({exc}); vector results only"
        serving = self.stores.serving
        if weight <= 0.0 and vectors is None:
            return bm, [], bm_note
        if serving is None:
            why = "the vector table is opening" if self.slot.state == "ok" else f"embedder {self.slot.state}"
            return bm, [], f"vector search unavailable ({why}); keyword results only"
        if not qa.words and vectors is None:
            return bm, [], None
        try:
            queries = list(vectors) if vectors is not None else [serving.model.embed_query(text)]
            found = [serving.store.search(q, fetch, sources, req.agent) for q in queries]
            problems.clear("vector_search")
            return bm, found, bm_note
        except (EmbedderError, StoreError) as exc:
            log.warning("vector_search_failed error=%s", exc)
            problems.report("vector_search", str(exc))
            return bm, [], f"vector search failed ({exc}); keyword results only"

    def _rank(
        self,
        req: SearchRequest,
        qa: QueryAnalysis,
        bm: list[tuple[str, float]],
        vec_lists: list[list[tuple[str, float, float]]],
        *,
        weight: float,
        rare: Sequence[str] = (),
        parts: BmParts | None = None,
    ) -> Ranking:
        ids = list(dict.fromkeys([c for c, _ in bm] + [c for vl in vec_lists for c, _, _ in vl]))
        views = {k: v for k, v in self.stores.manifest.views(ids).items() if _passes(v, req.filters)}
        cfg = self.cfg
        boosts = {"vault": cfg.boosts.vault, "wiki": cfg.boosts.wiki, "memory": cfg.boosts.memory}
        bm_scores = dict(bm)
        scale = self._scale([(bm25_text(qa), 1.0)] if parts is None else parts)
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
                    _words(v.key.rsplit("/", 1)[-1] + " " + v.title),
                    tuple(w for w in (_words(v.title), *(_words(a) for a in v.aliases)) if w),
                    v.has_vector,
                    hubs.get(cid, 0.0),
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
        rare_chunks = frozenset(
            cid for cid, _ in self._bm25_or_nothing(" ".join(rare), 4 * self.rare_limit() * len(rare), req)
        )
        ruled = apply_rules(list(best.values()), content, qa.chronicle, rules, rare_chunks)
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

    def _scale(self, parts: BmParts) -> Scale:
        """This query's scale: the model's cosine range, the query's ideal BM25 score."""
        serving = self.stores.serving
        lo, hi = cosine_range(serving.model if serving else None, self.cfg)
        try:
            ideal = sum(w * self.stores.bm25.ideal_score(text) for text, w in parts)
        except StoreError:
            ideal = 0.0
        return Scale(lo, hi, ideal)

    def _bm25_or_nothing(self, text: str, limit: int, req: SearchRequest) -> list[tuple[str, float]]:
        if not text or limit <= 0:
            return []
        try:
            return self.stores.bm25.search(text, limit, req.sources, req.agent)
        except StoreError:  # the keyword arm has reported it already
            return []

    def _hit(self, s: Scored, view: ChunkView, agent: str | None) -> dict[str, Any]:
        c = s.candidate
        hit: dict[str, Any] = {
            "reference": public_reference(view.key, agent),
            "source": view.source,
            "score": round(s.score, 6),
            "relevance": round(s.relevance, 4),
            "vecScore": None if c.vec is None else round(c.vec, 6),
            "bm25Score": None if c.bm25 is None else round(c.bm25, 6),
            "boosts": dict(s.boosts),
            "title": view.title,
            "headings": list(view.headings),
            "lines": [c.start_line, c.end_line],
            "text": view.text,
        }
        if self.cfg.mask_secrets:
            hit["text"], masked = mask(view.text)
            if masked:
                hit["masked"] = masked
        if view.agent:
            hit["agent"] = view.agent
        return hit

    # --- search ---------------------------------------------------------------------------------

    def search(self, req: SearchRequest) -> SearchResult:
        text, inline = split_filters(req.query, self.today())
        result = self._search(_with_filters(req, inline), text)
        if result.hits or not inline.phrase:
            return result
        # A time phrase is a soft filter: "a daily note for today" asks about daily notes, not
        # about notes of today. When its window holds nothing, the words are searched instead.
        phrase = inline.phrase
        text, inline = split_filters(req.query, self.today(), phrases=False)
        result = self._search(_with_filters(req, inline), text)
        result.analysis["timePhraseIgnored"] = phrase
        return result

    def _search(self, req: SearchRequest, text: str) -> SearchResult:
        qa = analyze(text)
        rare, weight = self._plan(qa)
        bm, vec_lists, degraded = self._arms(req, text, qa, None, weight)
        r = self._rank(req, qa, bm, vec_lists, weight=weight, rare=rare)
        hits = [
            self._hit(s, r.views[s.candidate.chunk_id], req.agent)
            for s in r.ranked
            if s.relevance >= req.min_score
        ]
        return SearchResult(hits[: req.limit], degraded, _analysis(qa, req.filters, rare))

    # --- explain ----------------------------------------------------------------------------------

    def explain(self, key: str, query: str, agent: str | None) -> dict[str, Any]:
        """Why a note ranks where it does (or not at all) for a query: scores, boosts, outcome."""
        text, inline = split_filters(query, self.today())
        req = _with_filters(SearchRequest(query, self.cfg.limit, self.cfg.min_score, None, agent), inline)
        qa = analyze(text)
        chunks = self.stores.manifest.chunks_of(key)
        if not chunks:
            return {"indexed": False, "analysis": _analysis(qa, req.filters)}
        rare, weight = self._plan(qa)
        bm, vec_lists, degraded = self._arms(req, text, qa, None, weight)
        r = self._rank(req, qa, bm, vec_lists, weight=weight, rare=rare)
        ids = [c.chunk_id for c in chunks]
        direct_bm = dict(self.stores.bm25.search(bm25_text(qa), len(ids) + 5, key=key))
        direct_vec: dict[str, float] = {}
        serving = self.stores.serving
        if serving is not None and qa.words:
            q = serving.model.embed_query(text)
            direct_vec = {cid: float(np.dot(v, q)) for cid, v in serving.store.vectors_of(ids).items()}
        scored = {s.candidate.chunk_id: s for s in r.scored}
        rank = {s.candidate.chunk_id: i + 1 for i, s in enumerate(r.ranked)}
        folded_into = {f: s for s in r.folded for f in s.folded}
        in_folded = {s.candidate.chunk_id for s in r.folded}
        out = []
        for c in chunks:
            s = scored.get(c.chunk_id)
            if c.chunk_id in rank and rank[c.chunk_id] <= req.limit:
                outcome = f"hit #{rank[c.chunk_id]}"
            elif c.chunk_id in rank:
                outcome = f"rank {rank[c.chunk_id]}, beyond the limit of {req.limit}"
            elif c.chunk_id in folded_into:
                w = folded_into[c.chunk_id].candidate
                outcome = f"folded into the wider hit of lines {w.start_line}-{w.end_line}"
            elif c.chunk_id in in_folded:
                outcome = f"dropped by the cap of {self.cfg.max_hits_per_note} hits per note"
            elif (
                c.chunk_id not in r.views
                and (c.chunk_id in direct_bm or c.chunk_id in direct_vec)
                and s is None
            ):
                outcome = "not among the candidates of either arm (or removed by a filter)"
            else:
                outcome = "not among the candidates of either arm"
            out.append(
                {
                    "lines": [c.start_line, c.end_line],
                    "vecScore": round(direct_vec[c.chunk_id], 4) if c.chunk_id in direct_vec else None,
                    "bm25Score": round(direct_bm[c.chunk_id], 4) if c.chunk_id in direct_bm else None,
                    "score": round(s.score, 4) if s else None,
                    "relevance": round(s.relevance, 4) if s else None,
                    "boosts": dict(s.boosts) if s else {},
                    "outcome": outcome,
                }
            )
        return {
            "indexed": True,
            "reference": public_reference(key, agent),
            "chunks": out,
            "vectorWeight": weight,
            "degraded": degraded,
            "analysis": _analysis(qa, req.filters, rare),
        }

    # --- recall (auto-injection) -----------------------------------------------------------------

    def recall(
        self,
        message: str,
        history: Sequence[str],
        req: SearchRequest,
        count_tokens: Callable[[Sequence[str]], list[int]],
    ) -> tuple[SearchResult, str]:
        """Hits for the current message (previous turns blended in) and the rendered context block."""
        text, inline = split_filters(message, self.today())
        result, block = self._recall(text, history, _with_filters(req, inline), count_tokens)
        # A time phrase that was all the message said ("how are you today?", "bye for now") names
        # no topic: its word is not searched instead (it found a function reference for today()).
        alone = not history and not analyze(text).content_words
        if result.hits or not inline.phrase or alone:
            return result, block
        phrase = inline.phrase
        text, inline = split_filters(message, self.today(), phrases=False)  # see search
        result, block = self._recall(text, history, _with_filters(req, inline), count_tokens)
        result.analysis["timePhraseIgnored"] = phrase
        return result, block

    def _recall(
        self,
        text: str,
        history: Sequence[str],
        req: SearchRequest,
        count_tokens: Callable[[Sequence[str]], list[int]],
    ) -> tuple[SearchResult, str]:
        rc = self.recall_cfg
        qa = analyze(text)
        turns = (
            [t[: rc.history_head_chars] for t in history[-rc.history_turns :] if t.strip()]
            if rc.history_turns
            else []
        )
        if not qa.content_words and not turns:
            return SearchResult([], None, _analysis(qa, req.filters)), ""
        vectors = self._recall_vectors(text, qa, turns)
        rare, weight = self._plan(qa)
        parts = self._recall_parts(qa, turns)
        bm, vec_lists, degraded = self._arms(req, text, qa, vectors, weight, parts=parts)
        r = self._rank(req, qa, bm, vec_lists, weight=weight, rare=rare, parts=parts)
        views = r.views
        floor = max(req.min_score, rc.score_floor)
        # The similarity gate keeps small talk out; a chunk holding a rare code of the message (a
        # ticket number, a host name: a rare word with a digit) was named, not guessed, and passes
        # it. Rare plain words do not ("haiku", "Danke" found a page each in the help vault).
        named = any(any(ch.isdigit() for ch in w) for w in rare)
        kept = [
            s
            for s in r.ranked
            if (named and "rareTerm" in s.boosts)  # named, not guessed: neither floor applies
            or (
                s.relevance >= floor
                and (
                    (s.candidate.vec is not None and r.scale.vec(s.candidate.vec) >= rc.min_similarity)
                    or (s.candidate.vec is None and degraded is not None)
                )
            )
        ]
        hits = [self._hit(s, views[s.candidate.chunk_id], req.agent) for s in kept[: req.limit]]
        analysis = {**_analysis(qa, req.filters, rare), "historyTurns": len(turns)}
        result = SearchResult(hits, degraded, analysis)
        return result, render_block(hits, req.token_budget or rc.token_budget, count_tokens)

    def _recall_parts(self, qa: QueryAnalysis, turns: list[str]) -> BmParts:
        """BM25 words of a recall: the message's, then the history's content words at the share the
        history has in the query vector (a follow-up without content words is all history)."""
        rc = self.recall_cfg
        parts: BmParts = [(bm25_text(qa), 1.0)] if qa.content_words else []
        words = [w for t in reversed(turns) for w in analyze(t).content_words]
        history = " ".join(list(dict.fromkeys(w.lower() for w in words))[: rc.history_words])
        if history:
            weight = (rc.history_weight_none, rc.history_weight_short, rc.history_weight_long)[qa.word_class]
            parts.append((history, 1.0 if not parts else weight))
        return parts

    def _recall_vectors(
        self, text: str, qa: QueryAnalysis, turns: list[str]
    ) -> list[np.ndarray[Any, Any]] | None:
        serving = self.stores.serving
        if serving is None:
            return None
        model = serving.model
        rc = self.recall_cfg
        message = model.embed_query(text) if qa.words else None
        if not turns:
            return [message] if message is not None else None
        # Turns are what someone said, like the message: embedded as queries (e5 models tell the two
        # apart by prefix), newest last.
        history = np.mean([model.embed_query(t) for t in turns], axis=0)
        weight = (rc.history_weight_none, rc.history_weight_short, rc.history_weight_long)[qa.word_class]
        blended = history if message is None else (1 - weight) * message + weight * history
        blended = blended / max(float(np.linalg.norm(blended)), 1e-12)
        # A message with content words also runs alone; each query is fused on its own.
        return [blended, message] if message is not None and qa.content_words else [blended]


HEADER = (
    "Notes recalled from the user's knowledge base because they may relate to this message. They are "
    "recollection, not observation: written earlier, possibly outdated or wrong, and they never replace "
    "checking the current state with your tools."
)
MORE = "Call memory_search to recall more, or memory_get with a reference for the whole note."
LEGEND = "Sources: [wiki] curated pages · [vault] the user's notes · [memory] your own earlier notes"


def render_block(
    hits: Sequence[dict[str, Any]], budget: int, count_tokens: Callable[[Sequence[str]], list[int]]
) -> str:
    """The context block: header, legend, then hits until the token budget is spent."""
    if not hits:
        return ""
    parts = ["<recalled-notes>", HEADER, LEGEND, MORE]
    used = sum(count_tokens(parts))
    for h in hits:
        head = f"\n[{h['source']}] {h['reference']} (lines {h['lines'][0]}-{h['lines'][1]})"
        body = h["text"]
        cost = sum(count_tokens([head, body]))
        if used + cost > budget:
            room = budget - used - count_tokens([head])[0]
            if room < 40:
                break
            words = body.split()
            body = " ".join(words[: max(1, len(words) * room // max(cost, 1))]) + " …"
            cost = sum(count_tokens([head, body]))
        parts.extend([head, body])
        used += cost
    parts.append("</recalled-notes>")
    return "\n".join(parts)


def _with_filters(req: SearchRequest, inline: Filters) -> SearchRequest:
    filters = req.filters.merged(inline)
    sources = req.sources
    if inline.sources:
        sources = tuple(s for s in inline.sources if s in ("vault", "wiki", "memory")) or sources
    return SearchRequest(req.query, req.limit, req.min_score, sources, req.agent, filters, req.token_budget)


def _analysis(qa: QueryAnalysis, filters: Filters, rare: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "text": qa.text,
        "contentWords": list(qa.content_words),
        "rareWords": list(rare),
        "wordClass": qa.word_class,
        "chronicle": qa.chronicle,
        "filters": {
            "tags": list(filters.tags),
            "pathPrefix": filters.path_prefix,
            "since": filters.since,
            "until": filters.until,
            "timePhrase": filters.phrase,
        },
    }
