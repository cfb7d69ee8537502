"""The shortcuts of a search keep its answers: the in-memory exact vector search answers as
LanceDB's query does (and sees writes), the query cache never serves another model's vector,
the vector arm started early gives the hits of the sequential path, and a search's one look at
the keyword index (each searcher taken once, each word counted once) ends with the search."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tantivy

from sidecar.search.querycache import QueryCache
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from sidecar.stores import bm25_folder, bm25_search
from sidecar.stores import vectors as vectors_mod
from sidecar.stores.bm25_folder import one_look
from sidecar.stores.bm25_search import _UNION_MOST, any_of
from sidecar.stores.vectors import VectorStore
from tests.conftest import FakeEmbedder, Harness, write

DIM = 32


def _table(tmp_path: Path, rows: int) -> tuple[VectorStore, np.ndarray]:
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((rows, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = VectorStore(tmp_path / "vectors", "test@1", DIM, "mean")
    meta = [
        (f"c{i:04d}", f"vault/n{i // 3}" if i % 4 else f"memory/bot{i % 3}/m{i}", "vault", "")
        if i % 4
        else (f"c{i:04d}", f"memory/bot{i % 3}/m{i}", "memory", f"bot{i % 3}")
        for i in range(rows)
    ]
    store.add(meta, vecs)
    return store, vecs


def _lance(store: VectorStore, monkeypatch: pytest.MonkeyPatch, *args: object, **kw: object) -> list:
    with monkeypatch.context() as m:
        m.setattr(vectors_mod, "EXACT_MAX_ROWS", 0)  # forces the LanceDB query
        return store.search(*args, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "filters",
    [{}, {"sources": ["vault"]}, {"agent_scope": "bot1"}, {"sources": ["memory"], "agent_scope": "bot2"}],
)
def test_exact_search_answers_as_lancedb_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: dict[str, object]
) -> None:
    store, vecs = _table(tmp_path, 400)  # above CENTROID_MIN_ROWS: hubness is computed too
    rng = np.random.default_rng(3)
    for i in range(12):
        q = vecs[i * 30] + 0.5 * rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        want = _lance(store, monkeypatch, q, 25, **filters)
        got = store.search(q, 25, **filters)  # type: ignore[arg-type]
        assert store._exact is not None  # the copy answered
        assert [c for c, _, _ in got] == [c for c, _, _ in want]
        assert np.allclose([s for _, s, _ in got], [s for _, s, _ in want], atol=1e-6)
        assert [h for _, _, h in got] == [h for _, _, h in want]
        assert any(h != 0.0 for _, _, h in got)


def test_exact_search_sees_every_write(tmp_path: Path) -> None:
    store, _ = _table(tmp_path, 50)
    probe = np.zeros(DIM, dtype=np.float32)
    probe[0] = 1.0
    before = store.search(probe, 5)
    store.add([("new", "vault/new", "vault", "")], probe[None, :])
    assert store.search(probe, 5)[0][:2] == ("new", pytest.approx(1.0, abs=1e-6))
    store.delete_ids(["new"])
    assert store.search(probe, 5) == before
    store.clear()
    assert store.search(probe, 5) == []


def _as_read(store: VectorStore) -> tuple:
    """The in-memory copy as it stands, and the table read afresh, in comparable form."""
    kept = store._exact
    assert kept is not None and kept.generation == store._generation
    fresh = VectorStore._read_copy(store, kept.generation)  # not through a test's counter
    assert fresh is not None

    def form(e: object) -> tuple:
        return (
            e.ids,  # type: ignore[attr-defined]
            e.keys,  # type: ignore[attr-defined]
            e.sources.tolist(),  # type: ignore[attr-defined]
            e.agents.tolist(),  # type: ignore[attr-defined]
            e.vectors.tobytes(),  # type: ignore[attr-defined]
            e.norms.tobytes(),  # type: ignore[attr-defined]
        )

    return form(kept), form(fresh)


def test_writes_keep_the_copy_in_step_without_reading_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After adds, deletions by id and by note, a compaction and a clear, the copy a search uses is
    the table as a fresh read gives it (rows, order, vectors), and no search read the table."""
    store, vecs = _table(tmp_path, 60)
    store.search(vecs[0], 5)  # the one read of the table
    reads: list[int] = []
    read = store._read_copy
    monkeypatch.setattr(store, "_read_copy", lambda g: reads.append(g) or read(g))
    rng = np.random.default_rng(11)
    for step in range(12):
        fresh = rng.standard_normal((3, DIM)).astype(np.float32)
        rows = [
            (f"s{step}-{j}", f"memory/bot{step % 2}/w{step}", "memory", f"bot{step % 2}") for j in range(3)
        ]
        store.add(rows, fresh)
        if step % 3 == 1:
            store.delete_ids([f"s{step - 1}-0", f"c{step:04d}", "absent"])
        if step % 4 == 2:
            store.delete_keys([f"memory/bot{(step - 1) % 2}/w{step - 1}", "vault/n5"])
        if step == 6:
            store.optimize()
        hits = store.search(fresh[1], 3)
        assert hits[0][0] == f"s{step}-1" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert reads == []  # every search answered from the copy the writes kept
    kept, table = _as_read(store)
    assert kept == table
    store.clear()
    assert store.search(vecs[0], 5) == [] and reads == []
    store.add([("late", "vault/late", "vault", "")], vecs[:1])
    kept, table = _as_read(store)
    assert kept == table and kept[0] == ["late"]


