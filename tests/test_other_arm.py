"""A candidate only one arm found gets the other arm's real score, looked up for it (real LanceDB
and Tantivy in tmp_path): its cosine from its stored vector, its keyword score from the arm's own
query restricted to it; ``search.otherArmScores: false`` leaves it at none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.search.fusion import Candidate, Scale, fuse
from sidecar.search.recall import recall
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import with_agents

# The fake embedder counts words, stopwords too, while the keyword arm drops them: notes of
# stopwords alone are the query's nearest vectors and hold none of its words.
QUERY = "the and of zebra"


def _vault(root: Path) -> Path:
    for i in range(12):
        write(root / f"Fill{i:02d}.md", "the and of " * (3 + i % 3) + "\n")
        write(root / f"Striped{i:02d}.md", "zebra zebra\n")
    # Near the query by its words (the arm's first), and holding the word once in a long text: below
    # every short zebra note in the keyword arm.
    write(root / "Near.md", "the and of " * 30 + "zebra " + "the and of " * 30 + "\n")
    return root


@pytest.fixture
def crowded(make_cfg: Any, tmp_path: Path) -> Any:
    def make(**flags: Any) -> Harness:
        h = Harness(make_cfg(_vault(tmp_path / "v"), **flags), FakeEmbedder())
        h.sweep()
        return h

    return make


def _ranked(h: Harness) -> tuple[Any, Any, dict[str, Candidate]]:
    r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
    req = SearchRequest(QUERY, 3, 0.0)
    seen, qa, spelled = r.read_spelling(QUERY, None)
    rare, weight = r.plan(qa, None)
    found = r.arms(req, seen, qa, None, weight, spelled=spelled)
    ranking = r.rank(req, qa, found, weight=weight, rare=rare)
    return r, found, {s.candidate.chunk_id: s.candidate for s in ranking.scored}


def test_a_chunk_one_arm_found_gets_the_other_arms_real_score(crowded: Any) -> None:
    """Keyword-only candidates carry their real cosine (hubness too), a vector-only one holding a
    word its real keyword score; the arms' own scores are unchanged, and the keyword arm's scale
    too (each looked-up score lies below the arm's last)."""
    h = crowded(**{"search.candidates": 10})
    try:
        r, found, cands = _ranked(h)
        arm_bm = dict(found.keywords)
        arm_vec = {cid: cos for cid, cos, _ in found.vectors[0]}
        keyword_only = [cid for cid in arm_bm if cid not in arm_vec]
        vector_only = [cid for cid in arm_vec if cid not in arm_bm]
        assert keyword_only and vector_only  # the vault makes both kinds
        assert h.stores.serving is not None
        q = h.slot.model.embed_query(QUERY)
        stored = h.stores.serving.store.vectors_of(keyword_only)
        for cid in keyword_only:
            c = cands[cid]
            assert c.vec is not None and c.vec == pytest.approx(float(np.dot(stored[cid], q)), abs=1e-5)
            assert c.vec > 0.3 and c.looked_up == frozenset({"vec"})
            assert c.bm25 == arm_bm[cid]
        everything = dict(h.stores.bm25.search("zebra", 100))
        near = next(cid for cid in vector_only if cid in everything)
        assert h.stores.manifest.views([near])[near].key == "vault/Near"
        assert cands[near].bm25 == pytest.approx(everything[near])
        assert cands[near].bm25 < min(arm_bm.values())
        assert cands[near].vec == arm_vec[near] and cands[near].looked_up == frozenset({"bm25"})
        # A chunk holding none of the words stays without a keyword score.
        assert all(cands[cid].bm25 is None for cid in vector_only if cid not in everything)
        assert r.search(SearchRequest(QUERY, 3, 0.0)).hits
    finally:
        h.close()


def test_other_arm_scores_off_leaves_a_one_arm_chunk_without_one(crowded: Any) -> None:
    """``search.otherArmScores: false``: pool membership alone decides, as before."""
    h = crowded(**{"search.candidates": 10, "search.otherArmScores": "none"})
    try:
        _, found, cands = _ranked(h)
        arm_vec = {cid for cid, _, _ in found.vectors[0]}
        keyword_only = [cid for cid, _ in found.keywords if cid not in arm_vec]
        assert keyword_only and all(cands[cid].vec is None for cid in keyword_only)
        assert all(not c.looked_up for c in cands.values())
    finally:
        h.close()


def test_a_looked_up_score_is_evidence_not_a_place_in_the_arms_order() -> None:
    """A cosine looked up for a keyword-only chunk counts in its calibrated score, but earns no
    rank bonus (it was not among the arm's candidates), nor does it take the arm's places."""
    scale = Scale(cosine_floor=0.8, cosine_full=0.9, bm25_ideal=10.0)
    found = Candidate("found", "vault/a", "vault", 1, 2, vec=0.85, bm25=2.0)
    looked = Candidate("looked", "vault/b", "vault", 1, 2, vec=0.88, bm25=5.0, looked_up=frozenset({"vec"}))
    out = {
        s.candidate.chunk_id: s
        for s in fuse([found, looked], vector_weight=0.5, source_boosts={}, scale=scale, rank_share=0.1)
    }
    assert out["looked"].vec_norm == pytest.approx(0.8)
    assert out["looked"].boosts["rank"] == pytest.approx(0.1 * 0.5 * 1.0, abs=1e-4)  # its keyword first place
    assert out["found"].boosts["rank"] == pytest.approx(0.1 * (0.5 * 1.0 + 0.5 * 11 / 12), abs=1e-4)


def test_recall_keeps_each_candidates_own_arms(crowded: Any) -> None:
    """Recall's gates were set on the scores of the arms that found a chunk: a keyword-only chunk
    shows no cosine there (no looked-up one), while a search of the same words reports its cosine."""
    h = crowded(**{"search.candidates": 10})
    try:
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        req = SearchRequest(QUERY, 3, 0.0)  # each arm's 10 candidates
        found = r.search(req).hits
        striped = [hit for hit in found if hit.reference.startswith("vault/Striped")]
        assert striped and all(hit.vec_score is not None for hit in striped)
        result = recall(r, QUERY, [], req, lambda texts: [len(t.split()) for t in texts], explain=True)
        shown = [*result.hits, *result.dropped]
        recalled = [hit for hit in shown if hit.reference.startswith("vault/Striped")]
        assert recalled and all(hit.similarity is None and hit.vec_score is None for hit in recalled)
    finally:
        h.close()


def test_a_memory_chunks_looked_up_keyword_score_is_its_search_score(make_cfg: Any, vault: Path) -> None:
    """The keyword look-up restricted to chunk ids scores a memory chunk as the keyword arm does,
    from the index of all memory (a person's search) and from the agent's own (the agent's): the
    filter adds nothing; a chunk holding none of the words is left out."""
    notes = {
        "alpha": {
            "trip": "# Trip\n\nThe kayak of alpha waits at the lake.\n",
            "gear": "# Gear\n\nA paddle and a long list of other gear.\n",
        }
    }
    h = Harness(with_agents(make_cfg, vault, notes), FakeEmbedder())
    try:
        h.sweep()
        bm25 = h.stores.bm25
        (trip,) = [c.chunk_id for c in h.stores.manifest.chunks_of("memory/alpha/trip")]
        (gear,) = [c.chunk_id for c in h.stores.manifest.chunks_of("memory/alpha/gear")]
        for agent in (None, "alpha"):
            full = dict(bm25.search("kayak lake", 50, None, agent))
            looked = bm25.search(
                "kayak lake",
                2,
                None,
                agent,
                keys=["memory/alpha/trip", "memory/alpha/gear"],
                chunk_ids=[trip, gear],
            )
            assert looked == [(trip, pytest.approx(full[trip]))], agent
    finally:
        h.close()


def test_a_looked_up_score_far_below_the_arms_last_is_left_out() -> None:
    """With ``looked_near`` a looked-up keyword score counts only from that share of the arm's
    last own candidate's calibrated score: a page holding one common word of the question, far
    below every candidate the arm found, is not lifted by it; one near the arm's last is."""
    scale = Scale(cosine_floor=0.8, cosine_full=0.9, bm25_ideal=10.0)
    own = [
        Candidate("own1", "vault/a", "vault", 1, 2, vec=0.85, bm25=8.0),
        Candidate("own2", "vault/b", "vault", 1, 2, vec=0.84, bm25=5.0),
    ]
    near = Candidate("near", "vault/c", "vault", 1, 2, vec=0.86, bm25=4.5, looked_up=frozenset({"bm25"}))
    far = Candidate("far", "vault/d", "vault", 1, 2, vec=0.86, bm25=1.0, looked_up=frozenset({"bm25"}))

    def fused(**kw: Any) -> dict[str, Any]:
        out = fuse([*own, near, far], vector_weight=0.5, source_boosts={}, scale=scale, **kw)
        return {s.candidate.chunk_id: s for s in out}

    every = fused()
    kept = fused(looked_near=0.8)
    assert every["near"].bm25_norm > 0
    assert kept["near"].bm25_norm == pytest.approx(every["near"].bm25_norm)
    assert every["far"].bm25_norm > 0
    assert kept["far"].bm25_norm == 0 and kept["far"].candidate.bm25 is None
    assert not kept["far"].candidate.looked_up
    assert kept["far"].score < every["far"].score
    assert kept["own2"].bm25_norm == pytest.approx(every["own2"].bm25_norm)
