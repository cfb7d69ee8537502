"""A big change in the vault (a branch switch, an ``rm -r`` under way) while the daemon serves:
answers and `status` say the index is catching up while file changes wait or are applied, and
`status` does not count a moved note twice."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

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
