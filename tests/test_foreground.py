"""Searches first: the foreground count and its bounded wait, group commit of queued writers, and a
memory write's embedding (the duplicate check's vectors reused, the backfill kept off its chunks),
over real stores with the fake embedder."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest

from sidecar.index.records import Drafted, draft, finish
from sidecar.runtime.foreground import FOREGROUND, Foreground
from sidecar.runtime.group import GroupCommit
from sidecar.vault.sources import NoteFile, Root
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search, store_counts


def _until(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_yield_waits_for_requests_in_flight_and_no_longer_than_its_bound() -> None:
    fg = Foreground()
    assert fg.yield_to(5.0) == 0.0  # nothing in flight: no wait at all
    release = threading.Event()

    def request() -> None:
        with fg.serving():
            release.wait(10)

    t = threading.Thread(target=request)
    t.start()
    _until(lambda: fg.active == 1)
    t0 = time.monotonic()
    assert fg.yield_to(0.2) >= 0.2  # still in flight at the bound: the work goes on anyway
    assert fg.overrun == 1
    timer = threading.Timer(0.1, release.set)
    timer.start()
    waited = fg.yield_to(5.0)  # ends when the request does, long before the bound
    t.join()
    assert 0.05 <= waited < 2.0
    assert time.monotonic() - t0 < 3.0
    assert fg.active == 0 and fg.yields == 2 and fg.overrun == 1


def test_queued_callers_share_one_run_in_order_and_conflicts_do_not() -> None:
    lock = threading.RLock()
    group: GroupCommit[str] = GroupCommit(lock)
    runs: list[list[str]] = []
    items = ["a", "b", "c", "a2", "d"]
    keys = {"a": ["k1"], "b": ["k2"], "c": ["k3"], "a2": ["k1"], "d": ["k4"]}
    threads = []
    with lock:  # every caller queues behind the lock
        for n, it in enumerate(items, 1):
            t = threading.Thread(target=group.run, args=(it, keys[it], runs.append))
            t.start()
            threads.append(t)
            _until(lambda n=n: len(group._queue) == n)
    for t in threads:
        t.join(10)
    # The first run takes the queue up to the item that shares k1 with "a"; the rest follow.
    assert runs == [["a", "b", "c"], ["a2", "d"]]
    assert (group.runs, group.items) == (2, 5)


def test_an_error_of_a_shared_run_reaches_every_caller_in_it() -> None:
    lock = threading.Lock()
    group: GroupCommit[int] = GroupCommit(lock)
    errors: list[BaseException] = []

    def fail(_batch: list[int]) -> None:
        raise OSError("disk full")

    def call(i: int) -> None:
        try:
            group.run(i, [i], fail)
        except OSError as exc:
            errors.append(exc)

    with lock:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for n, t in enumerate(threads, 1):
            t.start()
            _until(lambda n=n: len(group._queue) == n)
    for t in threads:
        t.join(10)
    assert len(errors) == 3 and group.runs == 1


def _note(h: Harness, slug: str, text: str) -> Any:
    root = Root("memory", h.cfg.agents_dir / "bot" / "memory", agent="bot")
    root.path.mkdir(parents=True, exist_ok=True)
    path = root.path / f"{slug}.md"
    data = text.encode()
    path.write_bytes(data)  # a memory write's file is there before its entry (a note without one is skipped)
    note = NoteFile(root.key_of(f"{slug}.md"), root, path, f"{slug}.md", time.time_ns(), len(data))
    d = draft(note, None, data, h.cfg.index.max_file_bytes)
    assert isinstance(d, Drafted)
    return finish(h.cfg, d, h.indexer._count_tokens)


def _count_commits(harness: Harness) -> list[int]:
    """Count the keyword index's commits from now on (one element, updated in place)."""
    commits = [0]
    real_commit = harness.stores.bm25.commit

    def counting() -> None:
        commits[0] += 1
        real_commit()

    harness.stores.bm25.commit = counting  # type: ignore[method-assign]
    return commits


def test_writers_queued_behind_the_lock_share_one_commit(harness: Harness) -> None:
    """Four memory notes written while the lock is held: one Tantivy commit for all of them, and
    each call returns with its note committed (keyword-searchable)."""
    harness.sweep()
    writer = harness.indexer.writer
    commits = _count_commits(harness)
    notes = [_note(harness, f"n{i}", f"# N{i}\n\nqueued note zq{i}x about kayaks\n") for i in range(4)]
    with harness.stores.write_lock:
        threads = [threading.Thread(target=writer.write, args=([p],)) for p in notes]
        for n, t in enumerate(threads, 1):
            t.start()
            _until(lambda n=n: len(writer.group._queue) == n)
    for t in threads:
        t.join(10)
    assert commits == [1]
    states = harness.stores.manifest.file_states_of([p.note.key for p in notes])
    assert [states[p.note.key].state for p in notes] == ["indexed"] * 4
    for i in range(4):
        assert harness.stores.bm25.search(f"zq{i}x", 5)  # committed on return


