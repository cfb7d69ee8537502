"""A big change in the vault (a branch switch, an ``rm -r`` under way) while the daemon serves:
answers and `status` say the index is catching up while file changes wait or are applied (a bulk
of them: not a note or a few being saved), with the notes applied since the catch-up began, and
`status` does not count a moved note twice."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.clients.mcp_texts import status_of, text_of_search
from sidecar.clients.mcp_tools import TOOLS
from sidecar.contracts.errors import StoreError
from sidecar.contracts.notices import catching_up_note
from sidecar.daemon.indexing import CATCHING_UP_MIN, IndexLoop
from tests.conftest import FakeEmbedder, Harness, write
from tests.in_process import InProcessServer
from tests.index_helpers import edit_links


def _notes(folder: Path, n: int, word: str = "lighthouse") -> list[Path]:
    return [
        write(folder / f"n{i}.md", f"# Note {i}\n\nThe keeper of {word} {i} logs storm {i}.\n")
        for i in range(n)
    ]


def _loop(h: Harness, beat: Any = None) -> IndexLoop:
    return IndexLoop(
        h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=beat or (lambda _act: None)
    )


def _run_queued(loop: IndexLoop) -> None:
    """The index loop's next sweep, run here (what its thread does)."""
    job = loop._next()
    assert job is not None
    loop._run(job)


# --- catchingUp -------------------------------------------------------------------------------


def test_answers_say_the_index_is_catching_up_while_changes_wait(serve_in_process: Any, vault: Path) -> None:
    """New notes whose file events wait: search, recall and health say the index is catching
    up (a branch switch's answers held old and new paths for seconds and looked complete); once
    applied, nothing is said."""
    server: InProcessServer = serve_in_process()
    h = server.harness
    loop = _loop(h)  # type: ignore[arg-type]
    server.handlers.service.catching_up = loop.catching_up
    new = _notes(vault / "Switched", 12, "harbour")
    loop.changed({str(p) for p in new})
    found = server.call("search", {"query": "harbour keeper"})
    assert found["catchingUp"] == {"done": 0, "total": 12}
    assert not found["hits"]
    recalled = server.call("recall", {"message": "garden tomatoes sun water", "minScore": 0})
    assert recalled["catchingUp"] == {"done": 0, "total": 12}
    assert "catching up" in recalled["context"]
    status = server.call("health")["index"]["catching_up"]
    assert status == {"done": 0, "total": 12, "recut": 0, "leaving": 0, "leaving_by_source": {}}
    _run_queued(loop)
    after = server.call("search", {"query": "harbour keeper"})
    assert "catchingUp" not in after and after["hits"]
    assert server.call("health")["index"]["catching_up"] is None


def test_a_sweep_applying_changes_reports_its_progress(make_cfg: Any, vault: Path) -> None:
    """While a sweep writes the changes it found, batch by batch, the count says how far it is."""
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2}), FakeEmbedder())
    try:
        h.sweep()
        seen: list[tuple[int, int] | None] = []
        loop = _loop(h, beat=lambda act: seen.append(loop.catching_up()) if act is not None else None)
        loop.changed({str(p) for p in _notes(vault / "Batch", 12)})
        _run_queued(loop)
        during = [s for s in seen if s is not None]
        assert during and all(done < total for done, total, _recut in during)
        assert during[0][1] == 12 and during[-1][0] >= 10
        assert loop.catching_up() is None
    finally:
        h.close()


