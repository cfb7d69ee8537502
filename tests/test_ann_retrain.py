"""The ANN index over time: trained again once the table has grown (RETRAIN_GROWTH), the trained
row count kept across restarts, searches answering from the old index during a rebuild, and the
first index built as soon as the table crosses search.annThreshold during a long backfill.
Real LanceDB in tmp dirs, real build children, a fake embedder; search.annThreshold 256."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import StoreError
from sidecar.daemon.backfill import Backfill
from sidecar.index.vectoring import RETIRE_GRACE_S
from sidecar.stores.lifecycle import open_vectors
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


@contextlib.contextmanager
def _indexed_then_doubled(make_cfg: Any, tmp_path: Path) -> Iterator[VectorStore]:
    """The harness's table indexed at 300 rows, then grown to 600 (a retrain is due)."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow(store, 300, "more")
        yield store
    finally:
        h.close()


def _reopen(store: VectorStore) -> VectorStore:
    """The same table opened again, as the next daemon start opens it."""
    return VectorStore(store.path, FakeEmbedder.model_id, FakeEmbedder.dim, "mean", ann_threshold=THRESHOLD)


def _index_uuid(store: VectorStore) -> str:
    (index,) = store._table.list_indices()
    return str(index.index_uuid)


def _backfill(h: Any, stop: threading.Event | None = None) -> Backfill:
    """The harness's backfill, not started: a test runs it or calls its steps."""
    return Backfill(
        h.cfg,
        h.slot,
        h.vectors,
        h.repair,
        problems=h.problems,
        activity=h.indexer.activity,
        stop=stop or threading.Event(),
    )


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
        thread = threading.Thread(target=_backfill(h, stop).run, daemon=True)
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
        backfill = _backfill(h)
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


def _slow_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index builds run a real child that only sleeps: running until something ends it."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    monkeypatch.setattr(VectorStore, "_build_command", lambda _self: sleeper)


def _child_running(store: VectorStore) -> None:
    deadline = time.monotonic() + 60
    while store._child is None:
        assert time.monotonic() < deadline, "the build child did not start"
        time.sleep(0.02)


def _record(store: VectorStore) -> Any:
    path = store.path / f"{store.name}.lance" / ANN_RECORD
    return json.loads(path.read_text()) if path.exists() else None


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_rebuilt_table_gets_its_first_index_at_the_threshold(make_cfg: Any, tmp_path: Path) -> None:
    """After a clear (a rebuild empties every store) the index and its record go: the refilled
    table gets its first index as soon as it holds search.annThreshold rows and is trained again
    at twice that, not once it has doubled past the rows trained on before the clear."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow(store, 300, "before")
        assert store.ensure_ann(retrain=True) and store.trained_rows == 600
        h.indexer.clear()
        assert store.count() == 0 and not store.indexed and store.trained_rows is None
        assert _record(store) is None and not _reopen(store).indexed
        h.sweep()  # the rebuild's sweep refills the table: 300 rows
        assert store.count() == 300 and h.vectors.first_index_due()
        builds = _counting_builds(store)
        assert store.ensure_ann() and builds == [300] and store.trained_rows == 300
        assert _record(store) == {"kind": "IvfPq", "rows": 300}
        hits = store.search(FakeEmbedder().embed_query("# Note 42\n\nword42 topic8"), 3)
        assert hits[0][0] in h.stores.manifest.chunk_ids_of(["vault/n042"])
        _grow(store, 300, "after")
        assert store.ann_due() == "grown"  # twice the 300 trained on since the clear
    finally:
        h.close()


def test_a_clear_ends_a_retrain_over_the_old_rows(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A retrain running when the table is emptied is ended before the rows go, and not recorded
    as trained on the old rows (nor as failed): the refilled table starts from the threshold."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow(store, 300, "before")
        _slow_child(monkeypatch)
        errors: list[StoreError] = []

        def retrain() -> None:
            try:
                store.ensure_ann(retrain=True)
            except StoreError as exc:
                errors.append(exc)

        builder = threading.Thread(target=retrain, daemon=True)
        builder.start()
        _child_running(store)
        with caplog.at_level(logging.INFO, logger="sidecar"):
            h.indexer.clear()
            assert store.build_running is None, "the clear did not end the build over the old rows"
            builder.join(30)
        assert not builder.is_alive() and len(errors) == 1
        assert not store.indexed and store.trained_rows is None and store.retrain_failed_rows is None
        assert _record(store) is None and _warnings(caplog) == []
        said = [r.getMessage() for r in caplog.records if "vector_index_retrain_stopped" in r.getMessage()]
        assert len(said) == 1 and "reason=table emptied" in said[0]
    finally:
        h.vectors.stop_builds()
        h.close()


class _OtherModel(FakeEmbedder):
    model_id = "other-model@2"
    dim = 32


def _retraining_when_retired(
    h: Harness, tmp_path: Path, backfill: Backfill, monkeypatch: pytest.MonkeyPatch
) -> VectorStore:
    """The serving table's retrain (a slow child) still runs when a model switch retires it."""
    h.sweep()
    old = h.stores.serving
    assert old is not None and old.store.ensure_ann()
    _grow_vault(h, tmp_path)
    _slow_child(monkeypatch)
    backfill._upkeep()  # the idle upkeep starts the retrain in its thread
    _child_running(old.store)
    other = _OtherModel()
    new_table = open_vectors(h.cfg, other.model_id, other.dim, other.pooling)
    h.vectors.begin_migration(old.store, old.model, new_table, other)
    h.sweep()  # the new table is filled and serves; the old one is retired
    assert h.stores.serving is not None and h.stores.serving.store is new_table
    assert h.vectors.retired_tables() == {old.store.name} and old.store.build_running is not None
    return old.store


