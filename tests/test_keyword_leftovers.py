"""Files a cut commit leaves in a keyword index folder (a full disk, a hard stop) and that no
commit references: removed when the index is opened for writing and after a failed commit, so
they neither block later commits nor pile up; a close that fails half-way leaves nothing open.
Real Tantivy in ``tmp_path``."""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import StoreError
from sidecar.stores.bm25 import Bm25Doc, Bm25Index
from sidecar.stores.bm25_folder import STUCK_AFTER
from tests.conftest import Harness, write
from tests.index_helpers import search

_KEPT = {"meta.json", ".managed.json", ".tantivy-meta.lock", ".tantivy-writer.lock"}


def _doc(key: str, body: str) -> Bm25Doc:
    source = key.split("/", 1)[0]
    agent = key.split("/")[1] if source == "memory" else ""
    name = key.rsplit("/", 1)[-1]
    return Bm25Doc.of(f"{key}#0", key, source, agent, title=name, aliases=(), headings=(), body=body)


def _filled(path: Path) -> None:
    """A keyword index holding a vault note and an agent's memory note, closed."""
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.add([_doc("memory/beta/trip", "the kayak of beta")])
        idx.commit()
    finally:
        idx.close()


def _index_folders(path: Path) -> list[Path]:
    folders = sorted(p.parent for p in path.rglob("meta.json"))
    assert len(folders) == 6  # chunks and pages of the vault, of memory-all, of beta's inbox
    return folders


def _referenced(folder: Path) -> set[str]:
    """The files of the segments meta.json names, and the lock and bookkeeping files."""
    meta = json.loads((folder / "meta.json").read_text())
    ids = [s["segment_id"].replace("-", "") for s in meta["segments"]]
    return {n for n in os.listdir(folder) if n.startswith(tuple(ids)) or n in _KEPT}


def _leave_stale_files(folder: Path) -> set[str]:
    """What a commit cut short leaves: a delete file of each segment at each of the next opstamps
    (the ones a restarted writer comes to again), and the files of a segment meta.json does not
    list. Their names."""
    meta = json.loads((folder / "meta.json").read_text())
    made = set()
    for seg in meta["segments"]:
        for k in range(1, 12):
            made.add(f"{seg['segment_id'].replace('-', '')}.{meta['opstamp'] + k}.del")
    orphan = uuid.uuid4().hex
    made |= {f"{orphan}.{ext}" for ext in ("idx", "pos", "term", "store", "fast", "fieldnorm")}
    for name in made:
        (folder / name).write_bytes(b"\0" * 106)
    return made


def test_stale_files_of_a_cut_commit_are_removed_at_open_and_commits_work(tmp_path: Path) -> None:
    """Stale delete files at the next opstamps and an unlisted segment in every index folder (the
    vault's, every agent's memory, an agent's own): at the next open they are removed, what
    meta.json references and Tantivy's own files kept, and a change to a vault note and to a
    memory note commits. Was: every commit failed with FileAlreadyExists, for good."""
    path = tmp_path / "bm25"
    _filled(path)
    kept = {folder: _referenced(folder) for folder in _index_folders(path)}
    stale = {folder: _leave_stale_files(folder) for folder in kept}
    idx = Bm25Index(path)
    try:
        idx.replace_note("vault/Boat", [_doc("vault/Boat", "the boat and the paddle on the lake")])
        idx.replace_note("memory/beta/trip", [_doc("memory/beta/trip", "the kayak of beta and a canoe")])
        idx.commit()
        assert [c for c, _ in idx.search("paddle", 5)] == ["vault/Boat#0"]
        assert [c for c, _ in idx.search("canoe", 5)] == ["memory/beta/trip#0"]
        assert [c for c, _ in idx.search("canoe", 5, agent_scope="beta")] == ["memory/beta/trip#0"]
    finally:
        idx.close()
    for folder, names in stale.items():
        assert not names & set(os.listdir(folder)), folder
    idx = Bm25Index(path)  # nothing the commits reference went: the index opens whole
    try:
        assert [c for c, _ in idx.search("canoe", 5)] == ["memory/beta/trip#0"]
        assert idx.num_docs() == 2
    finally:
        idx.close()
    for folder, names in kept.items():
        assert {n for n in names if n in _KEPT} <= set(os.listdir(folder))


