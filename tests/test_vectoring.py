"""Vectors over real LanceDB and sqlite with a fake embedder: reuse of equal texts, reconcile, the
switch to a new model, repair of a table that cannot be read, ANN index builds and compaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.contracts.errors import DiskFullError, EmbedderError, StoreError
from sidecar.index.vectoring import RETIRE_GRACE_S
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from sidecar.stores.lifecycle import open_vectors
from sidecar.vault.sources import Root
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import (
    harness_over_ann_threshold,
    search,
    store_counts,
    truncate_vector_data,
)


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
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors
    assert harness.vectors.reused >= 4
    store = harness.stores.vectors
    assert store is not None
    ids = [c.chunk_id for c in harness.stores.manifest.chunks_of("vault/2026/Weekly review")]
    copies = [c.chunk_id for c in harness.stores.manifest.chunks_of("vault/2024/Weekly review")]
    got = store.vectors_of(ids + copies)
    assert all((got[a] == got[b]).all() for a, b in zip(ids, copies, strict=True))


def _private_folder(vault: Path, notes: int = 4) -> None:
    for i in range(notes):
        body = "".join(f"## Part {j}\n\nPrivate diary {i}, entry {j}: the canoe trip.\n\n" for j in range(3))
        write(vault / "Private" / f"Diary {i}.md", f"# Diary {i}\n\n{body}")


def test_a_folder_excluded_and_let_back_in_keeps_its_vectors(harness: Harness) -> None:
    """A folder excluded by a reload and let back in by the next: its notes come back with their
    kept vectors as they are written, nothing runs the model and no chunk waits for a vector (was:
    every chunk counted as waiting, with the model's ETA, until the backfill got to them)."""
    vault = harness.cfg.vault.path
    assert vault is not None
    _private_folder(vault)
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    harness.sweep()
    private = list(harness.stores.manifest.file_states("vault/Private/"))
    chunks = sum(len(harness.stores.manifest.chunk_ids(k)) for k in private)
    assert len(private) == 4 and chunks >= 12
    harness.indexer.set_excludes(["Private/"], False)
    harness.sweep()
    assert not harness.stores.manifest.file_states("vault/Private/")
    model.embedded.clear()
    harness.indexer.set_excludes([], False)
    harness.indexer.sweep()  # the sweep alone: no backfill batch runs
    assert sorted(harness.stores.manifest.file_states("vault/Private/")) == sorted(private)
    assert harness.stores.manifest.pending_count() == 0
    assert harness.vectors.kept_reused == chunks
    assert store_counts(harness)[0] == store_counts(harness)[2]
    assert harness.vectors.embed_pending() == 0
    assert model.embedded == []
    hits = search(harness, "diary entry about the canoe trip")
    assert hits[0]["reference"].startswith("vault/Private/") and hits[0]["vecScore"] is not None


def test_a_folder_excluded_while_no_vector_table_is_open_keeps_its_vectors(harness: Harness) -> None:
    """Notes deleted while no vector table is open (the model loading at a start, or failed):
    their rows stay in the table until it is attached, whose reconcile deleted them as unknown;
    their vectors are kept by text first, so the folder let back in is not embedded again."""
    vault = harness.cfg.vault.path
    assert vault is not None
    _private_folder(vault)
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    harness.sweep()
    serving = harness.stores.serving
    assert serving is not None
    harness.stores.serving = None  # the model is loading: nothing is attached
    harness.indexer.set_excludes(["Private/"], False)
    harness.indexer.sweep()
    assert not harness.stores.manifest.file_states("vault/Private/")
    harness.vectors.attach(serving.store, model)
    assert store_counts(harness)[0] == store_counts(harness)[2]  # the unknown rows are gone
    model.embedded.clear()
    harness.indexer.set_excludes([], False)
    harness.indexer.sweep()
    assert len(harness.stores.manifest.file_states("vault/Private/")) == 4
    assert harness.stores.manifest.pending_count() == 0
    assert harness.vectors.embed_pending() == 0 and model.embedded == []


def _private_deleted_while_detached(harness: Harness) -> tuple[Any, list[str], dict[str, str]]:
    """The private folder indexed, then excluded while no vector table is open: the serving set,
    the folder's chunk ids and their text hashes."""
    vault = harness.cfg.vault.path
    assert vault is not None
    _private_folder(vault, notes=2)
    harness.sweep()
    serving = harness.stores.serving
    assert serving is not None
    keys = list(harness.stores.manifest.file_states("vault/Private/"))
    ids = harness.stores.manifest.chunk_ids_of(keys)
    hashes = harness.stores.manifest.embed_hashes(ids)
    harness.stores.serving = None  # the model is loading: nothing is attached
    harness.indexer.set_excludes(["Private/"], False)
    harness.indexer.sweep()
    return serving, ids, hashes


def test_vectors_remembered_while_detached_keep_their_age(harness: Harness) -> None:
    """Chunks deleted while no table was open were kept by text as of the attach, however long
    ago they went: past index.keepDeletedVectorsHours they are no longer kept."""
    serving, _ids, hashes = _private_deleted_while_detached(harness)
    with harness.stores.manifest.transaction() as db:
        db.execute("UPDATE kept_later SET kept_at = kept_at - ?", (harness.vectors.keep_seconds + 60,))
    harness.vectors.attach(serving.store, serving.model)
    assert harness.stores.manifest.kept_vectors(serving.store.name, sorted(set(hashes.values()))) == {}


def test_vectors_remembered_while_detached_are_kept_for_both_tables_of_a_migration(harness: Harness) -> None:
    """A migration attaches two tables: the first one's reconcile forgot every remembered chunk,
    so the second (the table being built) deleted its rows of them without keeping them."""
    serving, ids, hashes = _private_deleted_while_detached(harness)
    other = OtherModel()
    new_table = open_vectors(harness.cfg, other.model_id, other.dim, other.pooling)
    rows = [(cid, "vault/Private/x", "vault", "") for cid in ids]
    new_table.add(rows, np.ones((len(rows), other.dim), dtype=np.float32))
    harness.vectors.begin_migration(serving.store, serving.model, new_table, other)
    wanted = sorted(set(hashes.values()))
    assert len(harness.stores.manifest.kept_vectors(serving.store.name, wanted)) == len(wanted)
    assert len(harness.stores.manifest.kept_vectors(new_table.name, wanted)) == len(wanted)


def test_orphan_and_missing_vectors_are_reconciled(harness: Harness) -> None:
    """Vectors of unknown chunks are dropped and chunks whose vector vanished are queued again."""
    harness.sweep()
    vectors = harness.stores.vectors
    assert vectors is not None
    import numpy as np

    vectors.add([("orphan-id", "vault/Gone", "vault", "")], np.ones((1, 64), dtype=np.float32) / 8)
    victim = next(iter(harness.stores.manifest.vector_ids()))
    vectors.delete_ids([victim])
    harness.vectors.attach(vectors, harness.slot.model)
    assert "orphan-id" not in vectors.ids()
    assert harness.stores.manifest.pending_count() == 1
    harness.sweep()
    chunks, docs, n_vectors = store_counts(harness)
    assert chunks == docs == n_vectors


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
    new_table = open_vectors(harness.cfg, other.model_id, other.dim, other.pooling)
    assert new_table.name != old.store.name
    harness.vectors.begin_migration(old.store, old.model, new_table, other)
    harness.vectors.embed_pending(batch=2)
    assert harness.stores.serving is not None and harness.stores.serving.store is old.store
    hits = search(harness, "restic backups of the NAS")
    assert hits[0]["vecScore"] is not None, "the old table keeps serving during the build"
    assert harness.vectors.describe()["building"] == new_table.name
    # a change during the build reaches both tables, a deletion leaves both
    write(harness.cfg.vault.path / "Late.md", "# Late\n\nA note written during the migration.\n")  # type: ignore[operator]
    (harness.cfg.vault.path / "Garden.md").unlink()  # type: ignore[operator]
    harness.sweep()
    assert harness.stores.serving.store is new_table and harness.stores.building is None
    assert harness.stores.manifest.get_meta("vector_table") == new_table.name
    # Dropped once the searches that took it just before the switch are done (a grace period).
    assert old.store.name in old.store._db.list_tables().tables
    assert harness.vectors.drop_retired() == []
    assert harness.vectors.drop_retired(time.monotonic() + RETIRE_GRACE_S) == [old.store.name]
    assert old.store.name not in old.store._db.list_tables().tables
    assert new_table.ids() == harness.stores.manifest.all_chunk_ids()
    assert harness.stores.manifest.pending_count() == 0


class OtherModel(FakeEmbedder):
    model_id = "other-model@2"
    dim = 32


def test_configured_model_failing_leaves_the_serving_tables_model_answering(
    harness: Harness, tmp_path: Path
) -> None:
    """The configured model does not load (its folder is empty): the model of the serving table
    answers in its place (the slot is ok, its table keeps serving, a problem names both); a retry
    that fails again keeps it answering. It went keyword-only (slot failed)."""
    from dataclasses import replace

    from sidecar.daemon.process import load_embedder
    from sidecar.model.embedder import EmbedderSlot

    harness.sweep()
    empty = tmp_path / "empty-model"
    empty.mkdir()
    cfg = replace(harness.cfg, embedder=replace(harness.cfg.embedder, model="wanted", path=empty))
    standing_in = FakeEmbedder()
    slot = EmbedderSlot()
    load_embedder(cfg, slot, lambda: standing_in, harness.problems)
    described = slot.describe()
    assert described["state"] == "ok" and slot.model is standing_in
    assert described["model"] == standing_in.model_id and described["error"] is None
    assert described["fallback"]["configured"] == f"wanted (embedder.path {empty})"
    assert "needs model.onnx and tokenizer.json" in described["fallback"]["error"]
    problem = harness.problems.active_in("embedder")
    assert problem is not None and "the configured model wanted" in problem["error"]
    assert f"The previous model {standing_in.model_id} answers meanwhile" in problem["error"]
    # A retry that fails again: the stand-in is not loaded again and goes on answering.
    load_embedder(cfg, slot, lambda: pytest.fail("the stand-in is loaded once"), harness.problems)
    assert slot.model is standing_in and slot.state == "ok" and slot.fallback is not None
    again = harness.problems.active_in("embedder")
    assert again is not None and again["count"] == 2
    # Without a table to serve (a new index), the slot fails as before: keyword search only.
    fresh = EmbedderSlot()
    load_embedder(cfg, fresh, lambda: None, harness.problems)
    assert fresh.state == "failed" and fresh.model is None and fresh.describe()["fallback"] is None


def test_switch_after_a_fallback_keeps_the_attached_table_serving(harness: Harness) -> None:
    """The configured model loads after the serving table's model answered in its place: the
    switch keeps that table and model serving while the new table fills (the old model is not
    loaded again: a model the index cannot load any more would have dropped search to keywords
    for every chunk until the new table was whole)."""
    from sidecar.index.migration import attach

    harness.sweep()
    old = harness.stores.serving
    assert old is not None
    attach(harness.cfg, harness.vectors, OtherModel())
    serving, building = harness.stores.serving, harness.stores.building
    assert serving is not None and serving.store is old.store and serving.model is old.model
    assert building is not None and building.store.name != old.store.name
    assert harness.stores.manifest.pending_count() == 0
    assert search(harness, "restic backups of the NAS")[0]["vecScore"] is not None
    harness.sweep()
    assert harness.stores.serving is not None and harness.stores.serving.store is building.store


def test_unreadable_vector_table_is_replaced_while_running(harness: Harness) -> None:
    """Truncated data files fail every vector search once the table is read again (a restart would
    not notice: the table opens); the repair reads the table, moves it aside and re-embeds;
    searches use both arms again."""
    harness.sweep()
    r = Retriever(harness.stores, harness.slot, harness.cfg.search, harness.cfg.recall)
    assert r.search(SearchRequest("spark plugs", 5, 0.0)).degraded is None
    truncate_vector_data(harness.cfg)
    # The small table's copy in memory still answers, with the vectors it read before, and the
    # writes keep it in step (they append to the table, they do not read it) ...
    assert r.search(SearchRequest("spark plugs", 5, 0.0)).hits[0].vec_score is not None
    write(harness.cfg.vault.path / "Late.md", "# Late\n\nWritten after the damage.\n")  # type: ignore[operator]
    harness.sweep()
    while harness.vectors.embed_pending():
        pass
    late = r.search(SearchRequest("written after the damage", 5, 0.0))
    assert late.degraded is None and late.hits[0].reference == "vault/Late"
    # ... until the table is read again: at the next start, or after a write that failed.
    store = harness.stores.vectors
    assert store is not None
    store._changed(None)
    expected = harness.stores.manifest.chunk_count()
    failed = r.search(SearchRequest("spark plugs", 5, 0.0))
    assert failed.degraded and "vector search failed" in failed.degraded
    assert failed.hits[0].reference == "vault/Projects/Boat"  # keyword arm answers meanwhile
    assert harness.repair.repair_vectors(failed.degraded) is True
    assert any(p.name.startswith("vectors.broken-") for p in harness.cfg.index_dir.iterdir())
    # The late note's vector is in a data file of its own, written after the damage: kept.
    late_chunks = len(harness.stores.manifest.chunks_of("vault/Late"))
    assert harness.stores.manifest.pending_count() == expected - late_chunks
    while harness.vectors.embed_pending():
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
    assert harness.repair.repair_vectors("the model failed to embed a query") is False
    assert not any(p.name.startswith("vectors.broken-") for p in harness.cfg.index_dir.iterdir())
    store = harness.stores.vectors
    assert store is not None and store.count() == expected
    assert harness.stores.manifest.pending_count() == 0


def test_large_table_gets_an_ann_index(make_cfg: Any, tmp_path: Path) -> None:
    """Above search.annThreshold the vector table gets an IVF index; results stay the same notes."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        before = [x["reference"] for x in search(h, "word42 topic8", limit=5)]
        assert h.stores.vectors is not None and not h.stores.vectors.indexed
        h.vectors.ensure_ann()
        assert h.stores.vectors.indexed
        after = [x["reference"] for x in search(h, "word42 topic8", limit=5)]
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
    assert harness.vectors.compact_if_quiet(0.0)
    assert store._table.stats()["fragment_stats"]["num_fragments"] == 1
    assert not store.compact_if_quiet(0.0)  # nothing written since
    assert search(harness, "burst of writes number 4")[0]["reference"] == "vault/Burst 4"


class _AnHourLater:
    """The ``time`` module as seen an hour later (for one module)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        return time.monotonic() + 3600


def test_the_version_a_quiet_compaction_replaced_is_dropped_once_aged(
    harness: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quiet compaction's own cleanup runs before the version it makes has aged, so the
    burst's data files stay; a later pass, once it has, drops them."""
    import sidecar.stores.vectors as vectors_mod

    harness.sweep()
    store = harness.stores.vectors
    assert store is not None
    for i in range(6):
        write(vault / f"Burst {i}.md", f"# Burst {i}\n\nNote number {i} of a burst of writes.\n")
        harness.indexer.index_now(Root("vault", vault), vault / f"Burst {i}.md")
    data = Path(store._table.uri) / "data"
    assert harness.vectors.compact_if_quiet(0.0)
    kept = len(list(data.glob("*.lance")))
    assert kept > 1  # the live file and the burst's, which the replaced version still names
    # Time passes (monotonic for the schedule, the version's own age for LanceDB).
    monkeypatch.setattr(vectors_mod, "_KEEP_VERSIONS", timedelta(milliseconds=1))
    monkeypatch.setattr(vectors_mod, "time", _AnHourLater())
    assert harness.vectors.compact_if_quiet(0.0)
    monkeypatch.undo()
    assert len(list(data.glob("*.lance"))) == 1
    assert not store.compact_if_quiet(0.0)  # nothing due any more
    assert search(harness, "burst of writes number 4")[0]["reference"] == "vault/Burst 4"


def test_the_aged_cleanup_does_not_compact_a_burst_that_goes_on(
    harness: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a cleanup is due after a quiet compaction, writes that started again are not
    compacted by it (that waits for them to pause); the quiet compaction then does both."""
    import sidecar.stores.vectors as vectors_mod

    harness.sweep()
    store = harness.stores.vectors
    assert store is not None
    for i in range(3):
        write(vault / f"Burst {i}.md", f"# Burst {i}\n\nNote number {i} of a burst of writes.\n")
        harness.indexer.index_now(Root("vault", vault), vault / f"Burst {i}.md")
    assert harness.vectors.compact_if_quiet(0.0)
    for i in range(3, 7):
        write(vault / f"Burst {i}.md", f"# Burst {i}\n\nNote number {i} of a burst of writes.\n")
        harness.indexer.index_now(Root("vault", vault), vault / f"Burst {i}.md")
    fragments = store._table.stats()["fragment_stats"]["num_fragments"]
    assert fragments >= 4
    writes = store._writes
    monkeypatch.setattr(vectors_mod, "_KEEP_VERSIONS", timedelta(milliseconds=1))
    monkeypatch.setattr(vectors_mod, "time", _AnHourLater())
    assert not store.compact_if_quiet(10.0**9)  # the cleanup is due, the writes are not quiet
    assert store._table.stats()["fragment_stats"]["num_fragments"] == fragments
    assert store._writes == writes
    assert harness.vectors.compact_if_quiet(0.0)
    monkeypatch.undo()
    assert store._table.stats()["fragment_stats"]["num_fragments"] == 1
    assert search(harness, "burst of writes number 6")[0]["reference"] == "vault/Burst 6"


def test_an_older_kind_of_vector_index_is_replaced(make_cfg: Any, tmp_path: Path) -> None:
    """A table indexed with IVF_FLAT (0.1) gets the configured kind (IVF_PQ by default) instead,
    and a reloaded ``search.annIndex`` swaps it again; search answers the same throughout."""
    from lancedb.index import IvfFlat

    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        store._table.create_index("vector", config=IvfFlat(distance_type="cosine", num_partitions=4))
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfFlat"}
        assert store.ensure_ann()
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfPq"}
        assert search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
        h.vectors.tune("ivf_sq", 12, 20)
        assert not store.indexed
        assert search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"  # old index
        assert store.ensure_ann()
        assert {str(i.index_type) for i in store._table.list_indices()} == {"IvfSq"}
        assert search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
    finally:
        h.close()


def test_writes_do_not_wait_for_an_index_build(make_cfg: Any, tmp_path: Path) -> None:
    """The index is built in a child process outside the store's lock: rows added and deleted
    while it builds are stored at once, found by search (exactly, until compaction) and none is
    lost; afterwards this process serves from the child's index."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
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
    from sidecar.stores import vector_index

    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        monkeypatch.setattr(vector_index.sys, "executable", str(tmp_path / "no-python"))
        with pytest.raises(StoreError, match="vector index build"):
            store.ensure_ann()
        assert not store.indexed and not store._building
        assert search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
        monkeypatch.undo()
        assert store.ensure_ann() and store.indexed
    finally:
        h.close()


def test_stopping_ends_an_index_build(make_cfg: Any, tmp_path: Path) -> None:
    """``stop_build`` (the daemon stopping) ends the child at once; the store is left unindexed
    and ready to build again, with compaction no longer held back."""
    import sys

    from sidecar.contracts.errors import StoreError

    h = harness_over_ann_threshold(make_cfg, tmp_path)
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
        h.vectors.stop_builds()
        builder.join(30)
        assert not builder.is_alive() and time.monotonic() - t0 < 10
        assert errors and "failed" in str(errors[0])
        assert not store.indexed and not store._building and store._child is None
    finally:
        h.close()


NO_SPACE = "lance error: LanceError(IO): Unable to copy data to file: No space left on device (os error 28)"


def _restart_with(cfg: Any, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """A fresh start over an index of FakeEmbedder's vectors, no model attached yet; the
    previous model (FakeEmbedder) loads when the switch asks for it."""
    from sidecar.index import migration

    monkeypatch.setattr(migration, "load_model", lambda _cfg: FakeEmbedder())
    return Harness(cfg, None)


def _broken(cfg: Any) -> list[Path]:
    return [p for p in cfg.index_dir.iterdir() if ".broken-" in p.name]


def _old_table_failing(
    make_cfg: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: Callable[[str], Exception] | None,
    *,
    once: bool = False,
) -> tuple[Any, Harness, str]:
    """The scene of the switch tests below: a first index of FakeEmbedder's vectors, a restart
    (``_restart_with``), and the old table's ``_check_schema`` failing with ``error`` (made from
    the table's name; None: it opens) at every open, or ``once``. The config, the restarted
    harness and the old table's name."""
    from sidecar.stores.vectors import VectorStore

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    first.close()
    h = _restart_with(cfg, monkeypatch)
    if error is None:
        return cfg, h, old_name
    check = VectorStore._check_schema
    failed = [0]

    def fails(self: Any) -> None:
        if self.name == old_name and not (once and failed[0]):
            failed[0] += 1
            raise error(old_name)
        check(self)

    monkeypatch.setattr(VectorStore, "_check_schema", fails)
    return cfg, h, old_name


def _no_handles(_name: str) -> Exception:
    """The old table's open failing for a cause that passes (no file handles left)."""
    from sidecar.contracts.errors import NoHandlesError

    return NoHandlesError("vector table cannot be opened: Too many open files (os error 24)")


def test_a_full_disk_at_a_switch_keeps_the_old_table_serving(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new model's table cannot be created (ENOSPC): that is no damage. Nothing is moved
    aside, the old model's table serves (vector search whole), a PROBLEM says the disk is full,
    and the switch starts by itself once there is space. The whole vectors folder (the intact old
    table with it) was moved aside, search went keyword-only for good and a restart re-embedded
    everything."""
    from sidecar.daemon import backfill as backfill_module
    from sidecar.daemon.backfill import Backfill
    from sidecar.runtime.backoff import Backoff
    from sidecar.stores import vectors as vectors_module

    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.vectors.name  # type: ignore[union-attr]
    first.close()
    h = _restart_with(cfg, monkeypatch)
    full = threading.Event()
    full.set()
    lancedb = vectors_module.lancedb_module()

    class FullDisk:
        """A LanceDB connection on a full disk: a new table fails as LanceDB fails (after making
        its folders); everything else works."""

        def __init__(self, db: Any) -> None:
            self.db = db

        def __getattr__(self, name: str) -> Any:
            return getattr(self.db, name)

        def create_table(self, name: str, **kw: Any) -> Any:
            if full.is_set():
                (cfg.index_dir / "vectors" / f"{name}.lance" / "_versions").mkdir(parents=True)
                raise RuntimeError(NO_SPACE)
            return self.db.create_table(name, **kw)

    class Engine:
        Session = lancedb.Session

        @staticmethod
        def connect(path: str, **kw: Any) -> Any:
            return FullDisk(lancedb.connect(path, **kw))

    monkeypatch.setattr(vectors_module, "lancedb_module", lambda: Engine)
    with pytest.raises(DiskFullError):
        open_vectors(cfg, OtherModel.model_id, OtherModel.dim, OtherModel.pooling)
    assert sorted(p.name for p in (cfg.index_dir / "vectors").iterdir()) == [f"{old_name}.lance"]
    monkeypatch.setattr(backfill_module, "ATTACH_RETRY", Backoff(base=0.01, cap=0.05, jitter=0.0))
    stop = threading.Event()
    h.slot.set_ok(OtherModel(), "test")
    backfill = Backfill(
        h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity, stop=stop
    )
    thread = threading.Thread(target=backfill.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while (h.problems.active_in("vectors") or {}).get("count", 0) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        problem = h.problems.active_in("vectors")
        assert problem is not None and "is full" in problem["error"]
        assert f"searches keep using {FakeEmbedder.model_id}'s vectors" in problem["error"]
        assert _broken(cfg) == []
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and h.stores.building is None
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
        full.clear()  # space freed: the switch starts and finishes without a restart
        while h.stores.manifest.get_meta("vector_table") == old_name:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert h.problems.active_in("vectors") is None and _broken(cfg) == []
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
    finally:
        stop.set()
        thread.join(10)
        h.close()


def table_name_of(model: Any) -> str:
    from sidecar.stores.vectors import table_name

    return table_name(model.model_id, model.dim, model.pooling)


def test_a_damaged_new_table_is_moved_aside_alone(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch whose new table is damaged on disk: only that table is moved aside (and made
    afresh); the old model's table beside it stays and serves."""
    from sidecar.index.migration import attach

    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.vectors.name  # type: ignore[union-attr]
    attach(cfg, first.vectors, OtherModel())
    first.vectors.embed_pending(batch=2)
    first.close()
    new_name = table_name_of(OtherModel())
    for m in (cfg.index_dir / "vectors" / f"{new_name}.lance").rglob("_versions/*.manifest"):
        m.write_bytes(b"garbage")
    h = _restart_with(cfg, monkeypatch)
    try:
        attach(cfg, h.vectors, OtherModel(), h.problems)
        (aside,) = _broken(cfg)
        assert [p.name for p in aside.iterdir()] == [f"{new_name}.lance"]
        assert (cfg.index_dir / "vectors" / f"{old_name}.lance").is_dir()
        assert h.stores.serving is not None and h.stores.serving.store.name == old_name
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
        h.sweep()
        assert h.stores.manifest.get_meta("vector_table") == new_name
    finally:
        h.close()


def test_a_table_stopped_cleanly_serves_while_the_manifest_cannot_be_written(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start on a full disk (sqlite: "database or disk is full"): the table stopped cleanly
    needs no write to serve, so vector search answers read-only instead of waiting for space;
    the first write after it checks table and flags first."""
    import sqlite3

    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    first.vectors.mark_clean()
    first.close()
    h = Harness(cfg, None)
    try:
        real = h.stores.manifest.set_meta

        def full(key: str, value: str) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(h.stores.manifest, "set_meta", full)
        model = FakeEmbedder()
        h.vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)
        h.slot.set_ok(model, "test")
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
        monkeypatch.setattr(h.stores.manifest, "set_meta", real)
        write(cfg.vault.path / "Late.md", "# Late\n\nWritten once there is space again.\n")
        h.sweep()
        assert search(h, "written once there is space")[0]["vecScore"] is not None
        chunks, docs, vectors = store_counts(h)
        assert chunks == docs == vectors
    finally:
        h.close()


def test_a_batch_that_cannot_be_stored_keeps_its_vectors_for_the_retry(harness: Harness) -> None:
    """Disk full while a switch's batch is added: the retry stores the vectors computed already
    instead of running the model over the same batch again (every ~25 s, for as long as the
    disk stayed full), and failed work does not count in the rate of status' ETA."""
    from sidecar.index.migration import attach

    harness.sweep()
    other = OtherModel()
    attach(harness.cfg, harness.vectors, other)
    building = harness.stores.building
    assert building is not None
    real_add = building.store.add
    full = [DiskFullError(f"vector add failed: {NO_SPACE}")] * 2

    def add(rows: Any, vectors: Any) -> None:
        if full:
            raise full.pop()
        real_add(rows, vectors)

    building.store.add = add  # type: ignore[method-assign]
    pending = harness.stores.manifest.pending_count("has_next")
    vectors = harness.vectors
    stored, embedded, seconds = vectors.stored, vectors.embedded, vectors.embed_seconds
    for _ in range(2):
        with pytest.raises(DiskFullError):
            harness.vectors.embed_pending()
    assert harness.stores.manifest.pending_count("has_next") == pending
    ran = len(other.embedded)
    assert 0 < ran <= pending
    assert harness.vectors.stored == stored and harness.vectors.embed_seconds == seconds
    while harness.stores.building is not None:
        harness.vectors.embed_pending()
    assert len(other.embedded) == ran, "the model ran again over the batch it had computed"
    assert harness.vectors.stored == stored + pending and harness.vectors.embedded == embedded + ran
    assert harness.stores.serving is not None and harness.stores.serving.store is building.store
    assert building.store.ids() == harness.stores.manifest.all_chunk_ids()


def _tables(cfg: Any) -> list[str]:
    import lancedb

    return sorted(lancedb.connect(str(cfg.index_dir / "vectors")).list_tables().tables)


def test_a_stop_between_the_cut_over_and_the_drop_leaves_no_table_behind(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 right after the manifest named the new table, before the old one was dropped: the
    next start drops the table nothing refers to any more (it stayed on disk for good, 150 MB
    at 100 k chunks); the serving one is never touched."""
    from sidecar.index.migration import attach

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    old_name = h.stores.vectors.name  # type: ignore[union-attr]
    attach(cfg, h.vectors, OtherModel())
    while h.stores.manifest.pending_count("has_next"):
        h.vectors.embed_pending()
    new_name = table_name_of(OtherModel())
    manifest = h.stores.manifest
    with manifest.transaction() as db:  # the cut-over's commits, then the kill
        manifest.promote_next(db)
    manifest.set_meta("vector_table", new_name)
    manifest.set_meta("vector_table_next", "")
    h.close()
    assert _tables(cfg) == sorted([old_name, new_name])
    h = _restart_with(cfg, monkeypatch)
    try:
        attach(cfg, h.vectors, OtherModel())
        assert _tables(cfg) == [new_name]
        assert h.stores.serving is not None and h.stores.serving.store.name == new_name
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
        assert h.stores.manifest.pending_count() == 0
    finally:
        h.close()


def test_a_switch_undone_before_it_finished_is_kept_a_while_then_dropped(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A -> B, stopped after part of B, then A configured again: A serves; B's partial table is
    kept (shown in health as ``vectors.paused``) so that switching to B again resumes it, and
    dropped with its bookkeeping after PAUSED_KEEP_S or as soon as a third model is switched to.
    It stayed on disk for good, invisible in status."""
    from sidecar.index.migration import attach
    from sidecar.index.vectoring import PAUSED_KEEP_S
    from sidecar.index.vectortables import expire_paused

    class ThirdModel(FakeEmbedder):
        model_id = "third-model@3"
        dim = 16

    cfg = make_cfg(vault)
    folder = cfg.index_dir / "vectors"
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    a_name = h.stores.vectors.name  # type: ignore[union-attr]
    b_name = table_name_of(OtherModel())
    attach(cfg, h.vectors, OtherModel())
    h.vectors.embed_pending(batch=2)
    h.close()
    total = 0

    def restart(model: Any) -> Harness:
        nonlocal total
        again = _restart_with(cfg, monkeypatch)
        attach(cfg, again.vectors, model, again.problems)
        total = again.stores.manifest.chunk_count()
        return again

    h = restart(FakeEmbedder())  # back to A
    try:
        paused = h.vectors.describe()["paused"]
        assert paused is not None and paused["table"] == b_name and paused["vectors"] == 2
        assert paused["drop_at"] == pytest.approx(paused["since"] + PAUSED_KEEP_S)
        assert h.vectors.describe()["building"] is None and _tables(cfg) == sorted([a_name, b_name])
        assert not expire_paused(h.vectors, folder, now=paused["since"] + PAUSED_KEEP_S - 60)
    finally:
        h.close()
    h = restart(OtherModel())  # B again: resumed, not started over
    try:
        assert h.stores.manifest.pending_count("has_next") == total - 2
        assert h.vectors.describe()["paused"] is None
    finally:
        h.close()
    h = restart(FakeEmbedder())  # A again; B kept, then dropped once its time is up
    try:
        paused = h.vectors.describe()["paused"]
        assert paused is not None and paused["vectors"] == 2
        assert expire_paused(h.vectors, folder, now=paused["since"] + PAUSED_KEEP_S + 1)
        assert _tables(cfg) == [a_name] and h.vectors.describe()["paused"] is None
        assert h.stores.manifest.get_meta("vector_table_next") == ""
        assert h.stores.manifest.vector_count("has_next") == 0
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())  # A -> B (partial) -> C: B's table goes at once
    try:
        attach(cfg, h.vectors, OtherModel())
        h.vectors.embed_pending(batch=2)
        attach(cfg, h.vectors, ThirdModel())
        assert _tables(cfg) == sorted([a_name, table_name_of(ThirdModel())])
        h.sweep()
        h.vectors.drop_retired(time.monotonic() + RETIRE_GRACE_S)
        assert _tables(cfg) == [table_name_of(ThirdModel())]
    finally:
        h.close()


def test_a_search_overtaken_by_the_switch_is_answered_by_the_new_table(harness: Harness) -> None:
    """A search took the old table just before the switch and reads it after (an ANN search reads
    the table, not a copy in memory): the old table stays until such searches are done, and one
    that fails all the same asks the new table. It answered keyword-only, reported a damaged
    table (PROBLEM) and set off a repair that ended the new table's index build."""
    from sidecar.index.migration import attach
    from sidecar.stores.vectors import VectorStore

    harness.sweep()
    attach(harness.cfg, harness.vectors, OtherModel())
    old = harness.stores.serving
    assert old is not None
    while harness.stores.manifest.pending_count("has_next"):
        harness.vectors.embed_pending()
    assert harness.stores.building is not None  # every vector is there; the switch comes next
    real_search = VectorStore.search

    def search_during_switch(self: VectorStore, *args: Any, **kw: Any) -> Any:
        if self is old.store and harness.stores.serving is old:
            harness.vectors.embed_pending()  # the switch lands while this search runs
            assert harness.stores.serving is not old
            self._changed(None)  # no copy in memory: the table itself is read, as with an ANN index
            kept = real_search(self, *args, **kw)  # the retired table still answers ...
            assert kept
            drop = getattr(harness.vectors, "drop_retired", None)
            if drop is not None:
                drop(time.monotonic() + RETIRE_GRACE_S)  # ... until it is dropped
        return real_search(self, *args, **kw)

    VectorStore.search = search_during_switch  # type: ignore[method-assign]
    try:
        r = Retriever(harness.stores, harness.slot, harness.cfg.search, harness.cfg.recall)
        found = r.search(SearchRequest("restic backups of the NAS", 5, 0.0))
    finally:
        VectorStore.search = real_search  # type: ignore[method-assign]
    assert found.degraded is None and found.hits[0].vec_score is not None
    assert found.hits[0].reference == "wiki/Backups"
    assert harness.stores.problems.active_in("vector_search") is None


def test_a_rebuild_during_a_switch_embeds_with_the_configured_model_only(harness: Harness) -> None:
    """`sidecar index --rebuild` while a switch runs: the switch ends, the configured model's table
    serves and every chunk is embedded once, with that model. Both tables were emptied and the
    retiring model embedded everything first (searches keyword-only meanwhile), its table dropped
    minutes later: twice the work."""
    from sidecar.index.migration import attach

    harness.sweep()
    old = harness.stores.serving
    assert old is not None
    retiring = old.model
    assert isinstance(retiring, FakeEmbedder)
    other = OtherModel()
    attach(harness.cfg, harness.vectors, other)
    harness.vectors.embed_pending(batch=2)
    retiring.embedded.clear()
    other.embedded.clear()
    harness.indexer.clear()
    serving = harness.stores.serving
    assert serving is not None and serving.model is other and harness.stores.building is None
    manifest = harness.stores.manifest
    assert manifest.get_meta("vector_table") == serving.store.name
    assert manifest.get_meta("vector_table_next") == ""
    harness.sweep()
    assert retiring.embedded == [] and len(other.embedded) == manifest.chunk_count()
    assert search(harness, "restic backups of the NAS")[0]["vecScore"] is not None
    assert serving.store.ids() == manifest.all_chunk_ids() and manifest.pending_count() == 0
    harness.vectors.drop_retired(time.monotonic() + RETIRE_GRACE_S)
    assert _tables(harness.cfg) == [serving.store.name]


def test_a_stop_during_a_batch_ends_it_after_one_slice_and_keeps_that_work(
    make_cfg: Any, tmp_path: Path
) -> None:
    """SIGTERM while the model runs over a batch: the batch ends after the slice that runs (the
    stop waited for all 256 texts, 10-12 s, past its bound) and what was computed is stored."""
    from sidecar.index.vector_embed import MODEL_SLICE
    from tests.conftest import make_notes

    vault = tmp_path / "many"
    make_notes(vault, 60)
    stop = threading.Event()

    class Stopping(FakeEmbedder):
        def embed_passages(self, texts: Any) -> Any:
            stop.set()  # the stop arrives while the first slice runs
            return super().embed_passages(texts)

    h = Harness(make_cfg(vault), Stopping())
    try:
        h.indexer.sweep()
        pending = h.stores.manifest.pending_count()
        assert pending > MODEL_SLICE
        assert h.vectors.embed_pending(stop=stop) == MODEL_SLICE
        assert h.stores.manifest.pending_count() == pending - MODEL_SLICE
        assert h.stores.vectors is not None and h.stores.vectors.count() == MODEL_SLICE
        stop.clear()
        while h.vectors.embed_pending():
            pass
        chunks, docs, vectors = store_counts(h)
        assert chunks == docs == vectors
    finally:
        h.close()


def test_the_switch_eta_uses_the_new_models_recent_rate(make_cfg: Any, tmp_path: Path) -> None:
    """The rate behind status' ETA is per table and over the last batches: a switch's old model
    catching up slowly (edits during the switch) no longer drags the new model's rate down (the
    lifetime average of every embedding was 3x off). Time is the models' own, made up here."""
    from sidecar.index.migration import attach
    from sidecar.index.vector_embed import RATE_BATCHES
    from tests.conftest import make_notes

    now = [0.0]

    class Timed(FakeEmbedder):
        seconds_per_text = 1.0

        def embed_passages(self, texts: Any) -> Any:
            now[0] += self.seconds_per_text * len(texts)
            return super().embed_passages(texts)

    class Fast(Timed):
        model_id = "fast-model@2"
        dim = 32
        seconds_per_text = 0.1

    vault = tmp_path / "many"
    make_notes(vault, 40)
    h = Harness(make_cfg(vault), Timed())
    h.vectors.timer = lambda: now[0]
    try:
        h.indexer.sweep()
        while h.vectors.embed_pending(batch=8):
            pass
        assert h.vectors.rate(h.stores.serving) == pytest.approx(1.0)
        # No switch, or one without a batch yet: no rate, so no word on how rough it is.
        assert h.vectors.describe()["building_rate_rough"] is None
        attach(h.cfg, h.vectors, Fast())
        described = h.vectors.describe()
        assert described["building_rate_chunks_per_second"] is None
        assert described["building_rate_rough"] is None
        for _ in range(RATE_BATCHES):
            h.vectors.embed_pending(batch=4)
        described = h.vectors.describe()
        assert described["building_rate_chunks_per_second"] == pytest.approx(10.0)
        assert described["building_rate_rough"] is True  # seconds of work, not minutes
        assert h.vectors.rate(h.stores.serving) == pytest.approx(1.0)
    finally:
        h.close()


def test_a_retired_table_wanted_again_is_not_dropped(harness: Harness) -> None:
    """A table retired by a switch (dropped a minute later) that serves again before then (a
    switch back) is not dropped by its old due time."""
    harness.sweep()
    serving = harness.stores.serving
    assert serving is not None
    harness.vectors._retire(serving.store)
    harness.vectors.attach(serving.store, serving.model)
    assert harness.vectors.drop_retired(time.monotonic() + RETIRE_GRACE_S) == []
    assert serving.store.name in serving.store._db.list_tables().tables


def test_a_batch_made_for_a_replaced_table_is_not_stored_into_its_successor(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill computes a batch for the serving table; a repair replaces that table (moved
    aside, a new one at the same path) before the batch is stored. The batch was stored through
    the old table's handle into the new table: its versions then named the moved-aside data
    files, every vector search failed ("Not found"), and every repair after it re-embedded from
    zero and raced the backfill again. Now the batch is dropped, its chunks stay pending and are
    embedded into the new table, which reads whole."""
    harness.sweep()
    vault = harness.cfg.vault.path
    assert vault is not None
    for i in range(3):
        write(vault / f"Late {i}.md", f"# Late {i}\n\nNote {i} written while vectors were computed.\n")
    harness.indexer.sweep()  # chunks pending, not embedded yet
    truncate_vector_data(harness.cfg)
    expected = harness.stores.manifest.chunk_count()
    old = harness.stores.serving
    assert old is not None and harness.stores.manifest.pending_count() > 0
    real = harness.vectors._vectors_for
    repaired: list[bool] = []

    def computed_then_repaired(vs: Any, rows: Any, wait: float, stop: Any = None, **kw: Any) -> Any:
        out = real(vs, rows, wait, stop, **kw)
        if not repaired:  # the batch is computed; the repair runs before it is stored
            repaired.append(harness.repair.repair_vectors("vector sample failed"))
        return out

    monkeypatch.setattr(harness.vectors, "_vectors_for", computed_then_repaired)
    assert harness.vectors.embed_pending() == 0  # the stale batch is dropped, not stored
    assert repaired == [True] and harness.stores.serving is not old
    assert harness.stores.manifest.pending_count() == expected
    while harness.vectors.embed_pending():
        pass
    store = harness.stores.vectors
    assert store is not None
    store.verify()  # every data file its versions name is there
    fresh = open_vectors(harness.cfg, store.model_id, store.dim, "mean")
    fresh.verify()
    assert fresh.count() == store.count() == expected
    r = Retriever(harness.stores, harness.slot, harness.cfg.search, harness.cfg.recall)
    store._changed(None)  # read the table again, not the copy in memory
    late = r.search(SearchRequest("written while vectors were computed", 5, 0.0))
    assert late.degraded is None and late.hits[0].vec_score is not None


def test_one_truncated_data_file_re_embeds_only_its_chunks(make_cfg: Any, vault: Path) -> None:
    """One data file of the vector table truncated (the real model's table, filled over three
    sweeps: a data file each): the repair keeps the rows of the files that still read, with
    their vectors as they were, and only the damaged file's chunks wait for vectors and are
    embedded again (the whole table was re-embedded: hours on a large vault)."""
    import numpy as np

    from sidecar.contracts.errors import StoreError
    from sidecar.model.embedder import load_model

    cfg = make_cfg(vault)

    class Counting:  # the real model, counting the texts it embeds
        def __init__(self) -> None:
            self.model = load_model(cfg)
            self.model_id, self.dim, self.pooling = self.model.model_id, self.model.dim, self.model.pooling
            self.embedded: list[str] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.model, name)

        def embed_passages(self, texts: Any) -> Any:
            self.embedded.extend(texts)
            return self.model.embed_passages(texts)

    model = Counting()
    h = Harness(cfg, model)
    try:
        h.sweep()
        files: list[tuple[Path, set[str]]] = []  # each sweep's new data file and its chunks

        def note_new_file(before: set[str]) -> None:
            data = h.cfg.index_dir / "vectors" / f"{h.stores.vectors.name}.lance" / "data"  # type: ignore[union-attr]
            new = [f for f in data.iterdir() if f.name not in {p.name for p, _ in files}]
            assert len(new) == 1, new
            files.append((new[0], set(h.stores.manifest.all_chunk_ids()) - before))

        note_new_file(set())
        for batch in ("Kayak", "Canoe"):
            before = set(h.stores.manifest.all_chunk_ids())
            for i in range(3):
                text = f"# {batch} {i}\n\nThe {batch.lower()} trip number {i}.\n"
                write(vault / batch / f"{batch} {i}.md", text)
            h.sweep()
            note_new_file(before)
        store = h.stores.vectors
        assert store is not None
        everything = set(h.stores.manifest.all_chunk_ids())
        vectors = store.vectors_of(sorted(everything))
        damaged, lost = files[1]  # the Kayak sweep's file
        with damaged.open("r+b") as fh:
            fh.truncate(damaged.stat().st_size // 2)
        store._changed(None)  # read the table again, not the copy in memory
        with pytest.raises(StoreError):
            store.verify()
        assert h.repair.repair_vectors("vector search failed") is True
        assert any(p.name.startswith("vectors.broken-") for p in h.cfg.index_dir.iterdir())
        assert h.stores.manifest.pending_count() == len(lost) == 3
        new = h.stores.vectors
        assert new is not None and new is not store
        kept = new.vectors_of(sorted(everything - lost))
        assert set(kept) == everything - lost and new.count() == len(everything - lost)
        assert all(np.array_equal(kept[c], vectors[c]) for c in kept)
        model.embedded.clear()
        while h.vectors.embed_pending():
            pass
        assert len(model.embedded) == 3 and all("Kayak" in t or "kayak" in t for t in model.embedded)
        new.verify()
        again = new.vectors_of(sorted(everything))
        assert set(again) == everything and new.count() == len(everything)
        assert all(np.allclose(again[c], vectors[c], atol=1e-5) for c in lost)
        assert h.stores.manifest.pending_count() == 0
    finally:
        h.close()


def test_the_replaced_tables_handle_writes_no_more(harness: Harness) -> None:
    """After a repair put a new table at the same path, the old table's handle (still held by a
    search, a compaction, a write's batch) writes nothing: an add through it refuses, compaction
    and index builds through it do nothing, and the new table reads whole. The add used to land
    in the new table as a version naming the moved-aside data files."""
    import numpy as np

    from sidecar.contracts.errors import StoreError

    harness.sweep()
    old = harness.stores.vectors
    assert old is not None
    truncate_vector_data(harness.cfg)
    assert harness.repair.repair_vectors("vector sample failed") is True
    new = harness.stores.vectors
    assert new is not None and new is not old and old.closed
    with pytest.raises(StoreError, match="replaced"):
        old.add([("stale-id", "vault/Stale", "vault", "")], np.ones((1, 64), dtype=np.float32) / 8)
    old.optimize()
    assert old.compact_if_quiet(0.0) is False and old.ensure_ann() is False
    while harness.vectors.embed_pending():
        pass
    fresh = open_vectors(harness.cfg, new.model_id, new.dim, "mean")
    fresh.verify()
    assert "stale-id" not in fresh.ids()
    assert fresh.count() == harness.stores.manifest.chunk_count()


def test_a_table_that_breaks_again_after_two_rebuilds_is_left_and_reported(harness: Harness) -> None:
    """A rebuilt table that cannot be read again is rebuilt once more, and that says it is the
    second time and why; a third time it is left as it is (every rebuild re-embeds every chunk and
    keeps a copy for a month: five copies in 40 minutes were seen), reported as a problem, and
    the repair policy stops trying until a restart."""
    from sidecar.daemon.repairs import RepairPolicy

    harness.sweep()
    index_dir = harness.cfg.index_dir
    copies = lambda: sorted(p.name for p in index_dir.iterdir() if p.name.startswith("vectors.broken-"))  # noqa: E731
    for n in (1, 2):
        truncate_vector_data(harness.cfg)
        assert harness.repair.repair_vectors("vector sample failed") is True
        assert len(copies()) == n
        while harness.vectors.embed_pending():
            pass
    recent = harness.problems.describe()["recent"]
    again = [r["error"] for r in recent if "could not be read again" in r["error"]]
    assert len(again) == 1 and "rebuilt at" in again[0] and "the error now" in again[0]
    truncate_vector_data(harness.cfg)
    assert harness.repair.repair_vectors("vector sample failed") is False
    assert len(copies()) == 2
    problem = harness.problems.active_in("vectors")
    assert problem is not None and "rebuilt 2 times" in problem["error"]
    assert "not moved aside again" in problem["error"]
    policy = RepairPolicy(harness.repair, harness.problems, harness.stores.manifest, harness.slot)
    policy._vectors_repaired = -1e9
    harness.problems.report("vector_search", "vector search failed")
    policy.tick()
    assert len(copies()) == 2


def test_a_second_rebuild_names_data_files_of_the_copy_moved_aside(tmp_path: Path) -> None:
    """Why a rebuilt table fails again, when it is the old table's files it names (the race of a
    stale handle): the copy moved aside that holds them."""
    from sidecar.index.repair import _stale_files

    table = "vectors_m_64_mean"
    data = tmp_path / "vectors.broken-20261205-053041-1" / f"{table}.lance" / "data"
    data.mkdir(parents=True)
    (data / "0101abc.lance").write_bytes(b"x")
    error = f"lance error: Not found: {tmp_path}/vectors/{table}.lance/data/0101abc.lance, /rustc/x"
    assert _stale_files(error, tmp_path, table) == "0101abc.lance is in vectors.broken-20261205-053041-1"
    assert _stale_files("failed to fill whole buffer", tmp_path, table) is None


def test_status_counts_the_batch_the_model_computes_and_its_pace(make_cfg: Any, tmp_path: Path) -> None:
    """status' count of chunks waiting for vectors moved once a batch was stored (256 chunks,
    minutes apart on a slow CPU), and a batch of vectors copied from equal texts (fast) made the
    ETA "0s left" with hundreds still to compute. The model's chunks of the running batch count as
    done, and the rate is the model's."""
    from sidecar.clients.cli_render import render_status
    from tests.conftest import make_notes

    now = [0.0]
    seen: list[int] = []

    vault = tmp_path / "many"
    make_notes(vault, 40)

    class Timed(FakeEmbedder):
        def embed_passages(self, texts: Any) -> Any:
            seen.append(h.vectors.computing)
            now[0] += 1.0 * len(texts)
            return super().embed_passages(texts)

    h = Harness(make_cfg(vault), Timed())
    h.vectors.timer = lambda: now[0]
    try:
        h.indexer.sweep()
        assert h.vectors.embed_pending(batch=40) > 16
        assert seen[:3] == [0, 16, 32] and h.vectors.computing == 0  # counted per slice, reset when stored
        assert h.vectors.rate(h.stores.serving) == pytest.approx(1.0)
        # The same texts again (a folder copied): vectors reused, no model run, no rate sample.
        write(vault / "elsewhere" / "note-000.md", (vault / "folder0" / "note-000.md").read_text())
        h.indexer.sweep()
        before = list(h.vectors._recent[h.stores.serving.store.name].steps)
        reused, calls = h.vectors.reused, len(seen)
        assert h.vectors.embed_pending(batch=40) > 0
        assert h.vectors.reused > reused and len(seen) == calls
        assert list(h.vectors._recent[h.stores.serving.store.name].steps) == before
        assert h.vectors.rate(h.stores.serving) == pytest.approx(1.0)
    finally:
        h.close()
    health = {
        "version": "x", "started": 0, "pid": 1, "socket": "s", "home": "h", "vault": None,
        "index": {"state": "ready", "phase": "idle", "progress": {"done": 0, "total": 0}, "files": 1,
                  "chunks": 900, "by_source": {}, "skipped": {}, "pending_vectors": 936,
                  "embed_rate_chunks_per_second": 2.0},
        "embedder": {"state": "ok", "model": "m", "origin": "o"},
        "vectors": {"computing": 120}, "roots": [],
    }  # fmt: skip
    # One count for the chunks waiting (as search notes and `status --json` say it), the batch's
    # computed part said beside it; the time left is that of the rest. Was: "816 chunks waiting"
    # while every answer said 936.
    assert (
        "Vectors: 936 chunks waiting for vectors (120 of them computed, stored with the batch running "
        "now), about 6m 48s left"
    ) in render_status(health)
    health["vectors"]["computing"] = 936
    assert "Vectors: storing the last 936 computed" in render_status(health)


class NewConversion(FakeEmbedder):
    """The same model's weights converted anew (another graph file): another id, same vectors."""

    model_id = "fake-bow@2"


class SameNameOtherVectors(FakeEmbedder):
    """Same name, other weights: its vectors do not agree with the stored ones."""

    model_id = "fake-bow@3"

    def embed_passages(self, texts: Any) -> Any:
        return super().embed_passages(texts)[:, ::-1].copy()


def test_an_upgrade_that_converts_the_model_anew_keeps_the_stored_vectors(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index written under the earlier conversion's model id (the old layout: the table named
    for it), that conversion removed by the upgrade so the previous model cannot be loaded: the
    new conversion computes the same vectors for a sample, so they are carried into its table,
    nothing is embedded again and vector search stays whole (was: every chunk re-embedded,
    keyword-only meanwhile). Vectors of other weights under the same name are recomputed."""
    from sidecar.index import migration

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    chunks = h.stores.manifest.chunk_count()
    old_name = h.stores.vectors.name  # type: ignore[union-attr]
    h.close()
    new = NewConversion()
    monkeypatch.setattr(migration, "load_model", lambda _cfg: NewConversion())  # the old one is gone
    h = Harness(cfg, None)
    try:
        migration.attach(cfg, h.vectors, new)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == table_name_of(new) and serving.model is new
        assert h.stores.manifest.pending_count() == 0 and serving.store.count() == chunks
        assert len(new.embedded) <= migration._SAMPLE + migration._SAMPLE_LONGEST  # the sample, no more
        assert _tables(cfg) == [table_name_of(new)] and old_name not in _tables(cfg)
        assert search(h, "restic backups of the NAS")[0]["vecScore"] is not None
    finally:
        h.close()
    other = SameNameOtherVectors()
    monkeypatch.setattr(migration, "load_model", lambda _cfg: SameNameOtherVectors())
    h = Harness(cfg, None)
    try:
        migration.attach(cfg, h.vectors, other)
        assert h.stores.manifest.pending_count() == chunks  # recomputed, as before
    finally:
        h.close()


class CutsLongTextsOtherwise(FakeEmbedder):
    """Same name, a conversion that keeps fewer words of a long text: short chunks agree."""

    model_id = "fake-bow@4"

    def embed_passages(self, texts: Any) -> Any:
        return super().embed_passages([" ".join(t.split()[:40]) for t in texts])


def test_a_conversion_that_differs_on_long_chunks_only_does_not_keep_the_vectors(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample compared holds the longest chunks too: one drawn by text hash alone missed the
    one long note and carried its wrong vector over (32 short chunks agreed)."""
    from sidecar.index import migration

    for i in range(60):
        write(vault / f"Short/s{i}.md", f"# Short {i}\n\nA brief line about ferry {i}.\n")
    write(vault / "Long.md", "# Long\n\n" + " ".join(f"word{j}" for j in range(150)) + "\n")
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    chunks = h.stores.manifest.chunk_count()
    h.close()
    monkeypatch.setattr(migration, "load_model", lambda _cfg: CutsLongTextsOtherwise())
    h = Harness(cfg, None)
    try:
        migration.attach(cfg, h.vectors, CutsLongTextsOtherwise())
        assert h.stores.manifest.pending_count() == chunks  # recomputed
    finally:
        h.close()


def _long_notes(vault: Path, n: int = 3) -> None:
    for i in range(n):
        body = " ".join(f"word{i}x{j}" for j in range(120))
        write(vault / f"Long {i}.md", f"# Long {i}\n\n{body}\n")


def test_notes_cut_again_during_a_switch_are_embedded_by_the_new_model_only(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A model switch cuts every note again (sizes count in the new model's tokens): the chunks
    cut anew go to the new model's table only. The retiring model embedded each of them first,
    for a table dropped at the switch (on two cores, minutes to hours of work for nothing). A
    note edited meanwhile still reaches both tables, so the serving one finds it by meaning."""
    from dataclasses import replace

    from sidecar.index.migration import attach

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.sweep()
        manifest = h.stores.manifest
        before = manifest.all_chunk_ids()
        other = OtherModel()
        attach(h.cfg, h.vectors, other)
        cfg = replace(h.cfg, chunking=replace(h.cfg.chunking, max_tokens=40))
        h.indexer.cfg = cfg  # the new model counts the notes' tokens otherwise
        h.indexer.reparse_if_chunking_changed()
        write(vault / "Late.md", "# Late\n\nA note written during the switch about the canoe.\n")
        retiring.embedded.clear()
        h.indexer.sweep()
        assert manifest.all_chunk_ids() - before, "the notes were cut anew"
        # Only the note edited meanwhile waits for the retiring model.
        assert manifest.pending_count() == len(manifest.chunk_ids("vault/Late")) == 1
        while h.vectors.embed_pending(batch=8) and h.stores.building is not None:
            serving = h.stores.serving
            assert serving is not None and serving.model is retiring
        assert {t.split("\n")[0] for t in retiring.embedded} == {"Late"}
        assert search(h, "note written during the switch about the canoe")[0]["vecScore"] is not None
        h.sweep()
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert serving.store.ids() == manifest.all_chunk_ids() and manifest.pending_count() == 0
    finally:
        h.close()


def test_chunks_left_to_a_switch_that_is_undone_wait_for_the_serving_model(
    make_cfg: Any, tmp_path: Path
) -> None:
    """The switch undone (the previous model configured again) or its model failing to load: the
    chunks cut anew for it are embedded by the model that serves after all, none stays without
    a vector."""
    from dataclasses import replace

    from sidecar.index.migration import attach

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.sweep()
        attach(h.cfg, h.vectors, OtherModel())
        h.indexer.cfg = replace(h.cfg, chunking=replace(h.cfg.chunking, max_tokens=40))
        h.indexer.reparse_if_chunking_changed()
        h.indexer.sweep()
        manifest = h.stores.manifest
        assert manifest.pending_count() == 0
        h.stores.building = None  # a restart with the previous model configured again
        attach(h.cfg, h.vectors, retiring)
        assert manifest.pending_count() > 0
        while h.vectors.embed_pending():
            pass
        store = h.stores.vectors
        assert store is not None and store.ids() == manifest.all_chunk_ids()
    finally:
        h.close()


def test_notes_cut_again_before_the_switch_begins_are_left_to_the_new_model(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with another model configured: the sweep cuts the notes again as soon as the new
    model's tokenizer is there, while the models still load and no table is attached yet. Those
    chunks wait for the new model too, not for the previous one, which embedded them first."""
    from dataclasses import replace

    from sidecar.index import migration

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.indexer.reparse_if_chunking_changed()  # as every start does: the notes cut for this model
        h.sweep()
        manifest = h.stores.manifest
        other = OtherModel()
        h.stores.serving = None  # the start: the models load, nothing is attached yet
        cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="other-model"))
        h.indexer.cfg = replace(cfg, chunking=replace(cfg.chunking, max_tokens=40))
        h.indexer.reparse_if_chunking_changed()
        h.indexer.sweep()
        monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)
        retiring.embedded.clear()
        migration.attach(h.cfg, h.vectors, other)
        assert h.stores.building is not None and manifest.pending_count() == 0
        h.sweep()
        assert retiring.embedded == []
        serving = h.stores.serving
        assert serving is not None and serving.model is other
        assert serving.store.ids() == manifest.all_chunk_ids() and manifest.pending_count() == 0
    finally:
        h.close()


def _cut_again_during_a_switch(make_cfg: Any, tmp_path: Path, cap: int | None = None) -> Harness:
    """Three long notes, then a switch to another model that cuts them again (``cap``: the
    per-note vector limit meanwhile)."""
    from dataclasses import replace

    from sidecar.index.migration import attach

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    attach(h.cfg, h.vectors, OtherModel())
    if cap is not None:
        h.stores.manifest.vector_cap = cap
    h.indexer.cfg = replace(h.cfg, chunking=replace(h.cfg.chunking, max_tokens=40))
    h.indexer.reparse_if_chunking_changed()
    h.indexer.sweep()
    return h


def test_a_note_edited_during_a_switch_waits_for_the_serving_model_whole(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A note cut again for the switch, then edited: its chunks whose text stayed (left to the
    new model) wait for the serving model again with the new ones, so the note is found by
    meaning during the switch (they kept the flag: only the changed chunk got a vector)."""
    from sidecar.stores.vectorbook import NEXT_ONLY

    h = _cut_again_during_a_switch(make_cfg, tmp_path)
    try:
        manifest = h.stores.manifest
        key = "vault/Long 0"
        rows = manifest.read("SELECT has_vector FROM chunks WHERE key = ?", (key,))
        assert len(rows) > 1 and all(f == NEXT_ONLY for (f,) in rows)
        p = tmp_path / "v" / "Long 0.md"
        write(p, p.read_text() + "\nA new closing line about the canoe.\n")
        h.indexer.sweep()
        flags = [f for (f,) in manifest.read("SELECT has_vector FROM chunks WHERE key = ?", (key,))]
        assert NEXT_ONLY not in flags, flags
        assert (
            manifest.left_to_switch()
            == manifest.read(f"SELECT count(*) FROM chunks WHERE has_vector = {NEXT_ONLY}")[0][0]
            > 0
        )  # the other notes stay left to the new model
        while manifest.pending_count() and h.vectors.embed_pending(batch=8):
            pass
        serving = h.stores.serving
        assert serving is not None and h.stores.building is not None
        assert manifest.chunk_ids(key) <= serving.store.ids()
    finally:
        h.close()


def test_chunks_past_the_vector_limit_stay_keyword_only_during_a_switch(
    make_cfg: Any, tmp_path: Path
) -> None:
    """Chunks past index.maxVectorChunksPerNote wait for no vector: cut again during a switch
    they are not left to the new model (they were, and status' keyword-only count missed them)."""
    h = _cut_again_during_a_switch(make_cfg, tmp_path, cap=2)
    try:
        manifest = h.stores.manifest
        past = manifest.read("SELECT count(*) FROM chunks WHERE ord >= 2")[0][0]
        notes, chunks, _ = manifest.keyword_only()
        assert past > 0 and (notes, chunks) == (3, past)
        assert manifest.left_to_switch() == manifest.read("SELECT count(*) FROM chunks WHERE ord < 2")[0][0]
    finally:
        h.close()


def test_a_stop_after_the_cut_before_the_switch_begins_keeps_the_switch_due(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A stop (or a kill) after a start recorded the new model's chunker, before its switch began:
    the next start still knows a switch follows (the serving table is another model's), so the
    notes it cuts are left to the new model too."""
    from dataclasses import replace

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.indexer.cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="fake-bow"))
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        assert not h.indexer.writer.switch_due  # the serving table is the configured model's
        h.indexer.cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="other-model"))
        h.indexer.reparse_if_chunking_changed()  # the first start: the notes cut for it
        assert h.indexer.writer.switch_due
        h.indexer.writer.switch_due = False  # stopped before the switch began; the next start:
        h.indexer.reparse_if_chunking_changed()
        assert h.indexer.writer.switch_due
    finally:
        h.close()


def test_a_model_whose_name_begins_another_s_is_told_apart(make_cfg: Any, tmp_path: Path) -> None:
    """A switch to a model whose name the serving one's begins with (``e5`` after ``e5-small``):
    still due after a stop that followed the cut (the table name's prefix took one for the
    other), and the serving model itself configured again is no switch."""
    from dataclasses import replace

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())  # its table: vectors_fake_bow_1_64_mean
    try:
        h.sweep()
        h.indexer.cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="fake"))
        h.indexer.reparse_if_chunking_changed()  # the first start: the notes cut for it
        assert h.indexer.writer.switch_due
        h.indexer.writer.switch_due = False  # stopped before the switch began; the next start:
        h.indexer.reparse_if_chunking_changed()
        assert h.indexer.writer.switch_due
        h.indexer.cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="fake-bow"))
        h.indexer.reparse_if_chunking_changed()
        h.indexer.writer.switch_due = False
        h.indexer.reparse_if_chunking_changed()
        assert not h.indexer.writer.switch_due
    finally:
        h.close()


def test_a_repair_at_attach_before_the_switch_begins_keeps_the_chunks_left_to_it(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose switch cannot begin at once (the new table fails: the attach checks and
    repairs the serving one, then tries again): the chunks cut anew for the new model stay left
    to it. The repair attached the serving table as if no switch followed, and the retiring
    model embedded every one of them before the switch began."""
    from dataclasses import replace

    from sidecar.contracts.errors import StoreError
    from sidecar.daemon.backfill import Backfill
    from sidecar.index import migration
    from sidecar.stores.vectorbook import NEXT_ONLY

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        manifest = h.stores.manifest
        other = OtherModel()
        h.stores.serving = None  # the start: the models load, nothing is attached yet
        cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="other-model"))
        h.indexer.cfg = replace(cfg, chunking=replace(cfg.chunking, max_tokens=40))
        h.indexer.reparse_if_chunking_changed()
        h.indexer.sweep()
        left = manifest.left_to_switch()
        assert left > 0
        monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)
        begin = h.vectors.begin_migration
        failures = [StoreError("vector reconcile failed on the new table")]

        def begin_once(*args: Any) -> None:
            if failures:
                raise failures.pop()
            begin(*args)

        monkeypatch.setattr(h.vectors, "begin_migration", begin_once)
        h.slot.set_ok(other, "test")
        backfill = Backfill(
            h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity,
            stop=threading.Event(),
        )  # fmt: skip
        backfill._attach_once(other)
        assert h.stores.building is not None and manifest.left_to_switch() == left
        retiring.embedded.clear()
        while h.vectors.embed_pending(batch=8):
            pass
        assert retiring.embedded == []
        serving = h.stores.serving
        assert serving is not None and serving.model is other
        assert serving.store.ids() == manifest.all_chunk_ids()
        assert manifest.read(f"SELECT count(*) FROM chunks WHERE has_vector = {NEXT_ONLY}")[0][0] == 0
    finally:
        h.close()


def _backfill(h: Harness) -> Any:
    from sidecar.daemon.backfill import Backfill

    return Backfill(
        h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity,
        stop=threading.Event(),
    )  # fmt: skip


def _fail_reconcile_once(h: Harness, table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next reconcile of ``table`` fails (a passing StoreError: the table itself reads)."""
    from sidecar.contracts.errors import StoreError

    reconcile = h.vectors._reconcile
    failures = [StoreError(f"vector reconcile failed on {table}")]

    def fail_once(store: Any, flag: str, **kw: Any) -> int:
        if failures and store.name == table:
            raise failures.pop()
        return reconcile(store, flag, **kw)

    monkeypatch.setattr(h.vectors, "_reconcile", fail_once)


def test_a_retiring_table_failing_once_at_a_restart_during_a_switch_keeps_serving(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart during a switch whose retiring table fails once at the attach: the repair
    checks that table with its own model and the switch goes on to its end. The repair served
    the new model's table (all but a few chunks without a vector) and dropped the retiring one."""
    from sidecar.index import migration
    from sidecar.index.vectortables import expire_paused

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.sweep()
        other = OtherModel()
        migration.attach(h.cfg, h.vectors, other)  # the switch under way
        h.vectors.embed_pending(batch=2)
        manifest = h.stores.manifest
        old_name = manifest.get_meta("vector_table")
        h.stores.serving = h.stores.building = None  # the restart: nothing attached yet
        monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)
        _fail_reconcile_once(h, old_name, monkeypatch)
        h.slot.set_ok(other, "test")
        _backfill(h)._attach_once(other)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and serving.model is retiring
        assert h.stores.building is not None and old_name in table_names_of(h.cfg)
        while h.vectors.embed_pending(batch=8):
            pass
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert manifest.get_meta("vector_table") == serving.store.name
        assert h.vectors.paused_switch() is None
        assert not expire_paused(h.vectors, h.cfg.index_dir / "vectors", now=time.time() + 30 * 86400)
        assert serving.store.ids() == manifest.all_chunk_ids()
    finally:
        h.close()


def test_a_retiring_table_failing_once_as_a_switch_begins_keeps_its_vectors(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with a new model configured, no switch yet; the retiring table fails once at its
    attach (it reads): it serves, every vector kept, and the switch begins. The repair served the
    new model's empty table and dropped the retiring one, every vector with it."""
    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    ids = first.stores.manifest.all_chunk_ids()
    first.close()
    h = _restart_with(cfg, monkeypatch)
    try:
        _fail_reconcile_once(h, old_name, monkeypatch)
        other = OtherModel()
        h.slot.set_ok(other, "test")
        _backfill(h)._attach_once(other)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and serving.store.ids() == ids
        assert h.stores.building is not None and old_name in table_names_of(cfg)
    finally:
        h.close()


def test_a_damaged_retiring_table_as_a_switch_begins_is_moved_aside_not_dropped(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with a new model configured, no switch yet, and the retiring table damaged: it is
    moved aside (a copy kept) and made afresh with its own model; the chunks whose vector it lost
    are left to the switch, which begins. It was dropped as unused, no copy kept."""
    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    first.close()
    for data in (cfg.index_dir / "vectors" / f"{old_name}.lance" / "data").iterdir():
        with data.open("r+b") as fh:
            fh.truncate(data.stat().st_size // 2)
    h = _restart_with(cfg, monkeypatch)
    try:
        other = OtherModel()
        h.slot.set_ok(other, "test")
        _backfill(h)._attach_once(other)
        manifest = h.stores.manifest
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and len(_broken(cfg)) == 1
        assert h.stores.building is not None and manifest.get_meta("vector_table") == old_name
        assert manifest.left_to_switch() == len(manifest.all_chunk_ids()) - serving.store.count()
        while h.vectors.embed_pending(batch=8):
            pass
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert serving.store.ids() == manifest.all_chunk_ids()
    finally:
        h.close()


def table_names_of(cfg: Any) -> list[str]:
    from sidecar.stores.vectors import table_names

    return table_names(cfg.index_dir / "vectors")


def test_a_switch_s_table_that_cannot_be_read_at_its_attach_is_repaired_and_the_switch_begins(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart during a switch whose new table opens but cannot be read: the attach's repair
    moves that table aside (it checked the serving one only, the attach failed the same way at
    every retry, and the switch never began: nothing was embedded meanwhile), and the switch
    goes on to its end."""
    from sidecar.daemon.backfill import Backfill
    from sidecar.index import migration

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    migration.attach(cfg, first.vectors, OtherModel())
    first.vectors.embed_pending(batch=2)
    first.vectors.embed_pending(batch=2)
    first.close()
    for data in (cfg.index_dir / "vectors" / f"{table_name_of(OtherModel())}.lance" / "data").iterdir():
        with data.open("r+b") as fh:
            fh.truncate(data.stat().st_size // 2)
    h = _restart_with(cfg, monkeypatch)
    try:
        other = OtherModel()
        h.slot.set_ok(other, "test")
        backfill = Backfill(
            h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity,
            stop=threading.Event(),
        )  # fmt: skip
        backfill._attach_once(other)
        assert h.stores.building is not None and len(_broken(cfg)) == 1
        while h.vectors.embed_pending(batch=8):
            pass
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert serving.store.ids() == h.stores.manifest.all_chunk_ids()
    finally:
        h.close()


def test_notes_left_to_a_switch_are_found_by_their_words_and_said_so(make_cfg: Any, tmp_path: Path) -> None:
    """During a switch, notes cut again for the new model have no serving vector: a search says
    so as what they wait for (``leftToSwitch``: the switch's end, not ``pendingVectors``, the
    vectors being computed now, which counted them) and scores such a note by its words alone,
    not below a note alike in its words whose vector is a weak match (a missing vector is no
    dissimilarity)."""
    from dataclasses import replace

    from sidecar.clients.mcp_texts import _state_notes
    from sidecar.contracts.wire_json import state_json
    from sidecar.search.request import SearchRequest

    h = _cut_again_during_a_switch(make_cfg, tmp_path)
    try:
        manifest = h.stores.manifest
        p = tmp_path / "v" / "Long 1.md"
        write(p, p.read_text() + "\nA closing line.\n")  # edited: the serving model embeds it
        h.indexer.sweep()
        while manifest.pending_count() and h.vectors.embed_pending(batch=8):
            pass
        left = manifest.left_to_switch()
        assert left > 0 and manifest.pending_count() == 0 and h.stores.building is not None
        # The fake model's cosines are small: a clear match at 0.3, so Long 1's vector counts.
        scale = replace(h.cfg.search, cosine_floor=0.0, cosine_full=0.3)
        retriever = Retriever(h.stores, h.slot, scale, h.cfg.recall)
        result = retriever.search(SearchRequest("word0x7 word1x7", 10, 0.0))
        assert result.pending_vectors == 0 and result.left_to_switch == left
        said = state_json(result)
        assert "pendingVectors" not in said and said["leftToSwitch"] == left
        notes = _state_notes(said)
        assert len(notes) == 1 and "until the switch ends" in notes[0] and "being computed" not in notes[0]
        first, second = result.hits[:2]
        assert first.reference.startswith("vault/Long 0") and first.vec_score is None
        assert second.reference.startswith("vault/Long 1") and second.vec_score is not None
    finally:
        h.close()


def test_a_switch_whose_retiring_model_is_gone_at_a_restart_leaves_no_paused_switch(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart during a switch after the retiring model was removed: the new model's table
    serves at once (the rest is embedded again), and is not also named the table of a paused
    switch, whose expiry dropped the serving table a week later."""
    from sidecar.contracts.errors import EmbedderError
    from sidecar.index import migration
    from sidecar.index.vectortables import expire_paused

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    migration.attach(cfg, first.vectors, OtherModel())
    first.vectors.embed_pending(batch=2)
    first.close()

    def gone(_cfg: Any) -> Any:
        raise EmbedderError("the model's folder is empty")

    monkeypatch.setattr(migration, "load_model", gone)
    h = Harness(cfg, None)
    try:
        migration.attach(cfg, h.vectors, OtherModel(), h.problems)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == table_name_of(OtherModel())
        assert h.vectors.paused_switch() is None
        assert not expire_paused(h.vectors, cfg.index_dir / "vectors", now=time.time() + 30 * 86400)
        assert serving.store.name in table_names_of(cfg)
    finally:
        h.close()


def test_vectors_lost_before_a_switch_begins_are_left_to_the_new_model(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with another model configured finds chunks whose vector the retiring table lacks
    (rows lost while stopped, or a repair that could not salvage them): the new model embeds
    them, the retiring one does not (it did, for vectors dropped with its table at the switch's
    end); they count as left to the switch meanwhile."""
    from sidecar.index import migration
    from sidecar.stores.vectorbook import NEXT_ONLY

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    lost = sorted(first.stores.manifest.chunk_ids("vault/Long 0"))
    store = first.stores.vectors
    assert store is not None and lost
    store.delete_ids(lost)
    first.close()
    h = _restart_with(cfg, monkeypatch)
    try:
        retiring = FakeEmbedder()
        monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)
        other = OtherModel()
        migration.attach(cfg, h.vectors, other, h.problems)
        manifest = h.stores.manifest
        flags = manifest.read("SELECT has_vector FROM chunks WHERE key = 'vault/Long 0'")
        assert {f for (f,) in flags} == {NEXT_ONLY} and manifest.pending_count() == 0
        assert manifest.left_to_switch() == len(lost)
        while h.vectors.embed_pending(batch=8):
            pass
        assert retiring.embedded == []
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert serving.store.ids() == manifest.all_chunk_ids()
    finally:
        h.close()


def test_one_failed_load_of_the_retiring_model_keeps_its_table(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart during a switch whose retiring model, its files there, fails to load once (the
    memory short while the new model is loaded too): its table is kept and the next try resumes
    the switch. Taken for gone, its table was dropped for good. Gone files still end it."""
    from sidecar.contracts.errors import EmbedderError
    from sidecar.index import migration

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    migration.attach(cfg, first.vectors, OtherModel())
    first.vectors.embed_pending(batch=2)
    first.close()
    failures = [EmbedderError("onnxruntime: failed to allocate memory")]

    def flaky(_cfg: Any) -> Any:
        if failures:
            raise failures.pop()
        return FakeEmbedder()

    monkeypatch.setattr(migration, "load_model", flaky)
    files = cfg.models_dir / "fake-bow"  # the model's files are there
    files.mkdir(parents=True)
    (files / "model.onnx").write_bytes(b"onnx")
    (files / "tokenizer.json").write_text("{}")
    h = Harness(cfg, None)
    try:
        with pytest.raises(EmbedderError, match="tried again"):
            migration.attach(cfg, h.vectors, OtherModel(), h.problems)
        assert old_name in table_names_of(cfg) and h.stores.manifest.get_meta("vector_table") == old_name
        migration.attach(cfg, h.vectors, OtherModel(), h.problems)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and h.stores.building is not None
    finally:
        h.close()


def test_a_switch_that_cannot_begin_is_put_off_and_the_serving_model_embeds_meanwhile(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch whose begin fails again and again (a fault the repair does not cure): after a few
    tries the retiring model embeds meanwhile, the chunks left to the switch too, and the switch
    is tried again beside it, until it begins. The attach retried alone: nothing was embedded,
    and the chunks cut anew for the new model had no vector from either model."""
    from dataclasses import replace

    from sidecar.contracts.errors import StoreError
    from sidecar.daemon import backfill as backfill_module
    from sidecar.index import migration
    from sidecar.runtime.backoff import Backoff

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    stop = threading.Event()
    thread = None
    try:
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        manifest = h.stores.manifest
        other = OtherModel()
        h.stores.serving = None  # the start: the models load, nothing is attached yet
        cfg = replace(h.cfg, embedder=replace(h.cfg.embedder, model="other-model"))
        h.indexer.cfg = replace(cfg, chunking=replace(cfg.chunking, max_tokens=40))
        h.indexer.reparse_if_chunking_changed()
        h.indexer.sweep()
        assert manifest.left_to_switch() > 0
        monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)
        begin = h.vectors.begin_migration
        stuck = threading.Event()
        stuck.set()

        def begin_unless_stuck(*args: Any) -> None:
            if stuck.is_set():
                raise StoreError("the switch cannot begin")
            begin(*args)

        monkeypatch.setattr(h.vectors, "begin_migration", begin_unless_stuck)
        monkeypatch.setattr(backfill_module, "ATTACH_RETRY", Backoff(base=0.01, cap=0.05, jitter=0.0))
        h.slot.set_ok(other, "test")
        backfill = _backfill(h)
        backfill.stop = stop
        thread = threading.Thread(target=backfill.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while manifest.left_to_switch() or manifest.pending_count():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        serving = h.stores.serving
        assert serving is not None and serving.model is retiring and h.stores.building is None
        assert serving.store.ids() == manifest.all_chunk_ids()
        problem = h.problems.active_in("vectors")
        assert problem is not None and "switch to other-model@2 starts once this works" in problem["error"]
        stuck.clear()  # the fault passes: the switch begins and ends without a restart
        while manifest.get_meta("vector_table") != table_name_of(other):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert h.problems.active_in("vectors") is None
    finally:
        stop.set()
        if thread is not None:
            thread.join(10)
        h.close()


def test_a_switch_s_table_that_cannot_be_read_again_leaves_the_serving_one_repairable(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table a switch builds, rebuilt twice in this run, cannot be read a third time: the
    repair leaves it and says the switch waits, while the retiring table serves. It said vector
    search failed until a restart and never repaired the serving table again in that run."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores.vectors import VectorStore

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        other = OtherModel()
        name = table_name_of(other)
        h.repair.rebuilt[name] = [(time.time(), "could not be read"), (time.time(), "could not be read")]
        verify = VectorStore.verify

        def unreadable(store: VectorStore) -> None:
            if store.name == name:
                raise StoreError(f"vector table {name} cannot be read")
            verify(store)

        monkeypatch.setattr(VectorStore, "verify", unreadable)
        h.repair._check_next(other)
        assert h.repair.gave_up is None
        problem = h.problems.active_in("vectors", subject=name)
        assert problem is not None and "switch waits" in problem["error"]
        assert "Vector search fails" not in problem["error"]
        monkeypatch.setattr(VectorStore, "verify", verify)
        h.repair._check_next(other)
        assert h.problems.active_in("vectors", subject=name) is None
    finally:
        h.close()


def _switch_with_broken_retiring_model(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Harness, str]:
    """A restart during a switch whose retiring model's files are there but fail to load at
    every try (broken for good)."""
    from sidecar.contracts.errors import EmbedderError
    from sidecar.index import migration

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    migration.attach(cfg, first.vectors, OtherModel())
    first.vectors.embed_pending(batch=2)
    first.close()

    def broken(_cfg: Any) -> Any:
        raise EmbedderError("model.onnx: protobuf parsing failed")

    monkeypatch.setattr(migration, "load_model", broken)
    files = cfg.models_dir / "fake-bow"
    files.mkdir(parents=True)
    (files / "model.onnx").write_bytes(b"onnx")
    (files / "tokenizer.json").write_text("{}")
    return cfg, Harness(cfg, None), old_name


def test_a_retiring_model_broken_for_good_is_given_up_on_and_its_table_kept_aside(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A retiring model whose files are there but never load: after a bounded number of tries
    over a while it is given up on; its table is moved aside (a copy kept), the new model's
    table serves and is filled, and the log and status say so. It was tried forever, vector
    search off meanwhile, and the problem line named no end."""
    from sidecar.daemon import backfill as backfill_module
    from sidecar.runtime.backoff import Backoff

    cfg, h, old_name = _switch_with_broken_retiring_model(make_cfg, tmp_path, monkeypatch)
    monkeypatch.setattr(backfill_module, "ATTACH_RETRY", Backoff(base=0.0, cap=0.0, jitter=0.0))
    monkeypatch.setattr(backfill_module, "RETIRING_MODEL_TRIES", 3, raising=False)
    monkeypatch.setattr(backfill_module, "RETIRING_MODEL_GIVE_UP_S", 0.0, raising=False)
    caplog.set_level("INFO", logger="sidecar")
    try:
        other = OtherModel()
        h.slot.set_ok(other, "test")
        backfill = _backfill(h)
        said: list[str] = []
        failed = backfill._attach_failed

        def noted(exc: Exception, delay: float, model: Any) -> None:
            failed(exc, delay, model)
            said.append((h.problems.active_in("vectors") or {}).get("error", ""))
            if len(said) > 5:  # tried on and on: stop the loop
                backfill.stop.set()

        backfill._attach_failed = noted
        assert backfill._attach(other)
        assert len(said) == 3 and "given up on" in said[0] and "protobuf parsing failed" in said[0]
        serving = h.stores.serving
        assert serving is not None and serving.model is other and h.stores.building is None
        assert old_name not in table_names_of(cfg)
        kept = [p for p in _broken(cfg) if (p / f"{old_name}.lance").is_dir()]
        assert len(kept) == 1
        assert "vectors_previous_model_given_up" in caplog.text
        notes = [n["error"] for n in h.problems.describe()["recent"] if n.get("subject") == "vectors"]
        assert any("given up on" in n and kept[0].name in n for n in notes)
        assert h.problems.active_in("vectors") is None
        while h.vectors.embed_pending(batch=8):
            pass
        assert serving.store.ids() == h.stores.manifest.all_chunk_ids()
    finally:
        h.close()


@pytest.mark.parametrize("fault", ["raises", "names no model"])
def test_tidy_moves_aside_a_table_whose_model_cannot_be_read(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """A retiring table whose metadata cannot be read (the previous model unknown) is not used by
    the new model's table: tidy moves it aside, a copy kept. It was dropped, every vector, no copy."""
    from sidecar.index import migration, vectortables
    from sidecar.stores import vectors as vectors_module

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    old_name = first.stores.manifest.get_meta("vector_table")
    first.close()
    table_model = vectors_module.table_model

    def unreadable(path: Path, table: str) -> Any:
        if table == old_name and fault == "raises":
            raise OSError(f"lance error: the metadata of {table} cannot be read")
        if table == old_name:
            return "", 0, "mean"
        return table_model(path, table)

    monkeypatch.setattr(migration, "table_model", unreadable)
    monkeypatch.setattr(vectortables, "table_model", unreadable, raising=False)
    h = Harness(cfg, None)
    try:
        other = OtherModel()
        migration.attach(cfg, h.vectors, other, h.problems)
        serving = h.stores.serving
        assert serving is not None and serving.model is other
        assert old_name not in table_names_of(cfg)
        assert [p for p in _broken(cfg) if (p / f"{old_name}.lance").is_dir()]
    finally:
        h.close()


@pytest.mark.parametrize("fault", ["damage", "model_gone"])
def test_a_retiring_table_not_used_by_the_switch_is_moved_aside_not_dropped(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """A start with a new model configured and the previous table readable by its metadata, but
    not used: its store fails to open though its model loads, or its model is gone. It is moved
    aside (a copy kept 30 days) and the new model fills its own table. ``tidy`` dropped it, every
    vector of the index, no copy kept. A gone model's table was shown as a damaged copy, and a
    store that failed to open was said nowhere but there."""
    from sidecar.index import migration
    from sidecar.stores.aside import moved_aside

    def damage(name: str) -> Exception:
        return StoreError(f"vector table {name} cannot be opened: lance error: bad manifest")

    cfg, h, old_name = _old_table_failing(
        make_cfg, tmp_path, monkeypatch, damage if fault == "damage" else None
    )
    if fault != "damage":

        def gone(_cfg: Any) -> Any:
            raise EmbedderError("the model's files are gone")

        monkeypatch.setattr(migration, "load_model", gone)
        monkeypatch.setattr(migration, "_files_present", lambda _cfg: False)
    try:
        other = OtherModel()
        migration.attach(cfg, h.vectors, other, h.problems)
        serving = h.stores.serving
        assert serving is not None and serving.model is other
        assert old_name not in table_names_of(cfg)
        copies = [c for c in moved_aside(cfg.index_dir) if (c.path / f"{old_name}.lance").is_dir()]
        assert len(copies) == 1
        # A gone model's vectors are a retired model's (listed apart, no damage); a store that
        # fails to open is damage, and said in problems: every vector is recomputed.
        assert copies[0].retired is (fault == "model_gone") and not copies[0].newer
        noted = [p["error"] for p in h.problems.describe()["recent"] if p.get("subject") == "vectors"]
        if fault == "damage":
            assert len(noted) == 1 and "could not be opened" in noted[0] and "bad manifest" in noted[0]
        else:
            assert noted == []
    finally:
        h.close()


def test_rows_lost_from_the_retiring_table_during_a_switch_are_left_to_the_new_model(
    make_cfg: Any, tmp_path: Path
) -> None:
    """During a switch a write to the retiring table fails half-way (its flags and table may
    disagree) and rows of it are lost: the check before its next write leaves the chunks whose
    vector it lacks to the new model. They were given to both models: the retiring one embedded
    them again, for vectors dropped with its table at the switch's end."""
    from sidecar.index import migration
    from sidecar.stores.vectorbook import NEXT_ONLY

    vault = tmp_path / "v"
    _long_notes(vault)
    retiring = FakeEmbedder()
    h = Harness(make_cfg(vault), retiring)
    try:
        h.sweep()
        manifest = h.stores.manifest
        lost = sorted(manifest.chunk_ids("vault/Long 0"))
        migration.attach(h.cfg, h.vectors, OtherModel())
        serving = h.stores.serving
        assert serving is not None and h.stores.building is not None and lost
        write(vault / "New.md", "# New\n\nfresh words for the retiring model\n")
        h.indexer.sweep()
        real_add = serving.store.add
        failed = [DiskFullError(f"vector add failed: {NO_SPACE}")]

        def add(rows: Any, vectors: Any) -> None:
            if failed:
                raise failed.pop()
            real_add(rows, vectors)

        serving.store.add = add  # type: ignore[method-assign]
        with pytest.raises(DiskFullError):
            h.vectors.embed_pending(batch=8)
        serving.store.delete_ids(lost)  # rows lost meanwhile
        retiring.embedded.clear()
        h.vectors.embed_pending(batch=8)  # the retiring table's next write checks it first
        flags = manifest.read("SELECT has_vector FROM chunks WHERE key = 'vault/Long 0'")
        assert {f for (f,) in flags} == {NEXT_ONLY}
        assert all("word0x" not in t for t in retiring.embedded)
        while h.stores.building is not None:
            h.vectors.embed_pending(batch=8)
        assert all("word0x" not in t for t in retiring.embedded)
        final = h.stores.serving
        assert final is not None and final.store.ids() == manifest.all_chunk_ids()
    finally:
        h.close()


def test_each_retry_of_a_switch_that_cannot_begin_reads_the_serving_table_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch whose begin fails, tried again and again: the serving table is read whole at the
    first try only (no search failed on it since); the switch's own table at each. Every try read
    the serving table whole under the write lock, holding every write back for its length."""
    from sidecar.index import migration
    from sidecar.stores.vectors import VectorStore

    harness.sweep()
    serving = harness.stores.serving
    assert serving is not None
    retiring, old_name = serving.model, serving.store.name
    monkeypatch.setattr(migration, "load_model", lambda _cfg: retiring)

    def cannot_begin(*_args: Any) -> None:
        raise StoreError("the switch cannot begin")

    monkeypatch.setattr(harness.vectors, "begin_migration", cannot_begin)
    read: list[str] = []
    verify = VectorStore.verify

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        read.append(self.name)
        return verify(self, *args, **kw)

    monkeypatch.setattr(VectorStore, "verify", counted)
    other = OtherModel()
    harness.slot.set_ok(other, "test")
    backfill = _backfill(harness)
    for _ in range(3):
        with pytest.raises(StoreError, match="cannot begin"):
            backfill._attach_once(other)
    assert read.count(old_name) == 1
    assert read.count(table_name_of(other)) == 3
    harness.problems.report("vector_search", "a search failed")  # then it is read again
    with pytest.raises(StoreError, match="cannot begin"):
        backfill._attach_once(other)
    assert read.count(old_name) == 2


def test_chunks_cut_again_before_the_table_opens_are_logged_in_plain_words(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A start whose first sweep replaces chunks before the vector table is attached (an upgrade
    that cuts notes anew, notes edited while stopped): the log says what happened, in words that
    name no deletion by the user ("deleted while no table was open" and a bare orphans count
    read as damage), and how many texts the model embedded after."""
    import logging

    from sidecar.index import migration

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    first.close()
    p = vault / "Long 1.md"
    write(p, p.read_text().replace("word1x5 ", "changed "))
    h = Harness(cfg, None)
    try:
        caplog.set_level(logging.INFO, logger="sidecar")
        h.indexer.sweep()  # no table open yet: the edited note's chunks are replaced
        h.vectors.settle()
        migration.attach(cfg, h.vectors, FakeEmbedder(), h.problems)
        since = h.vectors.counts()
        while h.vectors.embed_pending(batch=8):
            pass
        h.vectors.log_embedded(since, "backfill")
        lines = [r.getMessage() for r in caplog.records]
        (kept,) = [m for m in lines if m.startswith("vectors_kept")]
        (orphans,) = [m for m in lines if m.startswith("reconcile_vectors") and "orphans=" in m]
        assert "deleted while" not in kept and "edited, cut again or removed" in kept
        assert "nothing is lost" in orphans
        (embedded,) = [m for m in lines if m.startswith("vectors_embedded")]
        assert "texts=" in embedded and "run=backfill" in embedded and "texts=0 " not in embedded
    finally:
        h.close()


def test_a_backfill_run_logs_how_many_texts_it_embedded(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The backfill's run over what waits ends with one line of the texts the model embedded (and
    the vectors copied from equal texts): no line said how many texts a sweep's changes cost."""
    import logging

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="sidecar")
    h.indexer.sweep()
    pending = h.stores.manifest.pending_count()
    backfill = _backfill(h)
    backfill.stop = stop
    thread = threading.Thread(target=backfill.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not [r for r in caplog.records if r.getMessage().startswith("vectors_embedded")]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(10)
        h.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vectors_embedded")]
    assert f"texts={pending} stored={pending} reused=0 " in line and "run=backfill" in line


def test_a_retiring_table_that_cannot_be_opened_for_now_is_tried_again_not_set_aside(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous table fails to open for a cause that passes (no file handles left) as a
    switch begins: it is kept in place and tried again, as a retiring model's failed load is,
    and the switch begins once it opens; not moved aside for the new model to embed everything."""
    from sidecar.contracts.errors import RetiringModelError
    from sidecar.index import migration

    cfg, h, old_name = _old_table_failing(make_cfg, tmp_path, monkeypatch, _no_handles, once=True)
    try:
        other = OtherModel()
        with pytest.raises(RetiringModelError, match="tried again"):
            migration.attach(cfg, h.vectors, other, h.problems)
        assert old_name in table_names_of(cfg) and not _broken(cfg)
        migration.attach(cfg, h.vectors, other, h.problems)
        serving = h.stores.serving
        assert serving is not None and serving.store.name == old_name and h.stores.building is not None
    finally:
        h.close()


def test_rows_removed_after_a_failed_write_are_logged_as_such(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The check of the serving table after a write that failed half-way removes the rows that
    write added for chunks gone since: its log said of them what a start's says (notes edited
    "while no vector table was open"), though the table was open all along."""
    import logging

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        serving = h.stores.serving
        assert serving is not None
        fake = FakeEmbedder()
        serving.store.add([("gone#0", "vault/Gone", "vault", "")], fake.embed_passages(["zebra gone"]))
        h.vectors._unsure.add("has_vector")  # a write failed half-way: rows added, flags not set
        p = vault / "Long 1.md"
        write(p, p.read_text().replace("word1x5 ", "changed "))
        caplog.set_level(logging.INFO, logger="sidecar")
        h.sweep()
        (orphans,) = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith("reconcile_vectors") and "orphans=" in r.getMessage()
        ]
        assert "no vector table was open" not in orphans and "a write that failed half-way" in orphans
    finally:
        h.close()


def test_a_backfill_run_cut_by_a_stop_logs_what_it_embedded(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A backfill run cut by a stop (a restart during hours of a first index or a switch) ends
    with its vectors_embedded line too: only a run that emptied the queue wrote it."""
    import logging

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    caplog.set_level(logging.INFO, logger="sidecar")
    try:
        h.indexer.sweep()
        backfill = _backfill(h)
        model = h.slot.model
        assert model is not None
        real = model.embed_passages

        def then_stop(texts: Any) -> Any:
            backfill.stop.set()  # the stop comes while a batch is embedded
            return real(texts)

        model.embed_passages = then_stop  # type: ignore[method-assign]
        backfill.run()  # returns at the stop, right after the batch
    finally:
        h.close()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vectors_embedded")]
    assert "run=backfill" in line and "texts=0 " not in line


def test_a_retiring_table_given_up_on_is_said_to_have_failed_to_open(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A previous table that failed to open for an hour (no file handles left) while its model
    loaded is given up on: status said "the previous model failed to load", though the model
    loaded and only its table would not open."""
    from sidecar.index import migration

    cfg, h, _old = _old_table_failing(make_cfg, tmp_path, monkeypatch, _no_handles)
    try:
        migration.attach(cfg, h.vectors, OtherModel(), h.problems, give_up="after 12 failed tries")
        noted = [p["error"] for p in h.problems.describe()["recent"] if p.get("subject") == "vectors"]
        assert len(noted) == 1 and "table failed to open" in noted[0], noted
        assert "failed to load" not in noted[0]
    finally:
        h.close()


def _embedded_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("vectors_embedded")]


def test_vectors_embedded_is_said_per_table_and_for_memory_writes_too(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """During a switch one vectors_embedded line gave both models' texts as one sum under one
    table's name, and a memory write's own embedding was in no line. Now each table has its own
    line, and the writes' embedding is counted apart from the backfill's."""
    import logging

    from sidecar.index.vector_embed import WRITE_RUN

    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        old = h.stores.serving
        assert old is not None
        other = OtherModel()
        new_table = open_vectors(h.cfg, other.model_id, other.dim, other.pooling)
        h.vectors.begin_migration(old.store, old.model, new_table, other)
        since, writes = h.vectors.counts(), h.vectors.counts(WRITE_RUN)
        p = vault / "Long 1.md"
        write(p, p.read_text().replace("word1x5 ", "changed "))
        root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.indexer.index_now(root, p)  # embeds its note itself, in both tables
        caplog.set_level(logging.INFO, logger="sidecar")
        while h.vectors.embed_pending(batch=8):
            pass
        h.vectors.log_embedded(since, "backfill")
        h.vectors.log_embedded(writes, "memory writes", WRITE_RUN)
    finally:
        h.close()
    lines = _embedded_lines(caplog)
    backfill = [m for m in lines if "run=backfill" in m]
    assert len(backfill) == 1 and f"table={new_table.name} " in backfill[0]  # the old one had none left
    written = [m for m in lines if "run=memory writes" in m]
    assert sorted(m.split("table=")[1].split()[0] for m in written) == sorted(
        [old.store.name, new_table.name]
    )
    assert all("texts=0 " not in m for m in lines)


def test_sidecar_index_cut_by_ctrl_c_logs_what_it_embedded(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`sidecar index` cut by Ctrl-C during its embedding wrote no vectors_embedded line (it
    came after the loop); now it is written on the way out."""
    import logging
    from types import SimpleNamespace

    from sidecar.daemon import oneshot

    vault = tmp_path / "v"
    _long_notes(vault, n=20)  # two slices of the model
    h = Harness(make_cfg(vault), FakeEmbedder())
    caplog.set_level(logging.INFO, logger="sidecar")
    try:
        h.indexer.sweep()
        model = h.slot.model
        assert model is not None
        real, calls = model.embed_passages, []

        def then_ctrl_c(texts: Any) -> Any:
            calls.append(len(texts))
            if len(calls) > 1:
                raise KeyboardInterrupt
            return real(texts)

        model.embed_passages = then_ctrl_c  # type: ignore[method-assign]
        parts = SimpleNamespace(indexer=h.indexer, stores=h.stores, vectors=h.vectors)
        with pytest.raises(KeyboardInterrupt):
            oneshot._finish(parts, None)  # type: ignore[arg-type]
    finally:
        h.close()
    (line,) = _embedded_lines(caplog)
    assert "run=index" in line and f"texts={calls[0]} " in line


def test_the_backfill_logs_the_memory_writes_embedding(
    make_cfg: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write's own embedding while the backfill is idle was in no line (the idle loop
    took it into the next burst's start): the backfill says it, at most once a minute."""
    import logging

    from sidecar.daemon import backfill as backfill_mod

    monkeypatch.setattr(backfill_mod, "WRITES_LOGGED_EVERY_S", 3600.0)
    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    caplog.set_level(logging.INFO, logger="sidecar")
    backfill = _backfill(h)
    thread = threading.Thread(target=backfill.run, daemon=True)
    try:
        h.indexer.sweep()
        thread.start()
        deadline = time.monotonic() + 60
        while not [m for m in _embedded_lines(caplog) if "run=backfill" in m]:  # its loop runs
            assert time.monotonic() < deadline
            time.sleep(0.02)
        p = vault / "Long 1.md"
        write(p, p.read_text().replace("word1x5 ", "changed "))
        root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        with h.vectors.expect("vault/Long 1"):  # as a memory write: the backfill leaves it alone
            h.indexer.index_now(root, p)
        monkeypatch.setattr(backfill_mod, "WRITES_LOGGED_EVERY_S", 0.0)  # its minute is over
        deadline = time.monotonic() + 60
        while not [m for m in _embedded_lines(caplog) if "run=memory writes" in m]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        backfill.stop.set()
        thread.join(10)
        h.close()
    (line,) = [m for m in _embedded_lines(caplog) if "run=memory writes" in m]
    assert "texts=0 " not in line


def test_a_previous_model_whose_settings_fail_leaves_its_table_undamaged(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch whose previous model's settings raise a ValueError (not its table): the table was
    counted as damaged ("could not be opened ... though the model loads") and moved aside as a
    damaged copy. The model is unusable, not the table: nothing is said of damage, no damaged copy
    is made. Nor is it retired (moved aside, deleted after 30 days: a typo fixed a day later found
    the vectors gone): kept and tried again, as a model that fails to load with its files there,
    its setting named."""
    from sidecar.contracts.errors import RetiringModelError
    from sidecar.index import migration
    from sidecar.stores.aside import moved_aside

    vault = tmp_path / "v"
    _long_notes(vault)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        old_name = h.stores.manifest.get_meta("vector_table")
        h.stores.serving = None  # not attached: the switch opens the previous table itself
        h.vectors.stores.serving = None

        def bad_settings(*_a: Any, **_k: Any) -> Any:
            raise ValueError("embedder.queryPrefix must be a string")

        monkeypatch.setattr(migration, "model_settings", bad_settings)
        unopened: list[str] = []
        with pytest.raises(
            RetiringModelError, match=r"queryPrefix must be a string.*kept and it is tried again"
        ):
            migration.open_previous(cfg, old_name, unopened=unopened)
        assert unopened == []
        with pytest.raises(RetiringModelError):
            migration.attach(cfg, h.vectors, OtherModel(), problems=h.problems)
        assert old_name in table_names_of(cfg)
        assert moved_aside(cfg.index_dir) == [], moved_aside(cfg.index_dir)
        assert "could not be opened" not in str(h.problems.describe())
    finally:
        h.close()


def test_status_says_what_each_model_embedded_during_a_switch(make_cfg: Any, tmp_path: Path) -> None:
    """During a model switch status' ``vectors.embedded`` is one sum for both models: its
    ``embedded_by_table`` gives each table (each model) its own count."""
    vault = tmp_path / "v"
    _long_notes(vault)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        old = h.stores.serving
        assert old is not None
        first = h.vectors.describe()["embedded_by_table"]
        assert first == {old.store.name: h.vectors.embedded} and h.vectors.embedded > 0
        other = OtherModel()
        new_table = open_vectors(h.cfg, other.model_id, other.dim, other.pooling)
        h.vectors.begin_migration(old.store, old.model, new_table, other)
        p = vault / "Long 1.md"
        write(p, p.read_text().replace("word1x5 ", "changed "))
        root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.indexer.index_now(root, p)  # embeds its note itself, in both tables
        while h.stores.manifest.pending_count("has_next"):
            h.vectors.embed_pending(batch=8)
        status = h.vectors.describe()
        assert h.vectors.embed_pending() == 0  # nothing left: the switch ends, the old table retired
        after = h.vectors.describe()
    finally:
        h.close()
    by_table = status["embedded_by_table"]
    assert set(by_table) == {old.store.name, new_table.name}
    assert by_table[old.store.name] > first[old.store.name] and by_table[new_table.name] > 0
    assert sum(by_table.values()) == status["embedded"]
    # Once the switch ended only the table in use is named; the total still counts both.
    assert after["retired"] == [old.store.name]
    assert after["embedded_by_table"] == {new_table.name: by_table[new_table.name]}
    assert after["embedded"] == status["embedded"]


def test_a_memory_writes_vector_counts_once_as_embedded_in_status(in_process: Any) -> None:
    """A memory write's chunks are embedded once, by its duplicate check, and its indexing takes
    those vectors: status counted each both in ``embedded`` and in ``reused``. Over a real
    server: ``embedded`` grows by the note's chunks, ``reused`` does not."""
    before = in_process.call("health")["vectors"]
    text = "The kayak paddle hangs in the loft above the workbench, beside the spare oars."
    reply = in_process.call("write", {"slug": "kayak", "content": text}, agent="claude")
    assert reply["searchable"]
    after = in_process.call("health")["vectors"]
    chunks = after["reused_from_duplicate_check"] - before["reused_from_duplicate_check"]
    assert chunks >= 1
    assert after["embedded"] - before["embedded"] == chunks
    assert after["reused"] == before["reused"]
    assert sum(after["embedded_by_table"].values()) == after["embedded"]


def test_a_memory_write_of_a_text_already_indexed_counts_its_vector_once(in_process: Any) -> None:
    """The same text saved again by another agent: the write's duplicate check runs the model
    (counted in ``embedded``), then its indexing copies the equal text's stored vector; status
    counted that one vector in ``embedded`` and in ``reused`` both. Now once, as embedded."""
    text = "The kayak paddle hangs in the loft above the workbench, beside the spare oars."
    in_process.call("write", {"slug": "kayak", "content": text}, agent="claude")
    before = in_process.call("health")["vectors"]
    reply = in_process.call("write", {"slug": "kayak", "content": text}, agent="codex")
    assert reply["searchable"]
    after = in_process.call("health")["vectors"]
    assert after["embedded"] - before["embedded"] == 1
    assert after["reused"] == before["reused"]
    assert after["reused_after_deletion"] == before["reused_after_deletion"]
