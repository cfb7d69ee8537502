"""How the keyword index reads text: its analyzers (as written, English- and German-stemmed),
its fields and their weights, and one chunk's document (``Bm25Doc``)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import tantivy

# The names are part of the index's schema: text prepared differently (CJK bigrams since 0.4, the
# file name in the title field since chunker 6) gets new names, so an index written the old way no
# longer opens and is refilled from the manifest.
ANALYZER = "sidecar_text_2"
ANALYZER_EN = "sidecar_en_2"
ANALYZER_DE = "sidecar_de_2"
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


def text_analyzer(stem: str | None = None) -> tantivy.TextAnalyzer:
    """Unicode words, lowercased, accents folded (Straße -> strasse), optionally stemmed."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(r"[\w]+"))
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if stem:
        builder = builder.filter(tantivy.Filter.stemmer(stem))
    return builder.build()


_ANALYZERS = {ANALYZER: None, ANALYZER_EN: "english", ANALYZER_DE: "german"}


@functools.cache
def all_analyzers() -> dict[str, tantivy.TextAnalyzer]:
    """The three analyzers, built once: every index registers the same ones (each index copies
    them), and building them took a third of opening an inbox's index, which a person's search
    over hundreds of inboxes did hundreds of times."""
    return {name: text_analyzer(stem) for name, stem in _ANALYZERS.items()}


def build_schema() -> tantivy.Schema:
    # Only term queries are ever run: no positions (the .pos files were a fifth of the index and
    # their pages stayed mapped); the filter fields need neither positions nor frequencies.
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("key", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("source", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("agent", stored=False, tokenizer_name="raw", index_option="basic")
    for name in FIELD_BOOSTS:
        sb.add_text_field(name, stored=False, tokenizer_name=FIELD_ANALYZER[name], index_option="freq")
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
