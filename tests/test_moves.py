"""A move is not a loss: notes that vanish from one key and turn up under another (in the same
root, between the vault and its wiki, found by a full sweep or by file events) leave their old
keys at once and do not count toward the mass-deletion guard, which still holds a real loss."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import StoreError
from sidecar.vault import sources
from sidecar.vault.birth import birth_ns
from tests.conftest import FakeEmbedder, Harness, write


def _notes(folder: Path, n: int) -> list[Path]:
    return [
        write(folder / f"n{i}.md", f"# Note {i}\n\nThe keeper of lighthouse {i} logs storm {i}.\n")
        for i in range(n)
    ]


def _keys(h: Harness, prefix: str) -> set[str]:
    return set(h.stores.manifest.file_states(prefix))


def _hits(h: Harness, word: str) -> list[str]:
    """The keys whose indexed text holds ``word`` (each once if the note is indexed once)."""
    assert h.stores.bm25.num_docs() == h.stores.manifest.chunk_count()  # no keyword-index ghosts
    return sorted(c.key for c in h.stores.manifest.all_chunks() if word in c.text)


@pytest.fixture
def big(make_cfg: Any, vault: Path) -> Any:
    """The vault fixture (3 notes, a wiki with 1) plus 10 notes in Notes/."""
    _notes(vault / "Notes", 10)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def _sweep(h: Harness, how: str, paths: set[Path]) -> None:
    if how == "sweep":
        h.sweep()
    else:  # the file events of the move: the folder gone and the folder come, nothing else
        h.indexer.sweep(only=frozenset(), paths={str(p) for p in paths})
        # A loss no move explains waits for the root to go quiet; the index loop then asks for
        # the judgment: here at once, on a clock past the quiet time.
        bursts = h.indexer.changes.bursts
        if bursts.waiting():
            bursts.clock = lambda: time.monotonic() + 3600.0
            try:
                h.indexer.sweep(only=frozenset(bursts.due()))
            finally:
                bursts.clock = time.monotonic


def _online(h: Harness, *names: str) -> None:
    for name in names:
        st = h.supervisor.roots[name]
        assert not st.offline and st.hold_kind is None and st.held_deletions == 0, (name, st.error)


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_most_of_the_vault_moved_into_the_wiki_is_no_mass_deletion(
    big: Harness, vault: Path, how: str
) -> None:
    """10 of the vault's 13 notes moved into the wiki: the vault "lost 10 of 13" and held the
    deletions for 6 h, every moved note found twice (old and new key)."""
    (vault / "Notes").rename(vault / "wiki/Notes")
    _sweep(big, how, {vault / "Notes", vault / "wiki/Notes"})
    _online(big, "vault", "wiki")
    assert not _keys(big, "vault/Notes/")
    assert _keys(big, "wiki/Notes/") == {f"wiki/Notes/n{i}" for i in range(10)}
    assert _hits(big, "lighthouse 3") == ["wiki/Notes/n3"]


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_most_of_the_wiki_moved_into_the_vault_is_no_mass_deletion(
    make_cfg: Any, vault: Path, how: str
) -> None:
    """The other way round: the wiki, listed after the vault, loses what the vault gains."""
    _notes(vault / "wiki/Notes", 10)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        (vault / "wiki/Notes").rename(vault / "Notes")
        _sweep(h, how, {vault / "Notes", vault / "wiki/Notes"})
        _online(h, "vault", "wiki")
        assert not _keys(h, "wiki/Notes/")
        assert _hits(h, "lighthouse 3") == ["vault/Notes/n3"]
    finally:
        h.close()


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_a_folder_moved_within_its_root_is_no_mass_deletion(big: Harness, vault: Path, how: str) -> None:
    """10 of 13 notes moved to another folder of the same root: no false "lost 10 of 13"
    warning and no duplicates until a retry sweep counted the new keys too."""
    (vault / "Archive").mkdir()
    (vault / "Notes").rename(vault / "Archive/Notes")
    _sweep(big, how, {vault / "Notes", vault / "Archive/Notes"})
    _online(big, "vault")
    assert not _keys(big, "vault/Notes/")
    assert _hits(big, "lighthouse 3") == ["vault/Archive/Notes/n3"]


def test_notes_renamed_in_place_are_moves(big: Harness, vault: Path) -> None:
    """Notes renamed in their folder (a script that prefixes a date) keep mtime and size."""
    for p in (vault / "Notes").glob("*.md"):
        p.rename(p.with_name(f"2026-01-01 {p.name}"))
    big.sweep()
    _online(big, "vault")
    assert _hits(big, "lighthouse 3") == ["vault/Notes/2026-01-01 n3"]


@pytest.mark.parametrize("how", ["moved out", "renamed"])
def test_a_wiki_emptied_by_a_move_into_the_vault_stays_online(make_cfg: Any, vault: Path, how: str) -> None:
    """Everything moved out of the wiki (or the wiki folder renamed) inside a vault that is
    there: the wiki went offline as an unmounted share and its notes stayed as ghosts for as
    long as it stayed empty."""
    _notes(vault / "wiki/Notes", 6)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        if how == "moved out":
            (vault / "Archive").mkdir()
            for p in (vault / "wiki").iterdir():
                p.rename(vault / "Archive" / p.name)
        else:
            (vault / "wiki").rename(vault / "old wiki")
        h.sweep()
        _online(h, "vault", "wiki")
        assert not _keys(h, "wiki/")
        where = "Archive" if how == "moved out" else "old wiki"
        assert _hits(h, "lighthouse 3") == [f"vault/{where}/Notes/n3"]
    finally:
        h.close()


def test_a_deleted_wiki_inside_a_present_vault_is_a_mass_deletion(make_cfg: Any, vault: Path) -> None:
    """The wiki folder deleted while the vault around it is there: no unmounted share (the
    vault shows the share is there), so the deletions wait as a mass deletion (the root stays
    readable, its new notes are indexed) and apply after the hold, not "offline" for good."""
    _notes(vault / "wiki/Notes", 6)
    h = Harness(make_cfg(vault), FakeEmbedder())
    now = [1_000_000.0]
    h.supervisor.clock = h.supervisor.hold_clock = lambda: now[0]
    try:
        h.sweep()
        shutil.rmtree(vault / "wiki")
        h.sweep()
        st = h.supervisor.roots["wiki"]
        assert st.hold_kind == "mass" and st.held_deletions == 7
        assert len(_keys(h, "wiki/")) == 7  # held: nothing deleted yet
        _online(h, "vault")
        write(vault / "wiki/Fresh.md", "# Fresh\n\nA new wiki page about tide tables.\n")
        h.sweep()
        assert "wiki/Fresh" in _keys(h, "wiki/")
        now[0] += 360 * 60 + 1
        h.sweep()
        assert _keys(h, "wiki/") == {"wiki/Fresh"}
        _online(h, "wiki")
    finally:
        h.close()


def test_a_move_whose_new_half_an_earlier_sweep_indexed(big: Harness, vault: Path) -> None:
    """The new copies were indexed by an earlier sweep (a sync tool writes the new files first
    and deletes the old ones later): the same bytes with the same mtime, indexed under keys this
    sweep sees, make the old keys moves too. A sweep of the vault alone does not see the wiki:
    its entries are no evidence (an emptied share's wiki is gone with it), so the loss is held
    until a sweep that lists both."""
    shutil.copytree(vault / "Notes", vault / "wiki/Moved")  # copy2: mtimes kept, as a move keeps them
    big.indexer.sweep(only={"wiki"})
    shutil.rmtree(vault / "Notes")
    big.indexer.sweep(only={"vault"})
    assert big.supervisor.roots["vault"].hold_kind == "mass"
    big.sweep()
    _online(big, "vault")
    assert _hits(big, "lighthouse 3") == ["wiki/Moved/n3"]


def test_a_real_mass_loss_beside_a_few_moves_is_still_held(big: Harness, vault: Path) -> None:
    """8 of 13 notes really gone, 2 moved and a look-alike new file: the 8 are held as before
    (only those counted and shown); the moves leave their old keys at once."""
    notes = sorted((vault / "Notes").glob("*.md"))
    (vault / "Kept").mkdir()
    for p in notes[:2]:
        p.rename(vault / "Kept" / p.name)
    # Same size and mtime as a lost note, but neither its name nor its folder: no move.
    lookalike = write(vault / "Elsewhere/other.md", notes[5].read_text(encoding="utf-8"))
    st5 = notes[5].stat()
    os.utime(lookalike, ns=(st5.st_atime_ns, st5.st_mtime_ns))
    for p in notes[2:]:
        p.unlink()
    big.sweep()
    st = big.supervisor.roots["vault"]
    assert st.offline and st.hold_kind == "mass" and st.held_deletions == 8
    assert "lost 8 of 13" in (st.error or "")
    assert _keys(big, "vault/Notes/") == {f"vault/Notes/{p.stem}" for p in notes[2:]}
    assert _hits(big, "lighthouse 0") == ["vault/Kept/n0"]


def test_an_emptied_share_with_its_wiki_is_held_as_empty(make_cfg: Any, vault: Path) -> None:
    """The vault emptied as a whole (an emptied share), its wiki too: both are held as empty;
    the wiki's vault does not count as there while it is held so itself."""
    _notes(vault / "Notes", 6)
    _notes(vault / "wiki/Notes", 6)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        before = len(_keys(h, ""))
        for p in list(vault.rglob("*.md")):
            if ".obsidian" not in p.parts and ".trash" not in p.parts:
                p.unlink()
        for _ in range(3):
            h.sweep()
        assert h.supervisor.roots["vault"].hold_kind == "empty"
        assert h.supervisor.roots["wiki"].hold_kind == "empty"
        assert len(_keys(h, "")) == before
    finally:
        h.close()


def _empty_share(vault: Path) -> None:
    """What an emptied (or server-side unmounted) share shows: the folder, nothing in it."""
    for p in list(vault.iterdir()):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def test_emptied_share_with_one_copy_in_the_wiki_stays_held_as_empty(make_cfg: Any, vault: Path) -> None:
    """One vault note was copied into the wiki (Explorer/Finder/cp -p keep the mtime). The share
    is emptied: the wiki, gone with it, is not listed, and its copy is no evidence of a move (it
    made the vault's "empty" hold, kept for as long as the share stays so, a timed mass
    deletion that deleted the whole vault from the index after the hold)."""
    _notes(vault / "Notes", 10)
    shutil.copy2(vault / "Notes/n0.md", vault / "wiki/n0 copy.md")
    h = Harness(make_cfg(vault), FakeEmbedder())
    now = [1_000_000.0]
    h.supervisor.clock = h.supervisor.hold_clock = lambda: now[0]
    try:
        h.sweep()
        known = set(h.stores.manifest.file_states("vault/"))
        assert len(known) == 13
        _empty_share(vault)
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "empty"
        now[0] += 360 * 60 + 1  # massDeletionHoldMinutes later, the share still empty
        h.indexer.sweep(only={"vault"})
        left = set(h.stores.manifest.file_states("vault/"))
        assert st.hold_kind == "empty"
        assert left == known
    finally:
        h.close()


def test_emptied_share_whose_wiki_mirrors_most_notes_is_not_deleted_at_once(
    make_cfg: Any, vault: Path
) -> None:
    """Most vault notes have a byte-identical copy (mtime kept: rsync -a, cp -p, Finder) in the
    wiki. The share is emptied: the wiki's copies, gone with it, are no moves (counted as such,
    lost/known fell below massDeletionShare and the whole vault left the index at once)."""
    _notes(vault / "Notes", 10)
    shutil.copytree(vault / "Notes", vault / "wiki/Mirror")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        known = set(h.stores.manifest.file_states("vault/"))
        _empty_share(vault)
        h.sweep()
        st = h.supervisor.roots["vault"]
        left = set(h.stores.manifest.file_states("vault/"))
        assert st.offline and st.hold_kind == "empty" and left == known
    finally:
        h.close()


def _private(make_cfg: Any, vault: Path, rule: str) -> Harness:
    """The ``big`` vault with a folder Private/ that a rule leaves out (Obsidian's Excluded files
    or index.exclude), holding one note, swept."""
    _notes(vault / "Notes", 10)
    write(vault / "Private/diary.md", "# Diary\n\nNothing for the lighthouse keepers.\n")
    if rule == "obsidian":
        write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
        h = Harness(make_cfg(vault), FakeEmbedder())
    else:
        h = Harness(make_cfg(vault, **{"index.exclude": "Private/"}), FakeEmbedder())
    h.sweep()
    assert _hits(h, "lighthouse 3") == ["vault/Notes/n3"]
    return h


@pytest.mark.parametrize("rule", ["obsidian", "index.exclude"])
@pytest.mark.parametrize("how", ["sweep", "events"])
def test_a_folder_moved_into_an_excluded_folder_leaves_at_once(
    make_cfg: Any, vault: Path, how: str, rule: str
) -> None:
    """10 of 13 notes moved (renamed) into an excluded folder: the very files are there, not
    lost, so they leave the index at once, as a new rule's do (the guard held them as "lost 10 of
    13" for 6 h, searchable under their old paths: a privacy hole)."""
    h = _private(make_cfg, vault, rule)
    try:
        (vault / "Notes").rename(vault / "Private/Notes")
        _sweep(h, how, {vault / "Notes", vault / "Private/Notes"})
        _online(h, "vault")
        assert not _keys(h, "vault/Notes/") and not _keys(h, "vault/Private/")
        assert _hits(h, "lighthouse") == []
    finally:
        h.close()


def test_a_move_into_an_excluded_folder_whose_events_came_apart(make_cfg: Any, vault: Path) -> None:
    """The new half of the move is looked at first, the old half in a later batch of events:
    the full sweep the deletions ask for finds the files in the excluded folder."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        (vault / "Notes").rename(vault / "Private/Notes")
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Private/Notes")})
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Notes")})
        _online(h, "vault")
        assert _hits(h, "lighthouse") == []
    finally:
        h.close()


@pytest.mark.parametrize("sweep_between", [False, True])
@pytest.mark.parametrize("how", ["sweep", "events"])
def test_an_excluded_copy_and_the_notes_deleted_is_held(
    make_cfg: Any, vault: Path, how: str, sweep_between: bool
) -> None:
    """A copy of the notes in the excluded folder (copytree: copy2 keeps mtime and size, the bytes
    are the same), then the notes deleted, with a sweep between or not (a sync tool's copy-then-
    delete): only the inode tells a copy from a move, so the loss is held, and status says so."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        shutil.copytree(vault / "Notes", vault / "Private/Notes")
        if sweep_between:
            _sweep(h, how, {vault / "Private/Notes"})
        shutil.rmtree(vault / "Notes")
        _sweep(h, how, {vault / "Notes", vault / "Private/Notes"})
        _held(h, 10)
        st = h.supervisor.roots["vault"]
        assert st.held_deletions == 10 and "--confirm-deletions vault" in (st.error or "")
        assert "10 of them have a copy with the same time and size in an excluded folder" in (st.error or "")
        assert _hits(h, "lighthouse 3") == ["vault/Notes/n3"]
    finally:
        h.close()


def test_a_hard_linked_backup_is_no_move(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """A backup made of hard links (cp -al, rsync --link-dest) in the excluded folder shares the
    notes' inodes, mtimes and sizes. Notes/ stops being listed (its files still there): held."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        (vault / "Private/Backup").mkdir()
        for p in (vault / "Notes").glob("*.md"):
            os.link(p, vault / "Private/Backup" / p.name)
        h.sweep()
        (vault / "Notes").rename(tmp_path / "server-side-Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_a_moved_note_with_another_mtime_is_no_evidence(make_cfg: Any, vault: Path) -> None:
    """Inode numbers are given again once their file is deleted: a file in the excluded folder
    with a missing note's inode but another mtime (what a reused number looks like) is no move."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        (vault / "Notes").rename(vault / "Private/Notes")
        for p in (vault / "Private/Notes").glob("*.md"):
            os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 1_000_000_000))
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_a_share_that_reports_inode_0_is_held(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some SMB and FUSE shares report inode 0 for every file: no inode is evidence of a move,
    the folder moved into the excluded one is held as today."""
    import sidecar.vault.sources as sources

    real = sources.file_id
    monkeypatch.setattr(sources, "file_id", lambda st: real(os.stat_result((*st[:1], 0, *st[2:]))))
    h = _private(make_cfg, vault, "obsidian")
    try:
        assert not any(st.ino for st in h.stores.manifest.file_states("vault/").values())
        (vault / "Notes").rename(vault / "Private/Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


@pytest.mark.parametrize("fs_type", ["cifs", "vfat", "fuse.rclone", "tmpfs", "overlay"])
def test_a_filesystem_whose_inodes_do_not_last_is_held(
    make_cfg: Any, vault: Path, tmp_path: Path, fs_type: str
) -> None:
    """On SMB (without server inode numbers), FAT or a FUSE filesystem an inode number may be
    given anew at a remount and name another file: a move into the excluded folder is held. On
    tmpfs and overlay numbers last only as long as the mount, which the manifest outlives (a
    tmpfs vault refilled at boot gives its files last boot's numbers)."""
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - {fs_type} x rw\n")
    _notes(vault / "Notes", 10)
    write(vault / "Private/diary.md", "# Diary\n")
    cfg = make_cfg(vault, **{"index.exclude": "Private/", "watch.mountTable": str(table)})
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        (vault / "Notes").rename(vault / "Private/Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


@pytest.mark.parametrize("moved", ["after a sweep", "before any sweep"])
def test_an_upgraded_index_learns_inodes_without_reading(
    make_cfg: Any, vault: Path, moved: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest written before inodes were kept opens as it is and holds such a move as it
    did; the first sweep records each note's inode from its stat without reading a note again,
    and a move after it leaves at once."""
    import sqlite3

    import sidecar.index.records as records_mod

    h = _private(make_cfg, vault, "obsidian")
    h.close()
    with sqlite3.connect(h.cfg.index_dir / "manifest.sqlite") as db:
        db.execute("ALTER TABLE files DROP COLUMN ino")
        db.execute("ALTER TABLE files DROP COLUMN dev")
    h = Harness(h.cfg, FakeEmbedder())
    try:
        if moved == "after a sweep":
            reads: list[Path] = []
            real = records_mod.read_note
            monkeypatch.setattr(
                records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r)
            )
            h.sweep()
            assert reads == []
            assert all(st.ino for st in h.stores.manifest.file_states("vault/").values())
        (vault / "Notes").rename(vault / "Private/Notes")
        h.sweep()
        if moved == "after a sweep":
            _online(h, "vault")
            assert _hits(h, "lighthouse") == []
        else:
            _held(h, 10)
    finally:
        h.close()


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_the_wiki_moved_into_an_excluded_folder_of_the_vault(make_cfg: Any, vault: Path, how: str) -> None:
    """The wiki folder (its own root) moved into the vault's excluded folder: its notes are
    there, not lost, and leave at once (F5 of the review). By file events only the wiki is
    listed: the vault's walk of the folder they name finds the files."""
    for i in range(6):
        write(vault / f"wiki/Pages/w{i}.md", f"# Page {i}\n\nThe tide table of harbour {i}.\n")
    h = _private(make_cfg, vault, "obsidian")
    try:
        assert len(_keys(h, "wiki/")) == 7
        (vault / "wiki").rename(vault / "Private/wiki")
        _sweep(h, how, {vault / "wiki", vault / "Private/wiki"})
        _online(h, "vault", "wiki")
        assert not _keys(h, "wiki/") and _hits(h, "harbour") == []
    finally:
        h.close()


@pytest.mark.parametrize("restart", [False, True])
def test_notes_lost_beside_excluded_copies_of_them_are_still_held(
    make_cfg: Any, vault: Path, restart: bool
) -> None:
    """An excluded folder has long held copies of most notes, their mtimes kept (a backup made
    with rsync -a). The notes vanish (a share half listed), in the same run or after a restart:
    the old copies are no moves (an excluded copy is no evidence: a review found old backups
    passing for moves), the loss is held; the one note renamed into the excluded folder (its own
    inode, mtime and size there) leaves at once."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        shutil.copytree(vault / "Notes", vault / "Private/Backup")
        h.sweep()
        if restart:  # what the last run found excluded is known from the index
            h.close()
            h = Harness(h.cfg, FakeEmbedder())
        notes = sorted((vault / "Notes").glob("*.md"))
        notes[0].rename(vault / "Private" / notes[0].name)
        for p in notes[1:]:
            p.unlink()
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "mass" and st.held_deletions == 9, st.error
        assert _keys(h, "vault/Notes/") == {f"vault/Notes/{p.stem}" for p in notes[1:]}
    finally:
        h.close()


# A review of the move-into-an-excluded-folder change: an excluded copy must never pass for
# where a vanished share's notes went (each of these released a real loss at once).
def _with_excluded_backup(make_cfg: Any, vault: Path, rule: str) -> Harness:
    """``_private``, its excluded Private/ also holding an old rsync -a backup of Notes/."""
    h = _private(make_cfg, vault, rule)
    shutil.copytree(vault / "Notes", vault / "Private/Backup")  # copy2: mtimes kept
    h.sweep()
    assert len(_keys(h, "vault/Notes/")) == 10
    return h


def _held(h: Harness, n: int) -> None:
    st = h.supervisor.roots["vault"]
    left = _keys(h, "vault/Notes/")
    assert (st.hold_kind, len(left)) == ("mass", n), f"hold={st.hold_kind} left={len(left)} err={st.error}"


def _excluded_rows(h: Harness) -> set[str]:
    return {r[0] for r in h.stores.manifest.read("SELECT key FROM excluded_notes WHERE key LIKE 'vault/%'")}


@pytest.mark.parametrize("restart", [True, False])
@pytest.mark.parametrize("rule", ["obsidian", "index.exclude"])
def test_empty_mount_point_then_restart_then_half_listed_share(
    make_cfg: Any, vault: Path, tmp_path: Path, rule: str, restart: bool
) -> None:
    """The share shows an empty folder for a while (hold "empty"), the daemon restarts
    (a reboot), the share comes back without Notes/ (half listed, or really lost): the
    10 lost notes must be held, as the old backup in Private/ was there all along."""
    h = _with_excluded_backup(make_cfg, vault, rule)
    aside = tmp_path / "share-contents"
    aside.mkdir()
    try:
        assert len(_excluded_rows(h)) == 11
        for p in list(vault.iterdir()):  # the empty mount point
            p.rename(aside / p.name)
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "empty", (st.hold_kind, st.error)
        rows_while_empty = _excluded_rows(h)
        if restart:
            h.close()
            h = Harness(h.cfg, FakeEmbedder())  # restart
        h.sweep()  # still empty
        for p in list(aside.iterdir()):  # back, but Notes/ not listed
            if p.name != "Notes":
                p.rename(vault / p.name)
        h.sweep()
        st = h.supervisor.roots["vault"]
        left = _keys(h, "vault/Notes/")
        assert (st.hold_kind, len(left)) == ("mass", 10), (
            f"rows while empty={len(rows_while_empty)} hold={st.hold_kind} left={len(left)} err={st.error}"
        )
    finally:
        h.close()


def test_backup_written_into_excluded_folder_during_a_hold(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """Notes/ stops being listed (half-listed share; on the server the files are still there) and
    is held as a mass deletion. A server-side nightly job then writes a dated rsync -a copy of the
    vault into Private/ (excluded). The held loss must stay held."""
    _notes(vault / "Notes", 10)
    write(vault / "Private/diary.md", "# Diary\n")
    write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        aside = tmp_path / "server-side-Notes"
        (vault / "Notes").rename(aside)  # not listed by the client
        h.sweep()
        _held(h, 10)
        shutil.copytree(aside, vault / "Private/Backup-2026-12-05/Notes")  # copy2 keeps mtimes
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_old_backup_renamed_during_a_hold(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """The old backup in Private/ was settled long ago; during a held loss of Notes/ the user
    renames the backup folder (Private/Backup -> Private/Backup-2025): its notes get new keys and
    count as "new" excluded notes, so the held deletions go at once."""
    h = _with_excluded_backup(make_cfg, vault, "obsidian")
    try:
        (vault / "Notes").rename(tmp_path / "server-side-Notes")
        h.sweep()
        _held(h, 10)
        (vault / "Private/Backup").rename(vault / "Private/Backup-2025")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_excluded_folder_unreadable_once_then_notes_vanish(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One settled sweep cannot list Private/Backup (an I/O error, a permission flip while a
    backup job writes there): the settled set forgets the old backup, nothing guards that. A
    later half listing of Notes/ is then taken for a move into the backup."""
    h = _with_excluded_backup(make_cfg, vault, "obsidian")
    import sidecar.vault.sources as sources

    real = os.scandir
    bad = str(vault / "Private/Backup")

    def flaky(path: Any = ".") -> Any:
        if str(path) == bad:
            raise PermissionError(13, "Permission denied", bad)
        return real(path)

    try:
        monkeypatch.setattr(sources.os, "scandir", flaky)
        h.sweep()
        assert h.supervisor.roots["vault"].hold_kind is None
        monkeypatch.setattr(sources.os, "scandir", real)
        (vault / "Notes").rename(tmp_path / "server-side-Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_copies_of_some_notes_release_the_others_too(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """As the backup-during-a-hold case, but 8 more notes (More/) with no copy anywhere vanish
    too: the 10 "moves" bring the lost share under massDeletionShare, and all 18 go at once."""
    _notes(vault / "Notes", 10)
    for i in range(8):
        write(vault / f"More/m{i}.md", f"# M{i}\n\nno copy of this one {i}\n")
    write(vault / "Private/diary.md", "# Diary\n")
    write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        (vault / "Notes").rename(tmp_path / "server-side-Notes")
        (vault / "More").rename(tmp_path / "server-side-More")
        h.sweep()
        assert h.supervisor.roots["vault"].hold_kind == "mass"
        shutil.copytree(tmp_path / "server-side-Notes", vault / "Private/Backup/Notes")
        h.sweep()
        more = _keys(h, "vault/More/")
        assert len(more) == 8, f"More/ notes left: {len(more)}; hold={h.supervisor.roots['vault'].hold_kind}"
    finally:
        h.close()


def test_full_sweep_overwrites_what_events_recorded_meanwhile(make_cfg: Any, vault: Path) -> None:
    """A full sweep lists the vault (Archive/2024 Review.md excluded), then indexes in batches;
    between batches, the file event of the note's rename inside Archive/ is looked at (fix 2
    records the new name at once). The sweep then records its own, older listing over it: the link
    points at the old, deleted name again until the next full sweep."""
    write(vault / "Notes/Hub.md", "See [[2024 Review]].\n")
    old = write(vault / "Archive/2024 Review.md", "# 2024 Review\n")
    write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    h = Harness(make_cfg(vault, **{"index.batchFiles": 1}), FakeEmbedder())
    try:
        h.sweep()
        for i in range(3):  # work for a few batches
            write(vault / f"New/x{i}.md", f"# X{i}\n")
        (vault / "Archive/Years").mkdir()
        fired: list[bool] = []

        def hot() -> set[str]:
            if fired:
                return set()
            fired.append(True)
            new = old.rename(vault / "Archive/Years/2024 Review.md")
            return {str(old), str(new)}

        h.indexer.hot_paths = hot
        calls: list[dict[str, Any]] = []
        real_record = h.indexer._record_excluded

        def record(diff: Any, every: Any, *rest: Any) -> None:
            calls.append({k: dict(v) for k, v in diff.excluded.items()})
            real_record(diff, every, *rest)

        h.indexer._record_excluded = record  # type: ignore[method-assign]
        h.indexer.sweep()
        assert fired and len(calls) >= 2, calls
        # the events' look recorded the new name (and dropped the old one) ...
        hot_calls = [c for c in calls if "vault/Archive/Years/2024 Review" in c]
        assert hot_calls and hot_calls[0]["vault/Archive/2024 Review"] == {}, calls
        # ... then the sweep's own record, from its listing made before the rename, replaces it
        rows = {r[0] for r in h.stores.manifest.read("SELECT key FROM excluded_notes")}
        assert rows == {"vault/Archive/Years/2024 Review"}, rows
    finally:
        h.close()


# --- the evidence of a rename into an excluded folder, as a review found it wanting ---------------


@pytest.mark.parametrize("name", ["{stem}~20261205-083000.md", "{stem} copy.md"])
@pytest.mark.parametrize("how", ["sweep", "events"])
def test_notes_renamed_under_new_names_into_an_excluded_folder_are_held(
    make_cfg: Any, vault: Path, how: str, name: str
) -> None:
    """A sync tool's versioning renames each file a remote device deleted into its versions
    folder (excluded) as n3~20261205-083000.md: the very files, but a sync tool's mass deletion,
    which the guard is for (it was released at once). A move keeps the names."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        dest = vault / "Private/versions/Notes"
        dest.mkdir(parents=True)
        for p in (vault / "Notes").glob("*.md"):
            p.rename(dest / name.format(stem=p.stem))
        _sweep(h, how, {vault / f"Notes/n{i}.md" for i in range(10)} | {vault / "Private/versions"})
        _held(h, 10)
    finally:
        h.close()


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_copies_restored_after_a_loss_into_freed_inodes_are_held(
    make_cfg: Any, vault: Path, tmp_path: Path, how: str
) -> None:
    """A sync tool deletes the notes; the user restores them from a backup outside the vault
    (cp -p) into the excluded folder. ext4 gives each copy its own note's freed inode number, and
    the copy keeps mtime and size: all passed for renames. A copy is born when it is made."""
    outside = tmp_path / "outside-backup"
    h = _private(make_cfg, vault, "obsidian")
    try:
        shutil.copytree(vault / "Notes", outside)
        notes = sorted((vault / "Notes").glob("*.md"), key=lambda p: p.stat().st_ino)
        old = {p.name: p.stat().st_ino for p in notes}
        for p in notes:
            p.unlink()
        for p in notes:
            shutil.copy2(outside / p.name, vault / "Private" / p.name)
        reused = sum(old[n] == (vault / "Private" / n).stat().st_ino for n in old)
        _sweep(h, how, {*notes, *(vault / "Private" / n for n in old)})
        _held(h, 10)
        if not reused:
            pytest.skip("this filesystem gave the copies new inode numbers: the scenario did not arise")
    finally:
        h.close()


def test_a_rename_where_no_birth_time_is_known_is_held(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A platform or filesystem that says no birth time (older kernels, some filesystems): a
    rename cannot be told from a copy given the freed inode, so it is held as any loss."""
    monkeypatch.setattr(sources, "birth_ns", lambda path, ino: 0)
    h = _private(make_cfg, vault, "obsidian")
    try:
        assert {s.btime_ns for s in h.stores.manifest.file_states("vault/Notes/").values()} == {0}
        (vault / "Notes").rename(vault / "Private/Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_a_file_with_the_notes_inode_but_another_birth_time_is_held(make_cfg: Any, vault: Path) -> None:
    """What a copy given a deleted note's freed inode number looks like, made deterministic: the
    very inode, mtime, size and name, but not the birth time recorded with the note."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        born = {s.btime_ns for s in h.stores.manifest.file_states("vault/Notes/").values()}
        if born == {0}:
            pytest.skip("no birth time on this platform or filesystem")
        with h.stores.manifest.transaction() as db:
            db.execute("UPDATE files SET btime_ns = btime_ns - 1 WHERE key LIKE 'vault/Notes/%'")
        (vault / "Notes").rename(vault / "Private/Notes")
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_birth_time_is_what_statx_says_here(tmp_path: Path) -> None:
    """The birth time read through statx is the file's own: kept by a rename, another for a copy
    given the same inode number (0 on a filesystem that keeps none: then nothing is released)."""
    a = write(tmp_path / "a.md", "# A\n")
    ino = a.stat().st_ino
    born = birth_ns(a, ino)
    if not born:
        pytest.skip("no birth time on this platform or filesystem")
    a.rename(tmp_path / "b.md")
    assert birth_ns(tmp_path / "b.md", ino) == born
    assert birth_ns(tmp_path / "b.md", ino + 1) == 0  # another file now: not its birth time
    assert birth_ns(tmp_path / "gone.md", ino) == 0


@pytest.mark.parametrize("how", ["sweep", "events"])
def test_a_hard_linked_backup_seen_then_the_notes_deleted_is_held(
    make_cfg: Any, vault: Path, how: str
) -> None:
    """cp -al Notes Private/Snap, then a sync tool empties Notes/: each snapshot file has one link
    again and its note's inode, mtime, size and birth time. Seen while the notes were there (the
    snapshot's file events, or a sweep), the notes' ids are forgotten and the loss is held; it
    was released at once."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        (vault / "Private/Snap").mkdir()
        for p in (vault / "Notes").glob("*.md"):
            os.link(p, vault / "Private/Snap" / p.name)
        _sweep(h, how, {vault / "Private/Snap"})
        assert {s.ino for s in h.stores.manifest.file_states("vault/Notes/").values()} == {0}
        for p in (vault / "Notes").glob("*.md"):
            p.unlink()
        h.sweep()
        _held(h, 10)
    finally:
        h.close()


def test_a_manifest_with_one_of_the_new_columns_opens(make_cfg: Any, vault: Path) -> None:
    """An upgrade interrupted between its ALTERs (each commits alone) left dev without ino: the
    next start added dev again, took the manifest for damaged, moved it aside and rebuilt the
    whole index."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    h.close()
    with sqlite3.connect(h.cfg.index_dir / "manifest.sqlite") as db:
        db.execute("ALTER TABLE files DROP COLUMN btime_ns")
        db.execute("ALTER TABLE files DROP COLUMN ino")
    h = Harness(h.cfg, FakeEmbedder())
    try:
        h.sweep()
        assert len(_keys(h, "vault/")) == 3
        assert list(h.cfg.index_dir.glob("manifest.sqlite.broken-*")) == []
    finally:
        h.close()


def test_one_excluded_look_alike_counts_for_one_note(make_cfg: Any, vault: Path) -> None:
    """Ten notes of one template unpacked in one second (same mtime and size) and one file like
    them in the excluded folder: status said "10 of them have a copy"."""
    for i in range(10):
        write(vault / f"Notes/d{i}.md", f"# Day {i}\n\nTemplate.\n")
        os.utime(vault / f"Notes/d{i}.md", ns=(1_700_000_000 * 10**9,) * 2)
    write(vault / "Private/only.md", "# Day X\n\nTemplate.\n")
    os.utime(vault / "Private/only.md", ns=(1_700_000_000 * 10**9,) * 2)
    h = Harness(make_cfg(vault, **{"index.exclude": "Private/"}), FakeEmbedder())
    try:
        h.sweep()
        shutil.rmtree(vault / "Notes")
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "mass"
        assert "(1 of them have a copy" in (st.error or ""), st.error
    finally:
        h.close()


def test_a_bind_mounted_folder_unmounted_is_held(make_cfg: Any, vault: Path) -> None:
    """Notes/ is a bind mount (same filesystem: same device and inode numbers) of a store kept in
    the excluded Private/Store (docker -v, an fstab bind). The bind goes away (boot order, a
    container restart): an unmounted folder, not a move; it was released at once. Needs root."""
    store = vault / "Private/Store"
    _notes(store, 10)
    write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    (vault / "Notes").mkdir()
    bound = subprocess.run(
        ["mount", "--bind", str(store), str(vault / "Notes")], check=False, capture_output=True
    )
    if bound.returncode != 0:
        pytest.skip("bind mounts need root")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        assert len(_keys(h, "vault/Notes/")) == 10
        subprocess.run(["umount", str(vault / "Notes")], check=True)
        h.sweep()
        _held(h, 10)
    finally:
        subprocess.run(["umount", str(vault / "Notes")], check=False, capture_output=True)
        h.close()


@pytest.mark.parametrize("into", ["Private", "wiki"])
@pytest.mark.parametrize("how", ["sweep", "events"])
def test_a_real_loss_beside_a_move_out_is_judged_against_the_notes_that_stay(
    make_cfg: Any, vault: Path, how: str, into: str
) -> None:
    """23 notes: 10 moved into an excluded folder (or into the wiki, another root), 10 others
    deleted. The moved ones leave the root's count: 10 lost of the 13 that stay is held as it
    would be had the move been seen first (it was judged as 10 of 23, under the share, and the
    loss deleted at once)."""
    h = _private(make_cfg, vault, "obsidian")
    try:
        others = [
            write(vault / f"Other/o{i}.md", f"# Other {i}\n\nThe ferry {i} sails at dawn.\n")
            for i in range(10)
        ]
        h.sweep()
        (vault / "Notes").rename(vault / into / "Notes")
        for p in others:
            p.unlink()
        _sweep(h, how, {vault / "Notes", vault / into / "Notes", *others})
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "mass" and st.held_deletions == 10, (st.hold_kind, st.error)
        assert "lost 10 of 13" in (st.error or "")
        assert len(_keys(h, "vault/Other/")) == 10
        assert not _keys(h, "vault/Notes/")
        assert _hits(h, "lighthouse 3") == ([] if into == "Private" else ["wiki/Notes/n3"])
        assert _hits(h, "ferry 3") == ["vault/Other/o3"]
    finally:
        h.close()


def test_a_move_undone_after_its_deletion_failed_is_a_move_back(big: Harness, vault: Path) -> None:
    """A folder moved, the removal of its old entries failed (marked deleting, a full disk), then
    the move undone: the old entries, hidden, were no twin of the notes come back, and the new
    path stayed indexed beside them until its deletion's wait ended (up to a minute)."""
    h = big
    shutil.move(vault / "Notes", vault / "Moved")
    real = h.vectors.delete_keys
    failed: list[int] = []

    def delete_keys(keys: list[str]) -> None:
        if not failed:
            failed.append(1)
            raise StoreError("vector delete failed: No space left on device")
        real(keys)

    h.vectors.delete_keys = delete_keys  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        h.sweep()
    assert h.stores.manifest.keys_in_state("deleting")
    shutil.move(vault / "Moved", vault / "Notes")  # undone; its file events:
    h.indexer.sweep(only=frozenset(), paths={str(vault / "Moved"), str(vault / "Notes")})
    assert not h.indexer.changes.bursts.waiting()
    assert _hits(h, "lighthouse") == sorted(f"vault/Notes/n{i}" for i in range(10))
    assert not _keys(h, "vault/Moved/") and not h.stores.manifest.keys_in_state("deleting")


def _keys_states(h: Harness, prefix: str) -> list[Any]:
    return list(h.stores.manifest.file_states(prefix).values())


def _rename_watched(h: Harness, vault: Path, old: str, new: str) -> list[tuple[int, int]]:
    """Index batches written during the sweeps of ``old`` renamed to ``new``: after each, the
    notes status counts and those answers show under the old and the new folder."""
    seen: list[tuple[int, int]] = []
    real = h.indexer.index_files

    def index_files(notes: Any, data: Any = None) -> int:
        changed = real(notes, data)
        counted = h.stores.manifest.counts()["files"]
        states = [*_keys_states(h, f"vault/{old}/"), *_keys_states(h, f"vault/{new}/")]
        seen.append((counted, sum(1 for st in states if st.state == "indexed")))
        return changed

    h.indexer.index_files = index_files  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("how", ["sweep", "events, a slow listing", "events"])
def test_a_folder_renamed_in_a_large_vault_is_a_move(make_cfg: Any, vault: Path, how: str) -> None:
    """A folder of a tenth of the vault renamed: looked for moves only when the guard could
    hold the deletions (half the root gone) or while the root's events were under way, a listing
    that outlasted the quiet time (17,000 notes on a busy share) found no move: every note read
    again, its old entry left at the sweep's end, status counted both, the old paths answered."""
    for i in range(60):
        write(vault / "Other" / f"o{i}.md", f"# Other {i}\n\nThe ferry {i} sails at dawn.\n")
    moved = _notes(vault / "Notes", 12)
    h = Harness(make_cfg(vault, **{"index.batchFiles": 4, "embedder.enabled": False}), None)
    try:
        h.sweep()
        total = h.stores.manifest.counts()["files"]
        (vault / "Notes").rename(vault / "Renamed")
        seen = _rename_watched(h, vault, "Notes", "Renamed")
        if how == "sweep":  # the daemon was down, or the events were lost
            h.indexer.sweep()
        else:
            bursts = h.indexer.changes.bursts
            if how == "events, a slow listing":  # the quiet time passes while the root is listed
                listing = h.supervisor.list_root

                def list_root(root: Any) -> Any:
                    bursts.clock = lambda: time.monotonic() + 3600.0
                    return listing(root)

                h.supervisor.list_root = list_root  # type: ignore[method-assign]
            h.indexer.sweep(only=frozenset(), paths={str(vault / "Notes"), str(vault / "Renamed")})
            assert not bursts.waiting()
        _online(h, "vault")
        assert seen and all(counted == total and both == len(moved) for counted, both in seen), seen
        assert _keys(h, "vault/Renamed/") == {f"vault/Renamed/n{i}" for i in range(len(moved))}
        assert not _keys(h, "vault/Notes/")
        assert _hits(h, "lighthouse 3") == ["vault/Renamed/n3"]
    finally:
        h.close()


def test_a_folder_renamed_during_a_full_sweep_is_found_at_every_batch(make_cfg: Any, vault: Path) -> None:
    """A full sweep runs (other notes to read in batches); between its batches, the file events of
    a folder of 12 notes renamed are taken (2 notes a batch). Their old entries were deleted first
    and the 12 read in one call: the notes were found under neither path for the whole read."""
    moved = _notes(vault / "Notes", 12)
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2, "embedder.enabled": False}), None)
    try:
        h.sweep()
        for i in range(4):  # work for the sweep's own batches
            write(vault / f"New/x{i}.md", f"# X{i}\n")
        fired: list[bool] = []

        def hot() -> set[str]:
            if fired:
                return set()
            fired.append(True)
            (vault / "Notes").rename(vault / "Renamed")
            return {str(vault / "Notes"), str(vault / "Renamed")}

        def found() -> int:
            states = [*_keys_states(h, "vault/Notes/"), *_keys_states(h, "vault/Renamed/")]
            return sum(1 for st in states if st.state == "indexed")

        seen: list[int] = []
        real = h.indexer.index_files

        def index_files(notes: Any, data: Any = None) -> int:
            seen.append(found())
            changed = real(notes, data)
            seen.append(found())
            return changed

        h.indexer.hot_paths = hot
        h.indexer.index_files = index_files  # type: ignore[method-assign]
        h.indexer.sweep()
        assert fired and all(n == len(moved) for n in seen), seen
        assert len(seen) >= 2 * (2 + 6), seen  # the sweep's 2 batches, the events' 6
        _online(h, "vault")
        assert _keys(h, "vault/Renamed/") == {f"vault/Renamed/n{i}" for i in range(len(moved))}
        assert not _keys(h, "vault/Notes/")
        assert _hits(h, "lighthouse 3") == ["vault/Renamed/n3"]
    finally:
        h.close()


def test_a_stop_ends_the_events_batches_between_two_and_loses_no_note(make_cfg: Any, vault: Path) -> None:
    """A stop while the events taken between a sweep's batches are written (a folder of 12
    renamed, 2 notes a batch): the writing ends after the batch that runs (the stop waited for
    every batch, minutes for thousands of notes), each note is found under one path meanwhile,
    the rest is given back, and the next sweep (the next start's) finishes the move."""
    import threading

    moved = _notes(vault / "Notes", 12)
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2, "embedder.enabled": False}), None)
    try:
        h.sweep()
        for i in range(4):  # work for the sweep's own batches
            write(vault / f"New/x{i}.md", f"# X{i}\n")
        stop = threading.Event()
        fired: list[bool] = []

        def hot() -> frozenset[str]:
            if fired:
                return frozenset()
            fired.append(True)
            (vault / "Notes").rename(vault / "Renamed")
            return frozenset({str(vault / "Notes"), str(vault / "Renamed")})

        written: list[int] = []
        real = h.indexer.index_files

        def index_files(notes: Any, data: Any = None) -> int:
            changed = real(notes, data)
            if fired:  # an events' batch: the stop comes while the first one is written
                written.append(len(notes))
                stop.set()
            return changed

        given_back: set[str] = set()
        h.indexer.hot_paths = hot
        h.indexer.hot_back = given_back.update
        h.indexer.index_files = index_files  # type: ignore[method-assign]
        h.indexer.sweep(stop=stop)
        assert written == [2], written
        renamed, old = _keys(h, "vault/Renamed/"), _keys(h, "vault/Notes/")
        assert len(renamed) == 2 and len(old) == len(moved) - 2  # each under one path, none lost
        assert {str(vault / "Renamed" / f"{k.rsplit('/', 1)[1]}.md") for k in old} <= given_back
        h.indexer.index_files = real  # type: ignore[method-assign]
        h.indexer.sweep()
        assert _keys(h, "vault/Renamed/") == {f"vault/Renamed/n{i}" for i in range(len(moved))}
        assert not _keys(h, "vault/Notes/")
        assert _hits(h, "lighthouse 3") == ["vault/Renamed/n3"]
    finally:
        h.close()


