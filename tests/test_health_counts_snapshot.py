"""Health's counts (``Manifest.counts``) are of one moment and keep no write waiting: read one by
one, each under the writer's lock, a batch committed between two of them made ``skipped`` run a
batch ahead of ``files``, and every count's scan held the writer back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _add(db: Any, key: str, state: str, error: str | None = None) -> None:
    db.execute(
        "INSERT INTO files(key, source, agent, rel, mtime_ns, size, hash, state, chunks, error) "
        "VALUES (?, 'vault', '', ?, 1, 1, 'h', ?, ?, ?)",
        (key, key.removeprefix("vault/") + ".md", state, 1 if state == "indexed" else 0, error),
    )


class _WriteAmid:
    """Every manifest connection opened from now on traced: once ``armed``, the first statement
    that contains ``marker`` runs ``write`` on another thread and waits for it (30 s at most: a
    guard against a hang, not a timing; held back by that statement, the write never ends
    there). ``in_time``: whether the write had ended when the statement went on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, marker: str, write: Callable[[], Any]) -> None:
        from sidecar.stores import manifest as manifest_module

        self.armed = threading.Event()
        self.in_time: list[bool] = []
        real = manifest_module.guarded_connect
        written = threading.Event()

        def run() -> None:
            write()
            written.set()

        def traced(sql: str) -> None:
            if self.armed.is_set() and marker in sql:
                self.armed.clear()
                t = threading.Thread(target=run, daemon=True)
                t.start()
                t.join(30)
                self.in_time.append(written.is_set())

        def connect(*args: Any, **kwargs: Any) -> Any:
            db = real(*args, **kwargs)
            db.set_trace_callback(traced)
            return db

        monkeypatch.setattr(manifest_module, "guarded_connect", connect)


def test_counts_are_of_one_moment_and_a_write_meanwhile_does_not_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch (one note indexed, one skipped) commits while health is between its counts: the
    write goes through at once, and the counts are all of the moment before it."""
    from sidecar.stores.manifest import Manifest

    def batch() -> None:
        with m.transaction() as db:
            _add(db, "vault/new", "indexed")
            _add(db, "vault/new-bin", "skipped", "binary")

    # Between two of the counts (the skipped ones begin): the sweep's batch commits.
    amid = _WriteAmid(monkeypatch, "state = 'skipped' GROUP BY error", batch)
    m = Manifest(tmp_path / "m.sqlite")
    try:
        with m.transaction() as db:
            for i in range(3):
                _add(db, f"vault/n{i}", "indexed")
            _add(db, "vault/bin", "skipped", "binary")
        amid.armed.set()
        counts = m.counts()
        assert amid.in_time == [True], "the write waited for health's counts"
        assert (counts["files"], counts["skipped"]) == (3, {"binary": 1})
        after = m.counts()
        assert (after["files"], after["skipped"]) == (4, {"binary": 2})
    finally:
        m.close()


@pytest.mark.parametrize("count", ["pending_count", "left_to_switch"])
def test_the_counts_of_chunks_waiting_for_vectors_keep_no_write_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: str
) -> None:
    """Health's (and the watchdog's) scans of every chunk for those waiting for a vector: read
    through the writer's connection under its lock, every write waited for them."""
    from sidecar.stores.manifest import Manifest

    amid = _WriteAmid(monkeypatch, "count(*) FROM chunks WHERE", lambda: m.set_meta("written", "1"))
    m = Manifest(tmp_path / "m.sqlite")
    try:
        amid.armed.set()
        assert getattr(m, count)() == 0
        assert amid.in_time == [True], "the write waited for the count"
    finally:
        m.close()


@pytest.mark.parametrize(
    "read",
    [
        "FROM link_rows",  # the links' totals: a count of every link row, 127-175 ms at 300k links
        "FROM meta WHERE name",  # the releases that wrote the index
    ],
)
def test_a_whole_health_call_keeps_no_write_waiting(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """Health's other manifest reads (the links' totals, the largest waiting note, the skipped
    files, meta) went through the writer's connection under its lock: a write made while one
    of them ran waited for it. Now all of the call's reads are one snapshot on a reader."""
    from tests.conftest import KEYWORD_ONLY, Harness
    from tests.in_process import InProcessServer

    amid = _WriteAmid(monkeypatch, read, lambda: h.stores.manifest.set_meta("written", "1"))
    h = Harness(make_cfg(vault), KEYWORD_ONLY)
    server = InProcessServer(h)
    try:
        amid.armed.set()
        server.call("health")
        assert not amid.armed.is_set(), "health did not make the read"
        assert amid.in_time == [True], "the write waited for health's read"
    finally:
        try:
            server.close()
        finally:
            h.close()


def test_reads_in_a_snapshot_are_of_one_moment(tmp_path: Path) -> None:
    """A write committed by another thread amid a snapshot is seen by none of its later reads
    (health's counts, meta and waiting chunks agree), and by the next read after it."""
    from sidecar.stores.manifest import Manifest

    m = Manifest(tmp_path / "m.sqlite")
    try:
        with m.transaction() as db:
            _add(db, "vault/a", "indexed")
        m.set_meta("mark", "before")
        with m.snapshot():
            assert m.counts()["files"] == 1
            t = threading.Thread(target=lambda: (m.set_meta("mark", "after"), _batch(m)))
            t.start()
            t.join(30)
            assert not t.is_alive(), "the write waited for the snapshot"
            assert m.get_meta("mark") == "before"
            assert m.counts()["files"] == 1
        assert m.get_meta("mark") == "after"
        assert m.counts()["files"] == 2
    finally:
        m.close()


def _batch(m: Any) -> None:
    with m.transaction() as db:
        _add(db, "vault/b", "indexed")


def test_health_s_looks_at_the_disk_hold_no_read_transaction(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A health call held its manifest snapshot (a read transaction, which a TRUNCATE checkpoint
    waits for with the writer's lock held) for the whole call: also while it counted the asking
    agent's inbox (up to 2 s on a share that hangs) and asked the index's files for flags (up to
    2,000 statx calls). Those read nothing of the manifest and are made outside it; the answer
    still has them."""
    from sidecar.index.vectoring import Stores
    from sidecar.memory.ops import MemoryOps
    from tests.conftest import KEYWORD_ONLY, Harness
    from tests.in_process import InProcessServer

    h = Harness(make_cfg(vault), KEYWORD_ONLY)
    held: dict[str, bool] = {}

    def watching(name: str, real: Any) -> Any:
        def look(*args: Any, **kwargs: Any) -> Any:
            held[name] = h.stores.manifest._snapshot_here() is not None
            return real(*args, **kwargs)

        return look

    monkeypatch.setattr(MemoryOps, "usage", watching("inbox", MemoryOps.usage))
    monkeypatch.setattr(Stores, "flags", watching("flags", Stores.flags))
    server = InProcessServer(h)
    try:
        health = server.call("health", agent="claude")
        assert held == {"inbox": False, "flags": False}, "a look at the disk held the snapshot"
        assert "inbox" in health and health["index"]["immutable_checked"] in ("all", "partial")
    finally:
        try:
            server.close()
        finally:
            h.close()
