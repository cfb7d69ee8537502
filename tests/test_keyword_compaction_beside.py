"""The compaction of a large vault's keyword index, refilled beside the one that answers and
swapped in (``repair.compact_bm25`` -> ``index.beside``): it runs once a fifth of the index is
deleted, the write lock is free while it fills, the notes written meanwhile are in the new index,
and a stop or a kill during it leaves a whole index and no side folder."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write
from tests.index_helpers import made_idle

NOTES = 30
QUERIES = ("tomatoes sun", "lantern harbour", "outboard engine", "backup night")


@pytest.fixture
def large(in_process: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The small vault with ``NOTES`` more notes, taken for a large one (its index holds more
    than ``_SHARED_SMALL`` live documents), and alpha's memory."""
    from sidecar.index import repair

    s = in_process
    for i in range(NOTES):
        write(s.cfg.vault.path / f"Log/Note{i}.md", f"# Note {i}\n\nThe lantern {i} by the harbour, zq{i}.\n")
    s.harness.sweep()
    s.call("write", {"slug": "note-0", "content": "The backup runs at three in the night."}, agent="alpha")
    s.call("search", {"query": "backup"}, agent="alpha")  # alpha's own index made
    monkeypatch.setattr(repair, "_SHARED_SMALL", 10)
    return s


def _delete(s: Any, first: int, last: int) -> None:
    for i in range(first, last):
        (s.cfg.vault.path / f"Log/Note{i}.md").unlink()
    s.harness.sweep()


def _scores(bm25: Any) -> list[list[tuple[str, float]]]:
    return [
        sorted((cid, round(score, 5)) for cid, score in bm25.search(q, 20, agent_scope=agent))
        for q in QUERIES
        for agent in ("alpha", None)
    ]


def _dropped(stores: Any) -> None:
    """A refill given up at a stop ended (the step left running, the new index closed, the side
    folder removed in their own thread): the refill lock free again."""
    assert stores.beside_lock.acquire(timeout=60)
    stores.beside_lock.release()


def _agrees(stores: Any) -> bool:
    bm25, manifest = stores.bm25, stores.manifest
    return (bm25.num_docs(), bm25.num_pages()) == (
        manifest.indexed_chunk_count(),
        manifest.indexed_page_count(),
    )


def test_a_large_vault_index_is_refilled_beside_once_a_fifth_is_deleted(large: Any) -> None:
    """A large vault's index waited until half of it was deleted (its scores drifting all along:
    a rewrite in place held every write for ~40 s at 27,000 documents). Refilled beside, it is
    rewritten once a fifth is: then it holds no deleted document, scores as a rebuild, and no
    side folder is left."""
    from sidecar.index.repair import compact_bm25, rebuild_bm25

    s = large
    stores = s.harness.stores
    old = stores.bm25
    deleted, total = old.deleted_docs()
    assert deleted == 0
    n = 0
    while (deleted + 2) * 5 < total:  # each note deleted: its chunk and its page
        _delete(s, n, n + 1)
        n += 1
        deleted, total = old.deleted_docs()
    assert deleted > 0 and deleted * 5 < total
    assert compact_bm25(stores) is False  # under a fifth
    _delete(s, n, n + 2)
    deleted, total = old.deleted_docs()
    assert deleted * 5 >= total and deleted * 2 < total  # a fifth, far from half
    assert compact_bm25(stores) is True
    assert stores.bm25 is not old and stores.bm25.deleted_docs()[0] == 0
    assert _agrees(stores)
    index_dir = s.cfg.index_dir
    assert sorted(p.name for p in index_dir.glob("bm25*")) == ["bm25"]
    after = _scores(stores.bm25)
    assert any(after)
    rebuild_bm25(stores)
    assert _scores(stores.bm25) == after