@pytest.mark.parametrize("part", ["pages", "memory-all/pages", "memory/beta/chunks"])
def test_a_commit_that_meets_a_leftover_file_cleans_up_and_the_next_one_works(
    tmp_path: Path, part: str
) -> None:
    """A stale delete file that appears under the running daemon at the opstamp its next commit
    takes (the vault's index, every agent's memory, an agent's own): that commit fails, the files
    it and the cut commit left are removed, and the retry commits; an agent's index is not taken
    for damaged. Was: every retry failed with FileAlreadyExists and left six more segment files
    (an agent's index was moved aside and refilled)."""
    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    try:
        folder = path / part
        before = set(os.listdir(folder))
        key = "vault/Boat" if part == "pages" else "memory/beta/trip"
        note = [_doc(key, "a canoe on the lake")]
        idx.replace_note(key, note)  # its writer open: the files appear after the open's clean-up
        meta = json.loads((folder / "meta.json").read_text())
        stale = set()
        for seg in meta["segments"]:
            for k in range(1, 12):
                stale.add(f"{seg['segment_id'].replace('-', '')}.{meta['opstamp'] + k}.del")
        for name in stale:
            (folder / name).write_bytes(b"\0" * 106)
        with pytest.raises(StoreError, match="FileAlreadyExists"):
            idx.commit()
        assert set(os.listdir(folder)) <= before, "the files of the failed commit stayed"
        idx.replace_note(key, note)  # the next sweep redoes the note
        idx.commit()
        assert [c for c, _ in idx.search("canoe", 5)] == [f"{key}#0"]
        assert [c for c, _ in idx.search("kayak", 5, agent_scope="beta")] == (
            [] if "beta" in key else ["memory/beta/trip#0"]
        )
        assert not list(tmp_path.glob("*broken*")) and idx.failing == {}
    finally:
        idx.close()


