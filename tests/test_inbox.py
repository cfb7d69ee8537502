"""Memory inbox writes: confined paths, atomic replace, managed dates, trash, audit log."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.clients.mcp_texts import trash_dropped_note
from sidecar.contracts.errors import NotFoundError, RemoteError, SourceError, StoreError
from sidecar.memory import inbox as inbox_mod
from sidecar.memory import trash as trash_mod
from sidecar.memory.inbox import Inboxes
from sidecar.memory.inbox_types import InboxFullError, MemoryWriteError
from sidecar.notes.frontmatter import split_front_matter


@pytest.fixture
def inboxes(make_cfg: Any, vault: Path) -> Inboxes:
    return Inboxes(make_cfg(vault))


def _read(path: Path) -> tuple[dict[str, Any], str]:
    return split_front_matter(path.read_text(encoding="utf-8"))


def test_write_creates_note_with_managed_dates(inboxes: Inboxes) -> None:
    """A write lands in <home>/agents/<agent>/memory/<slug>.md with created/updated and given keys."""
    w = inboxes.write(
        "claude",
        "nas-backup",
        "Restic runs nightly.",
        {"tags": ["nas"], "wiki_promote": False},
        must_exist=False,
    )
    assert w.path == inboxes.cfg.agents_dir / "claude" / "memory" / "nas-backup.md"
    assert w.created
    meta, body = _read(w.path)
    assert meta["tags"] == ["nas"] and meta["wiki_promote"] is False
    assert {"created", "updated"} <= set(meta)
    assert body == "Restic runs nightly.\n"


def test_replace_keeps_created_and_edit_keeps_other_keys(inboxes: Inboxes) -> None:
    """write replaces text and keys (created kept); edit updates given keys and keeps the rest."""
    first = inboxes.write("claude", "n", "one", {"tags": ["a"], "description": "d"}, must_exist=False)
    created = _read(first.path)[0]["created"]
    inboxes.write("claude", "n", "two", {"tags": ["b"]}, must_exist=False)
    meta, body = _read(first.path)
    assert meta["created"] == created and meta["tags"] == ["b"] and "description" not in meta
    inboxes.write("claude", "n", "three", {"status": "done"}, must_exist=True)
    meta, body = _read(first.path)
    assert meta["tags"] == ["b"] and meta["status"] == "done" and body == "three\n"


def test_inline_front_matter_is_merged_not_doubled(inboxes: Inboxes) -> None:
    """Content that starts with its own front matter yields one front matter block."""
    w = inboxes.write("claude", "x", "---\ntags: [inline]\n---\nBody\n", {"source": "chat"}, must_exist=False)
    text = w.path.read_text()
    assert text.count("---\n") == 2
    meta, body = _read(w.path)
    assert meta["tags"] == ["inline"] and meta["source"] == "chat" and body == "Body\n"


def test_inline_front_matter_with_windows_line_ends_is_merged(inboxes: Inboxes) -> None:
    """An agent's text with CRLF line ends: its front matter block is read, not kept as body."""
    w = inboxes.write("claude", "crlf", "---\r\ntags: [crlf]\r\n---\r\nBody\r\n", None, must_exist=False)
    meta, body = _read(w.path)
    assert meta["tags"] == ["crlf"] and w.path.read_text().count("---") == 2 and "Body" in body


def test_front_matter_the_reader_cannot_read_is_refused(inboxes: Inboxes) -> None:
    """Front matter past what the reader reads (64 KiB) is refused, not written to be lost by
    every reader and the next edit; an edit of a note whose front matter no longer reads (edited by
    hand) is refused rather than dropping its keys."""
    with pytest.raises(MemoryWriteError, match=r"front matter cannot be stored.*64 KiB"):
        inboxes.write("claude", "big", "body", {"description": "y" * 70_000}, must_exist=False)
    assert not inboxes.path_of("claude", "big").exists()
    w = inboxes.write("claude", "hand", "body", {"tags": ["a"]}, must_exist=False)
    w.path.write_text("---\ntags: [a\n---\nbody\n")  # the user broke its YAML by hand
    with pytest.raises(MemoryWriteError, match=r"cannot be read.*memory_write"):
        inboxes.write("claude", "hand", "new body", None, must_exist=True)
    assert w.path.read_text() == "---\ntags: [a\n---\nbody\n"


def test_edit_of_missing_note_fails(inboxes: Inboxes) -> None:
    """edit refuses a note that does not exist and writes nothing."""
    with pytest.raises(NotFoundError, match="memory_write"):
        inboxes.write("claude", "ghost", "text", None, must_exist=True)
    assert not (inboxes.cfg.agents_dir / "claude" / "memory" / "ghost.md").exists()


@pytest.mark.parametrize(
    "slug",
    [
        "../escape",
        "vault/x",
        "wiki/x",
        "/etc/passwd",
        "UPPER",
        "",
        "a" * 129,
        "x.md",
        "-lead",
        "ü",
        "a\0b",
        "ｐａｓｓ",
    ],
)
def test_bad_slugs_are_refused(inboxes: Inboxes, slug: str) -> None:
    """Anything but ^[a-z0-9][a-z0-9_-]{0,127}$ is refused before touching the disk."""
    with pytest.raises(SourceError, match="slug"):
        inboxes.write("claude", slug, "text", None, must_exist=False)


def test_bad_agent_and_oversize_are_refused(make_cfg: Any, vault: Path) -> None:
    """Invalid agent names and content over memory.maxNoteBytes are refused."""
    with pytest.raises(SourceError, match="agent"):
        Inboxes(make_cfg(vault)).write("../other", "x", "t", None, must_exist=False)
    small = Inboxes(make_cfg(vault, **{"memory.maxNoteBytes": 1000}))
    with pytest.raises(SourceError, match="maxNoteBytes"):
        small.write("claude", "big", "x" * 2000, None, must_exist=False)


def test_secrets_are_redacted_in_body_and_front_matter(inboxes: Inboxes) -> None:
    """Nothing secret reaches disk, neither in the text nor in front matter values."""
    w = inboxes.write(
        "claude",
        "creds",
        "db: postgres://app:Sup3rS3cret!@db/x",
        {"note": "token ghp_1234567890abcdefghijABCDEFGHIJ123456"},
        must_exist=False,
    )
    raw = w.path.read_text()
    assert "Sup3rS3cret" not in raw and "ghp_1234" not in raw
    assert w.redacted == {"url_password": 1, "github_token": 1}
    assert yaml.safe_load(raw.split("---\n")[1])["note"] == "token [REDACTED:github_token]"


def test_sign_up_links_paths_and_systems_after_login_words_reach_disk(inboxes: Inboxes) -> None:
    """ "Anmeldung: https://…", "Login: Linux/Ubuntu22.04" are no passwords: a memory write kept
    "Anmeldung: https:[REDACTED:password]" on disk; a real login's password still goes."""
    text = (
        "Kurs Python\nAnmeldung: https://eveeno.com/anmeldung2025\nRaum: Kurs/B2.04\n"
        "Login: Linux/Ubuntu22.04\nNAS login admin / Tr0ub4dor&3\n"
    )
    w = inboxes.write("claude", "kurs", text, {"anmeldung": "https://eveeno.com/x2025"}, must_exist=False)
    raw = w.path.read_text()
    assert "Anmeldung: https://eveeno.com/anmeldung2025\n" in raw and "Login: Linux/Ubuntu22.04\n" in raw
    assert "NAS login admin / [REDACTED:password]\n" in raw and "Tr0ub4dor" not in raw
    assert yaml.safe_load(raw.split("---\n")[1])["anmeldung"] == "https://eveeno.com/x2025"
    assert w.redacted == {"password": 1}