def test_a_note_indexed_meanwhile_with_the_same_bytes_is_not_written_again(harness: Harness) -> None:
    """A memory write and the sweep of its own file event prepare the same bytes: the second one
    to get the lock writes nothing (no second commit), whichever it is."""
    harness.sweep()
    commits = _count_commits(harness)
    text = "# Twice\n\nprepared twice, written once\n"
    first, second = _note(harness, "twice", text), _note(harness, "twice", text)
    harness.indexer.writer.write([first])
    harness.indexer.writer.write([second])
    assert commits == [1]
    changed = _note(harness, "twice", text + "\nand then edited\n")
    harness.indexer.writer.write([changed])
    assert commits == [2]
    assert harness.stores.manifest.file_states_of([changed.note.key])[changed.note.key].hash == changed.hash


@pytest.fixture
def mem(serve_in_process: Any) -> Any:
    server = serve_in_process()
    model = server.harness.slot.model
    assert isinstance(model, FakeEmbedder)
    return server, model


def test_a_memory_write_embeds_its_note_once(mem: Any) -> None:
    """The duplicate check's vectors are the note's own: the model runs once per chunk text, and
    the note is searchable by meaning on return."""
    server, model = mem
    model.embedded.clear()
    with server.client(agent="bot") as c:
        text = "# Kayak\n\nThe red kayak leaks at the bow seam.\n"
        out = c.call("write", {"slug": "kayak", "content": text})
    assert out["searchable"] and out["searchableBy"] == ["keywords", "meaning"]
    texts = [t for t in model.embedded if "kayak leaks" in t]
    assert len(texts) == 1, model.embedded
    assert server.harness.vectors.expected_used == 1
    chunks, docs, vectors = store_counts(server.harness)
    assert chunks == docs == vectors


def test_the_backfill_leaves_a_writes_own_chunks_alone(harness: Harness) -> None:
    harness.sweep()
    vectors = harness.vectors
    p = _note(harness, "late", "# Late\n\nwritten and not embedded yet\n")
    with vectors.expect(p.note.key):
        harness.indexer.writer.write([p])
        assert vectors.embed_pending() == 0  # the write embeds it itself
    assert vectors.embed_pending() == 1  # once the claim is gone, the backfill would


def test_a_memory_write_yields_to_a_search_in_flight_and_still_completes(mem: Any) -> None:
    """While a search is in flight the write waits at its checkpoints, bounded: it returns
    searchable all the same, and a search answers meanwhile."""
    server, _model = mem
    before = FOREGROUND.yields
    release = threading.Event()

    def search_in_flight() -> None:
        with FOREGROUND.serving():
            release.wait(10)

    holder = threading.Thread(target=search_in_flight)
    holder.start()
    _until(lambda: FOREGROUND.active >= 1)
    try:
        t0 = time.monotonic()
        with server.client(agent="bot") as c:
            out = c.call("write", {"slug": "held", "content": "# Held\n\nwritten behind a search\n"})
            took = time.monotonic() - t0
            assert c.call("search", {"query": "written behind a search"})["hits"]
            shown = c.call("health")["foreground"]
    finally:
        release.set()
        holder.join()
    assert out["searchable"] and out["searchableBy"] == ["keywords", "meaning"]
    assert FOREGROUND.yields > before
    assert shown["yields"] > before and shown["active"] >= 1 and shown["waited_seconds"] > 0
    assert 0.5 <= took < 10.0  # waited at least one checkpoint's bound, not forever
    assert search(server.harness, "written behind a search")


def test_a_write_is_not_foreground_and_does_not_wait_for_itself(mem: Any) -> None:
    server, _model = mem
    before = FOREGROUND.yields
    with server.client(agent="bot") as c:
        c.call("write", {"slug": "alone", "content": "# Alone\n\nno search in flight\n"})
    assert FOREGROUND.yields == before and FOREGROUND.active == 0


