"""Compounds whose parts no note writes alone, split by the German word list that ships with the
install (``sidecar.search.wordlist``), and the lift for words no note holds in a query of no
detected language (``search.unmatchedKeywordCut``)."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecar.search.query import analyze
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write

CUT = 0.3  # search.rareTermVectorWeight


@pytest.fixture(scope="module")
def lists_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache holding the built word list, shared by the module's tests (a build takes
    seconds)."""
    from sidecar.search import wordlist

    folder = tmp_path_factory.mktemp("cache")
    wordlist.lists(folder)
    assert any(folder.glob("wordlist-v*.bin"))
    return folder


def test_the_word_list_holds_german_words_and_verb_stems(lists_folder: Path) -> None:
    """The German list holds "Rate" and "Helligkeit", and a verb's stem ("abtast" of "abtasten"),
    but neither "docker" nor "file"; nothing shorter than four letters counts. It holds names
    whole ("Frankfurt") and English words the subtitles quote ("matter"), which it tells."""
    from sidecar.search.wordlist import holds_whole, is_english_word, is_german_word, lists

    words = lists(lists_folder)
    assert is_german_word(words, "rate") and is_german_word(words, "helligkeit")
    assert is_german_word(words, "abtast")
    assert not is_german_word(words, "docker") and not is_german_word(words, "file")
    assert not is_german_word(words, "rat")
    assert holds_whole(words, "frankfurt") and not holds_whole(words, "bildschirmhelligkeit")
    assert is_english_word(words, "matter") and is_english_word(words, "most")
    assert not is_english_word(words, "helligkeit")