def test_an_index_another_process_writes_is_not_cleaned(tmp_path: Path) -> None:
    """An index whose writer lock another writer holds (another daemon on the same home) keeps
    every file: what looks unreferenced may be that writer's segment being written."""
    from sidecar.stores.bm25_folder import remove_unreferenced

    path = tmp_path / "bm25"
    _filled(path)
    folder = path / "chunks"
    stale = _leave_stale_files(folder)
    for lock in (".tantivy-writer.lock", ".tantivy-meta.lock"):  # a writer; a reader opening segments
        fd = os.open(folder / lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            assert remove_unreferenced(folder) == []
            assert stale <= set(os.listdir(folder))
        finally:
            os.close(fd)
    assert sorted(remove_unreferenced(folder)) == sorted(stale)


def test_an_index_a_tantivy_writer_holds_is_not_cleaned(tmp_path: Path) -> None:
    """The same with Tantivy's own writer holding the lock (the test above holds it with Python's
    flock, which proves only that the lock is asked): the cleanup's safety rests on Tantivy taking
    the same kind of lock, checked here with the installed tantivy."""
    import tantivy

    from sidecar.stores.bm25_folder import remove_unreferenced
    from sidecar.stores.bm25_text import all_analyzers, build_schema

    path = tmp_path / "bm25"
    _filled(path)
    folder = path / "chunks"
    stale = _leave_stale_files(folder)
    index = tantivy.Index(build_schema(), path=str(folder), reuse=True)
    for name, analyzer in all_analyzers(3).items():
        index.register_tokenizer(name, analyzer)
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    try:
        assert remove_unreferenced(folder) == []
        assert stale <= set(os.listdir(folder))
    finally:
        writer.rollback()
        writer.wait_merging_threads()
        del writer, index
    assert sorted(remove_unreferenced(folder)) == sorted(stale)


@pytest.mark.parametrize("meta", ["missing", "unreadable"])
def test_a_folder_without_a_readable_meta_is_left_alone(tmp_path: Path, meta: str) -> None:
    """No meta.json to say what is referenced (a new index, or a damaged one the open reports):
    nothing is removed."""
    from sidecar.stores.bm25_folder import remove_unreferenced

    folder = tmp_path / "x"
    folder.mkdir()
    stray = folder / f"{uuid.uuid4().hex}.idx"
    stray.write_bytes(b"x")
    if meta == "unreadable":
        (folder / "meta.json").write_text("{not json")
    assert remove_unreferenced(folder) == []
    assert stray.is_file()


def _block_next_delete_files(folder: Path) -> None:
    """A folder under the name of each delete file the next commits write (each segment's, at the
    next opstamps): a leftover no cleanup removes (unlink refuses a folder, root's too)."""
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["segments"]
    for seg in meta["segments"]:
        for k in range(1, 12):
            (folder / f"{seg['segment_id'].replace('-', '')}.{meta['opstamp'] + k}.del").mkdir()


@pytest.mark.parametrize("part", ["chunks", "memory-all/chunks", "memory/beta/chunks"])
def test_a_leftover_the_cleanup_cannot_remove_gets_the_index_refilled(
    make_cfg: Any, vault: Path, part: str
) -> None:
    """A leftover under the name the next commit writes that cannot be removed (a folder in its
    place) in the vault's index, in every agent's memory, in an agent's own: after a few commits
    in a row fail on it, the index (the agent's own alone) is moved aside and refilled from the
    manifest, status says so, and the next sweep commits the change. Was: every commit failed
    with FileAlreadyExists for good, and the keyword index never took a write again."""
    from sidecar.daemon.repairs import RepairPolicy

    cfg = make_cfg(vault)
    inbox = cfg.agents_dir / "beta" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    os.chmod(inbox.parent, 0o700)
    write(inbox / "trip.md", "# Trip\n\nThe kayak of beta waits at the lake.\n")
    h = Harness(cfg, None)  # keyword search alone: what it finds is the keyword index's
    try:
        h.sweep()
        _block_next_delete_files(cfg.index_dir / "bm25" / part)
        write(vault / "Projects/Boat.md", "# Boat\n\nA canoe paddle for the lake.\n")
        write(inbox / "trip.md", "# Trip\n\nThe canoe of beta waits at the lake.\n")
        failures = []
        for _ in range(STUCK_AFTER):
            try:
                h.sweep()
            except StoreError as exc:
                failures.append(str(exc))
        # An agent's own index is moved aside by the commit that makes it stuck (the sweep
        # goes on); the others fail that commit too and the repair moves them aside.
        assert len(failures) == (STUCK_AFTER - 1 if part.startswith("memory/") else STUCK_AFTER), failures
        assert all("FileAlreadyExists" in f for f in failures)
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        asides = sorted(p.name.split(".broken-")[0] for p in cfg.index_dir.iterdir() if ".broken-" in p.name)
        assert asides == (["bm25-memory-beta"] if part.startswith("memory/") else ["bm25"])
        h.sweep()
        assert {x["reference"] for x in search(h, "canoe")} == {"vault/Projects/Boat", "memory/beta/trip"}
        scoped = sorted(x["reference"] for x in search(h, "canoe", agent="beta"))
        assert scoped == ["memory/trip", "vault/Projects/Boat"]
        said = json.dumps(h.problems.describe())
        assert "could not be removed" in said and "moved aside and rebuilt" in said, said
        assert h.problems.active_in("index") is None and h.stores.bm25.stuck is None
    finally:
        h.close()


def test_an_open_that_fails_removes_no_file(tmp_path: Path) -> None:
    """An older meta.json copied back (a backup restored) naming a segment replaced since: the
    open fails and every file stays in the folder (to be moved aside whole), the newer segment
    that meta.json does not name included. Was: the cleanup ran before the open and removed it."""
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        backup = (path / "chunks" / "meta.json").read_bytes()
        idx.delete_all()  # its segment dropped at the commit, a new one made
        idx.add([_doc("vault/Canoe", "a canoe on the lake")])
        idx.commit()
    finally:
        idx.close()
    folder = path / "chunks"
    newer = set(os.listdir(folder))
    (folder / "meta.json").write_bytes(backup)
    with pytest.raises(StoreError, match="cannot be opened"):
        Bm25Index(path)
    assert newer <= set(os.listdir(folder))


def test_commits_failing_where_the_cleanup_did_not_run_leave_the_index_unstuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits that fail on a leftover while the cleanup is skipped (another reader holds the
    meta lock, the name kept for the searcher): no file was refused, so the index is not taken
    for stuck. Was: 3 such failures had a healthy index moved aside and refilled whole, with
    status saying a file could not be removed though none was tried."""
    from sidecar.stores import bm25_folder

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        _block_next_delete_files(path / "chunks")
        monkeypatch.setattr(bm25_folder, "remove_unreferenced", lambda *a, **k: [])  # lock busy
        for n in range(STUCK_AFTER + 1):
            idx.delete_key("vault/Boat")
            idx.add([_doc("vault/Boat", f"the boat on the lake, take {n}")])
            with pytest.raises(StoreError, match="FileAlreadyExists"):
                idx.commit()
        assert idx.stuck is None and idx._chunks.stuck() is None
    finally:
        idx.close()


def _unblock(folder: Path) -> None:
    """The folders ``_block_next_delete_files`` left under delete files' names removed."""
    for p in folder.iterdir():
        if p.is_dir():
            p.rmdir()


def test_a_commit_that_works_again_clears_stuck(tmp_path: Path) -> None:
    """The index is taken for stuck after commits fail on a leftover that cannot be removed; the
    leftover goes (a share's permission back) and the next commit works: no longer stuck. Was:
    ``stuck`` was never cleared, and the repair refilled the whole index a minute later."""
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        _block_next_delete_files(path / "chunks")
        for n in range(STUCK_AFTER):
            idx.delete_key("vault/Boat")
            idx.add([_doc("vault/Boat", f"the boat on the lake, take {n}")])
            with pytest.raises(StoreError, match="FileAlreadyExists"):
                idx.commit()
        assert idx.stuck is not None and "could not be removed" in idx.stuck
        _unblock(path / "chunks")
        idx.delete_key("vault/Boat")
        idx.add([_doc("vault/Boat", "the boat on the lake, at last")])
        idx.commit()
        assert idx.stuck is None
    finally:
        idx.close()


def test_an_inbox_closed_and_reopened_keeps_its_failed_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's index whose commits fail on a leftover that cannot be removed, closed between
    two of them (more inboxes open than the cap) and opened again: its count goes on, and the
    commit that makes it ``STUCK_AFTER`` moves it aside. Was: each reopen started at 0 again."""
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("memory/beta/trip", "the kayak of beta")])
        idx.commit()
        _block_next_delete_files(path / "memory" / "beta" / "chunks")
        for n in range(STUCK_AFTER):
            idx.delete_key("memory/beta/trip")
            idx.add([_doc("memory/beta/trip", f"the canoe of beta, take {n}")])
            if n == STUCK_AFTER - 1:
                idx.commit()  # moved aside, not failed
                break
            with pytest.raises(StoreError, match="FileAlreadyExists"):
                idx.commit()
            monkeypatch.setattr(idx, "_cap", lambda: 0)
            idx._evict()  # closed: more inboxes open than the cap
            monkeypatch.undo()
            assert "beta" not in idx._open
        assert "moved aside" in idx.failing.get("beta", ""), idx.failing
        assert any(p.name.startswith("bm25-memory-beta.broken-") for p in tmp_path.iterdir())
    finally:
        idx.close()


def test_a_disk_near_full_marks_no_index_stuck_and_gets_none_refilled(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits failing on a leftover that cannot be removed while the disk is near full: the
    index is not taken for stuck (its commits fail for want of room anyway), and a stuck one is
    not moved aside and refilled until there is room (a refill fails half-way on such a disk).
    Was: no low-disk guard on the stuck path."""
    from sidecar.daemon.repairs import RepairPolicy
    from sidecar.stores import bm25 as bm25_mod

    path = make_cfg(vault).index_dir / "alone"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        _block_next_delete_files(path / "chunks")
        with monkeypatch.context() as m:
            m.setattr(bm25_mod, "low_disk", lambda _path: 1000)
            for n in range(STUCK_AFTER):
                idx.delete_key("vault/Boat")
                idx.add([_doc("vault/Boat", f"the boat on the lake, take {n}")])
                with pytest.raises(StoreError, match="FileAlreadyExists"):
                    idx.commit()
            assert idx.stuck is None
    finally:
        idx.close()

    cfg = make_cfg(vault)
    h = Harness(cfg, None)
    try:
        h.sweep()
        h.stores.bm25.stuck = "3 commits in a row failed on a file that could not be removed"
        monkeypatch.setattr("sidecar.daemon.repairs.low_disk", lambda _path: 1000, raising=False)
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not [p for p in cfg.index_dir.iterdir() if ".broken-" in p.name]
        assert h.stores.bm25.stuck is not None  # refilled once there is room
    finally:
        h.close()


def test_a_failed_rebuild_of_a_stuck_index_is_opened_again_in_place_and_moved_aside_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair's refill of a stuck index fails (the manifest cannot be read meanwhile): the
    half-filled index is closed, the stores hold an index marked lost, opened again in place and
    refilled at the next tick, and no other copy is moved aside. Was: the stores kept the closed
    old index (every write failed), the new one stayed open, and each minute another repair
    moved a bm25.broken-* copy aside."""
    from sidecar.daemon.repairs import RepairPolicy
    from sidecar.index import repair as repair_mod

    cfg = make_cfg(vault)
    write(vault / "Projects/Boat.md", "# Boat\n\nA canoe paddle for the lake.\n")
    h = Harness(cfg, None)
    try:
        h.sweep()
        h.stores.bm25.stuck = "3 commits in a row failed on a file that could not be removed"

        def refill_fails(*_args: Any, **_kwargs: Any) -> None:
            raise StoreError("the manifest cannot be read")

        monkeypatch.setattr(repair_mod, "fill_bm25", refill_fails)
        policy = RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot)
        policy.tick()
        assert h.stores.bm25.unavailable is not None and "rebuild failed" in h.stores.bm25.unavailable
        for _ in range(2):  # a minute later each time
            policy._bm25_repaired = -1e9
            policy.tick()
        assert h.stores.bm25.unavailable is None and h.stores.bm25.stuck is None
        assert len([p for p in cfg.index_dir.iterdir() if ".broken-" in p.name]) == 1
        assert {x["reference"] for x in search(h, "canoe")} == {"vault/Projects/Boat"}
    finally:
        h.close()


class _Clock:
    """``time`` of the repair policy, its monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _stuck_policy(h: Harness, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _Clock]:
    from sidecar.daemon import repairs

    clock = _Clock()
    monkeypatch.setattr(repairs, "time", clock)
    return repairs.RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot), clock