def _case_insensitive(monkeypatch: pytest.MonkeyPatch, folder: Path, old: str, new: str) -> None:
    """``folder/old`` opens as ``folder/new`` (a hard link: the same file), and the folder lists
    ``new`` only: what a case-insensitive disk shows of a name whose case changed."""
    os.link(folder / new, folder / old)
    _listing_hides(monkeypatch, folder, old)


def _listing_hides(monkeypatch: pytest.MonkeyPatch, folder: Path, old: str) -> None:
    """``folder``'s listings (``os.listdir``, ``os.scandir``) leave ``old`` out though it opens."""
    real, real_scandir = os.listdir, os.scandir

    def listdir(path: Any = ".") -> list[str]:
        names = real(path)
        return [n for n in names if n != old] if Path(path) == folder else names

    class Listed:  # os.scandir's answer: an iterator, usable in a with
        def __init__(self, entries: list[os.DirEntry[str]]) -> None:
            self.it = iter(entries)

        def __enter__(self) -> Listed:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def __iter__(self) -> Listed:
            return self

        def __next__(self) -> os.DirEntry[str]:
            return next(self.it)

        def close(self) -> None:
            pass

    def scandir(path: Any = ".") -> Any:
        if Path(path) != folder:
            return real_scandir(path)
        with real_scandir(path) as it:
            return Listed([e for e in it if e.name != old])

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)