def test_writes_during_the_refill_beside_do_not_wait_and_are_in_the_new_index(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the new index is filled the write lock is free: a sweep's edit and deletion and a
    memory write made then go to the old index, are searchable there at once, and are written
    into the new one at the swap (as the manifest holds them then)."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real = beside.fill_bm25
    seen: dict[str, Any] = {}

    def writes() -> None:
        seen["lock_free"] = stores.write_lock.acquire(blocking=False)
        if seen["lock_free"]:
            stores.write_lock.release()
        write(s.cfg.vault.path / "Log/Note20.md", "# Note 20\n\nThe lantern now by the mill, zqnew.\n")
        (s.cfg.vault.path / "Log/Note21.md").unlink()
        s.harness.sweep()
        s.call("write", {"slug": "late", "content": "Quince jelly for the winter."}, agent="alpha")
        seen["old_finds"] = bool(stores.bm25.search("zqnew", 5))

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real(index, manifest, stop, progress)
        other = threading.Thread(target=writes)  # the watcher's and a memory write's threads
        other.start()
        other.join(60)
        assert not other.is_alive()

    monkeypatch.setattr(beside, "fill_bm25", fill)
    assert compact_bm25(stores) is True
    assert seen == {"lock_free": True, "old_finds": True}
    bm25 = stores.bm25
    # Deleted: only the two notes' documents the catch-up replaced (24 before the refill).
    assert bm25.deleted_docs()[0] == 4 and _agrees(stores)
    note = {v.chunk_id for v in stores.manifest.chunks_of("vault/Log/Note20")}
    assert {cid for cid, _ in bm25.search("zqnew", 5)} == note
    assert not bm25.search("zq21", 5) and not bm25.search("zq20", 5)
    assert bm25.search("quince jelly", 5, agent_scope="alpha")


def test_a_stop_or_a_kill_during_the_refill_beside_leaves_a_whole_index(
    large: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stop during the fill (the schedule's shutdown) returns with the old index answering and
    the side folder removed; a kill there leaves the old index whole, and the next start's
    settle removes the side folder (no copy left growing)."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import open_bm25
    from sidecar.stores.bm25_side import settle
    from tests.test_memory_compaction import _copy_as_killed

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    before, deleted = _scores(old), old.deleted_docs()
    stop = threading.Event()
    real = beside.fill_bm25

    def stopped(index: Any, manifest: Any, stop_: Any = None, progress: Any = None) -> None:
        stop.set()  # the stop comes as the fill begins; the fill looks at it at each chunk
        real(index, manifest, stop_, progress)

    monkeypatch.setattr(beside, "fill_bm25", stopped)
    assert compact_bm25(stores, stop) is False
    _dropped(stores)
    assert stores.bm25 is old and _scores(old) == before and old.deleted_docs() == deleted
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
    s.call("write", {"slug": "after", "content": "Written after the stop."}, agent="alpha")
    assert old.search("written stop", 5, agent_scope="alpha")  # it takes writes as ever
    assert old._changed is None  # no more noting
    before = _scores(old)
    killed = tmp_path / "killed"

    def kill(index: Any, manifest: Any, stop_: Any = None, progress: Any = None) -> None:
        real(index, manifest, stop_, progress)  # the side folder filled, not swapped in
        _copy_as_killed(s.cfg.index_dir, killed)
        raise KeyboardInterrupt

    monkeypatch.setattr(beside, "fill_bm25", kill)
    with pytest.raises(KeyboardInterrupt):
        compact_bm25(stores)
    assert (killed / "bm25.next").is_dir()  # as the kill left it
    settle(killed)
    assert sorted(p.name for p in killed.glob("bm25*")) == ["bm25"]
    reopened = open_bm25(killed / "bm25")
    try:
        assert _scores(reopened) == before
    finally:
        reopened.close()
    assert stores.bm25 is old and _scores(old) == before  # the running index too


def test_the_refill_beside_keeps_the_agents_indexes_as_they_were(large: Any) -> None:
    """The refill beside rewrites the memory indexes with the vault's: an agent's own index keeps
    its time of last use (taken for used at each compaction, an idle agent's index was never
    removed), and one removed as idle is not made again (its agent's memory stays in the index
    of every agent's memory; it is rebuilt when the agent is back)."""
    from sidecar.index.repair import compact_bm25

    s = large
    s.call("write", {"slug": "note-1", "content": "Beta keeps the rope in the shed."}, agent="beta")
    s.call("search", {"query": "rope"}, agent="beta")
    stores = s.harness.stores
    bm25 = stores.bm25
    base = s.cfg.index_dir / "bm25" / "memory" / "alpha"
    aged = made_idle(s, "alpha")
    bm25._used_at.clear()
    bm25._used_at["beta"] = time.time()  # beta just searched: not idle
    assert bm25.remove_idle(30 * 86400) == ["alpha"]
    assert not base.exists()
    beta = s.cfg.index_dir / "bm25" / "memory" / "beta" / "chunks" / "meta.json"
    os.utime(beta, (aged, aged))
    _delete(s, 0, 12)
    assert compact_bm25(stores) is True
    new = stores.bm25
    assert new is not bm25
    assert not base.exists() and new.inbox_missing("alpha")  # rebuilt when alpha is back
    assert beta.stat().st_mtime == pytest.approx(aged, abs=1)
    assert new.search("rope shed", 5, agent_scope="beta")
    assert new.search("backup night", 5)  # a person's search finds alpha's memory


def test_health_and_status_say_a_compaction_beside_runs(large: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """For minutes at 60,000 documents the disk holds a second copy and writes are slower: health
    says the rewrite runs (its phase and the chunks filled of all) and status says it in words;
    both say nothing once it ends. Health said nothing of it."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real = beside.fill_bm25
    seen: list[Any] = []

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real(index, manifest, stop, progress)
        health = s.call("health")  # from another thread, through the daemon's handlers
        seen.append(health["index"]["keyword_compaction"])
        seen.append(render_status(health))

    monkeypatch.setattr(beside, "fill_bm25", fill)
    assert compact_bm25(stores) is True
    total = stores.manifest.indexed_chunk_count()
    assert seen[0] == {"phase": "filling", "done": total, "total": total}
    assert (
        f"rewriting the keyword index beside the live one ({total:,} of {total:,} chunks); searches "
        "answer from the live index" in seen[1]
    )
    health = s.call("health")
    assert health["index"]["keyword_compaction"] is None
    assert "rewriting the keyword index" not in render_status(health)


# The steps of a refill beside, in their order, as ``_recorded`` names them: (step, its nth call).
_BEFORE_THE_RENAMES = [
    ("commit new", 1),  # the fill's final commit
    ("catch_up", 1),  # the notes written during the fill, no lock held
    ("commit new", 2),
    ("close new", 1),  # waits for the fill's merges
    ("open new", 2),  # the reopen
    ("catch_up", 2),  # under the write lock, at the swap
    ("commit new", 3),
    ("inboxes", 1),
    ("close new", 2),
]
# Steps a stop must not reach once asked before the renames (closing the new index is its
# clean-up).
_NOT_AFTER_A_STOP = {"fill", "catch_up", "commit new", "open new", "inboxes", "close old", "swap_out"}


def _recorded(
    monkeypatch: pytest.MonkeyPatch, stores: Any, at: tuple[str, int], stop: threading.Event
) -> list[str]:
    """The refill's steps as they are called, the stop set as the step ``at`` ends (a stop asked
    while it ran: no timing)."""
    from sidecar.index import beside
    from sidecar.stores.bm25 import Bm25Index

    old = stores.bm25
    steps: list[str] = []  # each step as it begins; "stop" where the stop was set

    def wrapped(name: str, real: Any, of_new: bool = False) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            # A method's: the old index's or the new one's.
            called = f"{name} {'old' if args[0] is old else 'new'}" if of_new else name
            steps.append(called)
            nth = steps.count(called)
            got = real(*args, **kwargs)
            if (called, nth) == at:
                steps.append("stop")
                stop.set()
            return got

        return call

    def opened(path: Any, **kwargs: Any) -> Any:
        return wrapped("open new", Bm25Index)(path, **kwargs)

    monkeypatch.setattr(beside, "fill_bm25", wrapped("fill", beside.fill_bm25))
    monkeypatch.setattr(beside, "catch_up", wrapped("catch_up", beside.catch_up))
    monkeypatch.setattr(beside, "swap_out", wrapped("swap_out", beside.swap_out))
    monkeypatch.setattr(beside, "Bm25Index", opened)
    monkeypatch.setattr(Bm25Index, "commit", wrapped("commit", Bm25Index.commit, of_new=True))
    monkeypatch.setattr(Bm25Index, "close", wrapped("close", Bm25Index.close, of_new=True))
    monkeypatch.setattr(Bm25Index, "inboxes_as_in", wrapped("inboxes", Bm25Index.inboxes_as_in))
    return steps


@pytest.mark.parametrize("at", _BEFORE_THE_RENAMES, ids=[f"{n} {i}" for n, i in _BEFORE_THE_RENAMES])
def test_a_stop_during_any_step_before_the_renames_ends_the_refill_there(
    large: Any, monkeypatch: pytest.MonkeyPatch, at: tuple[str, int]
) -> None:
    """A stop asked while a step of the refill runs (the fill's final commit, the catch-up, its
    commit, the close that waits for merges, the reopen, the swap's catch-up and commit) ends
    it as that step ends: no later step begins, the side folder is dropped and the old index
    answers, whole. It went on to the catch-up, its commit, the reopen and the swap (26.8 s
    after a stop at the fill's commit on a loaded machine, against the stop's 10 s)."""
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    stop = threading.Event()
    steps = _recorded(monkeypatch, stores, at, stop)
    assert compact_bm25(stores, stop) is False
    _dropped(stores)
    assert "stop" in steps
    assert not set(steps[steps.index("stop") :]) & _NOT_AFTER_A_STOP, steps
    assert stores.bm25 is old and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
    stop.clear()
    assert compact_bm25(stores, stop) is True  # the next run does it
    assert stores.bm25 is not old and _agrees(stores)


def test_a_stop_once_the_old_index_is_closed_lets_the_swap_end(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the old index is closed the swap is not given up at a stop (its renames are short;
    a kill among them is finished by the next start): the new index answers."""
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    stop = threading.Event()
    steps = _recorded(monkeypatch, stores, ("close old", 1), stop)
    assert compact_bm25(stores, stop) is True
    assert "swap_out" in steps and stores.bm25 is not old and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]


# A write made at any point of the refill is in the new index; a kill or a full disk loses none.


def _writes(s: Any) -> None:
    write(s.cfg.vault.path / "Log/Note20.md", "# Note 20\n\nThe lantern now by the mill, zqnew.\n")
    (s.cfg.vault.path / "Log/Note21.md").unlink()
    (s.cfg.vault.path / "Log/Note22.md").rename(s.cfg.vault.path / "Log/Moved22.md")
    s.harness.sweep()
    s.call("write", {"slug": "late", "content": "Quince jelly for the winter."}, agent="alpha")


def _check(s: Any) -> None:
    stores = s.harness.stores
    bm25 = stores.bm25
    assert _agrees(stores)
    note = {v.chunk_id for v in stores.manifest.chunks_of("vault/Log/Note20")}
    assert {cid for cid, _ in bm25.search("zqnew", 5)} == note
    assert not bm25.search("zq21", 5)
    moved = {v.chunk_id for v in stores.manifest.chunks_of("vault/Log/Moved22")}
    assert moved and {cid for cid, _ in bm25.search("zq22", 5)} == moved
    assert bm25.search("quince jelly", 5, agent_scope="alpha")
    assert bm25.search("quince jelly", 5)


def _write_lock_held(stores: Any) -> bool:
    """Whether some thread holds the stores' write lock (asked from a thread of its own)."""
    got: list[bool] = []

    def probe() -> None:
        if stores.write_lock.acquire(blocking=False):
            stores.write_lock.release()
            got.append(False)
        else:
            got.append(True)

    _threaded(probe)
    return got[0]


def _threaded(fn: Any) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join(60)
    assert not t.is_alive()


def test_writes_between_the_unlocked_catch_up_and_the_swap_are_in_the_new_index(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written while the new index is opened again after the catch-up made with no lock held:
    caught up at the swap."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real = beside.Bm25Index
    calls = []

    def opened(path: Path, *a: Any, **k: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:  # the reopen after the unlocked catch-up
            _threaded(lambda: _writes(s))
        return real(path, *a, **k)

    monkeypatch.setattr(beside, "Bm25Index", opened)
    assert compact_bm25(stores) is True
    assert len(calls) >= 2
    _check(s)


def test_writes_during_the_unlocked_catch_up_are_in_the_new_index(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written while the notes written during the fill are caught up with no lock held (one of
    them edited during the fill, then again): the later text is in the new index, not the first."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real_fill = beside.fill_bm25
    real_cu = beside.catch_up
    n: list[set[str]] = []

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop, progress)
        write(s.cfg.vault.path / "Log/Note20.md", "# Note 20\n\nfirst edit zqfirst.\n")
        _threaded(s.harness.sweep)

    def cu(new: Any, manifest: Any, keys: Any, *, everything: bool, stop: Any = None) -> None:
        n.append(set(keys))
        if len(n) == 1:
            _threaded(lambda: _writes(s))
        real_cu(new, manifest, keys, everything=everything, stop=stop)

    monkeypatch.setattr(beside, "fill_bm25", fill)
    monkeypatch.setattr(beside, "catch_up", cu)
    assert compact_bm25(stores) is True
    _check(s)
    assert not stores.bm25.search("zqfirst", 5)


def test_a_kill_between_the_renames_leaves_a_whole_index_for_the_next_start(
    large: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The folder as a kill between the swap's two renames leaves it: the next start's settle
    finishes the swap, and the new index holds the writes made during the fill."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import open_bm25
    from sidecar.stores.bm25_side import settle
    from tests.test_memory_compaction import _copy_as_killed

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real_fill = beside.fill_bm25
    killed = tmp_path / "killed"

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop, progress)
        _threaded(lambda: _writes(s))

    def swap_in(index_dir: Path) -> Path:
        _copy_as_killed(index_dir, killed)
        raise KeyboardInterrupt

    monkeypatch.setattr(beside, "fill_bm25", fill)
    monkeypatch.setattr(beside, "swap_in", swap_in)
    with pytest.raises(KeyboardInterrupt):
        compact_bm25(stores)
    settle(killed)
    assert sorted(p.name for p in killed.glob("bm25*")) == ["bm25"]
    idx = open_bm25(killed / "bm25")
    try:
        assert (idx.num_docs(), idx.num_pages()) == (
            stores.manifest.indexed_chunk_count(),
            stores.manifest.indexed_page_count(),
        )
        assert idx.search("quince jelly", 5, agent_scope="alpha")
        assert idx.search("zqnew", 5)
    finally:
        idx.close()


@pytest.mark.parametrize("error", ["StoreError", "OSError"])
def test_a_full_disk_during_the_fill_leaves_the_old_index_answering(
    large: Any, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    """No room while the new index is filled (told by the index, or by the file system as an
    OSError): the compaction fails, the old index answers and takes later writes, no side
    folder is left and nothing more is noted for a catch-up."""
    _full_disk_leaves_the_old_index(large, monkeypatch, "add", lambda: True, os_error=error == "OSError")


@pytest.mark.parametrize("failing", [2, 3], ids=["the catch-up's commit", "the swap's commit"])
def test_a_full_disk_at_a_commit_of_the_new_index_leaves_the_old_one_answering(
    large: Any, monkeypatch: pytest.MonkeyPatch, failing: int
) -> None:
    """No room at the catch-up's commit (no lock held) or the swap's (under the lock): the side
    folder goes and the old index answers and takes later writes."""
    n: list[int] = []

    def fails() -> bool:
        n.append(1)
        return len(n) == failing  # 1: the fill's, 2: the catch-up's, 3: the swap's

    _full_disk_leaves_the_old_index(large, monkeypatch, "commit", fails)


def _full_disk_leaves_the_old_index(
    s: Any,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    fails: Callable[[], bool],
    *,
    os_error: bool = False,
) -> None:
    """A compaction beside whose new index's ``method`` (``add``, ``commit``) finds no room
    where ``fails`` says (asked at each call on the new index, never the old one's; told by the
    index, or by the file system as an OSError when ``os_error``): it fails,
    the side folder goes, and the old index answers and takes later writes."""
    import errno

    from sidecar.contracts.errors import StoreError
    from sidecar.index.repair import compact_bm25
    from sidecar.stores import bm25 as bm25mod

    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    real = getattr(bm25mod.Bm25Index, method)

    def failing(self: Any, *a: Any, **k: Any) -> Any:
        if self is not old and fails():
            if os_error:
                raise OSError(errno.ENOSPC, "No space left on device")
            raise StoreError("No space left on device (os error 28)")
        return real(self, *a, **k)

    monkeypatch.setattr(bm25mod.Bm25Index, method, failing)
    with pytest.raises(StoreError):
        compact_bm25(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
    assert stores.bm25 is old and old._changed is None
    outcome, reason, _ = stores.keyword_compaction_last  # said by health and status
    assert outcome == "failed" and "No space left on device" in reason
    monkeypatch.setattr(bm25mod.Bm25Index, method, real)
    _writes(s)
    _check(s)


# A stop is not waited for: a step that waits on the disk is left to end in its own thread.

# (the step blocked, its nth call on the new index; where the stop is asked: "in it" while it
# runs, "before" as the step before it ends, so that it is the abandoned index's close).
_BLOCKED = [
    ("commit", 1, "in it"),  # the fill's final commit (12.9 s measured under load)
    ("close", 1, "in it"),  # the catch-up's close, waiting for the fill's merges
    ("commit", 3, "in it"),  # the swap's commit, under the write lock
    ("close", 1, "before"),  # an abandoned new index's close, waiting for its merges
]


@pytest.mark.parametrize("blocked", _BLOCKED, ids=[f"{n} {i} {w}" for n, i, w in _BLOCKED])
def test_a_stop_does_not_wait_for_the_step_under_way(
    large: Any, monkeypatch: pytest.MonkeyPatch, blocked: tuple[str, int, str]
) -> None:
    """A stop asked while a step of the refill waits on the disk (a commit, a close waiting for
    merges) returns without waiting for it (its thread ends it, then closes the new index and
    removes the side folder); a stop asked between steps does not wait for the abandoned index's
    close. Both were waited for: a commit can take longer than the stop's 10 s under load, and
    the service manager then kills the daemon. The old index answers, whole."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    before = _scores(old)
    name, nth, where = blocked
    stop, gate = threading.Event(), threading.Event()
    calls: list[str] = []
    real_step = getattr(Bm25Index, name)
    real_fill = beside.fill_bm25

    def step(self: Any, *a: Any, **k: Any) -> Any:
        if self is not old:
            calls.append(name)
            if len(calls) == nth:
                if where == "in it":
                    stop.set()  # asked while the step runs
                gate.wait(60)  # the step takes long (a loaded disk)
        return real_step(self, *a, **k)

    def fill(index: Any, manifest: Any, stop_: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop_, progress)
        if where == "before":
            stop.set()  # asked as the fill ends: the next step is the abandoned index's close

    monkeypatch.setattr(Bm25Index, name, step)
    monkeypatch.setattr(beside, "fill_bm25", fill)
    got: list[bool] = []
    compaction = threading.Thread(target=lambda: got.append(compact_bm25(stores, stop)))
    compaction.start()
    compaction.join(30)  # a bound for a hang, not a measure: the step waits until the gate opens
    returned_first = not compaction.is_alive()
    gate.set()
    compaction.join(60)
    assert returned_first, "the stop waited for the step under way"
    assert got == [False]
    _dropped(stores)
    assert stores.bm25 is old and _scores(old) == before and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]


def test_a_compaction_gives_way_to_a_rebuild(large: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild begun while the new index is filled (it empties the old one) ends the
    compaction: its swap had refilled the whole index under the write lock, every write waiting
    (40 s and more at 60,000 documents). The rebuild's index agrees with the manifest and no side
    folder is left."""
    from sidecar.index import beside, bm25fill
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    real_fill = beside.fill_bm25
    locked: list[bool] = []

    def counted(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        locked.append(_write_lock_held(stores))
        real_fill(index, manifest, stop, progress)

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop, progress)

        def rebuild() -> None:
            s.harness.indexer.clear()
            s.harness.sweep()

        _threaded(rebuild)

    monkeypatch.setattr(beside, "fill_bm25", fill)
    monkeypatch.setattr(bm25fill, "fill_bm25", counted)  # a swap's whole refill (``catch_up``)
    assert compact_bm25(stores) is False
    _dropped(stores)
    assert locked == [], "the swap refilled the whole index under the write lock"
    assert stores.keyword_compaction_last[:2] == ("gave way", "the index was rebuilt meanwhile")
    assert stores.bm25 is old and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
    assert stores.bm25.search("lantern harbour", 5) and old._changed is None  # nothing more noted


def test_a_compaction_behind_many_writes_gives_way_and_an_upgrade_does_not(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More notes written during each pass than a swap writes under the lock (a model switch
    cutting every note again): after its passes with no lock held the compaction gives way (the
    next run tries again) instead of writing them all under the lock; an upgrade's refill,
    which must end, swaps all the same, every write in the new index."""
    from sidecar.index import beside
    from sidecar.index.beside import refill_beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    monkeypatch.setattr(beside, "SWAP_NOTES", 2)
    real_cu = beside.catch_up
    edits: list[int] = []

    def busy() -> None:  # three notes written again by another thread
        n = len(edits)
        edits.append(n)
        for i in (20, 21, 22):
            write(s.cfg.vault.path / f"Log/Note{i}.md", f"# Note {i}\n\nEdit {n} of it, zqedit{n}x{i}.\n")
        s.harness.sweep()

    def cu(new: Any, manifest: Any, keys: Any, *, everything: bool, stop: Any = None) -> None:
        real_cu(new, manifest, keys, everything=everything, stop=stop)
        if not _write_lock_held(stores):  # the unlocked passes only
            _threaded(busy)

    real_fill = beside.fill_bm25

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop, progress)
        _threaded(busy)

    monkeypatch.setattr(beside, "catch_up", cu)
    monkeypatch.setattr(beside, "fill_bm25", fill)
    assert compact_bm25(stores) is False
    _dropped(stores)
    assert stores.bm25 is old and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
    assert len(edits) == 1 + beside._PASSES
    swapped = refill_beside(stores)  # the upgrade's call
    assert swapped is not None and stores.bm25 is not old and _agrees(stores)
    last = len(edits) - 1
    assert stores.bm25.search(f"zqedit{last}x21", 5)


def test_a_refill_reads_the_manifest_a_page_of_notes_at_a_time(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill reads the manifest's chunks a page of notes at a time, in note order, every
    chunk once: it read all of them in one query, a 67,000-document vault's text held in memory
    for the whole refill (228 against 331 MB growth at 61,355 documents, bench/kwfillmem.py)."""
    from sidecar.index.repair import compact_bm25
    from sidecar.stores import manifest_chunks
    from sidecar.stores.manifest import Manifest

    s = large
    stores = s.harness.stores
    manifest = stores.manifest
    whole = [
        (r[0], r[1])
        for r in manifest.read(
            "SELECT c.key, c.chunk_id FROM chunks c JOIN files f ON f.key = c.key "
            "WHERE f.state = 'indexed' ORDER BY c.key, c.ord"
        )
    ]
    monkeypatch.setattr(manifest_chunks, "_PAGE_NOTES", 3, raising=False)  # (raising: so it fails on main)
    real = Manifest._query
    notes_read: list[int] = []

    def query(self: Any, sql: str, args: Any = ()) -> list[Any]:
        rows = real(self, sql, args)
        if sql.startswith("SELECT c.chunk_id, c.key"):
            notes_read.append(len({r[1] for r in rows}))
        return rows

    monkeypatch.setattr(Manifest, "_query", query)
    assert [(v.key, v.chunk_id) for v in manifest.all_chunks()] == whole
    assert len(whole) > 9 and max(notes_read) <= 3
    notes_read.clear()
    _delete(s, 0, 12)
    assert compact_bm25(stores) is True and _agrees(stores)  # the refill beside, read by pages
    assert notes_read and max(notes_read) <= 3


def test_an_abandoned_step_does_not_remove_the_next_stores_side_folder(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A compaction stopped while its fill's commit runs, the stores closed and the same home
    opened again in this process (the daemon's switch to writable after a failed start), a
    second compaction there: the first one's step, ending late in its thread, leaves the
    second's side folder alone. It removed ``bm25.next`` by name; the second refill's reopen
    made an empty index there, swapped in and logged as a compaction: every keyword search
    found nothing."""
    from sidecar.index import repair
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index
    from tests.conftest import FakeEmbedder, Harness

    cfg = make_cfg(vault)
    for i in range(NOTES):
        write(vault / f"Log/Note{i}.md", f"# Note {i}\n\nThe lantern {i} by the harbour, zq{i}.\n")
    first = Harness(cfg, FakeEmbedder())
    first.sweep()
    for i in range(12):
        (vault / f"Log/Note{i}.md").unlink()
    first.sweep()
    monkeypatch.setattr(repair, "_SHARED_SMALL", 10)
    stop, gate = threading.Event(), threading.Event()
    abandoned: list[Any] = []
    real_commit, real_close = Bm25Index.commit, Bm25Index.close

    def commit(self: Any) -> None:
        if self.path.name == "bm25.next" and not abandoned:  # the first compaction's fill
            abandoned.append(self)
            stop.set()  # asked while its commit runs
            gate.wait(60)
        real_commit(self)

    def close(self: Any) -> None:
        real_close(self)
        if self.path.name == "bm25.next" and abandoned and self is not abandoned[0] and not gate.is_set():
            # The second compaction's new index closed before its reopen: the abandoned commit
            # ends now, and its refill is dropped.
            gate.set()
            assert first.stores.beside_lock.acquire(timeout=60)
            first.stores.beside_lock.release()

    monkeypatch.setattr(Bm25Index, "commit", commit)
    monkeypatch.setattr(Bm25Index, "close", close)
    assert compact_bm25(first.stores, stop) is False
    first.close()
    second = Harness(cfg, FakeEmbedder())  # its start removes the side folder left
    try:
        stores = second.stores
        with caplog.at_level("INFO"):
            assert compact_bm25(stores, None) is True
        assert gate.is_set()
        assert _agrees(stores) and stores.bm25.num_docs() > 0
        assert stores.bm25.search("harbour", 100)
        assert "bm25_refill_side_not_ours" in caplog.text
        assert sorted(p.name for p in cfg.index_dir.glob("bm25*")) == ["bm25"]
    finally:
        second.close()


def test_a_side_folder_removed_under_the_refill_fails_it(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The new index's folder removed while it is closed between the catch-up and the swap: the
    reopen fails the refill (logged), the old index answers, whole. The reopen made an empty
    index in its place, caught up with the notes written meanwhile (none) and swapped it in."""
    import shutil

    from sidecar.contracts.errors import StoreError
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    real_close = Bm25Index.close
    removed: list[Path] = []

    def close(self: Any) -> None:
        real_close(self)
        if self is not old and self.path.name == "bm25.next" and not removed:
            removed.append(self.path)
            shutil.rmtree(self.path)  # removed by someone else meanwhile

    monkeypatch.setattr(Bm25Index, "close", close)
    with caplog.at_level("INFO"), pytest.raises(StoreError, match="removed meanwhile"):
        compact_bm25(stores, None)
    assert removed
    assert "bm25_refill_side_gone" in caplog.text
    _dropped(stores)
    assert stores.bm25 is old and _agrees(stores) and old.search("harbour", 100)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]


def test_a_new_index_that_disagrees_with_the_manifest_is_not_swapped_in(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The new index short of documents at the swap (one lost after the catch-up): the swap is
    abandoned with a warning and the old index answers, whole; nothing checked the counts and
    the short index was swapped in as a compaction."""
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    real_catch_up = beside.catch_up

    def catch_up(index: Any, manifest: Any, keys: Any, **k: Any) -> int:
        done = real_catch_up(index, manifest, keys, **k)
        if _write_lock_held(stores):  # the swap's catch-up: a note lost from the new index
            index.delete_key("vault/Log/Note20")
        return done

    monkeypatch.setattr(beside, "catch_up", catch_up)
    with caplog.at_level("INFO"):
        assert compact_bm25(stores, None) is False
    assert "bm25_refill_count_mismatch" in caplog.text
    assert any(r.levelname == "WARNING" and "bm25_refill_count_mismatch" in r.message for r in caplog.records)
    _dropped(stores)
    assert stores.bm25 is old and _agrees(stores) and old.search("lantern 20", 100)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]


def test_the_error_of_a_step_left_running_is_logged(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A step left running at a stop that then fails (a full disk at the fill's commit) is
    logged by its refill's thread when it ends, and the next refill may begin: its error reached
    no caller and was dropped without a word."""
    from sidecar.contracts.errors import StoreError
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    stop, gate = threading.Event(), threading.Event()
    real_commit = Bm25Index.commit
    names: list[str] = []

    def commit(self: Any) -> None:
        if self is not old and not gate.is_set():
            names.append(threading.current_thread().name)
            stop.set()
            gate.wait(60)
            raise StoreError("BM25 commit failed: No space left on device")
        real_commit(self)

    monkeypatch.setattr(Bm25Index, "commit", commit)
    assert compact_bm25(stores, stop) is False
    gate.set()
    _dropped(stores)
    failed = [r for r in caplog.records if "bm25_refill_step_failed" in r.message]
    assert failed and failed[0].levelname == "WARNING" and "No space left" in failed[0].message
    assert names and names[0].startswith("bm25-refill-fill-")  # each refill's threads numbered
    assert stores.bm25 is old and _agrees(stores)
    assert sorted(p.name for p in s.cfg.index_dir.glob("bm25*")) == ["bm25"]