_STUCK = "3 commits in a row failed on a file that could not be removed"


def _moved_aside(cfg: Any) -> int:
    return len([p for p in cfg.index_dir.iterdir() if ".broken-" in p.name])


def test_an_index_stuck_again_after_each_refill_is_left_until_a_commit_works(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword index that gets stuck again after each refill (a leftover that comes back): after
    ``MAX_STUCK_REFILLS`` refills within the hour it is not moved aside again, an hour later
    neither; it stays open and answers searches, and status says what to do. A commit that works
    again clears it, and the next time it gets stuck it is refilled. Was: three more refills each
    hour, for good, where status said it was not rebuilt again."""
    from sidecar.daemon.repairs import MAX_STUCK_REFILLS, STUCK_SUBJECT, STUCK_WINDOW_S

    cfg = make_cfg(vault)
    write(vault / "Projects/Boat.md", "# Boat\n\nA canoe paddle for the lake.\n")
    h = Harness(cfg, None)
    try:
        h.sweep()
        policy, clock = _stuck_policy(h, monkeypatch)
        for _ in range(MAX_STUCK_REFILLS + 2):
            h.stores.bm25.stuck = _STUCK
            clock.now += 61  # a minute later each time
            policy.tick()
        assert _moved_aside(cfg) == MAX_STUCK_REFILLS
        clock.now += 2 * STUCK_WINDOW_S
        policy.tick()
        assert _moved_aside(cfg) == MAX_STUCK_REFILLS
        said = json.dumps(h.problems.describe())
        assert "not rebuilt again until a commit of it works" in said and "restart the daemon" in said, said
        assert {x["reference"] for x in search(h, "canoe")} == {"vault/Projects/Boat"}
        h.stores.bm25.stuck = None  # a commit worked again
        policy.tick()
        assert h.problems.active_in("keyword_index", subject=STUCK_SUBJECT) is None
        h.stores.bm25.stuck = _STUCK
        clock.now += 61
        policy.tick()
        assert _moved_aside(cfg) == MAX_STUCK_REFILLS + 1
    finally:
        h.close()


def test_failed_rebuilds_of_a_stuck_index_do_not_count_as_stuck_again(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilds of a stuck index that fail (said in status, tried again a minute later) are no
    refills that got stuck again: once one can run, it runs. Was: each failure counted, and after
    three the index was left stuck, status saying it got stuck again after 3 rebuilds."""
    from sidecar.daemon.repairs import MAX_STUCK_REFILLS, REPAIR_SUBJECT, STUCK_SUBJECT

    cfg = make_cfg(vault)
    h = Harness(cfg, None)
    try:
        h.sweep()
        policy, clock = _stuck_policy(h, monkeypatch)

        def fails(_reason: str) -> None:
            raise StoreError("BM25 index cannot be made: Input/output error")

        real = policy.repair.repair_bm25
        monkeypatch.setattr(policy.repair, "repair_bm25", fails)
        h.stores.bm25.stuck = _STUCK
        for _ in range(MAX_STUCK_REFILLS + 1):
            clock.now += 61
            policy.tick()
        assert h.problems.active_in("keyword_index", subject=REPAIR_SUBJECT) is not None
        monkeypatch.setattr(policy.repair, "repair_bm25", real)
        clock.now += 61
        policy.tick()
        assert _moved_aside(cfg) == 1
        assert h.problems.active_in("keyword_index", subject=STUCK_SUBJECT) is None
        assert h.problems.active_in("keyword_index", subject=REPAIR_SUBJECT) is None
    finally:
        h.close()


@pytest.mark.parametrize("raised", ["ValueError", "RuntimeError", "PanicException"])
def test_a_keyword_rebuild_failing_in_tantivy_is_logged_and_said_and_the_tick_goes_on(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, raised: str
) -> None:
    """The repair's rebuild of the keyword index fails with one of Tantivy's own errors (its
    binding's ValueError, a RuntimeError, a Rust panic, which is no Exception): logged, said in
    status, and the tick returns (its thread goes on). Was: only StoreError and OSError were
    caught; the error left the tick (a panic ended the thread that sweeps and repairs)."""
    from sidecar.daemon.repairs import REPAIR_SUBJECT, RepairPolicy
    from sidecar.index import repair as repair_mod

    kind: type[BaseException] = {
        "ValueError": ValueError,
        "RuntimeError": RuntimeError,
        "PanicException": type("PanicException", (BaseException,), {}),
    }[raised]
    cfg = make_cfg(vault)
    h = Harness(cfg, None)
    try:
        h.sweep()
        h.stores.bm25.stuck = "3 commits in a row failed on a file that could not be removed"

        def refill_fails(*_args: Any, **_kwargs: Any) -> None:
            raise kind("Failed to open file for write: invalid segment")

        monkeypatch.setattr(repair_mod, "fill_bm25", refill_fails)
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        problem = h.problems.active_in("keyword_index", subject=REPAIR_SUBJECT)
        assert problem is not None and "could not be rebuilt" in problem["error"], problem
    finally:
        h.close()


def test_a_close_with_changes_not_committed_leaves_no_files_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean close while notes were written and not committed (a sweep cut by the stop): the
    segment Tantivy writes for them as its writer ends is removed at the close, so the next open
    finds nothing to remove and warns of nothing; what was committed stays searchable. Was: each
    such stop left the segment's files, and the next start logged bm25_leftovers_removed as a
    WARNING blaming a commit cut short."""
    import logging

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        idx.add([_doc("vault/Canoe", "a canoe on the lake")])  # not committed
        idx.delete_key("vault/Boat")
    finally:
        idx.close()
    for folder in (path / "chunks", path / "pages"):
        assert set(os.listdir(folder)) == _referenced(folder), folder
    caplog.set_level(logging.INFO)
    idx = Bm25Index(path)
    try:
        assert [k for k, _ in idx.search("boat", 5)] == ["vault/Boat#0"]
        assert not [r for r in caplog.records if "bm25_leftovers_removed" in r.getMessage()]
    finally:
        idx.close()


def test_a_commit_after_the_close_raises_and_writes_nothing(tmp_path: Path) -> None:
    """A write racing a close (a lost index, a stop with a worker still running): the commit that
    follows the close raises, so the notes are not marked indexed; what was committed stays. Was:
    the close dropped the uncommitted changes and marked the index clean, and the commit returned
    as if it had written them."""
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    idx.add([_doc("vault/Boat", "the boat on the lake")])
    idx.commit()
    idx.add([_doc("vault/Canoe", "a canoe on the lake")])  # not committed
    idx.close()
    with pytest.raises(StoreError):
        idx.commit()
    with pytest.raises(StoreError):
        idx.add([_doc("vault/Kayak", "a kayak")])
    idx = Bm25Index(path)
    try:
        assert [k for k, _ in idx.search("lake", 5)] == ["vault/Boat#0"]
    finally:
        idx.close()


def test_a_close_that_meets_a_share_fault_releases_every_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close with changes not committed whose cleanup meets a share's fault (ESTALE on
    meta.json): it does not raise, and every writer is released, so the index opens again in
    this process. Was: the OSError left the close half done, the other folders' writers open
    with their locks (the reopen found the index in use by another process)."""
    import errno

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    idx.add([_doc("vault/Boat", "the boat on the lake")])
    idx.commit()
    idx.add([_doc("vault/Canoe", "a canoe on the lake")])  # not committed
    real_stat = os.stat

    def stale(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(p).endswith("meta.json"):
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), os.fspath(p))
        return real_stat(p, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stale)
    idx.close()
    monkeypatch.undo()
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Kayak", "a kayak on the lake")])
        idx.commit()
        assert sorted(k for k, _ in idx.search("lake", 5)) == ["vault/Boat#0", "vault/Kayak#0"]
    finally:
        idx.close()