def test_a_re_cut_says_the_notes_are_cut_again_not_moved(make_cfg: Any, vault: Path) -> None:
    """The chunking settings changed: every note is read to be cut again, no file changed. The
    answers said "notes moved or deleted may still be found under their old paths"; they say the
    notes are cut again, vectors kept where the text stays, how many wait."""
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2}), FakeEmbedder())
    try:
        _notes(vault / "Kept", 12)
        h.sweep()
        h.indexer.manifest.reread_all()  # what a changed chunking does at start
        seen: list[tuple[int, int, int] | None] = []
        loop = _loop(h, beat=lambda act: seen.append(loop.catching_up()) if act is not None else None)
        loop.request_sweep(audit=False)
        _run_queued(loop)
        during = [s for s in seen if s is not None]
        assert during and all(recut == total >= 12 for _done, total, recut in during)  # the vault's notes too
        done, total, recut = during[0]
        said = catching_up_note(done, total, recut)
        assert "cut into chunks again" in said and "moved" not in said and f"{total - done} waiting" in said
        shown = text_of_search("x", {"hits": [], "catchingUp": {"done": 2, "total": 12, "recut": 12}})
        assert "(2 of 12 done, 10 waiting): a chunk whose text stays keeps its vector" in shown
        # Files changed beside the re-cut: the old wording, and how many are only cut again.
        mixed = catching_up_note(2, 20, 12)
        assert "(2 of 20 applied; 12 of them only cut into chunks again)" in mixed and "old paths" in mixed
    finally:
        h.close()


def test_a_re_cut_beside_changed_files_says_both(make_cfg: Any, vault: Path) -> None:
    """A re-cut (chunking settings, model or an upgrade) while files changed too: the loop counts
    the notes only cut again among all, and the answer keeps the words about moved notes."""
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2}), FakeEmbedder())
    try:
        _notes(vault / "Kept", 12)
        h.sweep()
        h.indexer.manifest.reread_all()
        _notes(vault / "Fresh", 8)
        seen: list[tuple[int, int, int] | None] = []
        loop = _loop(h, beat=lambda act: seen.append(loop.catching_up()) if act is not None else None)
        loop.request_sweep(audit=False)
        _run_queued(loop)
        during = [s for s in seen if s is not None]
        assert during and all(0 < recut < total for _done, total, recut in during), during
        assert all(total - recut >= 8 for _done, total, recut in during)  # the new notes
        said = catching_up_note(*during[0])
        assert "only cut into chunks again" in said and "old paths" in said
    finally:
        h.close()


def test_clients_say_it_in_plain_words(serve_in_process: Any) -> None:
    """The CLI's status line, the notes count beside the notes leaving, the MCP text and the
    MCP tool's output schema."""
    server: InProcessServer = serve_in_process()
    health = server.call("health")
    health["index"]["catching_up"] = {
        "done": 40,
        "total": 1500,
        "leaving": 3,
        "leaving_by_source": {"vault": 2, "wiki": 1},
    }
    files, by_source = health["index"]["files"], health["index"]["by_source"]
    shown = render_status(health)
    assert "Index: ready; catching up with changes in the notes (40 of 1,500 applied)" in shown
    # ``files`` counts a moved note once, by its new path (its old entry is no longer counted).
    assert f"  {files:,} notes (the old entries of 3 moved notes are being removed)" in shown
    assert f"    vault   {by_source['vault']['files']:>7,} notes" in shown
    assert f"    wiki    {by_source['wiki']['files']:>7,} notes" in shown
    text = text_of_search("x", {"hits": [], "catchingUp": {"done": 40, "total": 1500}})
    assert "note: the index is catching up with changes in the notes (40 of 1,500 applied)" in text
    assert "catching up with changes in the notes (40 of 1,500 applied)" in status_of(health)["message"]
    search_tool = next(t for t in TOOLS if t["name"] == "memory_search")
    assert "catchingUp" in search_tool["outputSchema"]["properties"]


def test_a_memory_writes_own_event_is_not_catching_up(harness: Harness) -> None:
    """A memory write indexes its note before it answers: the file event it causes does not flag
    the answers that follow (a vault note's does)."""
    loop = _loop(harness)
    inbox = harness.cfg.agents_dir / "claude"
    loop.changed({str(inbox / f"2026-12-05 note {i}.md") for i in range(12)})
    assert loop.catching_up() is None
    vault = harness.cfg.vault.path
    assert vault is not None
    loop.changed({str(vault / f"New {i}.md") for i in range(12)})
    assert loop.catching_up() == (0, 12, 0)


# --- a bulk, counted from its start ---------------------------------------------------------------