def test_delete_moves_to_trash_and_is_idempotent(inboxes: Inboxes) -> None:
    """delete moves the note to <inbox>/.trash/; a second delete is a no-op."""
    w = inboxes.write("claude", "old", "obsolete", None, must_exist=False)
    moved = inboxes.delete("claude", "old")
    assert moved is not None and moved.trash.parent.name == ".trash" and "obsolete" in moved.trash.read_text()
    assert not w.path.exists()
    assert inboxes.delete("claude", "old") is None


def test_audit_log_records_every_change(inboxes: Inboxes) -> None:
    """Each write, edit and delete appends one JSON line with time, op, slug, hash and size."""
    inboxes.write("claude", "a", "one", None, must_exist=False)
    inboxes.write("claude", "a", "two", None, must_exist=True)
    inboxes.delete("claude", "a")
    lines = [
        json.loads(x) for x in (inboxes.cfg.agents_dir / "claude" / "audit.log").read_text().splitlines()
    ]
    assert [x["op"] for x in lines] == ["write", "edit", "delete"]
    assert all(len(x["sha256"]) == 64 and x["bytes"] > 0 and x["slug"] == "a" and x["time"] for x in lines)


def test_write_is_atomic_and_leaves_no_temp_files(inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash during the write leaves the old note intact and no temp file behind."""
    w = inboxes.write("claude", "safe", "original", None, must_exist=False)

    def boom(*_args: Any, **_kw: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        inboxes.write("claude", "safe", "new text", None, must_exist=False)
    monkeypatch.undo()
    assert _read(w.path)[1] == "original\n"
    assert sorted(p.name for p in w.path.parent.iterdir()) == [".trash", "safe.md"]
    assert list((w.path.parent / ".trash").iterdir()) == []  # the copy of the old text failed too


def test_symlinked_inbox_outside_home_is_refused(inboxes: Inboxes, tmp_path: Path) -> None:
    """An inbox folder that is a symlink leading out of agents/ is refused, nothing is written there."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    agent_dir = inboxes.cfg.agents_dir / "mallory"
    agent_dir.mkdir(parents=True)
    (agent_dir / "memory").symlink_to(outside)
    with pytest.raises(SourceError, match="symbolic link"):
        inboxes.write("mallory", "x", "text", None, must_exist=False)
    assert list(outside.iterdir()) == []


def _exchange() -> Any:
    """renameat2(RENAME_EXCHANGE): swap two names atomically (Linux), or None."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def swap(a: Path, b: Path) -> None:
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    return swap


def test_inbox_swapped_for_a_link_during_200_writes(inboxes: Inboxes, tmp_path: Path) -> None:
    """While 200 writes run, another thread keeps exchanging the inbox with a symlink to a folder
    outside (atomically, so the inbox name always exists). Every write either is refused or lands
    in the real inbox: 0 acknowledged writes lost, 0 files outside, no temp file left."""
    swap = _exchange()
    if swap is None:
        pytest.skip("renameat2 is not available")
    outside = tmp_path / "outside"
    outside.mkdir()
    inboxes.write("claude", "first", "the inbox exists", None, must_exist=False)
    agent = inboxes.cfg.agents_dir / "claude"
    link = agent / "memory-link"
    link.symlink_to(outside)
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            swap(agent / "memory", link)  # now memory -> outside, memory-link is the real inbox
            time.sleep(0.0005)
            swap(agent / "memory", link)  # and back
            swaps += 1
            time.sleep(0.0005)

    t = threading.Thread(target=swapper)
    t.start()
    acknowledged: dict[str, bytes] = {}
    refused = 0
    writes = 0
    try:
        # At least 200 writes, and on until the swapper has swapped 50 times (a loaded machine
        # can starve it): the race is exercised however the threads get scheduled.
        while writes < 200 or (swaps < 50 and writes < 20_000):
            i = writes
            writes += 1
            try:
                w = inboxes.write("claude", f"note-{i}", f"write number {i}", None, must_exist=False)
                acknowledged[w.slug] = w.data
            except SourceError:
                refused += 1
    finally:
        stop.set()
        t.join()
    assert swaps >= 50 and acknowledged and refused > 0 and refused + len(acknowledged) == writes, (
        swaps,
        refused,
        writes,
    )
    real = agent / "memory"
    assert real.is_dir() and not real.is_symlink()
    assert list(outside.iterdir()) == []
    for slug, data in acknowledged.items():
        assert (real / f"{slug}.md").read_bytes() == data, slug
    assert not [p for p in real.iterdir() if p.name.endswith(".tmp")]
    assert len((agent / "audit.log").read_text().splitlines()) == len(acknowledged) + 1


def test_leftover_temp_files_are_removed_and_notes_kept(inboxes: Inboxes) -> None:
    """clean_temp clears only the writer's temp files (at start, before any write): one that is
    a second name of the note goes, any other is kept in .trash (it may be the person's save a
    write killed mid-exchange left there, or a file replaced that an editor still writes into),
    never removed unread."""
    w = inboxes.write("claude", "a", "text", None, must_exist=False)
    inbox = w.path.parent
    (inbox / ".a.1f2e3d4c.tmp").write_text("half")
    (inbox / ".a.k2x_9zqa.tmp").write_text("half, named by an older version (mkstemp)")
    os.link(w.path, inbox / ".a.0123abcd.tmp")
    (inbox / ".a.0123abcd.clock").write_bytes(b"")  # a write's look at the folder's clock
    (inbox / "notes.tmp.md").write_text("a note with an odd name")
    (inbox / ".a.backup.tmp").write_text("the user's own file")  # not a name the writer makes
    assert inboxes.clean_temp() == 4
    assert sorted(p.name for p in inbox.iterdir()) == [".a.backup.tmp", ".trash", "a.md", "notes.tmp.md"]
    kept = sorted(p.read_text() for p in (inbox / ".trash").iterdir())
    assert kept == ["half", "half, named by an older version (mkstemp)"]


def test_the_daily_prune_settles_temp_files_as_a_start_does(inboxes: Inboxes) -> None:
    """Temp files of writes killed mid-way were settled only at a start: a daemon running for
    months kept them, and the text a person saved into one sat at a hidden name. The daily prune
    now settles them by the start's rules (a second name of the note goes, a text is kept in
    .trash, never lost), but not one whose note a write is using."""
    w = inboxes.write("claude", "a", "text", None, must_exist=False)
    inboxes.write("claude", "b", "b text", None, must_exist=False)
    inbox = w.path.parent
    assert not (inbox / ".trash").exists()
    (inbox / ".a.1f2e3d4c.tmp").write_text("the person's save, left at the temp name")
    os.link(w.path, inbox / ".a.0123abcd.tmp")  # the note itself
    (inbox / ".a.0123abcd.clock").write_bytes(b"")  # a write's look at the folder's clock
    (inbox / ".b.5a5a5a5a.tmp").write_text("half of b")
    (inbox / ".a.backup.tmp").write_text("the user's own file")  # not a name the writer makes
    with inboxes.locked("claude", "b"):  # a write of b runs: its temp file is in use
        inboxes.prune_trash()
    assert sorted(p.name for p in inbox.iterdir()) == [
        ".a.backup.tmp",
        ".b.5a5a5a5a.tmp",
        ".trash",
        "a.md",
        "b.md",
    ]
    assert [p.read_text() for p in (inbox / ".trash").glob("a--*.md")] == [
        "the person's save, left at the temp name"
    ]
    assert w.path.read_text().endswith("text\n")
    inboxes.prune_trash()
    assert not (inbox / ".b.5a5a5a5a.tmp").exists()
    assert [p.read_text() for p in (inbox / ".trash").glob("b--*.md")] == ["half of b"]


def test_replaced_and_edited_text_is_kept_in_trash(inboxes: Inboxes) -> None:
    """Replacing or editing a note keeps the previous text in .trash; an unchanged rewrite keeps nothing."""
    first = inboxes.write("claude", "n", "first text", None, must_exist=False)
    assert first.previous is None
    same = inboxes.write("claude", "n", "first text", None, must_exist=False)
    assert same.previous is None
    second = inboxes.write("claude", "n", "second text", None, must_exist=False)
    assert second.previous is not None and _read(second.previous)[1] == "first text\n"
    third = inboxes.write("claude", "n", "third text", None, must_exist=True)
    assert third.previous is not None and _read(third.previous)[1] == "second text\n"
    assert _read(first.path)[1] == "third text\n"
    assert sorted(p.parent.name for p in (second.previous, third.previous)) == [".trash", ".trash"]


def _found(server: Any, query: str, agent: str) -> list[str]:
    hits = server.call("search", {"query": query, "source": "memory", "minScore": 0}, agent=agent)["hits"]
    return [h["reference"] for h in hits]


def _memory_ops(server: Any) -> Any:
    return server.handlers._ops["write"].__self__


def test_a_change_made_whose_audit_line_fails_is_reported_made(in_process: Any) -> None:
    """The audit line is appended after the note is committed: when it cannot be (disk full just
    then, an unwritable audit.log), the answer says the change was made, with a warning, and the
    note is indexed (it said "not written; the inbox is unchanged", or `internal` for a delete)."""
    in_process.call("write", {"slug": "keep", "content": "first zqvone"}, agent="ro")
    audit = in_process.cfg.agents_dir / "ro" / "audit.log"
    audit.unlink()
    audit.mkdir()  # appending to it fails (EISDIR), as a full disk or an immutable file would
    out = in_process.call("write", {"slug": "fresh", "content": "fresh zqfresh"}, agent="ro")
    assert out["action"] == "created" and "audit log" in out["warning"]
    assert "memory/fresh" in _found(in_process, "zqfresh", "ro")
    assert "memory_audit" in [p["area"] for p in in_process.call("health")["problems"]["active"]]
    gone = in_process.call("delete", {"slug": "keep"}, agent="ro")
    assert gone["deleted"] and "audit log" in gone["warning"]
    assert "memory/keep" not in _found(in_process, "zqvone", "ro")
    audit.rmdir()
    assert "warning" not in in_process.call("write", {"slug": "later", "content": "x"}, agent="ro")


def test_a_delete_never_falls_between_a_write_and_its_index_entry(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete racing a write of the same note: the index follows whichever came last (a delete
    between the write's file and its index entry left a search hit for a note with no file)."""
    ops = _memory_ops(in_process)
    real = ops.indexer.index_now
    deleter: list[threading.Thread] = []

    def slow_index(*args: Any, **kwargs: Any) -> Any:
        if not deleter:  # the first write: a delete arrives while it is being indexed
            t = threading.Thread(target=lambda: in_process.call("delete", {"slug": "hot"}, agent="hd"))
            deleter.append(t)
            t.start()
            time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(ops.indexer, "index_now", slow_index)
    in_process.call("write", {"slug": "hot", "content": "hot zqhot"}, agent="hd")
    deleter[0].join(10)
    assert not (in_process.cfg.agents_dir / "hd" / "memory" / "hot.md").exists()
    assert "memory/hot" not in _found(in_process, "zqhot", "hd")
    assert not [n for n in in_process.call("list", {}, agent="hd")["notes"] if n["indexed"]]


