"""Indexer over real Tantivy, LanceDB and sqlite with a fake embedder: sweeps, edits, deletes,
crash convergence, bad files, and the vault never being written."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.wire import hit_json
from sidecar.index import indexer as indexer_mod
from sidecar.search.query import analyze
from sidecar.search.retrieval import Retriever, SearchRequest
from sidecar.vault.sources import Root
from tests.conftest import FakeEmbedder, Harness, write


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mtime_ns,
            )
        else:
            out[str(p.relative_to(folder))] = ("dir", 0)
    return out


def _store_counts(h: Harness) -> tuple[int, int, int]:
    assert h.stores.vectors is not None
    return h.stores.manifest.chunk_count(), h.stores.bm25.num_docs(), h.stores.vectors.count()


def _index_and_close(cfg: Any) -> int:
    """Index the vault into real stores, close them (as a stopped daemon would); the chunk count."""
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    count = h.stores.manifest.chunk_count()
    h.close()
    return count


def _search(h: Harness, query: str, **kw: Any) -> list[dict[str, Any]]:
    r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
    hits = r.search(SearchRequest(query, kw.pop("limit", 10), kw.pop("min_score", 0.0), **kw)).hits
    return [hit_json(h) for h in hits]


def test_sweep_indexes_every_store_consistently(harness: Harness) -> None:
    """A first sweep puts every chunk in BM25 and, after backfill, in the vector table."""
    summary = harness.sweep()
    assert summary["changed"] == 4
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors > 0
    assert harness.stores.manifest.pending_count() == 0
    counts = harness.indexer.counts()
    assert counts["by_source"]["wiki"]["files"] == 1 and counts["by_source"]["vault"]["files"] == 3


def test_search_finds_by_keyword_and_vector(harness: Harness) -> None:
    """Hybrid search returns the right note first, with every documented hit field."""
    harness.sweep()
    hits = _search(harness, "restic backups of the NAS")
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
    assert top["source"] == "wiki" and top["boosts"]["source"] == 1.4
    only_vault = _search(harness, "restic backups", sources=("vault",))
    assert all(h["source"] == "vault" for h in only_vault)


@pytest.mark.parametrize(
    "query", ["[[wiki-link]]", '"unclosed', "(paren", "AND", "foo:bar", "😀", "*", "OR NOT"]
)
def test_hostile_queries_neither_raise_nor_match_everything(harness: Harness, query: str) -> None:
    """Query syntax in user text is just text: nothing raises, nothing turns into match-all."""
    harness.sweep()
    hits = harness.stores.bm25.search(query, 50)
    assert len(hits) < harness.stores.bm25.num_docs() or harness.stores.bm25.num_docs() == 0


def test_unchanged_resweep_reads_no_file(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second sweep over an unchanged vault compares stat only and reads no note."""
    harness.sweep()
    reads: list[Path] = []
    real = indexer_mod.read_note
    monkeypatch.setattr(indexer_mod, "read_note", lambda p, m: reads.append(p) or real(p, m))
    summary = harness.sweep()
    assert reads == [] and summary["changed"] == 0 and summary["unchanged"] == 4


