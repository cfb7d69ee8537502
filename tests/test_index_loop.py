"""The daemon's worker loops and repair policy in-process, over real stores: file events carry
their paths to the indexer, bursts merge, a failing sweep is retried with the backoff policy (its
waits removed in test mode) and reported, a retry needs only the paths it did not write, the
backfill attaches vectors once the model is there, and a failing keyword index is rebuilt."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import StoreError
from sidecar.daemon.backfill import Backfill
from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop, Job
from sidecar.daemon.repairs import RepairPolicy
from sidecar.daemon.watchdog import status_line
from sidecar.notes.links import LinkGraph
from sidecar.runtime import backoff
from tests.conftest import KEYWORD_ONLY, FakeEmbedder, Harness, write
from tests.index_helpers import index_loop_of, search


@pytest.fixture
def looped(make_cfg: Any, vault: Path) -> Iterator[tuple[Harness, IndexLoop, list[dict[str, Any]]]]:
    """A harness whose indexer records every sweep's arguments, driven by an IndexLoop thread."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    calls: list[dict[str, Any]] = []
    real = h.indexer.sweep

    def recording(**kw: Any) -> dict[str, int]:
        calls.append(kw)
        return real(**kw)

    h.indexer.sweep = recording  # type: ignore[method-assign]
    stop = threading.Event()
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=stop, beat=lambda _a: None)
    thread = threading.Thread(target=loop.run, daemon=True)
    with backoff.testing():
        thread.start()
        yield h, loop, calls
        stop.set()
        thread.join(10)
    h.close()


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_file_events_carry_their_paths_to_the_indexer(looped: Any, vault: Path) -> None:
    """A batch of changed paths becomes a sweep of those paths only (no root walked)."""
    h, loop, calls = looped
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps == 1)
    write(vault / "Fresh.md", "# Fresh\n\nA note saved while the daemon runs.\n")
    loop.changed({str(vault / "Fresh.md")})
    _until(lambda: h.indexer.activity.sweeps == 2)
    assert calls[-1]["paths"] == frozenset({str(vault / "Fresh.md")})
    assert calls[-1]["only"] == frozenset()
    assert "vault/Fresh" in h.stores.manifest.file_states("vault/")


def test_a_restarted_watch_asks_for_every_root() -> None:
    """No paths (a watch restarted): a full sweep; a full sweep merged with paths stays full."""
    events = Job(roots=frozenset(), paths=frozenset({"/v/a.md"}))
    assert events.merge(Job(roots=frozenset(), paths=frozenset({"/v/b.md"}))).paths == {"/v/a.md", "/v/b.md"}
    full = events.merge(Job())
    assert full.roots is None and full.paths == frozenset()


def test_a_scheduled_sweep_merged_with_file_events_still_checks_for_lost_events() -> None:
    """File events queued beside a scheduled sweep leave its check for lost events standing (their
    paths were noted as told); a settings change, a watch restart or a rebuild do not."""
    events = Job(roots=frozenset(), paths=frozenset({"/v/a.md"}), told=True)
    scheduled = Job(audit=True)
    assert scheduled.merge(events).audit and events.merge(scheduled).audit
    assert scheduled.merge(events).merge(events).audit
    assert not events.merge(events).audit
    leftover = Job(roots=frozenset(), paths=frozenset({"/v/b.md"}))  # a failed sweep's retry
    for other in (Job(), Job(restarted=True), Job(rebuild=True), Job(roots=frozenset({"wiki"})), leftover):
        assert not scheduled.merge(other).audit and not other.merge(scheduled).audit


def test_a_failed_sweep_is_retried_with_what_it_did_not_write(looped: Any, vault: Path) -> None:
    """Disk full mid-sweep: reported with the policy's delay, retried with the leftover paths only
    once the first sweep is done (a failed first sweep is retried whole, so that it counts as
    done: finished as leftover paths, status said "building" until the next scheduled sweep),
    and the problem clears once the retry succeeds."""
    h, loop, calls = looped
    real_index = h.indexer.index_files
    failures = [OSError(28, "No space left on device")]

    def flaky(notes: Any, data: Any = None) -> int:
        if failures:
            raise failures.pop()
        return real_index(notes, data)

    h.indexer.index_files = flaky  # type: ignore[method-assign]
    reports: list[str] = []
    real_report = h.problems.report
    h.problems.report = lambda area, error: reports.append(error) or real_report(area, error)  # type: ignore[method-assign]
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps >= 1 and h.problems.active_in("index") is None and bool(reports))
    assert "No space left on device" in reports[0] and "retrying in 0 s" in reports[0]
    assert calls[0]["paths"] == frozenset() and calls[1]["paths"] == frozenset() and calls[1]["only"] is None
    assert h.indexer.activity.first_sweep_done and h.stores.manifest.counts()["files"] == 4
    write(vault / "Later.md", "# Later\n\nA note written after the first sweep.\n")
    failures.append(OSError(28, "No space left on device"))
    loop.request_sweep()
    _until(lambda: len(calls) >= 4 and h.problems.active_in("index") is None)
    assert calls[3]["paths"] and all(p.startswith(str(vault)) for p in calls[3]["paths"])
    assert h.stores.manifest.counts()["files"] == 5


def test_a_deletion_the_full_disk_refused_is_retried_with_the_leftover(looped: Any, vault: Path) -> None:
    """Disk full: neither the sweep's notes nor its deletions could be written. The retry of the
    leftover paths deletes the gone note too (it was left to the next full sweep: a deleted note
    found for up to index.rescanMinutes)."""
    h, loop, calls = looped
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps >= 1)
    real_index, real_delete = h.indexer.index_files, h.indexer.delete
    full = [OSError(28, "No space left on device")]

    def index_full(notes: Any, data: Any = None) -> int:
        if full:
            raise full[0]
        return real_index(notes, data)

    def delete_full(keys: Any) -> Any:
        if full:
            full.pop()
            raise OSError(28, "No space left on device")
        return real_delete(keys)

    h.indexer.index_files = index_full  # type: ignore[method-assign]
    h.indexer.delete = delete_full  # type: ignore[method-assign]
    notes = sorted(
        p
        for p in vault.rglob("*.md")
        if not any(x == "wiki" or x.startswith(".") for x in p.relative_to(vault).parts)
    )
    gone, excluded = notes[0], notes[1]
    key, excluded_key = ("vault/" + p.relative_to(vault).as_posix()[:-3] for p in (gone, excluded))
    assert h.stores.manifest.file_states_of([key, excluded_key]).keys() == {key, excluded_key}
    gone.unlink()
    # A new rule leaves a note out: its file is still there, so a look at its path finds it.
    h.indexer.set_excludes([excluded.relative_to(vault).as_posix()], False)
    write(vault / "Later.md", "# Later\n\nA note written after the first sweep.\n")
    loop.request_sweep()
    _until(lambda: len(calls) >= 3 and h.problems.active_in("index") is None)
    assert calls[2]["paths"] and calls[2]["only"] == frozenset()
    # Their vectors go on their own thread: the manifest entry leaves last.
    _until(lambda: not h.stores.manifest.file_states_of([key, excluded_key]))
    assert h.stores.manifest.file_states_of(["vault/Later"])


