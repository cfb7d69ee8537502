"""The scheduled rewrite of a memory index whose deleted documents weigh in its scores
(``compact_memory``): it then scores as a fresh rebuild of the same notes, and searches, a kill,
a failed commit and a stop during it lose nothing."""

from __future__ import annotations

import contextlib
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write
from tests.index_helpers import made_idle

NOTE = "The backup runs at three in the night."
KEPT = {f"n{i}": f"Plan {i}: apples for the cellar, zq{i}." for i in range(1, 4)}
QUERIES = ("backup runs", "apples cellar", "night plan", "zq2 apples")


def _churn(s: Any) -> None:
    """alpha and beta end with the same notes; alpha also wrote, replaced and deleted others.
    Each agent's own index is made at its first search (one segment: its deletes stay in it)."""
    for agent in ("alpha", "beta"):
        s.call("write", {"slug": "note-0", "content": NOTE}, agent=agent)
        for slug, text in KEPT.items():
            s.call("write", {"slug": slug, "content": text}, agent=agent)
    for i in range(4, 8):  # alpha's notes that go: backups that ran, runs planned
        content = f"Backup {i} runs: the shed photos, part {i} (zq{i}), backup night."
        s.call("write", {"slug": f"n{i}", "content": content}, agent="alpha")
    s.call("search", {"query": "backup"}, agent="alpha")
    s.call("write", {"slug": "n4", "content": "Backup 4 runs again, backup night backup."}, agent="alpha")
    for i in range(4, 8):
        s.call("delete", {"slug": f"n{i}"}, agent="alpha")
    s.call("search", {"query": "backup"}, agent="beta")


def _scores(bm25: Any, agent: str | None) -> list[list[float]]:
    """Each query's keyword scores in ``agent``'s scope (None: a person's), best first (chunk
    ids differ between agents holding the same note: scores are compared)."""
    return [
        sorted((round(score, 5) for _cid, score in bm25.search(q, 20, agent_scope=agent)), reverse=True)
        for q in QUERIES
    ]


def _deleted(s: Any, part: str) -> int:
    from sidecar.stores.bm25_folder import segment_counts

    base = s.cfg.index_dir / "bm25" / part
    return segment_counts(base / "chunks")[0] + segment_counts(base / "pages")[0]


def test_a_churned_memory_index_scores_as_a_fresh_rebuild_after_the_compaction(in_process: Any) -> None:
    """Tantivy counts a deleted document and its words in BM25 until its segment is merged: an
    agent's edits and deletes moved its notes' scores away from those of a fresh index of the
    same notes. The scheduled compaction rewrites that agent's index (and the index of every
    agent's memory) in place: then alpha's notes score exactly as beta's (same notes, no churn),
    and a person's search scores as after a refill of every agent's memory from the manifest."""
    from sidecar.index.repair import compact_memory, fill_everyone

    s = in_process
    _churn(s)
    stores = s.harness.stores
    bm25 = stores.bm25
    assert _deleted(s, "memory/alpha") > 0
    assert _scores(bm25, "alpha") != _scores(bm25, "beta")  # the deleted backups still weigh in
    done = compact_memory(stores)
    assert "memory/alpha" in done and "memory/beta" not in done  # beta has nothing deleted
    assert _deleted(s, "memory/alpha") == 0 and _deleted(s, "memory-all") == 0
    assert _scores(bm25, "alpha") == _scores(bm25, "beta")
    person = _scores(bm25, None)
    fill_everyone(stores)  # a fresh rebuild of every agent's memory
    assert _scores(bm25, None) == person
    assert compact_memory(stores) == []  # nothing deleted left: nothing to do


def _hook_commit(monkeypatch: Any, part: str, action: Any) -> list[int]:
    """``action`` run once, as the compaction's commit of ``part``'s chunks begins (its documents
    all re-added, nothing committed)."""
    from sidecar.stores import bm25_folder

    real = bm25_folder.Folder.commit
    calls: list[int] = []

    def commit(self: Any) -> None:
        if not calls and self.path.parent.name == Path(part).name and self.path.name == "chunks":
            calls.append(1)
            action(self)
        real(self)

    monkeypatch.setattr(bm25_folder.Folder, "commit", commit)
    return calls