def test_a_refill_cut_by_a_stop_drops_its_files_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refill cut by a stop is rolled back on purpose: the files its changes left are removed
    and said at info (bm25_uncommitted_dropped), with no warning blaming a commit cut short; the
    index holds what it held. Was: bm25_leftovers_removed, a WARNING, at each such stop."""
    import logging

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("vault/Boat", "the boat on the lake")])
        idx.commit()
        caplog.set_level(logging.INFO)
        idx.delete_all()  # as fill_bm25 does, then a batch before the stop
        idx.add([_doc("vault/Canoe", "a canoe on the lake")])
        idx.add([_doc("memory/beta/trip", "the kayak of beta on the lake")])
        idx.rollback()
        said = [r.getMessage() for r in caplog.records]
        assert not [m for m in said if "bm25_leftovers_removed" in m], said
        dropped = [r for r in caplog.records if "bm25_uncommitted_dropped" in r.getMessage()]
        assert dropped and all(r.levelno == logging.INFO for r in dropped), said
        assert [k for k, _ in idx.search("lake", 5)] == ["vault/Boat#0"]
    finally:
        idx.close()


def test_a_panic_in_an_inbox_refill_drops_the_half_made_index_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refill of an agent's own index that Tantivy ends with a panic (pyo3's PanicException, no
    Exception): the half-made index is dropped and the agent reported as not rebuilt (its next
    search with its scope rebuilds it, the repair refills it), as for any other failure. Was:
    ``except Exception`` let the panic through, the half-made index passed for the agent's whole
    memory and nothing said so."""
    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    panic = type("PanicException", (BaseException,), {})

    def panics() -> None:
        raise panic("called `Result::unwrap()` on an `Err` value")

    try:
        monkeypatch.setattr(idx, "commit", panics)
        with pytest.raises(panic):
            idx.refill_inbox("beta", [_doc("memory/beta/trip", "the kayak of beta")])
        assert "could not be rebuilt" in idx.failing.get("beta", ""), idx.failing
        assert "beta" not in idx.agents() and not (path / "memory" / "beta").exists()
    finally:
        monkeypatch.undo()
        idx.close()


