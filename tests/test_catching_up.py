"""A big change in the vault (a branch switch, an ``rm -r`` under way) while the daemon serves:
answers and `status` say the index is catching up while file changes wait or are applied, a
deletion seen by file events is decided once it stopped growing (one decision for one deletion,
however many event batches it spans), and `status` does not count a moved note twice."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.clients.mcp_texts import status_of, text_of_search
from sidecar.clients.mcp_tools import TOOLS
from sidecar.daemon.indexing import IndexLoop
from tests.conftest import FakeEmbedder, Harness, write
from tests.in_process import InProcessServer


def _notes(folder: Path, n: int, word: str = "lighthouse") -> list[Path]:
    return [
        write(folder / f"n{i}.md", f"# Note {i}\n\nThe keeper of {word} {i} logs storm {i}.\n")
        for i in range(n)
    ]


def _keys(h: Harness, prefix: str) -> set[str]:
    return set(h.stores.manifest.file_states(prefix))


def _loop(h: Harness, beat: Any = None) -> IndexLoop:
    return IndexLoop(
        h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=beat or (lambda _act: None)
    )


def _run_queued(loop: IndexLoop) -> None:
    """The index loop's next sweep, run here (what its thread does)."""
    job = loop._next()
    assert job is not None
    loop._run(job)


def _events(h: Harness, *paths: Path) -> None:
    """The file events of a change, as the watcher hands them to the indexer."""
    h.indexer.sweep(only=frozenset(), paths={str(p) for p in paths})


def _second_look(h: Harness) -> None:
    """The look at each root whose deletion was under way, which the daemon's tick takes once
    ``watch.settleSeconds`` passed (``Supervisor.due``)."""
    settling = [st for st in h.supervisor.roots.values() if st.settle_at is not None]
    assert settling, "no deletion waits for a second look"
    due = h.supervisor.due(now=max(st.settle_at or 0 for st in settling))
    assert {st.name for st in settling} <= set(due)
    h.indexer.sweep(only=frozenset(due))


# --- catchingUp -------------------------------------------------------------------------------


def test_answers_say_the_index_is_catching_up_while_changes_wait(serve_in_process: Any, vault: Path) -> None:
    """New notes whose file events wait: search, recall and health say the index is catching
    up (a branch switch's answers held old and new paths for seconds and looked complete); once
    applied, nothing is said."""
    server: InProcessServer = serve_in_process()
    h = server.harness
    loop = _loop(h)  # type: ignore[arg-type]
    server.handlers.service.catching_up = loop.catching_up
    new = _notes(vault / "Switched", 3, "harbour")
    loop.changed({str(p) for p in new})
    found = server.call("search", {"query": "harbour keeper"})
    assert found["catchingUp"] == {"done": 0, "total": 3}
    assert not found["hits"]
    recalled = server.call("recall", {"message": "garden tomatoes sun water", "minScore": 0})
    assert recalled["catchingUp"] == {"done": 0, "total": 3}
    assert "catching up" in recalled["context"]
    status = server.call("health")["index"]["catching_up"]
    assert status == {"done": 0, "total": 3, "leaving": 0}
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
        loop.changed({str(p) for p in _notes(vault / "Batch", 6)})
        _run_queued(loop)
        during = [s for s in seen if s is not None]
        assert during and all(done < total for done, total in during)
        assert during[0][1] == 6 and during[-1][0] >= 4
        assert loop.catching_up() is None
    finally:
        h.close()


def test_clients_say_it_in_plain_words(serve_in_process: Any) -> None:
    """The CLI's status line, the notes count without the notes leaving, the MCP text and the
    MCP tool's output schema."""
    server: InProcessServer = serve_in_process()
    health = server.call("health")
    health["index"]["catching_up"] = {"done": 40, "total": 1500, "leaving": 700}
    files = health["index"]["files"]
    shown = render_status(health)
    assert "Index: ready; catching up with changes in the notes (40 of 1,500 applied)" in shown
    assert f"{files - 700:,} notes (700 more still indexed under old paths" in shown
    text = text_of_search("x", {"hits": [], "catchingUp": {"done": 40, "total": 1500}})
    assert "note: the index is catching up with changes in the notes (40 of 1,500 applied)" in text
    assert "catching up with changes in the notes (40 of 1,500 applied)" in status_of(health)["message"]
    search_tool = next(t for t in TOOLS if t["name"] == "memory_search")
    assert "catchingUp" in search_tool["outputSchema"]["properties"]


def test_a_memory_writes_own_event_is_not_catching_up(harness: Harness) -> None:
    """A memory write indexes its note before it answers: the file event it causes does not flag
    the answers that follow (a vault note's does)."""
    loop = _loop(harness)
    loop.changed({str(harness.cfg.agents_dir / "claude" / "2026-12-05 note.md")})
    assert loop.catching_up() is None
    loop.changed({str(harness.cfg.vault.path / "New.md")})  # type: ignore[operator]
    assert loop.catching_up() == (0, 1)


# --- one decision for one deletion ---------------------------------------------------------------


@pytest.fixture
def big(make_cfg: Any, vault: Path) -> Any:
    """The vault fixture (3 notes, a wiki with 1) plus 20 notes in Notes/: 23 vault notes."""
    _notes(vault / "Notes", 20)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def test_a_deletion_spanning_two_event_batches_is_held_whole(big: Harness, vault: Path) -> None:
    """6 of 23 notes deleted (under the guard's share), then 10 more in the next batch of file
    events: the first 6 were deleted at once and only the 10 held ("lost 10 of 17"); now the
    whole deletion (16 of 23) is held, none applied."""
    notes = sorted((vault / "Notes").glob("*.md"))
    for p in notes[:6]:
        p.unlink()
    _events(big, *notes[:6])
    assert len(_keys(big, "vault/Notes/")) == 20  # under way: not decided yet
    for p in notes[6:16]:
        p.unlink()
    _events(big, *notes[6:16])
    _second_look(big)
    st = big.supervisor.roots["vault"]
    assert (st.hold_kind, st.held_deletions) == ("mass", 16), st.error
    assert "lost 16 of 23" in (st.error or "")
    assert len(_keys(big, "vault/Notes/")) == 20  # every deletion held, none applied


