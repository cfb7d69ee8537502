"""The ANN index over time: trained again once the table has grown (RETRAIN_GROWTH), the trained
row count kept across restarts, searches answering from the old index during a rebuild, and the
first index built as soon as the table crosses search.annThreshold during a long backfill.
Real LanceDB in tmp dirs, real build children, a fake embedder; search.annThreshold 256."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import StoreError
from sidecar.daemon.backfill import Backfill
from sidecar.stores.vectors import VectorStore
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import harness_over_ann_threshold, search

THRESHOLD = 256
ANN_RECORD = "sidecar-ann.json"  # the trained row count, inside the table's folder


def _grow(store: VectorStore, n: int, tag: str) -> None:
    """``n`` rows of distinct words, added as the backfill adds them."""
    fake = FakeEmbedder()
    texts = [f"{tag}{i} extra row {i % 13} about {tag}" for i in range(n)]
    rows = [(f"{tag}#{i}", f"vault/{tag}{i}", "vault", "") for i in range(n)]
    store.add(rows, fake.embed_passages(texts))


def _counting_builds(store: VectorStore) -> list[int]:
    """Row counts the store saw at each build it started (the real child still builds)."""
    seen: list[int] = []
    real = store.build_index

    def build() -> None:
        seen.append(store.count())
        real()

    store.build_index = build  # type: ignore[method-assign]
    return seen


def _reopen(store: VectorStore) -> VectorStore:
    """The same table opened again, as the next daemon start opens it."""
    return VectorStore(store.path, FakeEmbedder.model_id, FakeEmbedder.dim, "mean", ann_threshold=THRESHOLD)


def _index_uuid(store: VectorStore) -> str:
    (index,) = store._table.list_indices()
    return str(index.index_uuid)


def test_the_index_is_trained_again_once_the_table_doubled(make_cfg: Any, tmp_path: Path) -> None:
    """Built at 300 rows; idle checks at 599 rows do not rebuild, at 600 they do (and record 600);
    the scheduled check (no retrain) never rebuilds."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None
        builds = _counting_builds(store)
        assert store.ensure_ann() and builds == [300] and store.trained_rows == 300
        _grow(store, 299, "early")
        assert store.ann_due() is None
        assert store.ensure_ann(retrain=True) and builds == [300]
        _grow(store, 1, "late")
        assert store.ann_due() == "grown" and store.ann_due(retrain=False) is None
        assert store.ensure_ann() and builds == [300]  # the scheduled optimize's call
        assert h.vectors.ensure_ann(retrain=True)
        assert builds == [300, 600] and store.trained_rows == 600
        assert store.indexed and store.ann_due() is None
        record = json.loads((store.path / f"{store.name}.lance" / ANN_RECORD).read_text())
        assert record == {"kind": "IvfPq", "rows": 600}
        fake = FakeEmbedder()
        hits = store.search(fake.embed_query("late0 extra row 0 about late"), 3)
        assert hits[0][0] == "late#0"
    finally:
        h.close()


def test_a_restart_remembers_the_rows_the_index_was_trained_on(make_cfg: Any, tmp_path: Path) -> None:
    """After a restart the index trained at 300 rows is neither trained again at once nor
    forgotten: a table of 450 rows keeps it, one of 600 gets a new one. An index without a
    record (built by an earlier version) counts as trained at the threshold."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        first = h.stores.vectors
        assert first is not None and first.ensure_ann()
        _grow(first, 150, "more")
        again = _reopen(first)
        assert again.indexed and again.trained_rows == 300
        builds = _counting_builds(again)
        assert again.ann_due() is None and again.ensure_ann(retrain=True) and builds == []
        _grow(again, 150, "most")
        third = _reopen(again)
        builds = _counting_builds(third)
        assert third.ann_due() == "grown" and third.ensure_ann(retrain=True)
        assert builds == [600] and _reopen(third).trained_rows == 600
        (third.path / f"{third.name}.lance" / ANN_RECORD).unlink()
        unrecorded = _reopen(third)
        assert unrecorded.indexed and unrecorded.trained_rows is None
        assert unrecorded.ann_due() == "grown"  # 600 rows >= 2 x the threshold of 256
    finally:
        h.close()


def test_searches_use_the_old_index_while_a_new_one_is_trained(make_cfg: Any, tmp_path: Path) -> None:
    """While the child trains and commits the new index, this process keeps searching with the
    old one (same version, same index) and finds the rows; then it moves to the new index."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        old = _index_uuid(store)
        _grow(store, 300, "grown")
        store.optimize()  # folds the new rows into the old index, as the schedule does
        old = _index_uuid(store)
        real = store.build_index
        committed, release = threading.Event(), threading.Event()

        def build_then_wait() -> None:
            real()  # the child has committed the new index when this returns
            committed.set()
            assert release.wait(30)

        store.build_index = build_then_wait  # type: ignore[method-assign]
        builder = threading.Thread(target=store.ensure_ann, kwargs={"retrain": True})
        builder.start()
        try:
            assert committed.wait(120)
            fake = FakeEmbedder()
            for tag, i in (("grown", 7), ("grown", 250)):
                query = fake.embed_query(f"{tag}{i} extra row {i % 13} about {tag}")
                assert store.search(query, 5)[0][0] == f"{tag}#{i}"
            assert store.indexed and _index_uuid(store) == old  # the old index answered
        finally:
            release.set()
            builder.join(60)
        assert not builder.is_alive() and store.trained_rows == 600
        assert _index_uuid(store) != old
        query = FakeEmbedder().embed_query("grown7 extra row 7 about grown")
        assert store.search(query, 5)[0][0] == "grown#7"
    finally:
        h.close()


