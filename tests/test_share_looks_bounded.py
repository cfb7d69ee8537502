"""Every call a request makes into a share that may hang is bounded by the one mechanism
(``Supervisor.looked``): read-only mode's looks learn a slow share and end at the stop as the
daemon's do, a memory change's own calls (the temp file, its fsync, the rename; a delete's move
to .trash) end in a clear error with the note whole or untouched, and a folder-by-folder watch's
look at new folders never holds the watcher. The hanging calls are stand-ins (a call held until
the test lets it go); nothing here measures speed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import BusyError, RemoteError, StorageError
from sidecar.contracts.protocol import Request
from sidecar.memory import inbox as inbox_module
from tests.conftest import write


def _read_only(cfg: Any, stop: threading.Event | None = None) -> Any:
    from sidecar.daemon.readonly import InboxOnly, ReadOnly, Refusing, folder_looks

    looks = folder_looks(cfg, stop)
    rule = ReadOnly(cfg.index_dir, cfg.index_dir / "manifest.sqlite", cfg.agents_dir, looks)
    only = InboxOnly(cfg, rule.inboxes_writable, time.time(), looks)
    return Refusing("the index cannot be read: bm25 locked", only)


def _stuck_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_read_only_list_of_an_inbox_that_answered_late_is_waited_for_next_time(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only mode's list of an inbox whose listing does not answer within the probe timeout
    is refused; that listing answers after all, so the share is slow, not hung: the next list,
    whose listing takes as long, waits for it and answers (read-only mode refused a slow inbox's
    every list: it learnt nothing, as the daemon's looks do)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "canoe.md", "# Canoe\n\nThe zeppelin canoe.\n")
    refusing = _read_only(cfg)
    release = threading.Event()
    calls: list[str] = []
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            calls.append("listing")
            if len(calls) == 1:
                release.wait(20)  # held past the probe timeout, then answers
            else:
                threading.Event().wait(1.5)  # as slow, answering past the probe timeout
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    try:
        with pytest.raises(StorageError, match=r"listing \. in .*ops/memory did not answer"):
            refusing.dispatch(Request("list", {}, agent="ops"))
    finally:
        release.set()
    for t in _stuck_threads("probe-memory/ops"):
        t.join(20)
    listed = refusing.dispatch(Request("list", {}, agent="ops"))["notes"]
    assert [n["reference"] for n in listed] == ["memory/canoe"] and len(calls) == 2


def test_read_only_look_ends_at_the_daemons_stop(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon stops while read-only mode's list waits on a hung inbox (probe timeout 60 s):
    the list is told at once that the daemon is stopping, not after the timeout (the stop waited
    for it, up to watch.probeTimeoutSeconds)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 60})
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "canoe.md", "# Canoe\n\nThe zeppelin canoe.\n")
    stop = threading.Event()
    refusing = _read_only(cfg, stop)
    release = threading.Event()
    entered = threading.Event()
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            entered.set()
            release.wait(30)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    outcome: list[BaseException] = []

    def listing() -> None:
        try:
            refusing.dispatch(Request("list", {}, agent="ops"))
        except BaseException as exc:
            outcome.append(exc)

    asker = threading.Thread(target=listing, daemon=True)
    try:
        asker.start()
        assert entered.wait(20)
        stop.set()
        asker.join(10)
        assert not asker.is_alive(), "the list still waits for the share after the stop"
        assert len(outcome) == 1 and isinstance(outcome[0], BusyError), outcome
        assert "the daemon is stopping" in str(outcome[0])
    finally:
        release.set()
        asker.join(30)


def _hold_writes(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> threading.Event:
    """The inbox's atomic write (temp file, fsync, rename) hangs until ``release``; the event
    returned is set once a write is in it."""
    real = inbox_module.write_in
    entered = threading.Event()

    def write_in(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_module, "write_in", write_in)
    return entered


def test_a_memory_write_whose_own_calls_hang_is_answered_and_lands_whole_once_let_go(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox answers the write's look, then hangs in the write itself (the temp file, its
    fsync, the rename): the write is answered within the probe timeout, saying it lands whole or
    not at all; the inbox is said hanging and the next write is refused at once, nothing
    started; once the share answers the note is there whole, no temp file left (the request
    waited as long as the share hung)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    release = threading.Event()
    entered = _hold_writes(monkeypatch, release)
    text = "# Fresh\n\nThe canoe goes in the boathouse.\n"
    try:
        with pytest.raises(
            RemoteError, match=r"not confirmed: writing fresh\.md .*lands whole or not at all"
        ):
            served.call("write", {"slug": "fresh", "content": text}, agent="ada")
        assert entered.is_set()
        st = served.harness.supervisor.roots["memory/ada"]
        assert st.hanging is not None
        entered.clear()
        with pytest.raises(RemoteError, match=r"not written: .*still hangs") as err:
            served.call("write", {"slug": "other", "content": "# Other\n\nx\n"}, agent="ada")
        assert err.value.code == "storage" and not entered.is_set()
    finally:
        release.set()
    assert st._stuck is not None
    st._stuck.join(20)
    assert text.strip() in (inbox / "fresh.md").read_text(encoding="utf-8")
    assert not [p.name for p in inbox.iterdir() if p.name.endswith(".tmp")]
    assert not (inbox / "other.md").exists()


def test_a_memory_delete_whose_move_hangs_in_read_only_mode_is_answered(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only mode (the index cannot be read) saves memory changes in the inbox: a delete
    whose move to .trash hangs is answered within the probe timeout, saying it lands whole or
    not at all, and the note is in .trash once the share answers."""
    from sidecar.memory import inbox_notes

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    inbox = cfg.agents_dir / "ops" / "memory"
    inbox.mkdir(parents=True)
    refusing = _read_only(cfg)
    refusing.dispatch(Request("write", {"slug": "canoe", "content": "# Canoe\n\nx\n"}, agent="ops"))
    assert (inbox / "canoe.md").exists()
    release = threading.Event()
    real = inbox_notes.os.fsync
    ledger_fsync = threading.local()

    def fsync(fd: int) -> None:
        if threading.current_thread().name == "probe-memory/ops" and not getattr(ledger_fsync, "done", False):
            ledger_fsync.done = True
            release.wait(30)
        real(fd)

    monkeypatch.setattr(inbox_notes.os, "fsync", fsync)
    try:
        with pytest.raises(StorageError, match=r"not confirmed: moving to \.trash canoe\.md .*whole or not"):
            refusing.dispatch(Request("delete", {"slug": "canoe"}, agent="ops"))
    finally:
        release.set()
    for t in _stuck_threads("probe-memory/ops"):
        t.join(20)
    assert not (inbox / "canoe.md").exists()
    assert [p.name.split("--")[0] for p in (inbox / ".trash").glob("canoe--*.md")] == ["canoe"]