def test_touched_file_with_same_content_is_not_reindexed(harness: Harness) -> None:
    """A new mtime with identical bytes is read and hashed, but nothing is re-chunked or re-embedded."""
    harness.sweep()
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    before = len(model.embedded)
    note = harness.cfg.vault.path / "Garden.md"  # type: ignore[operator]
    os.utime(note, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    assert harness.sweep()["changed"] == 0
    assert len(model.embedded) == before


def test_edit_reembeds_only_changed_chunks(harness: Harness) -> None:
    """Editing one section re-embeds that chunk only; unchanged chunks keep their vectors."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(
        vault / "Long.md", "# Long\n\n## One\n\nalpha text\n\n## Two\n\nbeta text\n\n## Three\n\ngamma text\n"
    )
    harness.sweep()
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    model.embedded.clear()
    write(
        vault / "Long.md",
        "# Long\n\n## One\n\nalpha text\n\n## Two\n\nBETA CHANGED\n\n## Three\n\ngamma text\n",
    )
    harness.sweep()
    assert len(model.embedded) == 1 and "BETA CHANGED" in model.embedded[0]
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors
    assert _search(harness, "beta changed")[0]["reference"] == "vault/Long"


def test_editing_one_paragraph_of_a_20_chunk_note_embeds_one_chunk(harness: Harness) -> None:
    """Issue 7: chunk-level hashes, so one changed paragraph costs one model call for one text."""
    vault = harness.cfg.vault.path
    assert vault is not None
    sections = [f"## Part {i}\n\nParagraph {i} talks about topic{i} in plain words.\n" for i in range(20)]
    write(vault / "Twenty.md", "# Twenty\n\n" + "\n".join(sections))
    harness.sweep()
    assert len(harness.stores.manifest.chunks_of("vault/Twenty")) == 20
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    calls: list[list[str]] = []
    real = model.embed_passages
    model.embed_passages = lambda texts: calls.append(list(texts)) or real(texts)  # type: ignore[method-assign]
    sections[7] = "## Part 7\n\nParagraph 7 was rewritten to mention lighthouses.\n"
    write(vault / "Twenty.md", "# Twenty\n\n" + "\n".join(sections))
    harness.sweep()
    assert len(calls) == 1 and len(calls[0]) == 1 and "lighthouses" in calls[0][0]
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors
    assert "vault/Twenty" in [h["reference"] for h in _search(harness, "lighthouses")]


def test_identical_text_is_embedded_once_across_notes(harness: Harness) -> None:
    """A template copied into several folders (same title, same text) runs the model once per text;
    every copy still gets its vector, and a later copy reuses the stored one without the model."""
    vault = harness.cfg.vault.path
    assert vault is not None
    body = "# Weekly review\n\n## Wins\n\nWhat went well this week.\n\n## Next\n\nThree priorities.\n"
    for folder in ("2024", "2025"):
        write(vault / folder / "Weekly review.md", body)
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    harness.sweep()
    texts = [t for t in model.embedded if "Weekly review" in t]
    assert len(texts) == len(set(texts)) == 2
    write(vault / "2026" / "Weekly review.md", body)
    model.embedded.clear()
    harness.sweep()
    assert model.embedded == []
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors
    assert harness.indexer.vectors.reused >= 4
    store = harness.stores.vectors
    assert store is not None
    ids = [c.chunk_id for c in harness.stores.manifest.chunks_of("vault/2026/Weekly review")]
    copies = [c.chunk_id for c in harness.stores.manifest.chunks_of("vault/2024/Weekly review")]
    got = store.vectors_of(ids + copies)
    assert all((got[a] == got[b]).all() for a, b in zip(ids, copies, strict=True))


def test_front_matter_only_and_empty_notes_are_not_embedded(harness: Harness) -> None:
    """Such notes get one chunk for BM25 (findable by title) but no model call and no vector."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Only props.md", "---\ntags: [inbox]\ndescription: placeholder zebra\n---\n")
    write(vault / "Empty.md", "")
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    harness.sweep()
    assert not any("Only props" in t or t.startswith("Empty") for t in model.embedded)
    assert harness.stores.manifest.pending_count() == 0
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors + 2
    assert "vault/Only props" in [h["reference"] for h in _search(harness, "zebra")]
    # A new model's table (migration) does not wait for them either.
    harness.stores.manifest.reset_vectors()
    assert harness.stores.manifest.pending_count() == vectors


def test_deleted_note_leaves_every_store(harness: Harness) -> None:
    """Deleting a note removes its chunks from BM25, vectors and the manifest."""
    harness.sweep()
    (harness.cfg.vault.path / "Recipes" / "Bread.md").unlink()  # type: ignore[operator]
    harness.sweep()
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors
    assert all(h["reference"] != "vault/Recipes/Bread" for h in _search(harness, "sourdough bread starter"))