def test_a_crash_that_repeats_logs_its_traceback_once(
    looped: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected error retried every few seconds logs its traceback the first time and a
    line each time after (the same 25-line traceback every 5 s filled the journal)."""
    h, loop, _calls = looped
    real_index = h.indexer.index_files
    crashes = [ValueError("a value no sweep expects")] * 3

    def crashing(notes: Any, data: Any = None) -> int:
        if crashes:
            raise crashes.pop()
        return real_index(notes, data)

    h.indexer.index_files = crashing  # type: ignore[method-assign]
    with caplog.at_level("ERROR", logger="sidecar.daemon.indexing"):
        loop.request_sweep()
        _until(lambda: h.indexer.activity.sweeps >= 1 and h.problems.active_in("index") is None)
    crashed = [r for r in caplog.records if r.getMessage().startswith("sweep_crashed")]
    assert len(crashed) == 3 and "ValueError: a value no sweep expects" in crashed[0].getMessage()
    assert crashed[0].exc_info and not crashed[1].exc_info and not crashed[2].exc_info


def test_status_line_says_building_then_ready(looped: Any) -> None:
    """systemd's STATUS= line: building before the first sweep ends, then the counts."""
    h, loop, _calls = looped
    assert status_line(h.indexer.activity, h.supervisor, h.stores.manifest, "ok").startswith("building")
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps == 1)
    line = status_line(h.indexer.activity, h.supervisor, h.stores.manifest, "ok")
    assert line.startswith("ready: 4 notes")
    # During a model switch systemctl status says so (it said "ready" alone).
    from sidecar.index.migration import attach

    while h.vectors.embed_pending():
        pass
    attach(h.cfg, h.vectors, OtherDim())
    line = status_line(h.indexer.activity, h.supervisor, h.stores.manifest, "ok", h.vectors)
    waiting = h.stores.manifest.chunk_count()
    assert line.endswith(f"; model switch: {waiting} chunks wait for the new model's vectors")


class OtherDim(FakeEmbedder):
    model_id = "other-model@2"
    dim = 32


def test_backfill_attaches_vectors_once_the_model_is_there(make_cfg: Any, vault: Path) -> None:
    """The model loads after the first sweep: the backfill attaches a table, embeds every pending
    chunk, and stops when told."""
    h = Harness(make_cfg(vault), None)
    try:
        h.indexer.sweep()
        assert h.stores.serving is None and h.stores.manifest.pending_count() > 0
        stop = threading.Event()
        backfill = Backfill(
            h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity, stop=stop
        )
        thread = threading.Thread(target=backfill.run, daemon=True)
        h.slot.set_loading()
        thread.start()
        h.slot.set_ok(FakeEmbedder(), "test")
        _until(lambda: h.stores.serving is not None and h.stores.manifest.pending_count() == 0)
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        assert h.stores.vectors is not None and h.stores.vectors.count() == h.stores.manifest.chunk_count()
    finally:
        h.close()


def test_repair_policy_rebuilds_a_failing_keyword_index_at_most_once_a_minute(harness: Harness) -> None:
    """Searches report the keyword index failing: the tick moves it aside and refills it from the
    manifest, notes it, and does not repair again within the minute."""
    harness.sweep()
    policy = RepairPolicy(harness.repair, harness.problems, harness.stores.manifest, harness.slot)
    docs = harness.stores.bm25.num_docs()
    first = harness.stores.bm25
    harness.problems.report("keyword_search", "tantivy: corrupt segment")
    policy.tick()
    assert harness.stores.bm25 is not first and harness.stores.bm25.num_docs() == docs
    assert harness.problems.active_in("keyword_search") is None
    assert any(r["area"] == "stores" for r in harness.problems.describe()["recent"])
    second = harness.stores.bm25
    harness.problems.report("keyword_search", "tantivy: corrupt segment")
    policy.tick()
    assert harness.stores.bm25 is second  # within the minute: left for the next tick after it


def test_a_note_saved_during_a_long_sweep_is_indexed_before_it_ends(make_cfg: Any, tmp_path: Path) -> None:
    """File events queued while a full sweep runs are taken between its batches: the saved note
    is searchable within a batch, not when the sweep ends (two minutes on 40,000 notes). Other
    requests stay queued for after it."""
    v = tmp_path / "bulk"
    for i in range(12):
        write(v / f"n{i:02}.md", f"# N{i}\n\nbulk note {i}\n")
    write(v / "Saved.md", "# Saved\n\nthe old text\n")
    h = Harness(make_cfg(v, **{"index.batchFiles": 2}), FakeEmbedder())
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    h.indexer.on_indexed = None  # no note is hot (on a loaded machine Saved.md's cost held it)
    try:
        h.indexer.sweep()
        for i in range(12):  # the next full sweep has work for six batches
            write(v / f"n{i:02}.md", f"# N{i}\n\nbulk note {i}, changed\n")
        seen_during: list[bool] = []
        real = h.indexer.writer.write

        def batch(prepared: Any) -> None:
            real(prepared)
            if len(seen_during) == 1:  # after the first batch: the note is saved, its event queued
                write(v / "Saved.md", "# Saved\n\nthe new text\n")
                loop.changed({str(v / "Saved.md")})
                loop.request_sweep(roots=frozenset({"wiki"}))  # not a file event: it waits
            texts = " ".join(c.text for c in h.stores.manifest.chunks_of("vault/Saved"))
            seen_during.append("new text" in texts)

        h.indexer.writer.write = batch  # type: ignore[method-assign]
        h.indexer.sweep()
        # Taken after the second batch (the one it was saved in), before the remaining four.
        assert seen_during.index(True) <= 3 and len(seen_during) >= 6, seen_during
        remaining = []
        while not loop.jobs.empty():
            remaining.append(loop.jobs.get_nowait())
        assert [j.roots for j in remaining] == [frozenset({"wiki"})]
    finally:
        h.close()