def test_an_edit_never_overwrites_a_save_made_while_it_was_prepared(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program (an editor saving in place) changes the note while an edit is prepared:
    the edit fails and the other program's text stays (it was replaced, its save lost)."""
    from sidecar.memory import inbox as inbox_mod

    w = inboxes.write("claude", "n", "agent text", None, must_exist=False)
    real_keep = inboxes._keep

    def user_saves(*args: Any) -> str:
        name = real_keep(*args)
        w.path.write_text("the user's own save\n", encoding="utf-8")
        return name

    monkeypatch.setattr(inboxes, "_keep", user_saves)
    with pytest.raises(MemoryWriteError, match="changed by someone else"):
        inboxes.write("claude", "n", "agent edit", None, must_exist=True)
    assert w.path.read_text(encoding="utf-8") == "the user's own save\n"
    assert not list((w.path.parent / ".trash").iterdir())  # no copy left of a change not made
    monkeypatch.undo()
    # A note torn while read (an editor between truncate and write) is read again.
    reads = []
    real_read = inbox_mod.read_fd

    def torn(fd: int, limit: int) -> bytes:
        data = real_read(fd, limit)
        if not reads:
            w.path.write_text("---\ntags: [x]\n---\nthe user's whole text\n", encoding="utf-8")
        reads.append(data)
        return data

    monkeypatch.setattr(inbox_mod, "read_fd", torn)
    out = inboxes.write("claude", "n", "agent edit", None, must_exist=True)
    assert len(reads) == 2 and out.previous is not None
    assert "the user's whole text" in out.previous.read_text(encoding="utf-8")
    assert split_front_matter(w.path.read_text(encoding="utf-8"))[0]["tags"] == ["x"]


def test_a_note_too_large_to_keep_whole_is_not_replaced(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note placed by hand that is larger than an edit reads is refused, not replaced with
    only its first part kept in .trash."""
    from sidecar.memory import inbox as inbox_mod

    monkeypatch.setattr(inbox_mod, "_MAX_EXISTING", 1000)
    w = inboxes.write("claude", "big", "small at first", None, must_exist=False)
    w.path.write_text("x" * 5000)
    for must_exist in (False, True):
        with pytest.raises(MemoryWriteError, match="larger than"):
            inboxes.write("claude", "big", "replacement", None, must_exist=must_exist)
    assert w.path.read_text() == "x" * 5000


def test_a_hand_placed_note_with_a_name_that_is_no_slug_says_why(in_process: Any) -> None:
    """A file dropped into an inbox whose name is not a slug is never indexed: list says so
    (it said "not indexed yet", a wait that never ends)."""
    in_process.call("write", {"slug": "ok", "content": "fine"}, agent="dd")
    inbox = in_process.cfg.agents_dir / "dd" / "memory"
    (inbox / "My Note.md").write_text("# Mine\n")
    (inbox / "later.md").write_text("# Later\n")
    listed = {n["reference"]: n for n in in_process.call("list", {}, agent="dd")["notes"]}
    assert "not a memory slug" in listed["memory/My Note"]["why"]
    assert listed["memory/later"]["why"] == "not indexed yet"
    (inbox / "sub").mkdir()
    (inbox / "sub" / "deep.md").write_text("# Deep\n")  # an inbox is flat: counted, not read
    in_process.call("index")
    skipped = in_process.call("health")["index"]["skipped"]
    assert skipped.get("folder in a memory inbox (not read)") == 1
    # An agent whose inbox holds only skipped files leaves no count behind when it is removed
    # (its root is no longer swept, so nothing replaced the count: it stayed for the daemon's life).
    (in_process.cfg.agents_dir / "ee" / "memory" / "sub").mkdir(parents=True)
    in_process.call("index")
    assert in_process.call("health")["index"]["skipped"]["folder in a memory inbox (not read)"] == 2
    shutil.rmtree(in_process.cfg.agents_dir / "ee")
    in_process.call("index")
    assert in_process.call("health")["index"]["skipped"]["folder in a memory inbox (not read)"] == 1


def test_front_matter_in_content_that_does_not_read_is_refused(inboxes: Inboxes) -> None:
    """A front matter block at the top of the content that YAML cannot read is an error (it was
    stored as body text under sidecar's own block, its keys lost)."""
    with pytest.raises(MemoryWriteError, match="front matter at the top"):
        inboxes.write("claude", "fm", "---\ntags: [a, b\n---\nbody\n", None, must_exist=False)
    assert not (inboxes.cfg.agents_dir / "claude" / "memory" / "fm.md").exists()


def test_content_after_an_empty_front_matter_block_keeps_its_rule(inboxes: Inboxes) -> None:
    """ "---/---/---/Dreifach": an empty block, then a rule; the rule was dropped from the body.
    Text opening with a rule and no block is refused with advice that helps (an empty block)."""
    w = inboxes.write("claude", "rule", "---\n---\n---\nDreifach", None, must_exist=False)
    assert _read(w.path)[1] == "---\nDreifach\n"
    with pytest.raises(MemoryWriteError, match="put an empty block"):
        inboxes.write("claude", "teile", "---\nTeil eins\n\n---\nTeil zwei\n", None, must_exist=False)
    w = inboxes.write(
        "claude", "teile", "---\n---\n---\nTeil eins\n\n---\nTeil zwei\n", None, must_exist=False
    )
    assert _read(w.path)[1] == "---\nTeil eins\n\n---\nTeil zwei\n"


def test_old_texts_in_trash_are_pruned(make_cfg: Any, vault: Path) -> None:
    """Texts kept in .trash longer than memory.trashDays go (an agent rewriting notes in a loop
    filled the disk the index shares); newer ones and files not named by sidecar stay."""
    import datetime as dt

    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30}))
    inboxes.write("claude", "n", "first", None, must_exist=False)
    inboxes.write("claude", "n", "second", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    (aged,) = trash.iterdir()  # "first", kept now: 31 days on it is old (a ctime cannot be set back)
    later = dt.datetime.now() + dt.timedelta(days=10)
    newer = trash / f"n--{later.strftime('%Y%m%dT%H%M%S%f')}.md"  # kept 10 days after it
    newer.write_text("newer text")
    os.utime(newer, (later.timestamp() - 60, later.timestamp() - 60))  # its note's last write
    (trash / "my own file.md").write_text("not sidecar's")
    (trash / "n--20261399T999999000000.md").write_text("digits that are no date")  # stops nothing
    assert inboxes.prune_trash(now=time.time() + 31 * 86_400) == 1
    assert not aged.exists() and newer.exists()
    assert sorted(p.name.split("--")[0] for p in trash.iterdir()) == ["my own file.md", "n", "n"]
    forever = Inboxes(make_cfg(vault, **{"memory.trashDays": 0}))
    assert forever.prune_trash(now=time.time() + 10_000 * 86_400) == 0


def test_a_kept_text_edited_later_ages_from_that_edit(make_cfg: Any, vault: Path) -> None:
    """A kept text a person opened and edited in .trash 20 days after it was kept is not removed
    30 days after its name's time (it was: judged by the name alone), but 30 days after the edit;
    an untouched one beside it still goes by its name."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30}))
    for text in ("first", "second", "third"):
        inboxes.write("claude", "n", text, None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    kept = sorted(trash.glob("n--*.md"))
    assert len(kept) == 2
    edited, untouched = kept
    kept_at = time.time()
    with edited.open("a") as f:
        f.write("a line the person added\n")
    os.utime(edited, (kept_at + 20 * 86_400, kept_at + 20 * 86_400))  # the edit, 20 days on
    assert inboxes.prune_trash(now=kept_at + 31 * 86_400) == 1
    assert not untouched.exists()
    assert edited.read_text().endswith("a line the person added\n")
    assert inboxes.prune_trash(now=kept_at + 49 * 86_400) == 0
    assert inboxes.prune_trash(now=kept_at + 51 * 86_400) == 1
    assert not edited.exists()


def test_a_kept_text_edited_by_a_tool_that_keeps_its_old_mtime_ages_from_that_edit(
    make_cfg: Any, vault: Path
) -> None:
    """An edit that sets the old mtime back (``cp -p``/``rsync -t`` of a restored copy, an editor
    set to keep times) still moves the file's ctime, which nothing sets back: a text kept 31 days
    ago and edited so today was removed by its name. It ages from the edit."""
    import datetime as dt

    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30}))
    inboxes.write("claude", "n", "first", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    trash.mkdir(mode=0o700, exist_ok=True)
    old = (dt.datetime.now() - dt.timedelta(days=31)).timestamp()
    edited = trash / f"n--{trash_mod.name_time(old)}.md"
    edited.write_text("kept 31 days ago\n")
    with edited.open("a") as f:  # a person edits it today (ctime: now) ...
        f.write("the person's addition\n")
    os.utime(edited, (old - 60, old - 60))  # ... with a tool setting its old mtime back
    assert inboxes.prune_trash() == 0
    assert edited.read_text().endswith("the person's addition\n")
    assert inboxes.prune_trash(now=time.time() + 29 * 86_400) == 0
    assert inboxes.prune_trash(now=time.time() + 31 * 86_400) == 1
    assert not edited.exists()


def test_an_inbox_has_a_size_limit(make_cfg: Any, vault: Path) -> None:
    """The notes of one inbox together stay within memory.maxInboxBytes: a write that would pass
    it is refused with inbox_full and nothing changes; a rewrite that does not grow a note, and
    a write after a delete, pass (an agent in a loop filled the disk the index shares)."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxInboxBytes": 3500}))
    for i in range(3):
        inboxes.write("claude", f"n{i}", "x" * 1000, None, must_exist=False)
    with pytest.raises(InboxFullError, match=r"memory\.maxInboxBytes") as refused:
        inboxes.write("claude", "n3", "y" * 1000, None, must_exist=False)
    assert refused.value.code == "inbox_full"
    inbox = inboxes.cfg.agents_dir / "claude" / "memory"
    assert not (inbox / "n3.md").exists()
    inboxes.write("claude", "n0", "z" * 900, None, must_exist=False)  # shrinks: always passes
    with pytest.raises(InboxFullError):
        inboxes.write("claude", "n1", "w" * 2000, None, must_exist=True)  # an edit that grows
    assert "x" * 1000 in (inbox / "n1.md").read_text()
    inboxes.delete("claude", "n2")  # .trash does not count
    inboxes.write("claude", "n3", "y" * 1000, None, must_exist=False)
    unlimited = Inboxes(make_cfg(vault, **{"memory.maxInboxBytes": 0}))
    unlimited.write("claude", "n4", "v" * 5000, None, must_exist=False)


