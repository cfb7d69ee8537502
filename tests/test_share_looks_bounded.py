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
from sidecar.vault import sources as sources_module
from sidecar.vault import supervisor_base as supervisor_module
from sidecar.vault import timeout as timeout_module
from sidecar.vault.sources import Root
from tests.conftest import write
from tests.share_hangs import SupervisorClock, hang_listing, read_only


def _stuck_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_read_only_list_of_an_inbox_that_answered_late_is_waited_for_next_time(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only mode's list of an inbox whose listing does not answer within the probe timeout
    is refused; that listing answers after all, so the share is slow, not hung: the next list,
    whose listing takes as long, waits for it and answers (read-only mode refused a slow inbox's
    every list: it learnt nothing, as the daemon's looks do)."""
    clock = SupervisorClock()
    # The clock every judge of the call reads: the supervisor's, the calls' start (``Asking``)
    # and the runner's per-call bound (faked on the supervisor's alone, the listing was never
    # judged long, and the test passed whether or not the inbox was learnt slow).
    for module in (supervisor_module, sources_module, timeout_module):
        monkeypatch.setattr(module, "time", clock)
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "canoe.md", "# Canoe\n\nThe zeppelin canoe.\n")
    _rule, refusing = read_only(cfg)
    release = threading.Event()
    calls: list[str] = []
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            calls.append("listing")
            if len(calls) == 1:
                release.wait(20)  # held past the probe timeout, then answers
            else:
                clock.past(1.5)  # as slow: judged by the waiter 1.5 s long, then answers
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
    _rule, refusing = read_only(cfg, stop)
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
            RemoteError, match=r"not confirmed: writing fresh\.md .*\(writing fresh\.md in .*lands whole"
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
    _rule, refusing = read_only(cfg)
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
    from sidecar.vault import watch_walk as watch_walk_module
    from sidecar.vault.watcher import Watcher

    root = tmp_path / "vault"
    write(root / "A" / "a.md", "# A\n\nThe zeppelin.\n")
    fresh = root / "New"
    release = threading.Event()
    real = watch_walk_module._is_real_folder

    def is_real_folder(path: str) -> bool:
        if path == str(fresh):
            release.wait(30)
        return real(path)

    # The batch's look and a new folder's (the watcher reaches it in ``watch_walk``).
    monkeypatch.setattr(watch_walk_module, "_is_real_folder", is_real_folder)
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


def test_a_memory_write_on_a_slow_share_answering_each_call_in_time_lands(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share slow, not hung: each fsync of a write answers in 0.2 s, well within the 0.5 s
    probe timeout, and the write's calls together take longer. Each call is waited for on its
    own: the write answers ``replaced`` and the inbox is neither said hanging nor learnt slow
    (bounded as one call, it was answered "not confirmed … hung share?", the inbox marked
    hanging and then learnt slow for later runs)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.5})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    # One clock for the waiters (the supervisor's and the runner's per-call bound) and for the
    # calls' start (``Asking``), set ahead by each call.
    clock = SupervisorClock()
    for module in (supervisor_module, sources_module, timeout_module):
        monkeypatch.setattr(module, "time", clock)
    real = os.fsync
    calls = []

    def fsync(fd: int) -> None:
        # The slow share: each call answers, 0.2 s later by the clock (a call bounded with the
        # others, as a sum, would have taken 0.6 s and more: the inbox learnt slow, or given up on).
        clock.past(0.2)  # judged so by the waiter before it answers
        real(fd)
        calls.append(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    got = served.call("write", {"slug": "plan", "content": "# Plan\n\nThe new plan.\n"}, agent="ada")
    monkeypatch.setattr(os, "fsync", real)
    assert got["action"] == "replaced"
    assert len(calls) >= 3  # their sum is past the probe timeout
    assert "The new plan." in (inbox / "plan.md").read_text()
    st = served.harness.supervisor.roots.get("memory/ada")
    assert st is None or (not st.hanging and not st.slow)


def test_a_new_folder_on_a_slow_share_is_watched_and_no_note_is_told_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watching folder by folder on a share that is slow, not hung: each look at a new folder
    answers, later than the probe timeout. The answer that came after the watcher stopped
    waiting is used at its next turn, so the folder is watched and a note written in it comes
    as an event (it was asked again each turn, given up on each time, never watched); the notes
    of the same batch are told to the index once (every changed path was kept and told again
    at every turn, without end)."""
    from collections import Counter

    from sidecar.vault import watch_walk as watch_walk_module
    from sidecar.vault import watcher as watcher_module
    from sidecar.vault.watcher import Watcher

    root = tmp_path / "vault"
    write(root / "A" / "a.md", "# A\n\nThe zeppelin.\n")
    fresh = root / "New"
    real = watch_walk_module._is_real_folder
    real_ask = watcher_module._Looks.ask
    gave_up = threading.Event()  # a look that asked about New returned without its answer

    def ask(looks: Any, keys: list[Any]) -> dict[Any, Any]:
        got = real_ask(looks, keys)
        if any(k[1] == str(fresh) and k not in got for k in keys):
            gave_up.set()
        return got

    def is_real_folder(path: str) -> bool:
        if path == str(fresh):
            gave_up.clear()
            gave_up.wait(20)  # the slow share: it answers, each time after the watcher stopped waiting
        return real(path)

    monkeypatch.setattr(watcher_module._Looks, "ask", ask)
    # The batch's look and a new folder's (the watcher reaches it in ``watch_walk``).
    monkeypatch.setattr(watch_walk_module, "_is_real_folder", is_real_folder)
    told: Counter[str] = Counter()
    changed = threading.Condition()

    def on_change(paths: set[str], _gone: frozenset[str]) -> None:
        with changed:
            told.update(paths)
            changed.notify_all()

    def comes(path: Path, wait: float) -> bool:
        with changed:
            return changed.wait_for(lambda: told[str(path)] > 0, wait)

    stop = threading.Event()
    watcher = Watcher([root], on_change, stop, 50, 0.3)
    watcher.flat = True
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        for i in range(40):  # the watch is set up once a note written comes as an event
            write(root / "A" / f"probe{i}.md", "# Probe\n\nx\n")
            if comes(root / "A" / f"probe{i}.md", 0.5):
                break
        else:
            pytest.fail("the watch never started")
        fresh.mkdir()
        for n in range(5):
            write(root / "A" / f"note{n}.md", f"# Note {n}\n\nx\n")
        for k in range(40):  # until the new folder is watched (a turn of the watch is 5 s)
            write(fresh / f"inside{k}.md", "# Inside\n\nx\n")
            if comes(fresh / f"inside{k}.md", 0.5):
                break
        else:
            pytest.fail("a note in the new folder of a slow share never comes as an event")
        with changed:
            notes = {Path(p).name: c for p, c in told.items() if Path(p).name.startswith("note")}
        assert notes == {f"note{n}.md": 1 for n in range(5)}, notes
    finally:
        stop.set()
        thread.join(10)


def test_the_look_at_new_paths_waits_for_each_call_not_their_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many look-ups, each within the probe timeout and their sum far beyond it (a sync tool
    dropping a folder of notes on a share answering in a few ms a stat): all are answered in
    one ask (bounded as a sum, the batch was given up on and asked again at every turn). The
    clock is a stand-in that each look-up moves on."""
    from sidecar.vault import sources as sources_module
    from sidecar.vault import watch_walk as watch_walk_module

    clock = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return clock[0]

    def is_real_folder(path: str) -> bool:
        clock[0] += 0.2  # each call 0.2 s against a timeout of 0.3 s
        return path.endswith("dir")

    monkeypatch.setattr(watch_walk_module, "time", Clock)
    monkeypatch.setattr(sources_module, "time", Clock)  # the calls' start, told by ``Asking``
    monkeypatch.setattr(watch_walk_module, "_is_real_folder", is_real_folder)
    looks = watch_walk_module._Looks(0.3, threading.Event())
    keys = [("real", f"/v/n{i}.md") for i in range(30)] + [("real", "/v/dir")]
    got = looks.ask(keys)
    assert set(got) == set(keys)
    assert [k for k, v in got.items() if v] == [("real", "/v/dir")]


def test_the_agents_folder_watched_around_a_hung_inbox_is_said_partial(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch goes around ada's hung inbox: the folders it covers are bob's, not the whole
    agents folder (status said ada's inbox had file events, and a sweep's finds there were taken
    for lost events); the watcher says why folders are left out (status's problem) and, once
    ada's listing answered, health says her inbox is polled until the watch takes it in again;
    the next watch covers the agents folder whole and the words are withdrawn."""
    from sidecar.vault.supervisor import Supervisor
    from sidecar.vault.watcher import Watcher

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    inboxes = {}
    for agent in ("ada", "bob"):
        inbox = cfg.agents_dir / agent / "memory"
        inbox.mkdir(parents=True)
        inboxes[agent] = inbox
        sup.status(Root("memory", inbox, agent=agent))
    release = threading.Event()
    hang_listing(monkeypatch, inboxes["ada"], release)
    said: list[str | None] = []
    watcher = Watcher([cfg.agents_dir], lambda *_: None, threading.Event(), 50, 0.2, walk=sup.watched_walk)
    watcher.on_left_out = said.append

    def modes() -> dict[str, str]:
        covered = watcher.covered()
        return {
            r["name"]: r["mode"]
            for r in sup.describe(lambda p: any(Path(p).is_relative_to(w) for w in covered))
        }

    try:
        watcher.watching = watcher._walked([cfg.agents_dir])[1]  # as the watch sets it up
        assert watcher.covered() == [cfg.agents_dir / "bob"]
        assert len(said) == 1 and said[0] is not None
        assert f"file events do not cover {cfg.agents_dir / 'ada'}: a call there hangs" in said[0]
    finally:
        release.set()
    for t in [t for t in threading.enumerate() if t.name.startswith("probe-")]:
        t.join(20)
    assert modes() == {"memory/ada": "polling", "memory/bob": "events"}
    watcher.watching = watcher._walked([cfg.agents_dir])[1]
    assert watcher.covered() == [cfg.agents_dir] and said[-1] is None
    assert modes() == {"memory/ada": "events", "memory/bob": "events"}


def test_an_inbox_whose_walk_answers_late_again_and_again_starts_no_loop_of_watches(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ada's inbox is slow: the watch's walk gives up on her listing at the probe timeout and
    leaves her out (the other roots' events are not held behind her), and the first time it
    answers the watch starts again. Left out and answering late again, the watch does not start
    again at once but after a pause that grows (it started again, with a sweep of every root,
    each time her listing answered: a loop for as long as her share stayed slow); walked in
    time, she is no longer late."""
    from sidecar.vault.supervisor import Supervisor
    from sidecar.vault.watcher import Watcher

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    for agent in ("ada", "bob"):
        (cfg.agents_dir / agent / "memory").mkdir(parents=True)
    ada = cfg.agents_dir / "ada" / "memory"
    real = os.scandir
    slow = threading.Event()
    release = threading.Event()

    def scandir(path: Any = ".") -> Any:
        if slow.is_set() and not isinstance(path, int) and Path(path) == ada:
            release.wait(10)  # answers, once the walk gave up on it
        return real(path)

    def walk_left_out() -> None:
        release.clear()
        _walked, answered, _linked = watcher._walked([cfg.agents_dir])
        assert answered == [cfg.agents_dir] and list(watcher.left_out) == [cfg.agents_dir / "ada"]
        release.set()
        watcher.left_out[cfg.agents_dir / "ada"].join(10)

    monkeypatch.setattr(os, "scandir", scandir)
    watcher = Watcher([cfg.agents_dir], lambda *_: None, threading.Event(), 50, 0.2, walk=sup.watched_walk)
    slow.set()
    walk_left_out()
    assert watcher._walk_answered()  # the first late answer: the watch takes her in again
    walk_left_out()
    assert not watcher._walk_answered()  # late again: not at once
    times, last = watcher._late[cfg.agents_dir / "ada"]
    watcher._late[cfg.agents_dir / "ada"] = (times, last - 5.0)  # the pause is over
    assert watcher._walk_answered()
    walk_left_out()
    assert not watcher._walk_answered()
    watcher._late[cfg.agents_dir / "ada"] = (2, time.monotonic() - 5.0)  # 10 s now: not over
    assert not watcher._walk_answered()
    slow.clear()
    release.set()
    watcher._walked([cfg.agents_dir])  # walked in time: no longer late
    assert watcher.left_out == {} and watcher._late == {}


def test_a_change_left_in_one_agents_audit_log_holds_no_other_agents_change(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ada's write hangs in its audit line (her share stops answering after the note is in
    place) and is answered "not confirmed"; bob's write, on a share that answers, is made (one
    lock for every agent's audit log held his write behind hers, which then blamed his inbox)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    folders = {a: served.cfg.agents_dir / a for a in ("ada", "bob")}
    for agent, folder in folders.items():
        write(folder / "memory" / "plan.md", f"# Plan\n\n{agent} rotates the zeppelin disks.\n")
    served.harness.sweep()
    ada_ino = folders["ada"].stat().st_ino
    release = threading.Event()
    real = os.open

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "audit.log" and dir_fd is not None and os.fstat(dir_fd).st_ino == ada_ino:
            release.wait(30)
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_)
    try:
        with pytest.raises(RemoteError, match=r"not confirmed: writing fresh\.md"):
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nada's\n"}, agent="ada")
        made = served.call("write", {"slug": "fresh", "content": "# Fresh\n\nbob's\n"}, agent="bob")
        assert made["reference"] == "memory/fresh" and (folders["bob"] / "memory" / "fresh.md").exists()
        assert served.harness.supervisor.roots["memory/bob"].hanging is None
    finally:
        release.set()