def test_searches_do_not_wait_for_the_manifest_while_vectors_are_added(harness: Harness) -> None:
    """The vector table's add (and any compaction it runs) happens outside the manifest's
    transaction: a search's manifest read during it answers at once."""
    harness.sweep()
    store = harness.stores.vectors
    assert store is not None
    some = sorted(harness.stores.manifest.all_chunk_ids())[:3]
    real_add = store.add
    reads: list[float] = []

    def add_while_reading(rows: Any, vecs: Any) -> None:
        reader = threading.Thread(target=lambda: reads.append(len(harness.stores.manifest.views(some))))
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "a manifest read waited for the vector add"
        real_add(rows, vecs)

    store.add = add_while_reading  # type: ignore[method-assign]
    write(harness.cfg.vault.path / "Added.md", "# Added\n\nnew words for the table\n")  # type: ignore[operator]
    harness.sweep()
    assert reads == [3]
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors


def test_a_crash_between_the_vector_add_and_its_flags_leaves_no_second_vector(harness: Harness) -> None:
    """Rows added, flags not committed (the process died, or the manifest failed): the reconcile
    (the next start's, or the next write's) flags them; no chunk gets a second vector."""
    harness.sweep()
    manifest = harness.stores.manifest
    real = manifest.set_has_vector

    def dies(*_a: Any, **_k: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    manifest.set_has_vector = dies  # type: ignore[method-assign]
    write(harness.cfg.vault.path / "Added.md", "# Added\n\nwords whose flags never land\n")  # type: ignore[operator]
    harness.indexer.sweep()
    with pytest.raises(sqlite3.OperationalError):
        harness.vectors.embed_pending()
    manifest.set_has_vector = real  # type: ignore[method-assign]
    store = harness.stores.vectors
    assert store is not None and manifest.pending_count() == 1
    assert len(store.id_list()) == len(manifest.all_chunk_ids())  # the row landed
    harness.vectors.attach(store, harness.slot.model)  # what the next start does
    assert manifest.pending_count() == 0
    listed = store.id_list()
    assert len(listed) == len(set(listed)) == len(manifest.all_chunk_ids())
    assert harness.vectors.embed_pending() == 0


def test_a_search_reads_views_without_waiting_for_a_transaction_and_sees_each_commit(
    harness: Harness,
) -> None:
    """Chunk views come from the reader's own connection: a transaction held open does not delay
    them (they show the last commit), and every commit is seen by the next read of the same thread
    (no read keeps an old snapshot)."""
    harness.sweep()
    manifest = harness.stores.manifest
    view = next(iter(manifest.views(sorted(manifest.all_chunk_ids())[:1]).values()))
    asks: list[str] = []
    answers: list[str] = []
    ready, answered = threading.Semaphore(0), threading.Semaphore(0)

    def reader() -> None:  # one thread, so one connection, for every read below
        while True:
            ready.acquire()
            if not asks:
                return
            asks.pop()
            answers.append(manifest.views([view.chunk_id])[view.chunk_id].title)
            answered.release()

    def read() -> str:
        asks.append("read")
        ready.release()
        assert answered.acquire(timeout=5), "the read waited for the transaction"
        return answers.pop()

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert read() == view.title
        for n in range(5):
            with manifest.transaction() as db:
                db.execute("UPDATE files SET title = ? WHERE key = ?", (f"Title {n}", view.key))
                assert read() == (f"Title {n - 1}" if n else view.title)  # the last commit
            assert read() == f"Title {n}"  # committed: seen at once
    finally:
        ready.release()
        t.join(5)


def test_a_memory_writes_own_embedding_is_counted_as_texts_embedded(mem: Any) -> None:
    """The model runs once for a memory write (its duplicate check, whose vector the indexing
    takes): the write's tally counts that text as embedded by the model, not as reused."""
    from sidecar.index.vector_embed import WRITE_RUN

    server, model = mem
    vectors = server.harness.vectors
    before = vectors.counts(WRITE_RUN)
    embedded_before = vectors.embedded
    model.embedded.clear()
    with server.client(agent="bot") as c:
        c.call("write", {"slug": "kayak", "content": "# Kayak\n\nThe red kayak leaks at the bow seam.\n"})
    ran = len([t for t in model.embedded if "kayak leaks" in t])
    after = vectors.counts(WRITE_RUN)
    texts = sum(v[0] for v in after.values()) - sum(v[0] for v in before.values())
    stored = sum(v[1] for v in after.values()) - sum(v[1] for v in before.values())
    assert (ran, stored) == (1, 1)
    assert texts == ran, (texts, stored)
    assert vectors.embedded - embedded_before == ran
