"""Memory writes racing another program's save: never a version lost, the agent told."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError, StorageError
from sidecar.memory import inbox as inbox_mod
from sidecar.memory import replace
from sidecar.memory.inbox import Inboxes
from sidecar.memory.inbox_types import MemoryBeingSavedError, MemoryConflictError, Written

_TEMP = re.compile(r"^\.n\.[0-9a-f]{8}\.tmp$")


@pytest.fixture
def inboxes(make_cfg: Any, vault: Path) -> Inboxes:
    return Inboxes(make_cfg(vault))


def _inbox(inboxes: Inboxes) -> Path:
    return inboxes.cfg.agents_dir / "claude" / "memory"


def _during_fsync(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> list[str]:
    """Run ``act`` (another program's save) while the note's temp file is fsynced: after the
    write's check, before its rename, the window a slow disk stretches to seconds."""
    real = os.fsync
    done: list[str] = []

    def fsync(fd: int) -> None:
        real(fd)
        if not done and _TEMP.match(os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))):
            done.append("saved")
            act()

    monkeypatch.setattr(os, "fsync", fsync)
    return done


def _person_saves(note: Path, text: str) -> Callable[[], None]:
    def save() -> None:  # as editors and sync tools do: a temp file renamed over the note
        tmp = note.parent / ".person.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(note)

    return save


