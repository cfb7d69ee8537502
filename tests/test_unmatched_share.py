"""The keyword arm's share and the query words no note holds (``search.unmatchedKeywordCut``):
which words count as unmatched, how much each carries, and the vector share they lead to."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sidecar.search.fusion import Candidate, Scale, fuse
from sidecar.search.query import analyze
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write


@pytest.fixture
def notes(make_cfg: Any, tmp_path: Path) -> Any:
    vault = tmp_path / "v"
    write(vault / "Vertrag.md", "# Kündigung\n\nDie Kündigung des Mietvertrags ist schriftlich.\n")
    write(vault / "Garden.md", "# Garden\n\nWe planted tomatoes and watered the beds.\n")
    write(vault / "Zeit-Erfassung.md", "# Zeit-Erfassung\n\nStunden pro Woche notieren.\n")
    for i in range(12):  # a generic word most notes hold
        write(vault / f"Day {i}.md", f"# Day {i}\n\nA note about the garden, day {i}.\n")
    h = Harness(make_cfg(vault, **{"search.unmatchedKeywordCut": 1.0}), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def _retriever(h: Harness, **search: Any) -> Retriever:
    return Retriever(h.stores, h.slot, replace(h.cfg.search, **search), h.cfg.recall, "all")


def test_a_word_held_in_any_form_the_keyword_arm_searches_is_matched(notes: Harness) -> None:
    """A stemmed form ("planting"), a German-stemmed and folded form ("Mietvertraege"), a typing
    without umlauts ("Kuendigung") and a word of a title alone count as matched; a typo and a
    closed compound of a hyphenated title ("Zeiterfassung") do not."""
    r = _retriever(notes)
    for query in ("planting tomato", "Mietvertraege", "Kuendigung", "Erfassung", "garden"):
        assert r.unmatched_share(analyze(query)) == 0.0, query
    assert r.unmatched_share(analyze("tomatpes")) == 1.0
    assert r.unmatched_share(analyze("Zeiterfassung")) == 1.0
    assert r.unmatched_share(analyze("")) == 0.0


def test_a_missing_word_weighs_by_what_it_carries(notes: Harness) -> None:
    """Each word weighs by its idf: a missing word beside a generic one (in most notes) is most
    of the query; beside a word one note holds, less of it."""
    r = _retriever(notes)
    beside_generic = r.unmatched_share(analyze("tomatpes garden"))
    beside_rare = r.unmatched_share(analyze("tomatpes watered"))
    assert 0.5 < beside_rare < beside_generic < 1.0


def test_missing_words_shrink_the_keyword_share(notes: Harness) -> None:
    """The keyword arm's share shrinks by the cut times the unmatched share; nothing moves when
    every word is found, when every word is missing (the keyword arm finds nothing then) or
    with the cut off; the rare-word cut still applies after it."""
    r = _retriever(notes)
    cfg = r.cfg
    query = analyze("how do I water the tomatpes in my garden")
    share = r.unmatched_share(query)
    assert 0.0 < share < 1.0
    _, weight = r.plan(query)
    assert weight == pytest.approx(cfg.vector_weight + (1.0 - cfg.vector_weight) * share**2)
    half = _retriever(notes, unmatched_keyword_cut=0.5)
    assert half.plan(query)[1] == pytest.approx(cfg.vector_weight + (1.0 - cfg.vector_weight) * share**2 / 2)
    assert _retriever(notes, unmatched_keyword_cut=0.0).plan(query)[1] == cfg.vector_weight
    assert r.plan(analyze("how do I water the tomatoes in my garden"))[1] == cfg.vector_weight
    assert r.plan(analyze("how do I wartr the tomatpes in my gardn"))[1] == cfg.vector_weight
    assert r.vector_weight(query, ("tomatoes",), share) == cfg.rare_term_vector_weight


def test_relevance_stays_at_the_share_without_the_lift(notes: Harness) -> None:
    """Only the ranking takes the lifted vector share: relevance (the figure minScore and
    recall's gates compare) is what it is with the cut off, hit by hit, while the scores move
    (the keyword arm finds a dozen notes alike: no clear lead)."""
    query = SearchRequest("a note about tomatpes on some day", 10, 0.0)
    lifted = _retriever(notes).search(query).hits
    off = _retriever(notes, unmatched_keyword_cut=0.0).search(query).hits
    assert lifted and {h.reference for h in lifted} == {h.reference for h in off}
    relevance = {h.reference: h.relevance for h in off}
    assert all(h.relevance == pytest.approx(relevance[h.reference]) for h in lifted)
    score = {h.reference: h.score for h in off}
    assert any(h.score != pytest.approx(score[h.reference]) for h in lifted)


def test_relevance_weighs_the_arms_at_its_own_share() -> None:
    """``fuse`` with ``relevance_weight``: the scores of the ranking's share, the relevance of
    its own, also when the keyword arm found nothing (the missing keyword evidence counts as
    none at the relevance share)."""
    cands = [
        Candidate("a", "a.md", "vault", 1, 2, vec=0.85, bm25=3.0),
        Candidate("b", "b.md", "vault", 1, 2, vec=0.80, bm25=4.0),
        Candidate("c", "c.md", "vault", 1, 2, vec=0.90, bm25=None),
    ]
    scale = Scale(0.7, 0.95, 5.0)
    for found in (cands, [replace(c, bm25=None) for c in cands]):
        both = {
            s.candidate.chunk_id: s
            for s in fuse(
                found,
                vector_weight=0.8,
                relevance_weight=0.6,
                source_boosts={},
                scale=scale,
                keywords_answered=True,
            )
        }
        ranked = {
            s.candidate.chunk_id: s
            for s in fuse(found, vector_weight=0.8, source_boosts={}, scale=scale, keywords_answered=True)
        }
        plain = {
            s.candidate.chunk_id: s
            for s in fuse(found, vector_weight=0.6, source_boosts={}, scale=scale, keywords_answered=True)
        }
        for cid, s in both.items():
            assert s.score == pytest.approx(ranked[cid].score)
            assert s.relevance == pytest.approx(plain[cid].relevance)
        assert any(both[c].relevance != pytest.approx(ranked[c].relevance) for c in both)


def test_a_clear_keyword_lead_keeps_the_unlifted_share(notes: Harness) -> None:
    """When the keyword arm's matched words single out one note ("water" only the garden note
    holds, "garden" every note), the ranking stays at the share without the lift: hit by hit the
    same scores as with the cut off, although the query has a word no note holds."""
    query = analyze("how do I water the tomatpes in my garden")
    r = _retriever(notes)
    assert r.plan(query)[1] > r.cfg.vector_weight  # the plan lifts the share
    request = SearchRequest("how do I water the tomatpes in my garden", 10, 0.0)
    lifted = r.search(request).hits
    off = _retriever(notes, unmatched_keyword_cut=0.0).search(request).hits
    assert lifted and [h.reference for h in lifted] == [h.reference for h in off]
    assert lifted[0].reference == "vault/Garden"
    assert [h.score for h in lifted] == pytest.approx([h.score for h in off])


def test_the_lead_is_judged_note_by_note_on_the_fused_scale() -> None:
    """``fuse`` keeps the ranking at ``relevance_weight`` when the keyword arm's best note scores
    at least 1.6 times its second (two chunks of one note are one note), and lifts it otherwise."""
    scale = Scale(0.7, 0.95, 10.0)

    def scores(cands: list[Candidate], weight: float, relevance_weight: float | None = None) -> list[float]:
        fused = fuse(
            cands, vector_weight=weight, relevance_weight=relevance_weight, source_boosts={}, scale=scale
        )
        return [s.score for s in sorted(fused, key=lambda s: s.candidate.chunk_id)]

    lead = [
        Candidate("a1", "a.md", "vault", 1, 2, vec=0.80, bm25=8.0),
        Candidate("a2", "a.md", "vault", 3, 4, vec=0.82, bm25=7.5),
        Candidate("b", "b.md", "vault", 1, 2, vec=0.90, bm25=4.9),
    ]
    assert scores(lead, 0.9, 0.6) == pytest.approx(scores(lead, 0.6))
    close = [replace(c, bm25=5.1) if c.key == "b.md" else c for c in lead]
    assert scores(close, 0.9, 0.6) == pytest.approx(scores(close, 0.9))
    assert scores(close, 0.9, 0.6) != pytest.approx(scores(close, 0.6))