class PiecesEmbedder(FakeEmbedder):
    """The fake embedder with a word-piece count like a real model's: a long word is several
    pieces (what makes a word few notes hold a rare word)."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [sum(1 + len(w) // 5 for w in t.split()) for t in texts]


@pytest.fixture
def sound_vault(tmp_path: Path) -> Path:
    """A German vault where "Abgleichdienst", "Bildschirmhelligkeit" and "Verzeichniskopie" are
    each in one note and no note writes "Abgleich", "Dienst", "Helligkeit", "Verzeichnis" or
    "Kopie" alone; "zotero", "Dockerfile", "accidentally", the town "Frankfurt" and the product
    "mattermost" each in one note too, and "kostenpflichtig", a word the list holds whole, in
    lower case."""
    v = tmp_path / "v"
    write(
        v / "Aufnahme.md",
        "# Aufnahme\n\nDer Abgleichdienst der Aufnahme ist schnell, und die Bildschirmhelligkeit "
        "ist gering. Das Programm zotero liest sie, das Dockerfile baut sie, die Verzeichniskopie "
        "ist rekursiv. Sie kommt aus Frankfurt, und mattermost meldet sie. Das Programm ist "
        "kostenpflichtig.\n",
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
    make_cfg: Any,
    vault: Path,
    questions: tuple[str, ...],
    lists: Path | None,
    compounds: bool = False,
    **flags: Any,
) -> list[Any]:
    """Each question's rare words and vector share (``compounds``: the rare words read as
    compounds), the word list kept in the model cache ``lists``."""
    h = Harness(make_cfg(vault, **flags), PiecesEmbedder())
    try:
        h.sweep()
        cfg = h.cfg
        r = Retriever(h.stores, h.slot, cfg.search, cfg.recall, cfg.embedder.languages, word_lists=lists)
        if compounds:
            return [r.compounds(r.rare_words(analyze(q)), analyze(q)) for q in questions]
        return [r.plan(analyze(q)) for q in questions]
    finally:
        h.close()


def test_a_compound_whose_parts_no_note_holds_alone_cuts_no_vector_share(
    make_cfg: Any, sound_vault: Path, lists_folder: Path
) -> None:
    """ "Abgleichdienst" and "Bildschirmhelligkeit" are
    ordinary German compounds the model reads, though no note writes their parts alone: split by
    the German word list they keep the rareTerm boost and cut no vector share (split by the notes
    alone, both cut it). A short query of no detected language ("Verzeichniskopie rekursiv") is
    tried as German, when the model reads German. A name no list splits ("zotero") still cuts
    the share."""
    questions = (
        "Welchen Abgleichdienst hat die Aufnahme?",
        "Wie hell ist die Bildschirmhelligkeit?",
        "Verzeichniskopie rekursiv",
        "Wie liest das Programm zotero die Aufnahme?",
    )
    assert [analyze(q).language for q in questions] == ["de", "de", None, "de"]
    rate, light, copy, name = _plans(make_cfg, sound_vault, questions, lists_folder)
    assert rate[0] == ("Abgleichdienst",) and rate[1] > CUT
    assert light[0] == ("Bildschirmhelligkeit",) and light[1] > CUT
    assert copy[0] == ("Verzeichniskopie",) and copy[1] > CUT
    assert name == (("zotero",), CUT)
    english_only = _plans(make_cfg, sound_vault, questions[2:3], lists_folder, **{"embedder.languages": "en"})
    assert english_only == [(("Verzeichniskopie",), CUT)]


def test_a_product_name_or_an_english_word_is_no_compound_of_the_word_list(
    make_cfg: Any, sound_vault: Path, lists_folder: Path
) -> None:
    """A German question's "Dockerfile": neither "docker" nor "file" is a German word, so the
    list does not split it. English takes no list: "accidentally" is no "accident|ally", and a
    product name ("Next|cloud") would split as well."""
    questions = ("Wie baut das Dockerfile die Aufnahme?", "how do I undo accidentally synced changes")
    assert [analyze(q).language for q in questions] == ["de", "en"]
    assert _plans(make_cfg, sound_vault, questions, lists_folder, compounds=True) == [(), ()]


def test_a_name_the_list_holds_whole_or_of_english_words_is_no_compound(
    make_cfg: Any, sound_vault: Path, lists_folder: Path
) -> None:
    """The list comes from film subtitles: it holds names whole ("Frankfurt", which would split
    into "frank|furt") and quotes English ("matter", "most"). Such a rare word is a name, not a
    compound: it still cuts the vector share, so the keyword arm leads, in a German question and
    in a query of no detected language. A word the list holds whole typed in lower case
    ("kostenpflichtig") is an ordinary word, no name: read from its parts."""
    questions = (
        "Welche Aufnahme ist aus Frankfurt?",
        "Ist die Aufnahme in mattermost?",
        "mattermost Aufnahme",
        "Ist das Programm der Aufnahme kostenpflichtig?",
    )
    assert [analyze(q).language for q in questions] == ["de", "de", None, "de"]
    town, product, short, paid = _plans(make_cfg, sound_vault, questions, lists_folder)
    assert town == (("Frankfurt",), CUT)
    assert product == (("mattermost",), CUT)
    assert short == (("mattermost",), CUT)
    assert paid[0] == ("kostenpflichtig",) and paid[1] > CUT


@pytest.fixture
def damaged_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    """The word list's package with a damaged German file (a gzip stream cut and overwritten
    inside)."""
    from sidecar.search import wordlist

    package = tmp_path / "lists" / "damagedlists"
    (package / "resources").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    data = bytearray(gzip.compress(json.dumps({f"wort{i}": i for i in range(5000)}).encode()))
    data[200:260] = bytes(range(60))
    (package / "resources" / "de.json.gz").write_bytes(bytes(data))
    (package / "resources" / "en.json.gz").write_bytes(gzip.compress(b'{"word": 1}'))
    monkeypatch.syspath_prepend(str(tmp_path / "lists"))
    monkeypatch.setattr(wordlist, "_PACKAGE", "damagedlists")
    caplog.set_level(logging.INFO, logger=wordlist.__name__)
    return wordlist


def test_a_damaged_word_list_is_logged_once_and_every_search_still_answers(
    make_cfg: Any, sound_vault: Path, damaged_list: Any, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A damaged list file of the package (here a broken deflate stream) fails its build once,
    is logged once as ``wordlist_failed`` and counts as empty: compounds are split by the notes
    alone, and the search answers (it raised an internal error once)."""
    cache = tmp_path / "cache"
    questions = ("Wie hell ist die Bildschirmhelligkeit?", "Welchen Abgleichdienst hat die Aufnahme?")
    light, service = _plans(make_cfg, sound_vault, questions, cache)
    assert light == (("Bildschirmhelligkeit",), CUT) and service == (("Abgleichdienst",), CUT)
    assert _plans(make_cfg, sound_vault, questions, cache) == [light, service]
    assert not damaged_list.is_german_word(damaged_list.lists(cache), "helligkeit")
    failed = [r for r in caplog.records if r.getMessage().startswith("wordlist_failed")]
    assert len(failed) == 1 and "loaded" not in caplog.text
    assert "cannot be read" in failed[0].getMessage()
    assert not list(cache.glob("*wordlist*"))