def test_a_few_notes_being_saved_are_no_catch_up(harness: Harness) -> None:
    """A note or a few saved (a person typing, an agent's edits) are indexed within a second: no
    answer says the index is catching up ("notes moved or deleted may still be found under their
    old paths" was said for every note saved); a bulk of changes is."""
    loop = _loop(harness)
    vault = harness.cfg.vault.path
    assert vault is not None
    few = _notes(vault / "Few", CATCHING_UP_MIN - 1)
    loop.changed({str(p) for p in few})
    assert loop.catching_up() is None
    _run_queued(loop)
    loop.changed({str(p) for p in _notes(vault / "Bulk", CATCHING_UP_MIN)})
    assert loop.catching_up() == (0, CATCHING_UP_MIN, 0)  # counted from here: the few are not in it


def test_a_note_saved_over_and_over_is_no_catch_up(harness: Harness) -> None:
    """A hot note (indexed again at most every few seconds, ``HotNotes``) whose events keep coming
    is no change to catch up with: it neither counts nor keeps a catch-up going when its event
    waits as a sweep ends, so the next bulk is counted from 0 (summed over the sweeps, a note
    saved all the time said "catching up" for good)."""
    vault = harness.cfg.vault.path
    assert vault is not None
    log_note = str(write(vault / "Log.md", "# Log\n\nline\n"))
    loop = _loop(harness, beat=lambda act: loop.changed({log_note}) if act is not None else None)
    for _ in range(3):
        loop.hot.indexed({log_note: 5.0})  # it cost that much: quiet for a while
        loop.changed({str(p) for p in _notes(vault / "Bulk", 12)})
        _run_queued(loop)  # the note saved again meanwhile: its event waits
        assert loop.jobs.qsize()
        for _ in range(CATCHING_UP_MIN + 2):
            loop.changed({log_note})  # and again and again
        assert loop.catching_up() is None
    loop.changed({str(p) for p in _notes(vault / "Next", 12)})
    assert loop.catching_up() == (0, 12, 0)


def test_done_counts_every_sweep_of_the_catch_up(make_cfg: Any, vault: Path) -> None:
    """A switch whose file events come while a sweep runs is applied in several sweeps: ``done``
    counts the notes every sweep of the catch-up applied (it read 0 of N at each sweep's start,
    no progress for a person reading it twice a second), and ``total`` keeps them."""
    h = Harness(make_cfg(vault, **{"index.batchFiles": 4}), FakeEmbedder())
    try:
        h.sweep()
        later = _notes(vault / "Later", 12, "harbour")
        seen: list[tuple[int, int] | None] = []

        def beat(act: Any) -> None:
            if act is not None and not seen:
                loop.changed({str(p) for p in later})  # the checkout's next batch of events
            seen.append(loop.catching_up())

        loop = _loop(h, beat=beat)
        loop.changed({str(p) for p in _notes(vault / "First", 12)})
        _run_queued(loop)
        assert loop.catching_up() == (12, 24, 0)
        seen.clear()
        seen.append(None)  # no more events
        _run_queued(loop)
        during = [s for s in seen if s is not None]
        assert during and all(total == 24 and 12 < done < 24 for done, total, _recut in during)
        assert loop.catching_up() is None
    finally:
        h.close()


# --- a folder renamed --------------------------------------------------------------------------