def test_a_search_during_the_compaction_finds_the_agents_memory(in_process: Any, monkeypatch: Any) -> None:
    """A search arriving between the compaction's re-adds and its commit reads the old snapshot
    whole: the agent's own search and a person's find every memory note with the scores they
    had (a refill that removed the agent's index first found none of its memory by words)."""
    from sidecar.index.repair import compact_memory

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    before = {"alpha": _scores(bm25, "alpha"), None: _scores(bm25, None)}
    during: dict[str | None, Any] = {}
    calls = _hook_commit(
        monkeypatch, "memory/alpha", lambda _f: during.update({"alpha": _scores(bm25, "alpha")})
    )
    assert "memory/alpha" in compact_memory(s.harness.stores)
    assert calls and during["alpha"] == before["alpha"]
    note = {v.chunk_id for v in s.harness.stores.manifest.chunks_of("memory/alpha/note-0")}
    assert note <= {cid for cid, _ in bm25.search(QUERIES[0], 20, agent_scope="alpha")}
    assert len(during["alpha"][0]) >= 2  # alpha's note and the vault's Backups
    # The index of every agent's memory: a person's search during its rewrite reads it still.
    _churn_more(s)
    bm25 = s.harness.stores.bm25
    before[None] = _scores(bm25, None)
    assert bm25.everyone_gap() is None
    calls = _hook_commit(
        monkeypatch,
        "memory-all",
        lambda _f: during.update({None: (_scores(bm25, None), bm25.everyone_gap())}),
    )
    assert "memory-all" in compact_memory(s.harness.stores)
    assert calls and during[None] == (before[None], None)


def _churn_more(s: Any) -> None:
    """Deletes (of gamma's notes) in the index of every agent's memory, in a segment that keeps
    them (refilled as one: a segment whose every document is deleted is dropped at once)."""
    from sidecar.index.repair import fill_everyone

    for i in range(3):
        s.call("write", {"slug": f"g{i}", "content": f"gamma backup {i} night"}, agent="gamma")
    fill_everyone(s.harness.stores)
    for i in range(2):
        s.call("delete", {"slug": f"g{i}"}, agent="gamma")
    assert _deleted(s, "memory-all") > 0