def test_bad_files_are_skipped_and_counted(harness: Harness) -> None:
    """Binary, non-UTF-8 and unreadable notes are skipped with a reason; the others index."""
    vault = harness.cfg.vault.path
    assert vault is not None
    (vault / "binary.md").write_bytes(b"\0\1\2\3" * 100)
    (vault / "latin1.md").write_bytes("Grüße aus Köln".encode("latin-1"))
    locked = write(vault / "locked.md", "secret")
    locked.chmod(0)
    write(vault / "badyaml.md", "---\ntags: [oops\n---\nThe body of a note with broken front matter.\n")
    try:
        summary = harness.sweep()
    finally:
        locked.chmod(0o644)
    counts = harness.indexer.counts()
    readable_anyway = 1 if os.geteuid() == 0 else 0  # root reads mode-000 files
    assert counts["by_source"]["vault"]["files"] == 4 + readable_anyway  # 3 good + badyaml
    skipped = counts["skipped"]
    assert skipped.get("binary") == 1 and skipped.get("not UTF-8") == 1
    if not readable_anyway:
        assert any(k.startswith("unreadable") for k in skipped)
    assert summary["changed"] >= 6
    assert _search(harness, "broken front matter")[0]["reference"] == "vault/badyaml"
    # skipped files are not re-read on the next sweep
    assert harness.sweep()["changed"] == 0


def test_vault_is_never_written(harness: Harness) -> None:
    """Indexing, re-indexing and searching leave every byte and mtime of the vault as it was."""
    vault = harness.cfg.vault.path
    assert vault is not None
    before = _snapshot(vault)
    harness.sweep()
    _search(harness, "garden")
    harness.indexer.clear()
    harness.sweep()
    assert _snapshot(vault) == before


def test_crash_mid_write_converges(harness: Harness, make_cfg: Any) -> None:
    """A crash between the intent mark and the manifest commit is redone on the next start."""
    harness.sweep()
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Garden.md", "# Garden\n\nCucumbers instead of tomatoes this year.\n")

    boom = RuntimeError("simulated crash after BM25 commit")
    real_commit = harness.stores.bm25.commit

    def crash() -> None:
        real_commit()
        raise boom

    harness.stores.bm25.commit = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        harness.indexer.sweep()
    assert harness.stores.manifest.keys_in_state("indexing") == ["vault/Garden"]
    harness.close()
    # "restart": fresh objects over the same directories
    h2 = Harness(harness.cfg, FakeEmbedder())
    try:
        h2.indexer.finish_interrupted()
        h2.sweep()
        chunks, docs, vectors = _store_counts(h2)
        assert chunks == docs == vectors
        assert h2.stores.manifest.keys_in_state("indexing", "deleting") == []
        assert _search(h2, "cucumbers")[0]["reference"] == "vault/Garden"
    finally:
        h2.close()


def test_interrupted_delete_is_finished_on_start(harness: Harness) -> None:
    """A note left in state 'deleting' by a crash is removed from every store at the next start."""
    harness.sweep()
    harness.stores.manifest.mark_state(["vault/Garden"], "deleting")
    harness.indexer.finish_interrupted()
    keys = {v.key for v in harness.stores.manifest.all_chunks()}
    assert "vault/Garden" not in keys
    chunks, docs, vectors = _store_counts(harness)
    assert chunks == docs == vectors


def test_orphan_and_missing_vectors_are_reconciled(harness: Harness) -> None:
    """Vectors of unknown chunks are dropped and chunks whose vector vanished are queued again."""
    harness.sweep()
    vectors = harness.stores.vectors
    assert vectors is not None
    import numpy as np

    vectors.add([("orphan-id", "vault/Gone", "vault", "")], np.ones((1, 64), dtype=np.float32) / 8)
    victim = next(iter(harness.stores.manifest.vector_ids()))
    vectors.delete_ids([victim])
    harness.indexer.attach_vectors(vectors)
    assert "orphan-id" not in vectors.ids()
    assert harness.stores.manifest.pending_count() == 1
    harness.sweep()
    chunks, docs, n_vectors = _store_counts(harness)
    assert chunks == docs == n_vectors