def test_an_inbox_removed_with_changes_not_committed_says_nothing_of_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent's own index removed (here by its refill) while it holds changes not committed:
    its folder is deleted, and no log says those changes are written again by the next sweep.
    Was: bm25_uncommitted_dropped for a folder about to be deleted."""
    import logging

    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    try:
        idx.add([_doc("memory/beta/more", "another kayak of beta")])  # not committed
        caplog.set_level(logging.INFO)
        idx.refill_inbox("beta", [_doc("memory/beta/trip", "the kayak of beta")])
        said = [r.getMessage() for r in caplog.records if "bm25_uncommitted_dropped" in r.getMessage()]
        assert not [m for m in said if "memory/beta" in m], said
        assert [k for k, _ in idx.search("kayak", 5, agent_scope="beta")] == ["memory/beta/trip#0"]
    finally:
        idx.close()


def test_a_close_that_raises_in_one_folder_still_closes_the_others_and_marks_the_index_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword index lost (its reopen failed) whose first folder's close raises: every other
    folder is closed all the same (their writers' locks released), the index is marked lost
    (every write refused with that reason), and the error is raised. Was: the close stopped at
    the first folder, leaving the others' writers open, and the index was not marked lost."""
    from sidecar.contracts.errors import IndexNotOpenError

    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    failing = idx._chunks

    def breaks(**_kw: Any) -> None:
        raise RuntimeError("close failed")

    monkeypatch.setattr(failing, "close", breaks)
    folders = idx._folders()
    with pytest.raises(RuntimeError, match="close failed"):
        idx.lost("the reopen failed")
    assert [f.path for f in folders if f is not failing and not f.closed] == []
    assert idx.unavailable == "the reopen failed"
    with pytest.raises(IndexNotOpenError, match="the reopen failed"):
        idx.add([_doc("vault/Canoe", "a canoe")])
    monkeypatch.undo()
    failing.close()


