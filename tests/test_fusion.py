"""Fusion and query analysis: pure rules, no engines."""

from __future__ import annotations

from sidecar.fusion import Candidate, fold, fuse, minmax
from sidecar.query import analyze


def test_minmax_scales_each_arm() -> None:
    """Min-max maps to [0, 1]; a single or constant arm maps to 1."""
    assert minmax({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert minmax({"a": 7.0}) == {"a": 1.0}
    assert minmax({}) == {}


def test_weighted_sum_and_source_boost() -> None:
    """0.7 vector + 0.3 BM25, then the source factor; the boost is reported."""
    cands = [
        Candidate("v1", "vault/a", "vault", 1, 2, vec=0.9, bm25=1.0),
        Candidate("w1", "wiki/b", "wiki", 1, 2, vec=0.8, bm25=3.0),
        Candidate("v2", "vault/c", "vault", 1, 2, vec=0.7, bm25=2.0),
    ]
    out = fuse(cands, vector_weight=0.7, source_boosts={"vault": 0.65, "wiki": 1.4})
    scores = {s.candidate.chunk_id: s for s in out}
    assert abs(scores["w1"].score - (0.7 * 0.5 + 0.3 * 1.0) * 1.4) < 1e-9
    assert abs(scores["v1"].score - 0.7 * 1.0 * 0.65) < 1e-9
    assert out[0].candidate.chunk_id == "w1"
    assert scores["w1"].boosts == {"source": 1.4}


def test_missing_arm_gives_its_share_to_the_other() -> None:
    """Without vectors (BM25-only), BM25 carries the whole score."""
    out = fuse([Candidate("a", "vault/a", "vault", 1, 1, bm25=2.0)], vector_weight=0.7, source_boosts={})
    assert out[0].score == 1.0


def test_fold_contained_chunk_into_wider_hit() -> None:
    """A chunk whose lines lie inside another hit of the same file folds into the wider one."""
    wide = Candidate("wide", "vault/a", "vault", 1, 40)
    inner = Candidate("inner", "vault/a", "vault", 10, 20)
    other = Candidate("other", "vault/b", "vault", 10, 20)
    scored = fuse(
        [
            Candidate(**{**wide.__dict__, "vec": 0.5}),
            Candidate(**{**inner.__dict__, "vec": 0.9}),
            Candidate(**{**other.__dict__, "vec": 0.1}),
        ],
        vector_weight=1.0,
        source_boosts={},
    )
    folded = fold(scored)
    assert [s.candidate.chunk_id for s in folded] == ["wide", "other"]
    assert folded[0].score == 1.0  # the wider hit keeps the better score
    assert folded[0].folded == ("inner",)


def test_query_content_words_in_german_and_english() -> None:
    """Filler words of both languages are removed; the word class counts content words."""
    qa = analyze("Wie habe ich die Datensicherung für den NAS eingerichtet?")
    assert qa.content_words == ("Datensicherung", "NAS", "eingerichtet")
    assert qa.word_class == 2
    assert analyze("how do I record a lecture").content_words == ("record", "lecture")
    assert analyze("what is this").word_class == 0