@pytest.mark.parametrize("how", ["renamed", "made anew"])
def test_a_note_whose_name_changes_case_on_a_case_insensitive_disk_is_indexed_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """macOS or an SMB share: `Tar.md` renamed `tar.md`, or deleted and `tar.md` made anew. The old
    spelling still opens there, so its events' look kept the note under `vault/Tar` beside the
    new `vault/tar`: found twice until a full sweep (whose deletion a mass-deletion hold may
    keep). The folder's listing decides: the old spelling is gone, the note is indexed once."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        h.sweep()
        if how == "renamed":
            (vault / "Tar.md").rename(vault / "tar.md")
        else:
            (vault / "Tar.md").unlink()
            write(vault / "tar.md", "# tar\n\nUnpack a tarball with tar xf, pack one with tar czf.\n")
        _case_insensitive(monkeypatch, vault, "Tar.md", "tar.md")
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Tar.md"), str(vault / "tar.md")})
        assert _keys(h, "vault/Tar") | _keys(h, "vault/tar") == {"vault/tar"}
        assert _hits(h, "tarball") == ["vault/tar"]
    finally:
        h.close()


@pytest.mark.parametrize("how", ["renamed", "made anew"])
@pytest.mark.parametrize("first", ["Tar.md", "tar.md"])
def test_a_case_only_rename_whose_events_come_in_two_batches_is_indexed_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, how: str, first: str
) -> None:
    """A case-insensitive disk: `Tar.md` renamed `tar.md` (or made anew so), its two events in
    separate batches, either first. The batch of the new spelling finds the indexed old one,
    which its folder no longer lists: the note is indexed once (it stayed doubled, found twice,
    until a full sweep)."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        write(vault / "Other.md", "# Other\n\nNothing about archives.\n")
        h.sweep()
        if how == "renamed":
            (vault / "Tar.md").rename(vault / "tar.md")
        else:
            (vault / "Tar.md").unlink()
            write(vault / "tar.md", "# tar\n\nUnpack a tarball with tar xf, pack one with tar czf.\n")
        _case_insensitive(monkeypatch, vault, "Tar.md", "tar.md")
        for name in (first, ({"Tar.md", "tar.md"} - {first}).pop()):
            h.indexer.sweep(only=frozenset(), paths={str(vault / name)})
            assert len(_keys(h, "vault/Tar") | _keys(h, "vault/tar")) == 1
        assert _keys(h, "vault/Tar") | _keys(h, "vault/tar") == {"vault/tar"}
        assert _hits(h, "tarball") == ["vault/tar"]
    finally:
        h.close()


