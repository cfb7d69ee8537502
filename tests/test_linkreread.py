"""The links of unchanged notes are read again once after an upgrade whose link reader reads them
differently: links only (no note is embedded or cut again), in batches that resume after a stop."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.index import linkreread
from sidecar.notes.linktext import LINKS_VERSION
from tests.conftest import DaemonProcess, FakeEmbedder, Harness, write
from tests.index_helpers import edit_links


def _vault(tmp_path: Path) -> Path:
    v = tmp_path / "v"
    write(v / "Haus.md", "# Haus\n\n## Dach\n\nLärchenbretter.\n")
    table = "| Teil | Wo |\n| --- | --- |\n| Dach | [[Haus#Dach\\|das Dach]] |\n"
    write(v / "Tabelle.md", f"# Tabelle\n\n{table}")
    write(v / "Übersicht.md", "# Übersicht\n\nDer Plan: [[Planung.canvas]]\n")
    write(v / "Planung.canvas", json.dumps({"nodes": [{"id": "a", "type": "text", "text": "Sprint"}]}))
    for i in range(5):
        write(v / f"n{i}.md", f"# N{i}\n\nsiehe [[Haus]]\n")
    return v


def _as_an_old_version_left_it(db: sqlite3.Connection) -> None:
    """The links the reader before version 2 found: an anchor with the backslash that escapes the
    alias's pipe, no link to a canvas (an attachment then); no version recorded."""
    edit_links(
        db,
        "UPDATE links SET anchor = 'Dach\\', dst = NULL WHERE src = 'vault/Tabelle'",
        "DELETE FROM links WHERE src = 'vault/Übersicht'",
    )
    db.execute("DELETE FROM meta WHERE name IN (?, ?)", (linkreread.VERSION_META, linkreread.CURSOR_META))


def _links(h: Harness, src: str) -> list[tuple[str, str, str | None]]:
    rows = h.stores.manifest.read("SELECT target, anchor, dst FROM links WHERE src = ? ORDER BY ord", (src,))
    return [tuple(r) for r in rows]