def test_a_failed_write_drops_the_copy_and_the_next_search_reads_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, vecs = _table(tmp_path, 20)
    store.search(vecs[0], 3)
    assert store._exact is not None

    def broken(*_a: object, **_k: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(store._table, "add", broken)
        with pytest.raises(vectors_mod.StoreError):
            store.add([("x", "vault/x", "vault", "")], vecs[:1])
    assert store._exact is None
    assert [c for c, _, _ in store.search(vecs[3], 1)] == ["c0003"]  # read again, still right
    assert store._exact is not None and len(store._exact.ids) == 20


def test_large_or_indexed_tables_use_the_lancedb_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, vecs = _table(tmp_path, 30)
    monkeypatch.setattr(vectors_mod, "EXACT_MAX_ROWS", 20)
    assert store.search(vecs[0], 3)[0][0] == "c0000"
    assert store._exact is None


class _Counting(FakeEmbedder):
    def __init__(self, model_id: str) -> None:
        super().__init__()
        self.model_id = model_id
        self.queries: list[str] = []
        self.counted: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return super().embed_query(text) * (2.0 if self.model_id.endswith("2") else 1.0)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        self.counted.extend(texts)
        return super().count_tokens(texts)


def test_query_cache_serves_one_model_only() -> None:
    cache = QueryCache(2)
    a, b = _Counting("m@1"), _Counting("m@2")
    first = cache.vector(a, "tomato sun")
    assert np.array_equal(cache.vector(a, "tomato sun"), first) and a.queries == ["tomato sun"]
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 1.0  # shared between searches: read-only
    other = cache.vector(b, "tomato sun")  # another model: embedded by it, never the cached one
    assert b.queries == ["tomato sun"] and np.allclose(other, 2 * first)
    cache.vector(a, "tomato sun")
    assert a.queries == ["tomato sun", "tomato sun"]  # switching models started over
    cache.vector(a, "x")
    cache.vector(a, "y")  # size 2: "tomato sun" is the least recent and goes
    cache.vector(a, "tomato sun")
    assert a.queries.count("tomato sun") == 3
    assert cache.pieces(a, ["garden", "boat", "garden"]) == [1, 1, 1]
    assert cache.pieces(a, ["boat", "bread"]) == [1, 1]
    assert a.counted == ["garden", "boat", "bread"]
    off = QueryCache(0)
    off.vector(a, "q")
    off.vector(a, "q")
    assert a.queries.count("q") == 2


def _stamps(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders whose meta.json a searcher look stats from now on."""
    seen: list[Path] = []
    real = bm25_folder._meta_stamp

    def counted(folder: Path) -> tuple[int, int, int] | None:
        seen.append(folder)
        return real(folder)

    monkeypatch.setattr(bm25_folder, "_meta_stamp", counted)
    return seen


def test_one_look_takes_each_searcher_once_and_ends_with_it(
    harness: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one look a folder's searcher is taken (meta.json stat'ed) once and a word counted
    from it once; a commit meanwhile is seen by the next look, not by this one."""
    harness.sweep()
    bm25 = harness.stores.bm25
    stamps = _stamps(monkeypatch)
    with one_look():
        assert bm25.doc_freq("restic") == 1 and bm25.doc_freq("restic") == 1
        assert bm25.doc_freq("restic", pages=True) == 1 and bm25.doc_freq("tomatoes") == 1
        assert len(stamps) == len(set(stamps)) == 2  # the chunks' folder and the pages' folder
        write(vault / "Restic.md", "# Restic\n\nrestic prunes old snapshots weekly.\n")
        harness.sweep()  # committed (here, in the look's own thread)
        assert bm25.doc_freq("restic") == 1  # the look's searcher and its count
    assert bm25.doc_freq("restic") == 2 and bm25.doc_freq("restic", pages=True) == 2
    with one_look():
        assert bm25.doc_freq("restic") == 2  # a new look counts anew
    outside = len(stamps)
    bm25.doc_freq("restic")
    bm25.doc_freq("restic")
    assert len(stamps) == outside + 2  # no look: every read looks at meta.json, as before


def test_a_search_looks_at_each_keyword_folder_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search reads each keyword folder's meta.json once, not at each of its reads; the
    next search looks again (and sees a change)."""
    harness.sweep()
    r = Retriever(harness.stores, harness.slot, harness.cfg.search, harness.cfg.recall)
    stamps = _stamps(monkeypatch)
    first = r.search(SearchRequest("restic backups of the NAS", limit=10, min_score=0.0))
    assert stamps and len(stamps) == len(set(stamps))
    taken = len(stamps)
    again = r.search(SearchRequest("restic backups of the NAS", limit=10, min_score=0.0))
    assert len(stamps) == 2 * taken
    assert [h.reference for h in again.hits] == [h.reference for h in first.hits]


def test_chunk_views_are_kept_and_follow_every_change(harness: Harness, vault: Path) -> None:
    """A chunk's view is built once while its row is unchanged, and a change of the chunk or of
    its note (text, aliases in the front matter) shows at once."""
    note = write(vault / "Kayak.md", "---\naliases: [Paddle boat]\n---\n# Kayak\n\nThe kayak leaks.\n")
    harness.sweep()
    manifest = harness.stores.manifest
    ids = [v.chunk_id for v in manifest.chunks_of("vault/Kayak")]
    first = manifest.views(ids)
    assert all(manifest.views(ids)[i] is first[i] for i in ids)  # kept, not built again
    assert {v.aliases for v in first.values()} == {("Paddle boat",)}
    note.write_text("---\naliases: [Canoe]\n---\n# Kayak\n\nThe kayak leaks at the bow.\n")
    harness.sweep()
    now = manifest.views([v.chunk_id for v in manifest.chunks_of("vault/Kayak")])
    assert {v.aliases for v in now.values()} == {("Canoe",)}
    assert any("at the bow" in v.text for v in now.values())
    assert not any("at the bow" in v.text for v in first.values())
    # Only the front matter changed, the text kept: seen at once.
    note.write_text("---\naliases: [Dinghy]\n---\n# Kayak\n\nThe kayak leaks at the bow.\n")
    harness.sweep()
    again = manifest.views([v.chunk_id for v in manifest.chunks_of("vault/Kayak")])
    assert {v.aliases for v in again.values()} == {("Dinghy",)}


def test_a_kept_view_follows_its_notes_front_matter_alone(harness: Harness, vault: Path) -> None:
    """The front matter is part of a kept view's key on its own: a row whose front matter
    changed while everything else stayed (mtime and indexing time too) gets a new view. A sweep's
    edit changes the note's mtime and indexing time as well, so it cannot tell."""
    write(vault / "Kayak.md", "---\naliases: [Paddle boat]\n---\n# Kayak\n\nThe kayak leaks.\n")
    harness.sweep()
    manifest = harness.stores.manifest
    ids = [v.chunk_id for v in manifest.chunks_of("vault/Kayak")]
    first = manifest.views(ids)
    assert {v.aliases for v in first.values()} == {("Paddle boat",)}
    before = manifest.read("SELECT mtime_ns, indexed_at FROM files WHERE key = ?", ("vault/Kayak",))
    with manifest.transaction() as db:
        db.execute(
            "UPDATE files SET front_matter = ? WHERE key = ?",
            (json.dumps({"aliases": ["Canoe"]}), "vault/Kayak"),
        )
    assert manifest.read("SELECT mtime_ns, indexed_at FROM files WHERE key = ?", ("vault/Kayak",)) == before
    assert {v.aliases for v in manifest.views(ids).values()} == {("Canoe",)}


def test_any_of_finds_what_a_term_set_finds(harness: Harness, vault: Path) -> None:
    """The keyword index's restriction to notes (``any_of``) matches the documents Tantivy's term
    set does, for one, several, unknown and no values, and a restricted page search scores what
    the unrestricted one scores."""
    for name in ("Kayak", "Canoe", "Dinghy boat", "Ärger"):
        write(vault / f"{name}.md", f"# {name}\n\nThe {name} floats on the lake.\n")
    harness.sweep()
    bm25 = harness.stores.bm25
    searcher, schema = bm25._pages.searcher, bm25.schema
    keys = ["vault/Kayak", "vault/Canoe", "vault/Dinghy boat", "vault/Ärger"]
    floats = tantivy.Query.term_query(schema, "body", "floats")

    def found(restriction: tantivy.Query) -> list[tuple[float, int, int]]:
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, floats),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(restriction, 0.0)),
            ]
        )
        return sorted((s, a.segment_ord, a.doc) for s, a in searcher.search(query, limit=10).hits)

    # Past _UNION_MOST values the term set itself answers: the same documents either way.
    many = [*keys[1:3], *(f"vault/absent {i}" for i in range(_UNION_MOST + 1))]
    for wanted in ([], keys[:1], keys[1:], [*keys[2:], "vault/None", "vault/kayak"], ["vault/None"], many):
        assert found(any_of(schema, "key", wanted)) == found(
            tantivy.Query.term_set_query(schema, "key", wanted)
        )
    assert len(found(any_of(schema, "key", keys))) == 4
    whole = dict(bm25.search_pages("floats lake", 10))
    assert whole and dict(bm25.search_pages("floats lake", 10, keys=keys[1:3])) == {
        k: whole[k] for k in keys[1:3]
    }