def test_two_spellings_on_a_case_sensitive_disk_stay_two_notes(make_cfg: Any, vault: Path) -> None:
    """ext4: `Tar.md` and `tar.md` are two files; the second one's event in a later batch than
    the first's indexing leaves both indexed (the folder lists both spellings)."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        h.sweep()
        write(vault / "tar.md", "# tar\n\nA tarball packed with tar czf.\n")
        h.indexer.sweep(only=frozenset(), paths={str(vault / "tar.md")})
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Tar.md")})
        assert _keys(h, "vault/Tar") | _keys(h, "vault/tar") == {"vault/Tar", "vault/tar"}
        assert sorted(_hits(h, "tarball")) == ["vault/Tar", "vault/tar"]
    finally:
        h.close()


def test_a_batch_of_events_probes_its_root_once(big: Harness, vault: Path) -> None:
    """A folder renamed and a note deleted beside it, in one batch of events: whether the root's
    deletions may go ahead (a listing of it under the probe timeout, slow on a share) was asked
    once for the moves and once more for the deletion."""
    h = big
    (vault / "Notes").rename(vault / "Renamed")
    lost = next(p for p in vault.glob("*.md"))
    lost.unlink()
    probed: list[str] = []
    real = h.supervisor.deletable

    def deletable(root: Any) -> bool:
        probed.append(root.name)
        return real(root)

    h.supervisor.deletable = deletable  # type: ignore[method-assign]
    h.indexer.sweep(only=frozenset(), paths={str(vault / "Notes"), str(vault / "Renamed"), str(lost)})
    assert probed == ["vault"], probed
    assert _keys(h, "vault/Renamed/") == {f"vault/Renamed/n{i}" for i in range(10)}
    assert not _keys(h, "vault/Notes/") and not h.stores.manifest.file_states_of([f"vault/{lost.stem}"])


def test_other_spellings_of_many_new_notes_are_read_by_narrow_ranges(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexed notes a batch's new notes spell but for case or Unicode form: found by ranges
    of the key index per first letter, in either case and form ("ß" and "ẞ" alike), never the
    folder's whole subtree (each batch of more than 16 new notes in a folder read it); a name
    without letters has no other spelling."""
    import unicodedata

    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        nfd = unicodedata.normalize("NFD", "Über")
        for name in ("Tar", "Zip", "2024-01-01", "Notes/Tar", nfd, "ẞtraße"):
            write(vault / f"{name}.md", f"# {name}\n\nText.\n")
        h.sweep()
        manifest = h.stores.manifest
        asked: list[tuple[Any, ...]] = []
        query = manifest._query

        def recording(sql: str, args: Any = ()) -> Any:
            asked.append(tuple(args))
            return query(sql, args)

        monkeypatch.setattr(manifest, "_query", recording)
        want = {"vault/Tar": "Tar.md", "vault/Zip": "Zip.md"}
        assert manifest.spelled_otherwise(["vault/tar", "vault/ZIP", "vault/2024-01-01", "vault/Tar"]) == {
            "vault/Zip": "Zip.md"
        }
        many = ["vault/tar", "vault/zip"] + [f"vault/new {i}" for i in range(20)]
        assert manifest.spelled_otherwise(many) == want
        assert not any(args and args[0] == "vault/" for args in asked)  # never the whole folder
        assert manifest.spelled_otherwise(["vault/tar", "vault/zip"]) == want
        assert manifest.spelled_otherwise(["vault/notes/tar"]) == {}  # only in a folder spelled as indexed
        assert manifest.spelled_otherwise(["vault/über"]) == {f"vault/{nfd}": f"{nfd}.md"}
        assert manifest.spelled_otherwise(["vault/straße", "vault/ßtrasse"]) == {"vault/ẞtraße": "ẞtraße.md"}
    finally:
        h.close()


