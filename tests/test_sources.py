"""Sources: which files are notes, how they are named, and references that must not escape."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import NotFoundError, SourceError
from sidecar.vault.note_text import NoteUnreadable, read_note
from sidecar.vault.notenames import CONFLICT_REASON
from sidecar.vault.references import key_for_reference, path_for_key, public_reference
from sidecar.vault.sources import NoteFile, Skipped, scan
from sidecar.vault.swept_roots import roots
from tests.conftest import write


def _scan_all(cfg: Any) -> tuple[dict[str, NoteFile], list[Skipped]]:
    notes: dict[str, NoteFile] = {}
    skipped: list[Skipped] = []
    for root in roots(cfg):
        if not root.path.exists():
            continue
        for item in scan(root, cfg.index.max_file_bytes):
            if isinstance(item, NoteFile):
                notes[item.key] = item
            else:
                skipped.append(item)
    return notes, skipped


def test_roots_split_vault_wiki_and_inboxes(make_cfg: Any, vault: Path) -> None:
    """Vault minus wiki and dot-folders, wiki as its own source, each agent inbox as memory."""
    cfg = make_cfg(vault)
    write(cfg.agents_dir / "claude" / "memory" / "first-note.md", "remember this\n")
    write(cfg.agents_dir / "Bad Name" / "memory" / "x.md", "ignored agent\n")
    notes, _ = _scan_all(cfg)
    assert set(notes) == {
        "vault/Garden",
        "vault/Projects/Boat",
        "vault/Recipes/Bread",
        "wiki/Backups",
        "memory/claude/first-note",
    }


def test_debris_and_non_notes_are_ignored(make_cfg: Any, vault: Path) -> None:
    """Cloud stubs, editor temp files and non-Markdown files are not notes, nor counted."""
    for name in [".Garden.md.icloud", "._Garden.md", "notes.txt", "image.png", "~$draft.md", "Garden.md.tmp"]:
        write(vault / name, "x\n")
    notes, skipped = _scan_all(make_cfg(vault))
    assert "vault/Garden" in notes
    assert len([k for k in notes if k.startswith("vault/")]) == 3 and skipped == []


def test_sync_conflict_copies_are_counted_as_skipped_and_a_note_named_alike_is_read(
    make_cfg: Any, vault: Path
) -> None:
    """A sync tool's conflict copy is no note of its own (found beside the note) but is counted,
    with a reason that says to merge it: it may hold the other device's edits. Dropbox's own form
    names the editor first ("Dave's conflicted copy"), which was read as a note; a note merely
    titled "(conflicted copy)" was never read, nor counted."""
    copies = [
        "Garden.sync-conflict-20260101-120000-ABC.md",  # Syncthing
        "Garden (conflicted copy 2026-01-01).md",  # Dropbox, older
        "Garden (Dave's conflicted copy 2026-12-04).md",  # Dropbox
        "Garden (conflicted copy 2026-12-04 153012).md",  # Nextcloud
        "Garden_conflict-20261204-153012.md",  # ownCloud
        "Garden (SFConflict dave@example.org 2026-12-04-15-30-12).md",  # Seafile
        "Garden (Case Conflict).md",  # Dropbox
        "Garden-DESKTOP-A1B2C3D.md",  # OneDrive
        "Garden (Conflicted copy MyMacBook2 202411281430).md",  # Obsidian Sync
        "Garden (Conflicted copy Lisa's Pixel 7 20241128143012).md",  # Obsidian Sync, with seconds
    ]
    for name in copies:
        write(vault / name, "# Garden\n\nthe other device's edit\n")
    own = [
        "How I fixed a (conflicted copy) mess.md",
        "buy-laptop-battery.md",
        "linux-desktop-screens.md",
        "Conflicted copy 202411281430.md",  # no parentheses, no device: a title
        "Meeting (conflict 2026-12-05).md",  # may be a real title
    ]
    for name in own:  # the user's own notes, named alike
        write(vault / name, "# Mine\n\nmy own note\n")
    # An inbox's notes are the daemon's own writes: a slug alike is a note.
    cfg = make_cfg(vault)
    write(cfg.agents_dir / "claude" / "memory" / "plan_conflict-20261204-120000.md", "a plan\n")
    notes, skipped = _scan_all(cfg)
    assert {f"vault/{name[:-3]}" for name in own} <= set(notes)
    assert "memory/claude/plan_conflict-20261204-120000" in notes
    assert not [k for k in notes if "Garden" in k and k != "vault/Garden"]
    assert sorted(s.path.name for s in skipped) == sorted(copies)
    assert {s.reason for s in skipped} == {CONFLICT_REASON}


def test_symlinks_inside_followed_outside_skipped(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """Symlinks leading outside are skipped with a reason; a folder symlink inside adds no duplicates."""
    outside = write(tmp_path / "secret" / "passwords.md", "hunter2\n")
    os.symlink(outside, vault / "leak.md")
    os.symlink(outside.parent, vault / "leakdir")
    os.symlink(vault / "Recipes", vault / "Also recipes")
    notes, skipped = _scan_all(make_cfg(vault))
    assert "vault/leak" not in notes and not any(k.startswith("vault/leakdir") for k in notes)
    assert "vault/Recipes/Bread" in notes and "vault/Also recipes/Bread" not in notes
    assert sum(s.reason == "symlink leads outside the root" for s in skipped) == 2


def test_symlink_loop_does_not_hang(make_cfg: Any, vault: Path) -> None:
    """A folder symlink pointing at its parent is visited once."""
    os.symlink(vault / "Projects", vault / "Projects" / "again")
    notes, _ = _scan_all(make_cfg(vault))
    assert "vault/Projects/Boat" in notes


def test_too_large_files_are_skipped(make_cfg: Any, vault: Path) -> None:
    """Files over the size cap are skipped and reported."""
    write(vault / "Huge.md", "word " * 1000)
    cfg = make_cfg(vault, **{"index.maxFileBytes": 2048})
    notes, skipped = _scan_all(cfg)
    assert "vault/Huge" not in notes
    assert [s.reason for s in skipped] == ["too large"]


def test_read_note_rejects_binary_and_non_utf8(tmp_path: Path) -> None:
    """Binary and non-UTF-8 files raise NoteUnreadable with a reason; a BOM is stripped."""
    (tmp_path / "bin.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    (tmp_path / "latin.md").write_bytes("Grüße".encode("latin-1"))
    (tmp_path / "bom.md").write_bytes("\ufeff---\ntitle: x\n---\nbody".encode())
    with pytest.raises(NoteUnreadable, match="binary"):
        read_note(tmp_path / "bin.md", 10_000)
    with pytest.raises(NoteUnreadable, match="UTF-8"):
        read_note(tmp_path / "latin.md", 10_000)
    assert read_note(tmp_path / "bom.md", 10_000)[1].startswith("---")


@pytest.mark.parametrize(
    "ref",
    [
        "vault/../../etc/passwd",
        "../etc/passwd",
        "/etc/passwd",
        "vault//x",
        "vault/./x",
        "vault/a\0b",
        "C:/Windows/x",
        "vault\\..\\x",
        "notasource/x",
        "vault",
        "vault/.obsidian/workspace",
        "memory/other/secret",
        "memory/../x",
        "memory/UPPER",
    ],
)
def test_references_that_escape_are_refused(ref: str) -> None:
    """Traversal, absolute paths, NUL bytes, hidden folders and bad slugs are refused clearly."""
    with pytest.raises(SourceError):
        key_for_reference(ref, agent="claude")


def test_references_map_to_keys_and_back() -> None:
    """An agent sees its memory as memory/<slug>; without an agent it is memory/<agent>/<slug>."""
    assert key_for_reference("memory/notes", agent="claude") == "memory/claude/notes"
    assert key_for_reference("memory/claude/notes", agent=None) == "memory/claude/notes"
    assert key_for_reference("vault/Plugins/Audio recorder.md", agent=None) == "vault/Plugins/Audio recorder"
    assert public_reference("memory/claude/notes", "claude") == "memory/notes"
    assert public_reference("memory/claude/notes", None) == "memory/claude/notes"


def test_path_for_key_refuses_symlink_escape(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """A note that is a symlink leading outside its root cannot be read through get."""
    outside = write(tmp_path / "outside.md", "secret\n")
    os.symlink(outside, vault / "link.md")
    cfg = make_cfg(vault)
    with pytest.raises(SourceError, match="outside"):
        path_for_key(cfg, "vault/link")
    with pytest.raises(NotFoundError):
        path_for_key(cfg, "vault/Nope")
    with pytest.raises(SourceError, match="wiki"):
        path_for_key(cfg, "vault/wiki/Backups")
    assert path_for_key(cfg, "wiki/Backups")[1] == (vault / "wiki" / "Backups.md").resolve()


def test_a_wiki_in_a_hidden_folder_is_read_and_a_folder_is_known_by_identity(
    tmp_path: Path, make_cfg: Any
) -> None:
    """The wiki folder configured inside a hidden folder (no link on the way) is the wiki; a
    note's real path is placed under its root by the folder's identity, not its spelling (a
    case-insensitive file system reports the case on disk; here: the root named through a link)."""
    from sidecar.vault import note_text, sources, swept_roots

    vault = tmp_path / "vault"
    write(vault / "a" / ".wiki" / "Page.md", "# Page\n\nhidden wiki\n")
    cfg = make_cfg(vault, **{"vault.wikiSubfolder": "a/.wiki"})
    (wiki,) = [r for r in swept_roots.roots(cfg) if r.source == "wiki"]
    assert sources.root_refusal(wiki) is None
    assert [n.key for n in sources.scan(wiki, 1 << 20) if isinstance(n, sources.NoteFile)] == ["wiki/Page"]
    os.symlink(vault, tmp_path / "alias")
    real = (vault / "a" / "x.md").resolve()
    assert note_text._below(real, tmp_path / "alias") == Path("a/x.md")
    assert note_text._below(tmp_path / "elsewhere.md", tmp_path / "alias") is None


def test_invalid_bytes_are_replaced_up_to_one_percent_of_the_text_as_the_readme_says() -> None:
    """README: a note with invalid UTF-8 bytes is indexed with replacement characters when they are
    at most 1 % of its characters; one bad byte in a note of 99 characters is `not UTF-8`."""
    from sidecar.vault.note_text import NoteUnreadable, decode_note

    def note(chars: int) -> bytes:  # ``chars`` characters once decoded, one of them a bad byte
        return b"a" * (chars - 1) + b"\xff"

    assert decode_note(note(100), 10_000).count("\ufffd") == 1
    with pytest.raises(NoteUnreadable, match="not UTF-8"):
        decode_note(note(99), 10_000)


def test_an_inbox_with_nothing_to_sweep_is_no_root(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inbox with no note (none yet, emptied: only its .trash and a temp file), or an agent
    folder without one, is no root: each agent that ever wrote kept a root, a status line and a
    scan per sweep. An inbox with a note is one, and so is one whose scan reports something (a
    file left out, a folder, a symlinked inbox that is refused). One listing per inbox."""
    cfg = make_cfg(vault)
    agents = cfg.agents_dir
    write(agents / "busy" / "memory" / "plan.md", "# Plan\n")
    write(agents / "emptied" / "memory" / ".trash" / "plan--20260101T000000000000.md", "old\n")
    write(agents / "emptied" / "memory" / ".plan.0123abcd.tmp", "half\n")
    write(agents / "emptied" / "memory" / "plan.md.sync-conflict-x", "not a note\n")
    (agents / "folder-only").mkdir(parents=True)
    write(agents / "odd" / "memory" / "My Note.md", "no slug: counted as skipped\n")
    (agents / "nested" / "memory" / "sub").mkdir(parents=True)
    outside = write(tmp_path / "elsewhere" / "x.md", "not this agent's\n").parent
    (agents / "linked").mkdir()
    (agents / "linked" / "memory").symlink_to(outside)
    for i in range(50):
        (agents / f"once{i}" / "memory" / ".trash").mkdir(parents=True)
    listings: list[object] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p=".": listings.append(p) or real(p))
    names = {r.name for r in roots(cfg)}
    assert names == {"memory/busy", "memory/odd", "memory/nested", "memory/linked", "wiki", "vault"}
    assert len(listings) == 50 + 4  # the inboxes that exist, the linked one refused unlisted
    skipped = [s.reason for r in roots(cfg) if r.agent == "linked" for s in scan(r, 1000)]
    assert skipped == ["inbox (agents/linked/memory) is a symbolic link or not a folder; refused"]