def _the_file(folder: Path) -> Path:
    (path,) = folder.glob("wordlist-v*.bin")
    return path


@pytest.mark.parametrize(
    "damage",
    [
        "a flipped byte in the hashes",
        "cut short",
        "a foreign file by its name",
        "made from other lists",
    ],
)
def test_a_damaged_or_foreign_list_file_is_built_again_never_trusted(
    lists_folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """The file in the model cache is checked before it is mapped (format, the sources' sha256,
    size, a checksum of the hashes): a damaged, cut or foreign one is built again (logged as
    ``wordlist_rebuilt``) and answers as a sound one."""
    from sidecar.search import wordlist

    caplog.set_level(logging.INFO, logger=wordlist.__name__)
    sound = _the_file(lists_folder)
    cache = tmp_path / "cache"
    cache.mkdir()
    data = bytearray(sound.read_bytes())
    if damage == "a flipped byte in the hashes":
        data[wordlist.HEADER.size + 8 * 1000] ^= 0xFF
    elif damage == "cut short":
        data = data[: len(data) // 2]
    elif damage == "a foreign file by its name":
        data = bytearray(b"not a word list\n" * 100)
    else:
        data[16] ^= 0xFF  # the sources' sha256 in the header
    (cache / sound.name).write_bytes(bytes(data))
    words = wordlist.lists(cache)
    assert "wordlist_rebuilt" in caplog.text and "wordlist_failed" not in caplog.text
    assert _the_file(cache).read_bytes() == sound.read_bytes()
    assert wordlist.is_german_word(words, "helligkeit") and not wordlist.is_german_word(words, "docker")


def test_an_unwritable_model_cache_means_no_list_with_one_line(
    make_cfg: Any, sound_vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A model cache the list cannot be written to (here a path under a file, which no user may
    write, root included): one ``wordlist_failed`` line saying where, then no list; searches
    answer with compounds split by the notes alone."""
    from sidecar.search import wordlist

    caplog.set_level(logging.INFO, logger=wordlist.__name__)
    (tmp_path / "file").write_text("a file, not a folder\n")
    cache = tmp_path / "file" / "cache"
    questions = ("Wie hell ist die Bildschirmhelligkeit?", "Welchen Abgleichdienst hat die Aufnahme?")
    for _ in range(2):
        assert _plans(make_cfg, sound_vault, questions, cache) == [
            (("Bildschirmhelligkeit",), CUT),
            (("Abgleichdienst",), CUT),
        ]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wordlist_")]
    failed = [m for m in said if not m.startswith("wordlist_opening")]
    assert len(said) == 2 and len(failed) == 1
    assert failed[0].startswith("wordlist_failed") and str(cache) in failed[0]


def test_the_list_is_opened_only_when_a_german_compound_asks_under_a_german_model(
    make_cfg: Any, sound_vault: Path, tmp_path: Path
) -> None:
    """An English question, or any question under a model that reads English only, never opens
    or builds the list; the first German rare word the notes cannot split does, under a model
    that reads German."""
    from sidecar.search import wordlist

    cache = tmp_path / "cache"
    german = ("Wie hell ist die Bildschirmhelligkeit?", "Verzeichniskopie rekursiv")
    _plans(make_cfg, sound_vault, ("how do I undo accidentally synced changes",), cache)
    assert cache not in wordlist._open
    english = _plans(make_cfg, sound_vault, german, cache, **{"embedder.languages": "en"})
    assert [p[0] for p in english] == [("Bildschirmhelligkeit",), ("Verzeichniskopie",)]
    assert all(p[1] <= CUT for p in english)  # each cuts the share: read as no compound
    assert cache not in wordlist._open and not cache.exists()
    _plans(make_cfg, sound_vault, german[:1], cache)
    assert cache in wordlist._open and _the_file(cache).is_file()


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


def test_a_daemon_without_a_model_never_reads_the_list(daemon_factory: Any, sound_vault: Path) -> None:
    """BM25 alone has no vector share to keep: a keyword-only daemon neither reads the list at
    its start (it did, costing seconds and memory that stayed) nor for a German search. The list
    says ``wordlist_opening`` before it builds or reads anything, so a start that wrongly opened it
    has said so by the time its first sweep is done."""
    d = daemon_factory(sound_vault, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["state"] == "ready")
    hits = d.call("search", {"query": "Wie hell ist die Bildschirmhelligkeit?"})["hits"]
    assert hits and hits[0]["reference"] == "vault/Aufnahme"
    assert d.stop() == 0
    assert "wordlist_" not in d.log.read_text()


def test_an_english_model_daemon_never_opens_or_builds_the_list(
    daemon_factory: Any, sound_vault: Path, tmp_path: Path
) -> None:
    """A daemon serving MiniLM (English only) neither builds the list at its start nor opens it
    for a German search with a rare compound the notes cannot split (it did, inside that search:
    1.3 s and 14 MB for no ranking effect); its model cache holds no list file."""
    cache = tmp_path / "models-cache"
    env = {"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2", "SIDECAR_EMBEDDER_CACHE_DIR": str(cache)}
    d = daemon_factory(sound_vault, env=env).start()
    d.wait_for(lambda h: h["embedder"]["state"] == "ok" and h["index"]["pending_vectors"] == 0)
    for query in ("Wie hell ist die Bildschirmhelligkeit?", "Verzeichniskopie rekursiv"):
        assert d.call("search", {"query": query})["hits"]
    assert d.stop() == 0
    assert "wordlist_" not in d.log.read_text()
    assert not list(cache.glob("*wordlist*"))


def test_the_cache_tidy_keeps_an_open_list_file_and_removes_one_unused_for_a_month(
    lists_folder: Path, tmp_path: Path
) -> None:
    """The list's file is one of the model cache's copies: the daily tidy marks it used while a
    process has it open, and removes one no daemon opened for ``UNUSED_DAYS`` (an upgrade's
    earlier list), as it does an earlier model's copy."""
    import os

    from sidecar.model import prepared

    sound = _the_file(lists_folder)
    month = prepared.UNUSED_DAYS * 86_400 + 60
    os.utime(sound, (sound.stat().st_atime - month, sound.stat().st_mtime - month))
    earlier = tmp_path / "cache" / "wordlist-v1-0123456789ab.bin"
    earlier.parent.mkdir()
    earlier.write_bytes(sound.read_bytes())
    os.utime(earlier, (earlier.stat().st_atime - month, earlier.stat().st_mtime - month))
    assert prepared.tidy(lists_folder) == [] and sound.is_file()
    assert prepared.tidy(earlier.parent) == [earlier] and not earlier.exists()


def test_a_search_while_the_list_is_built_ranks_without_it_and_does_not_wait(
    make_cfg: Any, sound_vault: Path, lists_folder: Path, tmp_path: Path
) -> None:
    """The first start builds the list in its thread (seconds): a German search meanwhile does
    not wait for the build (it waited on the lock, every request behind it); it ranks as without
    a list, and the next search after the build has it."""
    import shutil

    from sidecar.search import wordlist

    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(_the_file(lists_folder), cache)
    question = ("Wie hell ist die Bildschirmhelligkeit?",)
    with wordlist._lock:  # what the start's thread holds while it builds
        assert _plans(make_cfg, sound_vault, question, cache) == [(("Bildschirmhelligkeit",), CUT)]
    assert cache not in wordlist._open
    (light,) = _plans(make_cfg, sound_vault, question, cache)
    assert light[0] == ("Bildschirmhelligkeit",) and light[1] > CUT