def test_a_note_made_in_an_excluded_folder_during_a_long_sweep_is_a_link_target(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A note made in an excluded folder while a full sweep runs is a link's target from the
    batch its event was taken in, and stays one when the sweep ends (the sweep's listing, made
    before the note, would drop it again until the next sweep)."""
    v = tmp_path / "bulk"
    for i in range(12):
        write(v / f"n{i:02}.md", f"# N{i}\n\nbulk note {i}\n")
    write(v / "Hub.md", "# Hub\n\nSee [[Memo]].\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    h = Harness(make_cfg(v, **{"index.batchFiles": 2}), FakeEmbedder())
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    h.indexer.on_indexed = None
    graph = LinkGraph(h.stores.manifest.read)

    def target() -> tuple[str | None, str | None]:
        link = graph.links_of("vault/Hub")[0]
        return link["target"], link.get("excluded")

    try:
        h.indexer.sweep()
        assert target() == (None, None)
        for i in range(12):  # the next full sweep has work for six batches
            write(v / f"n{i:02}.md", f"# N{i}\n\nbulk note {i}, changed\n")
        seen_during: list[str | None] = []
        real = h.indexer.writer.write

        def batch(prepared: Any) -> None:
            real(prepared)
            if len(seen_during) == 1:  # after the first batch: the note is made, its event queued
                loop.changed({str(write(v / "Archive/Memo.md", "# Memo\n"))})
            seen_during.append(target()[0])

        h.indexer.writer.write = batch  # type: ignore[method-assign]
        h.indexer.sweep()
        assert "vault/Archive/Memo" in seen_during[:4], seen_during
        assert target() == ("vault/Archive/Memo", "Obsidian excluded files: Archive/")
    finally:
        h.close()


def test_a_folder_excluded_during_the_first_sweep_is_not_found_once_the_reload_is_done(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A reload that excludes a folder while the first sweep runs, between a batch read and its
    write: the folder's notes the sweep wrote already leave before the reload's part returns, and
    the batch read before it writes none of them (both were found by search until a later sweep)."""
    v = tmp_path / "first"
    for i in range(6):
        write(v / f"Private/p{i}.md", f"# P{i}\n\nThe secret diary of the lighthouse keeper {i}.\n")
    write(v / "Open.md", "# Open\n\nThe public history of the lighthouse.\n")
    h = Harness(make_cfg(v, **{"index.batchFiles": 2}), FakeEmbedder())
    real = h.indexer.writer.write
    batches: list[list[str]] = []
    paused, go = threading.Event(), threading.Event()

    def write_batch(prepared: Any) -> None:
        batches.append([p.note.key for p in prepared])
        if len(batches) == 2:  # the first batch is in; this one was listed and read before the reload
            paused.set()
            assert go.wait(30)
        real(prepared)

    def private() -> tuple[list[str], list[str]]:
        found = [x["reference"] for x in search(h, "secret diary lighthouse keeper", min_score=0)]
        indexed = list(h.stores.manifest.file_states("vault/Private/"))
        return [r for r in found if r.startswith("vault/Private/")], indexed

    h.indexer.writer.write = write_batch  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def sweep() -> None:
        try:
            h.indexer.sweep()
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=sweep, daemon=True)
    try:
        worker.start()
        assert paused.wait(30)
        assert all(any(k.startswith("vault/Private/") for k in b) for b in batches)
        assert all(private()), "the first batch's private notes are in"
        # What the reload does (Daemon._reload): the new rules, then what they leave out removed.
        assert h.indexer.set_excludes(["Private/"], False)
        assert h.indexer.remove_excluded() >= 1
        assert private() == ([], [])
        go.set()
        worker.join(30)
        assert not worker.is_alive() and not failed
        assert private() == ([], [])
        assert h.stores.manifest.file_states_of(["vault/Open"])
    finally:
        go.set()
        worker.join(30)
        h.close()


