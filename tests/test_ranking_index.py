"""Ranking over a real index: keyword and vector arms, hostile queries, language forms, the
vector weight, and document frequencies of live chunks only."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sidecar.search.query import analyze
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import (
    search,
)


def test_search_finds_by_keyword_and_vector(harness: Harness) -> None:
    """Hybrid search returns the right note first, with every documented hit field."""
    harness.sweep()
    hits = search(harness, "restic backups of the NAS")
    top = hits[0]
    assert top["reference"] == "wiki/Backups"
    assert set(top) >= {
        "reference",
        "source",
        "score",
        "vecScore",
        "bm25Score",
        "title",
        "lines",
        "text",
        "boosts",
    }
    assert top["source"] == "wiki" and top["boosts"]["source"] == 1.1
    only_vault = search(harness, "restic backups", sources=("vault",))
    assert all(h["source"] == "vault" for h in only_vault)


@pytest.mark.parametrize(
    "query", ["[[wiki-link]]", '"unclosed', "(paren", "AND", "foo:bar", "😀", "*", "OR NOT"]
)
def test_hostile_queries_neither_raise_nor_match_everything(harness: Harness, query: str) -> None:
    """Query syntax in user text is just text: nothing raises, nothing turns into match-all."""
    harness.sweep()
    hits = harness.stores.bm25.search(query, 50)
    assert len(hits) < harness.stores.bm25.num_docs() or harness.stores.bm25.num_docs() == 0


def test_german_and_english_forms_meet(make_cfg: Any, tmp_path: Path) -> None:
    """Kündigung / Kuendigung / Kundigung, Straße / Strasse and stemmed forms find the same note."""
    vault = tmp_path / "v"
    write(
        vault / "Vertrag.md",
        "# Vertrag\n\nDie Kündigung des Mietvertrags an der Hauptstraße ist schriftlich.\n",
    )
    write(vault / "Garden.md", "# Garden\n\nWe planted tomatoes and watered the beds.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        for query in ("Kündigung", "Kuendigung", "Kundigung", "Hauptstrasse", "Mietverträge", "kündigen"):
            hits = h.stores.bm25.search(query, 5)
            assert hits, query
            assert h.stores.manifest.views([hits[0][0]])[hits[0][0]].key == "vault/Vertrag", query
        hits = h.stores.bm25.search("planting tomato", 5)
        assert h.stores.manifest.views([hits[0][0]])[hits[0][0]].key == "vault/Garden"
    finally:
        h.close()


def test_vector_weight_by_length_and_language(harness: Harness) -> None:
    """Short queries and queries in a language the model lacks lean on BM25; the keys turn it off."""
    cfg = harness.cfg.search
    r = Retriever(harness.stores, harness.slot, cfg, harness.cfg.recall, "en")
    assert r.vector_weight(analyze("how do I set up the backup of the NAS")) == cfg.vector_weight
    assert r.vector_weight(analyze("backups")) == 1.0 - cfg.short_query_bm25_weight
    assert (
        r.vector_weight(analyze("Wie richte ich die Datensicherung auf dem NAS ein?"))
        == cfg.foreign_vector_weight
    )
    everyone = Retriever(harness.stores, harness.slot, cfg, harness.cfg.recall, "all")
    assert (
        everyone.vector_weight(analyze("Wie richte ich die Datensicherung auf dem NAS ein?"))
        == cfg.vector_weight
    )


def test_doc_freq_counts_live_chunks_only(harness: Harness, vault: Path) -> None:
    """How rare a word is (Retriever.rare_words) counts the chunks that hold it now: the old
    chunks of an edited note no longer count, though Tantivy's term statistics keep them until
    a merge."""
    bm25 = harness.stores.bm25
    note = write(vault / "Ticket.md", "# Ticket\n\nOPS-4821 tracks the restic retention change.\n")
    harness.sweep()  # with the fixture's notes: one segment, which outlives the edits below
    assert bm25.doc_freq("OPS-4821") == 1 and bm25.doc_freq("4821") == 1
    for i in range(3):
        note.write_text(f"# Ticket\n\nOPS-4821 tracks the restic retention change, take {i}.\n")
        harness.sweep()
    assert bm25.doc_freq("4821") == 1
    assert bm25.doc_freq("nowhere-to-be-found") == 0 and bm25.doc_freq("...") == 0


def test_holding_finds_the_word_as_written_in_every_chunk(make_cfg: Any, tmp_path: Path) -> None:
    """The chunks a rare word lifts (search.rareTermBoost) are those doc_freq counted: every chunk
    whose text holds the word as written, however many of one note, and none that holds only a
    stemmed form of it ("dunkles" is not in a chunk that says "dunkle"), nor one that was not a
    candidate."""
    vault = tmp_path / "v"
    sections = "\n\n".join(
        f"## Teil {i}\n\nDas dunkles Thema, Abschnitt {i}, bleibt lesbar." for i in range(6)
    )
    write(vault / "Design.md", f"# Design\n\n{sections}\n")
    write(vault / "Leser.md", "# Leser\n\nDer Lesemodus zeigt dunkle Farben.\n")
    write(vault / "Kb.md", "# Kb\n\nZwei Teile, XK-77 und YQ, ein Paar.\n")
    h = Harness(make_cfg(vault, **{"chunking.maxTokens": 40}), FakeEmbedder())
    try:
        h.sweep()
        bm25 = h.stores.bm25
        everything = [cid for cid, _ in bm25.search("Teil Lesemodus Paar", 100)]
        keys = {cid: v.key for cid, v in h.stores.manifest.views(everything).items()}
        design = {cid for cid, key in keys.items() if key == "vault/Design"}
        assert len(design) >= 4
        leser = {cid for cid, key in keys.items() if key == "vault/Leser"}
        assert leser <= {cid for cid, _ in bm25.search("dunkles", 10)}  # a search meets the stem
        assert bm25.holding(["dunkles"], everything) == design
        assert bm25.holding(["dunkles"], sorted(design)[:2]) == set(sorted(design)[:2])
        # A word the analyzer splits is held where every one of its terms is.
        kb = {cid for cid, key in keys.items() if key == "vault/Kb"}
        assert bm25.holding(["XK-77"], everything) == kb and bm25.holding(["XK-78"], everything) == set()
        assert bm25.holding([], everything) == set() and bm25.holding(["dunkles"], []) == set()
    finally:
        h.close()


def test_a_heading_word_counts_as_one_more_word_of_the_body(tmp_path: Path) -> None:
    """A chunk's heading path is part of its body for BM25: a word in the heading scores what the
    same word once in the body scores (equal lengths), not more, and rewrites no other scale. As
    a field of its own a short heading path outweighed the body (a generic heading word beat the
    chunk that is about it)."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    def doc(
        name: str, *, aliases: tuple[str, ...] = (), headings: tuple[str, ...] = (), body: str
    ) -> Bm25Doc:
        return Bm25Doc.of(
            name, f"vault/{name}", "vault", "", title=name, aliases=aliases, headings=headings, body=body
        )

    filler = "the notes of the week about other things entirely"
    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add(
            [
                doc("h", headings=("Synchronisation",), body=filler),
                doc("b", body=f"Synchronisation {filler}"),
                doc("t", aliases=("Synchronisation",), headings=("Woche",), body=filler),
                *(doc(f"o{i}", body=f"{filler} {i}") for i in range(20)),
            ]
        )
        idx.commit()
        scores = dict(idx.search("Synchronisation", 10))
        assert set(scores) == {"h", "b", "t"}
        assert scores["h"] == pytest.approx(scores["b"], rel=1e-6)
        # The title (with aliases) is still a field of its own, found beside the body.
        assert scores["t"] > 0
        # 1.0 on the ideal scale is every word once in the body: the heading match reaches it.
        assert scores["h"] == pytest.approx(idx.ideal_score("Synchronisation"), rel=0.25)
    finally:
        idx.close()


