"""Fusion and query analysis: pure rules, no engines."""

from __future__ import annotations

from sidecar.search.fusion import (
    Candidate,
    Rules,
    Scale,
    Scored,
    apply_rules,
    cap_per_note,
    fold,
    fuse,
    minmax,
    rrf,
)
from sidecar.search.query import analyze, split_clauses, split_filters
from sidecar.search.querywords import unread_words


def test_minmax_scales_each_arm() -> None:
    """Min-max maps to [0, 1]; a single or constant arm maps to 1."""
    assert minmax({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert minmax({"a": 7.0}) == {"a": 1.0}
    assert minmax({}) == {}


def test_rrf_scores_ranks_only() -> None:
    """Rank fusion gives the first 1 and the rest 61/(61+i), whatever the raw gaps."""
    assert rrf({"a": 0.9, "b": 0.1, "c": 0.5}) == {"a": 1.0, "c": 61 / 62, "b": 61 / 63}


def test_calibrated_fusion_keeps_absolute_evidence() -> None:
    """Calibrated: raw cosine and BM25 on fixed scales, so a weak best candidate stays weak and a
    chunk without any keyword match gains nothing from the BM25 arm (min-max made it 1 and 0)."""
    scale = Scale(cosine_floor=0.2, cosine_full=0.7, bm25_ideal=10.0)
    cands = [
        Candidate("weak", "vault/a", "vault", 1, 2, vec=0.3, bm25=1.0),
        Candidate("none", "vault/b", "vault", 1, 2, vec=0.25),
    ]
    out = {s.candidate.chunk_id: s for s in fuse(cands, vector_weight=0.7, source_boosts={}, scale=scale)}
    assert abs(out["weak"].relevance - (0.7 * 0.2 + 0.3 * 0.1)) < 1e-9
    assert abs(out["none"].relevance - 0.7 * 0.1) < 1e-9
    assert out["weak"].score == out["weak"].relevance  # no boosts: score and relevance agree
    minmaxed = {
        s.candidate.chunk_id: s
        for s in fuse(cands, vector_weight=0.7, source_boosts={}, scale=scale, method="minmax")
    }
    assert minmaxed["weak"].score == 1.0  # the arm's best, however weak
    assert minmaxed["weak"].relevance == out["weak"].relevance  # relevance is calibrated always


def test_relevance_without_any_keyword_match_counts_meaning_at_its_share() -> None:
    """When the keyword arm answered and none of the query's words occurs in any candidate, the
    order still follows the vector arm, but relevance counts the missing keyword evidence as none:
    a clear match by meaning alone reaches the vector share, not 1 (made-up words, which every
    model puts near something, no longer look like a fair match). A failed keyword arm is no
    evidence: then the vector arm's share is all of it, as before."""
    scale = Scale(cosine_floor=0.8, cosine_full=0.9, bm25_ideal=10.0)
    cands = [
        Candidate("clear", "vault/a", "vault", 1, 2, vec=0.95),
        Candidate("near", "vault/b", "vault", 1, 2, vec=0.84),
    ]
    silent = fuse(cands, vector_weight=0.6, source_boosts={}, scale=scale, keywords_answered=True)
    unknown = fuse(cands, vector_weight=0.6, source_boosts={}, scale=scale)
    assert [s.candidate.chunk_id for s in silent] == [s.candidate.chunk_id for s in unknown]
    rel = {s.candidate.chunk_id: s.relevance for s in silent}
    assert abs(rel["clear"] - 0.6) < 1e-9 and abs(rel["near"] - 0.6 * 0.4) < 1e-9
    rel = {s.candidate.chunk_id: s.relevance for s in unknown}
    assert rel["clear"] == 1.0 and abs(rel["near"] - 0.4) < 1e-9
    # words the model has never read (made up): their cosine is no evidence either
    unread = fuse(
        cands, vector_weight=0.6, source_boosts={}, scale=scale, keywords_answered=True, unread=True
    )
    assert [s.candidate.chunk_id for s in unread] == [s.candidate.chunk_id for s in unknown]
    assert all(s.relevance == 0.0 for s in unread)
    # a keyword hit anywhere among the candidates: the arm was not silent, the flag changes nothing
    with_word = [*cands, Candidate("word", "vault/c", "vault", 1, 2, bm25=5.0)]
    assert [s.relevance for s in fuse(with_word, vector_weight=0.6, source_boosts={}, scale=scale)] == [
        s.relevance
        for s in fuse(with_word, vector_weight=0.6, source_boosts={}, scale=scale, keywords_answered=True)
    ]


def test_unread_words_are_the_ones_a_tokenizer_breaks_into_scraps() -> None:
    """Scraps: every word split, fewer than 3 characters a piece over them. A word kept whole is
    read however short ("AI"), numbers are no word to judge, and a script outside Latin, Greek
    and Cyrillic letters is read (one piece per character by design)."""
    assert unread_words(["xyzzy", "quux"], [3, 2])  # 9 characters in 5 pieces
    assert not unread_words(["Geschenkgutschein"], [3])  # 5.7 a piece
    assert not unread_words(["xyzzy", "AI"], [3, 1])  # one word kept whole
    assert unread_words(["xyzzy", "1234"], [3, 2]) and not unread_words(["1234"], [2])
    assert not unread_words(["录音机"], [3]) and not unread_words([], [])


def test_rank_share_adds_each_arms_order_beside_the_scores() -> None:
    """Within the narrow cosine band of one query a clear first and its neighbours score alike:
    the arm's order adds rankShare x weight x 11 / (11 + place), shown as the ``rank`` boost, and
    lifts the first of both arms over a neighbour with a hair more calibrated evidence; relevance
    (the floors' figure) stays the calibrated sum, and 0 turns it off."""
    scale = Scale(cosine_floor=0.8, cosine_full=0.9, bm25_ideal=10.0)
    cands = [
        Candidate("first", "vault/a", "vault", 1, 2, vec=0.870, bm25=5.0),
        Candidate("hair", "vault/b", "vault", 1, 2, vec=0.869, bm25=4.9),
        Candidate("crowd", "vault/c", "vault", 1, 2, vec=0.868, bm25=5.5),
    ]
    plain = fuse(cands, vector_weight=0.7, source_boosts={}, scale=scale)
    assert plain[0].candidate.chunk_id == "crowd"
    ranked = {
        s.candidate.chunk_id: s
        for s in fuse(cands, vector_weight=0.7, source_boosts={}, scale=scale, rank_share=0.1)
    }
    assert abs(ranked["first"].boosts["rank"] - 0.1 * (0.7 * 1.0 + 0.3 * 11 / 12)) < 1e-4
    assert abs(ranked["crowd"].boosts["rank"] - 0.1 * (0.7 * 11 / 13 + 0.3 * 1.0)) < 1e-4
    assert max(ranked.values(), key=lambda s: s.score).candidate.chunk_id == "first"
    for s in plain:
        assert ranked[s.candidate.chunk_id].relevance == s.relevance
        assert "rank" not in s.boosts


def test_relevance_ignores_boosts_and_clips() -> None:
    """Boosts move the ranking score, not the relevance; arm scores above a clear match clip at 1."""
    scale = Scale(cosine_floor=0.0, cosine_full=0.5, bm25_ideal=2.0)
    [hit] = fuse(
        [Candidate("w", "wiki/a", "wiki", 1, 1, vec=0.9, bm25=9.0)],
        vector_weight=0.7,
        source_boosts={"wiki": 1.4},
        scale=scale,
    )
    assert hit.relevance == 1.0 and abs(hit.score - 1.4) < 1e-9


def test_weighted_sum_and_source_boost() -> None:
    """0.7 vector + 0.3 BM25 (min-max), then the source factor; the boost is reported."""
    cands = [
        Candidate("v1", "vault/a", "vault", 1, 2, vec=0.9, bm25=1.0),
        Candidate("w1", "wiki/b", "wiki", 1, 2, vec=0.8, bm25=3.0),
        Candidate("v2", "vault/c", "vault", 1, 2, vec=0.7, bm25=2.0),
    ]
    out = fuse(cands, vector_weight=0.7, source_boosts={"vault": 0.65, "wiki": 1.4}, method="minmax")
    scores = {s.candidate.chunk_id: s for s in out}
    assert abs(scores["w1"].score - (0.7 * 0.5 + 0.3 * 1.0) * 1.4) < 1e-9
    assert abs(scores["v1"].score - 0.7 * 1.0 * 0.65) < 1e-9
    assert out[0].candidate.chunk_id == "w1"
    assert scores["w1"].boosts == {"source": 1.4}


def test_missing_arm_gives_its_share_to_the_other() -> None:
    """Without vectors (BM25-only), BM25 carries the whole score."""
    out = fuse([Candidate("a", "vault/a", "vault", 1, 1, bm25=2.0)], vector_weight=0.7, source_boosts={})
    assert out[0].score == 1.0  # no ideal known: the best BM25 candidate stands in
    scale = Scale(bm25_ideal=4.0)
    out = fuse(
        [Candidate("a", "vault/a", "vault", 1, 1, bm25=2.0)], vector_weight=0.7, source_boosts={}, scale=scale
    )
    assert out[0].score == 0.5


def test_chunk_without_a_vector_is_scored_by_bm25_alone() -> None:
    """A chunk the vector arm cannot see yet is not treated as dissimilar: BM25 carries its score."""
    cands = [
        Candidate("fav", "vault/a", "vault", 1, 1, vec=0.9),
        Candidate("other", "vault/b", "vault", 1, 1, vec=0.2, bm25=1.0),
        Candidate("new", "vault/c", "vault", 1, 1, bm25=3.0, embedded=False),
    ]
    scores = {
        s.candidate.chunk_id: s.score
        for s in fuse(cands, vector_weight=0.7, source_boosts={}, method="minmax")
    }
    assert scores == {"new": 1.0, "fav": 0.7, "other": 0.0}
    # Embedded but outside the vector candidates: the vector arm has judged it, so it keeps 0 there.
    cands[2] = Candidate("new", "vault/c", "vault", 1, 1, bm25=3.0)
    assert fuse(cands, vector_weight=0.7, source_boosts={}, method="minmax")[0].candidate.chunk_id == "fav"


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
        method="minmax",
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
    # Farewells are small talk in both languages, not a topic to search for.
    assert analyze("bye for now").word_class == 0
    assert analyze("ok, tschau und auf Wiedersehen").word_class == 0
    # So are the chat frame's "later" and "soon" ("bis später", "bin gleich wieder da").
    assert analyze("alles klar, bis später").word_class == 0
    assert analyze("ich bin gleich wieder da").word_class == 0
    assert analyze("ok, later then").word_class == 0 and analyze("soon!").word_class == 0


def _scored(cid: str, key: str, score: float, lines: tuple[int, int] = (1, 5), **kw: object) -> Scored:
    c = Candidate(cid, key, key.split("/", maxsplit=1)[0], lines[0], lines[1], **kw)  # type: ignore[arg-type]
    return Scored(c, score, 0.0, 0.0, {})


def test_slug_boost_moves_the_named_page_up_and_turns_off() -> None:
    """A content word in the note's name lifts it (search.slugBoost); 1.0 disables the rule."""
    hits = [
        _scored("a", "vault/Other", 0.50),
        _scored("b", "vault/Backups", 0.46, name_words=frozenset({"backups"})),
    ]
    on = apply_rules(hits, frozenset({"backups"}), False, Rules(slug_boost=1.15, page_support=0))
    assert on[0].candidate.key == "vault/Backups" and on[0].boosts["slug"] == 1.15
    off = apply_rules(hits, frozenset({"backups"}), False, Rules(page_support=0))
    assert off[0].candidate.key == "vault/Other" and "slug" not in off[0].boosts  # off by default


def test_a_query_that_is_exactly_a_notes_alias_puts_that_note_first() -> None:
    """A one-word alias searched alone lifts its note over notes that score five times as much by
    holding the word (the "name" boost); the word in a question, a query with another word beside
    it, or fullNameBoost 1.0 leaves the order alone."""
    alias = (frozenset({"gartenhaus"}), frozenset({"schuppen"}))
    hits = [_scored("a", "vault/Holz", 1.2), _scored("b", "vault/Gartenhaus", 0.23, full_names=alias)]
    first = apply_rules(hits, frozenset({"schuppen"}), False, Rules(page_support=0), bare=True)[0]
    assert first.candidate.key == "vault/Gartenhaus" and first.boosts["name"] == 1.2
    # the same word in a question ("wo ist der Schuppen?"): one word of a sentence
    assert (
        apply_rules(hits, frozenset({"schuppen"}), False, Rules(page_support=0))[0].candidate.key
        == "vault/Holz"
    )
    words = frozenset({"schuppen", "brennholz"})
    assert apply_rules(hits, words, False, Rules(page_support=0), bare=True)[0].candidate.key == "vault/Holz"
    off = Rules(full_name_boost=1.0, page_support=0)
    assert apply_rules(hits, frozenset({"schuppen"}), False, off, bare=True)[0].candidate.key == "vault/Holz"


def test_a_number_alias_does_not_put_its_note_first() -> None:
    """A name of digits only (YAML ``aliases: [2024]``) is no name the query "2024" asks for: the
    notes that hold the number keep their order; a name with a letter still goes first."""
    hits = [
        _scored("a", "vault/Daily/2024-03-01", 0.9, full_names=(frozenset({"2024", "03", "01"}),)),
        _scored("b", "vault/Arbeit/Onboarding", 0.2, full_names=(frozenset({"2024"}),)),
    ]
    ranked = apply_rules(hits, frozenset({"2024"}), False, Rules(page_support=0), bare=True)
    assert ranked[0].candidate.key == "vault/Daily/2024-03-01" and "name" not in ranked[1].boosts
    q3 = [hits[0], _scored("c", "vault/Plan", 0.2, full_names=(frozenset({"q3"}),))]
    named = apply_rules(q3, frozenset({"q3"}), False, Rules(page_support=0), bare=True)
    assert named[0].candidate.key == "vault/Plan"


def test_full_name_boost_needs_every_word_of_a_multiword_name() -> None:
    """`audio recorder` fully named in the query beats a partial match (search.fullNameBoost)."""
    full = (frozenset({"audio", "recorder"}),)
    hits = [_scored("a", "vault/Other", 0.60), _scored("b", "vault/Audio recorder", 0.50, full_names=full)]
    assert apply_rules(hits, frozenset({"audio", "recorder", "setup"}), False, Rules(page_support=0))[
        0
    ].candidate.key == ("vault/Audio recorder")
    assert (
        apply_rules(hits, frozenset({"audio"}), False, Rules(page_support=0))[0].candidate.key
        == "vault/Other"
    )
    assert (
        apply_rules(
            hits,
            frozenset({"audio", "recorder"}),
            False,
            Rules(full_name_boost=1.0, slug_boost=1.0, page_support=0),
        )[0].candidate.key
        == "vault/Other"
    )


def test_chunks_holding_a_rare_query_word_are_boosted() -> None:
    """Chunks that contain a rare word of the query (Retriever.rare_words) get search.rareTermBoost;
    1.0 turns the rule off."""
    hits = [_scored("fav", "vault/Paragraphs", 0.60), _scored("id", "vault/Garden", 0.45)]
    on = apply_rules(hits, frozenset(), False, Rules(page_support=0, rare_term_boost=1.5), frozenset({"id"}))
    assert on[0].candidate.chunk_id == "id" and on[0].boosts["rareTerm"] == 1.5
    assert on[1].boosts == {}
    off = apply_rules(hits, frozenset(), False, Rules(page_support=0, rare_term_boost=1.0), frozenset({"id"}))
    assert off[0].candidate.chunk_id == "fav" and "rareTerm" not in off[1].boosts
    assert apply_rules(hits, frozenset(), False, Rules(page_support=0))[0].candidate.chunk_id == "fav"


def test_logs_are_demoted_unless_the_query_is_about_the_chronicle() -> None:
    """wiki/logs/ pages lose to the page about the thing, except for 'when/changed/2026-09' questions."""
    hits = [_scored("l", "wiki/logs/2026-09", 0.60), _scored("p", "wiki/Backups", 0.50)]
    assert apply_rules(hits, frozenset(), False, Rules(page_support=0))[0].candidate.key == "wiki/Backups"
    assert apply_rules(hits, frozenset(), True, Rules(page_support=0))[0].candidate.key == "wiki/logs/2026-09"
    assert apply_rules(hits, frozenset(), False, Rules(log_demotion=1.0, page_support=0))[
        0
    ].candidate.key == ("wiki/logs/2026-09")


def test_page_support_lifts_a_page_matching_in_several_chunks() -> None:
    """A page whose next two chunks also score well gains a share of them (search.pageSupport)."""
    hits = [
        _scored("x1", "vault/Mentions", 0.70),
        _scored("p1", "vault/Topic", 0.62, (1, 5)),
        _scored("p2", "vault/Topic", 0.55, (6, 9)),
        _scored("p3", "vault/Topic", 0.50, (10, 14)),
    ]
    on = apply_rules(hits, frozenset(), False, Rules(page_support=0.2))
    assert on[0].candidate.chunk_id == "p1" and on[0].boosts["support"] > 0
    assert apply_rules(hits, frozenset(), False, Rules())[0].boosts.get("support", 0) == 0  # x1: one chunk
    assert apply_rules(hits, frozenset(), False, Rules(page_support=0))[0].candidate.chunk_id == "x1"


def test_cap_per_note() -> None:
    """At most search.maxHitsPerNote hits of one note; 0 means no cap."""
    hits = [_scored(f"c{i}", "vault/Same", 1 - i / 10, (i * 10, i * 10 + 5)) for i in range(5)]
    assert len(cap_per_note(hits, 2)) == 2 and len(cap_per_note(hits, 0)) == 5


def test_chronicle_detection_and_inline_filters() -> None:
    """Months, years, ISO months and change words mark chronicle queries; filters are split off."""
    assert analyze("what changed in September").chronicle
    assert analyze("Was wurde im März geändert?").chronicle
    assert analyze("backup plan 2026-09").chronicle
    assert not analyze("how do I set up backups").chronicle
    text, filters = split_filters(
        'garden plans tag:#Garten path:"Projekte/Haus" since:2026-09-01 source:wiki'
    )
    assert text == "garden plans"
    assert filters.tags == ("garten",) and filters.path_prefix == "Projekte/Haus"
    assert filters.since == "2026-09-01" and filters.sources == ("wiki",)


def test_query_language_detection() -> None:
    """German filler words or letters mark a German query; English ones an English query."""
    assert analyze("Wie nehme ich Audio in einer Notiz auf?").language == "de"
    assert analyze("Tägliche Notizen").language == "de"
    assert analyze("how do I record audio in a note").language == "en"
    assert analyze("hotkeys").language is None


def test_fold_modes() -> None:
    """overlap folds a lower neighbour sharing lines; contained does not; off keeps both."""
    hits = [_scored("a", "vault/n", 0.9, (1, 10)), _scored("b", "vault/n", 0.5, (8, 20))]
    assert [s.candidate.chunk_id for s in fold(hits, "overlap")] == ["a"]
    assert len(fold(hits, "contained")) == 2 and len(fold(hits, "off")) == 2


def test_hub_damping_discounts_chunks_near_the_centre() -> None:
    """A chunk near the centre of all vectors (about everything a little) loses that share of its
    hubness; a chunk off the centre gains; the change is reported as the hub boost."""
    cands = [
        Candidate("hub", "vault/commands", "vault", 1, 9, vec=0.82, hub=0.06),
        Candidate("page", "vault/ip", "vault", 1, 9, vec=0.80, hub=-0.02),
    ]
    scale = Scale(cosine_floor=0.7, cosine_full=0.9)
    plain = fuse(cands, vector_weight=1.0, source_boosts={}, scale=scale)
    assert plain[0].candidate.chunk_id == "hub" and "hub" not in plain[0].boosts
    damped = fuse(cands, vector_weight=1.0, source_boosts={}, scale=scale, hub_damping=0.5)
    assert [s.candidate.chunk_id for s in damped] == ["page", "hub"]
    assert damped[1].boosts["hub"] == -0.03 and damped[0].boosts["hub"] == 0.01


def test_clipped_scores_tie_break_on_the_raw_evidence() -> None:
    """Two keyword matches above the query's ideal score both calibrate to 1: the stronger raw
    BM25 ranks first, not the name that sorts first."""
    cands = [
        Candidate("weak", "vault/BadYaml", "vault", 1, 5, bm25=55.0, embedded=False),
        Candidate("strong", "vault/Bomb", "vault", 1, 5, bm25=102.0, embedded=False),
    ]
    out = fuse(cands, vector_weight=0.7, source_boosts={}, scale=Scale(0.1, 0.6, 20.0))
    assert out[0].score == out[1].score and out[0].candidate.chunk_id == "strong"


def test_follow_up_cues_in_both_languages() -> None:
    """A message that opens with a conjunction or points back before its topic (or at the end of
    a short one) continues an earlier turn; a question that stands on its own does not. German
    "das" before a noun is an article and capitalised "Sie" the polite "you", not words pointing
    back."""
    for text in (
        "and how often?",
        "what does it cost?",
        "how do I fold them?",
        "does this work on Android too?",
        "und seine Frau?",
        "und geht das auch offline?",
        "das auch?",
        "aber wie oft?",
        "kann ich da meine eigene Adresse verwenden?",
        "und wie bekomme ich sie wieder heraus?",
    ):
        assert analyze(text).refers_back, text
    for text in (
        "how do I record a lecture",
        "change the date format of daily notes",
        "wie ändere ich das Datumsformat",
        "Können Sie mir die Tastenkürzel zeigen?",
        "Wie erstelle ich eine Base?",
        # A pointing word after the topic belongs to it: no earlier turn is needed.
        "jump to a file quickly by typing its name",
        "Unter Debian ein Paket auf seiner Version festhalten, damit ein Upgrade es nicht anfasst",
        "Wie definiere ich ein Trait und implementiere es für einen Typ?",
        "",
    ):
        assert not analyze(text).refers_back, text


def test_a_message_pointing_back_takes_more_history() -> None:
    """The history share of one content-word class lower, unless recall.followUpCues is off."""
    from sidecar.config import RecallConfig
    from sidecar.search.recall import history_weight

    rc = RecallConfig()
    assert history_weight(rc, analyze("what does the sync service cost")) == rc.history_weight_long
    assert history_weight(rc, analyze("what does it cost")) == rc.history_weight_none
    long_follow_up = analyze("and how does the sync service count devices")
    assert history_weight(rc, long_follow_up) == rc.history_weight_short
    assert history_weight(rc, analyze("and how often?")) == rc.history_weight_none
    off = RecallConfig(follow_up_cues=False)
    assert history_weight(off, analyze("what does it cost")) == off.history_weight_short


def test_a_chunk_shares_its_whole_notes_keyword_evidence() -> None:
    """With ``page_share`` p a chunk's keyword part is (1-p) of its own BM25 and p of its note's,
    each on its own ideal: the vector arm's chunk of the note that holds the question's words
    in different sections gains, though none of its chunks holds them all. Rank fusion and
    min-max ignore it."""
    scale = Scale(cosine_floor=0.2, cosine_full=0.7, bm25_ideal=10.0, page_ideal=20.0)
    cands = [
        Candidate("spread", "vault/a", "vault", 1, 2, vec=0.45, bm25=2.0, page_bm25=20.0),
        Candidate("vector-only", "vault/a", "vault", 5, 6, vec=0.5, page_bm25=20.0),
        Candidate("dense", "vault/b", "vault", 1, 2, vec=0.45, bm25=6.0, page_bm25=6.0),
        Candidate("unrelated", "vault/a", "vault", 9, 9, vec=0.15, page_bm25=20.0),
    ]

    def fused(**kw: object) -> dict[str, Scored]:
        out = fuse(cands, vector_weight=0.7, source_boosts={}, scale=scale, **kw)  # type: ignore[arg-type]
        return {s.candidate.chunk_id: s for s in out}

    alone = fused()
    assert alone["dense"].score > alone["spread"].score  # chunks alone: the denser chunk wins
    assert abs(alone["vector-only"].relevance - 0.7 * 0.6) < 1e-9
    shared = fused(page_share=0.5)
    assert abs(shared["spread"].relevance - (0.7 * 0.5 + 0.3 * (0.5 * 0.2 + 0.5 * 1.0))) < 1e-9
    assert abs(shared["vector-only"].relevance - (0.7 * 0.6 + 0.3 * 0.5)) < 1e-9
    assert abs(shared["dense"].relevance - (0.7 * 0.5 + 0.3 * (0.5 * 0.6 + 0.5 * 0.3))) < 1e-9
    assert shared["spread"].score > shared["dense"].score
    # Below the unrelated cosine and without the words itself: its note's words do not lift it.
    assert shared["unrelated"].relevance == 0.0 == alone["unrelated"].relevance
    ranks = fused(page_share=0.5, method="rrf")
    assert ranks["dense"].bm25_norm == 1.0 and "vector-only" not in {
        k for k, s in ranks.items() if s.bm25_norm > 0
    }


def test_split_clauses_find_a_german_verb_left_apart_from_its_particle() -> None:
    """A clause ending with a verb particle offers the words of its verb's place; the notes decide
    which makes a verb with it (Retriever.separated). Two particles are tried together first."""
    assert [(c.verbs, c.particles) for c in split_clauses("Wie richte ich Obsidian Sync ein?")] == [
        (("Wie", "richte", "ich"), (("ein",),))
    ]
    clauses = split_clauses("Wie stelle ich die Notiz wieder her, und lade sie herunter?")
    assert [c.particles for c in clauses] == [(("wieder", "her"), ("her",)), (("herunter",),)]
    assert clauses[1].verbs == ("lade", "sie")
    # Joined already, no particle at the end, or nothing but the particle: nothing to join.
    assert split_clauses("Obsidian Sync einrichten") == ()
    assert split_clauses("Wie geht das?") == ()
    assert split_clauses("ein") == ()
