"""Query -> both arms -> fusion -> rules -> typed hits. Each arm over-fetches, fusion ranks, then
we truncate. ``plan``, ``arms`` and ``rank`` are shared with ``why`` (search.explain) and ``recall``
(search.recall). The query's words as the arms read them: ``querywords``; what a failing
keyword index means for the answer and for status: ``keyword_gaps``.
"""

from __future__ import annotations

import datetime as dt
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sidecar.config import MODEL_DEFAULTS, RecallConfig, SearchConfig
from sidecar.contracts.errors import EmbedderError, StoreError
from sidecar.contracts.wire import SearchResult, memory_agent
from sidecar.index.keyword_faults import handles_seen, keyword_damage
from sidecar.index.repair import ready_inbox
from sidecar.index.vectoring import Stores, VectorSet
from sidecar.model.embedder import Embedder, EmbedderSlot, cosine_range, model_name
from sidecar.notes.links import cited_by
from sidecar.search import listing
from sidecar.search.fusion import Candidate, Rules, Scale, Scored, apply_rules, cap_per_note, fold, fuse
from sidecar.search.keyword_gaps import (
    PAGE_FAILURE,
    _inbox_failure_reported,
    _inboxes_failing,
    _joined,
    _keyword_read,
    _memory_unindexed,
    _memory_unread,
    _page_failure_active,
)
from sidecar.search.listing import passes
from sidecar.search.query import (
    Filters,
    QueryAnalysis,
    a_form_of,
    analyze,
    split_clauses,
    split_filters,
    word_forms,
)
from sidecar.search.querycache import QueryCache
from sidecar.search.querywords import (
    BmParts,
    _language_set,
    _name_words,
    _stopword_stems,
    _with_umlauts,
    bm25_text,
    joined_part,
    typed_part,
    unread_words,
)
from sidecar.search.request import SearchRequest, filters_alone, with_filters
from sidecar.search.results import analysis_of, phrase_ignored, to_hit
from sidecar.search.words import fold as fold_word
from sidecar.stores.bm25_search import SHARED, SearchFault
from sidecar.stores.manifest import ChunkView, NoteDay

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ranking:
    ranked: list[Scored]  # the result order (folded, capped)
    views: dict[str, ChunkView]
    scored: list[Scored]  # every candidate after fusion and rules, before folding
    folded: list[Scored]  # after folding, before the per-note cap
    scale: Scale = field(default_factory=Scale)  # how raw scores became relevance


VecList = list[tuple[str, float, float]]  # (chunk id, cosine, hubness) of one vector query

# The vector arm of a search runs here while the calling thread runs the keyword arm: the model
# and LanceDB release the GIL, so the two overlap. Shared by every Retriever of the process (the
# tests build hundreds); as many workers as the socket has request threads by default.
_ARM_WORKERS = 4
# recall's gates a model may set (MODEL_DEFAULTS), by attribute; a model without its own has these.
_GATES = {"recall.minSimilarity": "min_similarity", "recall.scoreFloor": "score_floor"}
_RECALL_DEFAULTS = {attr: getattr(RecallConfig(), attr) for attr in _GATES.values()}
_arm_pool: ThreadPoolExecutor | None = None


def _own_settings(serving: VectorSet) -> dict[str, Any]:
    """The serving model's own settings (MODEL_DEFAULTS): what counts for the keys left to the
    models, also while a switch migrates and the previous model still answers."""
    return MODEL_DEFAULTS.get(model_name(serving.model.model_id), {})


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
    # The query's words read with umlauts, by the word as typed (``Retriever.read_spelling``).
    spelled: Mapping[str, str] = field(default_factory=dict)
    # German verbs split from their particle, joined again (``Retriever.separated``).
    joined: tuple[str, ...] = ()


@dataclass(frozen=True)
class Separated:
    """A German verb split from its particles ("richte ... ein"), as typed, and the joined verb
    as the notes write it most ("einrichten")."""

    verb: str
    particles: tuple[str, ...]
    form: str