def test_the_trash_is_capped_oldest_first(make_cfg: Any, vault: Path) -> None:
    """Kept texts beyond memory.maxTrashBytes go, oldest first, the newest always stays: an
    agent rewriting one note in a loop filled .trash for memory.trashDays."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashBytes": 3000}))
    dropped: list[str] = []
    for i in range(8):
        written = inboxes.write("claude", "loop", f"round {i} " + "x" * 1000, None, must_exist=False)
        dropped += written.trash_dropped  # each write says which kept texts it let go
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    kept = sorted(trash.iterdir())
    assert dropped and not {p.name for p in kept} & set(dropped)
    assert len(dropped) + len(kept) == 7  # every replaced text is kept or named as dropped
    assert 0 < sum(p.stat().st_size for p in kept) <= 3000
    assert "round 6 " in kept[-1].read_text()  # the text replaced last
    assert all("round 0 " not in p.read_text() for p in kept)
    (trash / "my own file.md").write_text("a" * 5000)  # not sidecar's: never removed
    deleted = inboxes.delete("claude", "loop")
    assert deleted is not None and deleted.trash_dropped and "my own file.md" not in deleted.trash_dropped
    text = trash_dropped_note(list(deleted.trash_dropped))
    assert "can no longer be restored" in text and deleted.trash_dropped[0] in text
    names = sorted(p.name for p in trash.iterdir())
    assert "my own file.md" in names and any("round 7 " in (trash / n).read_text() for n in names)


def test_the_audit_log_is_rotated(inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch) -> None:
    """audit.log becomes audit.log.1 at its size limit (one generation kept): it grew for as
    long as agents wrote."""
    monkeypatch.setattr(inbox_mod, "_AUDIT_ROTATE_BYTES", 400)
    for i in range(12):
        inboxes.write("claude", f"a{i}", "text", None, must_exist=False)
    folder = inboxes.cfg.agents_dir / "claude"
    current = (folder / "audit.log").read_text().splitlines()
    previous = (folder / "audit.log.1").read_text().splitlines()
    assert (folder / "audit.log").stat().st_size < 400 + 200
    slugs = [json.loads(line)["slug"] for line in previous + current]
    assert slugs == [f"a{i}" for i in range(12 - len(slugs), 12)]  # the newest, in order, none lost
    assert len(slugs) < 12


def test_an_agents_memory_problem_is_cleared_by_its_own_success_only(in_process: Any) -> None:
    """Another agent's successful write does not clear a problem with this agent's inbox."""
    in_process.call("write", {"slug": "a", "content": "x"}, agent="alice")
    audit = in_process.cfg.agents_dir / "alice" / "audit.log"
    audit.unlink()
    audit.mkdir()
    in_process.call("write", {"slug": "b", "content": "y"}, agent="alice")

    def areas() -> list[str]:
        return [p["area"] for p in in_process.call("health")["problems"]["active"]]

    in_process.call("write", {"slug": "c", "content": "z"}, agent="bob")
    assert "memory_audit" in areas()
    audit.rmdir()
    in_process.call("write", {"slug": "d", "content": "w"}, agent="alice")
    assert "memory_audit" not in areas()


def test_a_delete_whose_index_entry_cannot_be_removed_is_reported_done(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note moved to .trash but the index cannot be written (disk full): the answer says the
    delete was done and that search finds it until the index can be written (was `internal`)."""
    import sqlite3

    in_process.call("write", {"slug": "gone", "content": "zqgone"}, agent="dx")
    ops = _memory_ops(in_process)

    def full(_keys: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ops.indexer, "delete", full)
    out = in_process.call("delete", {"slug": "gone"}, agent="dx")
    assert out["deleted"] and "still found by search" in out["warning"]
    assert not (in_process.cfg.agents_dir / "dx" / "memory" / "gone.md").exists()
    with pytest.raises(Exception, match="'slug' is missing"):
        in_process.call("delete", {}, agent="dx")