@pytest.mark.parametrize("count", [12, 3])
def test_a_renamed_folder_is_never_found_twice_and_counted_once(
    serve_in_process: Any, vault: Path, count: int
) -> None:
    """A folder of 12 notes renamed, applied 4 notes a batch (or of 3, whose events apply the
    move without a sweep of the root): after each batch, and while old
    entries are being removed, no note is a hit under both its old and its new path (the old
    entries left only at the sweep's end: every
    note was found twice for as long as the whole folder took to read), ``total`` counts each
    moved note once (it said 24 for 12) and status never shows a count below 0."""
    server: InProcessServer = serve_in_process(**{"index.batchFiles": 4})
    h = server.harness
    _notes(vault / "Deutsch", count)
    h.sweep()
    while h.vectors.embed_pending():
        pass
    model = h.slot.model
    assert isinstance(model, FakeEmbedder)
    model.embedded.clear()
    (vault / "Deutsch").rename(vault / "de2")
    seen: list[tuple[list[str], tuple[int, int] | None, str]] = []

    def beat(act: Any) -> None:
        if act is None or act.phase != "indexing":
            return
        found = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
        refs = [hit["reference"] for hit in found["hits"] if "/n" in hit["reference"]]
        seen.append((refs, loop.catching_up(), render_status(server.call("health"))))

    removing = h.indexer.delete

    def delete(keys: Any) -> None:  # a search while old entries are being removed: both are in
        found = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
        seen.append(([hit["reference"] for hit in found["hits"] if "/n" in hit["reference"]], None, ""))
        removing(keys)

    h.indexer.delete = delete  # type: ignore[method-assign]
    loop = _loop(h, beat=beat)
    server.handlers.service.catching_up = loop.catching_up
    loop.changed({str(vault / "Deutsch"), str(vault / "de2")})  # the events of `mv Deutsch de2`
    _run_queued(loop)
    assert seen
    for refs, catching, shown in seen:
        names = [r.rpartition("/")[2] for r in refs]
        # every note found, once: under its new path or, not read yet, its old one
        assert len(names) == len(set(names)) and set(names) == {f"n{i}" for i in range(count)}, refs
        assert catching is None or catching[1] == count, catching
        assert not re.search(r"\s-\d", shown), shown
    final = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
    assert sorted(hit["reference"] for hit in final["hits"] if "/n" in hit["reference"]) == sorted(
        f"vault/de2/n{i}" for i in range(count)
    )
    while h.vectors.embed_pending():
        pass
    assert not [t for t in model.embedded if "lighthouse" in t]  # the moved notes' vectors reused


def _every_answer(server: InProcessServer) -> dict[str, Any]:
    """What each op answers about the notes of the ``_moved_folder`` test."""
    call = server.call
    return {
        "search": call("search", {"query": "keeper logs storms", "limit": 50}),
        "recall": call("recall", {"message": "keeper logs storms", "minScore": 0}),
        "list": call("list", {"source": "all", "limit": 500}, agent="claude"),
        "tagged": call("list", {"source": "vault", "tag": "harbour"}, agent="claude"),
        "outline": call("outline", {"source": "vault"}),
        "get": call("get", {"reference": "n1"}),  # by name, as a link names it
        "backlinks": call("get", {"reference": "vault/de2/n0"}),
        "harbour": call("get", {"reference": "vault/Harbour"}),
        "related": call("related", {"reference": "vault/de2/n0"}),
        "why_new": call("why", {"reference": "vault/de2/n2", "query": "keeper storms"}),
        "why_old": call("why", {"reference": "vault/Deutsch/n2", "query": "keeper storms"}),
    }