def test_an_event_spelled_otherwise_than_the_disk_indexes_the_edit(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case-insensitive disk: "Tar.md" indexed and listed, a tool writes it through "tar.md"
    (the event names that spelling): the edit is indexed under the note's key. It was lost until
    the next full sweep (the event's spelling was taken for a renamed note's old one)."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        h.sweep()
        write(vault / "Tar.md", "# Tar\n\nHow to unpack a zipfile with unzip.\n")
        _case_insensitive(monkeypatch, vault, "tar.md", "Tar.md")  # opens Tar.md, listed as such
        h.indexer.sweep(only=frozenset(), paths={str(vault / "tar.md")})
        assert _hits(h, "zipfile") == ["vault/Tar"] and _hits(h, "tarball") == []
        assert "vault/tar" not in h.stores.manifest.file_states("vault/")
    finally:
        h.close()


@pytest.mark.parametrize("first", ["old", "new"])
def test_a_case_only_rename_from_a_decomposed_name_is_indexed_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """A case-only rename whose old name a Mac wrote decomposed (NFD, "Über.md") and whose new
    one is typed (NFC, "über.md"), the events in either order: one note. Both stayed indexed (the
    spellings were compared by lower() alone, not in one Unicode form)."""
    import unicodedata

    old = unicodedata.normalize("NFD", "Über.md")
    new = "über.md"  # NFC, typed
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / old, "# Über\n\nHow to unpack a tarball with tar xzf.\n")
        h.sweep()
        (vault / old).rename(vault / new)
        _case_insensitive(monkeypatch, vault, old, new)
        order = [old, new] if first == "old" else [new, old]
        for name in order:
            h.indexer.sweep(only=frozenset(), paths={str(vault / name)})
        assert _hits(h, "tarball") == ["vault/über"]
    finally:
        h.close()


