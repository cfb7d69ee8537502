"""``why``: a note's place (or absence) in the results of a query, chunk by chunk: both arms'
scores, the fused score and boosts, and what became of it (a hit, below minScore, beyond the
limit, folded, capped, or not a candidate at all)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from sidecar.contracts.wire import ChunkExplanation, Explanation, Hit
from sidecar.index.repair import ready_inbox
from sidecar.search.arms import Found
from sidecar.search.fusion import Scored
from sidecar.search.keyword_gaps import note_keyword_scores
from sidecar.search.listing import period_listing
from sidecar.search.looks import Reading
from sidecar.search.query import Filters, split_filters
from sidecar.search.querywords import bm25_text, joined_part, typed_part
from sidecar.search.ranking import Ranking
from sidecar.search.request import SearchRequest, filters_alone, with_filters
from sidecar.search.results import analysis_of
from sidecar.search.retrieval import Retriever
from sidecar.stores.manifest_rows import ChunkView
from sidecar.vault.references import public_reference


def explain(
    r: Retriever, key: str, query: str, agent: str | None, today: dt.date | None = None
) -> Explanation:
    """Why a note ranks where it does (or not at all) for a query: scores, boosts, outcome;
    ``today``: the asker's date its time phrases are read against (else the daemon's)."""
    ready_inbox(r.stores, agent)  # as the search does: an agent back gets its index rebuilt
    asked = SearchRequest(query, r.cfg.limit, r.cfg.min_score, None, agent, today=today)
    text, inline = _read(r, asked)
    req = with_filters(asked, inline)
    seen, qa, spelled = r.read_spelling(text, agent)  # as the search reads it
    chunks = r.stores.manifest.chunks_of(key)
    if not chunks:
        return Explanation(indexed=False, analysis=analysis_of(qa, req.filters))
    rare, weight, relevant = r.shares(qa, agent)
    found = r.arms(req, seen, qa, None, weight, spelled=spelled)
    ranking = r.rank(req, qa, found, weight=weight, rare=rare, relevance_weight=relevant)
    ids = [c.chunk_id for c in chunks]
    words = [(bm25_text(qa), 1.0), *typed_part(spelled), *joined_part(found.joined)]
    # Scored as the asker's search scores it: an agent's own index, a person's of all memory.
    direct_bm, bm_note = note_keyword_scores(r.stores, words, len(ids) + 5, agent, key=key, stem=found.stem)
    page_bm: dict[str, float] = {}
    if r.page_share(weight) > 0:  # a failing page index: said in status, as a search says it
        page_bm, _ = note_keyword_scores(r.stores, words, 1, agent, key=key, stem=found.stem, pages=True)
    direct_vec: dict[str, float] = {}
    serving = r.stores.serving
    if serving is not None and qa.words:
        # The vector the arm searched with, when the serving model made it (embedding the query
        # again cost as much as the rest of the explanation).
        q = (
            found.embedded.vector
            if found.embedded is not None and found.embedded.model is serving.model
            else serving.model.embed_query(seen)
        )
        direct_vec = {cid: float(np.dot(v, q)) for cid, v in serving.store.vectors_of(ids).items()}
    scored = {s.candidate.chunk_id: s for s in ranking.scored}
    # As `search` does: drop what is below minScore, then cut at the limit (ranks count the kept).
    below = {s.candidate.chunk_id for s in ranking.ranked if s.relevance < req.min_score}
    kept = [s.candidate.chunk_id for s in ranking.ranked if s.candidate.chunk_id not in below]
    rank = {cid: i + 1 for i, cid in enumerate(kept)}
    # The wider looks the search takes at this limit when the pool holds too few hits: their
    # hits follow the pool's, and `why` names the look that found each (as the search ranks it).
    widely = _looked(r, req, ranking, found, Reading(seen, qa, tuple(rare), weight, relevant, spelled))
    folded_into, in_folded = _folds(ranking)
    out = []
    for c in chunks:
        s = scored.get(c.chunk_id)
        if c.chunk_id in widely:
            s, outcome = widely[c.chunk_id]
        elif c.chunk_id in below:
            outcome = f"below minScore ({req.min_score:g})"
        elif c.chunk_id in rank and rank[c.chunk_id] <= req.limit:
            outcome = f"hit #{rank[c.chunk_id]}"
        elif c.chunk_id in rank:
            outcome = f"rank {rank[c.chunk_id]}, beyond the limit of {req.limit}"
        elif c.chunk_id in folded_into:
            w = folded_into[c.chunk_id].candidate
            outcome = f"folded into the wider hit of lines {w.start_line}-{w.end_line}"
        elif c.chunk_id in in_folded:
            outcome = f"dropped by the cap of {r.cfg.max_hits_per_note} hits per note"
        else:
            outcome = _not_ranked(
                c,
                ranking.views,
                in_arms=c.chunk_id in direct_bm or c.chunk_id in direct_vec,
            )
        out.append(
            ChunkExplanation(
                lines=(c.start_line, c.end_line),
                vec_score=round(direct_vec[c.chunk_id], 4) if c.chunk_id in direct_vec else None,
                bm25_score=round(direct_bm[c.chunk_id], 4) if c.chunk_id in direct_bm else None,
                score=round(s.score, 4) if s else None,
                relevance=round(s.relevance, 4) if s else None,
                boosts=dict(s.boosts) if s else {},
                outcome=outcome,
            )
        )
    if inline.phrase and chunks:
        out = _in_period(r, asked, req, key, out, holds_words=bool(direct_bm))
    elif filters_alone(text, inline) and out:
        out = [_listed_by_filters(r, req, key, out[0]), *out[1:]]
    return Explanation(
        indexed=True,
        reference=public_reference(key, agent),
        chunks=tuple(out),
        vector_weight=weight,
        degraded=_said_once(found.degraded, bm_note),
        page_bm25_score=round(page_bm[key], 4) if key in page_bm else None,
        analysis=analysis_of(qa, req.filters, rare),
    )


def _folds(ranking: Ranking) -> tuple[dict[str, Scored], set[str]]:
    """Which hit each folded chunk went into, and the chunks left after folding."""
    return {f: s for s in ranking.folded for f in s.folded}, {s.candidate.chunk_id for s in ranking.folded}


def _looked(
    r: Retriever, req: SearchRequest, ranking: Ranking, found: Found, read: Reading
) -> dict[str, tuple[Scored, str]]:
    """The hits within ``req``'s limit that the search's wider looks found (``WiderLooks.looked``)
    by chunk: each one's scores and outcome; ``read``: the query as the search read it."""
    looked = r.looked(req, (found, ranking), read, req.limit)
    shown, wider = looked.hits, looked.wider
    return {
        s.candidate.chunk_id: (
            s,
            f"hit #{i}, from a wider look ({wider[s.candidate.chunk_id]} candidates an arm)",
        )
        for i, s in enumerate(shown[: req.limit], 1)
        if s.candidate.chunk_id in wider
    }