def test_the_manifest_is_closed_when_the_keyword_index_close_raises(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop whose keyword index close raises still closes the manifest (its write-ahead log
    checkpointed, its connection released), then raises. Was: the manifest was left open."""
    import sqlite3

    stores = harness.stores
    real = stores.bm25.close

    def breaks() -> None:
        real()
        raise RuntimeError("close failed")

    monkeypatch.setattr(stores.bm25, "close", breaks)
    with pytest.raises(RuntimeError, match="close failed"):
        stores.close()
    monkeypatch.undo()
    with pytest.raises(sqlite3.ProgrammingError):
        stores.manifest.get_meta("chunker")


class _Interrupted:
    """A writer whose end is interrupted (Ctrl-C landing as a close starts ending it); the rest
    is the real writer's. Its raise holds no reference to the wrapper (a static method), so the
    traceback keeps no writer alive that the code under test dropped."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    @staticmethod
    def wait_merging_threads() -> None:
        raise KeyboardInterrupt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)


def test_an_index_whose_close_was_interrupted_opens_again_in_this_process(tmp_path: Path) -> None:
    """A folder's close interrupted as it ends its writer still lets the writer go (its lock
    released): the index opens again in this process and takes writes. Was: the folder kept its
    writer and lock, a second close did nothing, and every reopen (tried every few seconds) failed
    with "in use by another process"."""
    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    idx.add([_doc("vault/Canoe", "a canoe")])  # a change not committed: the close drops it
    shared = idx._chunks
    shared._writer = _Interrupted(shared._writer)
    with pytest.raises(KeyboardInterrupt):
        idx.lost("the reopen failed")
    idx.close()
    again = Bm25Index(path)
    try:
        again.add([_doc("vault/Raft", "a raft")])
        again.commit()
        assert [k for k, _ in again.search("raft", 5)] == ["vault/Raft#0"]
    finally:
        again.close()


