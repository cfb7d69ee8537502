"""How the keyword index reads text: its analyzers (as written, English- and German-stemmed),
its fields and their weights, and one chunk's document (``Bm25Doc``)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import tantivy

# The names are part of the index's schema: text prepared differently (CJK bigrams since 0.4, the
# file name in the title field since chunker 6, the word of layout 3) gets new names, so an index
# written the old way no longer opens with the new ones. Layout 3's word holds letters and digits
# with underscores only inside: Markdown's underscore emphasis ("_Cargo.toml_", "__Anhänge__")
# made "_cargo", "toml_" and "__anhänge__" of layout 2's ``\w+``, words no query meets
# (thousands in a vault); "my_function" stays one word.
ANALYZER = "sidecar_text_3"
ANALYZER_EN = "sidecar_en_3"
ANALYZER_DE = "sidecar_de_3"
WORD_PATTERN = r"[^\W_]+(?:_+[^\W_]+)*"
# Layout 2, read while an upgrade refills the index into a side folder (``index.upgrade``): its
# searches answer from the old index, whose words only its own analyzers read. Can go once no
# install holds a layout-2 index (then an index of layout 2 is replaced at the start, as layout 1 is).
_LAYOUT_2 = {"sidecar_text_2": None, "sidecar_en_2": "english", "sidecar_de_2": "german"}
_LAYOUT_2_PATTERN = r"[\w]+"
# A chunk's heading path is part of its body: a heading word is one more occurrence, saturating
# with the body's own (BM25F's idea). Scored as a field of its own, a short heading path got a
# high idf and nearly no length penalty, and a generic word there outweighed the body (keyword arm
# on the German set MRR 0.45 -> 0.54, SciFact nDCG 0.62 -> 0.66; BENCHMARKS.md, twelfth session).
# The note's title and aliases stay a field of their own, counted once beside the body.
# The body is indexed three times: as written (folded), English-stemmed and German-stemmed, so a
# note matches in its own language without detecting it. The exact form counts most unless the
# query's language is known: then that language's stemmed copy does (``field_boosts``).
FIELD_BOOSTS = {"title": 1.0, "body": 1.0, "body_en": 0.5, "body_de": 0.5}


def field_boosts(stem: str | None = None) -> dict[str, float]:
    """The field weights; with ``stem`` (a query's language) the body as written and the body
    stemmed in that language swap weights: a word's other forms in the query's language count
    as much as its exact form."""
    boosts = dict(FIELD_BOOSTS)
    if stem and f"body_{stem}" in boosts:
        boosts["body"], boosts[f"body_{stem}"] = boosts[f"body_{stem}"], boosts["body"]
    return boosts


FIELD_ANALYZER = {"title": ANALYZER, "body": ANALYZER, "body_en": ANALYZER_EN, "body_de": ANALYZER_DE}
# str.replace per letter: str.translate looks every character up in a dict, 75 times slower on
# a note's text, and the German field folds every chunk and page of a sweep.
_UMLAUT = (("ä", "a"), ("ö", "o"), ("ü", "u"), ("Ä", "a"), ("Ö", "o"), ("Ü", "u"), ("ß", "ss"))
_DIGRAPH = re.compile(r"(?<=[a-z])([aou])e", re.IGNORECASE)


def german_fold(text: str) -> str:
    """Kündigung, Kuendigung and Kundigung meet as kundigung; Straße and Strasse as strasse."""
    for letter, plain in _UMLAUT:
        if letter in text:
            text = text.replace(letter, plain)
    return _DIGRAPH.sub(r"\1", text)


def text_analyzer(stem: str | None = None, pattern: str = WORD_PATTERN) -> tantivy.TextAnalyzer:
    """Unicode words, lowercased, accents folded (Straße -> strasse), optionally stemmed."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(pattern))
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if stem:
        builder = builder.filter(tantivy.Filter.stemmer(stem))
    return builder.build()


_ANALYZERS = {ANALYZER: None, ANALYZER_EN: "english", ANALYZER_DE: "german"}
READABLE_LAYOUTS = (2, 3)  # the layouts this version opens: 3 its own, 2 until the upgrade's swap


@functools.cache
def all_analyzers(layout: int = 3) -> dict[str, tantivy.TextAnalyzer]:
    """The three analyzers of ``layout``, built once: every index registers the same ones (each
    index copies them), and building them took a third of opening an inbox's index, which a
    person's search over hundreds of inboxes did hundreds of times."""
    if layout == 2:
        return {name: text_analyzer(stem, _LAYOUT_2_PATTERN) for name, stem in _LAYOUT_2.items()}
    return {name: text_analyzer(stem) for name, stem in _ANALYZERS.items()}


def field_analyzers(layout: int = 3) -> dict[str, str]:
    """Each text field's analyzer name in ``layout``."""
    if layout == 2:
        return {f: name.replace("_3", "_2") for f, name in FIELD_ANALYZER.items()}
    return dict(FIELD_ANALYZER)


def build_schema(layout: int = 3) -> tantivy.Schema:
    # Only term queries are ever run: no positions (the .pos files were a fifth of the index and
    # their pages stayed mapped); the filter fields need neither positions nor frequencies.
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("key", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("source", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("agent", stored=False, tokenizer_name="raw", index_option="basic")
    analyzers = field_analyzers(layout)
    for name in FIELD_BOOSTS:
        sb.add_text_field(name, stored=False, tokenizer_name=analyzers[name], index_option="freq")
    return sb.build()


@dataclass(frozen=True)
class Bm25Doc:
    chunk_id: str
    key: str
    source: str
    agent: str
    title: str  # the note's title and aliases
    headings: str  # the chunk's heading path, indexed as part of the body
    body: str

    @classmethod
    def of(
        cls,
        chunk_id: str,
        key: str,
        source: str,
        agent: str,
        *,
        title: str,
        aliases: Sequence[str],
        headings: Sequence[str],
        body: str,
    ) -> Bm25Doc:
        """One chunk's document, the same whether written from a note or refilled from the manifest.
        Its title field holds the note's title, its file name when a ``title`` property differs
        (the name Obsidian shows everywhere: a web clipping's "Rezept Linsensuppe" was not found
        by "Linsensuppe") and its aliases."""
        name = key.rsplit("/", 1)[-1]
        names = [title] if name.casefold() == title.casefold() else [title, name]
        return cls(chunk_id, key, source, agent, " ".join([*names, *aliases]), " ".join(headings), body)