def test_every_answer_shows_a_moved_note_under_its_new_path_only(serve_in_process: Any, vault: Path) -> None:
    """While a renamed folder's old entries are being removed (their new ones written), no answer
    names an old path: search and recall left them out, but list, outline, get (by name, its links
    and backlinks), related and why still answered with them (or listed them as not indexed)."""
    server: InProcessServer = serve_in_process()
    h = server.harness
    for i in range(4):
        write(
            vault / "Deutsch" / f"n{i}.md",
            f"# Note {i}\n\n#harbour keeper {i} logs storms. [[n{(i + 1) % 4}]]\n",
        )
    write(vault / "Harbour.md", "# Harbour\n\nThe keepers' logs start at [[n0]].\n")
    h.sweep()
    (vault / "Deutsch").rename(vault / "de2")
    asked: list[tuple[str, dict[str, int], dict[str, Any]]] = []
    removing, removing_vectors = h.indexer.delete, h.vectors.delete_keys

    def delete(keys: Any) -> None:  # the removal begins
        if any("/Deutsch/" in k for k in keys):
            asked.append(("begins", dict(h.indexer.activity.leaving), _every_answer(server)))
        removing(keys)

    def delete_keys(keys: list[str]) -> None:  # under way
        if any("/Deutsch/" in k for k in keys):
            asked.append(("under way", dict(h.indexer.activity.leaving), _every_answer(server)))
        removing_vectors(keys)

    h.indexer.delete = delete  # type: ignore[method-assign]
    h.vectors.delete_keys = delete_keys  # type: ignore[method-assign]
    loop = _loop(h)
    loop.changed({str(vault / "Deutsch"), str(vault / "de2")})  # the events of `mv Deutsch de2`
    _run_queued(loop)
    assert [(point, leaving) for point, leaving, _ in asked] == [
        ("begins", {"vault": 4}),  # a move, not 4 notes deleted and 4 new ones
        ("under way", {"vault": 4}),
    ]
    for point, _, answers in asked:
        old = {op: a for op, a in answers.items() if op != "why_old" and "Deutsch" in json.dumps(a)}
        assert not old, (point, old)
        tagged = {x["reference"] for x in answers["tagged"]["notes"]}
        assert tagged == {f"vault/de2/n{i}" for i in range(4)}, point
        assert answers["get"]["reference"] == "vault/de2/n1", point
        backlinks = [b["reference"] for b in answers["backlinks"]["backlinks"]]
        assert backlinks == ["vault/Harbour", "vault/de2/n3"], point
        assert [x["target"] for x in answers["harbour"]["links"]] == ["vault/de2/n0"], point
        assert answers["why_new"]["indexed"] and not answers["why_old"]["indexed"], point
        assert "vault/de2/n1" in {r["reference"] for r in answers["related"]["related"]}, point


def _linked_folder(vault: Path) -> None:
    for i in range(4):
        write(vault / "Deutsch" / f"n{i}.md", f"# Note {i}\n\nkeeper {i} logs storms. [[n{(i + 1) % 4}]]\n")
    write(vault / "Harbour.md", "# Harbour\n\nThe keepers' logs start at [[n0]].\n")


def test_links_name_the_new_path_during_a_starts_first_sweep(serve_in_process: Any, vault: Path) -> None:
    """A folder renamed while the daemon was down: during the first sweep of the start, which
    resolves links only at its end, a link to a moved note named its old path (marked deleting,
    then gone) and the new note had no backlinks for the whole sweep."""
    server: InProcessServer = serve_in_process()
    h = server.harness
    _linked_folder(vault)
    h.sweep()
    (vault / "Deutsch").rename(vault / "de2")
    h.indexer.activity.first_sweep_done = False  # as at a start
    seen: list[tuple[list[Any], list[str]]] = []
    removing = h.vectors.delete_keys

    def delete_keys(keys: list[str]) -> None:  # the old entries are being removed
        if any("/Deutsch/" in k for k in keys):
            links = server.call("get", {"reference": "vault/Harbour"})["links"]
            back = server.call("get", {"reference": "vault/de2/n0"})["backlinks"]
            seen.append(([x["target"] for x in links], [b["reference"] for b in back]))
        removing(keys)

    h.vectors.delete_keys = delete_keys  # type: ignore[method-assign]
    h.sweep()
    assert seen
    for targets, back in seen:
        assert targets == ["vault/de2/n0"], targets
        assert "vault/Harbour" in back, back


def test_links_to_notes_a_crash_left_deleting_are_resolved_when_the_deletion_is_redone(
    serve_in_process: Any, vault: Path
) -> None:
    """A deletion interrupted (a crash) while a link still resolved to the note: redoing it at
    the start left the link on the removed note until the first sweep's end."""
    server: InProcessServer = serve_in_process()
    h = server.harness
    _linked_folder(vault)
    h.sweep()
    (vault / "Deutsch").rename(vault / "de2")
    h.sweep()
    old = [f"vault/Deutsch/n{i}" for i in range(4)]
    with h.stores.manifest.transaction() as db:  # what a crash mid-deletion left behind
        db.executemany(
            "INSERT INTO files (key, source, agent, rel, mtime_ns, size, hash, state) "
            "VALUES (?, 'vault', '', ?, 0, 0, '', 'deleting')",
            [(k, k[6:] + ".md") for k in old],
        )
        edit_links(db, "UPDATE links SET dst = 'vault/Deutsch/n0' WHERE src = 'vault/Harbour'")
    h.indexer.finish_interrupted()
    links = server.call("get", {"reference": "vault/Harbour"})["links"]
    assert [x["target"] for x in links] == ["vault/de2/n0"]
    back = server.call("get", {"reference": "vault/de2/n0"})["backlinks"]
    assert "vault/Harbour" in [b["reference"] for b in back]