def test_a_folder_by_folder_watchs_look_at_a_new_folder_that_hangs_keeps_the_other_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watching folder by folder, a new folder whose look-up hangs: the watcher gives up on it
    after the probe timeout and a note written elsewhere still comes as an event (the watcher's
    one thread waited in that look-up for as long as the share hung, every root's events with
    it); once the look-up answers, the new folder is told again for its notes to be swept."""
    from sidecar.vault import watcher as watcher_module
    from sidecar.vault.watcher import Watcher

    root = tmp_path / "vault"
    write(root / "A" / "a.md", "# A\n\nThe zeppelin.\n")
    fresh = root / "New"
    release = threading.Event()
    real = watcher_module._is_real_folder

    def is_real_folder(path: str) -> bool:
        if path == str(fresh):
            release.wait(30)
        return real(path)

    monkeypatch.setattr(watcher_module, "_is_real_folder", is_real_folder)
    seen: set[str] = set()
    changed = threading.Condition()

    def on_change(paths: set[str], _gone: frozenset[str]) -> None:
        with changed:
            seen.update(paths)
            changed.notify_all()

    def comes(path: Path) -> bool:
        with changed:
            return changed.wait_for(lambda: str(path) in seen, 20)

    stop = threading.Event()
    watcher = Watcher([root], on_change, stop, 50, 0.3)
    watcher.flat = True
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        for i in range(40):  # the watch is set up once a note written comes as an event
            write(root / "A" / f"probe{i}.md", "# Probe\n\nx\n")
            with changed:
                if changed.wait_for(lambda i=i: str(root / "A" / f"probe{i}.md") in seen, 0.5):
                    break
        else:
            pytest.fail("the watch never started")
        fresh.mkdir()
        assert comes(fresh)  # its batch is told; the look at the new folder comes next
        write(root / "A" / "b.md", "# B\n\nThe canoe.\n")
        assert comes(root / "A" / "b.md"), "the watcher waits in the new folder's look-up"
        with changed:
            seen.discard(str(fresh))
        release.set()
        assert comes(fresh), "the new folder was not told again once its look-up answered"
    finally:
        release.set()
        stop.set()
        thread.join(10)