def _said_once(arms: str | None, note: str | None) -> str | None:
    """What the arms' search said, and what the note's own keyword search met that it did not
    say already (the same fault met twice is said once)."""
    if not note or (arms and note in arms):
        return arms
    return f"{arms}; {note}" if arms else note


def _read(r: Retriever, asked: SearchRequest) -> tuple[str, Filters]:
    """The text to rank and the filters, as the search reads them: a phrase whose window holds no
    note is given up and the words searched on any day (Retriever.search; the arms were read
    inside the empty window, and the search's hit #1 was "not among the candidates")."""
    text, inline = r.read_query(asked)
    if inline.phrase and not r.dated_notes(with_filters(asked, inline)):
        return split_filters(asked.query, r.today_of(asked), phrases=False)
    return text, inline


def _in_period(
    r: Retriever,
    asked: SearchRequest,
    req: SearchRequest,
    key: str,
    out: list[ChunkExplanation],
    *,
    holds_words: bool,
) -> list[ChunkExplanation]:
    """The outcomes as the search answers a question about a period: in the order
    Retriever.with_period gives (the hits, then the period's notes by date), read off that search
    itself (``asked``, its phrase still to read), not off the arms' ranking. Without a content word
    the search lists the period by date alone: the arms' outcome (a candidate below minScore) is
    not what it did."""
    hits = r.search(asked).hits
    reference = public_reference(key, req.agent)
    placed = [_placed(c, hits, reference, req.limit) for c in out]
    return [_listed_by_date(r, req, key, placed[0], hits, holds_words=holds_words), *placed[1:]]