def test_a_lost_index_whose_close_raised_is_in_the_stores_said_and_reopened(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword index lost (no index would open) while a folder's close raises before it let
    its writer go: the stores hold it marked lost all the same, the log and the problem say so,
    and the reopen in the background closes that folder and opens the index again. Was: the
    stores kept the index they held, nothing was said, and the folder kept its writer's lock."""
    from sidecar.contracts.errors import StoreError
    from sidecar.index.beside import lose
    from sidecar.index.upgrade import reopen_bm25

    def breaks(**_kw: Any) -> None:
        raise KeyboardInterrupt

    stores = harness.stores
    old = stores.bm25
    monkeypatch.setattr(old._chunks, "close", breaks)
    held: Any = object()  # what the stores held (an index that would not open)
    stores.bm25 = held
    try:
        with caplog.at_level("ERROR"), pytest.raises(KeyboardInterrupt):
            lose(stores, old, StoreError("no file handles left"))
    finally:
        monkeypatch.undo()
        if stores.bm25 is held:  # the harness closes what the stores hold
            stores.bm25 = old
    assert stores.bm25 is old and old.unavailable == "no file handles left"
    assert "bm25_unavailable" in caplog.text
    assert stores.problems.active_in("keyword_index") is not None
    assert reopen_bm25(stores) and stores.bm25.unavailable is None
    assert stores.problems.active_in("keyword_index") is None
    assert stores.bm25.num_docs() == stores.manifest.indexed_chunk_count()


def test_a_second_close_closes_the_folder_whose_close_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's close that raised before it let its writer go: the index's next close closes it
    again, and the index opens again in this process. Was: the second close did nothing, the
    folder kept its writer's lock, and the open took the index for another daemon's."""
    path = tmp_path / "bm25"
    _filled(path)
    idx = Bm25Index(path)
    idx.add([_doc("vault/Canoe", "a canoe")])
    failing = idx._chunks

    def breaks(**_kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(failing, "close", breaks)
    with pytest.raises(KeyboardInterrupt):
        idx.lost("the reopen failed")
    monkeypatch.undo()
    idx.close()
    assert failing.closed and failing._writer is None
    again = Bm25Index(path)
    try:
        again.add([_doc("vault/Raft", "a raft")])
        again.commit()
    finally:
        again.close()
