"""The answer for a limit is the first hits of a larger limit's answer: the candidate pool, and
everything computed over it, never depends on the limit (real stores, a fake embedder)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from sidecar.search.fusion import Candidate, Scored
from sidecar.search.recall import recall
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever, after_pool
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search

# Words the notes are made of: a few a query asks for, many that only fill.
_ASKED = ["alpha", "beta", "gamma", "delta", "epsilon"]
_FILLER = [f"w{i}" for i in range(40)]
QUERIES = ["alpha beta gamma", "beta delta", "gamma epsilon alpha", "delta alpha"]


def _corpus(vault: Path, notes: int = 60) -> None:
    """Notes of one or two sections mixing asked words and filler in varied measure, so that the
    two arms rank them differently and many candidates of one arm lie past a small pool of the
    other."""
    rng = random.Random(7)
    for n in range(notes):
        sections = []
        for s in range(1 + n % 2):
            words = rng.sample(_ASKED, rng.randint(1, 3)) + rng.choices(_FILLER, k=rng.randint(2, 30))
            rng.shuffle(words)
            sections.append(f"## Part {s}\n\n" + " ".join(words) + "\n")
        write(vault / f"Note {n:02d}.md", f"# Note {n:02d}\n\n" + "\n".join(sections))


def _answer(h: Harness, query: str, limit: int) -> list[tuple[Any, ...]]:
    return [
        (x["reference"], tuple(x["lines"]), x["score"], x["relevance"])
        for x in search(h, query, limit=limit, min_score=0.0)
    ]


@pytest.fixture
def pooled(make_cfg: Any, tmp_path: Path) -> Any:
    def make(**flags: Any) -> Harness:
        vault = tmp_path / "v"
        if not vault.exists():
            _corpus(vault)
        h = Harness(make_cfg(vault, **{"search.candidates": 10, **flags}), FakeEmbedder())
        h.sweep()
        return h

    return make


def test_a_smaller_limit_answers_the_first_hits_of_a_larger_one(pooled: Any) -> None:
    """Limit 3's answer is the first three hits of limit 20's (and limit 10's the first ten), the
    same chunks in the same order with the same scores, also where limit 20 needs more hits than
    the pool of ``search.candidates`` holds."""
    h = pooled()
    try:
        for query in QUERIES:
            three, ten, twenty = (_answer(h, query, k) for k in (3, 10, 20))
            assert len(twenty) == 20, query
            assert three == twenty[:3], query
            assert ten == twenty[:10], query
    finally:
        h.close()


def test_recall_at_a_smaller_limit_recalls_the_first_notes_of_a_larger_one(
    make_cfg: Any, tmp_path: Path
) -> None:
    """recall ranks its own fixed pool (``recall.candidates``) whatever the limit: limit 3's hits
    are the first three of limit 20's."""
    vault = tmp_path / "v"
    _corpus(vault)
    flags = {"recall.candidates": 10, "recall.minSimilarity": 0.0, "recall.scoreFloor": 0.0}
    h = Harness(make_cfg(vault, **flags), FakeEmbedder())
    try:
        h.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)

        def hits(message: str, limit: int) -> list[tuple[Any, ...]]:
            req = SearchRequest("", limit, 0.0, token_budget=50_000)
            found = recall(r, message, [], req, lambda texts: [len(t.split()) for t in texts])
            return [(x.reference, x.lines, x.score) for x in found.hits]

        for message in QUERIES:
            assert hits(message, 3) == hits(message, 20)[:3], message
    finally:
        h.close()


def _hit(cid: str, key: str, score: float, folded: tuple[str, ...] = ()) -> Scored:
    return Scored(Candidate(cid, key, "vault", 1, 2), score, 0.0, 0.0, folded=folded)


def test_a_wider_pools_hits_follow_the_pools_own() -> None:
    """Hits of the wider pool come after the pool's own, whatever their score; none holding a
    chunk the pool ranked (as a hit or folded into one) comes again, and the per-note cap counts
    both."""
    first = [_hit("a1", "A", 0.5), _hit("b1", "B", 0.4, folded=("b2",))]
    pool = [*first, _hit("c1", "C", 0.01)]  # c1: below the floor in the pool, not a hit
    wider = [
        _hit("x1", "X", 0.9),  # better than the pool's hits: still after them
        _hit("b2", "B", 0.8),  # folded into a pool hit
        _hit("z1", "Z", 0.7, folded=("a1",)),  # holds a pool hit
        _hit("c1", "C", 0.6),  # a pool candidate
        _hit("a2", "A", 0.3),  # A's second hit
        _hit("a3", "A", 0.2),  # A's third: past the cap of two
        _hit("y1", "Y", 0.1),
    ]
    out = after_pool(first, wider, pool, cap=2)
    assert [s.candidate.chunk_id for s in out] == ["a1", "b1", "x1", "a2", "y1"]