def test_a_kill_before_the_compactions_commit_leaves_the_old_index(
    in_process: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    """Killed before its commit (the folder copied as a kill leaves it; then an interrupt), the
    compaction leaves the old index whole: reopened, it lists the agent and serves the same
    results; the running index too (never an empty index that passes for the agent's)."""
    from sidecar.index.repair import compact_memory
    from sidecar.stores.bm25 import Bm25Index

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    before = _scores(bm25, "alpha")
    copy = tmp_path / "killed" / "bm25"

    def kill(_folder: Any) -> None:
        _copy_as_killed(s.cfg.index_dir / "bm25", copy)
        raise KeyboardInterrupt

    _hook_commit(monkeypatch, "memory/alpha", kill)
    with pytest.raises(KeyboardInterrupt):
        compact_memory(s.harness.stores)
    assert _scores(bm25, "alpha") == before
    assert _deleted(s, "memory/alpha") > 0  # not rewritten: the next run does it
    reopened = Bm25Index(copy)
    try:
        assert "alpha" in reopened.agents() and not reopened.inbox_missing("alpha")
        assert _scores(reopened, "alpha") == before
    finally:
        reopened.close()


def _copy_as_killed(src: Path, dst: Path) -> None:
    """The folder as a kill now leaves it (a file a background merge removes meanwhile left out)."""
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(path, target)


def test_a_failed_commit_of_the_compaction_keeps_every_agents_memory_searchable(
    in_process: Any, monkeypatch: Any
) -> None:
    """A commit that fails (a full disk for a moment) leaves the old index of every agent's
    memory whole and read by a person's search (it was taken out of it until a restart), and
    the next run compacts it."""
    from sidecar.contracts.errors import DiskFullError
    from sidecar.index.repair import compact_memory

    s = in_process
    _churn(s)
    _churn_more(s)
    bm25 = s.harness.stores.bm25
    before = _scores(bm25, None)

    def full(_folder: Any) -> None:
        raise DiskFullError("commit failed: No space left on device (os error 28)")

    _hook_commit(monkeypatch, "memory-all", full)
    assert "memory-all" not in compact_memory(s.harness.stores)
    assert bm25.everyone_ready and bm25.everyone_gap() is None
    assert _scores(bm25, None) == before
    assert _deleted(s, "memory-all") > 0
    monkeypatch.undo()
    assert "memory-all" in compact_memory(s.harness.stores)  # tried again
    assert _deleted(s, "memory-all") == 0 and bm25.everyone_ready


def test_a_stop_during_the_compaction_rolls_it_back(in_process: Any, monkeypatch: Any) -> None:
    """The daemon's stop during a rewrite rolls it back (the old index stays, nothing lost) and
    starts no other."""
    from sidecar.index.repair import compact_memory
    from sidecar.stores.bm25 import Bm25Index

    s = in_process
    _churn(s)
    _churn_more(s)
    bm25 = s.harness.stores.bm25
    before = _scores(bm25, "alpha")
    stop = threading.Event()
    real = Bm25Index._put

    def put(self: Any, *args: Any) -> None:
        stop.set()  # the stop comes as the first note is re-added
        real(self, *args)

    monkeypatch.setattr(Bm25Index, "_put", put)
    assert compact_memory(s.harness.stores, stop) == []
    monkeypatch.undo()
    assert _scores(bm25, "alpha") == before
    assert _deleted(s, "memory/alpha") > 0 and _deleted(s, "memory-all") > 0
    assert not any(f.dirty for f in bm25._folders())
    assert bm25.everyone_ready


def test_the_compaction_keeps_an_idle_agents_last_use(in_process: Any) -> None:
    """An agent's index rewritten by the compaction keeps its time of last use: idle, it is
    still removed as idle (not taken for used, nor left open); one removed is not made again."""
    from sidecar.index.repair import compact_memory

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    base = s.cfg.index_dir / "bm25" / "memory" / "alpha"
    old = made_idle(s, "alpha")
    assert "memory/alpha" in compact_memory(s.harness.stores)
    assert bm25._last_use("alpha") == pytest.approx(old, abs=1)
    assert "alpha" not in bm25._open
    assert "alpha" in bm25.remove_idle(30 * 86400)
    _churn_more(s)
    assert "memory/alpha" not in compact_memory(s.harness.stores)
    assert not base.exists()


def test_a_vault_edit_compacts_no_memory_index(in_process: Any) -> None:
    """A vault note edited (its old documents deleted in the vault's index) rewrites no memory
    index: each is judged by its own deleted documents."""
    from sidecar.daemon.schedule import optimize

    s = in_process
    for agent in ("alpha", "beta"):
        s.call("write", {"slug": "note-0", "content": NOTE}, agent=agent)
    s.call("search", {"query": "backup"}, agent="alpha")
    write(s.cfg.vault.path / "Garden.md", "# Garden\n\nTomatoes need sun, water and a backup plan.\n")
    s.harness.sweep()
    assert s.harness.stores.bm25.deleted_docs()[0] > 0
    metas = sorted((s.cfg.index_dir / "bm25").glob("memory*/**/meta.json"))
    assert metas
    stamps = {p: p.stat().st_mtime_ns for p in metas}
    optimize(s.harness.vectors)
    assert {p: p.stat().st_mtime_ns for p in metas} == stamps


def _shrunk_vault(s: Any) -> None:
    """alpha's memory, and a vault index mostly of deleted documents (1,100 notes' chunks in one
    segment with one that stays, then deleted): what ``compact_bm25`` rewrites."""
    from sidecar.stores.bm25 import Bm25Doc

    s.call("write", {"slug": "note-0", "content": NOTE}, agent="alpha")
    s.call("search", {"query": "backup"}, agent="alpha")
    bm25 = s.harness.stores.bm25

    def doc(key: str) -> Any:
        return Bm25Doc.of(key, key, "vault", "", title="Gone", aliases=(), headings=(), body="zzgone")

    gone = [doc(f"vault/gone/{i}") for i in range(1100)]
    bm25.add([*gone, doc("vault/stay")])
    bm25.commit()
    for d in gone:
        bm25.delete_key(d.key)
    bm25.commit()
    deleted, total = bm25.deleted_docs()
    assert deleted >= 1000 and deleted * 2 >= total


VAULT_QUERIES = ("tomatoes sun", "backup night", "outboard engine")


def _vault_scores(bm25: Any) -> list[list[tuple[str, float]]]:
    """Each query's hits for alpha and for a person."""
    return [
        sorted((cid, round(score, 5)) for cid, score in bm25.search(q, 20, agent_scope=agent))
        for q in VAULT_QUERIES
        for agent in ("alpha", None)
    ]


def test_the_vault_compaction_keeps_searches_whole_and_survives_a_kill(
    in_process: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    """The rewrite of the vault's keyword index: a search between its re-adds and its commit
    reads the old snapshot whole (the vault's notes and alpha's memory); killed there (the
    folder copied as a kill leaves it, then an interrupt) the old index reopens whole."""
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = in_process
    _shrunk_vault(s)
    bm25 = s.harness.stores.bm25
    before = _vault_scores(bm25)
    during: list[Any] = []
    _hook_commit(monkeypatch, "bm25", lambda _f: during.append(_vault_scores(bm25)))
    assert compact_bm25(s.harness.stores) is True
    assert during == [before]
    assert bm25.deleted_docs()[0] == 0
    monkeypatch.undo()
    _shrunk_vault(s)
    before = _vault_scores(bm25)
    copy = tmp_path / "killed" / "bm25"

    def kill(_folder: Any) -> None:
        _copy_as_killed(s.cfg.index_dir / "bm25", copy)
        raise KeyboardInterrupt

    _hook_commit(monkeypatch, "bm25", kill)
    with pytest.raises(KeyboardInterrupt):
        compact_bm25(s.harness.stores)
    monkeypatch.undo()
    reopened = Bm25Index(copy)
    try:
        assert reopened.everyone_ready and "alpha" in reopened.agents()
        assert _vault_scores(reopened) == before
    finally:
        reopened.close()


def test_a_failed_or_stopped_vault_compaction_leaves_the_index_whole(
    in_process: Any, monkeypatch: Any
) -> None:
    """A failed commit of the vault's rewrite (a full disk) and a stop during it (the schedule's
    shutdown) leave the index as it was, the index of every agent's memory read by a person's
    search; the next run rewrites it. Without the stop the rewrite ran on into the stores'
    close."""
    from sidecar.contracts.errors import DiskFullError, StoreError
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = in_process
    _shrunk_vault(s)
    bm25 = s.harness.stores.bm25
    before, deleted = _vault_scores(bm25), bm25.deleted_docs()

    def full(_folder: Any) -> None:
        raise DiskFullError("commit failed: No space left on device (os error 28)")

    _hook_commit(monkeypatch, "bm25", full)
    with pytest.raises(StoreError):
        compact_bm25(s.harness.stores)
    monkeypatch.undo()
    assert bm25.everyone_ready and bm25.everyone_gap() is None
    assert _vault_scores(bm25) == before and bm25.deleted_docs() == deleted
    assert not any(f.dirty for f in bm25._folders())
    stop = threading.Event()
    real = Bm25Index._put

    def put(self: Any, *args: Any) -> None:
        stop.set()  # the stop comes as the rewrite's first documents are added
        real(self, *args)

    monkeypatch.setattr(Bm25Index, "_put", put)
    assert compact_bm25(s.harness.stores, stop) is False
    monkeypatch.undo()
    assert _vault_scores(bm25) == before and bm25.deleted_docs() == deleted
    assert not any(f.dirty for f in bm25._folders()) and bm25.everyone_ready
    assert compact_bm25(s.harness.stores) is True
    assert bm25.deleted_docs()[0] == 0


def test_a_lost_keyword_index_is_not_compacted_nor_failed_hourly(in_process: Any, caplog: Any) -> None:
    """While the keyword index is lost (closed, no index open in its place) the compaction tries
    no memory index: each try failed and was logged every hour."""
    from sidecar.index.repair import compact_memory

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    bm25.unavailable = "reopen failed"
    try:
        assert compact_memory(s.harness.stores) == []
    finally:
        bm25.unavailable = None
    assert "bm25_compact_failed" not in caplog.text
    assert _deleted(s, "memory/alpha") > 0


def _compact_all(s: Any) -> None:
    """What the hourly optimize does to the keyword indexes."""
    from sidecar.index.repair import compact_bm25, compact_memory

    compact_bm25(s.harness.stores)
    compact_memory(s.harness.stores)


def test_vault_deletes_leave_no_memory_note_ranked_unlike_a_rebuild(in_process: Any) -> None:
    """Memory hits are scored on the vault's word statistics and compete with vault hits: deleted
    vault documents (a folder of 200 notes moved out, far below the old rule's 1,000 and half)
    put a vault note above alpha's memory note where a rebuild puts it below. The vault's index
    is judged by its own share of deleted documents, and rewritten alone."""
    from sidecar.index.repair import rebuild_bm25
    from sidecar.stores.bm25 import Bm25Doc

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25

    def doc(key: str, body: str) -> Any:
        return Bm25Doc.of(key, key, "vault", "", title="Gone", aliases=(), headings=(), body=body)

    long = " ".join(f"filler{j % 97}" for j in range(3000))
    gone = [doc(f"vault/gone/{i}", long) for i in range(200)]
    bm25.add([*gone, doc("vault/stay", "stay")])  # not in the manifest: a rewrite drops it too
    bm25.commit()
    for d in gone:
        bm25.delete_key(d.key)
    bm25.commit()
    assert bm25.deleted_docs()[0] >= 400
    _compact_all(s)
    assert bm25.deleted_docs()[0] == 0
    qs = ("backup runs", "backup night", "apples cellar", "night plan", "three night", "backup")
    before = {q: bm25.search(q, 10, agent_scope="alpha") for q in qs}
    rebuild_bm25(s.harness.stores)
    assert {q: bm25.search(q, 10, agent_scope="alpha") for q in qs} == before


def test_after_vault_edits_an_agents_memory_scores_as_after_a_rebuild(in_process: Any) -> None:
    """Four edits of one vault note (their old documents deleted in the vault's index) moved
    every score of alpha's memory ~10% away from a rebuild's: a small vault's index is rewritten
    at any deleted document."""
    from sidecar.index.repair import rebuild_bm25

    s = in_process
    _churn(s)
    for i in range(4):
        text = f"# Garden\n\nTomatoes need sun {i}, backup night plan apples.\n"
        write(s.cfg.vault.path / "Garden.md", text)
        s.harness.sweep()
    stores = s.harness.stores
    assert stores.bm25.deleted_docs()[0] > 0
    _compact_all(s)
    after = {a: _scores(stores.bm25, a) for a in ("alpha", None)}
    rebuild_bm25(stores)
    assert {a: _scores(stores.bm25, a) for a in ("alpha", None)} == after


def test_the_vault_compaction_rewrites_no_memory_index(in_process: Any) -> None:
    """The vault's rewrite leaves every memory index as it was: an idle agent's last use is
    kept (its index is removed as idle later), no meta.json of memory is written."""
    from sidecar.index.repair import compact_bm25

    s = in_process
    _shrunk_vault(s)
    bm25 = s.harness.stores.bm25
    old = made_idle(s, "alpha")
    metas = {p: p.stat().st_mtime_ns for p in (s.cfg.index_dir / "bm25").glob("memory*/*/meta.json")}
    metas |= {p: p.stat().st_mtime_ns for p in (s.cfg.index_dir / "bm25").glob("memory/*/*/meta.json")}
    assert compact_bm25(s.harness.stores) is True
    assert {p: p.stat().st_mtime_ns for p in metas} == metas
    assert bm25._last_use("alpha") == pytest.approx(old, abs=1)
    assert "alpha" in bm25.remove_idle(30 * 86400)


def test_a_refill_of_the_keyword_index_keeps_an_idle_agents_last_use(in_process: Any) -> None:
    """A refill from the manifest (the start's count check, a repair) writes every agent's notes
    again: an idle agent's time of last use is put back, so that it is still removed as idle
    (it was taken for used and kept another ``idleDays``); an agent's own refill likewise."""
    from sidecar.index.repair import rebuild_bm25, refill_inbox

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    old = made_idle(s, "alpha")
    rebuild_bm25(s.harness.stores)
    assert bm25._last_use("alpha") == pytest.approx(old, abs=1)
    refill_inbox(s.harness.stores, "alpha")
    assert bm25._last_use("alpha") == pytest.approx(old, abs=1)
    assert "alpha" in bm25.remove_idle(30 * 86400)


def test_an_index_that_disagrees_with_the_manifest_is_rewritten_from_it(in_process: Any, caplog: Any) -> None:
    """A memory index holding a note the manifest does not (a drift) is rewritten from the
    manifest by the compaction and logged as a rebuild: it was skipped every hour until a
    restart's check refilled it."""
    from sidecar.index.repair import compact_memory
    from sidecar.stores.bm25 import Bm25Doc

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    ghost = Bm25Doc.of(
        "ghost", "memory/alpha/ghost", "memory", "alpha", title="G", aliases=(), headings=(), body="x"
    )
    bm25.add([ghost])
    bm25.commit()
    wanted = s.harness.stores.manifest.inbox_counts()["alpha"]
    assert bm25.inbox_counts()["alpha"] != wanted
    assert "memory/alpha" in compact_memory(s.harness.stores)
    assert bm25.inbox_counts()["alpha"] == wanted
    assert "index_rebuilt store=bm25 part=memory/alpha reason=count mismatch" in caplog.text
    assert "ghost" not in {cid for cid, _ in bm25.search("x", 20, agent_scope="alpha")}


def test_a_stopped_rewrite_of_a_disagreeing_index_is_not_logged_as_a_rebuild(
    in_process: Any, monkeypatch: Any, caplog: Any
) -> None:
    """The rebuild of a memory index whose counts differ from the manifest is logged once it is
    committed: logged before, a stop (or a failed commit) after it left a "rebuilt" line for an
    index that was not."""
    from sidecar.index.repair import compact_memory
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    ghost = Bm25Doc.of(
        "ghost", "memory/alpha/ghost", "memory", "alpha", title="G", aliases=(), headings=(), body="x"
    )
    bm25.add([ghost])
    bm25.commit()
    stop = threading.Event()
    real = Bm25Index._put

    def put(self: Any, *args: Any) -> None:
        stop.set()  # the stop comes as the first note is re-added
        real(self, *args)

    monkeypatch.setattr(Bm25Index, "_put", put)
    assert compact_memory(s.harness.stores, stop) == []
    monkeypatch.undo()
    assert "ghost" in {cid for cid, _ in bm25.search("x", 20, agent_scope="alpha")}  # as it was
    assert "index_rebuilt" not in caplog.text


def test_no_rewrite_is_tried_while_the_disk_is_nearly_full(
    in_process: Any, monkeypatch: Any, caplog: Any
) -> None:
    """Neither a memory index nor the vault's is rewritten while the index's disk has less free
    than two writer flushes need (as other refills): a rewrite writes a second copy of the
    segments first, and failed every hour there after taking the last space."""
    from sidecar.index import repair

    s = in_process
    _churn(s)
    write(s.cfg.vault.path / "Garden.md", "# Garden\n\nTomatoes need sun, water and a backup plan.\n")
    s.harness.sweep()
    bm25 = s.harness.stores.bm25
    vault = bm25.deleted_docs()
    assert vault[0] > 0
    monkeypatch.setattr(repair, "free_space", lambda _path: 1 << 20)
    assert repair.compact_bm25(s.harness.stores) is False
    assert repair.compact_memory(s.harness.stores) == []
    assert bm25.deleted_docs() == vault and _deleted(s, "memory/alpha") > 0
    assert "bm25_compact_failed" not in caplog.text
    monkeypatch.undo()
    assert repair.compact_bm25(s.harness.stores) is True
    assert "memory/alpha" in repair.compact_memory(s.harness.stores)


def test_no_rewrite_without_room_for_a_second_copy_nor_during_an_upgrade(
    in_process: Any, monkeypatch: Any, caplog: Any
) -> None:
    """A rewrite writes a whole second copy of the index before its commit: with more free than
    two writer flushes but less than that copy (an index of 300 MB, 200 MB free) it took the
    disk's last space, failed at the commit and did so every hour. It waits for room as the
    upgrade's refill beside does, and while an upgrade refills the index beside."""
    import logging

    from sidecar.index import repair

    caplog.set_level(logging.DEBUG, logger="sidecar.index.repair")
    s = in_process
    _churn(s)
    write(s.cfg.vault.path / "Garden.md", "# Garden\n\nTomatoes need sun, water and a backup plan.\n")
    s.harness.sweep()
    stores = s.harness.stores
    vault = stores.bm25.deleted_docs()
    assert vault[0] > 0
    monkeypatch.setattr(repair, "folder_size", lambda _path: 300_000_000, raising=False)
    monkeypatch.setattr(repair, "free_space", lambda _path: 200_000_000, raising=False)
    assert repair.compact_bm25(stores) is False
    assert repair.compact_memory(stores) == []
    assert "bm25_compact_skipped part=vault reason=low disk" in caplog.text
    assert "bm25_compact_skipped part=memory/alpha reason=low disk" in caplog.text
    monkeypatch.undo()
    stores.upgrading = True
    try:
        assert repair.compact_bm25(stores) is False
        assert repair.compact_memory(stores) == []
    finally:
        stores.upgrading = False
    assert stores.bm25.deleted_docs() == vault and _deleted(s, "memory/alpha") > 0
    assert "bm25_compact_skipped part=vault reason=upgrading" in caplog.text
    assert repair.compact_bm25(stores) is True
    assert "memory/alpha" in repair.compact_memory(stores)


def test_stores_closed_under_a_stopped_rewrite_end_it_quietly(in_process: Any, monkeypatch: Any) -> None:
    """A rewrite run on past the stop's bound (the daemon no longer waits for it) meets the
    stores closed: it ends logged, with nothing committed, not with a closed database's error
    out of the scheduled job (a traceback at every such stop)."""
    from sidecar.daemon.schedule import optimize

    s = in_process
    _churn(s)
    stores = s.harness.stores
    stop = threading.Event()
    real = type(stores.manifest).chunks_under

    def chunks_under(self: Any, prefix: str) -> Any:
        stop.set()
        stores.close()  # what the stop's close does meanwhile, past its bound
        return real(self, prefix)

    monkeypatch.setattr(type(stores.manifest), "chunks_under", chunks_under)
    optimize(s.harness.vectors, stop)


def test_an_index_with_nothing_deleted_that_disagrees_with_the_manifest_is_rewritten(
    in_process: Any, caplog: Any
) -> None:
    """A memory index holding no deleted document whose count differs from the manifest's (a
    note the manifest does not hold) is rewritten from the manifest too, and logged as a
    rebuild: judged by its deleted documents alone, it kept the drift until a restart."""
    from sidecar.index.repair import compact_memory
    from sidecar.stores.bm25 import Bm25Doc

    s = in_process
    _churn(s)
    bm25 = s.harness.stores.bm25
    ghost = Bm25Doc.of(
        "ghost", "memory/beta/ghost", "memory", "beta", title="G", aliases=(), headings=(), body="x"
    )
    bm25.add([ghost])
    bm25.commit()
    assert _deleted(s, "memory/beta") == 0
    wanted = s.harness.stores.manifest.inbox_counts()["beta"]
    assert bm25.inbox_counts()["beta"] != wanted
    assert "memory/beta" in compact_memory(s.harness.stores)
    assert bm25.inbox_counts()["beta"] == wanted
    assert "index_rebuilt store=bm25 part=memory/beta reason=count mismatch" in caplog.text
    assert "ghost" not in {cid for cid, _ in bm25.search("x", 20, agent_scope="beta")}
    # Counts that agree and nothing deleted: left as they are (no rewrite every hour).
    assert "memory/beta" not in compact_memory(s.harness.stores)


def test_an_index_taken_for_drifted_whose_counts_agree_under_the_lock_is_left_as_it_is(
    in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The manifest's counts are read once, before the indexes' and without the lock: a memory
    write committed in between makes an index with nothing deleted look drifted. Under the lock
    its counts agree after all, so it is left as it is (no rewrite, no rebuild logged)."""
    from sidecar.index import repair

    s = in_process
    s.call("write", {"slug": "first", "content": "The backup runs at three."}, agent="alpha")
    s.call("search", {"query": "backup"}, agent="alpha")  # alpha's own index made
    stores = s.harness.stores
    assert repair.compact_memory(stores) == []  # counts agree, nothing deleted
    real = repair._memory_wanted

    def wanted_then_a_write(st: Any) -> dict[str, int]:
        got = real(st)
        s.call("write", {"slug": "second", "content": "Quince jelly for the winter."}, agent="alpha")
        return got

    monkeypatch.setattr(repair, "_memory_wanted", wanted_then_a_write)
    with caplog.at_level("INFO"):
        assert repair.compact_memory(stores) == []
    assert "bm25_compacted" not in caplog.text and "index_rebuilt" not in caplog.text
