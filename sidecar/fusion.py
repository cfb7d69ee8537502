"""Fusion (pure): normalise each arm on its own, weigh, boost by source, fold contained chunks.

Imports nothing but the standard library, so every rule is testable in microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    score: float
    vec_norm: float
    bm25_norm: float
    boosts: Mapping[str, float] = field(default_factory=dict)
    folded: tuple[str, ...] = ()  # chunk ids folded into this hit


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Scale to [0, 1]; when every score is equal (or there is one), each gets 1."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo < 1e-12:
        return dict.fromkeys(scores, 1.0)
    return {k: (v - lo) / (hi - lo) for k, v in scores.items()}


def fuse(
    candidates: Sequence[Candidate],
    *,
    vector_weight: float,
    source_boosts: Mapping[str, float],
) -> list[Scored]:
    """Weighted sum of the normalised arms times the source boost, best first."""
    vec = minmax({c.chunk_id: c.vec for c in candidates if c.vec is not None})
    bm = minmax({c.chunk_id: c.bm25 for c in candidates if c.bm25 is not None})
    # An arm that produced nothing (no model, no matching term) gives its share to the other.
    wv = vector_weight if vec else 0.0
    wb = (1.0 - vector_weight) if bm else 0.0
    total = wv + wb
    if total <= 0:
        return []
    wv, wb = wv / total, wb / total
    out: list[Scored] = []
    for c in candidates:
        v, b = vec.get(c.chunk_id, 0.0), bm.get(c.chunk_id, 0.0)
        boost = source_boosts.get(c.source, 1.0)
        boosts = {"source": boost} if boost != 1.0 else {}
        out.append(Scored(c, (wv * v + wb * b) * boost, v, b, boosts))
    out.sort(key=lambda s: (-s.score, s.candidate.key, s.candidate.start_line))
    return out


def _contains(outer: Candidate, inner: Candidate) -> bool:
    return outer.start_line <= inner.start_line and inner.end_line <= outer.end_line


def fold(hits: Sequence[Scored]) -> list[Scored]:
    """Fold a chunk whose lines lie inside another hit of the same file into the wider one.

    The wider hit survives with the better of the two scores; order is by score.
    """
    kept: list[Scored] = []
    for hit in sorted(hits, key=lambda s: -s.score):
        merged = False
        for i, k in enumerate(kept):
            if k.candidate.key != hit.candidate.key:
                continue
            if _contains(k.candidate, hit.candidate):
                kept[i] = replace(k, folded=(*k.folded, hit.candidate.chunk_id))
                merged = True
                break
            if _contains(hit.candidate, k.candidate):
                kept[i] = replace(hit, score=k.score, folded=(*k.folded, k.candidate.chunk_id))
                merged = True
                break
        if not merged:
            kept.append(hit)
    kept.sort(key=lambda s: -s.score)
    return kept