_NFD_UE = "U\u0308ber"  # "Über" as a Mac writes it (decomposed)


@pytest.mark.parametrize(
    ("old", "new"),
    [("Notes", "notes"), (_NFD_UE, "\u00dcber"), (_NFD_UE, "\u00fcber")],
    ids=["case", "form", "case and form"],
)
@pytest.mark.parametrize("first", ["old", "new", "together"])
def test_a_folder_renamed_but_for_case_or_form_in_two_batches_is_indexed_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, first: str
) -> None:
    """A case- and form-insensitive disk (macOS, an SMB share): a folder renamed only in case or
    Unicode form, its two events in separate batches, either first. The old spelling still
    opens (a copy here, which the vault's listing does not show): its notes are indexed once,
    under the new spelling. They were read again as new notes, the old keys kept beside them
    until a full sweep (a form-only rename was not told apart even in one batch)."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / old / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        write(vault / old / "Zip.md", "# Zip\n\nA zipfile opened with unzip.\n")
        h.sweep()
        (vault / old).rename(vault / new)
        shutil.copytree(vault / new, vault / old)  # what the old spelling opens: the same notes
        _listing_hides(monkeypatch, vault, old)
        batches = {"old": [[old], [new]], "new": [[new], [old]], "together": [[old, new]]}[first]
        for names in batches:
            h.indexer.sweep(only=frozenset(), paths={str(vault / name) for name in names})
        indexed = {k for k in h.stores.manifest.file_states("vault/") if k.split("/")[1] in (old, new)}
        assert indexed == {f"vault/{new}/Tar", f"vault/{new}/Zip"}
        assert _hits(h, "tarball") == [f"vault/{new}/Tar"]
    finally:
        h.close()


def _as_indexed(h: Harness) -> dict[str, Any]:
    """What the index holds of every note: its file row (stat aside), its chunks, its links."""
    read = h.stores.manifest.read
    return {
        "files": read(
            "SELECT key, source, rel, size, hash, state, title, tags, front_matter, chunks, error "
            "FROM files ORDER BY key"
        ),
        "chunks": read(
            "SELECT chunk_id, key, ord, text, headings, start_line, end_line, embed_text, embed_from, "
            "tokens, embed_hash FROM chunks ORDER BY chunk_id"
        ),
        "links": read("SELECT * FROM links ORDER BY src, ord"),
        "keyword": sorted((c.chunk_id, c.title, c.aliases, c.text) for c in h.stores.manifest.all_chunks()),
    }


@pytest.mark.parametrize(("how", "fs_type"), [("sweep", "ext4"), ("events", "ext4"), ("sweep", "vfat")])
def test_a_renamed_folder_is_not_read_again_and_indexes_as_a_read_would(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, fs_type: str
) -> None:
    """A folder renamed (on a slow share each note under it was opened and read again, its text
    unchanged): a note whose file is the one indexed, unwritten since (same inode and ctime, mtime,
    size, name), is written under its new key from what the index holds, not read; the index then
    holds what a fresh index of the renamed vault holds. One written meanwhile with its mtime set
    back (its ctime moved) is read. On FAT (no change time) every note is read, as before."""
    from sidecar.index import records

    # The vault's filesystem as a mount table names it, not the machine's (tmpfs or overlay, whose
    # inode numbers do not outlive the mount, are read as before).
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - {fs_type} x rw\n")
    flags = {"watch.mountTable": str(table)}

    notes = vault / "Notes"
    body = "\n\n".join(
        f"## Part {i}\n\n" + f"Storm log {i}, see [[Welcome]] and [[n{i}]]. " * 30 for i in range(6)
    )
    for i in range(6):
        front = f"---\naliases: [Log {i}]\ntags: [sea]\n---\n" if i % 2 else ""
        write(notes / f"n{i}.md", f"{front}# Note {i}\n\n{body}\n")
    write(
        notes / "Plan.canvas", json.dumps({"nodes": [{"id": "a", "type": "text", "text": "Sail to [[n2]]"}]})
    )
    h = Harness(make_cfg(vault, **flags), FakeEmbedder())
    try:
        h.sweep()
        h.indexer.writer.resolve_all_links()
        edited = notes / "n3.md"
        st = edited.stat()
        edited.write_text(edited.read_text().replace("Storm log 1,", "Storm gap 1,"))
        os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))
        notes.rename(vault / "Logs")
        reads: list[str] = []
        real = records.read_note

        def counted(path: Path, *args: Any) -> Any:
            reads.append(path.name)
            return real(path, *args)

        monkeypatch.setattr(records, "read_note", counted)
        _sweep(h, how, {notes, vault / "Logs"})
        _online(h, "vault")
        h.indexer.writer.resolve_all_links()
        every = sorted(p.name for p in (vault / "Logs").iterdir())
        assert sorted(reads) == (every if fs_type == "vfat" else ["n3.md"])
        assert set(_hits(h, "Storm gap 1")) == {"vault/Logs/n3"}
        moved = _as_indexed(h)
    finally:
        h.close()
    monkeypatch.undo()
    fresh = Harness(make_cfg(vault, home=str(tmp_path / "fresh"), **flags), FakeEmbedder())
    try:
        fresh.sweep()
        fresh.indexer.writer.resolve_all_links()
        assert _as_indexed(fresh) == moved
    finally:
        fresh.close()


@pytest.mark.parametrize(
    ("old", "new"), [("Notes", "notes"), (_NFD_UE, "\u00fcber")], ids=["case", "case and form"]
)
@pytest.mark.parametrize("then", ["new", "old", "none"])
@pytest.mark.parametrize("depth", ["folder", "parent"])
def test_a_note_event_under_a_folder_renamed_but_for_case_comes_first(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, then: str, depth: str
) -> None:
    """A folder renamed only in case or form (or its parent folder), and a note's event under the
    new spelling comes in a batch before the folder's own events (an edit right after the rename,
    or events coalesced away): the note and the folder's other notes are indexed once, under the
    new spelling. The note was indexed anew beside its old key, and the folder's later event of
    either spelling found nothing to match (its new spelling held an indexed note now): both
    keys stayed, search answered the note twice, until a full sweep."""
    top = "Projekte/" if depth == "folder" else ""
    under = "" if depth == "folder" else "/Inner"
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / f"{top}{old}{under}" / "Tar.md", "# Tar\n\nHow to unpack a tarball with tar xzf.\n")
        write(vault / f"{top}{old}{under}" / "Zip.md", "# Zip\n\nA zipfile opened with unzip.\n")
        h.sweep()
        parent = vault / top if top else vault
        (parent / old).rename(parent / new)
        shutil.copytree(parent / new, parent / old)  # what the old spelling opens: the same notes
        _listing_hides(monkeypatch, parent, old)
        h.indexer.sweep(only=frozenset(), paths={str(vault / f"{top}{new}{under}" / "Tar.md")})
        if then != "none":
            h.indexer.sweep(only=frozenset(), paths={str(parent / (new if then == "new" else old))})
        indexed = {k for k in h.stores.manifest.file_states("vault/") if k.endswith(("/Tar", "/Zip"))}
        want = {f"vault/{top}{new}{under}/Tar", f"vault/{top}{new}{under}/Zip"}
        assert indexed == want, indexed
        assert _hits(h, "tarball") == [f"vault/{top}{new}{under}/Tar"]
    finally:
        h.close()


def test_attachment_events_cost_no_folder_lookup(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A photo import's events ("Bilder/x.png") are no folder renamed but for case: each was
    stat'ed as a folder candidate (on a slow share, one stat per file outside any timeout)."""
    h = Harness(make_cfg(vault, **{"embedder.enabled": False}), None)
    try:
        write(vault / "Bilder" / "Index.md", "# Bilder\n\nPhotos of the trip.\n")
        h.sweep()
        for i in range(5):
            (vault / "Bilder" / f"img{i}.png").write_bytes(b"\x89PNG")
        asked: list[str] = []
        real = os.path.isdir

        def isdir(path: Any) -> bool:
            asked.append(str(path))
            return real(path)

        monkeypatch.setattr(os.path, "isdir", isdir)
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Bilder" / f"img{i}.png") for i in range(5)})
        assert [p for p in asked if p.endswith(".png")] == []
    finally:
        h.close()