def _placed(c: ChunkExplanation, hits: tuple[Hit, ...], reference: str, limit: int) -> ChunkExplanation:
    """A chunk the arms ranked among the hits, at its place in the period's answer."""
    if not c.outcome.startswith("hit #"):
        return c
    place = next(
        (
            i
            for i, h in enumerate(hits, 1)
            if h.reference == reference and h.lines == c.lines and not _by_date(h)
        ),
        None,
    )
    if place is None:  # in a note merely edited in the period: its notes by name or date kept the place
        return replace(c, outcome=f"beyond the limit of {limit}: the period's dated notes took its place")
    return replace(c, outcome=f"hit #{place}")


def _listed_by_date(
    r: Retriever,
    req: SearchRequest,
    key: str,
    first: ChunkExplanation,
    hits: tuple[Hit, ...],
    *,
    holds_words: bool,
) -> ChunkExplanation:
    """The outcome of a note's first chunk when the search (``hits``, as asked) lists the note for
    its date alone (a question about a period lists the period's notes the words did not find),
    or would list it but for the limit, so that ``why`` says what ``search`` did."""
    reference = public_reference(key, req.agent)
    phrase = req.filters.phrase
    for i, h in enumerate(hits, 1):
        if h.reference == reference and _by_date(h):
            # A note holding a word of the query may be listed too: its words ranked it below
            # minScore or past the word hits searched.
            why = "its words did not rank it among the hits" if holds_words else "no other word found"
            return replace(first, outcome=f"hit #{i}, listed by date: a note of '{phrase}', {why}")
    if holds_words and not first.outcome.startswith("not among the candidates"):
        return first  # ranked by its words: that outcome says more
    # Its place where the search lists the period's notes by date: among the notes the hits (its
    # words', or found by meaning) do not already show, as Retriever.with_period lists them (the
    # place among all the period's notes counted the hits' notes too).
    shown = {h.reference for h in hits if not _by_date(h)}
    listed = period_listing(r.dated_notes(req), shown, req.agent)
    place = next((i for i, n in enumerate(listed, 1) if n.key == key), None)
    if place is None:
        return first  # not of the period (or a filter leaves it out)
    words = "; its words ranked it below the hits" if holds_words else ""
    after = f", after the {len(shown)} note(s) of the hits" if shown else ""
    outcome = (
        f"a note of '{phrase}' beyond the limit of {req.limit}: #{place} of the period's {len(listed)} "
        "notes in the order they are listed by date (newest first, notes dated by name or property "
        f"first){after}{words}"
    )
    return replace(first, outcome=outcome)


def _not_ranked(c: ChunkView, views: Mapping[str, ChunkView], *, in_arms: bool) -> str:
    """Why a chunk that fusion left out (or no arm found) is no hit."""
    if c.chunk_id not in views and in_arms:
        return "not among the candidates of either arm (or removed by a filter)"
    return "not among the candidates of either arm"


def _listed_by_filters(
    r: Retriever, req: SearchRequest, key: str, first: ChunkExplanation
) -> ChunkExplanation:
    """The outcome of a note's first chunk for a query of filters alone, which ``search`` answers
    by listing the notes they select, newest first (Retriever.listed)."""
    place = r.listed_place(req, key)
    if place is None:
        return replace(first, outcome="not selected by the query's filters")
    where = f"hit #{place}" if place <= req.limit else f"#{place}, beyond the limit of {req.limit}"
    return replace(first, outcome=f"{where}, listed by the query's filters alone (newest first)")


def _by_date(h: Hit) -> bool:
    """A hit the search listed for its date alone: no arm found it."""
    return h.vec_score is None and h.bm25_score is None and h.relevance == 0