def _no_exchange(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The system call answers EINVAL, as a share without it does: the hard-link fallback."""
    calls: list[int] = []

    def refused(*args: Any) -> int:
        calls.append(args[-1])
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(replace, "RENAME", (refused, 2, 1))
    return calls


def _no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the exchange nor hard links (a share that has none): the check right before the rename."""
    _no_exchange(monkeypatch)

    def link(*_args: Any, **_kw: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", link)


def _without(monkeypatch: pytest.MonkeyPatch, path: str) -> list[int]:
    if path == "exchange" and replace.RENAME is None:
        pytest.skip("no renameat2 here")
    if path == "no_links":
        _no_links(monkeypatch)
        return [0]
    return _no_exchange(monkeypatch) if path == "fallback" else []


def _everything(inbox: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(inbox.rglob("*")) if p.is_file())


@pytest.mark.parametrize("path", ["exchange", "fallback", "no_links"])
def test_a_save_made_while_a_replace_is_fsynced_is_kept_and_the_agent_told(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A person's save landing between the write's check and its rename was replaced without a
    word: the write answered "replaced" and the save was nowhere. Now the save is the note, the
    write fails with conflict and keeps nothing of its own."""
    refused = _without(monkeypatch, path)
    first = inboxes.write("claude", "n", "v1 of the agent", None, must_exist=False)
    saved = _during_fsync(monkeypatch, _person_saves(first.path, "PERSON SAVE during fsync\n"))
    with pytest.raises(MemoryConflictError, match="changed by someone else"):
        inboxes.write("claude", "n", "agent v3", None, must_exist=False)
    monkeypatch.undo()
    assert saved == ["saved"]
    assert first.path.read_text(encoding="utf-8") == "PERSON SAVE during fsync\n"
    inbox = _inbox(inboxes)
    assert "agent v3" not in _everything(inbox)
    assert sorted(p.name for p in inbox.iterdir()) == [".trash", "n.md"]  # no temp file left
    assert list((inbox / ".trash").iterdir()) == []  # nor a copy of a change not made
    assert (refused != []) == (path != "exchange")
    # Nothing raced: the write goes through either way, the text replaced kept in .trash.
    _without(monkeypatch, path)
    done = inboxes.write("claude", "n", "agent v4", None, must_exist=False)
    assert "agent v4" in first.path.read_text(encoding="utf-8")
    assert done.previous is not None
    assert done.previous.read_text(encoding="utf-8") == "PERSON SAVE during fsync\n"
    assert [p.name for p in (inbox / ".trash").iterdir()] == [done.previous.name]  # no link left


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_a_save_in_place_while_a_replace_is_fsynced_is_kept(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The same for an editor that writes into the note's own file (same inode, same size)."""
    _without(monkeypatch, path)
    first = inboxes.write("claude", "n", "aaaa", None, must_exist=False)
    text = first.path.read_text(encoding="utf-8").replace("aaaa", "PPPP")

    def in_place() -> None:
        with open(first.path, "r+", encoding="utf-8") as f:
            f.write(text)

    _during_fsync(monkeypatch, in_place)
    with pytest.raises(MemoryConflictError):
        inboxes.write("claude", "n", "agent edit", None, must_exist=True)
    monkeypatch.undo()
    assert first.path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("path", ["exchange", "fallback", "no_links"])
def test_a_note_created_while_a_new_note_is_fsynced_is_kept(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A note the person creates under the same name while the agent's first version is written
    stays, and the write fails with conflict."""
    _without(monkeypatch, path)
    inboxes.write("claude", "other", "makes the inbox", None, must_exist=False)
    note = _inbox(inboxes) / "n.md"
    _during_fsync(monkeypatch, _person_saves(note, "the person's own note\n"))
    with pytest.raises(MemoryConflictError):
        inboxes.write("claude", "n", "agent text", None, must_exist=False)
    monkeypatch.undo()
    assert note.read_text(encoding="utf-8") == "the person's own note\n"
    assert not [p for p in _inbox(inboxes).iterdir() if p.name.endswith(".tmp")]


def test_a_third_save_within_the_swap_back_is_kept_in_trash(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two saves, one in the write's window and one just as the write puts the first back: the
    later one lies at the temp name then; it is moved into .trash, never removed as ours."""
    if replace.RENAME is None:
        pytest.skip("no renameat2 here")
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    _during_fsync(monkeypatch, _person_saves(first.path, "first save\n"))
    real = replace.exchange
    calls: list[str] = []

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        calls.append(a)
        if len(calls) == 2:  # the swap back: a second save lands on the note just before it
            _person_saves(first.path, "second save\n")()
        return real(dir_fd, a, b)

    monkeypatch.setattr(replace, "exchange", exchange)
    with pytest.raises(MemoryConflictError) as raced:
        inboxes.write("claude", "n", "agent text", None, must_exist=False)
    monkeypatch.undo()
    trash = _inbox(inboxes) / ".trash"
    assert first.path.read_text(encoding="utf-8") == "first save\n"
    assert [p.read_text(encoding="utf-8") for p in trash.iterdir()] == ["second save\n"]
    # Said as it is: not "their text is the note" (the later save is not), but where each lies.
    later = next(trash.iterdir()).name
    assert "their text is the note" not in str(raced.value)
    assert f"the note holds the earlier save, the later one is kept in .trash/{later}" in str(raced.value)
    assert not [p for p in _inbox(inboxes).iterdir() if p.name.endswith(".tmp")]


def test_a_note_emptied_a_moment_ago_is_being_saved_and_not_replaced(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor that truncates the note and then writes its buffer: the write read the empty
    note as the previous version, kept 0 bytes in .trash and replaced the file; the editor's
    text went into the replaced file, lost. Now refused (conflict: try again in a moment) while
    the note is empty and changed a moment ago; an empty note left so long ago is replaced."""
    first = inboxes.write("claude", "n", "original agent text", None, must_exist=False)
    pauses: list[float] = []
    monkeypatch.setattr(inbox_mod, "pause", pauses.append)
    editor = open(first.path, "w", encoding="utf-8")  # noqa: SIM115 - the editor's save spans the write
    try:
        with pytest.raises(MemoryBeingSavedError, match="another program is saving it") as refused:
            inboxes.write("claude", "n", "agent update", None, must_exist=False)
        assert refused.value.code == "conflict" and len(pauses) == 3
        editor.write("PERSON TEXT\n")
    finally:
        editor.close()
    assert first.path.read_text(encoding="utf-8") == "PERSON TEXT\n"
    assert not (_inbox(inboxes) / ".trash").exists() or not list((_inbox(inboxes) / ".trash").iterdir())
    # Emptied an hour ago: nothing is being saved; nothing to keep either (no 0-byte "previous").
    first.path.write_bytes(b"")
    _an_hour_later(monkeypatch)
    done = inboxes.write("claude", "n", "agent update", None, must_exist=False)
    assert done.previous is None and "agent update" in first.path.read_text(encoding="utf-8")


def _an_hour_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder's clock (a file made there) an hour on: what was changed now is an hour old."""
    real = inbox_mod.reference_ns
    monkeypatch.setattr(inbox_mod, "reference_ns", lambda fd, name: real(fd, name) + 3600 * 10**9)


def test_a_note_still_changing_is_being_saved_and_the_agents_own_write_needs_no_wait(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note another program keeps writing to (its size and time move between two looks a
    moment apart) is not read as a whole text; a note as the daemon's own last write left it
    is written at once, and a settled one after a single look."""
    first = inboxes.write("claude", "n", "agent text", None, must_exist=False)
    pauses: list[float] = []
    monkeypatch.setattr(inbox_mod, "pause", pauses.append)
    inboxes.write("claude", "n", "agent text, again", None, must_exist=False)
    assert pauses == []  # its own write of a moment ago: no other program's save under way

    def appending(_seconds: float) -> None:
        pauses.append(_seconds)
        with open(first.path, "a", encoding="utf-8") as f:
            f.write("more of the person's text\n")

    monkeypatch.setattr(inbox_mod, "pause", appending)
    appending(0)  # the person's program starts writing
    pauses.clear()
    with pytest.raises(MemoryBeingSavedError, match="kept changing"):
        inboxes.write("claude", "n", "agent edit", None, must_exist=True)
    assert first.path.read_text(encoding="utf-8").count("more of the person's text") == 4
    assert len(pauses) == 3
    pauses.clear()
    monkeypatch.setattr(inbox_mod, "pause", pauses.append)
    done = inboxes.write("claude", "n", "agent edit", None, must_exist=True)  # settled now
    assert len(pauses) == 1 and done.previous is not None
    assert done.previous.read_text(encoding="utf-8").count("more of the person's text") == 4


def test_a_write_over_a_note_being_saved_is_answered_conflict(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the socket: the code an agent retries on, and a message that says to."""
    in_process.call("write", {"slug": "n", "content": "agent text"}, agent="ed")
    note = in_process.cfg.agents_dir / "ed" / "memory" / "n.md"
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    note.write_bytes(b"")  # an editor between its truncate and its write
    with pytest.raises(RemoteError) as refused:
        in_process.call("write", {"slug": "n", "content": "agent update"}, agent="ed")
    assert refused.value.code == "conflict"
    assert "try again in a moment" in str(refused.value)
    assert note.read_bytes() == b""


class Killed(BaseException):
    """Stands in for kill -9 or a power loss at that point: nothing after it runs."""


def _killed_at_swap_back(monkeypatch: pytest.MonkeyPatch) -> None:
    real = replace.exchange
    calls: list[str] = []

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        calls.append(a)
        if len(calls) == 2:
            raise Killed  # the daemon dies right before the swap back
        return real(dir_fd, a, b)

    monkeypatch.setattr(replace, "exchange", exchange)


def test_a_save_left_at_the_temp_name_by_a_crash_is_kept_at_the_next_start(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the exchange and the swap back, the write leaves the person's save under
    its temp name; the next start removed every such temp file unread. Now it is kept in .trash
    as a kept text. A second name of the note itself goes, and so does a copy of its text (it
    carries nothing); an empty file may be a file a write replaced, still open in an editor, and
    waits in .trash."""
    if replace.RENAME is None:
        pytest.skip("no renameat2 here")
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    _during_fsync(monkeypatch, _person_saves(first.path, "PERSON SAVE\n"))
    _killed_at_swap_back(monkeypatch)
    with pytest.raises(Killed):
        inboxes.write("claude", "n", "agent text", None, must_exist=False)
    monkeypatch.undo()
    inbox = _inbox(inboxes)
    os.link(first.path, inbox / ".n.0badf00d.tmp")  # the note itself (a new note's write killed)
    (inbox / ".n.0000beef.tmp").write_bytes(first.path.read_bytes())  # a copy of its text
    (inbox / ".n.0000f00d.tmp").write_bytes(b"")  # empty: no text, waits in .trash
    restarted = Inboxes(inboxes.cfg)
    _an_hour_later(monkeypatch)
    assert restarted.clean_temp() == 4
    assert not [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
    kept = _kept_texts(inboxes)
    assert "PERSON SAVE\n" in kept and first.path.read_text(encoding="utf-8") not in kept
    assert len(kept) == 2 and "" not in kept  # and the copy of v1 the killed write had kept
    assert [p.read_bytes() for p in (inbox / ".trash").glob(".n--*.held")] == [b""]
    assert restarted.clean_temp() == 0


@pytest.mark.parametrize("when", ["start", "daily prune"])
def test_a_leftover_holding_the_notes_own_text_is_removed_and_any_other_kept(
    inboxes: Inboxes, when: str
) -> None:
    """A killed write's leftover whose text is the note's own carries nothing: it is removed,
    at a start and by the daily prune (it was kept in .trash as one more copy of the note, which
    took a place of the caps' and a line of every listing of kept texts). One holding any other
    text, a byte apart too, is kept."""
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    inbox = _inbox(inboxes)
    kept_before = _kept_texts(inboxes) if (inbox / ".trash").exists() else []
    text = first.path.read_bytes()
    (inbox / ".n.0000beef.tmp").write_bytes(text)  # the note's text
    (inbox / ".n.0000cafe.tmp").write_bytes(text + b"x")  # another
    if when == "start":
        assert Inboxes(inboxes.cfg).clean_temp() == 2
    else:
        inboxes.prune_trash()
    assert not [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
    assert sorted(_kept_texts(inboxes)) == sorted([*kept_before, (text + b"x").decode()])
    assert first.path.read_bytes() == text


def test_a_failed_rescue_leaves_the_save_to_the_next_start_and_the_swap_back_is_synced(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third save that cannot be moved into .trash stays at the temp name (never removed), the
    folder is fsynced after the swap back, the agent's conflict says where that save lies (it
    answered a bare storage error), and the next start keeps it."""
    if replace.RENAME is None:
        pytest.skip("no renameat2 here")
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    inbox = _inbox(inboxes)
    _during_fsync(monkeypatch, _person_saves(first.path, "first save\n"))
    synced: list[str] = []
    saving = os.fsync

    def fsync(fd: int) -> None:
        saving(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    real = replace.exchange
    calls: list[str] = []

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        calls.append(a)
        if len(calls) == 2:
            _person_saves(first.path, "second save\n")()
        done = real(dir_fd, a, b)
        if len(calls) == 2:
            synced.append("swapped back")
        return done

    def no_trash(*_a: Any) -> str:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(replace, "exchange", exchange)
    monkeypatch.setattr(Inboxes, "_rescue", no_trash)
    with pytest.raises(MemoryConflictError, match="saved twice") as raced:
        inboxes.write("claude", "n", "agent text", None, must_exist=False)
    monkeypatch.undo()
    assert str(inbox) in synced[synced.index("swapped back") :]
    assert first.path.read_text(encoding="utf-8") == "first save\n"
    (left,) = [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
    assert left.read_text(encoding="utf-8") == "second save\n"
    assert f"the later one could not be moved into .trash and lies in {left} " in str(raced.value)
    Inboxes(inboxes.cfg).clean_temp()
    assert not [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
    assert "second save\n" in [p.read_text(encoding="utf-8") for p in (inbox / ".trash").iterdir()]


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_an_editor_still_writing_into_the_replaced_note_writes_into_trash(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """An in-place save that stalls (part written, then still long enough to be read as a whole
    text): the file replaced was removed, and the rest of the editor's write went into it, lost.
    Now that file is the previous text kept in .trash: the rest lands there."""
    _without(monkeypatch, path)
    first = inboxes.write("claude", "n", "original agent text", None, must_exist=False)
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    with open(first.path, "w", encoding="utf-8") as editor:
        editor.write("PERSON first half, ")
        editor.flush()
        done = inboxes.write("claude", "n", "agent update", None, must_exist=False)
        editor.write("PERSON SECOND HALF\n")
    assert done.previous is not None
    assert done.previous.read_text(encoding="utf-8") == "PERSON first half, PERSON SECOND HALF\n"
    trash = _inbox(inboxes) / ".trash"
    assert [p.name for p in trash.iterdir()] == [done.previous.name]  # no link or copy left
    assert inboxes.usage("claude")["trash_files"] == 1


def test_a_sandbox_refusing_renameat2_with_eperm_falls_back(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seccomp filter whose default action is EPERM (older container profiles) made every
    replace and every new note fail with a storage error; now the hard-link fallback is used."""

    def seccomp(*_a: Any) -> int:
        ctypes.set_errno(errno.EPERM)
        return -1

    monkeypatch.setattr(replace, "RENAME", (seccomp, 2, 1))
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    done = inboxes.write("claude", "n", "v2", None, must_exist=False)
    assert "v2" in first.path.read_text(encoding="utf-8")
    assert done.previous is not None and "v1" in done.previous.read_text(encoding="utf-8")


def test_the_recent_change_rule_goes_by_ctime_and_not_by_times_ahead(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty note whose mtime lies ahead (a sync tool keeping another machine's time, a
    ``touch -d``) was "being saved" for ever; so was one whose ctime is ahead of the folder's
    clock (that clock stepped back). Neither is a save under way an hour later."""
    first = inboxes.write("claude", "n", "text", None, must_exist=False)
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first.path.write_bytes(b"")
    future = time.time_ns() + 86400 * 10**9
    os.utime(first.path, ns=(future, future))
    with monkeypatch.context() as later:
        _an_hour_later(later)
        inboxes.write("claude", "n", "agent update", None, must_exist=False)
    assert "agent update" in first.path.read_text(encoding="utf-8")
    first.path.write_bytes(b"")
    real = inbox_mod.reference_ns
    monkeypatch.setattr(inbox_mod, "reference_ns", lambda fd, name: real(fd, name) - 3600 * 10**9)
    inboxes.write("claude", "n", "agent again", None, must_exist=False)
    assert "agent again" in first.path.read_text(encoding="utf-8")


@pytest.mark.parametrize("skew_s", [3600, 3, -3, -3600])
def test_a_note_emptied_on_a_share_whose_clock_is_off_is_still_being_saved(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    """On an SMB/NFS share a note's ctime comes from the server's clock. This machine's clock
    more than 2 s ahead of it made a note emptied a moment ago look old, one behind it made it
    look ahead: either way the guard was off and the note replaced, the editor's save lost.
    Judged against a file made in the same folder (the server's clock), it is still being saved;
    the folder's clock an hour on, it is not."""
    first = inboxes.write("claude", "n", "text", None, must_exist=False)
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    monkeypatch.setattr(inbox_mod, "now_ns", lambda: time.time_ns() + skew_s * 10**9)  # this machine's
    first.path.write_bytes(b"")  # an editor between its truncate and its write
    with pytest.raises(MemoryBeingSavedError):
        inboxes.write("claude", "n", "agent update", None, must_exist=False)
    assert first.path.read_bytes() == b""
    assert not [p for p in _inbox(inboxes).iterdir() if p.name.endswith(".clock")]  # the probe went
    _an_hour_later(monkeypatch)
    inboxes.write("claude", "n", "agent update", None, must_exist=False)
    assert "agent update" in first.path.read_text(encoding="utf-8")


def _on_hold(monkeypatch: pytest.MonkeyPatch, act: Callable[[], object]) -> list[str]:
    """Run ``act`` right after the fallback's hard link of the note into .trash is made."""
    real = os.link
    done: list[str] = []

    def link(src: Any, dst: Any, *args: Any, **kw: Any) -> None:
        real(src, dst, *args, **kw)
        if str(dst).startswith(".n--"):
            done.append(str(dst))
            act()

    monkeypatch.setattr(os, "link", link)
    return done


def test_a_prune_while_the_fallback_holds_the_note_is_no_conflict(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback's link had the name of a killed keep's leftover, made outside the ledger's
    lock: a prune running then removed it, and the write answered conflict with nobody else
    changing the note. Now prune leaves it alone."""
    _no_exchange(monkeypatch)
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    held = _on_hold(monkeypatch, inboxes.prune_trash)
    done = inboxes.write("claude", "n", "v2", None, must_exist=False)
    assert held and "v2" in first.path.read_text(encoding="utf-8")
    assert done.previous is not None and "v1" in done.previous.read_text(encoding="utf-8")


def test_a_save_renamed_over_the_note_after_the_fallbacks_link_is_kept(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the exchange: a save renamed over the note after its hard link into .trash (the
    link still holds the text read) is seen right before the rename; the write fails, the save
    is the note, and the link kept nothing."""
    _no_exchange(monkeypatch)
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    held = _on_hold(monkeypatch, _person_saves(first.path, "PERSON SAVE after the link\n"))
    with pytest.raises(MemoryConflictError, match="changed by someone else"):
        inboxes.write("claude", "n", "agent v2", None, must_exist=False)
    monkeypatch.undo()
    assert held and first.path.read_text(encoding="utf-8") == "PERSON SAVE after the link\n"
    assert list((_inbox(inboxes) / ".trash").iterdir()) == []


def _kept_texts(inboxes: Inboxes) -> list[str]:
    trash = _inbox(inboxes) / ".trash"
    return [p.read_text(encoding="utf-8") for p in sorted(trash.iterdir()) if not p.name.startswith(".")]


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_a_file_replaced_with_no_text_to_keep_is_still_kept_for_an_editor_writing_into_it(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A rewrite that changes only the 'updated' stamp, and an empty note replaced after 2 s,
    keep no previous text; the file they replaced was removed, so an editor's late write into
    it was lost. Now it is kept in .trash, and the editor's text lands there."""
    _without(monkeypatch, path)
    first = inboxes.write("claude", "n", "same text", None, must_exist=False)
    with open(first.path, "r+", encoding="utf-8") as editor:
        again = inboxes.write("claude", "n", "same text", None, must_exist=False)
        editor.write("PERSON LATE WRITE\n")
    assert again.previous is None  # nothing but the stamp changed: no previous is named
    assert any(t.startswith("PERSON LATE WRITE\n") for t in _kept_texts(inboxes))
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first.path.write_bytes(b"")
    _an_hour_later(monkeypatch)
    with open(first.path, "r+", encoding="utf-8") as editor:
        done = inboxes.write("claude", "n", "agent update", None, must_exist=False)
        editor.write("PERSON AFTER EMPTY\n")
    assert done.previous is None and "agent update" in first.path.read_text(encoding="utf-8")
    # The empty file waits under a hidden name (no kept text of 0 bytes); the next start keeps
    # what was written into it.
    assert "PERSON AFTER EMPTY\n" not in _kept_texts(inboxes)
    assert "PERSON AFTER EMPTY\n" in _everything(_inbox(inboxes) / ".trash")
    assert inboxes.usage("claude")["trash_files"] == 1
    assert Inboxes(inboxes.cfg).clean_temp() == 1
    assert "PERSON AFTER EMPTY\n" in _kept_texts(inboxes)


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_a_file_replaced_that_trash_cannot_take_is_left_and_kept_at_the_next_start(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """.trash refusing the file replaced (an I/O error): it was removed with a warning. Now it
    is left under its hidden temp name (the fallback's link in .trash), which the indexer skips;
    the next start or daily prune keeps it in .trash with what was written into it."""
    _without(monkeypatch, path)
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    real = inbox_mod.Trash.change

    def change(self: Any, trash_fd: int, name: str, sign: int, act: Any) -> None:
        if sign == 0:  # the file replaced taking its copy's place
            raise OSError(errno.EIO, "Input/output error")
        real(self, trash_fd, name, sign, act)

    monkeypatch.setattr(inbox_mod.Trash, "change", change)
    with open(first.path, "r+", encoding="utf-8") as editor:
        done = inboxes.write("claude", "n", "v2", None, must_exist=False)
        editor.write("PERSON LATE WRITE\n")
    monkeypatch.undo()
    assert "v2" in first.path.read_text(encoding="utf-8")
    inbox = _inbox(inboxes)
    left = [p for p in inbox.rglob(".n*") if p.name.endswith((".tmp", ".held"))]
    assert len(left) == 1 and left[0].read_text(encoding="utf-8").startswith("PERSON LATE WRITE\n")
    assert (left[0].parent == inbox) == (path == "exchange")
    inboxes.prune_trash()
    assert not left[0].exists()
    assert Inboxes(inboxes.cfg).clean_temp() == 0
    assert any(t.startswith("PERSON LATE WRITE\n") for t in _kept_texts(inboxes))
    assert done.previous is not None and done.previous.exists()


def test_a_save_that_cannot_be_put_back_stays_and_the_error_says_where(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap back failing (its exchange and the rename after it refused): the person's save
    lies at the temp name, the note holds the agent's text, and the error said nothing of where
    the save is ("the inbox is unchanged"). Now ``storage`` names the file, the save is never
    removed, and the next start keeps it in .trash."""
    if replace.RENAME is None:
        pytest.skip("no renameat2 here")
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    inbox = _inbox(inboxes)
    _during_fsync(monkeypatch, _person_saves(first.path, "PERSON SAVE\n"))
    real_exchange, real_replace = replace.exchange, os.replace
    calls: list[str] = []

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        calls.append(a)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_exchange(dir_fd, a, b)

    def put_back(src: Any, dst: Any, **kw: Any) -> None:
        if _TEMP.match(str(src)) and dst == "n.md":
            raise OSError(errno.EIO, "Input/output error")
        real_replace(src, dst, **kw)

    monkeypatch.setattr(replace, "exchange", exchange)
    monkeypatch.setattr(os, "replace", put_back)
    with pytest.raises(StorageError, match="could not be put back") as failed:
        inboxes.write("claude", "n", "agent text", None, must_exist=False)
    monkeypatch.undo()
    assert "agent text" in first.path.read_text(encoding="utf-8")
    (left,) = [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
    assert left.read_text(encoding="utf-8") == "PERSON SAVE\n"
    assert f"their save lies in {left} " in str(failed.value)
    Inboxes(inboxes.cfg).clean_temp()
    assert "PERSON SAVE\n" in _kept_texts(inboxes)


def test_the_macos_branch_loads_renameatx_np_with_its_swap_and_excl_flags(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS cannot run here: its C library is stubbed by one whose ``renameatx_np`` accepts only
    RENAME_SWAP (0x2) and RENAME_EXCL (0x4) of <stdio.h> and does what they mean through Linux's
    renameat2; the selection, the argument types and the flags the writes pass are the real code's."""
    if replace.RENAME is None:
        pytest.skip("no renameat2 here to stand in for renameatx_np")
    linux, exchange, noreplace = replace.RENAME
    seen: list[int] = []

    def renameatx_np(src_fd: int, src: bytes, dst_fd: int, dst: bytes, flags: int) -> int:
        seen.append(flags)
        if flags not in (0x2, 0x4):  # RENAME_SWAP, RENAME_EXCL
            ctypes.set_errno(errno.EINVAL)
            return -1
        return int(linux(src_fd, src, dst_fd, dst, exchange if flags == 0x2 else noreplace))

    class Libc:
        symbol = staticmethod(renameatx_np)

        def __init__(self, name: None, *, use_errno: bool) -> None:
            assert name is None and use_errno

        def __getattr__(self, name: str) -> Any:
            if name == "renameatx_np" and "symbol" in vars(Libc):
                return Libc.symbol
            raise AttributeError(name)

    monkeypatch.setattr(replace.sys, "platform", "darwin")
    monkeypatch.setattr(replace.ctypes, "CDLL", Libc)
    loaded = replace._load()
    assert loaded is not None and loaded[1:] == (0x2, 0x4)
    assert loaded[0].argtypes == [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    assert loaded[0].restype is ctypes.c_int
    monkeypatch.setattr(replace, "RENAME", loaded)
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    assert seen == [0x4]  # a new note: put in place only if none appeared
    done = inboxes.write("claude", "n", "v2", None, must_exist=False)
    assert seen == [0x4, 0x2]  # a replacement: the swap
    assert "v2" in first.path.read_text(encoding="utf-8")
    assert done.previous is not None and "v1" in done.previous.read_text(encoding="utf-8")
    # A save landing meanwhile is swapped back with the same flag, and kept.
    _during_fsync(monkeypatch, _person_saves(first.path, "PERSON SAVE\n"))
    with pytest.raises(MemoryConflictError):
        inboxes.write("claude", "n", "agent v3", None, must_exist=False)
    assert seen == [0x4, 0x2, 0x2, 0x2]
    assert first.path.read_text(encoding="utf-8") == "PERSON SAVE\n"
    # Without the symbol (an old macOS): the fallback.
    del Libc.symbol
    assert replace._load() is None


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_stamp_only_rewrites_keep_one_copy_and_push_no_kept_text_out(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Each rewrite changing only 'updated' kept the file it replaced in .trash, counted against
    the caps: an agent re-saving an unchanged note pushed a deleted note's only copy out. Now a
    note has at most one such copy: the next takes its place while no one wrote into it."""
    _without(monkeypatch, path)
    inboxes = Inboxes(make_cfg(vault, **{"memory.maxTrashFiles": 5, "memory.maxTrashBytes": 0}))
    inboxes.write("claude", "precious", "the person's only copy", None, must_exist=False)
    assert inboxes.delete("claude", "precious") is not None
    dropped: list[str] = []
    for _ in range(8):
        w = inboxes.write("claude", "status", "all quiet", None, must_exist=False)
        assert w.previous is None
        dropped += w.trash_dropped
    trash = _inbox(inboxes) / ".trash"
    kept = sorted(p.name for p in trash.glob("*.md"))
    assert dropped == [] and [n.split("--")[0] for n in kept] == ["precious", "status"]
    assert inboxes.usage("claude")["trash_files"] == 2
    # A copy an editor wrote into since is a kept text like any other: the next one is added.
    status = next(trash.glob("status--*.md"))
    with open(status, "a", encoding="utf-8") as editor:
        editor.write("PERSON LATE WRITE\n")
    inboxes.write("claude", "status", "all quiet", None, must_exist=False)
    assert status.exists() and len(list(trash.glob("status--*.md"))) == 2


@pytest.mark.parametrize("path", ["exchange", "fallback"])
def test_stamp_only_rewrites_keep_one_copy_across_restarts(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Which copy was a note's stamp-only copy was known in memory only: each restart left one
    more in .trash. Now .trash itself says so, and the daily prune drops what names a copy gone."""
    _without(monkeypatch, path)
    for _ in range(4):
        inboxes = Inboxes(inboxes.cfg)  # a restart between each
        inboxes.write("claude", "status", "all quiet", None, must_exist=False)
    trash = _inbox(inboxes) / ".trash"
    assert len(list(trash.glob("status--*.md"))) == 1
    for copy in trash.glob("status--*.md"):
        copy.unlink()  # removed by the user (or aged out)
    assert inboxes.prune_trash() == 0
    assert list(trash.iterdir()) == []


def test_without_links_the_file_replaced_is_kept_for_an_editor_writing_into_it(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the exchange and without hard links the write's rename over the note removed the
    file replaced: an editor's late in-place write into it was lost. Now the note is moved into
    .trash first and checked there; the late write lands in the kept text."""
    _no_links(monkeypatch)
    first = inboxes.write("claude", "n", "same", None, must_exist=False)
    with open(first.path, "r+", encoding="utf-8") as editor:
        done = inboxes.write("claude", "n", "v2", None, must_exist=False)
        editor.write("PERSON LATE WRITE\n")
    assert "v2" in first.path.read_text(encoding="utf-8")
    assert done.previous is not None
    assert done.previous.read_text(encoding="utf-8").startswith("PERSON LATE WRITE\n")
    assert [p.name for p in (_inbox(inboxes) / ".trash").iterdir()] == [done.previous.name]


def test_without_links_a_save_found_in_trash_goes_back_to_the_note(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note moved into .trash is not the text read (a save landed between the read and the
    move): it goes back in the note's place, and the agent gets conflict."""
    _no_links(monkeypatch)
    first = inboxes.write("claude", "n", "agent text", None, must_exist=False)
    real = os.rename

    def rename(src: Any, dst: Any, **kw: Any) -> None:
        if src == "n.md" and kw.get("src_dir_fd") is not None and str(dst).endswith(".held"):
            first.path.write_text("PERSON SAVE\n", encoding="utf-8")  # just before the move
        real(src, dst, **kw)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(MemoryConflictError):
        inboxes.write("claude", "n", "v2", None, must_exist=False)
    assert first.path.read_text(encoding="utf-8") == "PERSON SAVE\n"
    assert not [p for p in (_inbox(inboxes) / ".trash").iterdir() if p.name.endswith(".held")]


@pytest.mark.parametrize("path", ["exchange", "fallback", "no_links"])
def test_an_empty_note_replaced_or_an_empty_leftover_is_no_kept_text(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """An empty note replaced, and an empty leftover of a write killed before its first byte,
    became 0-byte kept texts, the note's newest: now neither is a kept text; the empty file
    replaced waits under a hidden name and the next start removes it, unchanged and settled."""
    _without(monkeypatch, path)
    inboxes.write("claude", "n", "v1", None, must_exist=False)
    inboxes.write("claude", "n", "v2", None, must_exist=False)
    note = _inbox(inboxes) / "n.md"
    note.write_bytes(b"")
    _an_hour_later(monkeypatch)
    done = inboxes.write("claude", "n", "v3", None, must_exist=False)
    assert done.previous is None
    trash = _inbox(inboxes) / ".trash"
    kept = sorted(trash.glob("n--*.md"))
    assert [p.read_bytes() != b"" for p in kept] == [True]  # v1 only: v2 the person emptied
    (_inbox(inboxes) / ".n.0000f00d.tmp").write_bytes(b"")  # killed before its first byte
    Inboxes(inboxes.cfg).clean_temp()
    assert sorted(trash.glob("n--*.md")) == kept
    assert len(list(trash.glob(".n--*.held"))) == 2  # waiting for an editor's late write
    _days_later(monkeypatch, inboxes.cfg.memory.trash_days)
    Inboxes(inboxes.cfg).clean_temp()
    assert sorted(trash.glob("n--*.md")) == kept
    assert sorted(p.name for p in _inbox(inboxes).rglob(".n*")) == []


def _days_later(monkeypatch: pytest.MonkeyPatch, days: int) -> None:
    """The folder's clock ``days`` on (and a second)."""
    real = inbox_mod.reference_ns
    monkeypatch.setattr(
        inbox_mod, "reference_ns", lambda fd, name: real(fd, name) + (days * 86_400 + 1) * 10**9
    )


def _emptied_an_hour_ago(inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch) -> Written:
    """A note written, then emptied by an editor (between its truncate and its write) an hour
    before now by the folder's clock, with no pause for a save under way."""
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first = inboxes.write("claude", "n", "v1", None, must_exist=False)
    first.path.write_bytes(b"")
    _an_hour_later(monkeypatch)
    return first


@pytest.mark.parametrize("path", ["exchange", "fallback", "no_links"])
def test_an_empty_file_replaced_waits_past_restarts_for_an_editor_writing_into_it(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """An empty note replaced waits in .trash; a start more than 2 s later removed it, so an
    editor writing into its file after that start lost the save. Now it waits as long as a kept
    text stays (memory.trashDays), and the start after the editor's write keeps the text."""
    _without(monkeypatch, path)
    first = _emptied_an_hour_ago(inboxes, monkeypatch)
    with open(first.path, "r+", encoding="utf-8") as editor:
        inboxes.write("claude", "n", "agent update", None, must_exist=False)
        assert Inboxes(inboxes.cfg).clean_temp() == 0  # a restart: the empty file waits
        editor.write("PERSON LATE WRITE\n")
    assert Inboxes(inboxes.cfg).clean_temp() == 1
    assert "PERSON LATE WRITE\n" in _kept_texts(inboxes)


def test_the_daily_prune_removes_an_empty_file_waiting_past_trash_days(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon never restarted gathered the empty files replaced for good: the daily prune
    removes them too once unchanged for memory.trashDays, and not before."""
    _emptied_an_hour_ago(inboxes, monkeypatch)
    inboxes.write("claude", "n", "agent update", None, must_exist=False)
    held = _inbox(inboxes) / ".trash"
    inboxes.prune_trash()
    assert len(list(held.glob(".n--*.held"))) == 1
    _days_later(monkeypatch, inboxes.cfg.memory.trash_days)
    inboxes.prune_trash()
    assert not list(held.glob(".n--*.held"))


def test_an_empty_file_written_into_while_it_is_removed_is_kept(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty file past memory.trashDays is removed; a write landing between the look and
    the removal is read back through the descriptor still open and kept as a text."""
    first = _emptied_an_hour_ago(inboxes, monkeypatch)
    with open(first.path, "r+", encoding="utf-8") as editor:
        inboxes.write("claude", "n", "agent update", None, must_exist=False)
        real = os.unlink

        def unlink(name: Any, *args: Any, **kw: Any) -> None:
            if str(name).endswith(".held"):
                editor.write("PERSON DURING REMOVAL\n")
                editor.flush()
            real(name, *args, **kw)

        _days_later(monkeypatch, inboxes.cfg.memory.trash_days)
        monkeypatch.setattr(os, "unlink", unlink)
        assert Inboxes(inboxes.cfg).clean_temp() == 1
    monkeypatch.setattr(os, "unlink", real)
    assert "PERSON DURING REMOVAL\n" in _kept_texts(inboxes)
    assert not list((_inbox(inboxes) / ".trash").glob(".n--*.held"))


def test_a_stamp_marker_that_cannot_be_written_fails_no_write(inboxes: Inboxes) -> None:
    """The marker naming a note's stamp-only copy is housekeeping: one that cannot be written
    (a folder in its place) leaves one more kept text, and the write is made."""
    inboxes.write("claude", "status", "all quiet", None, must_exist=False)
    (_inbox(inboxes) / ".trash").mkdir(exist_ok=True)
    (_inbox(inboxes) / ".trash" / ".status.stamp").mkdir()
    for _ in range(2):
        done = inboxes.write("claude", "status", "all quiet", None, must_exist=False)
        assert "all quiet" in done.path.read_text(encoding="utf-8")
    assert len(list((_inbox(inboxes) / ".trash").glob("status--*.md"))) == 2


def test_a_stamp_only_copy_of_another_text_is_never_replaced(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note saved twice unchanged (its stamp-only copy holds A), then edited by a person to B
    after a restart, then saved unchanged again: the new stamp-only copy holds B, and the one of
    A (its only copy) stays."""
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first = inboxes.write("claude", "status", "TEXT A", None, must_exist=False)
    inboxes.write("claude", "status", "TEXT A", None, must_exist=False)  # stamp-only: copy of A
    assert any("TEXT A" in t for t in _kept_texts(inboxes))
    inboxes = Inboxes(inboxes.cfg)  # a restart
    p = first.path
    p.write_text(p.read_text(encoding="utf-8").replace("TEXT A", "TEXT B"), encoding="utf-8")
    _an_hour_later(monkeypatch)
    inboxes.write("claude", "status", "TEXT B", None, must_exist=False)
    texts = _kept_texts(inboxes)
    assert any("TEXT A" in t for t in texts), texts
    assert any("TEXT B" in t for t in texts), texts


def test_stamp_only_markers_cost_no_listing_of_trash(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing and removing a note's stamp-only marker is this daemon's own change: the writes
    that follow (edits and stamp-only saves in turn) do not list and stat the whole .trash."""
    from sidecar.memory import trash as trash_mod

    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    for i in range(5):
        inboxes.write("claude", f"other{i}", f"x{i}", None, must_exist=False)
        inboxes.write("claude", f"other{i}", f"y{i}", None, must_exist=False)
    real, scans = trash_mod._scan, []
    monkeypatch.setattr(trash_mod, "_scan", lambda fd: scans.append(1) or real(fd))
    for i in range(6):
        inboxes.write("claude", "status", f"text {i // 2}", None, must_exist=False)
    assert len(scans) <= 1, len(scans)


def test_a_fifo_at_the_stamp_markers_name_never_blocks_a_write(inboxes: Inboxes) -> None:
    """A fifo placed at a note's stamp-only marker name: the stamp-only save goes on (the marker
    is dropped, logged), and never waits for a reader while it holds the agent's ledger lock."""
    import threading

    inboxes.write("claude", "status", "all quiet", None, must_exist=False)
    trash = _inbox(inboxes) / ".trash"
    trash.mkdir(exist_ok=True)
    os.mkfifo(trash / ".status.stamp")
    errors: list[BaseException] = []

    def save() -> None:
        try:
            inboxes.write("claude", "status", "all quiet", None, must_exist=False)
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=save, daemon=True)
    t.start()
    t.join(30)
    hung = t.is_alive()
    if hung:  # unblock it
        fd = os.open(trash / ".status.stamp", os.O_RDONLY | os.O_NONBLOCK)
        t.join(5)
        os.close(fd)
    assert not hung
    assert errors == []
    assert not (trash / ".status.stamp").exists()


def test_the_daily_prune_keeps_an_editors_late_write_into_a_held_file(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor that still holds the empty file a write replaced and saves into it later: the
    daily prune makes that save a kept text, as a start does (a daemon never restarted kept it
    hidden: no kept text, not counted by the caps or the usage)."""
    first = _emptied_an_hour_ago(inboxes, monkeypatch)
    with open(first.path, "r+", encoding="utf-8") as editor:
        inboxes.write("claude", "n", "agent update", None, must_exist=False)
        editor.write("PERSON LATE WRITE\n")
    inboxes.prune_trash()
    assert "PERSON LATE WRITE\n" in _kept_texts(inboxes)
    assert inboxes.usage("claude")["trash_files"] >= 1
    inboxes.prune_trash(now=time.time() + 400 * 86_400)  # aged out like any kept text
    assert "PERSON LATE WRITE\n" not in _kept_texts(inboxes)


def test_stamp_only_copies_whose_bytes_differ_are_two_texts(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stamp-only copies whose bytes differ (a Latin-1 editor: Müller, then Möller) decode to
    the same text with errors=replace: the older copy, the only one of Müller, must stay."""
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first = inboxes.write("claude", "status", "TEXT A", None, must_exist=False)
    p = first.path
    raw = p.read_bytes().replace(b"TEXT A", "Müller".encode("latin-1"))
    p.write_bytes(raw)
    _an_hour_later(monkeypatch)
    seen = "M\ufffdller"  # what the agent reads back (get decodes with replace)
    inboxes.write("claude", "status", seen, None, must_exist=False)  # stamp-only: copy X (Müller)
    kept = [q.read_bytes() for q in (_inbox(inboxes) / ".trash").iterdir() if not q.name.startswith(".")]
    assert any("Müller".encode("latin-1") in b for b in kept), kept
    raw = p.read_bytes().replace(seen.encode(), "Möller".encode("latin-1"))
    p.write_bytes(raw)
    inboxes.write("claude", "status", seen, None, must_exist=False)  # stamp-only again: copy Y (Möller)
    kept = [q.read_bytes() for q in (_inbox(inboxes) / ".trash").iterdir() if not q.name.startswith(".")]
    assert any("Möller".encode("latin-1") in b for b in kept), kept
    assert any("Müller".encode("latin-1") in b for b in kept), kept


def test_a_front_matter_comment_makes_a_stamp_only_copy_another_text(
    inboxes: Inboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's comment in the front matter ('# call Bob'), changed between two stamp-only
    saves to '# call Ann': the copy holding '# call Bob' is its only one and must stay."""
    monkeypatch.setattr(inbox_mod, "pause", lambda _s: None)
    first = inboxes.write("claude", "status", "TEXT A", None, must_exist=False)
    p = first.path
    p.write_text(p.read_text(encoding="utf-8").replace("---\n", "---\n# call Bob\n", 1), encoding="utf-8")
    _an_hour_later(monkeypatch)
    inboxes.write("claude", "status", "TEXT A", None, must_exist=False)  # stamp-only: copy X (Bob)
    assert any("call Bob" in t for t in _kept_texts(inboxes))
    p.write_text(p.read_text(encoding="utf-8").replace("---\n", "---\n# call Ann\n", 1), encoding="utf-8")
    inboxes.write("claude", "status", "TEXT A", None, must_exist=False)  # copy Y (Ann)
    texts = _kept_texts(inboxes)
    assert any("call Ann" in t for t in texts), texts
    assert any("call Bob" in t for t in texts), texts