def test_lost_bm25_index_is_rebuilt_from_manifest(harness: Harness) -> None:
    """If BM25 holds fewer docs than the manifest (deleted dir, crash), the first sweep refills it."""
    harness.sweep()
    harness.stores.bm25.delete_all()
    harness.stores.bm25.commit()
    harness.indexer.activity.first_sweep_done = False
    harness.sweep()
    chunks, docs, _ = _store_counts(harness)
    assert chunks == docs


def test_corrupt_manifest_is_moved_aside(make_cfg: Any, vault: Path) -> None:
    """An unreadable manifest is renamed *.broken-* and the index is rebuilt from the files."""
    cfg = make_cfg(vault)
    _index_and_close(cfg)
    (cfg.index_dir / "manifest.sqlite").write_bytes(b"this is not sqlite" * 100)
    for side in ("manifest.sqlite-wal", "manifest.sqlite-shm"):
        (cfg.index_dir / side).unlink(missing_ok=True)
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert any(p.name.startswith("manifest.sqlite.broken-") for p in cfg.index_dir.iterdir())
        h2.sweep()
        chunks, docs, vectors = _store_counts(h2)
        assert chunks == docs == vectors > 0
    finally:
        h2.close()


def test_new_model_is_built_while_the_old_table_serves(harness: Harness) -> None:
    """A differently configured model fills its own table in the background; the old one answers
    (queried with the old model) until the new one is complete, then takes over and is dropped."""
    harness.sweep()

    class OtherModel(FakeEmbedder):
        model_id = "other-model@2"
        dim = 32

    old = harness.stores.serving
    assert old is not None
    other = OtherModel()
    new_table = indexer_mod.open_vectors(harness.cfg, other.model_id, other.dim, other.pooling)
    assert new_table.name != old.store.name
    harness.indexer.vectors.begin_migration(old.store, old.model, new_table, other)
    harness.indexer.embed_pending(batch=2)
    assert harness.stores.serving is not None and harness.stores.serving.store is old.store
    hits = _search(harness, "restic backups of the NAS")
    assert hits[0]["vecScore"] is not None, "the old table keeps serving during the build"
    assert harness.indexer.vectors.describe()["building"] == new_table.name
    # a change during the build reaches both tables, a deletion leaves both
    write(harness.cfg.vault.path / "Late.md", "# Late\n\nA note written during the migration.\n")  # type: ignore[operator]
    (harness.cfg.vault.path / "Garden.md").unlink()  # type: ignore[operator]
    harness.sweep()
    assert harness.stores.serving.store is new_table and harness.stores.building is None
    assert harness.stores.manifest.get_meta("vector_table") == new_table.name
    assert old.store.name not in old.store._db.list_tables().tables
    assert new_table.ids() == harness.stores.manifest.all_chunk_ids()
    assert harness.stores.manifest.pending_count() == 0


def test_manifest_of_version_1_is_upgraded(tmp_path: Path) -> None:
    """A 0.1.0 manifest (schema 1, no has_next column) opens and gains the column."""
    import sqlite3

    from sidecar.stores.manifest import Manifest

    path = tmp_path / "m.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE chunks (chunk_id TEXT PRIMARY KEY, key TEXT NOT NULL, ord INTEGER NOT NULL, "
        "text TEXT NOT NULL, headings TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, "
        "embed_text TEXT NOT NULL, tokens INTEGER NOT NULL, has_vector INTEGER NOT NULL DEFAULT 0);"
        "PRAGMA user_version=1;"
    )
    db.close()
    m = Manifest(path)
    try:
        assert m.pending_count("has_next") == 0
    finally:
        m.close()