_RUST_DUMP = (
    "BM25 commit failed: Failed to open file for write: 'IoError { io_error: Custom { kind: "
    'StorageFull, error: PathError { path: "/h/index/bm25/x.idx", err: Os { code: 28, kind: '
    'StorageFull, message: "No space left on device" } } }, filepath: "/h/index/bm25/x.idx" }\''
)


def test_a_store_error_reaches_a_reply_in_plain_words(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write or delete on a full disk passed Tantivy's Rust debug text to the agent
    (``IoError { io_error: Custom { kind: StorageFull, ...``); its words are now status' (``disk
    full: ... No space left on device``), the whole text kept for the log and health."""
    in_process.call("write", {"slug": "gone", "content": "zqgone"}, agent="dx")
    ops = _memory_ops(in_process)

    def full(*_a: Any, **_k: Any) -> None:
        raise StoreError(_RUST_DUMP)

    monkeypatch.setattr(ops.indexer, "index_now", full)
    monkeypatch.setattr(ops.indexer.writer.stores.bm25, "delete_key", full)
    written = in_process.call("write", {"slug": "kept", "content": "zqkept"}, agent="dx")
    deleted = in_process.call("delete", {"slug": "gone"}, agent="dx")
    for warning in (written["warning"], deleted["warning"]):
        assert "disk full" in warning and "No space left on device" in warning, warning
        assert "IoError" not in warning and "kind:" not in warning, warning


def test_a_delete_whose_keyword_step_fails_after_it_was_hidden_says_so(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry marked deleting (no answer shows it), then removing it from the keyword index
    failed: the warning said it was still found by search, which was no longer true."""
    in_process.call("write", {"slug": "gone", "content": "zqgone"}, agent="dx")
    ops = _memory_ops(in_process)

    def full(_key: Any) -> None:
        raise StoreError("BM25 delete failed: No space left on device")

    monkeypatch.setattr(ops.indexer.writer.stores.bm25, "delete_key", full)
    out = in_process.call("delete", {"slug": "gone"}, agent="dx")
    assert out["deleted"] and "still found" not in out["warning"], out
    assert "no longer found" in out["warning"]
    hits = in_process.call("search", {"query": "zqgone"}, agent="dx")["hits"]
    assert "memory/gone" not in [hit["reference"] for hit in hits]


def test_a_write_that_fails_costs_no_older_kept_text(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """.trash is capped once the write is made: a write that fails (disk full) had already let
    older kept texts go, and its error did not name them."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashBytes": 2500}))
    for i in range(3):
        inboxes.write("claude", "loop", f"round {i} " + "x" * 1000, None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    before = {p.name for p in trash.iterdir()}
    real = inbox_mod.write_in

    def full(dir_fd: int, name: str, data: bytes, **kw: Any) -> Any:
        if name == "loop.md":
            raise OSError(28, "No space left on device")
        return real(dir_fd, name, data, **kw)

    monkeypatch.setattr(inbox_mod, "write_in", full)
    with pytest.raises(OSError, match="No space"):
        inboxes.write("claude", "loop", "round 3 " + "x" * 1000, None, must_exist=False)
    assert before <= {p.name for p in trash.iterdir()}


def _fill_trash(trash: Path, n: int, days_ago: float = 30) -> list[str]:
    """``n`` kept texts of 600 B as the daemon names them, oldest first, ``days_ago`` and after."""
    import datetime as dt

    start = dt.datetime.now() - dt.timedelta(days=days_ago)
    names = [f"old--{(start + dt.timedelta(seconds=i)).strftime('%Y%m%dT%H%M%S%f')}.md" for i in range(n)]
    trash.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        (trash / name).write_bytes(b"x" * 600)
        # untouched since kept: its mtime is its note's last write, before the keep
        when = (start + dt.timedelta(seconds=i)).timestamp() - 60
        os.utime(trash / name, (when, when))
    return names


def _disk_use(trash: Path) -> tuple[int, int]:
    """(files, allocated bytes) of sidecar's kept texts in ``trash``, as the caps count them."""
    kept = [p for p in trash.iterdir() if trash_mod.KEPT.match(p.name)]
    return len(kept), sum(p.stat().st_blocks * 512 for p in kept)


def _count_trash_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time a .trash folder is listed."""
    listed: list[int] = []
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path)
        if where.endswith("/.trash"):
            listed.append(1)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return listed


def test_a_write_does_not_list_the_trash(make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write counts .trash from running figures: it listed and stat'ed every kept text on
    every write (x17 slower over 100,000 of them). The figures stay right when the user removes
    kept texts; the folder is listed again only when a cap is passed, and then emptied with some
    room, so the writes that follow do not list it again."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashFiles": 100}))
    inboxes.write("claude", "n", "first", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    olds = _fill_trash(trash, 70)
    (trash / "my own file.md").write_text("the user's")
    inboxes.prune_trash()  # at start: counts each trash once
    listed = _count_trash_listings(monkeypatch)
    for i in range(30):
        inboxes.write("claude", f"s{i % 3}", f"round {i}", None, must_exist=False)
    assert not listed
    usage = inboxes.usage("claude")
    assert (usage["trash_files"], usage["trash_bytes"]) == _disk_use(trash) and usage["trash_files"] == 97
    for name in olds[:20]:  # the user empties part of it: counted again, once
        (trash / name).unlink()
    usage = inboxes.usage("claude")
    assert (usage["trash_files"], usage["trash_bytes"]) == _disk_use(trash) and len(listed) == 1
    dropped: list[str] = []
    for i in range(29):  # 77 + 24 kept texts pass the cap of 100: down to 95% of it, then 5 more
        dropped += inboxes.write("claude", f"s{i % 3}", f"again {i}", None, must_exist=False).trash_dropped
    assert dropped == olds[20:26]  # the oldest
    assert len(listed) == 2
    assert _disk_use(trash)[0] == 100 and (trash / "my own file.md").exists()
    usage = inboxes.usage("claude")
    assert (usage["trash_files"], usage["trash_bytes"]) == _disk_use(trash) and len(listed) == 2


def test_the_trash_caps_count_disk_use_and_files(make_cfg: Any, vault: Path) -> None:
    """memory.maxTrashBytes counts the blocks a kept text takes (a 600-byte text takes 4 KiB:
    counted by size, the 100 MiB cap let .trash take 650 MiB), and memory.maxTrashFiles caps
    their number; the newest stays, the dropped ones are named."""
    cap = 40 << 10
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashBytes": cap}))
    for i in range(40):
        inboxes.write("claude", "loop", f"round {i} " + "x" * 600, None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    _files, used = _disk_use(trash)
    assert 0 < used <= cap and inboxes.usage("claude")["trash_bytes"] == used
    by_count = Inboxes(make_cfg(vault, **{"memory.maxTrashFiles": 5, "memory.maxTrashBytes": 0}))
    dropped: list[str] = []
    for i in range(10):
        dropped += by_count.write("claude", "loop", f"more {i}", None, must_exist=False).trash_dropped
    names = sorted(p.name for p in trash.iterdir())
    assert len(names) == 5 and not set(names) & set(dropped)
    assert "more 8" in (trash / names[-1]).read_text()  # the text replaced last
    assert by_count.usage("claude")["trash_files"] == 5


def test_the_caps_remove_the_text_a_person_just_edited_last(make_cfg: Any, vault: Path) -> None:
    """The caps remove the kept texts changed longest ago: ordered by the time in their names
    alone, the oldest kept text a person had just opened and edited in .trash went first, while
    untouched newer copies of the same note stayed."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30, "memory.maxTrashFiles": 4}))
    for i in range(4):
        inboxes.write("claude", "n", f"text {i}", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    kept = sorted(trash.glob("n--*.md"))
    assert len(kept) == 3
    edited, untouched = kept[0], kept[1]
    with edited.open("a") as f:
        f.write("the person's important addition\n")  # now the last write in .trash
    dropped: list[str] = []
    for i in range(4, 6):
        dropped += inboxes.write("claude", "n", f"text {i}", None, must_exist=False).trash_dropped
    assert edited.exists() and edited.read_text().endswith("the person's important addition\n")
    assert dropped == [untouched.name] and not untouched.exists()
    assert inboxes.prune_trash() == 0  # the daily prune and a start order them the same way


def test_the_prune_applies_the_caps_and_removes_leftovers(make_cfg: Any, vault: Path) -> None:
    """At start and once a day the trash is brought under the caps too (a trash an older
    version kept, or caps lowered), oldest first, and temp files of a keep that was killed go;
    files of the user's own stay."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashFiles": 20}))
    inboxes.write("claude", "n", "first", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    olds = _fill_trash(trash, 50)
    (trash / ".old--20260101T000000000000.1a2b3c4d.tmp").write_text("half a kept text")
    (trash / ".mine.1a2b3c4d.tmp").write_text("the user's")
    (trash / "my own file.md").write_text("the user's")
    assert inboxes.prune_trash() == 31
    assert sorted(p.name for p in trash.iterdir()) == [".mine.1a2b3c4d.tmp", "my own file.md", *olds[31:]]


def test_writers_at_once_keep_the_trash_figures_right(make_cfg: Any, vault: Path) -> None:
    """Several threads rewrite notes of one agent at once (one .trash): its figures stay those of
    the folder, it stays under its cap, and every replaced text is kept or named as dropped."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashFiles": 20}))
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    dropped: list[str] = []
    kept: list[str] = []
    errors: list[BaseException] = []

    def loop(t: int) -> None:
        try:
            for i in range(15):
                w = inboxes.write("claude", f"t{t}", f"thread {t} round {i}", None, must_exist=False)
                dropped.extend(w.trash_dropped)
                if w.previous is not None:
                    kept.append(w.previous.name)
            d = inboxes.delete("claude", f"t{t}")
            assert d is not None
            dropped.extend(d.trash_dropped)
            kept.append(d.trash.name)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    names = {p.name for p in trash.iterdir()}
    assert len(kept) == 4 * 15 and set(kept) == names | set(dropped) and not names & set(dropped)
    assert len(names) <= 20
    usage = inboxes.usage("claude")
    assert (usage["trash_files"], usage["trash_bytes"]) == _disk_use(trash)


def test_the_prune_keeps_the_newest_kept_text_whatever_its_size(make_cfg: Any, vault: Path) -> None:
    """The prune at start (and daily) brings .trash under its caps but keeps the newest kept
    text, as a write's cap does: one larger than the cap, just kept and named as a write's
    'previous', went at the next restart."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashBytes": 8192}))
    inboxes.write("claude", "big", "first " + "x" * 20_000, None, must_exist=False)
    written = inboxes.write("claude", "big", "second", None, must_exist=False)
    assert written.previous is not None and written.previous.exists()
    Inboxes(inboxes.cfg).prune_trash()  # as a new start does
    assert written.previous.exists()


def test_a_notes_lock_lives_while_it_is_held_or_waited_for(inboxes: Inboxes) -> None:
    """Locks are per note and dropped when nobody holds or waits for them (every note ever
    written kept one for the daemon's life); two writers of one note still take turns."""
    for i in range(50):
        inboxes.write("claude", f"note-{i}", "text", None, must_exist=False)
    assert inboxes._locks == {}
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        with inboxes.locked("claude", "shared"):
            order.append("second")

    with inboxes.locked("claude", "shared"), inboxes.locked("claude", "shared"):  # re-entrant
        t = threading.Thread(target=second)
        t.start()
        inside.wait(0.2)  # the second writer is waiting now (or soon): it must not get in
        order.append("first")
    t.join(5)
    assert order == ["first", "second"] and inboxes._locks == {}


# --- retiring the folders of agents with nothing left -------------------------------------------

_DAY = 86_400


def _audit_ops(path: Path) -> list[str]:
    return [json.loads(line)["op"] for line in path.read_text().splitlines()]


def test_an_agent_with_nothing_left_is_retired_once_its_trash_ages_out(make_cfg: Any, vault: Path) -> None:
    """An agent whose notes were all deleted keeps its folders while .trash holds their texts;
    once the daily prune removed them (memory.trashDays), its folders go (three inotify watches
    and a listing per sweep each, for every agent name ever used) and its audit history moves to
    agents/.retired/<agent>.audit.log. Writing again makes fresh folders; a second retirement
    appends to the same history. Its trash ledger is not kept either."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30}))
    agents = inboxes.cfg.agents_dir
    inboxes.write("s1", "n", "first", None, must_exist=False)
    assert inboxes.delete("s1", "n") is not None
    inboxes.prune_trash()
    assert (agents / "s1" / "memory" / ".trash").is_dir()  # within its retention: kept
    inboxes.prune_trash(now=time.time() + 31 * _DAY)
    assert not (agents / "s1").exists()
    retired = agents / ".retired" / "s1.audit.log"
    assert _audit_ops(retired) == ["write", "delete"]
    assert (retired.stat().st_mode & 0o777) == 0o600
    assert "s1" not in inboxes._trashes

    again = inboxes.write("s1", "n", "back", None, must_exist=False)
    assert again.created and again.path.read_text().endswith("back\n")
    assert _audit_ops(agents / "s1" / "audit.log") == ["write"]
    assert _audit_ops(retired) == ["write", "delete"]  # readable, untouched
    inboxes.delete("s1", "n")
    inboxes.prune_trash(now=time.time() + 31 * _DAY)
    assert not (agents / "s1").exists()
    assert _audit_ops(retired) == ["write", "delete", "write", "delete"]


def test_a_retired_history_goes_after_memory_retired_audit_days(make_cfg: Any, vault: Path) -> None:
    """Agents named per session each left an audit history in agents/.retired for good: one is
    removed memory.retiredAuditDays after its last retirement (0: kept for ever); a young one, a
    file not named for an agent and a folder stay."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30, "memory.retiredAuditDays": 365}))
    agents = inboxes.cfg.agents_dir
    for agent in ("old", "young"):
        inboxes.write(agent, "n", "x", None, must_exist=False)
        inboxes.delete(agent, "n")
    inboxes.prune_trash(now=time.time() + 31 * _DAY)
    retired = agents / ".retired"
    assert sorted(p.name for p in retired.iterdir()) == ["old.audit.log", "young.audit.log"]
    year_ago = time.time() - 366 * _DAY
    os.utime(retired / "old.audit.log", (year_ago, year_ago))
    (retired / "notes.txt").write_text("mine")
    os.utime(retired / "notes.txt", (year_ago, year_ago))
    (retired / "gone.audit.log").mkdir()
    Inboxes(make_cfg(vault, **{"memory.retiredAuditDays": 0})).prune_trash()
    assert (retired / "old.audit.log").exists()  # 0: kept for ever
    inboxes.prune_trash()
    assert sorted(p.name for p in retired.iterdir()) == ["gone.audit.log", "notes.txt", "young.audit.log"]


def test_the_rotated_audit_log_is_kept_too_and_a_cut_line_stays_apart(make_cfg: Any, vault: Path) -> None:
    """Both generations of the audit log are appended, oldest first; a retired history whose
    last line a crash cut keeps that line apart from the next."""
    inboxes = Inboxes(make_cfg(vault))
    agents = inboxes.cfg.agents_dir
    inboxes.write("s2", "n", "x", None, must_exist=False)
    inboxes.delete("s2", "n")
    folder = agents / "s2"
    (folder / "audit.log.1").write_text('{"op": "older"}\n')
    (agents / ".retired").mkdir(mode=0o700)
    (agents / ".retired" / "s2.audit.log").write_text('{"op": "earlier"}\n{"op": "cu')
    inboxes.prune_trash(now=time.time() + 91 * _DAY)
    assert not folder.exists()
    lines = (agents / ".retired" / "s2.audit.log").read_text().splitlines()
    assert lines[0] == '{"op": "earlier"}' and lines[1] == '{"op": "cu'
    assert [json.loads(line)["op"] for line in lines[2:]] == ["older", "write", "delete"]


def test_nothing_is_retired_while_a_note_or_a_kept_text_remains(make_cfg: Any, vault: Path) -> None:
    """A folder with a note, a text in .trash within its retention, a file of the user's (in the
    inbox or beside it), or kept for ever (trashDays 0) stays; so does one that is not the
    daemon's own shape (a link, not private): left alone, never followed."""
    cfg = make_cfg(vault, **{"memory.trashDays": 30})
    inboxes = Inboxes(cfg)
    agents = cfg.agents_dir
    inboxes.write("live", "n", "a note", None, must_exist=False)
    inboxes.write("kept", "n", "deleted yesterday", None, must_exist=False)
    inboxes.delete("kept", "n")
    for agent in ("users", "beside", "hidden"):
        inboxes.write(agent, "n", "x", None, must_exist=False)
        inboxes.delete(agent, "n")
    (agents / "users" / "memory" / "todo.txt").write_text("not a note, but the user's")
    (agents / "beside" / "notes.md").write_text("the user's, beside the inbox")
    (agents / "hidden" / "memory" / ".draft.md").write_text("a hidden note")
    outside = vault.parent / "elsewhere"
    (outside / "memory").mkdir(parents=True, mode=0o700)
    outside.chmod(0o700)
    (agents / "linked").symlink_to(outside)
    # Loosened modes are the daemon's own folders to tighten (as any write or sweep does), no
    # reason to keep them: "open" goes with the others.
    open_dir = agents / "open"
    (open_dir / "memory").mkdir(parents=True)
    open_dir.chmod(0o755)
    (open_dir / "memory").chmod(0o777)
    shared = agents / "shared"  # an inbox that is a link into another agent's
    shared.mkdir(mode=0o700)
    (shared / "memory").symlink_to(agents / "live" / "memory")

    inboxes.prune_trash(now=time.time() + 2 * _DAY)
    assert (agents / "kept" / "memory" / ".trash").is_dir()
    inboxes.prune_trash(now=time.time() + 31 * _DAY)
    left = sorted(p.name for p in agents.iterdir())
    assert left == [".retired", ".sidecar-home", "beside", "hidden", "linked", "live", "shared", "users"]
    assert (agents / "live" / "memory" / "n.md").is_file()
    assert (outside / "memory").is_dir() and (agents / "live" / "memory").is_dir()
    assert (agents / "users" / "memory" / "todo.txt").is_file()

    forever = Inboxes(make_cfg(vault, **{"memory.trashDays": 0}))
    forever.write("always", "n", "x", None, must_exist=False)
    forever.delete("always", "n")
    forever.prune_trash(now=time.time() + 10_000 * _DAY)
    assert (agents / "always" / "memory" / ".trash").is_dir()


def test_a_write_racing_a_retirement_is_not_lost(make_cfg: Any, vault: Path, monkeypatch: Any) -> None:
    """A write that comes while the agent's folders are being removed waits for the removal and
    then makes fresh ones (it was not written into a folder about to go); one that holds a
    note lock when the prune comes makes it leave the agent for the next day. A file put there
    by someone else meanwhile (not through the daemon) keeps its folder."""
    inboxes = Inboxes(make_cfg(vault))
    agents = inboxes.cfg.agents_dir

    def used_once(agent: str) -> None:
        inboxes.write(agent, "n", "x", None, must_exist=False)
        inboxes.delete(agent, "n")

    later = time.time() + 91 * _DAY
    used_once("r1")

    # A note lock held (a write between its file and its index entry): not retired today.
    with inboxes.locked("r1", "other"):
        inboxes.prune_trash(now=later)
        assert (agents / "r1" / "memory").is_dir()
    inboxes.prune_trash(now=later)
    assert not (agents / "r1").exists()

    # A write arriving mid-removal waits, then lands in fresh folders.
    used_once("r2")
    keep_audit = Inboxes._keep_audit
    done: list[Any] = []
    waited: list[bool] = []

    def racing(self: Inboxes, *args: Any) -> None:
        writer = threading.Thread(
            target=lambda: done.append(self.write("r2", "fresh", "written meanwhile", None, must_exist=False))
        )
        writer.start()
        writer.join(0.5)
        waited.append(writer.is_alive())  # held off while the folders go
        keep_audit(self, *args)
        racing.writer = writer  # type: ignore[attr-defined]

    monkeypatch.setattr(Inboxes, "_keep_audit", racing)
    inboxes.prune_trash(now=later)
    racing.writer.join(10)  # type: ignore[attr-defined]
    assert waited == [True]
    assert done and done[0].created
    assert (agents / "r2" / "memory" / "fresh.md").read_text().endswith("written meanwhile\n")
    assert _audit_ops(agents / "r2" / "audit.log") == ["write"]
    assert _audit_ops(agents / ".retired" / "r2.audit.log") == ["write", "delete"]

    # Someone else's file (no lock of ours) arrives after the check: the folders stay.
    used_once("r3")

    def dropped_in(self: Inboxes, agents_fd: int, agent_fd: int, agent: str, logs: list[str]) -> None:
        (agents / agent / "memory" / "by-hand.md").write_text("copied in by the user")
        keep_audit(self, agents_fd, agent_fd, agent, logs)

    monkeypatch.setattr(Inboxes, "_keep_audit", dropped_in)
    inboxes.prune_trash(now=later)
    assert (agents / "r2" / "memory" / "fresh.md").is_file()  # a note: not retired
    assert (agents / "r3" / "memory" / "by-hand.md").read_text() == "copied in by the user"
    assert _audit_ops(agents / ".retired" / "r3.audit.log") == ["write", "delete"]


def test_an_edit_refused_for_the_note_there_is_no_malformed_request(inboxes: Inboxes) -> None:
    """An edit whose sent text fits but whose note there holds a front matter so large that the
    whole would not is refused as unreadable (the CLI exits 7: the command line was right), not
    as a bad write (exit 2); a write of too much text stays a bad write."""
    from sidecar.memory.inbox_types import MemoryUnreadableError

    inboxes.write("claude", "big", "first", None, must_exist=False)
    path = inboxes.path_of("claude", "big")
    path.write_text(f"---\nnotes: {'x' * 60_000}\n---\nbody\n", encoding="utf-8")
    with pytest.raises(MemoryUnreadableError, match="would be"):
        inboxes.write("claude", "big", "y" * 45_000, None, must_exist=True)
    with pytest.raises(MemoryWriteError) as too_much:
        inboxes.write("claude", "other", "z" * 200_000, None, must_exist=False)
    assert not isinstance(too_much.value, MemoryUnreadableError)
    assert too_much.value.code == "bad_memory_write"


def test_each_inboxs_write_problem_stays_until_its_own_success(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory-write problems are one entry per inbox: another agent's failure does not hide it,
    nor does that agent's success clear it; a full disk is one entry for all, cleared by any
    write that works or by the tick that finds room. Was: one slot, the last writer's (dave's
    read-only inbox vanished from status once carol failed and then wrote fine), and "No space
    left on device" stayed until the agent that met it wrote again."""
    import errno

    from sidecar.daemon.repairs import RepairPolicy

    failing: dict[str, int] = {}
    real = inbox_mod.write_in

    def write_in(dir_fd: int, name: str, data: bytes, **kw: Any) -> Any:
        if name in failing:
            raise OSError(failing[name], os.strerror(failing[name]))
        return real(dir_fd, name, data, **kw)

    monkeypatch.setattr(inbox_mod, "write_in", write_in)

    def active() -> list[str]:
        return sorted(
            p["error"] for p in in_process.call("health")["problems"]["active"] if p["area"] == "memory_write"
        )

    def write(agent: str, slug: str, fails: int | None = None) -> None:
        if fails is None:
            failing.pop(f"{slug}.md", None)
            in_process.call("write", {"slug": slug, "content": f"{agent} {slug}"}, agent=agent)
            return
        failing[f"{slug}.md"] = fails
        with pytest.raises(RemoteError) as refused:
            in_process.call("write", {"slug": slug, "content": f"{agent} {slug}"}, agent=agent)
        assert refused.value.code == "storage"

    write("dave", "d1")
    write("dave", "d2", errno.EACCES)
    write("carol", "c5", errno.EACCES)
    assert [e.split(" failed")[0] for e in active()] == [
        "writing to the carol inbox",
        "writing to the dave inbox",
    ]
    write("carol", "c5")
    assert len(active()) == 1 and "dave inbox" in active()[0]

    write("erin", "e1", errno.ENOSPC)
    assert len(active()) == 2 and any("no room on the disk" in e for e in active())
    write("frank", "f1")  # it had room: the full disk is no more
    assert len(active()) == 1 and "dave inbox" in active()[0]
    write("erin", "e2", errno.ENOSPC)
    h = in_process.harness
    RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()  # the disk has room
    assert len(active()) == 1 and "dave inbox" in active()[0]
    write("dave", "d3")
    assert active() == []


def test_housekeeping_leaves_an_agents_folder_that_is_not_the_one_kept(make_cfg: Any, vault: Path) -> None:
    """The agents folder replaced (its share unmounted, the bare mount point's own folder at the
    path): the daily prune and the start's temp-file cleanup leave what lies there alone; it is
    not the agents' (was: aged texts and temp files removed from it, empty folders retired)."""
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 30}))
    inboxes.write("claude", "n", "kept", None, must_exist=False)  # the agents folder is kept
    agents = inboxes.cfg.agents_dir
    agents.rename(agents.with_name("agents.away"))
    trash = agents / "stale" / "memory" / ".trash"
    names = _fill_trash(trash, 3, days_ago=60)
    temp = agents / "stale" / "memory" / ".n.abcd1234.tmp"
    temp.write_text("x")
    assert inboxes.clean_temp() == 0 and inboxes.prune_trash() == 0
    assert sorted(p.name for p in trash.iterdir()) == sorted(names) and temp.exists()


