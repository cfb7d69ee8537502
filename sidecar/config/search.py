"""How a query is answered: the search, source boost and recall sections."""

from dataclasses import field

from sidecar.config.fields import _opt, section


# The order is the seed's (wiki > memory > vault), its spread is not: the seed's 1.4 / 0.85 / 0.65 put
# a wiki page 2.15x ahead, so a page naming a topic in passing outranked the note about it. On the
# German and help sets with one folder playing the wiki (bench/boosts.py, BENCHMARKS.md) that lead
# cost 0.075 MRR across 1,303 questions and pays only where 73 % of answers are wiki pages; 1.1
# keeps most of the wiki answers' gain and pays from 40 %.
@section
class SourceBoosts:
    vault: float = _opt(1.0, "Score factor for vault notes.", min=0.0, max=10.0)
    wiki: float = _opt(
        1.1,
        "Score factor for wiki pages: a lead among near-equal matches. 1.1 differs from the seed's "
        "1.4 (against vault 0.65): that lead put pages naming a topic in passing above the note about "
        "it (BENCHMARKS.md).",
        min=0.0,
        max=10.0,
    )
    memory: float = _opt(1.05, "Score factor for agent memory notes.", min=0.0, max=10.0)


@section
class SearchConfig:
    limit: int = _opt(10, "Hits returned when a request names no limit.", min=1, max=200)
    mask_secrets: bool = _opt(
        True,
        "Mask secrets (keys, tokens, passwords, card numbers, connection strings) in what is read "
        "of a note: hits' text, titles and headings, recall blocks, get, list, related and the "
        "outline; the notes themselves are never changed.",
    )
    min_score: float = _opt(
        0.1,
        "Hits whose relevance is below this are dropped. Relevance is absolute: 0 is what unrelated "
        "text scores, 1 a clear match in both arms; below 0.1 is noise (text matching nothing).",
        min=0.0,
    )
    fusion: str = _opt(
        "calibrated",
        "How the two arms are put on one scale before the weighted sum: calibrated (raw cosine and "
        "BM25 on absolute scales), rrf (ranks only) or minmax (each arm's best 1, worst 0).",
        choices=("calibrated", "rrf", "minmax"),
    )
    cosine_floor: float | None = _opt(
        None, "Cosine that counts as unrelated (relevance 0); default: the model's own.", min=-1.0, max=1.0
    )
    cosine_full: float | None = _opt(
        None,
        "Cosine that counts as a clear match (relevance 1); default: the model's own.",
        min=-1.0,
        max=1.0,
    )
    hub_damping: float = _opt(
        # help set (77 q, e5) MRR@10 0.688 -> 0.705, XQuAD-de nDCG@10 0.968 -> 0.969 (BENCHMARKS.md)
        0.5,
        "Share of a chunk's nearness to the centre of all vectors taken off its cosine: a chunk "
        "about everything a little (a command list) stops topping unrelated questions. 0: off.",
        min=0.0,
        max=2.0,
    )
    link_lift: float = _opt(
        0.0,
        "Lift for a note that the best notes of a result link to: its score times 1 + this x (share "
        "of the top 10 notes linking to it). 0: off (see BENCHMARKS.md for the measured effect).",
        min=0.0,
        max=2.0,
    )
    candidates: int = _opt(
        # 90: what every labeled set was measured with (eval.py asks limit 30, and the pool was 3x
        # the limit); 60 lost blind-help 0.008 MRR@10 (BENCHMARKS.md, issue 13).
        90,
        "Candidates each arm fetches before fusion (four times this with a filter), whatever the "
        "limit: the first hits never depend on the limit. A limit the pool cannot fill is filled "
        "from wider looks (200, then 600 candidates an arm), each one's new hits after the hits "
        "before it.",
        min=10,
    )
    query_cache: int = _opt(
        256,
        "Query vectors kept per model for repeated queries (an agent asking again, recall's turns). 0: off.",
        min=0,
        max=100_000,
    )
    vector_weight: float = _opt(
        # 0.6, not 0.7: on four question sets written blind (230 questions) e5's MRR@10 gains
        # 0.018-0.026 each and SciFact nDCG 0.715 -> 0.722, while the three sets the other
        # defaults were tuned on lose 0.004-0.016; MiniLM is unchanged within a question
        # (BENCHMARKS.md, sixteenth session).
        0.6,
        "Share of the vector arm in the fused score.",
        min=0.0,
        max=1.0,
    )
    short_query_bm25_weight: float = _opt(
        0.5, "BM25 share for queries of one or two content words.", min=0.0, max=1.0
    )
    stem_first: tuple[str, ...] = _opt(
        # Each built-in model sets its own (embedding.MODEL_DEFAULTS). e5, MRR@10: help sets
        # (77 / 45 q) 0.740 -> 0.755 / 0.833 -> 0.848, German (153 q) 0.673 -> 0.676, SciFact
        # nDCG 0.715 -> 0.714, XQuAD-de unchanged (BENCHMARKS.md, thirteenth session).
        (),
        "Languages whose queries count a word's stemmed forms as much as its exact form: for a "
        "query detected as one of them, the body as written and the body stemmed in that language "
        "swap weights. [] (or an empty environment value): the exact form leads for every query.",
        choices=("en", "de"),
    )
    rare_term_notes: int = _opt(
        5,
        "A query word the model splits into pieces (a name, code or identifier) and that at most "
        "this many notes contain makes keywords lead (rareTermVectorWeight); notes, not chunks: "
        "a word in the overlap of two chunks is one mention. 0: off.",
        min=0,
    )
    rare_term_share: float = _opt(
        # German set (153 q, e5) hit@5 / MRR@10 0.817 / 0.669 -> 0.837 / 0.675, help2 (77 q)
        # MRR 0.755 -> 0.760, SciFact 0.713 -> 0.712, help, XQuAD-de, identifiers unchanged
        # (0.0005 counted chunks; BENCHMARKS.md, fourteenth session).
        0.0002,
        "In a smaller index, rare means in at most this share of its chunks as notes (at least "
        "one): in a few thousand chunks ordinary words of a language the model reads are in two or "
        "three, a name or code in one.",
        min=0.0,
        max=1.0,
    )
    rare_term_across_languages: bool = _opt(
        # English help questions on the German corpus (139, e5) MRR@10 0.387 -> 0.397, German set
        # 0.679 -> 0.681, every other set the same; a word typed as a name cutting the share again
        # moved no question of any set (BENCHMARKS.md, "A rare word of the other language").
        True,
        "A rare word of a German or English query that the notes holding it write mostly in the "
        "other language (they hold more of its function words with it: an English word a German "
        "note quotes) keeps the rareTerm boost but cuts no vector share when the model reads both "
        "languages: the vector arm is the one that reads a question across languages. A word "
        "shaped like a code (a digit, an underscore, a capital inside) or typed as a name (a "
        "capital not first in a sentence, or all capitals) cuts it in any language. false: every "
        "rare word cuts it.",
    )
    rare_term_compounds: bool = _opt(
        # help2 (77 q, e5) MRR@10 0.767 -> 0.769 ("Stilregeln" 12th -> 7th), every other German,
        # help and language set the same; dropping the boost as well lost de 0.681 -> 0.677 and
        # short-de 0.565 -> 0.559 (BENCHMARKS.md, "A rare word that is an ordinary compound").
        # The German word list as a second source of parts, with the guard for names (e5): blind-de
        # 0.462 -> 0.468, blind-help 0.624 -> 0.634, compound-de 0.765 -> 0.789, the name sets and
        # every other set unchanged (BENCHMARKS.md, "Compounds split by a word list, names kept
        # whole").
        True,
        "A rare word of a German or English query (or of a query of no detected language, when "
        "the model reads German) that is an ordinary compound keeps the rareTerm boost but cuts "
        "no vector share: letters only (no digit, underscore or capital inside), it splits into "
        "two or more parts of at least four letters (a linking s between them allowed), each a "
        "word that more notes than a rare word's limit hold in the language's stemmed form "
        "('Textbeschreibung', 'Einstellungsdateien') or, in German, a word of the German word "
        "list installed with sidecar ('Bildschirmhelligkeit' where no note writes 'Helligkeit'). "
        "The list is made from film subtitles, so it holds names and English words: a word typed "
        "with a capital that it holds whole ('Frankfurt', 'Hoffmann') or one that splits into "
        "English words only ('mattermost', 'wordpress') is split by the notes alone. The model "
        "reads such a word from its parts; a name or code seldom splits so. false: every rare "
        "word cuts it.",
    )
    rare_term_vector_weight: float = _opt(
        0.3, "Vector share for queries with such a rare word.", min=0.0, max=1.0
    )
    rare_term_boost: float = _opt(
        # Every chunk holding the word as written, as it was counted (not a chunk with only a
        # stemmed form): German MRR@10 0.675 -> 0.678, SciFact 0.712 -> 0.714 (BENCHMARKS.md).
        1.5,
        "Factor for a chunk that contains such a rare word of the query as written.",
        min=0.0,
        max=10.0,
    )
    unmatched_keyword_cut: float = _opt(
        # 1.0: German MRR@10 compound-de 0.591 -> 0.765, en-de 0.397 -> 0.410 (BENCHMARKS.md,
        # "Query words no note holds, third try"). None for a query of no detected language under
        # a one-language model: MiniLM compound-de 0.352 -> 0.356, e5 unchanged (BENCHMARKS.md,
        # "Compounds split by a word list, names kept whole").
        1.0,
        "The keyword arm's share of the ranking shrinks by this times the square of the share of "
        "the query's content words (each weighed by its idf) that no note holds in any form the "
        "keyword arm searches (as written, in a title, English- or German-stemmed, folded): a "
        "typo, a spelling or a word of another language leaves the keyword arm ranking by the "
        "query's generic words alone. Not when every word is unmatched (the keyword arm finds "
        "nothing then), nor when the keyword arm's best note scores at least 1.6 times its second's "
        "(its matched words still single out a page); relevance (what minScore and recall's "
        "gates compare) keeps the share without it. Not for a query of no detected language when "
        "the model reads one language only (embedder.languages): its missing words are mostly of "
        "a language the model cannot read. 0: off.",
        min=0.0,
        max=1.0,
    )
    boosts: SourceBoosts = field(default_factory=SourceBoosts)
    slug_boost: float = _opt(
        # Off, unlike the seed's 1.15: nearly every title shares a generic query word ("notes",
        # "Notiz", "sync"), so the factor rewarded the wrong pages. Help sets (77 / 45 q, e5)
        # MRR@10 0.674 -> 0.688 / 0.773 -> 0.794; XQuAD-de unchanged (BENCHMARKS.md).
        1.0,
        "Factor for a note whose file name, title or an alias contains a content word of the query. 1.0 "
        "(off) differs from the seed's 1.15: most titles share a generic query word, so it lifted "
        "wrong pages (BENCHMARKS.md); the multi-word fullNameBoost still applies.",
        min=0.0,
        max=10.0,
    )
    full_name_boost: float = _opt(
        1.3,
        "Factor when the query contains every word of a note's title or alias (2+ words); a query "
        "that is exactly a title or alias (one word too) puts that note first. 1.0: both off.",
        min=0.0,
        max=10.0,
    )
    log_folder: str = _opt("logs", "Folder of the wiki that holds change logs.")
    log_demotion: float = _opt(
        0.6, "Factor for wiki log pages unless the query is about dates or changes.", min=0.0, max=10.0
    )
    page_keywords: float = _opt(
        # German set MRR@10 (e5 / MiniLM): 0 -> 0.657 / 0.558, 0.3 -> 0.673 / 0.576, 0.5 -> 0.671 /
        # 0.589; help sets, SciFact, XQuAD-de within a question; identifiers 1.000 / 0.994 / 0.988
        # at 0 / 0.3 / 0.5 (BENCHMARKS.md, twelfth session)
        0.3,
        "Share of a chunk's keyword score that comes from its whole note: the words of a question "
        "spread over the sections of the page that answers it. 0: chunks alone.",
        min=0.0,
        max=1.0,
    )
    rank_share: float = _opt(
        # e5, MRR@10 (nDCG@10): German 0.678 -> 0.684, help2 0.760 -> 0.762 (hit@5 0.857 ->
        # 0.870), help 0.848, SciFact (0.714 -> 0.715), XQuAD-de (0.970 -> 0.971), identifiers
        # unchanged; 0.1 gains SciFact 0.003 more and costs MiniLM's German set two more
        # questions at hit@5; 0.2 is lower on German and help (BENCHMARKS.md, fifteenth session).
        0.05,
        "Each arm's order beside its calibrated score (calibrated fusion): a chunk gains this share "
        "of the arm's weight for a first place, less for later ones (reciprocal rank). A small "
        "model's cosines sit in a narrow band where a clear first and a crowd of neighbours look "
        "alike. 0: scores alone.",
        min=0.0,
        max=1.0,
    )
    page_support: float = _opt(
        # nDCG@10 SciFact / help set: 0 -> 0.709 / 0.726, 0.05 -> 0.703, 0.1 -> 0.699 / 0.740,
        # 0.2 -> 0.696 / 0.724 (BENCHMARKS.md)
        0.05,
        "A page's best chunk gains this share of its next two chunks reaching half its score.",
        min=0.0,
        max=1.0,
    )
    max_hits_per_note: int = _opt(2, "Most hits of one note in a result (0: no cap).", min=0, max=100)
    fold: str = _opt(
        "overlap",
        "Fold a chunk into a better hit of the same note that contains it (contained) or also one it "
        "overlaps (overlap); off keeps all.",
        choices=("overlap", "contained", "off"),
    )
    ann_threshold: int = _opt(
        20_000,
        "Chunks from which vector search uses an IVF index instead of an exact scan (0: never).",
        min=0,
    )
    ann_index: str = _opt(
        "ivf_pq",
        "Kind of vector index above annThreshold: ivf_pq (least memory), ivf_sq, ivf_rq, ivf_hnsw_sq.",
        choices=("ivf_pq", "ivf_sq", "ivf_rq", "ivf_hnsw_sq"),
    )
    ann_probes: int = _opt(12, "IVF partitions searched per query (more: closer to exact, slower).", min=1)
    foreign_vector_weight: float = _opt(
        0.25,  # XQuAD-de sweep: 0.10 -> 0.930, 0.20 -> 0.931, 0.25 -> 0.932, 0.35 -> 0.929 nDCG@10
        "Vector share for queries in a language the model does not know (embedder.languages).",
        min=0.0,
        max=1.0,
    )