@pytest.mark.parametrize("settings", ["app.json", "templates.json"])
def test_a_folder_excluded_in_obsidian_leaves_on_the_settings_event(
    make_cfg: Any, tmp_path: Path, settings: str
) -> None:
    """Obsidian's Excluded files (or templates folder) edited without a reload: the rules were read
    only when a sweep started, so during a long sweep its notes were written and found for up to
    two sweeps. The settings file's event reads them and removes the notes at once."""
    v = tmp_path / "v"
    write(v / "Private/p.md", "# P\n\nThe secret diary of the lighthouse keeper.\n")
    write(v / "Open.md", "# Open\n\nThe public history of the harbour.\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
    h = Harness(make_cfg(v), FakeEmbedder())
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    try:
        h.sweep()
        assert h.stores.manifest.file_states_of(["vault/Private/p"])
        if settings == "app.json":
            write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
        else:
            write(v / ".obsidian/templates.json", json.dumps({"folder": "Private"}))
        loop.changed({str(v / ".obsidian" / settings)})  # no sweep runs: the loop is not started
        assert not h.stores.manifest.file_states_of(["vault/Private/p"])
        found = [x["reference"] for x in search(h, "secret diary lighthouse keeper", min_score=0)]
        assert "vault/Private/p" not in found
        assert h.indexer.excluded_by("vault/Private/p") is not None
        assert h.stores.manifest.file_states_of(["vault/Open"])
    finally:
        h.close()


def test_the_templates_plugin_switched_on_leaves_its_folder_out_on_the_settings_event(
    make_cfg: Any, tmp_path: Path
) -> None:
    """core-plugins.json says whether the Templates plugin is on (its folder left out): its event
    reads the rules again, as templates.json's does, without waiting for a sweep."""
    v = tmp_path / "v"
    write(v / "Private/p.md", "# P\n\nThe secret diary of the lighthouse keeper.\n")
    write(v / "Open.md", "# Open\n\nThe public history of the harbour.\n")
    write(v / ".obsidian/templates.json", json.dumps({"folder": "Private"}))
    core = write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    h = Harness(make_cfg(v), FakeEmbedder())
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    try:
        h.sweep()
        assert h.stores.manifest.file_states_of(["vault/Private/p"])
        write(core, json.dumps({"templates": True}))
        loop.changed({str(core)})  # no sweep runs: the loop is not started
        assert not h.stores.manifest.file_states_of(["vault/Private/p"])
        assert h.indexer.excluded_by("vault/Private/p") == "Obsidian templates folder: Private/"
        write(core, json.dumps({"templates": False}))
        loop.changed({str(core)})
        assert h.indexer.excluded_by("vault/Private/p") is None
        assert h.stores.manifest.file_states_of(["vault/Open"])
    finally:
        h.close()


def test_a_note_a_batch_leaves_out_after_a_reload_is_recorded_as_excluded(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A note read before a reload excluded it is left out by its batch's write: it was not
    recorded as excluded, so a link to it stayed unresolved and health did not count it until
    the next sweep."""
    v = tmp_path / "v"
    write(v / "Hub.md", "# Hub\n\nSee [[Memo]].\n")
    write(v / "Private/Memo.md", "# Memo\n\nThe secret diary of the lighthouse keeper.\n")
    h = Harness(make_cfg(v, **{"index.batchFiles": 1}), FakeEmbedder())
    graph = LinkGraph(h.stores.manifest.read)
    real = h.indexer.writer.write

    def batch(prepared: Any) -> None:
        if any(p.note.key == "vault/Private/Memo" for p in prepared):  # read before the reload
            assert h.indexer.set_excludes(["Private/"], True)
        real(prepared)

    try:
        h.indexer.writer.write = batch  # type: ignore[method-assign]
        h.indexer.sweep()
        assert not h.stores.manifest.file_states_of(["vault/Private/Memo"])
        link = graph.links_of("vault/Hub")[0]
        assert (link["target"], link.get("excluded")) == ("vault/Private/Memo", "index.exclude: Private/")
        assert h.indexer.activity.excluded == {"index.exclude: Private/": 1}
    finally:
        h.close()


def _backfill(h: Harness, stop: threading.Event) -> threading.Thread:
    backfill = Backfill(
        h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity, stop=stop
    )
    thread = threading.Thread(target=backfill.run, daemon=True)
    thread.start()
    return thread


def test_a_full_disk_while_attaching_vectors_is_waited_out(make_cfg: Any, vault: Path) -> None:
    """sqlite's "database or disk is full" while the vector table is attached (the manifest's
    bookkeeping): the backfill thread lives on, says so in words (area ``vectors``), tries again
    and serves vectors once there is space. It ended silently, and vector search stayed off
    until a restart while status said every chunk had a vector."""
    import sqlite3

    h = Harness(make_cfg(vault), None)
    stop = threading.Event()
    try:
        h.indexer.sweep()
        real = h.stores.manifest.set_meta
        full = [sqlite3.OperationalError("database or disk is full")] * 3
        seen: list[str] = []

        def set_meta(key: str, value: str) -> None:
            if key == "vectors_clean" and full:
                raise full.pop()
            real(key, value)

        h.stores.manifest.set_meta = set_meta  # type: ignore[method-assign]
        real_report = h.problems.report
        h.problems.report = lambda area, error: seen.append(f"{area}: {error}") or real_report(area, error)  # type: ignore[method-assign]
        with backoff.testing():
            h.slot.set_ok(FakeEmbedder(), "test")
            thread = _backfill(h, stop)
            _until(lambda: h.stores.serving is not None and h.stores.manifest.pending_count() == 0)
        assert thread.is_alive()
        assert len(seen) == 3 and all(s.startswith("vectors: ") for s in seen)
        assert "is full (database or disk is full)" in seen[0] and "keyword results only" in seen[0]
        assert h.problems.active_in("vectors") is None
        assert h.problems.describe()["recent"][-1]["area"] == "vectors"
    finally:
        stop.set()
        h.close()


def test_a_table_that_fails_to_attach_is_checked_and_attached(make_cfg: Any, vault: Path) -> None:
    """A read error while the table is attached (not a full disk): the table is read whole by the
    repair and, readable, attached after all: vector search is whole without a restart."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores.vectors import VectorStore

    first = Harness(make_cfg(vault), FakeEmbedder())
    first.sweep()
    first.close()
    h = Harness(make_cfg(vault), None)
    stop = threading.Event()
    real = VectorStore.id_list
    fails = [StoreError("vector scan failed: a read that fails once")]

    def id_list(self: VectorStore) -> list[str]:
        if fails:
            raise fails.pop()
        return real(self)

    VectorStore.id_list = id_list  # type: ignore[method-assign]
    try:
        with backoff.testing():
            h.slot.set_ok(FakeEmbedder(), "test")
            _backfill(h, stop)
            _until(lambda: h.stores.serving is not None)
        assert h.stores.manifest.pending_count() == 0 and not fails
        serving = h.stores.serving
        assert serving is not None and serving.store.count() == h.stores.manifest.chunk_count()
        assert not any(".broken-" in p.name for p in h.cfg.index_dir.iterdir())
    finally:
        VectorStore.id_list = real  # type: ignore[method-assign]
        stop.set()
        h.close()


def _two_agents(make_cfg: Any, vault: Path) -> Any:
    """The vault fixture and the inboxes of two agents, alpha and beta, each with a note: swept
    and closed (the next start reads the damage the test makes)."""
    cfg = make_cfg(vault)
    for agent in ("alpha", "beta"):
        inbox = cfg.agents_dir / agent / "memory"
        inbox.mkdir(parents=True, mode=0o700)
        os.chmod(inbox.parent, 0o700)
        write(inbox / "trip.md", f"# Trip\n\nThe kayak of {agent} waits at the lake.\n")
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    assert h.stores.bm25.agents() == ["alpha", "beta"]
    h.close()
    return cfg


def _kayaks(h: Harness, agent: str | None = None) -> list[str]:
    """The notes a search (of ``agent``, or a person's) finds by the keyword (the search reports
    a failing index as a user's search does)."""
    search(h, "kayak", agent=agent)
    ids = [chunk for chunk, _ in h.stores.bm25.search("kayak", 10, agent_scope=agent)]
    return sorted(v.key for v in h.stores.manifest.views(ids).values())


def _asides(cfg: Any) -> list[str]:
    return sorted(p.name.split(".broken-")[0] for p in cfg.index_dir.iterdir() if ".broken-" in p.name)


def test_one_agents_failing_keyword_index_is_refilled_alone(make_cfg: Any, vault: Path) -> None:
    """An agent's inbox index fails its searches while the vault's answers: the repair moves
    that inbox aside and refills it from the manifest, leaving the vault's index and the other
    inboxes as they are (it refilled the whole keyword index: the cost of every note, for one
    agent's few)."""
    cfg = _two_agents(make_cfg, vault)
    for f in (cfg.index_dir / "bm25/memory/beta/chunks").glob("*.idx"):
        f.write_bytes(b"\0" * 64)
    vault_meta = (cfg.index_dir / "bm25/chunks/meta.json").read_bytes()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        # A person's search reads the index of every agent's memory: beta's own is not read.
        assert _kayaks(h) == ["memory/alpha/trip", "memory/beta/trip"]
        assert _kayaks(h, "beta") == []
        problem = h.problems.active_in("keyword_search")
        assert problem is not None and "memory/beta" in problem["error"]
        bm25 = h.stores.bm25
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert h.stores.bm25 is bm25 and _asides(cfg) == ["bm25-memory-beta"]
        assert (cfg.index_dir / "bm25/chunks/meta.json").read_bytes() == vault_meta
        assert _kayaks(h, "beta") == ["memory/beta/trip"]
        assert h.problems.active_in("keyword_search") is None and bm25.failing == {}
    finally:
        h.close()


def test_an_inbox_index_found_damaged_at_start_is_refilled_alone(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An inbox index whose counts cannot be read at start (its meta.json damaged) is moved
    aside; the check after the first sweep refills that inbox alone from the manifest, not the
    whole keyword index."""
    cfg = _two_agents(make_cfg, vault)
    (cfg.index_dir / "bm25/memory/beta/chunks/meta.json").write_text("{not json")
    vault_meta = (cfg.index_dir / "bm25/chunks/meta.json").read_bytes()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert "reason=count mismatch expected=" in caplog.text and "inbox=beta" in caplog.text
        assert _asides(cfg) == ["bm25-memory-beta"]
        assert (cfg.index_dir / "bm25/chunks/meta.json").read_bytes() == vault_meta
        assert _kayaks(h) == ["memory/alpha/trip", "memory/beta/trip"]
        assert h.stores.bm25.num_docs() == h.stores.manifest.indexed_chunk_count()
    finally:
        h.close()


def test_the_lock_keeper_makes_nothing_in_an_index_folder_gone_or_replaced(
    harness: Harness, tmp_path: Path
) -> None:
    """The home's share unmounted under the running daemon: the index folder's path leads nowhere
    or to the bare mount point. The lock keeper says so (a `home` problem) and makes no lock (nor
    folder) there; once the folder is back, the problem goes. Was: `index/.lock` made anew on
    the mount point, as if only the lock file had been removed."""
    from sidecar.daemon.process import IndexLock

    index = tmp_path / "shared-home" / "index"
    lock = IndexLock(index)
    lock.acquire()
    policy = RepairPolicy(
        harness.repair, harness.problems, harness.stores.manifest, harness.slot, keep_lock=lock.keep
    )
    try:
        away = index.with_name("index.away")
        index.rename(away)
        policy.tick()
        assert not index.exists()
        problem = harness.problems.active_in("home", subject="index")
        assert problem is not None and "not the folder sidecar started on" in problem["error"]
        index.mkdir()  # another folder at the path
        policy.tick()
        assert list(index.iterdir()) == []
        index.rmdir()
        away.rename(index)
        policy.tick()
        assert harness.problems.active_in("home", subject="index") is None
        assert harness.problems.active() == []
    finally:
        lock.release()


def test_a_manifest_away_and_back_clears_its_problem(harness: Harness) -> None:
    """The manifest's path gone for a while (the home's share unmounted, then mounted again): its
    problem ("restart the daemon to rebuild the index") is said while it is away and goes once
    the same file is back. Was: it stayed, advising a rebuild that was not needed."""
    policy = RepairPolicy(harness.repair, harness.problems, harness.stores.manifest, harness.slot)
    path = harness.stores.manifest.path
    away = path.with_name("manifest.away")
    path.rename(away)
    try:
        policy.tick()
        assert [p["area"] for p in harness.problems.active()] == ["stores"]
    finally:
        away.rename(path)
    policy.tick()
    assert harness.problems.active() == []


def _cut_short(folder: Path, suffix: str) -> None:
    """Truncate the index's ``suffix`` files to a third, in place (same inode), under a running
    daemon."""
    files = list(folder.glob(f"*{suffix}"))
    assert files
    for f in files:
        with f.open("r+b") as fh:
            fh.truncate(f.stat().st_size // 3)


def _answer(h: Harness, query: str, agent: str | None = None) -> tuple[list[str], str | None]:
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
    result = r.search(SearchRequest(query, 10, 0.0, agent=agent))
    return sorted(hit.reference for hit in result.hits), result.degraded


def test_an_inbox_index_damaged_while_running_is_noticed_and_refilled(make_cfg: Any, vault: Path) -> None:
    """An agent's inbox index whose term dictionary is cut short under the running daemon (its
    searcher open): a search as that agent or as a person says so in its answer and in the
    problems, the other notes still answer, and the repair refills that inbox alone. Was: every
    search of it answered nothing, with no word, until a restart."""
    cfg = _two_agents(make_cfg, vault)
    h = Harness(cfg, None)  # keyword search only: nothing else finds the inbox's notes
    try:
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]
        _cut_short(cfg.index_dir / "bm25/memory/beta/chunks", ".term")
        refs, said = _answer(h, "kayak", "beta")
        assert refs == [] and said is not None and "memory/beta is damaged" in said
        refs, said = _answer(h, "kayak")
        assert "memory/alpha/trip" in refs and said is not None and "memory/beta" in said
        problem = h.problems.active_in("keyword_search")
        assert problem is not None and "memory/beta" in problem["error"] and ".term" in problem["error"]
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert _asides(cfg) == ["bm25-memory-beta"]
        refs, said = _answer(h, "kayak", "beta")
        assert refs == ["memory/trip"] and (said is None or "damaged" not in said)
        assert h.problems.active_in("keyword_search") is None
    finally:
        h.close()


def test_a_write_to_an_inbox_index_damaged_while_running_holds_back_nothing(
    make_cfg: Any, vault: Path
) -> None:
    """A note written to an agent whose inbox index was cut short under the running daemon: the
    commit that meets the damage moves that inbox aside (not a full disk) and the other changes
    of the sweep are committed; the inbox is refilled from the manifest, this note included. Was:
    every commit failed, the vault's and every agent's changes with it, until a restart."""
    cfg = _two_agents(make_cfg, vault)
    h = Harness(cfg, None)
    try:
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]  # its index open
        _cut_short(cfg.index_dir / "bm25/memory/beta/chunks", ".term")
        write(cfg.agents_dir / "beta" / "memory" / "canoe.md", "# Canoe\n\nThe canoe of beta, a kayak too.\n")
        write(vault / "Paddle.md", "# Paddle\n\nA kayak paddle in the vault.\n")
        h.sweep()
        assert "vault/Paddle" in _answer(h, "kayak")[0]
        assert _asides(cfg) == ["bm25-memory-beta"]  # refilled by the check after the sweep
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        refs, said = _answer(h, "kayak", "beta")
        assert refs == ["memory/canoe", "memory/trip", "vault/Paddle"] and "damaged" not in (said or "")
        assert h.stores.bm25.failing == {} and h.problems.active_in("keyword_search") is None
    finally:
        h.close()


def test_a_memory_write_to_a_damaged_inbox_index_gets_it_refilled(serve_in_process: Any) -> None:
    """A memory write whose commit meets its inbox index damaged under the running daemon: that
    inbox is moved aside, the next repair tick says so and refills it from the manifest (the
    note just written included), with no search needed to notice. Was: the write answered
    `searchable: false` and every later commit failed until a restart."""
    server = serve_in_process(model=KEYWORD_ONLY)
    h = server.harness
    server.call("write", {"slug": "trip", "content": "the kayak of beta"}, agent="beta")
    assert [x["reference"] for x in server.call("search", {"query": "kayak"}, agent="beta")["hits"]] == [
        "memory/trip"
    ]
    _cut_short(h.cfg.index_dir / "bm25/memory/beta/chunks", ".term")
    server.call("write", {"slug": "canoe", "content": "the canoe of beta, a kayak too"}, agent="beta")
    RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
    assert _asides(h.cfg) == ["bm25-memory-beta"]
    found = server.call("search", {"query": "kayak"}, agent="beta")
    assert sorted(x["reference"] for x in found["hits"]) == ["memory/canoe", "memory/trip"]
    assert h.stores.bm25.failing == {} and h.problems.active_in("keyword_search") is None


def _segment_files(folder: Path) -> list[Path]:
    files = [f for f in folder.iterdir() if f.suffix in (".term", ".idx", ".store", ".pos", ".fast", ".del")]
    assert files
    return files


@pytest.mark.parametrize("how", ["touched", "copied back"])
def test_an_inbox_segment_file_with_the_same_bytes_is_no_damage(
    make_cfg: Any, vault: Path, tmp_path: Path, how: str
) -> None:
    """Every segment file of an open inbox index touched (a new mtime), or copied away and back
    (a backup restored: a new inode and mtime, the same bytes): a search of that inbox that
    matches nothing checks its files and finds them whole. Was: taken for overwritten, the answer
    said "damaged" and the inbox was moved aside and refilled."""
    cfg = _two_agents(make_cfg, vault)
    h = Harness(cfg, None)
    try:
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]  # its index open
        for f in _segment_files(cfg.index_dir / "bm25/memory/beta/chunks"):
            if how == "touched":
                st = f.stat()
                os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
            else:
                shutil.copyfile(f, tmp_path / f.name)
                f.unlink()
                shutil.copyfile(tmp_path / f.name, f)
        for _ in range(2):
            refs, said = _answer(h, "zeppelin", "beta")
            assert refs == [] and "damaged" not in (said or ""), said
        assert h.problems.active_in("keyword_search") is None and h.stores.bm25.failing == {}
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert _asides(cfg) == []
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]
    finally:
        h.close()


@pytest.mark.parametrize("how", ["garbled", "cut short"])
def test_an_inbox_segment_file_garbled_in_place_is_damage(make_cfg: Any, vault: Path, how: str) -> None:
    """A stored-text file of an open inbox index with bytes overwritten in the middle (its size
    kept) or cut short: a search that matches nothing says the inbox is damaged, and it is refilled."""
    cfg = _two_agents(make_cfg, vault)
    h = Harness(cfg, None)
    try:
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]
        for f in (cfg.index_dir / "bm25/memory/beta/chunks").glob("*.store"):
            data = bytearray(f.read_bytes())
            if how == "garbled":
                middle = len(data) // 3
                data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
            else:
                data = data[: len(data) // 2]
            with f.open("r+b") as fh:  # in place: the same inode
                fh.write(data)
                fh.truncate(len(data))
        said = _answer(h, "zeppelin", "beta")[1]
        assert said is not None and "memory/beta is damaged" in said, said
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert _asides(cfg) == ["bm25-memory-beta"]
        assert _answer(h, "kayak", "beta")[0] == ["memory/trip"]
    finally:
        h.close()


def test_a_sweep_that_finds_notes_no_event_told_has_the_watch_built_again(looped: Any, vault: Path) -> None:
    """A scheduled or asked-for sweep that finds notes, not just changed, in a watched folder and
    told by no file event means events were lost: the watcher is told, health says so until the
    watch's catch-up sweep ran. A note changed just now (its event may be on its way), one an event
    told, and a sweep asked for by a settings change are no sign."""
    h, loop, calls = looped
    lost: list[str] = []
    loop.on_lost, loop.watched = lost.append, lambda: [str(vault)]

    def swept(audit: bool = True) -> None:
        """A sweep, done with its check: the job after it has begun."""
        n = len(calls)
        loop.request_sweep(audit=audit)
        _until(lambda: len(calls) > n)
        loop.jobs.put(Job(roots=frozenset({"no-such-root"})))  # never taken into a running sweep
        _until(lambda: len(calls) > n + 1)

    swept()  # the first sweep: what changed while the daemon was down had no event to give
    write(vault / "Fresh.md", "# fresh\n")  # saved just now
    told = write(vault / "Told.md", "# told\n")
    loop.changed({str(vault / "Folder")})  # a folder's event: the notes under it are told too
    (vault / "Folder").mkdir()
    hour_ago = time.time() - 3600
    for p in (told, write(vault / "Folder" / "In.md", "# in\n")):
        os.utime(p, (hour_ago, hour_ago))
    loop.changed({str(told)})
    _until(lambda: search(h, "told") != [])
    swept()
    quiet = write(vault / "Quiet.md", "# quiet\n")
    os.utime(quiet, (hour_ago, hour_ago))
    swept(audit=False)  # e.g. Excluded files changed in Obsidian: notes come and go
    assert lost == [] and h.problems.active_in("watch") is None
    missed = write(vault / "Missed.md", "# missed\n")
    os.utime(missed, (hour_ago, hour_ago))
    swept()
    assert len(lost) == 1 and str(missed) in lost[0]
    assert "file events were lost" in (h.problems.active_in("watch") or {}).get("error", "")
    n = len(calls)
    loop.changed(set())  # the watcher's catch-up once its new watch runs
    _until(lambda: len(calls) > n and h.problems.active_in("watch") is None)


def _audit_loop(h: Harness, vault: Path, lost: list[str]) -> IndexLoop:
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    loop.on_lost, loop.watched = lost.append, lambda: [str(vault)]
    return loop


def test_an_event_told_during_an_audited_sweep_and_merged_into_the_next_is_no_lost_event(
    make_cfg: Any, vault: Path
) -> None:
    """A note saved while an audited sweep S1 runs (after S1 listed its folder): its event is
    queued and noted as told, S1 ends with no batch (so ``take_paths`` never took it) and its
    check lets go of the told paths. A scheduled sweep or ``sidecar index`` queued meanwhile is
    merged with that event and checked: the event's path counts as told for it (the note, saved
    more than ``_IN_FLIGHT_S`` before it began, was reported as a lost event)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        lost: list[str] = []
        loop = _audit_loop(h, vault, lost)
        h.indexer.sweep()  # the first sweep is done
        real = h.indexer.sweep
        saved = vault / "Saved.md"

        def saved_during(**kw: Any) -> dict[str, int]:
            out = real(**kw)
            write(saved, "# saved\n")  # saved after S1 listed its folder ...
            ago = time.time() - 10  # ... S1's scan of a large vault went on for 10 s after
            os.utime(saved, (ago, ago))
            loop.changed({str(saved)})  # its event, before S1 ended
            loop.request_sweep()  # the schedule's next sweep (or `sidecar index`), queued meanwhile
            return out

        h.indexer.sweep = saved_during  # type: ignore[method-assign]
        loop.request_sweep()
        s1 = loop._next()
        assert s1 is not None and s1.audit
        loop._run(s1)
        h.indexer.sweep = real  # type: ignore[method-assign]
        merged = loop._next()
        assert merged is not None
        loop._run(merged)
        assert lost == [], lost
        assert h.problems.active_in("watch") is None
    finally:
        h.close()