def test_bm25_only_without_model(make_cfg: Any, vault: Path) -> None:
    """With no model, indexing still works, search answers from BM25 and says it is degraded."""
    h = Harness(make_cfg(vault), None)
    try:
        h.indexer.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall).search(
            SearchRequest("spark plugs", 5, 0.0)
        )
        assert r.hits[0].reference == "vault/Projects/Boat"
        assert r.hits[0].vec_score is None
        assert r.degraded and "keyword" in r.degraded
        assert h.stores.manifest.pending_count() == h.stores.manifest.chunk_count()
    finally:
        h.close()


def test_unmounted_vault_keeps_its_index(harness: Harness, tmp_path: Path) -> None:
    """A vault folder that vanishes (unmounted share) goes offline; nothing is deleted."""
    harness.sweep()
    vault = harness.cfg.vault.path
    assert vault is not None
    before = _store_counts(harness)
    vault.rename(tmp_path / "unmounted")
    harness.sweep()
    assert _store_counts(harness) == before
    assert harness.indexer.supervisor.roots["vault"].offline
    (tmp_path / "unmounted").rename(vault)
    harness.sweep()
    assert not harness.indexer.supervisor.roots["vault"].offline
    assert _store_counts(harness) == before


def test_emptied_mount_point_holds_deletions(harness: Harness) -> None:
    """An emptied root (a mount point left behind) holds deletions however many sweeps see it;
    the user's confirmation applies them."""
    vault = harness.cfg.vault.path
    assert vault is not None
    for i in range(6):
        write(vault / f"extra{i}.md", f"# Extra {i}\n\nfiller note number {i}\n")
    harness.sweep()
    before = _store_counts(harness)
    for p in vault.rglob("*.md"):
        if "wiki" not in p.parts and ".obsidian" not in p.parts and ".trash" not in p.parts:
            p.unlink()
    for _ in range(5):
        harness.sweep()
    assert _store_counts(harness) == before
    assert harness.indexer.supervisor.roots["vault"].offline
    assert harness.indexer.supervisor.roots["vault"].hold_kind == "empty"
    harness.indexer.sweep(confirm_deletions={"vault"})
    assert _store_counts(harness)[0] < before[0]