def test_the_query_languages_stemmed_forms_count_as_much_as_the_exact_form(tmp_path: Path) -> None:
    """For a query in a known language its stemmed copy of the body leads: a chunk holding
    "configured" answers "configure" more nearly as well as one holding "configure" (else the
    stemmed match counts half). Without a language the exact form leads, and the ideal score
    follows the weights, so a full match stays near 1 on either scale."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index
    from sidecar.stores.bm25_text import field_boosts

    def doc(name: str, body: str) -> Bm25Doc:
        return Bm25Doc.of(name, f"vault/{name}", "vault", "", title=name, aliases=(), headings=(), body=body)

    filler = "notes of the week about other things entirely"
    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add(
            [
                doc("exact", f"configure {filler}"),
                doc("inflected", f"configured {filler}"),
                *(doc(f"o{i}", f"{filler} {i}") for i in range(20)),
            ]
        )
        idx.commit()
        plain = dict(idx.search("configure", 10))
        english = dict(idx.search("configure", 10, stem="en"))
        # The inflected form's share of the exact form's score grows by half and more (the exact
        # form keeps its rarer as-written term on top).
        assert english["inflected"] / english["exact"] > 1.5 * plain["inflected"] / plain["exact"]
        # The ideal score is weighted as the search: the rarer exact term counts half, so the ideal
        # falls, and a full match stays at its ideal on either scale.
        ideal_plain, ideal_en = idx.ideal_score("configure"), idx.ideal_score("configure", stem="en")
        assert ideal_en < 0.97 * ideal_plain
        assert english["exact"] / ideal_en == pytest.approx(plain["exact"] / ideal_plain, rel=0.02)
        assert field_boosts("en")["body_en"] == field_boosts()["body"]
        assert field_boosts("fr") == field_boosts()
    finally:
        idx.close()


def test_the_query_language_picks_the_stemmed_copy(harness: Harness) -> None:
    """search.stemFirst: a query detected as a language it names gets that language's stemmed
    copy first; an undecided one, or any with the key empty, the exact form."""
    cfg = replace(harness.cfg.search, stem_first=("en", "de"))
    r = Retriever(harness.stores, harness.slot, cfg, harness.cfg.recall, "all")
    assert r.stem(analyze("how do I set up the backups of the NAS")) == "en"
    assert r.stem(analyze("Wie richte ich die Datensicherung auf dem NAS ein?")) == "de"
    assert r.stem(analyze("restic NAS")) is None
    off = Retriever(harness.stores, harness.slot, replace(cfg, stem_first=()), harness.cfg.recall, "all")
    assert off.stem(analyze("how do I set up the backups of the NAS")) is None


def test_the_serving_models_own_stem_list_counts_while_a_switch_migrates(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stemFirst left to the models: the serving model's list counts, so while a switch to e5
    migrates, MiniLM still serves with its own (none); a user's value counts for every model."""
    from sidecar.config import load_config
    from sidecar.daemon.compose import model_stem

    assert model_stem(load_config(flags={}, env={}))
    assert not model_stem(load_config(flags={}, env={"SIDECAR_SEARCH_STEM_FIRST": "en"}))
    serving = harness.stores.serving
    assert serving is not None
    e5_cfg = replace(harness.cfg.search, stem_first=("en", "de"))  # what loading for e5 resolves
    r = Retriever(harness.stores, harness.slot, e5_cfg, harness.cfg.recall, "all", model_stem=True)
    english = analyze("how do I set up the backups of the NAS")
    monkeypatch.setattr(serving.model, "model_id", "all-MiniLM-L6-v2@abc", raising=False)
    assert r.stem(english) is None
    monkeypatch.setattr(serving.model, "model_id", "multilingual-e5-small@abc", raising=False)
    assert r.stem(english) == "en"
    mine = Retriever(harness.stores, harness.slot, replace(e5_cfg, stem_first=("en",)), harness.cfg.recall)
    monkeypatch.setattr(serving.model, "model_id", "all-MiniLM-L6-v2@abc", raising=False)
    assert mine.stem(english) == "en"