@section
class RecallConfig:
    limit: int = _opt(5, "Most notes in an injected context block.", min=1, max=50)
    token_budget: int = _opt(1500, "Token budget of the context block.", min=100, max=50_000)
    score_floor: float = _opt(0.35, "Hits whose relevance is below this stay out of the block.", min=0.0)
    min_similarity: float = _opt(
        0.4,
        "Hits whose calibrated cosine to the message (0 unrelated, 1 a clear match; see "
        "search.cosineFloor) is below this stay out (keeps small talk empty); for a message in a "
        "language the model does not read (embedder.languages), its calibrated BM25 score too.",
        min=0.0,
        max=1.0,
    )
    history_turns: int = _opt(3, "Previous turns blended into the query vector.", min=0, max=20)
    candidates: int = _opt(
        # recall runs on every message: the pool it had at every limit up to 20 (3x the limit,
        # at least 60), also its latency; a pool of 90 lost four follow-ups of the help sets a
        # place each (BENCHMARKS.md, issue 13).
        60,
        "Candidates each arm fetches for recall (four times this with a filter), whatever the limit. "
        "A limit the pool cannot fill is filled from wider looks, as a search's.",
        min=10,
    )
    history_head_chars: int = _opt(400, "Only the head of each previous turn is embedded.", min=20)
    history_words: int = _opt(
        24, "Most content words of the previous turns added to the keyword query (newest first).", min=0
    )
    history_weight_none: float = _opt(
        0.7, "History share of the query vector for a message without content words.", min=0.0, max=1.0
    )
    history_weight_short: float = _opt(
        0.4, "History share for a message of one or two content words.", min=0.0, max=1.0
    )
    history_weight_long: float = _opt(
        0.2, "History share for a message of three or more content words.", min=0.0, max=1.0
    )
    follow_up_cues: bool = _opt(
        # follow-ups of the own sets (41 q, e5) MRR@10 0.575 -> 0.669 (German), 0.833 -> 0.889 (help2),
        # help set hit@5 0.911 -> 0.933 (BENCHMARKS.md)
        True,
        "A message that opens with 'and'/'und' or points back ('it', 'them', 'das', 'dort', 'auch') "
        "takes the history share of one content-word class lower (long as short, short as none).",
    )