def test_bm25_index_of_an_older_layout_is_upgraded(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index with 0.2's fields (positions everywhere) is replaced without alarm: logged as
    ``index_upgraded``, no problem noted, no ``*.broken-*`` copy kept, refilled from the manifest."""
    import shutil

    import tantivy

    from sidecar.stores.bm25 import FIELD_ANALYZER, FIELD_BOOSTS

    cfg = make_cfg(vault)
    expected = _index_and_close(cfg)
    shutil.rmtree(cfg.index_dir / "bm25")
    (cfg.index_dir / "bm25").mkdir()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw")
    for name in ("key", "source", "agent"):
        sb.add_text_field(name, stored=False, tokenizer_name="raw")
    for name in FIELD_BOOSTS:
        sb.add_text_field(name, stored=False, tokenizer_name=FIELD_ANALYZER[name])
    tantivy.Index(sb.build(), path=str(cfg.index_dir / "bm25"), reuse=True)
    caplog.set_level("INFO")
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert "index_upgraded store=bm25" in caplog.text
        assert not any(".broken-" in p.name for p in cfg.index_dir.iterdir())
        assert h2.stores.problems.describe()["recent"] == []
        assert h2.sweep()["changed"] == 0
        assert h2.stores.bm25.num_docs() == expected
        assert not any(r.levelname in ("WARNING", "ERROR") for r in caplog.records)
    finally:
        h2.close()


def test_corrupt_bm25_index_is_moved_aside_and_refilled(make_cfg: Any, vault: Path) -> None:
    """A garbage Tantivy meta.json: the folder is moved aside and BM25 is refilled from the manifest."""
    cfg = make_cfg(vault)
    expected = _index_and_close(cfg)
    (cfg.index_dir / "bm25" / "meta.json").write_text("{ not json")
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert any(p.name.startswith("bm25.broken-") for p in cfg.index_dir.iterdir())
        summary = h2.sweep()
        assert summary["changed"] == 0, "no note is re-read: BM25 comes back from the manifest"
        assert h2.stores.bm25.num_docs() == expected
        (cid, _score), *_ = h2.stores.bm25.search("spark", 5)
        assert h2.stores.manifest.views([cid])[cid].key == "vault/Projects/Boat"
    finally:
        h2.close()


def test_corrupt_vector_table_is_moved_aside_and_reembedded(make_cfg: Any, vault: Path) -> None:
    """A truncated LanceDB manifest: the vectors folder is moved aside, vectors are recomputed."""
    cfg = make_cfg(vault)
    expected = _index_and_close(cfg)
    manifests = list((cfg.index_dir / "vectors").rglob("_versions/*.manifest"))
    assert manifests
    for m in manifests:
        m.write_bytes(m.read_bytes()[:10])
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert any(p.name.startswith("vectors.broken-") for p in cfg.index_dir.iterdir())
        h2.sweep()
        assert h2.stores.vectors is not None and h2.stores.vectors.count() == expected
        assert h2.stores.manifest.pending_count() == 0
    finally:
        h2.close()


def _truncate_vector_data(cfg: Any) -> None:
    """Cut every data file of the vector table in half: the table still opens, reads fail."""
    files = list((cfg.index_dir / "vectors").rglob("data/*.lance"))
    assert files
    for f in files:
        with f.open("r+b") as fh:
            fh.truncate(f.stat().st_size // 2)


def test_unreadable_vector_table_is_replaced_while_running(harness: Harness) -> None:
    """Truncated data files fail every vector search (a restart would not notice: the table opens);
    the repair reads the table, moves it aside and re-embeds; searches use both arms again."""
    harness.sweep()
    expected = harness.stores.manifest.chunk_count()
    r = Retriever(harness.stores, harness.slot, harness.cfg.search, harness.cfg.recall)
    assert r.search(SearchRequest("spark plugs", 5, 0.0)).degraded is None
    _truncate_vector_data(harness.cfg)
    failed = r.search(SearchRequest("spark plugs", 5, 0.0))
    assert failed.degraded and "vector search failed" in failed.degraded
    assert failed.hits[0].reference == "vault/Projects/Boat"  # keyword arm answers meanwhile
    assert harness.indexer.repair_vectors(failed.degraded) is True
    assert any(p.name.startswith("vectors.broken-") for p in harness.cfg.index_dir.iterdir())
    assert harness.stores.manifest.pending_count() == expected
    while harness.indexer.embed_pending():
        pass
    store = harness.stores.vectors
    assert store is not None and store.count() == expected
    again = r.search(SearchRequest("spark plugs", 5, 0.0))
    assert again.degraded is None and again.hits[0].vec_score is not None
    assert harness.stores.problems.active_in("vector_search") is None


def test_readable_vector_table_is_kept_by_the_repair(harness: Harness) -> None:
    """A repair triggered by failures that were not the table's (e.g. the model) keeps every vector."""
    harness.sweep()
    expected = harness.stores.manifest.chunk_count()
    assert harness.indexer.repair_vectors("the model failed to embed a query") is False
    assert not any(p.name.startswith("vectors.broken-") for p in harness.cfg.index_dir.iterdir())
    store = harness.stores.vectors
    assert store is not None and store.count() == expected
    assert harness.stores.manifest.pending_count() == 0


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


def _harness_over_ann_threshold(make_cfg: Any, tmp_path: Path) -> Harness:
    """300 small notes with search.annThreshold 256: enough rows for an IVF index."""
    vault = tmp_path / "big"
    for i in range(300):
        write(vault / f"n{i:03d}.md", f"# Note {i}\n\nword{i} topic{i % 17} shared text about item {i}\n")
    return Harness(make_cfg(vault, **{"search.annThreshold": 256}), FakeEmbedder())


def test_large_table_gets_an_ann_index(make_cfg: Any, tmp_path: Path) -> None:
    """Above search.annThreshold the vector table gets an IVF index; results stay the same notes."""
    h = _harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        before = [x["reference"] for x in _search(h, "word42 topic8", limit=5)]
        assert h.stores.vectors is not None and not h.stores.vectors.indexed
        h.indexer.vectors.ensure_ann()
        assert h.stores.vectors.indexed
        after = [x["reference"] for x in _search(h, "word42 topic8", limit=5)]
        assert after[0] == before[0] == "vault/n042"
    finally:
        h.close()


def test_vector_table_is_compacted_once_writes_pause(harness: Harness, vault: Path) -> None:
    """A burst of single-note writes leaves one fragment each; once writes pause they are merged."""
    harness.sweep()
    store = harness.stores.vectors
    assert store is not None
    for i in range(6):
        write(vault / f"Burst {i}.md", f"# Burst {i}\n\nNote number {i} of a burst of writes.\n")
        harness.indexer.index_now(Root("vault", vault), vault / f"Burst {i}.md")
    fragments = store._table.stats()["fragment_stats"]["num_fragments"]
    assert fragments >= 6
    assert not store.compact_if_quiet(3600.0)  # not quiet long enough
    assert harness.indexer.vectors.compact_if_quiet(0.0)
    assert store._table.stats()["fragment_stats"]["num_fragments"] == 1
    assert not store.compact_if_quiet(0.0)  # nothing written since
    assert _search(harness, "burst of writes number 4")[0]["reference"] == "vault/Burst 4"


def test_schema_2_manifest_gains_text_hashes_and_keeps_vectors(make_cfg: Any, vault: Path) -> None:
    """An index written before text de-duplication opens, gets its hashes and embeds nothing again."""
    import sqlite3

    from sidecar.stores.manifest import Manifest, embed_hash

    cfg = make_cfg(vault)
    _index_and_close(cfg)
    path = cfg.index_dir / "manifest.sqlite"
    db = sqlite3.connect(path)
    db.execute("DROP INDEX chunks_by_text")
    db.execute("ALTER TABLE chunks DROP COLUMN embed_hash")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    m = Manifest(path)
    rows = m._query("SELECT embed_text, embed_hash, has_vector FROM chunks")
    m.close()
    assert rows and all(h == embed_hash(t) and v == 1 for t, h, v in rows)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    assert h.slot.model.embedded == [] and h.stores.manifest.pending_count() == 0  # type: ignore[union-attr]
    h.close()


def test_file_vanishing_between_scan_and_read(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A note deleted after the scan listed it and before it is read is simply not indexed: the
    sweep finishes, the other notes index, and the next sweep has nothing left to do for it."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Fleeting.md", "# Fleeting\n\nhere one moment\n")
    real = indexer_mod.read_note

    def vanish_first(path: Path, limit: int) -> Any:
        if path.name == "Fleeting.md" and path.exists():
            path.unlink()  # gone between the scan's stat and this read
        return real(path, limit)

    monkeypatch.setattr(indexer_mod, "read_note", vanish_first)
    summary = harness.sweep()
    assert summary["changed"] == 4
    assert "vault/Fleeting" not in {f[0] for f in harness.stores.manifest.list_files("1", ())}
    assert harness.sweep()["changed"] == 0


def test_an_older_kind_of_vector_index_is_replaced(make_cfg: Any, tmp_path: Path) -> None:
    """A table indexed with IVF_FLAT (0.1) gets the configured kind (IVF_PQ by default) instead,
    and a reloaded ``search.annIndex`` swaps it again; search answers the same throughout."""
    from lancedb.index import IvfFlat

    h = _harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        store._table.create_index("vector", config=IvfFlat(distance_type="cosine", num_partitions=4))
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfFlat"}
        assert store.ensure_ann()
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfPq"}
        assert _search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
        h.indexer.vectors.tune("ivf_sq", 12, 20)
        assert not store.indexed
        assert _search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"  # old index
        assert store.ensure_ann()
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfSq"}
        assert _search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
    finally:
        h.close()


def test_writes_do_not_wait_for_an_index_build(make_cfg: Any, tmp_path: Path) -> None:
    """The index is built in a child process outside the store's lock: rows added and deleted
    while it builds are stored at once, found by search (exactly, until compaction) and none is
    lost; afterwards this process serves from the child's index."""
    h = _harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        real = store.build_index
        entered, release = threading.Event(), threading.Event()

        def slow_build() -> None:
            entered.set()
            assert release.wait(30)
            real()

        store.build_index = slow_build  # type: ignore[method-assign]
        builder = threading.Thread(target=store.ensure_ann)
        builder.start()
        assert entered.wait(30)
        fake = FakeEmbedder()
        gone = sorted(store.ids())[:5]
        t0 = time.monotonic()
        store.add([("late#0", "vault/late", "vault", "")], fake.embed_passages(["zebra quokka late"]))
        store.delete_ids(gone)
        assert time.monotonic() - t0 < 5  # not blocked by the build
        release.set()
        builder.join(60)
        assert store.indexed
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfPq"}
        hits = [cid for cid, _, _ in store.search(fake.embed_query("zebra quokka late"), 5)]
        assert hits[0] == "late#0"
        ids = store.ids()
        assert "late#0" in ids and not ids & set(gone)
        assert store.count() == 300 - 5 + 1
    finally:
        h.close()


def test_a_failed_index_build_is_reported_and_search_goes_on(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that fails (here: an interpreter that cannot start) raises StoreError with the
    reason; the table stays unindexed and exact search keeps answering."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores import vectors as vectors_mod

    h = _harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        monkeypatch.setattr(vectors_mod.sys, "executable", str(tmp_path / "no-python"))
        with pytest.raises(StoreError, match="vector index build"):
            store.ensure_ann()
        assert not store.indexed and not store._building
        assert _search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
        monkeypatch.undo()
        assert store.ensure_ann() and store.indexed
    finally:
        h.close()


def test_stopping_ends_an_index_build(make_cfg: Any, tmp_path: Path) -> None:
    """``stop_build`` (the daemon stopping) ends the child at once; the store is left unindexed
    and ready to build again, with compaction no longer held back."""
    import sys

    from sidecar.contracts.errors import StoreError

    h = _harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        store._build_command = lambda: [sys.executable, "-c", "import time; time.sleep(120)"]  # type: ignore[method-assign]
        errors: list[Exception] = []

        def build() -> None:
            try:
                store.ensure_ann()
            except StoreError as exc:
                errors.append(exc)

        builder = threading.Thread(target=build)
        builder.start()
        deadline = time.monotonic() + 30
        while store._child is None and time.monotonic() < deadline:
            time.sleep(0.02)
        t0 = time.monotonic()
        h.indexer.vectors.stop_builds()
        builder.join(30)
        assert not builder.is_alive() and time.monotonic() - t0 < 10
        assert errors and "failed" in str(errors[0])
        assert not store.indexed and not store._building and store._child is None
    finally:
        h.close()


def test_an_orphaned_index_build_exits(tmp_path: Path) -> None:
    """The build child watches its parent: when the daemon is killed, the child exits within
    seconds instead of committing an index the next daemon is building too."""
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "child.pid"
    child_py = tmp_path / "child.py"
    child_py.write_text(
        "import os, sys, time\n"
        "from sidecar.stores.annbuild import _die_with_parent\n"
        "_die_with_parent()\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent, str(child_py), str(pid_file)])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the orphaned child kept running")
    finally:
        if proc.poll() is None:
            proc.kill()


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
