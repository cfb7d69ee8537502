"""A German compound of a query split into words of the notes: the split itself, and search
finding a page that says it in parts while a page holding the compound still comes first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.search.compounds import parts, split
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search

HELD = {
    "rück": 2, "erstattung": 5, "text": 40, "suche": 30, "ordner": 50, "größe": 9, "arbeit": 4,
    "zeit": 30, "unter": 90, "pip": 3, "line": 9,
}  # fmt: skip
STOP = {"unter"}


def held(word: str) -> int:
    return HELD.get(word, 0)


def test_a_compound_splits_into_words_of_the_notes() -> None:
    """Parts must be words of the notes; the head loses its linking element (Arbeit-s-zeit)."""
    assert split("Rückerstattung", held) == ("rück", "erstattung")
    assert split("Textsuche", held) == ("text", "suche")
    assert split("Ordnergröße", held) == ("ordner", "größe")
    assert split("Arbeitszeit", held) == ("arbeit", "zeit")
    assert parts(["Textsuche", "in", "Ordnergröße"], held) == ["text", "suche", "ordner", "größe"]


def test_no_split_of_short_words_held_compounds_or_unknown_parts() -> None:
    """A short word, a lowercase one, one the notes hold often, one with a stopword for a part, or
    one whose parts are not all notes' words stays."""
    assert split("Tagtext", held) is None  # short
    assert split("Erstattung", held) is None  # no split into two held words
    assert split("Textsuche", lambda w: 10 if w == "textsuche" else held(w)) is None  # held often
    assert split("Textverarbeitung", held) is None  # "verarbeitung" is no word of the notes
    assert split("Text2suche", held) is None
    assert split("textsuche", held) is None  # not a noun as written
    assert split("Pipeline", held) is None  # a head under four letters ("pip")
    assert split("Unterordner", held, STOP.__contains__) is None  # a stopword is no part
    assert split("Unterordner", held) == ("unter", "ordner")


def test_search_finds_a_page_that_says_the_compound_in_parts(make_cfg: Any, tmp_path: Path) -> None:
    """ "Rückerstattung" finds the page about "Erstattung" (it found nothing); a page holding the
    compound itself still comes first; search.compoundParts 0 turns it off."""
    vault = tmp_path / "v"
    write(vault / "Richtlinie.md", "# Richtlinie\n\nEine Erstattung gibt es binnen 14 Tagen.\n")
    write(vault / "Rueck.md", "# Rück\n\nDie Rück-Seite des Formulars.\n")
    write(vault / "Garten.md", "# Garten\n\nDie Beete im Frühling, die Erstattung der Kosten.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        weights = {
            "search.vectorWeight": 0.0,
            "search.shortQueryBm25Weight": 1.0,
            "search.compoundParts": 0.5,
        }
        h.cfg = make_cfg(vault, **weights)
        hits = [x["reference"] for x in search(h, "Rückerstattung")]
        assert "vault/Richtlinie" in hits
        write(vault / "Exact.md", "# Exact\n\nDie Rückerstattung des Beitrags.\n")
        h.sweep()
        assert search(h, "Rückerstattung")[0]["reference"] == "vault/Exact"
        h.cfg = make_cfg(vault, **{**weights, "search.compoundParts": 0.0})
        assert [x["reference"] for x in search(h, "Rückerstattung")] == ["vault/Exact"]
    finally:
        h.close()