def test_a_secret_under_its_key_in_front_matter_and_a_card_number_are_redacted(inboxes: Inboxes) -> None:
    """``password: hunter2hunter2`` as a front matter entry and a card number in the text reached
    disk in clear (the same password line in the text was redacted; cards were masked only when
    read). An ordinary number and a Luhn-valid number no card starts with stay."""
    w = inboxes.write(
        "claude",
        "creds",
        "card 4111 1111 1111 1111, order 7992739871 and ticket 1234567812345670.\npassword: hunter2hunter2",
        {
            "password": "hunter2hunter2",
            "pin": 12345678,
            "room": 4711,
            "db": {"api_key": "9f8e7d6c5b4a3928"},
            "api_key": 98765432109,
            "tags": ["nas"],
            "count": 3,
            "description": "the NAS login",
        },
        must_exist=False,
    )
    raw = w.path.read_text()
    assert "hunter2" not in raw and "4111" not in raw and "9f8e7d" not in raw and "98765432109" not in raw
    meta = yaml.safe_load(raw.split("---\n")[1])
    assert meta["password"] == "[REDACTED:password]" and meta["db"] == {"api_key": "[REDACTED:password]"}
    assert meta["api_key"] == "[REDACTED:password]"
    assert meta["pin"] == "[REDACTED:pin]"  # a PIN under its key, as "PIN: 4711" in the text
    assert meta["room"] == 4711 and meta["count"] == 3 and meta["tags"] == ["nas"]
    assert meta["description"] == "the NAS login"
    assert "order 7992739871 and ticket 1234567812345670." in raw  # 1234…: Luhn-valid, no issuer's prefix
    assert w.redacted == {"password": 4, "pin": 1, "card_number": 1}


def test_a_replacement_keeps_the_notes_mode(inboxes: Inboxes) -> None:
    """A note the person made 0644 (to share it, or a sync tool's default) became 0600 at the
    agent's next write: a replace or an edit now keeps the note's mode; a new note is 0600."""
    first = inboxes.write("claude", "m", "first", None, must_exist=False)
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    first.path.chmod(0o644)
    inboxes.write("claude", "m", "second", None, must_exist=False)
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o644
    first.path.chmod(0o640)
    inboxes.write("claude", "m", "third", None, must_exist=True)
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o640
    assert "third" in first.path.read_text(encoding="utf-8")


def test_a_replacement_through_the_socket_keeps_the_notes_mode(in_process: Any) -> None:
    """The same through the protocol (the CLI and the MCP shim send these ops)."""
    in_process.call("write", {"slug": "m", "content": "first"}, agent="ed")
    note = in_process.cfg.agents_dir / "ed" / "memory" / "m.md"
    note.chmod(0o644)
    in_process.call("edit", {"slug": "m", "content": "second"}, agent="ed")
    assert stat.S_IMODE(note.stat().st_mode) == 0o644 and "second" in note.read_text(encoding="utf-8")