def test_links_of_unchanged_notes_are_read_again_once_and_resume_after_a_stop(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade the notes nobody edited kept the links the old reader found (an anchor
    'Dach\\', no link to a canvas) until edited. Now each is read again once, links only: nothing
    embedded or cut again, a stop between batches resumes at the next note, a note edited
    meanwhile is left to the sweep, and the version is recorded so a later start does nothing."""
    v = _vault(tmp_path)
    cfg = make_cfg(v)
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    assert h.stores.manifest.get_meta(linkreread.VERSION_META) == str(LINKS_VERSION)  # a new index
    assert not h.indexer.links.due
    h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
    monkeypatch.setattr(linkreread, "BATCH", 3)
    h = Harness(cfg, model)
    try:
        h.sweep()  # the upgrade's first sweep: every note unchanged, no link read
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach\\", "vault/Haus")]
        progress = h.indexer.links.progress
        assert progress is not None and (progress.done, progress.total) == (0, 9)
        h.indexer.reread_links()  # one batch, then the process ends (a stop, a kill -9)
        assert h.indexer.links.progress == linkreread.LinkProgress(3, 9)
    finally:
        h.close()
    write(v / "n4.md", "# N4\n\nneu: [[Haus#Dach]]\n")  # edited while the daemon was down
    embedded = len(model.embedded)
    h = Harness(cfg, model)
    try:
        assert h.indexer.links.progress == linkreread.LinkProgress(3, 9)  # resumed, not redone
        h.indexer.sweep()
        while h.indexer.links.due:
            h.indexer.reread_links()
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach", "vault/Haus")]
        assert _links(h, "vault/Übersicht") == [("Planung.canvas", "", "vault/Planung.canvas")]
        back = h.stores.manifest.read("SELECT src FROM links WHERE dst = 'vault/Planung.canvas'")
        assert back == [("vault/Übersicht",)]
        assert _links(h, "vault/n4") == [("Haus", "Dach", "vault/Haus")]  # the sweep's reading
        # Only the edited note was embedded; the pass embeds nothing.
        while h.vectors.embed_pending():
            pass
        assert model.embedded[embedded:] == [t for t in model.embedded[embedded:] if "neu" in t]
        assert h.stores.manifest.get_meta(linkreread.VERSION_META) == str(LINKS_VERSION)
        assert h.stores.manifest.get_meta(linkreread.CURSOR_META) is None
    finally:
        h.close()
    h = Harness(cfg, model)
    try:
        assert not h.indexer.links.due and h.indexer.links.progress is None
    finally:
        h.close()


def test_the_pass_waits_for_a_root_offline_now(tmp_path: Path, make_cfg: Any) -> None:
    """A root offline during the pass (its share gone for a moment) had all its notes marked to be
    read whole, and the pass ended: the next sweep cut and wrote every one of them again. The pass
    waits for it instead, and reads their links alone once it is back."""
    v = _vault(tmp_path)
    cfg = make_cfg(v)
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
    h = Harness(cfg, model)
    try:
        h.indexer.sweep()
        vault = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.supervisor.mark_offline(vault, "share gone (test)")
        while h.indexer.links_due():  # the wiki (no notes) is done; then the vault waits
            h.indexer.reread_links()
        assert not h.indexer.reread_links()  # the index loop waits, rather than spin
        assert h.indexer.links.due  # not finished
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach\\", "vault/Haus")]
        h.supervisor.mark_online(vault)
        assert h.indexer.links_due()
        while h.indexer.links.due:
            h.indexer.reread_links()
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach", "vault/Haus")]
        assert not h.stores.manifest.read("SELECT key FROM files WHERE hash = '' OR size = -1")
        embedded = len(model.embedded)
        assert h.sweep()["changed"] == 0  # nothing cut or written again
        assert len(model.embedded) == embedded
        assert h.stores.bm25.search("Lärchenbretter", 5)
    finally:
        h.close()


def test_status_shows_the_pass_while_it_runs(daemon_factory: Any, tmp_path: Path) -> None:
    """Through a real daemon: the pass runs by itself after the first sweep and its progress is a
    line of `sidecar status` while it runs; the old anchors are right once it ends."""
    v = _vault(tmp_path)
    d: DaemonProcess = daemon_factory(v, keyword_only=True).start()
    assert d.health()["index"]["links_reread"] is None
    assert d.stop() == 0
    with sqlite3.connect(d.cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
    d.start()
    d.wait_for(lambda h: h["index"]["links_reread"] is None, timeout=60)
    links = d.call("get", {"reference": "vault/Tabelle"})["links"]
    assert [(x["target"], x["anchor"]) for x in links] == [("vault/Haus", "Dach")]
    health = d.health()
    health["index"]["links_reread"] = {"done": 1200, "total": 5000, "waiting": ["vault"]}
    shown = render_status(health)
    assert "Links read again after an upgrade: 1,200 of 5,000 notes" in shown
    assert "waiting for vault to answer again" in shown


def test_sidecar_index_without_a_daemon_reads_the_links_again(tmp_path: Path, make_cfg: Any) -> None:
    """`sidecar index` with no daemon never ran the pass: an index kept up that way kept the old
    reader's links for good. It runs the pass after its sweep."""
    from sidecar.daemon.oneshot import index_once

    v = _vault(tmp_path)
    cfg = make_cfg(v)
    index_once(cfg, rebuild=False)
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
    phases: set[str] = set()
    summary = index_once(cfg, rebuild=False, progress=lambda phase, done, total: phases.add(phase))
    assert summary["changed"] == 0 and "links" in phases  # links only: no note read whole
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        rows = db.execute("SELECT target, anchor, dst FROM links WHERE src = 'vault/Tabelle'").fetchall()
        version = db.execute("SELECT value FROM meta WHERE name = ?", (linkreread.VERSION_META,)).fetchone()
    assert rows == [("Haus", "Dach", "vault/Haus")]
    assert version == (str(LINKS_VERSION),)


def test_a_root_away_for_good_does_not_hold_the_other_roots(tmp_path: Path, make_cfg: Any) -> None:
    """The pass waited while any root was offline: a share gone for good (still configured) held
    the links of every other root's unchanged notes at the old reader's for good. Each root is
    read on its own now: the wiki's links are right while the vault is away, status names what
    the pass waits for, and the vault's are read once it answers again."""
    v = _vault(tmp_path)
    write(
        v / "wiki" / "Karte.md", "# Karte\n\n| Teil | Wo |\n| --- | --- |\n| Dach | [[Haus#Dach\\|Dach]] |\n"
    )
    cfg = make_cfg(v)
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
        edit_links(db, "UPDATE links SET anchor = 'Dach\\', dst = NULL WHERE src = 'wiki/Karte'")
    h = Harness(cfg, model)
    try:
        h.indexer.sweep()
        vault = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.supervisor.mark_offline(vault, "share gone (test)")
        while h.indexer.links_due():
            h.indexer.reread_links()
        assert _links(h, "wiki/Karte") == [("Haus", "Dach", "vault/Haus")]  # read while the vault is away
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach\\", "vault/Haus")]  # waits for it
        progress = h.indexer.links.progress
        assert progress is not None and progress.waiting == ("vault",)
        h.supervisor.mark_online(vault)
        while h.indexer.links.due:
            h.indexer.reread_links()
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach", "vault/Haus")]
        assert h.sweep()["changed"] == 0  # links only: nothing cut or written again
    finally:
        h.close()


def _wiki_vault(tmp_path: Path) -> Path:
    v = _vault(tmp_path)
    for i in range(3):
        table = "| a | b |\n| --- | --- |\n| x | [[Haus#Dach\\|Dach]] |\n"
        write(v / "wiki" / f"K{i}.md", f"# K{i}\n\n{table}")
    return v


def _old_wiki(cfg: Any) -> None:
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        _as_an_old_version_left_it(db)
        edit_links(db, "UPDATE links SET anchor = 'Dach\\', dst = NULL WHERE src LIKE 'wiki/%'")


def test_a_vault_that_hangs_holds_the_wiki_inside_it_without_a_busy_loop(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiki lies in the vault: while a read of the vault hangs, the wiki's reads are refused at
    once. The pass took the wiki for a root that answers, failed on its first note and wrote the
    same cursor again: the index loop went round thousands of times a second, writing the manifest
    each time. Now the wiki waits with the vault, and a batch that cannot move writes nothing."""
    from sidecar.index import records

    v = _wiki_vault(tmp_path)
    cfg = make_cfg(v, **{"watch.probeTimeoutSeconds": "0.3"})
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    _old_wiki(cfg)
    h = Harness(cfg, model)
    release = threading.Event()
    real = records.read_note

    def hanging(path: Path, limit: int, root: Any = None) -> Any:
        if path.name == "Haus.md":  # the vault's first note in key order
            release.wait()
        return real(path, limit, root)

    try:
        h.indexer.sweep()
        monkeypatch.setattr(records, "read_note", hanging)
        while h.indexer.links_due():
            h.indexer.reread_links()  # the vault's first batch: its read hangs, the vault waits
        writes: list[Any] = []
        monkeypatch.setattr(h.stores.manifest, "set_meta", lambda *a: writes.append(a))
        assert not h.indexer.links_due()  # the wiki waits for the vault around it
        assert h.indexer.reread_links() is False and writes == []  # nothing moved, nothing written
        progress = h.indexer.links.progress
        assert progress is not None and "vault" in progress.waiting
    finally:
        release.set()
        h.close()


@pytest.mark.parametrize("value", ["{" * 100_000, '{"vault": "zzz"}', '{"vault": {"a": 1}}', "[1]", "{"])
def test_a_cursor_edited_by_hand_starts_over_and_never_marks_a_root_done_unread(
    tmp_path: Path, make_cfg: Any, value: str
) -> None:
    """A deeply nested value crashed every start (RecursionError); a value above the root's keys
    marked it done without reading a note."""
    v = _wiki_vault(tmp_path)
    cfg = make_cfg(v)
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    _old_wiki(cfg)
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (linkreread.CURSOR_META, value))
    h = Harness(cfg, model)
    try:
        h.indexer.sweep()
        while h.indexer.links_due():
            h.indexer.reread_links()
        assert not h.indexer.links.due
        assert _links(h, "vault/Tabelle") == [("Haus", "Dach", "vault/Haus")]
        assert _links(h, "wiki/K0") == [("Haus", "Dach", "vault/Haus")]
    finally:
        h.close()


def test_an_offline_root_with_no_notes_does_not_hold_the_pass(tmp_path: Path, make_cfg: Any) -> None:
    """A vault never mounted (a USB disk) has no notes indexed: nothing of it waits, so the pass
    ends with the inboxes' notes (it showed '1 of 1 notes, waiting for vault' for good)."""
    cfg = make_cfg(tmp_path / "not-mounted")
    inbox = cfg.agents_dir / "a" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    for d in (cfg.agents_dir, cfg.agents_dir / "a"):
        d.chmod(0o700)
    write(inbox / "n1.md", "# N1\n\nsiehe [[n2]]\n")
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        db.execute("DELETE FROM meta WHERE name IN (?, ?)", (linkreread.VERSION_META, linkreread.CURSOR_META))
    h = Harness(cfg, model)
    try:
        h.indexer.sweep()
        assert h.indexer.links.due
        for _ in range(5):
            if not h.indexer.links_due():
                break
            h.indexer.reread_links()
        assert not h.indexer.links.due
    finally:
        h.close()


def test_a_kill_as_the_pass_ends_leaves_no_cursor_the_next_upgrade_would_trust(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version and the cursor are two writes: killed between them, the cursor said every root
    was done, and the next upgrade's pass trusted it and read nothing. The cursor goes first."""
    v = _wiki_vault(tmp_path)
    cfg = make_cfg(v)
    model = FakeEmbedder()
    h = Harness(cfg, model)
    h.sweep()
    h.close()
    _old_wiki(cfg)
    h = Harness(cfg, model)
    real_set = h.stores.manifest.set_meta

    class Killed(BaseException):
        pass

    def set_meta(name: str, value: str) -> None:
        if name == linkreread.VERSION_META:
            raise Killed  # a kill -9 between the pass's last two writes
        real_set(name, value)

    monkeypatch.setattr(h.stores.manifest, "set_meta", set_meta)
    try:
        h.indexer.sweep()
        with pytest.raises(Killed):
            _run_the_pass(h)
    finally:
        h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        left = db.execute("SELECT value FROM meta WHERE name = ?", (linkreread.CURSOR_META,)).fetchone()
    assert left is None  # the next start reads every note's links again (links only: cheap)


def _run_the_pass(h: Harness) -> None:
    while h.indexer.links_due():
        h.indexer.reread_links()