def test_only_a_searchs_reads_keep_views_and_they_are_bounded_in_bytes(harness: Harness, vault: Path) -> None:
    """Reads of many chunks at once (a refill's, an agent's, a note's) build their views without
    keeping them; a search's kept views hold no copy of their note's front matter and stay within
    their bound of bytes, the least recently used going first."""
    big = "---\naliases: [Long]\nsummary: " + "x" * 5000 + "\n---\n"
    for i in range(6):
        write(vault / f"Long{i}.md", f"{big}# Long {i}\n\nparagraph {i} about boats.\n")
    harness.sweep()
    manifest = harness.stores.manifest
    kept = manifest.kept_views
    list(manifest.all_chunks())
    manifest.chunks_of("vault/Long0")
    list(manifest.chunks_under("vault/"))
    assert len(kept) == 0 and kept.bytes == 0
    ids = [v.chunk_id for i in range(6) for v in manifest.chunks_of(f"vault/Long{i}")]
    views = manifest.views(ids)
    assert len(views) == len(ids) == len(kept)
    assert 0 < kept.bytes < 5000 * len(ids)  # no front matter kept
    assert not any(isinstance(x, str) and "x" * 5000 in x for k in kept._kept for x in k)
    kept.max_bytes = kept.bytes // 2  # a smaller bound: the least recently used go as new ones come
    manifest.views(ids[:1])  # the first kept, used again: now the most recently used, it stays
    write(vault / "Boat.md", "# Boat\n\nThe boat floats.\n")
    harness.sweep()
    manifest.views([v.chunk_id for v in manifest.chunks_of("vault/Boat")])
    assert kept.bytes <= kept.max_bytes and 0 < len(kept) < len(ids)
    assert manifest.views(ids[:1])[ids[0]] is views[ids[0]]  # kept
    assert manifest.views(ids[1:2])[ids[1]] is not views[ids[1]]  # the least recently used went: built again
    assert manifest.views(ids) == views  # the same views, kept or built again


