"""Health's counts (``Manifest.counts``) are of one moment and keep no write waiting: read one by
one, each under the writer's lock, a batch committed between two of them made ``skipped`` run a
batch ahead of ``files``, and every count's scan held the writer back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest


def _add(db: Any, key: str, state: str, error: str | None = None) -> None:
    db.execute(
        "INSERT INTO files(key, source, agent, rel, mtime_ns, size, hash, state, chunks, error) "
        "VALUES (?, 'vault', '', ?, 1, 1, 'h', ?, ?, ?)",
        (key, key.removeprefix("vault/") + ".md", state, 1 if state == "indexed" else 0, error),
    )


def test_counts_are_of_one_moment_and_a_write_meanwhile_does_not_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch (one note indexed, one skipped) commits while health is between its counts: the
    write goes through at once, and the counts are all of the moment before it."""
    from sidecar.stores import manifest as manifest_module
    from sidecar.stores.manifest import Manifest

    armed = threading.Event()
    written = threading.Event()
    real = manifest_module.guarded_connect

    def batch() -> None:
        with m.transaction() as db:
            _add(db, "vault/new", "indexed")
            _add(db, "vault/new-bin", "skipped", "binary")
        written.set()

    def traced(sql: str) -> None:
        # Between two of the counts (the skipped ones begin): the sweep's batch commits.
        if armed.is_set() and "state = 'skipped' GROUP BY error" in sql:
            armed.clear()
            t = threading.Thread(target=batch, daemon=True)
            t.start()
            t.join(30)  # a guard against a hang, not a timing: held back, the write never ends here

    def connect(*args: Any, **kwargs: Any) -> Any:
        db = real(*args, **kwargs)
        db.set_trace_callback(traced)
        return db

    monkeypatch.setattr(manifest_module, "guarded_connect", connect)
    m = Manifest(tmp_path / "m.sqlite")
    try:
        with m.transaction() as db:
            for i in range(3):
                _add(db, f"vault/n{i}", "indexed")
            _add(db, "vault/bin", "skipped", "binary")
        armed.set()
        counts = m.counts()
        assert written.is_set(), "the write waited for health's counts"
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
    from sidecar.stores import manifest as manifest_module
    from sidecar.stores.manifest import Manifest

    armed = threading.Event()
    written = threading.Event()
    real = manifest_module.guarded_connect

    def write() -> None:
        m.set_meta("written", "1")
        written.set()

    def traced(sql: str) -> None:
        if armed.is_set() and "count(*) FROM chunks WHERE" in sql:
            armed.clear()
            t = threading.Thread(target=write, daemon=True)
            t.start()
            t.join(30)  # a guard against a hang, not a timing: held back, the write never ends here

    def connect(*args: Any, **kwargs: Any) -> Any:
        db = real(*args, **kwargs)
        db.set_trace_callback(traced)
        return db

    monkeypatch.setattr(manifest_module, "guarded_connect", connect)
    m = Manifest(tmp_path / "m.sqlite")
    try:
        armed.set()
        assert getattr(m, count)() == 0
        assert written.is_set(), "the write waited for the count"
    finally:
        m.close()