def test_an_unchanged_inbox_is_not_listed_again_and_a_new_note_is_seen(
    make_cfg: Any, vault: Path, monkeypatch: Any
) -> None:
    """Every sweep (file events' too) listed every agent's inbox to know which are roots (358 ms
    at 10,000 agent folders): an inbox whose folder did not change since is not listed again,
    and a note added, deleted or renamed in it changes the folder's times and is seen at once.
    A folder changed within the last seconds is listed each time (a change in the same tick of
    the file system's clock keeps its times)."""
    import time

    from sidecar.vault import swept_roots

    cfg = make_cfg(vault)
    inbox = cfg.agents_dir / "a" / "memory"
    (inbox / ".trash").mkdir(parents=True, mode=0o700)
    for p in (cfg.agents_dir, cfg.agents_dir / "a", inbox):
        p.chmod(0o700)
    listings: list[object] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p=".": listings.append(p) or real(p))

    def memory_roots() -> set[str]:
        listings.clear()
        return {r.name for r in roots(cfg) if r.source == "memory"}

    assert memory_roots() == set() and len(listings) == 1
    assert memory_roots() == set() and len(listings) == 1  # just changed: listed again
    monkeypatch.setattr(swept_roots, "_SETTLED_NS", 0)  # as if it changed long ago
    time.sleep(0.05)
    memory_roots()
    assert memory_roots() == set() and listings == []  # not listed again
    time.sleep(0.05)
    write(inbox / "n.md", "a note\n")
    assert memory_roots() == {"memory/a"} and len(listings) == 1
    assert memory_roots() == {"memory/a"} and listings == []
    time.sleep(0.05)
    os.replace(inbox / "n.md", inbox / ".trash" / "n--20260101T000000000000.md")
    assert memory_roots() == set() and len(listings) == 1
    time.sleep(0.05)
    (inbox / "sub").mkdir()
    assert memory_roots() == {"memory/a"}  # a folder in an inbox is counted as skipped
    time.sleep(0.05)
    (inbox / "sub").rmdir()
    (inbox.parent).chmod(0o755)  # not private: never kept (its answer comes from the full look)
    assert memory_roots() == set() and len(listings) == 1


def test_a_root_that_is_a_symlink_loop_cannot_be_read_not_a_crash(tmp_path: Path) -> None:
    """A root folder replaced by a symlink to itself: its scan raises the OSError (ELOOP) a root
    that cannot be listed raises, which the sweep takes for a root it cannot read. Resolving it
    raised RuntimeError (Path.resolve on a loop), which nothing caught: the sweep crashed."""
    import errno

    from sidecar.vault.sources import Root

    loop = tmp_path / "vault"
    loop.symlink_to(loop)
    with pytest.raises(OSError, match="symlink loop") as got:
        list(scan(Root("vault", loop), 1 << 20))
    assert got.value.errno == errno.ELOOP
