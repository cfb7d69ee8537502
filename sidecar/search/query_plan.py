"""How a query is read and weighed before the arms search, a mixin of ``Retriever``
(``retrieval``): the query's spelling as read (umlauts), its rare words, the words the keyword arm
looks for, the language whose stemmed forms lead, each arm's share, and the serving model's own
settings (also while a model switch migrates). Its own module because the plan decides nothing
about a single candidate; ``why`` and ``recall`` read the query the same way. The state it works
on is the ``Retriever``'s own, made in ``Retriever.__init__``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sidecar.config import MODEL_DEFAULTS, RecallConfig, SearchConfig
from sidecar.contracts.errors import StoreError
from sidecar.index.vectoring import Stores, VectorSet
from sidecar.model.embedder import cosine_range, model_name
from sidecar.search.fusion import Scale
from sidecar.search.query import QueryAnalysis, a_form_of, analyze, split_clauses, word_forms
from sidecar.search.querycache import QueryCache
from sidecar.search.querywords import BmParts, _language_set, _stopword_stems, _with_umlauts, unread_words
from sidecar.search.wordlist import WordLists, holds_whole, is_english_word, is_german_word, lists
from sidecar.stores.bm25_text import german_fold

# recall's gates a model may set (MODEL_DEFAULTS), by attribute; a model without its own has these.
_GATES = {"recall.minSimilarity": "min_similarity", "recall.scoreFloor": "score_floor"}
_RECALL_DEFAULTS = {attr: getattr(RecallConfig(), attr) for attr in _GATES.values()}


def _own_settings(serving: VectorSet) -> dict[str, Any]:
    """The serving model's own settings (MODEL_DEFAULTS): what counts for the keys left to the
    models, also while a switch migrates and the previous model still answers."""
    return MODEL_DEFAULTS.get(model_name(serving.model.model_id), {})


# Endings of a German verb's present-tense forms ("richte", "lädt", "stellst", "laden"). A strong
# verb's past form ends otherwise ("nahm", "gab") and, joined with its particle, is often the stem
# of a noun ("aufnahm" of "Aufnahme", "angab" of "Angabe"), not a form of the verb.
_PRESENT_ENDINGS = ("e", "st", "t", "en", "n")


# Function words that tell a note's language: frequent, and of one of the two languages only.
_MARKERS = {
    "de": (
        *("und", "der", "das", "ist", "nicht", "mit", "ein", "eine", "sich", "wird", "auch"),
        *("den", "zu", "von", "für"),  # a tldr page without any of the others has these
    ),
    "en": ("the", "and", "is", "of", "to", "with", "you", "that", "this", "are", "can"),
}
# The fields the keyword arm searches a query word in (``Bm25Index.search``).
_KEYWORD_FIELDS = ("body", "title", "body_en", "body_de")
# A word shaped like a code or identifier: a digit, an underscore, or a capital after the first letter.
_CODE_SHAPE = re.compile(r"[\d_]|.[A-Z]")


# Shortest part of a compound counted as a word ("rate" of "Abtastrate"; not "uml" of "plantuml").
_PART_MIN = 4


# What a part of a compound is (``_splits``): no word, a word of the language, a word the German
# list holds that English uses more ("matter", "press": the list is made from subtitles). A plain
# yes or no (a bool) reads as the first two.
_NO_WORD, _WORD, _ENGLISH_WORD = 0, 1, 2


def _splits(word: str, part: Callable[[str], int]) -> bool:
    """Whether ``word`` (lower case) is two or more parts of at least ``_PART_MIN`` letters, each
    a word by ``part`` and at least one not an English one (a name made of English words,
    "matter|most", "word|press", is no German compound), a German linking "s" allowed after a
    part ("Arbeit|s|speicher")."""
    n = len(word)
    ends = {0: False}  # where a run of parts from the start ends: whether one is no English word
    for i in range(n):
        if i not in ends:
            continue
        for j in range(i + _PART_MIN, n + 1):
            # The whole word is no part of itself: its stem may be common when the form is rare.
            kind = _NO_WORD if j - i == n else part(word[i:j])
            if kind == _NO_WORD:
                continue
            native = ends[i] or kind == _WORD
            ends[j] = ends.get(j, False) or native
            if j + 1 < n and word[j] == "s":  # a linking "s" between parts, not a plural's
                ends[j + 1] = ends.get(j + 1, False) or native
    return ends.get(n, False)


def _plain(word: str) -> bool:
    """Letters only, no capital after the first: what a compound of a language looks like."""
    return word.isalpha() and word[1:] == word[1:].lower()


def _typed_as_name(word: str, text: str) -> bool:
    """Whether ``word`` is typed as a name in ``text``: all in capitals ("NAS"), or with a
    capital where a sentence does not begin ("ask Brandauer"). A capital first in a sentence is
    the sentence's, not the word's ("Jekyll" of "Jekyll themes?" reads as lower case)."""
    if len(word) > 1 and word.isupper():
        return True
    if not word[:1].isupper():
        return False
    for m in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text):
        before = text[: m.start()].rstrip(" \t\n\"'«»„“”‚‘’([")
        if before and before[-1] not in ".!?:":
            return True
    return False


@dataclass(frozen=True)
class Separated:
    """A German verb split from its particles ("richte ... ein"), as typed, and the joined verb
    as the notes write it most ("einrichten")."""

    verb: str
    particles: tuple[str, ...]
    form: str


class QueryPlan:
    """The query reading and weighing of a ``Retriever`` (which sets the state below)."""

    languages: frozenset[str]
    model_stem: bool
    model_gates: frozenset[str]
    stores: Stores
    cfg: SearchConfig
    recall_cfg: RecallConfig
    queries: QueryCache
    # The model cache holding the German word list's file (``wordlist``); None: no list.
    word_lists: Path | None

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

    def reads(self, qa: QueryAnalysis) -> bool:
        """Whether the serving model reads the query's language (its ``embedder.languages``; while
        a model switch migrates, the previous model still serves and its languages count);
        undecided counts as read."""
        return not qa.language or self._reads_language(qa.language)

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

    def vector_weight(self, qa: QueryAnalysis, rare: Sequence[str] = (), unmatched: float = 0.0) -> float:
        """Share of the vector arm: less for short queries, for languages the model reads poorly
        and for queries naming something rare the model cannot read (see ``rare_words``; pass
        only those that cut it, ``cutting``); more for a query with words no note holds
        (``unmatched``, see ``unmatched_share``; by its square). The cuts come after the lift: a rare word's
        exact match is the keyword arm's best evidence, and a query the model cannot read has
        no better arm."""
        cfg = self.cfg
        weight = 1.0 - cfg.short_query_bm25_weight if qa.word_class == 1 else cfg.vector_weight
        if 0.0 < unmatched < 1.0:
            # Squared: a long question with one unknown word barely moves (BENCHMARKS.md).
            weight += (1.0 - weight) * cfg.unmatched_keyword_cut * unmatched**2
        if not self.reads(qa):
            weight = min(weight, cfg.foreign_vector_weight)
        if rare:
            weight = min(weight, cfg.rare_term_vector_weight)
        return weight

    def plan(self, qa: QueryAnalysis, agent: str | None = None) -> tuple[tuple[str, ...], float]:
        """The query's rare words (in the vault, the wiki and ``agent``'s memory) and the vector
        share they lead to."""
        rare, weight, _ = self.shares(qa, agent)
        return rare, weight

    def shares(self, qa: QueryAnalysis, agent: str | None = None) -> tuple[tuple[str, ...], float, float]:
        """``plan``'s rare words and vector share (the ranking's), and the vector share relevance
        is weighed at: the same without the lift for words no note holds. Relevance is the figure
        the floors compare (minScore, recall's gates); the lift orders candidates among
        themselves, and weighing relevance by it let a message of small talk with one unknown
        word pass recall's gates on its cosine."""
        rare = self.rare_words(qa, agent)
        cut = self.cutting(rare, qa, agent)
        if cut and self.cfg.rare_term_compounds:
            # An ordinary compound keeps its rareTerm boost (the note holding it as asked is often
            # the one meant) but cuts no share: dropping the boost too lost more than it won.
            compounds = set(self.compounds(cut, qa, agent))
            cut = tuple(w for w in cut if w not in compounds)
        unmatched = self.unmatched_share(qa, agent) if self._lifts(qa) else 0.0
        return rare, self.vector_weight(qa, cut, unmatched), self.vector_weight(qa, cut)

    def _lifts(self, qa: QueryAnalysis) -> bool:
        """Whether words no note holds may lift the vector share (``search.unmatchedKeywordCut``):
        not for a query of no detected language when the model reads only one. Such a query
        ("Verzeichniskopie rekursiv") counts as read, but the words no note holds are mostly of the
        language the model does not read, and the lift handed it to a vector arm blind to them."""
        if self.cfg.unmatched_keyword_cut <= 0:
            return False
        return bool(qa.language) or self._multilingual()

    def _multilingual(self) -> bool:
        """Whether the serving model reads more than one language (``embedder.languages``)."""
        serving = self.stores.serving
        own = getattr(serving.model, "languages", None) if serving is not None else None
        languages = _language_set(own) if isinstance(own, str) else self.languages
        return "all" in languages or len(languages) > 1

    def compounds(self, rare: Sequence[str], qa: QueryAnalysis, agent: str | None = None) -> tuple[str, ...]:
        """Those of the rare words ``rare`` that are ordinary compounds of the query's language,
        German or English (``search.rareTermCompounds``): letters only (no digit, underscore or
        capital inside), splitting into two or more parts of at least ``_PART_MIN`` letters (a
        German linking "s" between them allowed), each a word that more notes than a rare word's
        limit hold in the language's stemmed form ("Text|beschreibung", "Einstellung|s|dateien")
        or, in German, a word of the German word list that ships with the install (``wordlist``:
        "Abtast|rate", "Bildschirm|helligkeit" where no note writes "Rate" or "Helligkeit"
        alone). German capitalises every noun, so the capital that tells a name in English tells
        nothing here. The model reads such a word from its parts; a name or code seldom splits
        so ("plant|uml": "uml" is too short, "zotero" not at all; "Docker|file": neither part is
        a German word). A query of no detected language ("Verzeichniskopie rekursiv") is tried as
        either when the model reads German. English takes no list: its closed compounds are words
        of their own, and a list splits its suffixes ("accident|ally") and product names
        ("Next|cloud") as parts."""
        lang = qa.language
        if lang in _MARKERS:
            languages: tuple[str, ...] = (lang,)
        elif not lang and self._reads_language("de"):
            # Undecided ("Verzeichniskopie rekursiv"): tried as either, when the model reads
            # German; a model that does not is better kept to the keyword arm's lead.
            languages = ("de", "en")
        else:
            return ()
        try:
            limit = self.rare_limit()
            found: set[str] = set()
            # The list only where a model that reads German serves: its share is what a compound
            # keeps (keyword-only search has none, an English model reads no German parts).
            listing = self._lists_read()
            for language in languages:
                notes = self._ordinary_part(language, limit, agent, None)
                german = language == "de"
                listed = self._ordinary_part(language, limit, agent, listing) if german and listing else None
                for w in rare:
                    if w in found or not _plain(w):
                        continue
                    low = w.lower()
                    # A noun or name the list holds whole ("Frankfurt", "Hoffmann": the list holds
                    # names) is split by the notes only, as without a list; a word typed in lower
                    # case the list holds whole is an ordinary word ("kostenpflichtigen").
                    if _splits(low, notes) or (
                        listing is not None
                        and listed is not None
                        and not (w[:1].isupper() and holds_whole(listing(), low))
                        and _splits(low, listed)
                    ):
                        found.add(w)
            return tuple(w for w in rare if w in found)
        except StoreError:  # a damaged index: the search reports it
            return ()

    def _lists_read(self) -> Callable[[], WordLists] | None:
        """How to get the German word list, when a model that reads German serves (None else:
        the list is then never opened or built)."""
        folder = self.word_lists
        if folder is None or self.stores.serving is None or not self._reads_language("de"):
            return None
        return lambda: lists(folder, wait=False)

    def _ordinary_part(
        self, lang: str, limit: int, agent: str | None, listed: Callable[[], WordLists] | None
    ) -> Callable[[str], int]:
        """What a part of a compound is in ``lang`` (``_splits``): a word when more notes than
        ``limit`` hold it in the language's stemmed field or, with ``listed``, when the German word
        list holds it (an English word when English uses it more). The list is opened by the
        first part the notes do not hold."""
        field = f"body_{lang}"
        bm25 = self.stores.bm25
        known: dict[str, int] = {}

        def part(text: str) -> int:
            if text not in known:
                if bm25.doc_freq(text, pages=True, agent=agent, field=field) > limit:
                    known[text] = _WORD
                elif listed is not None and is_german_word(words := listed(), text):
                    known[text] = _ENGLISH_WORD if is_english_word(words, text) else _WORD
                else:
                    known[text] = _NO_WORD
            return known[text]

        return part

    def unmatched_share(self, qa: QueryAnalysis, agent: str | None = None) -> float:
        """The share of the query's content words, each weighed by its idf over the chunks (the
        vault's, the wiki's and ``agent``'s memory), that no chunk holds in any form the keyword
        arm searches: as written, in a title (also folded: "Kuendigung" meets "Kündigung"),
        English- or German-stemmed (ascii-folded). Such a word (a typo, a spelling the notes do
        not use, an English word no German note holds) leaves the keyword arm ranking by the
        query's other, often generic, words; idf, not a plain count, because a missing word
        carries more than a generic one that is found. 0 on a damaged index (the search
        reports it)."""
        words = list(dict.fromkeys(qa.content_words))
        if not words:
            return 0.0
        bm25 = self.stores.bm25
        try:
            n = max(bm25.collection_size(), 1)
            total = missing = 0.0
            for w in words:
                df = max(
                    *(bm25.doc_freq(w, agent=agent, field=f) for f in _KEYWORD_FIELDS),
                    bm25.doc_freq(german_fold(w), agent=agent, field="title"),
                )
                idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
                total += idf
                missing += idf if df == 0 else 0.0
        except StoreError:  # a damaged index: the search reports it
            return 0.0
        return missing / total if total > 0 else 0.0

    def cutting(self, rare: Sequence[str], qa: QueryAnalysis, agent: str | None = None) -> tuple[str, ...]:
        """Those of the rare words ``rare`` that cut the vector share. Not a word the notes holding
        it write in the other language than the query's, German or English, when the model reads
        both (``search.rareTermAcrossLanguages``): in a German vault an English question's ordinary
        words ("introduced", "leaks", "metadata") are rare because a German note quotes one, and
        the cut left a question the keyword arm cannot read to the keyword arm (the vector arm is
        the one arm that reads across languages). It keeps the rareTerm boost: the note quoting
        the word as asked is often the one meant (a command's English subcommand, "Jekyll").
        A word shaped like a code cuts in any language: no model reads "kq7z3"; so does a word
        typed as a name (a capital inside a sentence, or all capitals: "Brandauer", "Zotero"),
        which the model cannot read in either language. The notes' language is a majority: they
        hold more function words of it than of the query's with the word (``_written_in``)."""
        lang = qa.language
        if not rare or not self.cfg.rare_term_across_languages or lang not in _MARKERS:
            return tuple(rare)
        other = "en" if lang == "de" else "de"
        if not self.reads(qa) or not self._reads_language(other):
            return tuple(rare)
        try:
            return tuple(
                w
                for w in rare
                if _CODE_SHAPE.search(w)
                or _typed_as_name(w, qa.text)
                or not self._written_in(w, other, lang, agent)
            )
        except StoreError:  # a damaged index: the search reports it
            return tuple(rare)

    def _reads_language(self, lang: str) -> bool:
        """Whether the serving model reads ``lang`` (see ``reads``)."""
        serving = self.stores.serving
        own = getattr(serving.model, "languages", None) if serving is not None else None
        languages = _language_set(own) if isinstance(own, str) else self.languages
        return "all" in languages or lang in languages

    def _written_in(self, word: str, lang: str, other: str, agent: str | None) -> bool:
        """Whether the notes holding ``word`` are mostly of ``lang`` rather than ``other``, by how
        often they hold each language's function words with it (few notes hold a rare word)."""
        bm25 = self.stores.bm25
        mine = sum(bm25.held_with(word, _MARKERS[lang], pages=True, agent=agent))
        return mine > sum(bm25.held_with(word, _MARKERS[other], pages=True, agent=agent))

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
        clause's first such word in a present-tense form ("nahm ... auf" is not joined: its
        "aufnahm" is the stem of the noun "Aufnahme") and most particles. The keyword arm searches
        the joined verb as the notes write it most ("einrichten"); neither part of it is a rare
        word."""
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
                    if verb.lower().endswith(_PRESENT_ENDINGS)
                    and bm25.doc_freq("".join(particles) + verb, pages=True, agent=agent, field="body_de") > 0
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