def test_a_failed_settings_sweep_retried_beside_a_scheduled_one_is_no_lost_event(
    make_cfg: Any, vault: Path
) -> None:
    """Obsidian's Excluded files changed: the settings sweep (not checked: notes come and go with
    no event) fails mid-way (disk full) and is retried as the paths it did not write, which look
    like file events and are not. The scheduled sweep queued during the retry's wait, merged with
    it, is not checked: the notes the settings brought in (old, no event ever) were reported as
    lost events."""
    write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    ago = time.time() - 3600
    for i in range(3):
        p = write(vault / "Archive" / f"Old{i}.md", f"# old {i}\n")
        os.utime(p, (ago, ago))
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        lost: list[str] = []
        loop = _audit_loop(h, vault, lost)
        h.indexer.sweep()  # the first sweep, Archive/ excluded
        write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
        loop.changed({str(vault / ".obsidian/app.json")})  # a settings sweep, Job()
        job = loop._next()
        assert job is not None and not job.audit
        real = h.indexer.index_files
        h.indexer.index_files = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
            OSError(errno.ENOSPC, "No space left on device")
        )
        try:
            loop._run(job)
        except OSError as exc:
            loop.request_sweep()  # the schedule fired during the retry's wait
            loop._failed(job, exc, 0.0)
        else:
            raise AssertionError("the settings sweep should have failed")
        h.indexer.index_files = real  # type: ignore[method-assign]
        merged = loop._next()
        assert merged is not None
        loop._run(merged)
        assert lost == [], lost
    finally:
        h.close()