@dataclass(frozen=True)
class EarlyVectors:
    """The vector arm of a search, started before the keyword arm; for one serving table."""

    serving: VectorSet
    found: Future[list[VecList]]


class Retriever:
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
        # (when counted, chunks without a vector, of which of notes written continuously)
        self._pending: tuple[float, int, int] = (-1.0, 0, 0)

    def pending_vectors(self) -> tuple[int, int]:
        """Chunks without a vector in the serving table (waiting for it, or left to a model switch's
        table until it ends), and how many of those are of notes written continuously, counted at
        most once a second (a search during a backfill or after a table was replaced says so)."""
        at, n, continuous = self._pending
        now = time.monotonic()
        if now - at > 1.0:
            try:
                # With the chunks left to a model switch's table: none has a serving vector either.
                n = self.stores.manifest.pending_count() + self.stores.manifest.left_to_switch()
                caps = self.stores.continuous() if n else {}
                continuous = min(n, self.stores.manifest.pending_count_of(caps)) if caps else 0
            except sqlite3.Error:  # the answer is a courtesy: never fail a search for it
                n = continuous = 0
            self._pending = (now, n, continuous)
        return n, continuous

    def query_vector(self, model: Embedder, text: str) -> np.ndarray[Any, Any]:
        """The query's vector by ``model`` (``search.queryCache`` recent ones are kept per model)."""
        self.queries.size = self.cfg.query_cache  # a reload may change it
        return self.queries.vector(model, text)

    def reads(self, qa: QueryAnalysis) -> bool:
        """Whether the serving model reads the query's language (its ``embedder.languages``; while
        a model switch migrates, the previous model still serves and its languages count);
        undecided counts as read."""
        serving = self.stores.serving
        own = getattr(serving.model, "languages", None) if serving is not None else None
        languages = _language_set(own) if isinstance(own, str) else self.languages
        return not qa.language or "all" in languages or qa.language in languages

    def recall_settings(self) -> RecallConfig:
        """recall's settings for this call: the gates left to the models are the serving model's
        own (while a switch migrates the previous model answers, and the configured model's
        gates let small talk in, or kept relevant pages out, on the other model's scale)."""
        rc = self.recall_cfg
        serving = self.stores.serving
        if not self.model_gates or serving is None:
            return rc
        own = _own_settings(serving)
        gates = {
            attr: own.get(dotted, _RECALL_DEFAULTS[attr])
            for dotted, attr in _GATES.items()
            if dotted in self.model_gates
        }
        return replace(rc, **gates)

    def stem(self, qa: QueryAnalysis) -> str | None:
        """The query's language when its stemmed forms lead (``search.stemFirst``), else None.
        Only with a vector arm serving: its cosine is what keeps a stem's overreach (capital /
        capitalize) from passing as a match, so keyword-only search keeps exact forms first."""
        lang = qa.language
        serving = self.stores.serving
        if not lang or serving is None:
            return None
        languages = self.cfg.stem_first
        if self.model_stem:
            # While a model switch migrates, the previous model still serves: its own list counts
            # (MiniLM's cosine does not keep an English stem's overreach out; e5's does).
            languages = _own_settings(serving).get("search.stemFirst", ())
        return lang if lang in languages else None

    def vector_weight(self, qa: QueryAnalysis, rare: Sequence[str] = ()) -> float:
        """Share of the vector arm: less for short queries, for languages the model reads poorly
        and for queries naming something rare the model cannot read (see ``rare_words``)."""
        cfg = self.cfg
        weight = 1.0 - cfg.short_query_bm25_weight if qa.word_class == 1 else cfg.vector_weight
        if not self.reads(qa):
            weight = min(weight, cfg.foreign_vector_weight)
        if rare:
            weight = min(weight, cfg.rare_term_vector_weight)
        return weight

    def plan(self, qa: QueryAnalysis, agent: str | None = None) -> tuple[tuple[str, ...], float]:
        """The query's rare words (in the vault, the wiki and ``agent``'s memory) and the vector
        share they lead to."""
        rare = self.rare_words(qa, agent)
        return rare, self.vector_weight(qa, rare)

    def read_spelling(self, text: str, agent: str | None) -> tuple[str, QueryAnalysis, dict[str, str]]:
        """``text`` as read, its analysis, and the words read by the word as typed: a word typed
        with ae/oe/ue for an umlaut is read as the notes' umlaut word (``Bm25Index.
        umlaut_readings``: "Kuendigung" -> "Kündigung") when they write it so and nothing searched
        (a title or text of the vault, the wiki, ``agent``'s memory) writes it as typed. The query
        as read is what both arms, the language guess and the name rules read (the model reads
        "Kündigung" better than "Kuendigung"); the keyword arm also searches the words as typed
        (``typed_part``). An English question reads none ("landlord sued" is no "Süd"); a failing
        keyword index none either (the keyword arm reports it)."""
        qa = analyze(text)
        if not qa.content_words or qa.language == "en":
            return text, qa, {}
        try:
            spelled = self.stores.bm25.umlaut_readings(qa.content_words, agent)
        except StoreError:
            return text, qa, {}
        if not spelled:
            return text, qa, {}
        seen = _with_umlauts(text, spelled)
        return seen, analyze(seen), spelled

    def rare_words(self, qa: QueryAnalysis, agent: str | None = None) -> tuple[str, ...]:
        """Content words the model splits into word pieces and few notes contain: names, codes,
        identifiers (not a German verb split from its particle, ``separated``). The vector arm is
        blind to them (a made-up token still has nearest neighbours) while BM25 gives them their
        full weight, so for such a query keywords lead."""
        if self.cfg.rare_term_notes <= 0:
            return ()
        words, pieces = self._pieces(qa)
        if not words:
            return ()
        # A German verb split from its particle ("richte" of "Wie richte ich Sync ein?", which
        # one note happened to write) is an ordinary verb, not a name or code: neither it nor the
        # particle counts, however few notes hold the form typed.
        split = {w.lower() for s in self.separated(qa, agent) for w in (s.verb, *s.particles)}
        try:
            limit = self.rare_limit()
            return tuple(
                w
                for w, n in zip(words, pieces, strict=True)
                if n >= 2
                and w.lower() not in split
                and 0 < self.stores.bm25.doc_freq(w, pages=True, agent=agent) <= limit
            )
        except StoreError:  # a damaged index: the search reports it
            return ()

    def separated(self, qa: QueryAnalysis, agent: str | None = None) -> tuple[Separated, ...]:
        """German verbs split from their particles ("Wie richte ich Sync ein?"), joined again
        where the notes hold the joined verb in some form (its German stem: "einricht"), each
        clause's first such word and most particles. The keyword arm searches the joined verb as
        the notes write it most ("einrichten"); neither part of it is a rare word."""
        if qa.language != "de":
            return ()
        try:
            return tuple(self._separated(qa, agent))
        except StoreError:  # a damaged index: the search reports it
            return ()

    def _separated(self, qa: QueryAnalysis, agent: str | None) -> Iterator[Separated]:
        bm25 = self.stores.bm25
        for clause in split_clauses(qa.text):
            found = next(
                (
                    (verb, particles)
                    for particles in clause.particles
                    for verb in clause.verbs
                    if bm25.doc_freq("".join(particles) + verb, pages=True, agent=agent, field="body_de") > 0
                ),
                None,
            )
            if found is None:
                continue
            verb, particles = found
            joined = ("".join(particles) + verb).lower()
            counts = {f: bm25.doc_freq(f, pages=True, agent=agent) for f in word_forms(joined, "de")}
            form = max(counts, key=lambda f: counts[f], default=joined) if any(counts.values()) else joined
            yield Separated(verb, particles, form)

    def keyword_words(self, words: Sequence[str], lang: str | None) -> list[str]:
        """``words`` as the keyword arm should look for them in ``lang``: a word whose stem is a
        stopword there (German "sichere", "sichern", "Sicherheit" and the pronoun "sich" all
        stem to "sich") matched every chunk holding the pronoun and nothing by its own sense, so
        it is looked for in those of its forms the notes hold ("sichern", "gesichert"), as
        written."""
        if lang not in ("de", "en"):
            return list(words)
        field = "body_de" if lang == "de" else "body_en"
        bm25 = self.stores.bm25
        stems = _stopword_stems(bm25, field)
        out: list[str] = []
        for w in words:
            own = bm25.analyze(w, field)
            # The stopwords it meets by its stem, unless one of them is the word itself in
            # another form ("zeig" of "zeigen": the chat frame's "zeig mir" is the same verb).
            met = [s for t in own for s in stems.get(t, ())]
            if not own or any(t not in stems for t in own) or any(a_form_of(s, w, lang) for s in met):
                out.append(w)
                continue
            try:
                forms = [f for f in word_forms(w, lang) if bm25.doc_freq(f) > 0]
            except StoreError:  # a damaged index: the search reports it
                forms = []
            out.extend(forms or [w])
        return out

    def in_notes(self, word: str, lang: str | None) -> bool:
        """Whether any chunk holds ``word`` as written, in its title, or with ``lang`` (German,
        English) in any form of that language."""
        fields = ["body", "title"] + ([f"body_{lang}"] if lang in ("de", "en") else [])
        try:
            return any(self.stores.bm25.doc_freq(word, field=f) > 0 for f in fields)
        except StoreError:  # a damaged index: the search reports it
            return True

    def unread(self, qa: QueryAnalysis) -> bool:
        """Whether the serving model has never read the query's words (``unread_words``)."""
        words, pieces = self._pieces(qa)
        return bool(words) and unread_words(words, pieces)

    def _pieces(self, qa: QueryAnalysis) -> tuple[list[str], list[int]]:
        """The query's content words (once each) and the serving model's word pieces per word;
        nothing without a serving model."""
        serving = self.stores.serving
        words = list(dict.fromkeys(qa.content_words))
        if serving is None or not words:
            return [], []
        return words, self.queries.pieces(serving.model, words)

    def rare_limit(self) -> int:
        """How many notes may hold a word that still counts as rare (relative to the chunks of a
        small index)."""
        share = int(self.stores.bm25.collection_size() * self.cfg.rare_term_share)
        return min(self.cfg.rare_term_notes, max(1, share))

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
    ) -> Found:
        """The keyword arm's hits and each vector query's hits (``early``: a vector arm already
        started by ``start_vectors``), and what was degraded. ``spelled``: the words read with
        umlauts (``read_spelling``), also searched as typed."""
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
                bm_note, bm_error = f"keyword search failed ({exc}); vector results only", exc

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
            hits = self._vector_hits(serving, vectors, text, req, early=early)
            problems.clear("vector_search")
            pending, continuous = self.pending_vectors()
            return replace(found(hits, bm_note), pending=pending, pending_continuous=continuous)
        except (EmbedderError, StoreError) as exc:
            if self.stores.serving is not serving:
                # A model switch overtook this search (the old table went): no damage, nothing
                # to report or repair; the next search asks the new table.
                log.info("vector_search_overtaken reason=model switch error=%s", exc)
                why = "the vector table was just switched to another model"
            else:
                log.warning("vector_search_failed error=%s", exc)
                problems.report("vector_search", str(exc))
                why = f"vector search failed ({exc})"
            if bm_error is not None:
                raise no_arm(f"{why} too") from exc
            return found([], _joined(bm_note, f"{why}; keyword results only"))

    def _vector_hits(
        self,
        serving: VectorSet,
        vectors: Sequence[np.ndarray[Any, Any]] | None,
        text: str,
        req: SearchRequest,
        *,
        early: EarlyVectors | None,
    ) -> list[VecList]:
        """Each vector query's hits from ``serving``; a search overtaken by a model switch (its
        table dropped under it) asks the new serving table, with that table's model, once."""
        fetch = self._fetch(req)
        try:
            if early is not None and early.serving is serving:
                return early.found.result()
            # No early start, or the serving table changed meanwhile.
            queries = list(vectors) if vectors is not None else [self.query_vector(serving.model, text)]
            return [serving.store.search(q, fetch, req.sources, req.agent) for q in queries]
        except (EmbedderError, StoreError) as exc:
            current = self.stores.serving
            if current is None or current is serving or vectors is not None:
                raise  # the given query vectors are the old model's: not for the new table
            log.info("vector_search_retried reason=model switch error=%s", exc)
            query = self.query_vector(current.model, text)
            return [current.store.search(query, fetch, req.sources, req.agent)]

    def _fetch(self, req: SearchRequest) -> int:
        return max(self.cfg.candidates, req.limit * 3) * (4 if req.filters.active else 1)

    def start_vectors(self, req: SearchRequest, text: str, qa: QueryAnalysis) -> EarlyVectors | None:
        """Embed the query and search the vector table in a helper thread, for ``arms``; None when
        the vector arm will not run (no model yet, no words, no share whatever the rare words)."""
        serving = self.stores.serving
        if serving is None or not qa.words or self.vector_weight(qa) <= 0.0:
            return None
        fetch = self._fetch(req)

        def run() -> list[VecList]:
            query = self.query_vector(serving.model, text)
            return [serving.store.search(query, fetch, req.sources, req.agent)]

        return EarlyVectors(serving, _vector_pool().submit(run))

    def rank(
        self,
        req: SearchRequest,
        qa: QueryAnalysis,
        found: Found,
        *,
        weight: float,
        rare: Sequence[str] = (),
        parts: BmParts | None = None,
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

    def scale(self, parts: BmParts, *, pages: bool = False, stem: str | None = None) -> Scale:
        """This query's scale: the model's cosine range, the query's ideal BM25 score (of a
        chunk; with ``pages`` also of a whole note)."""
        serving = self.stores.serving
        lo, hi = cosine_range(serving.model if serving else None, self.cfg)
        bm25 = self.stores.bm25
        try:
            ideal = sum(w * bm25.ideal_score(text, stem=stem) for text, w in parts)
            page = (
                sum(w * bm25.ideal_score(text, pages=True, stem=stem) for text, w in parts) if pages else 0.0
            )
        except StoreError:
            ideal = page = 0.0
        return Scale(lo, hi, ideal, page)

    def page_share(self, weight: float) -> float:
        """The share of a chunk's keyword part that comes from its note (``search.pageKeywords``;
        calibrated fusion only, and nothing when the keyword arm has no share)."""
        cfg = self.cfg
        return cfg.page_keywords if cfg.fusion == "calibrated" and weight < 1.0 else 0.0

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
        seen, qa, spelled = self.read_spelling(text, req.agent)
        early = self.start_vectors(req, seen, qa)
        rare, weight = self.plan(qa, req.agent)
        found = self.arms(req, seen, qa, None, weight, early=early, spelled=spelled)
        r = self.rank(req, qa, found, weight=weight, rare=rare)
        mask_secrets = self.cfg.mask_secrets
        # Only the hits returned are masked and built: masking every ranked candidate (a hundred
        # and more) was the largest cost of a search after the query embedding.
        kept = [s for s in r.ranked if s.relevance >= req.min_score][: req.limit]
        views, agent = r.views, req.agent
        dated = bool(req.filters.since or req.filters.until)
        hits = tuple(
            to_hit(s, views[s.candidate.chunk_id], agent, mask_secrets=mask_secrets, dated=dated)
            for s in kept
        )
        return SearchResult(
            hits,
            found.degraded,
            analysis_of(qa, req.filters, rare),
            pending_vectors=found.pending,
            pending_continuous=found.pending_continuous,
        )


def _no_hits(qa: QueryAnalysis, filters: Filters) -> SearchResult:
    return SearchResult((), None, analysis_of(qa, filters))