def test_a_looks_kept_counts_and_analyses_keep_each_field_index_and_analyser_apart(
    harness: Harness, vault: Path
) -> None:
    """Within one look a word's count and analysis are kept, but each (field, searchers) count
    and each analyser's terms apart: the same word counted in the title and in the body, in the
    chunks and in the pages, or analysed plain, stemmed and German-folded gives inside a look
    what it gives outside, whichever is asked first."""
    section = "Gardens need water in summer. " * 40
    write(vault / "Gardens.md", f"# Gardens\n\n## Beds\n\n{section}\n\n## Paths\n\n{section}\n")
    write(vault / "Allotment.md", "# Allotment\n\nOur gardens share one tap; the Gärten der Nachbarn zwei.\n")
    harness.sweep()
    bm25 = harness.stores.bm25
    fields = ("body", "title", "body_en", "body_de")
    asks = [(w, f, p) for w in ("gardens", "Gärten", "tap") for f in fields for p in (False, True)]
    texts = ["gardens", "Gärten der Nachbarn", "Gaerten"]

    def counts(order: Sequence[tuple[str, str, bool]]) -> dict[tuple[str, str, bool], int]:
        return {(w, f, p): bm25.doc_freq(w, field=f, pages=p) for w, f, p in order}

    def analysed(order: Sequence[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
        return {(t, f): bm25.analyze(t, f) for t, f in order}

    pairs = [(t, f) for t in texts for f in fields]
    outside, terms = counts(asks), analysed(pairs)
    # What the test tells apart: the same word counted differently by field and by index, and
    # analysed differently by each field's analyser.
    assert outside["gardens", "body", False] != outside["gardens", "title", False]
    assert outside["gardens", "body", False] != outside["gardens", "body", True]
    assert terms["gardens", "body"] != terms["gardens", "body_en"]
    assert terms["Gaerten", "body"] != terms["Gaerten", "body_de"]
    for order in (asks, asks[::-1]):
        with one_look():
            assert counts(order) == outside
    for each in (pairs, pairs[::-1]):
        with one_look():
            assert analysed(each) == terms
    # A query's ideal score, kept too: by text, chunks or pages, and the language stemmed.
    ideals = [(t, p, stem) for t in texts for p in (False, True) for stem in (None, "en", "de")]

    def ideal(order: Sequence[tuple[str, bool, str | None]]) -> dict[tuple[str, bool, str | None], float]:
        return {(t, p, stem): bm25.ideal_score(t, pages=p, stem=stem) for t, p, stem in order}

    scores = ideal(ideals)
    assert scores["gardens", False, None] != scores["gardens", True, None]
    assert scores["gardens", False, None] != scores["gardens", False, "en"]
    assert any(scores[t, False, "en"] != scores[t, False, "de"] for t in texts)
    for each in (ideals, ideals[::-1]):
        with one_look():
            assert ideal(each) == scores


def test_why_embeds_the_query_once(make_cfg: Any, vault: Path) -> None:
    """`why` scores a note's chunks with the vector the vector arm searched with: the query is
    embedded once, and the cosines are the search's."""
    from sidecar.search.explain import explain

    model = _Counting("fake-bow@1")
    h = Harness(make_cfg(vault), model)
    try:
        h.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        r.cfg = replace(r.cfg, query_cache=0)  # every ask of the vector would embed again
        hits = r.search(SearchRequest("tomatoes need sun", limit=5, min_score=0.0)).hits
        hit = next(x for x in hits if x.reference == "vault/Garden")
        model.queries.clear()
        why = explain(r, "vault/Garden", "tomatoes need sun", None)
        assert model.queries == ["tomatoes need sun"]
        assert why.chunks[0].vec_score == pytest.approx(hit.vec_score, abs=1e-4)
    finally:
        h.close()


class _Waiting(FakeEmbedder):
    """A query embedding that lasts until ``go`` is set (or a few seconds pass); ``ready``
    once it ended."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.ready = threading.Event()  # a query's vector is ready

    def embed_query(self, text: str) -> np.ndarray:
        self.go.wait(10)
        self.ready.set()
        return super().embed_query(text)


def test_a_searchs_scale_is_counted_while_the_query_embeds_and_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query's scale needs the keyword index alone: the search counts it while the vector arm
    still embeds the query, and its ranking takes the same counts (one look) without counting
    again; the answer is the one counted after the embedding."""
    model = _Waiting()
    write(vault / "Garden.md", "# Garden\n\nTomatoes need sun and water.\n")
    write(vault / "Shed.md", "# Shed\n\nThe shed holds the tools.\n")
    h = Harness(make_cfg(vault), model)
    try:
        h.sweep()
        bm25 = h.stores.bm25
        counted: list[tuple[str, bool, bool]] = []  # (text, pages, while embedding)
        computed: list[bool] = []  # per ask: whether it counted (else it was kept)
        real, boosts = bm25.ideal_score, bm25_search.field_boosts

        def field_boosts(stem: str | None = None) -> dict[str, float]:
            computed[-1:] = [True] if computed else []  # an ask of ideal_score's that counts
            return boosts(stem)

        def ideal_score(text: str, *, pages: bool = False, stem: str | None = None) -> float:
            counted.append((text, pages, not model.ready.is_set()))
            computed.append(False)
            return real(text, pages=pages, stem=stem)

        monkeypatch.setattr(bm25_search, "field_boosts", field_boosts)
        monkeypatch.setattr(bm25, "ideal_score", ideal_score)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        r.cfg = replace(r.cfg, query_cache=0)
        # Whatever the search does while the query embeds, then the embedding ends (without it,
        # the embedding lasts its few seconds and every count comes after it).
        monkeypatch.setattr(
            r, "_scale_meanwhile", lambda *a: (Retriever._scale_meanwhile(r, *a), model.go.set())
        )
        hits = r.search(SearchRequest("tomatoes need sun", limit=5, min_score=0.0)).hits
        during = {(t, p) for t, p, embedding in counted if embedding}
        assert {p for _, p in during} == {False, True}  # chunks and pages counted while it embedded
        later = [(t, p, c) for (t, p, embedding), c in zip(counted, computed, strict=True) if not embedding]
        assert later and all((t, p) in during and not c for t, p, c in later)  # the ranking's: kept
        assert computed.count(True) == len(during)  # each counted once
        # The same answer as a search whose vector was ready before any count.
        monkeypatch.setattr(bm25, "ideal_score", real)
        again = r.search(SearchRequest("tomatoes need sun", limit=5, min_score=0.0)).hits
        assert [(x.reference, x.score, x.relevance) for x in again] == [
            (x.reference, x.score, x.relevance) for x in hits
        ]
    finally:
        h.close()