def test_the_serving_models_own_recall_gates_count_while_a_switch_migrates(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recall's gates left to the models are the serving model's: a switch to MiniLM (configured
    gates 0.4 / 0.35) keeps e5's own (0.35 / 0.3) while e5 still answers, and the other way round
    (the configured model's gates on the other model's scale let small talk in or kept pages out);
    a user's value counts for every model."""
    from sidecar.config import load_config
    from sidecar.daemon.compose import model_gates

    assert model_gates(load_config(flags={}, env={})) == {"recall.minSimilarity", "recall.scoreFloor"}
    mine = load_config(flags={}, env={"SIDECAR_RECALL_SCORE_FLOOR": "0.5"})
    assert model_gates(mine) == {"recall.minSimilarity"}
    serving = harness.stores.serving
    assert serving is not None
    minilm = load_config(flags={}, env={"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}).recall
    gates = model_gates(load_config(flags={}, env={}))
    r = Retriever(harness.stores, harness.slot, harness.cfg.search, minilm, "all", model_gates=gates)
    monkeypatch.setattr(serving.model, "model_id", "multilingual-e5-small@abc", raising=False)
    rc = r.recall_settings()
    assert (rc.min_similarity, rc.score_floor) == (0.35, 0.3)
    monkeypatch.setattr(serving.model, "model_id", "all-MiniLM-L6-v2@abc", raising=False)
    rc = r.recall_settings()
    assert (rc.min_similarity, rc.score_floor) == (minilm.min_similarity, minilm.score_floor) == (0.4, 0.35)
    user = replace(minilm, score_floor=0.5)
    r = Retriever(
        harness.stores, harness.slot, harness.cfg.search, user, "all", model_gates={"recall.minSimilarity"}
    )
    monkeypatch.setattr(serving.model, "model_id", "multilingual-e5-small@abc", raising=False)
    rc = r.recall_settings()
    assert (rc.min_similarity, rc.score_floor) == (0.35, 0.5)


def test_one_search_scores_and_calibrates_with_the_same_weights(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk search, the page search and the ideal score of one query all get its language:
    scored with one set of field weights and calibrated with another, a match would not mean the
    same on the relevance scale."""
    from sidecar.stores.bm25 import Bm25Index

    harness.sweep()
    seen: list[tuple[str, str | None]] = []
    for name in ("search", "search_pages", "ideal_score"):
        original = getattr(Bm25Index, name)

        def spy(self: Any, *args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            seen.append((_name, kw.get("stem")))
            return _original(self, *args, **kw)

        monkeypatch.setattr(Bm25Index, name, spy)
    cfg = replace(harness.cfg.search, stem_first=("en", "de"))
    r = Retriever(harness.stores, harness.slot, cfg, harness.cfg.recall, "all")
    r.search(SearchRequest("how do I restore the backups of the NAS", 10, 0.0))
    assert {n for n, _ in seen} == {"search", "search_pages", "ideal_score"}
    assert {stem for _, stem in seen} == {"en"}


def test_a_note_is_found_by_words_spread_over_its_sections(tmp_path: Path) -> None:
    """The page index scores whole notes: a note holding each word of a question in another
    section beats notes holding one of them twice, though each of those notes' chunks beats
    each of its chunks. Deletions reach pages as they reach chunks."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    def doc(cid: str, key: str, body: str) -> Bm25Doc:
        return Bm25Doc.of(cid, key, "vault", "", title="Notiz", aliases=(), headings=(), body=body)

    filler = "ein paar Worte über etwas anderes ohne Bezug"
    words = ("Netzteil", "Lüfter")
    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add(
            [
                *(doc(f"a{i}", "vault/A", f"{w} {filler}") for i, w in enumerate(words)),
                *(doc(w, f"vault/B{i}", f"{w}, {w}. {filler}") for i, w in enumerate(words)),
                *(doc(f"o{i}", f"vault/O{i}", f"{filler} {i}") for i in range(10)),
            ]
        )
        idx.commit()
        assert idx.num_pages() == 13 and idx.num_docs() == 14
        assert {c for c, _ in idx.search("Netzteil Lüfter", 4)[:2]} == {"Netzteil", "Lüfter"}
        assert idx.search_pages("Netzteil Lüfter", 5)[0][0] == "vault/A"
        assert idx.ideal_score("Netzteil Lüfter", pages=True) > 0
        idx.delete_key("vault/A")
        idx.commit()
        assert "vault/A" not in {k for k, _ in idx.search_pages("Netzteil Lüfter", 5)}
        assert idx.num_pages() == 12
    finally:
        idx.close()


def test_hits_carry_their_notes_keyword_score(harness: Harness) -> None:
    """A hit shows its note's BM25 beside its own (``pageBm25Score``): the part of its keyword
    evidence that comes from the whole note (``search.pageKeywords``)."""
    harness.sweep()
    top = search(harness, "restic backups of the NAS")[0]
    assert top["pageBm25Score"] > 0 and top["bm25Score"] > 0


def test_the_serving_models_languages_decide_what_it_reads(harness: Harness) -> None:
    """During a model switch the previous model serves until the new table is full: whether a
    query's language is read (the vector share, recall's keyword gate) follows the serving
    model's own ``embedder.languages``, not the configured model's."""
    harness.sweep()
    cfg = harness.cfg.search
    r = Retriever(harness.stores, harness.slot, cfg, harness.cfg.recall, "all")
    german = analyze("Wie richte ich die Datensicherung auf dem NAS ein?")
    serving = harness.stores.serving
    assert serving is not None
    assert r.reads(german)  # a model without a language list: the configured "all"
    serving.model.languages = "en"  # type: ignore[attr-defined]  # what an English model says
    try:
        assert not r.reads(german)
        assert r.vector_weight(german) == cfg.foreign_vector_weight
        assert r.reads(analyze("how do I set up the backup of the NAS"))
    finally:
        del serving.model.languages  # type: ignore[attr-defined]


def test_a_title_with_an_umlaut_is_found_by_its_transliteration(tmp_path: Path) -> None:
    """'Kuendigung' finds a note titled 'Kündigung …' by its title, as it finds the word in a
    body (the title field folded ü to u, the query kept 'ue': no match)."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    def doc(name: str, title: str, body: str) -> Bm25Doc:
        return Bm25Doc.of(name, f"vault/{name}", "vault", "", title=title, aliases=(), headings=(), body=body)

    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add(
            [
                doc("titled", "Kündigung Mietwohnung", "Frist drei Monate zum Monatsende."),
                doc("other", "Post", "Briefe"),
            ]
        )
        idx.commit()
        for query in ("Kündigung", "Kundigung", "Kuendigung"):
            assert [cid for cid, _ in idx.search(query, 5)] == ["titled"], query
    finally:
        idx.close()


def test_a_keyword_index_is_opened_anew_every_so_many_commits(tmp_path: Path, monkeypatch: Any) -> None:
    """Tantivy's directory keeps the path of every segment file it ever opened: the daemon's
    memory grew by about 1 KB a commit for good (a long soak: +28.6 MB/h, a note written to every
    second 250 MB a day). Each index is opened anew every REOPEN_EVERY commits; searches, writes
    and a searcher held across the reopening keep working."""
    from sidecar.stores import bm25_folder
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    monkeypatch.setattr(bm25_folder, "REOPEN_EVERY", 3)
    idx = Bm25Index(tmp_path / "bm25")
    try:
        first = idx._chunks.index
        held = idx._chunks.searcher
        for i in range(7):
            idx.replace_note(
                f"vault/N{i}",
                [
                    Bm25Doc.of(
                        f"c{i}",
                        f"vault/N{i}",
                        "vault",
                        "",
                        title="t",
                        aliases=(),
                        headings=(),
                        body=f"kayak paddle {i}",
                    )
                ],
            )
            idx.commit()
        assert idx._chunks.index is not first and idx._chunks.commits == 7
        assert len(idx.search("kayak", 20)) == 7 and len(idx.search_pages("kayak", 20)) == 7
        assert held.num_docs >= 0  # a searcher from before still answers
    finally:
        idx.close()


def _doc(key: str, body: str, *, n: int = 0, title: str | None = None, headings: tuple[str, ...] = ()) -> Any:
    from sidecar.stores.bm25 import Bm25Doc

    source = key.split("/", 1)[0]
    agent = key.split("/")[1] if source == "memory" else ""
    name = key.rsplit("/", 1)[-1]
    return Bm25Doc.of(
        f"{key}#{n}", key, source, agent, title=title or name, aliases=(), headings=headings, body=body
    )


def test_held_with_counts_own_memory_only(tmp_path: Path) -> None:
    """held_with counts the notes holding a word with each marker word in the vault and the wiki
    plus only the asking agent's own memory: another agent's notes neither add nor vote."""
    from sidecar.stores.bm25 import Bm25Index

    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add(
            [
                _doc("vault/v", "der zyxwort ist nicht hier und das mit"),
                _doc("memory/alpha/a", "the zyxwort is of the kind that you can see"),
            ]
        )
        idx.add([_doc("memory/beta/b", "the zyxwort and this")])
        idx.commit()
        de = ("und", "der", "das", "ist", "nicht", "mit")
        en = ("the", "and", "is", "of", "you", "can", "this")

        def counts(agent: str | None) -> tuple[int, int]:
            return (
                sum(idx.held_with("zyxwort", de, pages=True, agent=agent)),
                sum(idx.held_with("zyxwort", en, pages=True, agent=agent)),
            )

        assert counts(None) == (6, 0)
        assert counts("alpha") == (6, 5)
        assert counts("beta") == (6, 3)
        assert counts("gamma") == (6, 0)
        assert idx.held_with("", de, pages=True) == [0] * len(de)
        assert idx.held_with("zyxwort", en) == [0] * len(en)  # without an agent: no memory
    finally:
        idx.close()


def test_no_agents_memory_moves_another_agents_scores(tmp_path: Path) -> None:
    """The keyword statistics are the vault's and the wiki's: an agent's own note scores the same
    whether or not other agents' private notes hold the query's words. With every inbox in one
    index, the idf moved with them: an agent could tell from its own note's score whether some
    other agent's memory held a word."""
    from sidecar.stores.bm25 import Bm25Index

    filler = "notes about the garden and the boat and other things of the week"
    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add([_doc(f"vault/V{i}", f"{filler} {i}") for i in range(30)])
        idx.add([_doc("vault/Kayak", f"kayak paddle trip {filler}")])
        idx.add([_doc("memory/alpha/trip", f"the kayak paddle was left at the lake {filler}")])
        idx.commit()

        def seen() -> tuple[Any, ...]:
            return (
                idx.search("kayak paddle lake", 10, agent_scope="alpha"),
                idx.search_pages("kayak paddle lake", 10, agent_scope="alpha"),
                idx.ideal_score("kayak paddle lake"),
                idx.doc_freq("lake"),
                idx.collection_size(),
            )

        before = seen()
        assert [k for k, _ in before[0]][:1] == ["memory/alpha/trip#0"]
        idx.add([_doc(f"memory/beta/n{i}", f"lake lake kayak {i}") for i in range(25)])
        idx.commit()
        assert seen() == before
        # beta's notes are beta's: found by beta, and by a person (no agent), never by alpha.
        assert not any(k.startswith("memory/beta/") for k, _ in idx.search("lake", 50, agent_scope="alpha"))
        assert any(k.startswith("memory/beta/") for k, _ in idx.search("lake", 50, agent_scope="beta"))
        everyone = {k.split("/")[1] for k, _ in idx.search("lake", 50, sources=["memory"])}
        assert everyone == {"alpha", "beta"}
        assert idx.num_docs() == 57 and idx.num_pages() == 57
    finally:
        idx.close()


def test_a_memory_hit_scores_with_the_vaults_word_statistics(tmp_path: Path) -> None:
    """An inbox's hits are scored with the vault's word statistics (its own lengths): the same
    text scores what it scores in the vault when the inbox's notes are as long as the vault's,
    however differently its words are spread (chunks, pages, headings, titles, folded words), so
    fusion and the relevance floor read memory hits on the vault's scale."""
    from sidecar.stores.bm25 import Bm25Index

    long = " ".join(f"word{i} kayak" if i % 37 == 0 else f"word{i}" for i in range(700))
    texts = {
        "short": ("Kayak", (), "kayak paddle on the lake"),
        "long": ("Trip log", ("Lake", "Paddle"), long),
        "umlaut": ("Kündigung Vertrag", (), "Die Kündigung des Paddelvertrags kam per Brief"),
    }
    idx = Bm25Index(tmp_path / "bm25")
    try:
        # Fillers of the same lengths, other words: "lake" is common in the vault, absent from
        # the inbox's fillers (its idf in the inbox alone would be another).
        idx.add([_doc(f"vault/F{i}", f"filler text {i} about boats lake", title=f"F{i}") for i in range(40)])
        idx.add(
            [
                _doc(f"memory/alpha/F{i}", f"other notes {i} about ships pond", title=f"F{i}")
                for i in range(40)
            ]
        )
        for name, (title, headings, body) in texts.items():
            idx.add([_doc(f"vault/{name}", body, title=title, headings=headings)])
            idx.add([_doc(f"memory/alpha/{name}", body, title=title, headings=headings)])
        idx.commit()
        for query in ("kayak paddle lake", "lake word37", "Kuendigung vertrag", "kündigung brief paddle"):
            for pages in (False, True):
                found = (idx.search_pages if pages else idx.search)(query, 200, agent_scope="alpha")
                scores = {k.split("#")[0]: s for k, s in found}
                for name in texts:
                    vault, memory = scores.get(f"vault/{name}"), scores.get(f"memory/alpha/{name}")
                    assert (vault is None) == (memory is None), (query, name)
                    if vault is not None:
                        assert memory == pytest.approx(vault, rel=1e-4), (query, name, pages)
        # One note by key (as `why` reads it) scores as in the search.
        by_key = idx.search("kayak paddle", 5, key="memory/alpha/short")
        assert by_key == [
            (k, s) for k, s in idx.search("kayak paddle", 200) if k.startswith("memory/alpha/short")
        ]
        mixed = idx.search_pages("kayak", 10, keys=["vault/short", "memory/alpha/short", "memory/beta/x"])
        assert sorted(k for k, _ in mixed) == ["memory/alpha/short", "vault/short"]
    finally:
        idx.close()


def test_an_inbox_index_is_written_and_removed_like_the_vaults(tmp_path: Path) -> None:
    """Memory notes go to their agent's index: replaced, deleted, rolled back, emptied and
    reopened like vault notes; an inbox that never held a note gets no folder."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.replace_note("memory/alpha/a", [_doc("memory/alpha/a", "kayak one")])
        idx.replace_note("vault/a", [_doc("vault/a", "kayak two")])
        idx.delete_key("memory/gamma/never")
        idx.commit()
        assert sorted(p.name for p in (path / "memory").iterdir()) == ["alpha"]
        idx.replace_note("memory/alpha/a", [_doc("memory/alpha/a", "canoe one")])
        idx.commit()
        assert [k for k, _ in idx.search("kayak", 10)] == ["vault/a#0"]
        idx.add([_doc("memory/alpha/b", "kayak three")])
        idx.rollback()
        idx.commit()
        assert idx.all_ids() == {"vault/a#0", "memory/alpha/a#0"}
        idx.delete_key("memory/alpha/a")
        idx.commit()
        assert idx.all_ids() == {"vault/a#0"} and idx.num_pages() == 1
        # An inbox a commit leaves empty is closed and its folder removed (a retired agent's
        # index stayed open for good, with a thread polling its files).
        assert list((path / "memory").iterdir()) == [] and idx.agents() == []
        idx.add([_doc("memory/alpha/c", "kayak four")])
        idx.commit()
    finally:
        idx.close()
    again = Bm25Index(path)
    try:
        assert again.all_ids() == {"vault/a#0", "memory/alpha/c#0"}
        assert [k for k, _ in again.search("kayak", 10, sources=["memory"])] == ["memory/alpha/c#0"]
        again.delete_all()
        again.commit()
        assert again.num_docs() == again.num_pages() == 0
    finally:
        again.close()


def test_an_inbox_index_whose_removal_was_cut_short_is_no_inbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inbox's index that a commit left empty is removed; a removal cut short (a crash, a
    file that would not go: here its pages stay) left part of an index under the agent's name,
    which the next start opened as the agent's inbox (a search then failed on it, and the repair
    refilled the whole keyword index). It leaves nothing the next start takes for an inbox."""
    from sidecar.stores import bm25 as bm25_mod

    path = tmp_path / "bm25"
    idx = bm25_mod.Bm25Index(path)
    real = shutil.rmtree

    def cut_short(folder: Any, ignore_errors: bool = False) -> None:
        real(Path(folder) / "chunks", ignore_errors=ignore_errors)  # then the crash

    try:
        idx.add([_doc("vault/a", "kayak in the vault"), _doc("memory/alpha/a", "kayak of alpha")])
        idx.commit()
        monkeypatch.setattr(bm25_mod.shutil, "rmtree", cut_short)
        idx.delete_key("memory/alpha/a")
        idx.commit()
        monkeypatch.setattr(bm25_mod.shutil, "rmtree", real)
    finally:
        idx.close()
    again = bm25_mod.Bm25Index(path)
    try:
        assert again.agents() == [] and list((path / "memory").iterdir()) == []
        assert [k for k, _ in again.search("kayak", 10)] == ["vault/a#0"] and again.failing == {}
    finally:
        again.close()


def test_a_keyword_index_holding_memory_beside_the_vault_is_outdated(tmp_path: Path) -> None:
    """An index of the layout before inboxes (memory in the vault's index, counted in its
    statistics) is refilled: it opens as outdated, never half-used."""
    import shutil

    from sidecar.contracts.errors import StoreOutdatedError
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    Bm25Index(path).close()
    shutil.rmtree(path / "memory")
    with pytest.raises(StoreOutdatedError, match="memory beside the vault"):
        Bm25Index(path)


def test_many_agents_cost_what_the_open_ones_cost(tmp_path: Path) -> None:
    """Inbox indexes are opened when used, at most a few at once, and a refill's emptying opens no
    writer per agent: a thousand agent names held two thousand threads at rest, and a refill of
    200 agents' memory 2,800 threads and 1.1 GB."""
    import os
    import time

    from sidecar.stores import bm25_inboxes
    from sidecar.stores.bm25 import Bm25Index

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    agents = [f"a{i:03d}" for i in range(60)]
    try:
        for agent in agents:
            idx.add([_doc(f"memory/{agent}/n", f"kayak note of {agent}")])
        idx.commit()
        assert len(idx._open) <= bm25_inboxes._OPEN_INBOXES
    finally:
        idx.close()
    deadline, base = time.monotonic() + 10, -1  # a closed index's threads end at their next poll
    while base != threads() and time.monotonic() < deadline:
        base = threads()
        time.sleep(0.7)
    idx = Bm25Index(path)
    try:
        assert threads() - base < 30  # the vault's pair and writers; nothing of the 60 inboxes
        found = idx.search("kayak", 100, sources=["memory"])  # a person's search: every inbox
        assert len(found) == 60 and len(idx._open) <= bm25_inboxes._OPEN_INBOXES
        deadline = time.monotonic() + 10  # a closed index's thread ends at its next poll
        while threads() - base > 3 * bm25_inboxes._OPEN_INBOXES:
            assert time.monotonic() < deadline, threads() - base
            time.sleep(0.1)
        assert idx.num_docs() == idx.num_pages() == 60
        idx.delete_all()
        assert all(f._writer is None for pair in idx._open.values() for f in pair)
        for agent in agents[:30]:  # a refill: half the agents still hold memory
            idx.add([_doc(f"memory/{agent}/m", f"canoe note of {agent}")])
            held = [f for pair in idx._open.values() for f in pair if f._writer is not None]
            assert len(held) <= bm25_inboxes._OPEN_WRITERS + 2
        idx.commit()
        assert idx.agents() == agents[:30] == sorted(p.name for p in (path / "memory").iterdir())
        assert {k.split("/")[1] for k, _ in idx.search("canoe", 100)} == set(agents[:30])
        assert idx.search("kayak", 100) == [] and idx.num_docs() == 30
    finally:
        idx.close()


def test_a_persons_searches_over_more_inboxes_than_the_cap_open_each_once(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A person's search reads every inbox: past the cap of open inboxes each was opened anew on
    every search (the least recently used one was always the next one read: 300 agents cost 2-7 s
    a search). The inboxes it opened stay open for a while, so the next searches open none; once
    that while has passed, a sweep's ``close_idle`` closes them down to the cap. An agent's own
    search opens one inbox and leaves the cap as it is. (A person's search reads the inboxes only
    while the index of every agent's memory is not filled: an install from before it.)"""
    from sidecar.stores import bm25_inboxes
    from sidecar.stores.bm25 import Bm25Index

    monkeypatch.setattr(bm25_inboxes, "_OPEN_INBOXES", 3)
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    agents = [f"a{i:02d}" for i in range(12)]
    for agent in agents:
        idx.add([_doc(f"memory/{agent}/n", f"kayak note of {agent}")])
    idx.commit()
    idx.close()
    shutil.rmtree(path / "memory-all")  # as an install from before it left the index
    idx = Bm25Index(path)
    assert not idx.everyone_ready
    opened: list[str] = []
    real = idx._open_pair

    def counting(agent: str) -> Any:
        opened.append(agent)
        return real(agent)

    monkeypatch.setattr(idx, "_open_pair", counting)
    try:
        assert len(idx.search("kayak", 100)) == 12
        assert sorted(opened) == agents
        opened.clear()
        for _ in range(3):
            assert len(idx.search("kayak", 100)) == len(idx.search_pages("kayak", 100)) == 12
        assert opened == []
        assert len(idx._open) == 12
        idx._wide_until = 0.0  # the while has passed
        idx.close_idle()
        assert len(idx._open) == 3
        opened.clear()
        idx.search("kayak", 100, agent_scope="a00")  # an agent's own search: its inbox only
        assert opened in ([], ["a00"]) and len(idx._open) <= 3
        # More inboxes than may ever stay open: those open stay, the others are read and closed
        # (closing the least recently used closed the next one read: each opened every time).
        monkeypatch.setattr(bm25_inboxes, "_MAX_OPEN_INBOXES", 8)
        idx.search("kayak", 100)
        assert len(idx._open) == 8
        held = set(idx._open)
        opened.clear()
        assert len(idx.search("kayak", 100)) == 12
        assert sorted(opened) == sorted(set(agents) - held) and set(idx._open) == held
    finally:
        idx.close()


def test_a_damaged_inbox_fails_no_one_elses_search(tmp_path: Path) -> None:
    """An agent's inbox index that cannot be read is skipped (reported in ``failing`` until a
    search of it succeeds): another agent's search neither fails nor clears the report; a
    person's search reads no inbox (the index of every agent's memory) and finds every note."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    idx.add([_doc("vault/v", "kayak in the vault"), _doc("memory/alpha/a", "kayak of alpha")])
    idx.add([_doc("memory/beta/b", "kayak of beta")])
    idx.commit()
    idx.close()
    for f in (path / "memory" / "beta" / "chunks").glob("*.idx"):
        f.write_bytes(b"\0" * 64)
    idx = Bm25Index(path)
    try:
        everyone = [k for k, _ in idx.search("kayak", 10)]
        assert sorted(everyone) == ["memory/alpha/a#0", "memory/beta/b#0", "vault/v#0"]
        assert [k for k, _ in idx.search("kayak", 10, agent_scope="beta")] == ["vault/v#0"]
        assert "beta" in idx.failing
        assert [k for k, _ in idx.search("kayak", 10, agent_scope="alpha")] != []
        assert "beta" in idx.failing
    finally:
        idx.close()


def test_a_word_of_an_agents_own_memory_counts_for_it_alone(tmp_path: Path) -> None:
    """``doc_freq`` for an agent counts the vault, the wiki and its own memory (a word only in its
    memory was no word at all to the rare-word rule); never another agent's; ``holding`` asks
    only the inboxes named."""
    from sidecar.stores.bm25 import Bm25Index

    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add([_doc("vault/v", "plain words"), _doc("memory/alpha/a", "zyxwort in alpha")])
        idx.add([_doc("memory/beta/b", "zyxwort in beta"), _doc("memory/beta/c", "zyxwort again")])
        idx.commit()
        assert idx.doc_freq("zyxwort") == 0
        assert idx.doc_freq("zyxwort", pages=True, agent="alpha") == 1
        assert idx.doc_freq("zyxwort", agent="beta") == 2
        among = ["memory/alpha/a#0", "memory/beta/b#0", "vault/v#0"]
        assert idx.holding(["zyxwort"], among, {"alpha"}) == {"memory/alpha/a#0"}
        assert idx.holding(["zyxwort"], among) == set()
    finally:
        idx.close()


def test_memory_scores_hold_with_deleted_documents_in_the_vault(tmp_path: Path) -> None:
    """The vault's document count is Tantivy's (deleted documents of unmerged segments included),
    read from a live document: a count of live ones only gave a memory hit five times the score
    of the same text in the vault."""
    from sidecar.stores.bm25 import Bm25Index

    idx = Bm25Index(tmp_path / "bm25")
    try:
        idx.add([_doc(f"vault/e{i}", f"every e{i}") for i in range(6)])  # lengths as the inbox's
        idx.add([_doc("vault/same", "kayak paddle"), _doc("memory/alpha/same", "kayak paddle")])
        idx.commit()
        for i in range(5):
            idx.delete_key(f"vault/e{i}")
        idx.commit()
        scores = dict(idx.search("kayak paddle every", 10, agent_scope="alpha"))
        assert scores["memory/alpha/same#0"] == pytest.approx(scores["vault/same#0"], rel=1e-4)
    finally:
        idx.close()


def test_a_damaged_inbox_stays_reported_while_other_agents_search(make_cfg: Any, tmp_path: Path) -> None:
    """An agent's damaged inbox index is a problem until a search of it succeeds: another agent's
    search (which never reads it) cleared it within a second, before the repair could see it."""
    vault = tmp_path / "v"
    write(vault / "Boat.md", "# Boat\n\nthe kayak in the garage\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        for agent in ("alpha", "beta"):
            write(h.cfg.agents_dir / agent / "memory" / "kayak.md", f"# Kayak\n\n{agent}'s kayak note\n")
        h.sweep()
        beta = h.stores.bm25._inbox("beta")
        assert beta is not None
        for f in (beta[0].path).glob("*.idx"):
            f.write_bytes(b"\0" * 64)
        with h.stores.bm25._inbox_lock:  # closed: the damaged files are read at the next open
            h.stores.bm25._open.pop("beta")
        everyone = [hit["reference"] for hit in search(h, "kayak")]
        assert "memory/alpha/kayak" in everyone and "vault/Boat" in everyone
        search(h, "kayak", agent="beta")
        assert h.stores.problems.active_in("keyword_search") is not None
        search(h, "kayak", agent="alpha")
        active = h.stores.problems.active_in("keyword_search")
        assert active is not None and "beta" in active["error"]
    finally:
        h.close()


def test_a_failed_refill_leaves_every_inbox_as_it_was(tmp_path: Path, monkeypatch: Any) -> None:
    """A refill that fails after emptying (a write or a commit that fails) rolls the emptying
    back for inboxes too: the next ordinary commit removed every inbox the refill had marked, and
    a later write to one wiped its other notes."""
    from sidecar.stores import bm25 as bm25_mod
    from sidecar.stores.bm25 import Bm25Index, StoreError

    idx = Bm25Index(tmp_path / "bm25")
    try:
        for agent in ("bob", "carol"):
            idx.add([_doc(f"memory/{agent}/n{i}", f"kayak {agent} {i}") for i in range(5)])
        idx.commit()
        idx.delete_all()
        real = bm25_mod.Bm25Index._document

        def failing(doc_id: str, d: Any, body: str) -> Any:
            if "dave" in doc_id:
                raise ValueError("disk full")  # an engine failure, as Tantivy raises it
            return real(doc_id, d, body)

        monkeypatch.setattr(bm25_mod.Bm25Index, "_document", staticmethod(failing))
        with pytest.raises(StoreError):
            idx.add([_doc("memory/dave/x", "kayak dave")])
        monkeypatch.setattr(bm25_mod.Bm25Index, "_document", staticmethod(real))
        idx.replace_note("memory/bob/n0", [_doc("memory/bob/n0", "canoe bob 0")])
        idx.commit()
        assert {k.split("#")[0] for k, _ in idx.search("kayak", 50)} == {
            *(f"memory/bob/n{i}" for i in range(1, 5)),
            *(f"memory/carol/n{i}" for i in range(5)),
        }
        assert idx.num_docs() == idx.num_pages() == 10
    finally:
        idx.close()


def test_inboxes_committed_early_hold_whole_notes(tmp_path: Path, monkeypatch: Any) -> None:
    """A refill past the writers it may hold commits the inboxes written so far, each with its
    notes' pages (a page index was published holding only the emptying), and closes the least
    recently used; one an early commit left empty and a search closed is removed at the commit."""
    from sidecar.stores import bm25_folder, bm25_inboxes
    from sidecar.stores.bm25 import Bm25Index

    monkeypatch.setattr(bm25_inboxes, "_OPEN_WRITERS", 2)
    monkeypatch.setattr(bm25_inboxes, "_OPEN_INBOXES", 3)
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        agents = [f"a{i}" for i in range(12)]
        notes = [_doc(f"memory/{a}/n{j}", f"kayak {a} {j}") for a in agents for j in range(3)]
        idx.add(notes)
        idx.commit()
        idx.delete_all()  # a refill, stopped: what was committed early is whole, note by note
        idx.add(notes)
        assert len(idx._open) <= 3 + 1
        idx.rollback()
        for a in agents:
            base = path / "memory" / a
            assert bm25_folder.live_docs(base / "chunks") == bm25_folder.live_docs(base / "pages") == 3
        idx.delete_all()
        idx.add(notes)
        idx.commit()
        assert idx.num_docs() == idx.num_pages() == 36
        idx.delete_key("memory/a0/n0")
        idx.delete_key("memory/a0/n1")
        idx.delete_key("memory/a0/n2")
        for a in agents[1:]:  # writes elsewhere commit a0 early (empty), then it is closed
            idx.replace_note(f"memory/{a}/n0", [_doc(f"memory/{a}/n0", f"canoe {a}")])
        assert "a0" not in idx._open
        idx.commit()
        assert not (path / "memory" / "a0").exists() and "a0" not in idx.agents()
    finally:
        idx.close()


def test_an_inbox_whose_count_cannot_be_read_is_moved_aside(tmp_path: Path) -> None:
    """An inbox index whose meta.json cannot be read failed every sweep's count check and was
    reported nowhere: it is moved into the index folder as damaged (status names it), counts
    nothing (the check refills the index) and is reported until a refill rebuilds it."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "index" / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("memory/alpha/a", "kayak alpha"), _doc("memory/beta/b", "kayak beta")])
        idx.add([_doc("vault/v", "kayak vault")])
        idx.commit()
        (path / "memory" / "beta" / "chunks" / "meta.json").write_text("{ not json")
        assert idx.inbox_counts() == {"alpha": (1, 1)}
        assert idx.num_docs() == 3  # the index of every agent's memory holds beta's
        assert "beta" in idx.failing and not (path / "memory" / "beta").exists()
        assert [p.name.split(".broken-")[0] for p in (tmp_path / "index").glob("*.broken-*")] == [
            "bm25-memory-beta"
        ]
        idx.delete_all()  # the refill the count check starts
        idx.add([_doc("vault/v", "kayak vault"), _doc("memory/alpha/a", "kayak alpha")])
        idx.add([_doc("memory/beta/b", "kayak beta")])
        idx.commit()
        assert idx.failing == {} and idx.num_docs() == idx.num_pages() == 3
    finally:
        idx.close()


def test_the_wiki_preference_does_not_invert_a_clear_gap(make_cfg: Any, tmp_path: Path) -> None:
    """A wiki page that names a topic in passing does not outrank the vault note about it; between
    two pages about the topic alike, the curated wiki page still comes first."""
    vault = tmp_path / "v"
    write(
        vault / "Grafana.md",
        "# Grafana\n\nGrafana dashboards show the NAS temperature; the Grafana alert rules mail me "
        "when a disk runs hot.\n",
    )
    write(
        vault / "wiki/Homelab.md",
        "# Homelab\n\nThe rack holds the router, the switch, the NAS and a small server that runs "
        "containers for the media library, the backups, the password manager, the photo sync, "
        "the calendar and, since spring, grafana with its grafana agent.\n",
    )
    for i in range(8):
        write(
            vault / f"Shopping {i}.md", f"# Shopping {i}\n\nBread, milk, apples and the weekly groceries.\n"
        )
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        # Relevance about 0.9-1.0 for the note, 0.6 for the page: with the old factors (wiki 1.4,
        # vault 0.65, a 2.15x lead) the page came first for both.
        for query in ("grafana", "grafana alert rules"):
            hits = search(h, query)
            assert [x["reference"] for x in hits][:2] == ["vault/Grafana", "wiki/Homelab"], query
    finally:
        h.close()
    alike = tmp_path / "alike"
    text = "# Heating\n\nThe heat pump's winter settings: flow temperature 35 degrees, night setback off.\n"
    write(alike / "Heating.md", text)
    write(alike / "wiki/Heating.md", text)
    h = Harness(make_cfg(alike, home=str(tmp_path / "home2")), FakeEmbedder())
    try:
        h.sweep()
        hits = search(h, "heat pump winter flow temperature")
        assert [x["reference"] for x in hits][:2] == ["wiki/Heating", "vault/Heating"]
        assert hits[0]["boosts"]["source"] > 1.0
    finally:
        h.close()


def test_a_full_disk_moves_no_inbox_index_aside(tmp_path: Path, monkeypatch: Any) -> None:
    """An agent's new keyword index that cannot be made for want of space is a fault that passes:
    the write fails (the indexer tries it again), nothing is moved aside or reported as damage,
    and once there is space the note is indexed (a full disk taken for damage moved the new
    index aside, then the whole keyword index, and refilled it on the full disk)."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores import bm25_folder
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "index" / "bm25"
    idx = Bm25Index(path)
    full = True
    real_open = bm25_folder.Folder._open

    def open_on_a_full_disk(self: Any) -> Any:
        if full and "memory" in self.path.parts:
            # Tantivy's words for ENOSPC while it writes a new index's first files.
            raise ValueError("An IO error occurred: 'No space left on device (os error 28)'")
        return real_open(self)

    monkeypatch.setattr(bm25_folder.Folder, "_open", open_on_a_full_disk)
    try:
        idx.add([_doc("vault/v", "quince in the vault")])
        idx.commit()
        with pytest.raises(StoreError, match="No space left"):
            idx.add([_doc("memory/p8/n", "quince of p8")])
        assert not [p.name for p in path.parent.iterdir() if "broken" in p.name]
        assert idx.failing == {}
        assert [k for k, _ in idx.search("quince", 10)] == ["vault/v#0"]
        full = False
        idx.add([_doc("memory/p8/n", "quince of p8")])
        idx.commit()
        assert sorted(k for k, _ in idx.search("quince", 10, agent_scope="p8")) == [
            "memory/p8/n#0",
            "vault/v#0",
        ]
    finally:
        idx.close()


def test_an_inbox_index_whose_folder_is_gone_is_not_taken_for_damaged(tmp_path: Path) -> None:
    """The whole index folder gone under an open inbox index (the home's share unmounted) is not
    damage of that inbox: no inbox is reported failing (refilled, it would be made anew on the
    bare mount point); a file of it cut short in place is."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "home" / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/v", "kayak in the vault"), _doc("memory/alpha/a", "kayak of alpha")])
        idx.commit()
        assert idx.search("canoe", 10, agent_scope="alpha") == []  # opened, nothing matches
        (tmp_path / "home").rename(tmp_path / "away")
        (tmp_path / "home").mkdir()
        assert idx.search("canoe", 10, agent_scope="alpha") == [] and idx.failing == {}
        assert not any((tmp_path / "home").iterdir())
        (tmp_path / "home").rmdir()
        (tmp_path / "away").rename(tmp_path / "home")
        for f in (path / "memory" / "alpha" / "chunks").glob("*.term"):
            with f.open("r+b") as fh:
                fh.truncate(1)
        assert idx.search("canoe", 10, agent_scope="alpha") == []
        assert "alpha/chunks" in idx.failing and "was cut short" in idx.failing["alpha/chunks"]
    finally:
        idx.close()


@pytest.mark.parametrize(
    "error",
    [
        "Read-only file system (os error 30)",  # the share remounted read-only after an I/O error
        "Permission denied (os error 13)",  # a sync tool's lock, an ACL change
        "Input/output error (os error 5)",  # an NFS/SMB hiccup
        "Stale file handle (os error 116)",  # the NFS server restarted
    ],
)
def test_an_inbox_commit_failing_for_the_share_keeps_the_index(tmp_path: Path, error: str) -> None:
    """An inbox's commit that fails for a reason of the file system, not of its files, moved the
    healthy index aside (every inbox with a pending write, at each hiccup of a share) and said
    it was damaged; on a read-only share the fallback removed it. It fails and is retried, as a
    full disk's commit is."""
    from unittest import mock

    from sidecar.contracts.errors import StoreError
    from sidecar.stores import bm25_folder
    from sidecar.stores.bm25 import Bm25Index

    idx = Bm25Index(tmp_path / "bm25")
    idx.add([_doc("memory/beta/n0", "kayak of beta")])
    idx.commit()
    idx.add([_doc("memory/beta/n1", "canoe of beta")])
    real = bm25_folder.Folder.commit

    def failing(self: Any) -> None:
        if "beta" in str(self.path) and self.dirty:
            raise StoreError(f"BM25 commit failed: {error}")
        real(self)

    try:
        with mock.patch.object(bm25_folder.Folder, "commit", failing), pytest.raises(StoreError):
            idx.commit()
        assert not [p.name for p in tmp_path.iterdir() if "broken" in p.name] and "beta" not in idx.failing
        assert "memory/beta/n0#0" in idx.all_ids()  # the index as it was, still read
    finally:
        idx.close()


def test_a_word_typed_without_umlauts_scores_as_written_with_them(make_cfg: Any, tmp_path: Path) -> None:
    """ "Kuendigung" and "Uebersicht" (typed without umlauts) find the note at the score of
    "Kündigung" and "Übersicht" (a third of it before: under recall's floor); "poet" is not read
    as the "pot" of another note."""
    vault = tmp_path / "v"
    write(vault / "Miete.md", "# Miete\n\nDie Kündigung des Mietvertrags, die Übersicht der Kosten.\n")
    write(vault / "Tee.md", "# Tee\n\nA pot of tea.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        for typed, written in (("Kuendigung", "Kündigung"), ("Uebersicht", "Übersicht")):
            got, want = search(h, typed), search(h, written)
            assert got[0]["reference"] == want[0]["reference"] == "vault/Miete"
            assert got[0]["score"] == want[0]["score"], typed
        poet, pot = search(h, "poet"), search(h, "pot")
        assert pot[0]["reference"] == "vault/Tee"
        assert [x["score"] for x in poet if x["reference"] == "vault/Tee"] < [pot[0]["score"]]
    finally:
        h.close()


def test_words_with_combining_marks_are_found_by_keyword(make_cfg: Any, tmp_path: Path) -> None:
    """Hindi, Bengali and vowelled Arabic write vowels as combining marks; the query's words are
    read whole, as the keyword index reads them (Python's \\w stopped at each mark, so "हिन्दी"
    became pieces no indexed word equals and the keyword arm found nothing)."""
    vault = tmp_path / "v"
    write(vault / "Hindi.md", "# भाषा\n\nहिन्दी एक भाषा है।\n")
    write(vault / "Bangla.md", "# নোট\n\nসম্পাদনা করুন এই নোট।\n")
    write(vault / "Arabic.md", "# ملاحظة\n\nاسمه مُحَمَّد في الملاحظة.\n")
    write(vault / "Other.md", "# Other\n\nnothing here at all\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        for query, note in (("हिन्दी", "vault/Hindi"), ("সম্পাদনা", "vault/Bangla"), ("مُحَمَّد", "vault/Arabic")):
            hits = [hit["reference"] for hit in search(h, query) if (hit["bm25Score"] or 0) > 0]
            assert hits == [note], query
        write(vault / "Sun.md", "# Sun\n\nA sunny day ☀️ and a heart ❤️ for the family 👨\u200d👩\u200d👧.\n")
        h.sweep()
        # An emoji's variation selector or joiner is no word of a query (it matched every note
        # holding such an emoji, and small talk with one recalled notes).
        assert [hit["reference"] for hit in search(h, "ok ✔️") if (hit["bm25Score"] or 0) > 0] == []
        assert analyze("thanks ❤️").content_words == () and analyze("garden ❤️").content_words == ("garden",)
    finally:
        h.close()
