"""Fusion (pure): put each arm on one scale, weigh, boost by source and name, demote logs, damp
hub pages, add page support, fold contained chunks, cap hits per note.

Imports nothing but the standard library, so every rule is testable in microseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Candidate:
    """A chunk found by one or both arms, with its raw arm scores."""

    chunk_id: str
    key: str
    source: str
    start_line: int
    end_line: int
    vec: float | None = None
    bm25: float | None = None
    name_words: frozenset[str] = frozenset()  # folded words of the note's file name and title
    full_names: tuple[frozenset[str], ...] = ()  # folded word sets of title and aliases
    embedded: bool = True  # False: no vector (not yet, or past index.maxVectorChunksPerNote)
    hub: float = 0.0  # how much nearer than average the chunk lies to the table's centre
    page_bm25: float | None = None  # the BM25 score of the chunk's whole note


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    score: float  # the ranking score: fused, times every boost
    vec_norm: float  # each arm's share before weighting, as the fusion method scaled it
    bm25_norm: float
    boosts: Mapping[str, float] = field(default_factory=dict)
    folded: tuple[str, ...] = ()  # chunk ids folded into this hit
    relevance: float = 0.0  # calibrated, before boosts: 0 unrelated ... 1 a clear match


@dataclass(frozen=True)
class Scale:
    """Where each arm's raw score means "unrelated" and "a clear match", so both arms land on one
    absolute [0, 1] scale. Cosine ranges differ by model (an e5 model puts unrelated text near
    0.75, MiniLM near 0.05), so they come with the model; BM25 is divided by the query's
    ``ideal`` score (``Bm25Index.ideal_score``)."""

    cosine_floor: float = 0.1
    cosine_full: float = 0.6
    bm25_ideal: float = 0.0  # 0: unknown, the arm's best candidate stands in
    page_ideal: float = 0.0  # the same for whole notes

    def vec(self, cosine: float) -> float:
        span = max(self.cosine_full - self.cosine_floor, 1e-6)
        return min(1.0, max(0.0, (cosine - self.cosine_floor) / span))

    def bm25(self, score: float, best: float) -> float:
        return _share_of_ideal(score, self.bm25_ideal, best)

    def page(self, score: float, best: float) -> float:
        return _share_of_ideal(score, self.page_ideal, best)


def _share_of_ideal(score: float, ideal: float, best: float) -> float:
    """``score`` over the ideal (the best candidate's when the ideal is unknown), clipped to [0, 1]."""
    ideal = ideal if ideal > 0 else best
    return min(1.0, max(0.0, score / ideal)) if ideal > 0 else 0.0


FUSIONS = ("calibrated", "rrf", "minmax")
RRF_K = 60  # the constant of the rank-fusion paper; ranks beyond the first few weigh alike
# A keyword lead this clear (the arm's best note at least this many times its second's, as the
# fusion sees the arm) keeps the ranking at the share relevance is weighed at: see ``_clear_lead``.
CLEAR_LEAD = 1.6
# The rank bonus's constant: the first of an arm 1, the fifth 0.73, the tenth 0.55 (3 and 30
# measured lower on the German and help sets; BENCHMARKS.md, fifteenth session).
RANK_BONUS_K = 10


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Scale to [0, 1]: the best gets 1, the worst 0; when every score is equal (or there is
    one), each gets 1."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo < 1e-12:
        return dict.fromkeys(scores, 1.0)
    return {k: (v - lo) / (hi - lo) for k, v in scores.items()}


def rrf(scores: Mapping[str, float], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank, scaled so the first gets 1: only the order of an arm counts."""
    ranked = sorted(scores, key=lambda key: -scores[key])
    return {key: (k + 1) / (k + 1 + i) for i, key in enumerate(ranked)}


def _arm(method: str, scores: Mapping[str, float], calibrate: Callable[[float], float]) -> dict[str, float]:
    if method == "minmax":
        return minmax(scores)
    if method == "rrf":
        return rrf(scores)
    return {k: calibrate(v) for k, v in scores.items()}


def fuse(
    candidates: Sequence[Candidate],
    *,
    vector_weight: float,
    source_boosts: Mapping[str, float],
    scale: Scale | None = None,
    method: str = "calibrated",
    hub_damping: float = 0.0,
    page_share: float = 0.0,
    rank_share: float = 0.0,
    keywords_answered: bool = False,
    unread: bool = False,
    relevance_weight: float | None = None,
) -> list[Scored]:
    """Weighted sum of the two arms times the source boost, best first.

    ``method`` scales each arm before the sum: ``calibrated`` (the raw scores on ``scale``: a
    weak match stays weak however the other candidates score), ``rrf`` (rank only) or
    ``minmax`` (the arm's best candidate 1, its worst 0). Whatever the method, ``relevance`` is
    the calibrated sum without boosts: the absolute figure floors are compared with.

    ``hub_damping`` takes that share of a chunk's hubness off its cosine (centring the space on
    the table's mean, in part): a chunk about everything a little stops being every query's
    neighbour. The change shows as the ``hub`` boost.

    ``rank_share`` adds each arm's order beside its calibrated score: a chunk gains that share
    of the arm's weight times its reciprocal rank in the arm (``rrf`` with ``RANK_BONUS_K``),
    shown as the ``rank`` boost. Calibration keeps a weak match weak, but the cosine of a small
    model moves in a narrow band where a clear first place and a crowd of neighbours look alike;
    the order tells them apart. Relevance (the floors' figure) stays the calibrated sum.

    A chunk without a vector yet is invisible to the vector arm, not dissimilar: it is scored by
    BM25 alone, as every chunk is when there is no vector arm. Otherwise a note edited a moment
    ago (or not yet reached by a cold start's backfill) loses to any note the vector arm favours.

    ``keywords_answered``: the keyword arm ran and did not fail. When it found none of the query's
    words in any candidate, the ranking rests on the vector arm alone, but relevance counts the
    missing keyword evidence as none: a clear match by meaning alone reaches ``vector_weight`` (the
    query's share), not 1. Otherwise made-up words ("xyzzy quux"), which every model places near
    something, scored as a fair match. With ``unread`` too (the model broke the query's words into
    scraps: it has never read them) the cosine is no evidence either, and relevance is 0.

    ``relevance_weight``: the vector share relevance is weighed at when it is not the ranking's
    (``_relevance_shares``); None: ``vector_weight``. The ranking takes it too when the keyword
    arm gives one note a clear lead (``_clear_lead``).
    """
    scale = scale or Scale()
    raw_vec = {c.chunk_id: c.vec - hub_damping * c.hub for c in candidates if c.vec is not None}
    raw_bm = {c.chunk_id: c.bm25 for c in candidates if c.bm25 is not None}
    best_bm = max(raw_bm.values(), default=0.0)
    cal_vec = {k: scale.vec(v) for k, v in raw_vec.items()}
    cal_bm = {k: scale.bm25(v, best_bm) for k, v in raw_bm.items()}
    if page_share > 0 and method == "calibrated":
        # A chunk's keyword evidence is partly its note's: the words of a question spread over
        # the sections of the page that answers it.
        best_page = max((c.page_bm25 for c in candidates if c.page_bm25 is not None), default=0.0)
        for c in candidates:
            # Only for a chunk related by its own evidence: a vector neighbour at or below the
            # unrelated cosine with none of the words is not lifted by its note's words.
            if c.page_bm25 is None or (c.bm25 is None and cal_vec.get(c.chunk_id, 0.0) <= 0.0):
                continue
            page = scale.page(c.page_bm25, best_page)
            cal_bm[c.chunk_id] = (1.0 - page_share) * cal_bm.get(c.chunk_id, 0.0) + page_share * page
    if relevance_weight is not None and _clear_lead(candidates, cal_bm):
        vector_weight = relevance_weight
    vec = cal_vec if method == "calibrated" else _arm(method, raw_vec, scale.vec)
    bm = cal_bm if method == "calibrated" else _arm(method, raw_bm, lambda x: scale.bm25(x, best_bm))
    # An arm that produced nothing (no model, no matching term) gives its share to the other.
    wv = vector_weight if vec else 0.0
    wb = (1.0 - vector_weight) if bm else 0.0
    total = wv + wb
    if total <= 0:
        return []
    wv, wb = wv / total, wb / total
    rv = wv  # the vector arm's share of relevance
    if keywords_answered and not bm:
        rv = 0.0 if unread else vector_weight
    rank_v = rrf(raw_vec, RANK_BONUS_K) if rank_share > 0 else {}
    rank_b = rrf(raw_bm, RANK_BONUS_K) if rank_share > 0 else {}
    out: list[Scored] = []
    arms = {"has_vec": bool(vec), "has_bm": bool(bm), "answered": keywords_answered, "unread": unread}
    rv, rb = _relevance_shares(relevance_weight, (rv, wb), **arms)
    for c in candidates:
        cid = c.chunk_id
        v, b = vec.get(cid, 0.0), bm.get(cid, 0.0)
        alone = not c.embedded and wb > 0
        fused = b if alone else wv * v + wb * b
        relevance = cal_bm.get(cid, 0.0) if alone else rv * cal_vec.get(cid, 0.0) + rb * cal_bm.get(cid, 0.0)
        bonus = rank_share * (
            rank_b.get(cid, 0.0) if alone else wv * rank_v.get(cid, 0.0) + wb * rank_b.get(cid, 0.0)
        )
        fused += bonus
        boost = source_boosts.get(c.source, 1.0)
        boosts = {"source": boost} if boost != 1.0 else {}
        if bonus > 0:
            boosts["rank"] = round(bonus, 4)
        if hub_damping and c.hub and c.vec is not None:
            boosts["hub"] = round(-hub_damping * c.hub, 4)
        out.append(Scored(c, fused * boost, v, b, boosts, relevance=relevance))
    # Equal scores (both clipped at a clear match, say) go to the stronger raw evidence, not to
    # the name that sorts first.
    out.sort(key=_order)
    return out


def _clear_lead(candidates: Sequence[Candidate], keyword: Mapping[str, float]) -> bool:
    """Whether the keyword arm's best note scores at least ``CLEAR_LEAD`` times its second's
    (each note by its best chunk, on the calibrated scale the fusion weighs; a single note found
    leads clearly). The vector share is lifted for query words no note holds because the arm
    then ranks by the query's other, generic, words; a clear first place says its matched words
    still single out one page (a question worded unlike the pages: "Schlagwörter" for "Tags")."""
    best: dict[str, float] = {}
    for c in candidates:
        score = keyword.get(c.chunk_id, 0.0)
        if score > best.get(c.key, 0.0):
            best[c.key] = score
    top = sorted(best.values(), reverse=True)[:2]
    if not top:
        return False
    return len(top) == 1 or top[0] >= CLEAR_LEAD * top[1]


def _relevance_shares(
    weight: float | None,
    ranking: tuple[float, float],
    *,
    has_vec: bool,
    has_bm: bool,
    answered: bool,
    unread: bool,
) -> tuple[float, float]:
    """The two arms' shares of relevance at the vector share ``weight``, by the rules ``fuse``
    weighs the arms by (an arm that found nothing gives its share away, or counts as none);
    ``ranking``, the ranking's shares, when ``weight`` is None or leaves no share. The ranking
    may lean on one arm for what is no evidence of a match (the keyword arm's share shrinks for
    query words no note holds) while the floors keep comparing the figure they were set on."""
    if weight is None:
        return ranking
    wv = weight if has_vec else 0.0
    wb = (1.0 - weight) if has_bm else 0.0
    total = wv + wb
    if total <= 0:
        return ranking
    if answered and not has_bm:
        return (0.0 if unread else weight), 0.0
    return wv / total, wb / total


def _order(s: Scored) -> tuple[float, float, float, str, int]:
    c = s.candidate
    return (-s.score, -(c.bm25 or 0.0), -(c.vec or 0.0), c.key, c.start_line)


def _contains(outer: Candidate, inner: Candidate) -> bool:
    return outer.start_line <= inner.start_line and inner.end_line <= outer.end_line


def _overlaps(a: Candidate, b: Candidate) -> bool:
    return a.start_line <= b.end_line and b.start_line <= a.end_line


def fold(hits: Sequence[Scored], mode: str = "overlap") -> list[Scored]:
    """Fold a chunk whose lines lie inside another hit of the same file into the wider one; with
    ``mode="overlap"`` also a chunk that overlaps a better hit (neighbours sharing their overlap
    lines say the same thing twice). ``"off"`` keeps every chunk.

    The surviving hit keeps the better of the two scores; order is by score.
    """
    if mode == "off":
        return sorted(hits, key=lambda s: -s.score)
    kept: list[Scored] = []
    of_key: dict[str, list[int]] = {}  # positions in ``kept`` per note: a hit meets its own note only
    for hit in sorted(hits, key=lambda s: -s.score):
        merged = False
        mine = of_key.setdefault(hit.candidate.key, [])
        for i in mine:
            k = kept[i]
            if _contains(k.candidate, hit.candidate) or (
                mode == "overlap"
                and not _contains(hit.candidate, k.candidate)
                and _overlaps(k.candidate, hit.candidate)
            ):
                kept[i] = replace(k, folded=(*k.folded, hit.candidate.chunk_id))
                merged = True
                break
            if _contains(hit.candidate, k.candidate):
                kept[i] = replace(
                    hit,
                    score=k.score,
                    relevance=max(k.relevance, hit.relevance),
                    folded=(*k.folded, k.candidate.chunk_id),
                )
                merged = True
                break
        if not merged:
            mine.append(len(kept))
            kept.append(hit)
    kept.sort(key=lambda s: -s.score)
    return kept


@dataclass(frozen=True)
class Rules:
    """Ranking refinements on top of fusion; a factor of 1.0 (or 0) turns a rule off."""

    slug_boost: float = 1.0  # off by default (search.slugBoost)
    full_name_boost: float = 1.3
    log_demotion: float = 0.6
    log_prefix: str = "wiki/logs/"
    page_support: float = 0.05
    max_hits_per_note: int = 2
    rare_term_boost: float = 1.5


def _boost(s: Scored, name: str, factor: float) -> Scored:
    return replace(s, score=s.score * factor, boosts={**s.boosts, name: factor})


def apply_rules(
    hits: Sequence[Scored],
    content_words: frozenset[str],
    chronicle: bool,
    rules: Rules,
    rare_chunks: frozenset[str] = frozenset(),
    *,
    bare: bool = False,
) -> list[Scored]:
    """Name boosts, rare-term boost and log demotion per chunk, then page support; best first.
    ``rare_chunks`` are the chunks that contain a rare word of the query (``Retriever.rare_words``).
    ``bare``: the query is content words alone (no stopword), so it can be a note's name."""
    out: list[Scored] = []
    for hit in hits:
        s, c = hit, hit.candidate
        if rules.rare_term_boost != 1.0 and c.chunk_id in rare_chunks:
            s = _boost(s, "rareTerm", rules.rare_term_boost)
        if rules.full_name_boost != 1.0 and any(len(n) >= 2 and n <= content_words for n in c.full_names):
            s = _boost(s, "fullName", rules.full_name_boost)
        elif rules.slug_boost != 1.0 and content_words & c.name_words:
            s = _boost(s, "slug", rules.slug_boost)
        if rules.log_demotion != 1.0 and not chronicle and c.key.startswith(rules.log_prefix):
            s = _boost(s, "log", rules.log_demotion)
        out.append(s)
    ranked = support(out, rules.page_support)
    if rules.full_name_boost == 1.0 or not content_words or not bare:
        return ranked
    return _named_first(ranked, content_words)


def _named_first(ranked: list[Scored], content_words: frozenset[str]) -> list[Scored]:
    """A query that is exactly a note's title or one of its aliases ("Schuppen", a one-word
    alias) asks for that note, as ``[[Schuppen]]`` links to it: its chunks go first, lifted by the
    best score, in their own order. A factor could not do it: the notes that merely hold the word
    in their text (or link to the note) scored four and five times the named one, whose body need
    not hold its alias at all. Only a query of bare words: in a question the name's word is one
    word of a sentence ("how do I fold them?" is not the page "Folding" with the alias "Fold";
    help set MRR@10 0.833 -> 0.822 with questions too, BENCHMARKS.md). Only a name with a
    letter: YAML reads ``aliases: [2024]`` as a number, and the query "2024" asks for the notes of
    that year, not for the one note that happens to list it."""
    top = max((s.score for s in ranked), default=0.0)
    if top <= 0 or not any(ch.isalpha() for w in content_words for ch in w):
        return ranked
    out = [
        replace(s, score=s.score + top, boosts={**s.boosts, "name": round(top, 4)})
        if any(n == content_words for n in s.candidate.full_names)
        else s
        for s in ranked
    ]
    out.sort(key=lambda s: -s.score)
    return out


def support(hits: Sequence[Scored], share: float) -> list[Scored]:
    """A page's best chunk gains ``share`` of its next two chunks that reach half its score."""
    ranked = sorted(hits, key=lambda s: -s.score)
    if share <= 0:
        return ranked
    by_key: dict[str, list[Scored]] = {}
    for s in ranked:
        by_key.setdefault(s.candidate.key, []).append(s)
    out: list[Scored] = []
    for s in ranked:
        page = by_key[s.candidate.key]
        extra = 0.0
        if page[0] is s and len(page) > 1:
            extra = sum(o.score for o in page[1:3] if o.score >= s.score / 2) * share
        out.append(
            replace(s, score=s.score + extra, boosts={**s.boosts, "support": round(extra, 4)})
            if extra > 0
            else s
        )
    out.sort(key=lambda s: -s.score)
    return out


def cap_per_note(hits: Sequence[Scored], cap: int) -> list[Scored]:
    """At most ``cap`` hits of one note (0: no cap), keeping order."""
    if cap <= 0:
        return list(hits)
    seen: dict[str, int] = {}
    out = []
    for s in hits:
        n = seen.get(s.candidate.key, 0)
        if n < cap:
            out.append(s)
            seen[s.candidate.key] = n + 1
    return out