@pytest.mark.parametrize("cut", ["stopped", "failed"])
def test_a_rename_cut_short_keeps_every_note_findable(serve_in_process: Any, vault: Path, cut: str) -> None:
    """A sweep applying a renamed folder stopped (the daemon stops) or failed (a full disk) after
    its first batch: the old entries of the moved notes not written yet were removed with the
    sweep's other deletions, and 8 of 12 notes were found under neither path until the next sweep
    (after a restart, or after the disk had room). They keep their old entry now."""
    server: InProcessServer = serve_in_process(**{"index.batchFiles": 4})
    h = server.harness
    _notes(vault / "Deutsch", 12)
    h.sweep()
    (vault / "Deutsch").rename(vault / "de2")
    loop = _loop(h)
    real = h.indexer.index_files
    batches = [0]

    def index_files(part: Any) -> int:
        batches[0] += 1
        if batches[0] == 2 and cut == "failed":
            raise StoreError("BM25 commit failed: No space left on device")
        written = real(part)
        if cut == "stopped":
            loop.stop.set()  # the daemon stops during the first batch
        return written

    h.indexer.index_files = index_files  # type: ignore[method-assign]
    loop.changed({str(vault / "Deutsch"), str(vault / "de2")})
    job = loop._next()
    assert job is not None
    if cut == "failed":
        with pytest.raises(StoreError):
            h.indexer.sweep(job.roots, paths=job.paths, stop=loop.stop)
    else:
        h.indexer.sweep(job.roots, paths=job.paths, stop=loop.stop)
    found = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
    names = {hit["reference"].rpartition("/")[2] for hit in found["hits"] if "/n" in hit["reference"]}
    assert names == {f"n{i}" for i in range(12)}
    h.indexer.index_files = real  # type: ignore[method-assign]
    h.sweep()  # the next sweep: every note under its new path only
    final = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
    assert sorted(hit["reference"] for hit in final["hits"] if "/n" in hit["reference"]) == sorted(
        f"vault/de2/n{i}" for i in range(12)
    )


def test_status_says_the_moved_notes_leaving_beside_the_count(serve_in_process: Any) -> None:
    """While moved notes' old entries are removed, ``files`` no longer counts them (marked
    deleting first): status shows ``files`` and each source's count as they are, never less
    what leaves (it once printed ``vault -154 notes``), and says beside the count how many old
    entries are being removed (``leaving``, as protocol.md says)."""
    server: InProcessServer = serve_in_process()
    health = server.call("health")
    files = health["index"]["files"]
    vault = health["index"]["by_source"]["vault"]["files"]
    health["index"]["catching_up"] = {
        "done": 0,
        "total": 400,
        "leaving": files + 170,
        "leaving_by_source": {"vault": vault + 154},
    }
    shown = render_status(health)
    leaving = f"{files + 170:,}"
    assert f"  {files:,} notes (the old entries of {leaving} moved notes are being removed)" in shown, shown
    assert f"    vault   {vault:>7,} notes" in shown, shown
    assert not re.search(r"\s-\d", shown), shown