def test_an_ordinary_deletion_is_applied_after_its_second_look(big: Harness, vault: Path) -> None:
    """A folder of 6 notes removed (under the share): applied once a second look finds the same
    notes missing; meanwhile they count as leaving (``catching_up``)."""
    loop = _loop(big)
    folder = vault / "Notes"
    gone = sorted(folder.glob("*.md"))[:6]
    for p in gone:
        p.unlink()
    _events(big, *gone)
    assert big.indexer.changes.settling() == 6
    assert loop.catching_up() == (0, 6)
    _second_look(big)
    assert len(_keys(big, "vault/Notes/")) == 14
    st = big.supervisor.roots["vault"]
    assert not st.offline and st.hold_kind is None and st.settle_at is None
    assert loop.catching_up() is None


def test_a_branch_switch_that_moves_and_edits_most_notes_is_no_held_loss(big: Harness, vault: Path) -> None:
    """20 of 23 notes moved to another folder and edited (a checkout: no move by stat): the
    first batch judged "vault lost 20 of 23", held the deletions and showed every note under its
    old and its new path until the new ones outweighed the old. Now the loss waits for a second
    look, which judges it beside the new notes and applies it."""
    old = sorted((vault / "Notes").glob("*.md"))
    for p in old:
        write(vault / "Hilfe" / p.name, p.read_text(encoding="utf-8") + "\nEdited on the other branch.\n")
        p.unlink()
    _events(big, vault / "Notes", vault / "Hilfe")
    st = big.supervisor.roots["vault"]
    assert not st.offline and st.hold_kind is None, st.error
    assert len(_keys(big, "vault/Hilfe/")) == 20
    assert big.indexer.changes.settling() == 20
    _second_look(big)
    assert not _keys(big, "vault/Notes/")
    assert not st.offline and st.hold_kind is None and not big.problems.active_in("index")


def test_settling_waits_for_a_second_look(big: Harness) -> None:
    """The second look is due ``watch.settleSeconds`` after the first (the tick's ``due``), not before."""
    vault = big.cfg.vault.path
    assert vault is not None
    gone = sorted((vault / "Notes").glob("*.md"))[:5]
    for p in gone:
        p.unlink()
    _events(big, *gone)
    st = big.supervisor.roots["vault"]
    assert st.settle_at is not None
    assert "vault" not in big.supervisor.due(now=st.settle_at - big.cfg.watch.settle_seconds / 2)
    assert "vault" in big.supervisor.due(now=st.settle_at)


def test_the_second_look_sees_where_the_notes_went(big: Harness, vault: Path, tmp_path: Path) -> None:
    """12 of 23 vault notes moved into the wiki, their new halves come in a later batch of
    events: the first look saw only a loss; the second, asked for the vault alone, lists the
    wiki too and finds them moved (listing the vault alone, it held "12 of 23" as a loss)."""
    notes = sorted((vault / "Notes").glob("*.md"))[:12]
    aside = tmp_path / "aside"
    aside.mkdir()
    for p in notes:
        p.rename(aside / p.name)  # a rename keeps mtime and size
    _events(big, *notes)
    assert big.indexer.changes.settling() == 12
    (vault / "wiki/Notes").mkdir()
    for p in notes:
        (aside / p.name).rename(vault / "wiki/Notes" / p.name)
    _events(big, vault / "wiki/Notes")
    _second_look(big)
    st = big.supervisor.roots["vault"]
    assert not st.offline and st.hold_kind is None, st.error
    assert len(_keys(big, "vault/Notes/")) == 8
    assert len(_keys(big, "wiki/Notes/")) == 12


def test_a_running_daemon_holds_a_deletion_spanning_two_batches_whole(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """A real daemon and its file events: 6 of 24 notes deleted, then (while the first part waits
    for its second look) 10 more: one decision, all 16 held (the first 6 were deleted at once and
    only the rest held)."""
    vault = tmp_path / "vault"
    notes = _notes(vault / "Notes", 20)
    for name in ("Garden", "Boat", "Bread"):
        write(vault / f"{name}.md", f"# {name}\n\nA note on the {name.lower()}.\n")
    d = daemon_factory(vault, keyword_only=True, env={"SIDECAR_WATCH_SETTLE_SECONDS": "5"}).start()
    write(vault / "probe.md", "# probe\n\nzqxpppq\n")  # found by its event: the watch is set up
    d.wait_for(lambda h: h["index"]["by_source"]["vault"]["files"] == 24, 60)

    def leaving(n: int) -> Any:
        return lambda h: (h["index"].get("catching_up") or {}).get("leaving") == n

    for p in notes[:6]:
        p.unlink()
    d.wait_for(leaving(6), 30)  # the first part waits for its second look
    for p in notes[6:16]:
        p.unlink()
    h = d.wait_for(lambda h: any(r["name"] == "vault" and r["hold"] for r in h["roots"]), 60)
    vault_root = next(r for r in h["roots"] if r["name"] == "vault")
    assert (vault_root["hold"]["kind"], vault_root["held_deletions"]) == ("mass", 16), vault_root["error"]
    assert h["index"]["by_source"]["vault"]["files"] == 24  # none applied