def test_dropping_a_retired_table_ends_its_retrain(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A retrain begun before a model switch still runs when the retired table's grace is over:
    the drop ends it first, and neither the drop nor the ended retrain is logged as a failure."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    backfill = _backfill(h)
    try:
        old = _retraining_when_retired(h, tmp_path, backfill, monkeypatch)
        with caplog.at_level(logging.INFO, logger="sidecar"):
            assert h.vectors.drop_retired(time.monotonic() + RETIRE_GRACE_S) == [old.name]
            assert old.build_running is None, "the retired table was dropped under its build"
            backfill.wait_for_retrain(30)
        assert backfill._retrain is not None and not backfill._retrain.is_alive()
        assert _warnings(caplog) == []
        said = [r.getMessage() for r in caplog.records if "vector_index_retrain_stopped" in r.getMessage()]
        assert len(said) == 1 and "reason=table dropped" in said[0]
    finally:
        h.vectors.stop_builds()
        backfill.wait_for_retrain(30)
        h.close()


def test_the_stop_ends_a_retrain_on_a_retired_table(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's stop ends the builds of the retired tables too, not only of the serving and
    the building one: the retrain of a table a switch retired does not outlast the stop's wait."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    backfill = _backfill(h)
    old = None
    try:
        old = _retraining_when_retired(h, tmp_path, backfill, monkeypatch)
        h.vectors.stop_builds()  # what the daemon's stop does first
        backfill.wait_for_retrain(30)
        assert backfill._retrain is not None and not backfill._retrain.is_alive()
        assert old.build_running is None
    finally:
        if old is not None:
            old.stop_build()
        backfill.wait_for_retrain(30)
        h.close()


def test_a_retrain_ended_by_the_stop_is_not_a_failure(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's stop ends a running retrain: logged as stopped (no warning), not counted as a
    failed retrain, so the next start trains again at once."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    stop = threading.Event()
    backfill = _backfill(h, stop)
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow_vault(h, tmp_path)
        _slow_child(monkeypatch)
        backfill._upkeep()
        _child_running(store)
        with caplog.at_level(logging.INFO, logger="sidecar"):
            stop.set()
            h.vectors.stop_builds()  # what the daemon's stop does first
            backfill.wait_for_retrain(30)
        assert backfill._retrain is not None and not backfill._retrain.is_alive()
        assert _warnings(caplog) == []
        said = [r.getMessage() for r in caplog.records if "vector_index_retrain_stopped" in r.getMessage()]
        assert len(said) == 1 and "reason=stopped" in said[0]
        assert store.retrain_failed_rows is None and _record(store) == {"kind": "IvfPq", "rows": 300}
        assert _reopen(store).ann_due() == "grown"
    finally:
        stop.set()
        h.vectors.stop_builds()
        backfill.wait_for_retrain(30)
        h.close()


def _failing_child(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Index builds run a real child that runs ``code`` (and builds nothing)."""
    monkeypatch.setattr(VectorStore, "_build_command", lambda _self: [sys.executable, "-c", code])


_LANCE_FAILED = "import sys; print('lance error: training found no centroids', file=sys.stderr); sys.exit(1)"


def test_a_failed_retrain_is_not_tried_again_at_every_restart(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retrain that fails for a cause that stays (the library's error) is recorded with the
    rows it failed at and when: the next start does not try it again at once, a later doubling
    does, and a retrain that then succeeds clears the failure."""
    with _indexed_then_doubled(make_cfg, tmp_path) as store:
        real = VectorStore._build_command
        _failing_child(monkeypatch, _LANCE_FAILED)
        before = time.time()
        with pytest.raises(StoreError, match="no centroids"):
            store.ensure_ann(retrain=True)
        record = _record(store)
        assert record.pop("failed_at") >= int(before)
        assert record == {"kind": "IvfPq", "rows": 300, "failed_rows": 600}
        again = _reopen(store)
        assert again.trained_rows == 300 and again.retrain_failed_rows == 600
        assert again.ann_due() is None, "a restart tried the failed retrain again"
        _grow(again, 600, "most")
        monkeypatch.setattr(VectorStore, "_build_command", real)
        third = _reopen(again)
        assert third.ann_due() == "grown" and third.ensure_ann(retrain=True)
        assert _record(third) == {"kind": "IvfPq", "rows": 1200}
        assert _reopen(third).retrain_failed_rows is None


@pytest.mark.parametrize(
    "code",
    [
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",  # as the out-of-memory killer
        "import sys; print('No space left on device (os error 28)', file=sys.stderr); sys.exit(1)",
        "import time; time.sleep(60)",  # past the time limit
    ],
    ids=["killed", "disk-full", "timeout"],
)
def test_a_retrain_failed_for_a_passing_cause_is_tried_again_after_a_restart(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    """A retrain whose child was killed, ran out of time or found the disk full waits for the
    next doubling in this run, but is not recorded as failed: the next start tries again."""
    with _indexed_then_doubled(make_cfg, tmp_path) as store:
        _failing_child(monkeypatch, code)
        monkeypatch.setattr("sidecar.stores.vector_index.BUILD_TIMEOUT_S", 1.0)
        with pytest.raises(StoreError):
            store.ensure_ann(retrain=True)
        assert store.retrain_failed_rows == 600 and store.ann_due() is None
        assert _record(store) == {"kind": "IvfPq", "rows": 300}
        assert _reopen(store).ann_due() == "grown"


def test_a_recorded_retrain_failure_expires(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retrain failure is kept a week (in the record and in a running daemon): then the retrain
    is tried again without the table doubling first."""
    with _indexed_then_doubled(make_cfg, tmp_path) as store:
        _failing_child(monkeypatch, _LANCE_FAILED)
        with pytest.raises(StoreError):
            store.ensure_ann(retrain=True)
        assert store.ann_due() is None and _reopen(store).ann_due() is None
        week_later = time.time() + 7 * 86400 + 60
        monkeypatch.setattr("sidecar.stores.vectors.time.time", lambda: week_later)
        assert store.ann_due() == "grown", "the running daemon kept the failure past a week"
        assert _reopen(store).ann_due() == "grown", "a start kept the recorded failure past a week"


def test_a_switch_cut_short_by_the_stop_waits_for_the_retrain(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill thread ends only after its retrain thread, also on the way out where the stop
    cuts short the attach of a model switch (the daemon ends the build's child first)."""
    h = harness_over_ann_threshold(make_cfg, tmp_path)
    stop = threading.Event()
    backfill = _backfill(h, stop)
    started, joining = threading.Event(), threading.Event()
    try:
        h.sweep()
        store = h.stores.vectors
        assert store is not None and store.ensure_ann()
        _grow_vault(h, tmp_path)

        def build(self: VectorStore) -> None:  # a child that ends once the stop ended it
            started.set()
            stop.wait(60)
            joining.wait(30)  # ... and whose thread ends only if the backfill waits for it
            raise StoreError(f"vector index build for {self.name} failed (-15): no output")

        monkeypatch.setattr(VectorStore, "build_index", build)
        real_wait = backfill.wait_for_retrain

        def wait_for_retrain(timeout: float | None = None) -> None:
            joining.set()
            real_wait(timeout)

        monkeypatch.setattr(backfill, "wait_for_retrain", wait_for_retrain)
        import sidecar.daemon.backfill as backfill_module

        real_attach = backfill_module.attach

        def attach(*args: Any, **kwargs: Any) -> None:
            if args[2] is h.slot.model and started.is_set():  # the switch's attach
                stop.set()  # the daemon stops meanwhile
                h.vectors.stop_builds()
                raise OSError("the new model's table cannot be made yet")
            real_attach(*args, **kwargs)

        monkeypatch.setattr(backfill_module, "attach", attach)
        thread = threading.Thread(target=backfill.run, daemon=True)
        thread.start()
        assert started.wait(120), "the idle upkeep started no retrain"
        h.slot.set_ok(FakeEmbedder(), "test")  # another model object: a switch begins
        thread.join(60)
        assert not thread.is_alive()
        assert backfill._retrain is not None
        assert not backfill._retrain.is_alive(), "the backfill ended before its retrain thread"
    finally:
        stop.set()
        joining.set()
        h.close()


def _fresh_store(tmp_path: Path) -> VectorStore:
    """A real table of 300 rows (over the threshold), no index yet."""
    store = VectorStore(
        tmp_path / "vectors", FakeEmbedder.model_id, FakeEmbedder.dim, "mean", ann_threshold=THRESHOLD
    )
    _grow(store, 300, "old")
    return store


def _first_index_in_thread(store: VectorStore) -> threading.Thread:
    def build() -> None:
        with contextlib.suppress(StoreError):  # ended by the clear: the tests look at the table
            store.ensure_ann()

    builder = threading.Thread(target=build, daemon=True)
    builder.start()
    return builder


def test_a_clear_kills_a_build_that_ignores_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build child that ignores SIGTERM past the clear's wait is killed: its index (trained on
    the deleted rows) never lands on the refilled table, nor after a restart."""
    ready = tmp_path / "child-ready"
    real = VectorStore._build_command

    def stubborn(self: VectorStore) -> list[str]:
        code = (
            "import runpy, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open({str(ready)!r}, 'w').close(); time.sleep(4); "
            "runpy.run_module('sidecar.stores.annbuild', run_name='__main__')"
        )
        return [sys.executable, "-c", code, *real(self)[3:]]

    monkeypatch.setattr(VectorStore, "_build_command", stubborn)
    monkeypatch.setattr("sidecar.stores.vector_index.END_BUILD_WAIT_S", 1.0)
    store = _fresh_store(tmp_path)
    builder = _first_index_in_thread(store)
    deadline = time.monotonic() + 60
    while not ready.exists():  # SIGTERM is ignored from here on
        assert time.monotonic() < deadline, "the build child did not start"
        time.sleep(0.02)
    store.clear()
    _grow(store, 300, "new")
    builder.join(60)
    assert not builder.is_alive()
    store._table.checkout_latest()
    assert store._index_kinds() == set() and not store.indexed
    assert not _reopen(store).indexed and _record(store) is None
    store.stop_build()


def test_an_index_a_late_build_commits_after_a_clear_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build whose thread outlived the clear's wait (logged) and whose child then commits an
    index: the index goes when the build ends, and the refilled table gets its first index at the
    threshold, recorded as trained on its own rows."""
    monkeypatch.setattr("sidecar.stores.vector_index.END_BUILD_WAIT_S", 0.5)
    cleared = threading.Event()
    real = VectorStore.build_index

    def late(self: VectorStore) -> None:
        assert cleared.wait(60)
        real(self)

    monkeypatch.setattr(VectorStore, "build_index", late)
    store = _fresh_store(tmp_path)
    builder = _first_index_in_thread(store)
    while store.build_running is None:
        time.sleep(0.02)
    with caplog.at_level(logging.WARNING, logger="sidecar"):
        store.clear()
    assert any("vector_index_build_not_ended" in w for w in _warnings(caplog))
    _grow(store, 300, "new")
    cleared.set()
    builder.join(60)
    assert not builder.is_alive()
    assert store._index_kinds() == set() and not store.indexed and not _reopen(store).indexed
    monkeypatch.setattr(VectorStore, "build_index", real)
    assert store.ann_due() == "threshold" and store.ensure_ann()
    assert _record(store) == {"kind": "IvfPq", "rows": 300}


def test_a_retrain_that_finished_as_the_stop_came_is_recorded(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retrain whose child committed its index just before the daemon's stop is recorded as
    trained: the next start does not train again at once."""
    with _indexed_then_doubled(make_cfg, tmp_path) as store:
        real = VectorStore.build_index

        def then_stop(self: VectorStore) -> None:
            real(self)
            self.stop_build()  # the stop comes between the child's exit and the record

        monkeypatch.setattr(VectorStore, "build_index", then_stop)
        assert store.ensure_ann(retrain=True)
        assert store.trained_rows == 600 and _record(store) == {"kind": "IvfPq", "rows": 600}
        assert _reopen(store).ann_due() is None


def test_a_clear_whose_index_drop_fails_forgets_the_index_record(tmp_path: Path) -> None:
    """The rows are deleted but dropping the old index fails: the clear says so, and the empty
    table keeps no record of an index trained on the deleted rows."""
    store = _fresh_store(tmp_path)
    assert store.ensure_ann() and _record(store) == {"kind": "IvfPq", "rows": 300}

    def refused(_name: str) -> None:
        raise RuntimeError("drop refused")

    store._table.drop_index = refused  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="drop refused"):
        store.clear()
    assert store.count() == 0 and _record(store) is None
    assert not store.indexed and store.trained_rows is None