def test_index_rebuild_waits_for_its_own_sweep(
    serve_in_process: Any, vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index --rebuild` through the daemon (real socket, real command): a sweep that was
    running when it asked (file events) ends first; the command waits for the rebuild it asked
    for and reports its figures (it stopped at any sweep that ended after it asked, and said
    "indexed 0 notes" while the rebuild ran on for a minute). Status says a rebuild is under way
    meanwhile, not "0 notes" and "every chunk has a vector"."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser
    from sidecar.clients.cli_render import render_status

    server = serve_in_process()
    h = server.harness
    loop = index_loop_of(server, rebuilds=True)
    polled = threading.Semaphore(0)
    health = server.handlers.health

    def counted(req: Any) -> dict[str, Any]:
        out = health(req)
        polled.release()
        return out

    server.handlers._ops["health"] = counted
    files = h.stores.manifest.counts()["files"]
    write(vault / "Later.md", "# Later\n\nWritten while no event told it.\n")  # only a rebuild finds it
    codes: list[int] = []
    cli = threading.Thread(
        target=lambda: codes.append(
            command_for("index")(build_parser().parse_args(["index", "--rebuild", "--json"]), server.cfg)
        )
    )
    cli.start()
    _until(lambda: not loop.jobs.empty())  # the rebuild is queued
    shown = render_status(server.call("health"))
    assert "a rebuild is queued: it begins in a moment" in shown, shown
    h.indexer.sweep(only=frozenset(), paths={str(vault / "Garden.md")})  # the sweep under way ends
    while polled.acquire(blocking=False):
        pass
    assert polled.acquire(timeout=30)  # the command looked at health after that sweep
    assert cli.is_alive()
    sweep = h.indexer.sweep

    def swept(*a: Any, **kw: Any) -> Any:  # the rebuild's first moment: the index is empty
        seen.append(render_status(server.call("health")))
        return sweep(*a, **kw)

    seen: list[str] = []
    h.indexer.sweep = swept  # type: ignore[method-assign]
    job = loop._next()
    assert job is not None and job.rebuild
    loop._run(job)
    while h.vectors.embed_pending():
        pass
    cli.join(60)
    assert codes == [0]
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["files"] == files + 1
    assert "a rebuild is under way" in seen[0] and "every chunk has a vector" not in seen[0], seen[0]
    assert "a rebuild is under way" not in render_status(server.call("health"))


def test_index_returns_once_its_own_sweep_is_done_on_a_busy_daemon(
    serve_in_process: Any, vault: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index` through a daemon that is never idle (a note saved over and over keeps a
    sweep running, chunks wait for their vectors that no backfill computes): it returns once the
    sweep it asked for is done and the vectors stop coming, and says in words what still goes on
    (it waited for an idle daemon with no vector pending: for good)."""
    from sidecar.clients import cli_admin
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser

    monkeypatch.setattr(cli_admin, "VECTOR_STALL_S", 0.0)  # no vector comes here: given up at once

    server = serve_in_process()
    h = server.harness
    loop = index_loop_of(server)
    write(vault / "Later.md", "# Later\n\nRead by the sweep asked for; no backfill embeds it here.\n")
    busy, release = threading.Event(), threading.Event()
    health, index_files = server.handlers.health, h.indexer.index_files

    def after_the_asked_sweep(req: Any) -> dict[str, Any]:  # the next sweep is under way by then
        if loop.asked_done:
            busy.wait(30)
        return health(req)

    def held(notes: Any, data: Any = None) -> int:  # the hot note's sweep: it runs on and on
        if any(n.key == "vault/Hot" for n in notes):
            busy.set()
            release.wait(60)
        return index_files(notes, data)

    server.handlers._ops["health"] = after_the_asked_sweep
    codes: list[int] = []
    cli = threading.Thread(
        target=lambda: codes.append(command_for("index")(build_parser().parse_args(["index"]), server.cfg)),
        daemon=True,
    )
    cli.start()
    _until(lambda: not loop.jobs.empty())  # the sweep asked for is queued
    job = loop._next()
    assert job is not None
    loop._run(job)
    write(vault / "Hot.md", "# Hot\n\nSaved every second.\n")
    h.indexer.index_files = held  # type: ignore[method-assign]
    hot = threading.Thread(
        target=lambda: h.indexer.sweep(only=frozenset(), paths={str(vault / "Hot.md")}), daemon=True
    )
    hot.start()
    cli.join(30)
    waited = cli.is_alive()
    release.set()
    hot.join(30)
    assert not waited and codes == [0]
    err = capsys.readouterr().err
    assert "(through the daemon)" in err
    assert "note: the daemon goes on with changes made since (0 of 1)" in err, err
    assert "chunks still wait for their vectors, computed in the background (no progress for 0 s" in err, err


def test_index_waits_for_the_vectors_of_its_sweep(
    serve_in_process: Any, vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index && sidecar search ...`: after its own sweep the command waits while the
    model is ok until no chunk waits for a vector (it returned with them still waiting, and the
    search right after found the new note by its words only)."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser

    server = serve_in_process()
    h = server.harness
    loop = index_loop_of(server)
    write(vault / "Fresh.md", "# Fresh\n\nA note the sweep asked for reads; its vectors come later.\n")
    health = server.handlers.health
    seen: list[int] = []

    def backfill_after_a_look(req: Any) -> dict[str, Any]:  # the backfill, once the command waits
        answer = health(req)
        if loop.asked_done and seen:
            while h.vectors.embed_pending():
                pass
            answer = health(req)
        if loop.asked_done:
            seen.append(answer["index"]["pending_vectors"])
        return answer

    server.handlers._ops["health"] = backfill_after_a_look
    codes: list[int] = []
    args = build_parser().parse_args(["index", "--json"])
    cli = threading.Thread(target=lambda: codes.append(command_for("index")(args, server.cfg)), daemon=True)
    cli.start()
    _until(lambda: not loop.jobs.empty())
    job = loop._next()
    assert job is not None
    loop._run(job)
    cli.join(30)
    assert codes == [0] and seen[0] > 0
    out, err = capsys.readouterr()
    assert json.loads(out)["pending_vectors"] == 0, out
    assert "computing the vectors of" in err and "still wait" not in err, err


def test_only_index_requests_are_numbered(serve_in_process: Any) -> None:
    """``asked_done`` counts the `index` requests, as protocol.md says and its name and the
    ticket promise: the daemon's own sweeps (the schedule's, the start's) took numbers from the
    same sequence, and a first `index` request got ticket 3 and saw ``asked_done`` move with
    sweeps nobody asked for."""
    server = serve_in_process()
    loop = index_loop_of(server)
    loop.schedule_sweep()  # the start's sweep
    loop.schedule_sweep(audit=False)  # a reload's new exclusions
    for _ in range(2):
        job = loop.jobs.get_nowait()
        assert job.ticket == 0
        loop._run(job)
    assert server.call("health")["index"]["asked_done"] == 0
    ticket = server.call("index")["ticket"]
    assert ticket == 1
    job = loop._next()
    assert job is not None
    loop._run(job)
    assert server.call("health")["index"]["asked_done"] == 1


def test_sweep_requests_are_queued_in_the_order_of_their_tickets(make_cfg: Any, vault: Path) -> None:
    """A request numbered before another but queued after it (another thread between the number
    and the put): the loop could run the later one alone and count the earlier done, and
    `sidecar index --rebuild` returned before its rebuild. Numbered and queued under one lock."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        real_put = loop.jobs.put
        other = threading.Thread(target=loop.request_sweep)

        def put(job: Job, *a: Any, **k: Any) -> None:
            if not other.is_alive() and other.ident is None:  # the first put: another asks now
                other.start()
                other.join(0.5)  # it queues at once unless the number and the put are one step
            real_put(job, *a, **k)

        loop.jobs.put = put  # type: ignore[method-assign]
        first = loop.request_sweep(rebuild=True)
        other.join(10)
        queued = [loop.jobs.get_nowait().ticket for _ in range(2)]
        assert queued == [first, first + 1]
    finally:
        h.close()


def test_a_rebuild_without_room_for_its_copy_at_its_turn_ends_and_its_sweep_runs(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk filled between the request's room check and the rebuild's copy: the rebuild
    ends with nothing emptied, status says why (`index --rebuild` exits 7 with it), and the
    job's sweep runs as one without a rebuild (was: retried as a failed sweep every few seconds
    with every later sweep merged into it: nothing was indexed until the copy had room)."""
    import sqlite3

    from sidecar.clients.cli_admin import _rebuild_unfinished
    from sidecar.stores.manifest import Manifest

    def full(self: Manifest, db: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        ticket = loop.request_sweep(rebuild=True)
        monkeypatch.setattr(Manifest, "set_aside", full)
        write(vault / "Later.md", "# Later\n\nwritten while the disk had no room for the copy\n")
        job = loop._next()
        assert job is not None and job.rebuild
        loop._run(job)
        assert set(h.stores.manifest.file_states("vault/")) == keys | {"vault/Later"}
        assert loop.asked_done == ticket and not loop.rebuilding()
        problem = h.problems.active_in(REBUILD_AREA, subject=REFUSED)
        assert problem is not None and problem["error"].startswith("not rebuilt: the disk of the index")
        assert "Nothing was changed" in problem["error"]
        assert _rebuild_unfinished(problem["error"]) == 7
        said = capsys.readouterr().err.splitlines()  # the log's lines may come before it
        assert said[-1].startswith("not rebuilt: the disk of the index")
    finally:
        h.close()


def test_a_rebuild_whose_sweep_failed_reads_on_without_emptying_the_index_again(
    make_cfg: Any, vault: Path
) -> None:
    """A rebuild whose sweep failed after it emptied the index (a full disk) is retried as the
    sweep it was, not emptied again (was: each retry emptied the index again, and with no room
    for a second copy ended as "not rebuilt ... Nothing was changed" half done)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        ticket = loop.request_sweep(rebuild=True)
        real_clear, real_index, cleared = h.indexer.clear, h.indexer.index_files, [0]

        def clear(begun: Any = None) -> None:
            cleared[0] += 1
            real_clear(begun)

        def full(*_a: Any, **_k: Any) -> int:
            raise StoreError("database or disk is full")

        h.indexer.clear = clear  # type: ignore[method-assign]
        h.indexer.index_files = full  # type: ignore[method-assign]
        job = loop._next()
        assert job is not None
        with pytest.raises(StoreError) as failed:
            loop._run(job)
        loop._failed(job, failed.value, 0.0)
        h.indexer.index_files = real_index  # type: ignore[method-assign]
        retry = loop._next()
        assert retry is not None and not retry.rebuild and retry.ticket == ticket
        assert loop.rebuilding() and not loop.rebuild_queued()
        loop._run(retry)
        assert cleared[0] == 1 and loop.asked_done == ticket
        assert set(h.stores.manifest.file_states("vault/")) == keys
        assert not h.stores.manifest.has_aside()
    finally:
        h.close()


def test_a_removal_that_fails_is_said_in_status_until_a_sweep_removes_the_notes(
    make_cfg: Any, tmp_path: Path
) -> None:
    """The notes a reload newly excludes could not be removed (a full disk): the reload said so
    in its answer only, and status said nothing while search still found them."""
    from sidecar.contracts.errors import StoreError

    v = tmp_path / "v"
    write(v / "Private/p.md", "# P\n\nThe secret diary of the lighthouse keeper.\n")
    write(v / "Open.md", "# Open\n\nThe public history of the harbour.\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    real = h.indexer.delete

    def full(_keys: Any) -> None:
        raise StoreError("database or disk is full")

    try:
        h.sweep()
        assert h.indexer.set_excludes(["Private/"], True)
        h.indexer.delete = full  # type: ignore[method-assign]
        with pytest.raises(StoreError):
            h.indexer.remove_excluded()
        problem = next(p for p in h.problems.active() if p["area"] == "exclusions")
        assert "could not be removed" in problem["error"] and "search may still find them" in problem["error"]
        h.indexer.delete = real  # type: ignore[method-assign]
        h.sweep()
        assert not h.stores.manifest.file_states_of(["vault/Private/p"])
        assert not [p for p in h.problems.active() if p["area"] == "exclusions"]
    finally:
        h.close()


def test_a_rebuild_whose_clear_failed_is_not_said_under_way(make_cfg: Any, vault: Path) -> None:
    """Emptying the index for a rebuild failed (a full disk): nothing was emptied, and the rebuild
    is still queued, not said begun (status read "a rebuild is under way")."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.request_sweep(rebuild=True)

        def clear(begun: Any = None) -> None:  # fails before the manifest is emptied: never begun
            raise StoreError("BM25 commit failed: No space left on device")

        h.indexer.clear = clear  # type: ignore[method-assign]
        job = loop._next()
        assert job is not None and job.rebuild
        with pytest.raises(StoreError):
            loop._run(job)
        assert loop.rebuilding() and loop.rebuild_queued()
    finally:
        h.close()