def test_a_folder_renamed_in_a_large_vault_counts_as_it_goes(serve_in_process: Any, vault: Path) -> None:
    """A folder of a tenth of the vault renamed, its root's listing (if any) longer than the quiet
    time: no move was found, each note counted twice in ``total`` (read and deleted), ``files``
    counted both copies and the old paths answered until the sweep's end. Now ``total`` counts
    each moved note once, ``done`` only grows, and ``files`` stays what the vault holds."""
    server: InProcessServer = serve_in_process(**{"index.batchFiles": 4})
    h = server.harness
    for i in range(60):
        write(vault / "Other" / f"o{i}.md", f"# Other {i}\n\nThe ferry {i} sails at dawn.\n")
    _notes(vault / "Deutsch", 12)
    h.sweep()
    files = server.call("health")["index"]["files"]
    bursts = h.indexer.changes.bursts
    listing = h.supervisor.list_root

    def list_root(root: Any) -> Any:  # a vault of 17,000 notes on a busy share: the quiet time passes
        bursts.clock = lambda: time.monotonic() + 3600.0
        return listing(root)

    h.supervisor.list_root = list_root  # type: ignore[method-assign]
    (vault / "Deutsch").rename(vault / "de2")
    seen: list[tuple[tuple[int, int] | None, int, list[str]]] = []

    def beat(act: Any) -> None:
        if act is not None and act.phase == "indexing":
            found = server.call("search", {"query": "keeper lighthouse storm logs", "limit": 50})
            refs = [hit["reference"] for hit in found["hits"] if "/n" in hit["reference"]]
            seen.append((loop.catching_up(), server.call("health")["index"]["files"], refs))

    loop = _loop(h, beat=beat)
    loop.changed({str(vault / "Deutsch"), str(vault / "de2")})
    _run_queued(loop)
    assert len(seen) == 3, seen
    dones = [catching[0] for catching, _, _ in seen if catching is not None]
    assert all(catching is None or catching[1] == 12 for catching, _, _ in seen), seen
    assert dones == sorted(dones), seen
    for _, counted, refs in seen:
        names = [r.rpartition("/")[2] for r in refs]
        assert counted == files and sorted(names) == sorted(f"n{i}" for i in range(12)), (counted, refs)
    assert loop.catching_up() is None


def _twenty_of_sixty_deleted(h: Harness, vault: Path) -> tuple[Any, list[Path]]:
    """60 notes swept, then the 20 of ``Old/`` deleted (no event yet): the loop and those notes."""
    for i in range(40):
        write(vault / "Other" / f"o{i}.md", f"# Other {i}\n\nThe ferry {i} sails at dawn.\n")
    gone = _notes(vault / "Old", 20)
    h.sweep()
    loop = _loop(h)
    for p in gone:
        p.unlink()
    return loop, gone


def test_a_deletion_under_way_counts_each_note_once(make_cfg: Any, vault: Path) -> None:
    """`rm -r` of 20 notes whose events come in two batches: the first batch's sweep finds all 20
    gone (they wait for the root to go quiet), and the second batch's paths name 10 of them again:
    the answers said "0 of 30" (5,000 of 7,928 for a deletion of 5,000)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        loop, gone = _twenty_of_sixty_deleted(h, vault)
        loop.changed({str(p) for p in gone[:10]})
        _run_queued(loop)
        assert h.indexer.changes.bursts.waiting() == 20
        loop.changed({str(p) for p in gone[10:]})  # the next batch of the same deletion
        assert loop.catching_up() == (0, 20, 0)
    finally:
        h.close()


def test_a_path_named_like_a_waiting_note_is_still_pending(make_cfg: Any, vault: Path) -> None:
    """`rm -r` of 20 notes whose deletion waits; then a folder ``Old/n15`` is made where the note
    ``Old/n15.md`` was: its event's path maps to the deleted note's key, and was taken for that
    note's deletion (waiting already, counted once) instead of a change still to be looked at."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        loop, gone = _twenty_of_sixty_deleted(h, vault)
        loop.changed({str(p) for p in gone})
        _run_queued(loop)
        assert h.indexer.changes.bursts.waiting() == 20
        (vault / "Old/n15").mkdir()
        loop.changed({str(vault / "Old/n15"), str(gone[3])})
        assert loop.catching_up() == (0, 21, 0)  # the note once, the folder a change to look at
    finally:
        h.close()