def test_the_first_index_is_built_while_vectors_are_still_queued(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long first backfill does not wait for an empty queue (nor the hourly optimize) to build
    the index: it is built as soon as the table holds search.annThreshold rows, embedding paused
    meanwhile; the rest is embedded afterwards."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    h.close()
    h = Harness(h.cfg, None)  # keyword-only first: the model comes later, with 300 chunks queued
    try:
        h.sweep()
        assert h.stores.manifest.pending_count() == 300
        pending_at_build: list[int] = []
        real = VectorStore.build_index

        def build(store: VectorStore) -> None:
            pending_at_build.append(h.stores.manifest.pending_count())
            real(store)

        monkeypatch.setattr(VectorStore, "build_index", build)
        stop = threading.Event()
        backfill = Backfill(
            h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity, stop=stop
        )
        thread = threading.Thread(target=backfill.run, daemon=True)
        thread.start()
        h.slot.set_ok(FakeEmbedder(), "test")
        try:
            deadline = time.monotonic() + 120
            while not (pending_at_build and h.stores.manifest.pending_count() == 0):
                assert time.monotonic() < deadline, "timed out"
                time.sleep(0.02)
        finally:
            stop.set()
            thread.join(30)
        assert pending_at_build == [300 - THRESHOLD]  # built with the rest of the queue waiting
        store = h.stores.vectors
        assert store is not None and store.indexed and store.count() == 300
        assert search(h, "word42 topic8", limit=5)[0]["reference"] == "vault/n042"
    finally:
        h.close()


def test_the_idle_upkeep_trains_the_index_again(make_cfg: Any, tmp_path: Path) -> None:
    """The backfill's idle upkeep (nothing waits for a vector) is where the index is trained
    again: at 600 rows after a training at 300, not at 599."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        backfill = Backfill(
            h.cfg,
            h.slot,
            h.vectors,
            h.repair,
            problems=h.problems,
            activity=h.indexer.activity,
            stop=threading.Event(),
        )
        _grow(store, 299, "early")
        backfill._upkeep()
        assert store.trained_rows == 300
        _grow(store, 1, "late")
        backfill._ann_checked = 0.0  # the upkeep looks at the index once a minute
        backfill._upkeep()
        backfill.wait_for_retrain()  # in a thread of its own
        assert store.trained_rows == 600 and store.indexed
    finally:
        h.close()


def _backfill(h: Any, stop: threading.Event | None = None) -> Backfill:
    return Backfill(
        h.cfg,
        h.slot,
        h.vectors,
        h.repair,
        problems=h.problems,
        activity=h.indexer.activity,
        stop=stop or threading.Event(),
    )


def _grow_vault(h: Any, tmp_path: Path) -> Path:
    """300 more notes in the harness's vault, swept: the table doubles to 600 rows."""
    vault = tmp_path / "big"
    for i in range(300, 600):
        write(vault / f"n{i:03d}.md", f"# Note {i}\n\nword{i} topic{i % 17} more text {i}\n")
    h.sweep()
    return vault


def test_a_failed_retrain_is_not_started_again_every_minute(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retrain is optional (the old index serves). One that fails (the child killed by the OOM
    killer, a timeout) is not started again at every idle minute while the table has not grown:
    only once it has grown RETRAIN_GROWTH times past the rows at which it failed."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann() and store.trained_rows == 300
        _grow_vault(h, tmp_path)
        assert store.count() == 600 and store.ann_due() == "grown"
        attempts: list[int] = []

        def killed(self: VectorStore) -> None:
            attempts.append(self.count())
            raise StoreError(f"vector index build for {self.name} failed (-9): no output")

        monkeypatch.setattr(VectorStore, "build_index", killed)
        backfill = _backfill(h)
        for _minute in range(3):
            backfill._ann_checked = 0.0  # a minute later
            backfill._upkeep()
            backfill.wait_for_retrain()
        assert store.indexed and store.trained_rows == 300  # the old index still serves
        assert attempts == [600], f"a failed retrain was started again each minute: {attempts}"
        assert store.ann_due() is None
        _grow(store, 599, "more")
        assert store.ann_due() is None  # 1199 rows: not yet twice the 600 at which it failed
        _grow(store, 1, "last")
        assert store.ann_due() == "grown"
    finally:
        h.close()


def test_an_edit_during_a_retrain_does_not_wait_for_the_whole_retrain(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill goes on embedding while the index is trained again (4-5 minutes at 60-100 k
    rows in BENCHMARKS.md): the fake build writes a note while "training" and gives the backfill
    20 s to embed it."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        vault = _grow_vault(h, tmp_path)
        assert store.ann_due() == "grown"
        pending_after: list[int] = []
        real = VectorStore.build_index

        def build(self: VectorStore) -> None:
            write(vault / "late.md", "# Late\n\nwritten while the index trains again\n")
            h.indexer.sweep()
            deadline = time.monotonic() + 20
            while h.stores.manifest.pending_count() and time.monotonic() < deadline:
                time.sleep(0.05)
            pending_after.append(h.stores.manifest.pending_count())
            real(self)

        monkeypatch.setattr(VectorStore, "build_index", build)
        thread = threading.Thread(target=_backfill(h, stop).run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        # (the backfill's attach opens the table again: look at the serving handle)
        while not pending_after or h.vectors.stores.serving.store.trained_rows != 600:
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)
        assert pending_after == [0], "the edited note waited for the whole retrain"
    finally:
        stop.set()
        if thread is not None:
            thread.join(30)
        h.close()


def test_status_says_while_an_index_is_built_whether_new_vectors_wait(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first index is built in the embedding loop itself (about a minute at 20 k rows): health
    and `sidecar status` say meanwhile that the index is being built and new vectors wait. A
    retrain runs beside embedding: status says it runs, and that new vectors go on."""
    from sidecar.clients.cli_render import _index_build_lines

    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and not store.indexed and h.vectors.describe()["index_build"] is None
        seen: list[dict[str, Any]] = []
        real = VectorStore.build_index

        def build(self: VectorStore) -> None:
            seen.append(h.vectors.describe()["index_build"])
            real(self)

        monkeypatch.setattr(VectorStore, "build_index", build)
        backfill = _backfill(h)
        backfill._build_ann()  # as the embedding loop does once the threshold is crossed
        first = seen[0]
        assert first["reason"] == "threshold" and first["rows"] == 300 and first["vectors_wait"] is True
        assert first["last_seconds"] is None
        line = _index_build_lines({"index_build": first})[0]
        assert line.startswith("Vector index: being built over 300 vectors") and "new vectors wait" in line
        assert h.vectors.describe()["index_build"] is None and store.last_build_seconds is not None
        _grow_vault(h, tmp_path)
        backfill._ann_checked = 0.0
        backfill._upkeep()
        backfill.wait_for_retrain()
        again = seen[1]
        assert again["reason"] == "grown" and again["rows"] == 600 and again["vectors_wait"] is False
        assert again["last_seconds"] is not None  # the first build's length
        line = _index_build_lines({"index_build": again})[0]
        assert "being trained again over 600 vectors" in line and "the last build took" in line
        assert "new vectors go on" in line
        assert h.vectors.describe()["index_build"] is None
    finally:
        h.close()


def test_no_index_build_starts_after_the_daemon_stops(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop ends the builds that run (``stop_builds``) while the backfill thread may still be
    in its upkeep (compacting): a retrain it started after that ran on, and the stop waited for it
    past its bound (the thread counted as stuck, the clean mark skipped). No build child starts
    after the stop, from the upkeep or from anywhere else."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow_vault(h, tmp_path)
        assert store.ann_due() == "grown"
        started: list[bool] = []
        real = VectorStore.build_index

        def build(self: VectorStore) -> None:
            started.append(True)
            real(self)

        monkeypatch.setattr(VectorStore, "build_index", build)
        stop = threading.Event()
        backfill = _backfill(h, stop)
        stop.set()
        h.vectors.stop_builds()  # what the daemon's stop does first
        backfill._ann_checked = 0.0
        backfill._upkeep()  # the backfill thread's last turn, after the stop
        backfill.wait_for_retrain()
        assert started == [], "an index build was started after the daemon's stop"
        monkeypatch.setattr(VectorStore, "build_index", real)
        with pytest.raises(StoreError, match="not started"):
            store.ensure_ann(retrain=True)  # any other caller: refused before a child is made
    finally:
        h.close()
