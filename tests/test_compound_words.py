"""Compounds whose parts no note writes alone, split by the German word list that ships with the
install (``sidecar.search.wordlist``), and the lift for words no note holds in a query of no
detected language (``search.unmatchedKeywordCut``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecar.search.query import analyze
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write

CUT = 0.3  # search.rareTermVectorWeight


def test_the_word_list_holds_german_words_and_verb_stems() -> None:
    """The German list holds "Rate" and "Helligkeit", and a verb's stem ("abtast" of "abtasten"),
    but neither "docker" nor "file"; nothing shorter than four letters counts."""
    from sidecar.search.wordlist import is_german_word  # a module of its own: imported here alone

    assert is_german_word("rate") and is_german_word("helligkeit") and is_german_word("abtast")
    assert not is_german_word("docker") and not is_german_word("file")
    assert not is_german_word("rat")


class PiecesEmbedder(FakeEmbedder):
    """The fake embedder with a word-piece count like a real model's: a long word is several
    pieces (what makes a word few notes hold a rare word)."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [sum(1 + len(w) // 5 for w in t.split()) for t in texts]


@pytest.fixture
def sound_vault(tmp_path: Path) -> Path:
    """A German vault where "Abtastrate", "Bildschirmhelligkeit" and "Verzeichniskopie" are each
    in one note and no note writes "Rate", "Abtasten", "Helligkeit", "Verzeichnis" or "Kopie"
    alone; "zotero", "Dockerfile" and "accidentally" each in one note too."""
    v = tmp_path / "v"
    write(
        v / "Aufnahme.md",
        "# Aufnahme\n\nDie Abtastrate der Aufnahme ist hoch, und die Bildschirmhelligkeit ist "
        "gering. Das Programm zotero liest sie, das Dockerfile baut sie, die Verzeichniskopie "
        "ist rekursiv.\n",
    )
    write(v / "Sync.md", "# Sync\n\nThe notes were accidentally synced, and this is fine.\n")
    for i in range(4):
        write(
            v / f"Notiz {i}.md",
            f"# Notiz {i}\n\nDie Aufnahme dieser Notiz ist die Nummer {i}: ein Programm liest "
            "sie rekursiv, und der Bildschirm ist hell.\n",
        )
    return v


def _plans(
    make_cfg: Any, vault: Path, questions: tuple[str, ...], compounds: bool = False, **flags: Any
) -> list[Any]:
    """Each question's rare words and vector share (``compounds``: the rare words read as compounds)."""
    h = Harness(make_cfg(vault, **flags), PiecesEmbedder())
    try:
        h.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall, h.cfg.embedder.languages)
        if compounds:
            return [r.compounds(r.rare_words(analyze(q)), analyze(q)) for q in questions]
        return [r.plan(analyze(q)) for q in questions]
    finally:
        h.close()


def test_a_compound_whose_parts_no_note_holds_alone_cuts_no_vector_share(
    make_cfg: Any, sound_vault: Path
) -> None:
    """ "Abtastrate" ("abtast" the stem of "abtasten", "rate") and "Bildschirmhelligkeit" are
    ordinary German compounds the model reads, though no note writes their parts alone: split by
    the German word list they keep the rareTerm boost and cut no vector share (split by the notes
    alone, both cut it). A short query of no detected language ("Verzeichniskopie rekursiv") is
    tried as German, when the model reads German. A name no list splits ("zotero") still cuts
    the share."""
    questions = (
        "Welche Abtastrate hat die Aufnahme?",
        "Wie hell ist die Bildschirmhelligkeit?",
        "Verzeichniskopie rekursiv",
        "Wie liest das Programm zotero die Aufnahme?",
    )
    assert [analyze(q).language for q in questions] == ["de", "de", None, "de"]
    rate, light, copy, name = _plans(make_cfg, sound_vault, questions)
    assert rate[0] == ("Abtastrate",) and rate[1] > CUT
    assert light[0] == ("Bildschirmhelligkeit",) and light[1] > CUT
    assert copy[0] == ("Verzeichniskopie",) and copy[1] > CUT
    assert name == (("zotero",), CUT)
    english_only = _plans(make_cfg, sound_vault, questions[2:3], **{"embedder.languages": "en"})
    assert english_only == [(("Verzeichniskopie",), CUT)]


def test_a_product_name_or_an_english_word_is_no_compound_of_the_word_list(
    make_cfg: Any, sound_vault: Path
) -> None:
    """A German question's "Dockerfile": neither "docker" nor "file" is a German word, so the
    list does not split it. English takes no list: "accidentally" is no "accident|ally", and a
    product name ("Next|cloud") would split as well."""
    questions = ("Wie baut das Dockerfile die Aufnahme?", "how do I undo accidentally synced changes")
    assert [analyze(q).language for q in questions] == ["de", "en"]
    assert _plans(make_cfg, sound_vault, questions, compounds=True) == [(), ()]


@pytest.fixture
def garden(make_cfg: Any, tmp_path: Path) -> Any:
    vault = tmp_path / "v"
    write(vault / "Garden.md", "# Garden\n\nWe planted tomatoes and watered the beds.\n")
    for i in range(12):  # a generic word most notes hold
        write(vault / f"Day {i}.md", f"# Day {i}\n\nA note about the garden, day {i}.\n")
    h = Harness(make_cfg(vault, **{"embedder.languages": "en"}), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def test_no_lift_for_a_query_of_no_language_when_the_model_reads_one(garden: Harness) -> None:
    """A query of no detected language ("tomatpes garden": a word no note holds and a generic one)
    counts as read by a one-language model, but its missing words are mostly of a language the
    model does not read: the keyword share is not lifted. A query of a detected language is, and
    so is the undecided one when the model reads several languages."""
    undecided, english = analyze("tomatpes garden"), analyze("how do I water the tomatpes in my garden")
    assert undecided.language is None and english.language == "en"
    one = Retriever(garden.stores, garden.slot, garden.cfg.search, garden.cfg.recall, "en")
    assert 0.0 < one.unmatched_share(undecided) < 1.0
    assert one.plan(undecided)[1] == pytest.approx(1.0 - one.cfg.short_query_bm25_weight)
    assert one.plan(english)[1] > one.cfg.vector_weight
    many = Retriever(garden.stores, garden.slot, garden.cfg.search, garden.cfg.recall, "all")
    assert many.plan(undecided)[1] > 1.0 - many.cfg.short_query_bm25_weight
