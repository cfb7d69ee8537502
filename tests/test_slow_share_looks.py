"""A request's looks into a share that is slow but answers (each call within
watch.probeTimeoutSeconds, their sum past it): a memory change's look at its inbox and a list's
look-ups of unindexed files bound each call, not the whole; the watch's walk leaves one thread
in a share that hangs, not one per try. The slow calls are stand-ins (a sleep well under the
probe timeout, or a call held until the test lets it go); nothing here measures speed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from sidecar.memory import inbox_files, inbox_notes
from sidecar.vault.sources import Asking, Root
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.watcher import Watcher, bounded_walk
from tests.conftest import write
from tests.share_hangs import SupervisorClock


class _SlowEntry:
    """A folder entry whose stat takes ``delay`` (a note's look-up on a slow share)."""

    def __init__(self, entry: os.DirEntry[str], delay: float) -> None:
        self._entry = entry
        self.name = entry.name
        self._delay = delay

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._entry.is_file(follow_symlinks=follow_symlinks)

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._entry.is_dir(follow_symlinks=follow_symlinks)

    def is_symlink(self) -> bool:
        return self._entry.is_symlink()

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        time.sleep(self._delay)
        return self._entry.stat(follow_symlinks=follow_symlinks)


class _SlowListing:
    def __init__(self, entries: list[os.DirEntry[str]], delay: float) -> None:
        self._entries = [_SlowEntry(e, delay) for e in entries]

    def __enter__(self) -> _SlowListing:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def __iter__(self) -> Any:
        return iter(self._entries)


def test_a_write_to_a_slow_inbox_of_many_notes_is_made(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each note's stat answers in 0.1 s (the probe timeout is 0.5 s), the twelve together take
    longer: the write's look at the inbox's room waits for each, and the note is written (the
    whole look under one deadline refused every write, and marked the inbox hanging)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.5})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    for i in range(12):
        write(inbox / f"note{i}.md", f"# Note {i}\n\nRotate the zeppelin disks, part {i}.\n")
    served.harness.sweep()
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, int):  # the inbox, opened by descriptor
            with real(path) as it:
                return _SlowListing(list(it), 0.1)
        return real(path)

    monkeypatch.setattr(inbox_files.os, "scandir", scandir)
    served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
    assert (inbox / "fresh.md").exists()
    roots = {r["name"]: r for r in served.call("health", {})["roots"]}
    assert not roots["memory/ada"]["error"]


def test_a_write_whose_look_does_not_answer_in_time_is_refused_then_made_once_learnt_slow(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call of the look (opening the inbox's folders) takes longer than the probe timeout:
    the first write is refused with nothing written (a call that does not answer in time is a
    hang). It answered after all: the inbox is learnt slow, and the next writes, whose same call
    takes 0.6 s (probe timeout 0.3 s), wait for it as its scans do and are made."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    real = inbox_notes.private_dirs
    held = threading.Event()

    def private_dirs(*args: Any, **kwargs: Any) -> Any:
        if not held.is_set():
            held.wait(20)  # the first look: answers once the test lets it go
        else:
            time.sleep(0.6)  # slow, and answering
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_notes, "private_dirs", private_dirs)
    with pytest.raises(RemoteError, match="did not answer"):
        served.call("write", {"slug": "fresh0", "content": "# Fresh 0\n\nnew\n"}, agent="ada")
    st = served.harness.supervisor.roots["memory/ada"]
    stuck = st.hanging
    assert stuck is not None  # status says the inbox hangs
    held.set()
    stuck.join(20)
    results = []
    for i in (1, 2):
        served.call("write", {"slug": f"fresh{i}", "content": f"# Fresh {i}\n\nnew\n"}, agent="ada")
        results.append((inbox / f"fresh{i}.md").exists())
    assert results == [True, True]
    assert not (inbox / "fresh0.md").exists()
    assert st.slow and st.hanging is None


def test_writes_beside_a_look_under_way_share_it(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writes to one inbox whose look hangs: one thread goes into the share, and both are
    refused with nothing written (each started its own before the first one's deadline)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 1.0})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    real = inbox_notes.private_dirs
    release = threading.Event()
    asked: list[threading.Thread] = []
    first = threading.Event()

    def private_dirs(*args: Any, **kwargs: Any) -> Any:
        asked.append(threading.current_thread())
        first.set()
        release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_notes, "private_dirs", private_dirs)
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            served.call("write", {"slug": f"fresh{i}", "content": f"# Fresh {i}\n\nnew\n"}, agent="ada")
            errors.append("written")
        except RemoteError as exc:
            errors.append(str(exc))

    try:
        a = threading.Thread(target=one, args=(0,))
        a.start()
        assert first.wait(20)
        b = threading.Thread(target=one, args=(1,))
        b.start()
        a.join(30)
        b.join(30)
        assert len(asked) == 1, asked
        assert len(errors) == 2 and all("did not answer" in e or "hangs" in e for e in errors), errors
        assert not (inbox / "fresh0.md").exists() and not (inbox / "fresh1.md").exists()
    finally:
        release.set()


def test_a_list_with_several_skipped_notes_on_a_slow_share_names_them_all(
    serve_in_process: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six skipped (too large) notes whose look-ups answer in 0.1 s each (the probe timeout is
    0.5 s): the list names all six, and the vault is not marked hanging (their sum under one
    deadline left them all out and took the vault offline)."""
    for i in range(6):
        write(vault / f"Huge{i}.md", "# Huge\n\n" + "words and more words\n" * 200)
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.5, "index.maxFileBytes": 2000})
    real = Path.lstat

    def lstat(self: Path) -> os.stat_result:
        if self.name.startswith("Huge"):
            time.sleep(0.1)  # each look answers, well within the probe timeout
        return real(self)

    monkeypatch.setattr(Path, "lstat", lstat)
    listed = served.call("list", {"source": "vault"}, agent="ada")
    huge = sorted(n["reference"] for n in listed["notes"] if "Huge" in n["reference"])
    roots = {r["name"]: r for r in served.call("health", {})["roots"]}
    assert len(huge) == 6, huge
    assert not roots["vault"]["error"]


def test_the_watchs_walk_of_the_agents_folder_leaves_one_thread_in_a_hung_inbox(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk of the agents folder hangs in one inbox: it is marked hanging, and each later
    walk goes around that agent's folder while its call is still in (one thread left in the
    share, not one per try), the agents folder itself still watched."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    inbox = cfg.agents_dir / "ada" / "memory"
    inbox.mkdir(parents=True)
    sup = Supervisor(cfg)
    sup.status(Root("memory", inbox, agent="ada"))
    release = threading.Event()
    real = os.scandir
    asked: list[Any] = []

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            asked.append(threading.current_thread())
            release.wait(20)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    watcher = Watcher([cfg.agents_dir], lambda *_: None, threading.Event(), 50, 0.2, walk=sup.watched_walk)
    try:
        for _ in range(3):
            walked, answered, flat = watcher._walked([cfg.agents_dir])
            assert answered == [cfg.agents_dir] and flat and inbox not in walked, walked
            assert list(watcher.left_out) == [cfg.agents_dir / "ada"]
        assert len(asked) == 1, asked
        assert sup.roots["memory/ada"].hanging is not None
    finally:
        release.set()


def test_the_watchers_own_walk_is_bounded_as_a_whole(tmp_path: Path) -> None:
    """The watcher's own walk (no supervisor) whose calls each answer but which does not end
    within its whole bound (a scan's, scanTimeoutSeconds) is given up on: NoAnswer, not a wait
    as long as the walk takes."""
    release = threading.Event()

    def walk(asking: Asking) -> Any:
        release.wait(20)  # between calls: no call of it is in (each answered)
        return [], False

    out: list[BaseException] = []

    def run() -> None:
        try:
            bounded_walk(tmp_path, walk, 5.0, {}, 0.3)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    release.set()
    t.join(10)
    assert out and "did not end within 0.3 s" in str(out[0]), out


def test_a_requests_look_neither_beats_for_the_indexer_nor_says_what_indexing_waits_for(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's look at an inbox learnt slow waits several of its waiter's ticks: no heartbeat
    of the indexer is sent from it (a wedged indexer stayed hidden from the watchdog), and the
    call a sweep waits for stays what status says indexing waits for (the look overwrote it,
    then cleared it)."""
    from sidecar.vault import supervisor_base as supervisor_module
    from sidecar.vault.sources import asked

    clock = SupervisorClock()
    monkeypatch.setattr(supervisor_module, "time", clock)
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    beats: list[str] = []
    sup = Supervisor(cfg, beat=lambda: beats.append(threading.current_thread().name))
    inbox = cfg.agents_dir / "ada" / "memory"
    inbox.mkdir(parents=True)
    root = Root("memory", inbox, agent="ada")
    sup.status(root).slow = True
    sweeps = ("vault", "Projects", time.monotonic(), "listing")
    sup.waiting = sweeps  # a sweep waits for a listing of the vault meanwhile
    during: list[Any] = []

    def look(asking: Asking) -> int:
        with asked(asking, "stat", "."):
            ticks = clock.asked
            deadline = time.monotonic() + 20
            while clock.asked < ticks + 3 and time.monotonic() < deadline:  # the waiter's ticks
                time.sleep(0.05)
            during.append(sup.waiting)
        return 1

    assert sup.looked(root, look) == 1
    assert beats == []
    assert during == [sweeps] and sup.waiting == sweeps


def test_a_requests_look_at_a_slow_share_ends_at_its_cap_and_marks_nothing(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inbox learnt slow, one call of the look past a quarter of server.requestTimeoutSeconds
    (30 s of 120 s; scanTimeoutSeconds 600): the look ends there, said as slow, and the inbox is
    neither marked hanging nor unlearnt slow (it waited up to 600 s, past the request's and the
    client's timeouts)."""
    from sidecar.vault import supervisor_base as supervisor_module
    from sidecar.vault.sources import asked
    from sidecar.vault.supervisor import LookCut

    clock = SupervisorClock()
    monkeypatch.setattr(supervisor_module, "time", clock)
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3, "watch.scanTimeoutSeconds": 600})
    sup = Supervisor(cfg)
    inbox = cfg.agents_dir / "ada" / "memory"
    inbox.mkdir(parents=True)
    root = Root("memory", inbox, agent="ada")
    st = sup.status(root)
    st.slow = True
    release = threading.Event()

    def look(asking: Asking) -> int:
        with asked(asking, "stat", "."):
            clock.ahead = 31.0  # past the cap by the supervisor's clock
            release.wait(20)
        return 1

    try:
        with pytest.raises(LookCut, match=r"did not end within 30 s"):
            sup.looked(root, look)
        assert sup.look_cap() == 30
        assert st.slow and st.hanging is None and sup.still_hangs("memory/ada") is None
    finally:
        release.set()


def test_a_write_whose_look_passes_its_cap_is_refused_as_slow_with_nothing_written(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through the daemon: the write is refused (`storage`, the inbox said slow) and
    nothing is written, not answered `timeout` and written minutes later."""
    from sidecar.vault import supervisor_base as supervisor_module

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    served.harness.supervisor.roots["memory/ada"].slow = True  # learnt slow earlier
    clock = SupervisorClock()
    monkeypatch.setattr(supervisor_module, "time", clock)
    real = inbox_notes.private_dirs
    release = threading.Event()

    def private_dirs(*args: Any, **kwargs: Any) -> Any:
        clock.ahead = 31.0  # past the cap (30 s of the 120 s request timeout)
        release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_notes, "private_dirs", private_dirs)
    try:
        with pytest.raises(RemoteError, match="is slow") as err:
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        assert err.value.code == "storage" and "nothing written" in str(err.value)
    finally:
        release.set()
    assert not (inbox / "fresh.md").exists()


def test_a_write_whose_look_is_cut_by_the_stop_says_the_daemon_is_stopping(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's stop ends the wait for the look: the write is told `busy`, the daemon is
    stopping, not that its inbox did not answer."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    sup = served.harness.supervisor
    sup.roots["memory/ada"].slow = True
    real = inbox_notes.private_dirs
    release = threading.Event()

    def private_dirs(*args: Any, **kwargs: Any) -> Any:
        sup.stopping.set()  # the stop begins while the look waits
        release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_notes, "private_dirs", private_dirs)
    try:
        with pytest.raises(RemoteError, match="the daemon is stopping") as err:
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        assert err.value.code == "busy"
    finally:
        release.set()
        sup.stopping.clear()
    assert not (inbox / "fresh.md").exists()


class _CountedEntry(_SlowEntry):
    def __init__(self, entry: os.DirEntry[str], stats: dict[str, int]) -> None:
        super().__init__(entry, 0.0)
        self._stats = stats

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        self._stats[self.name] = self._stats.get(self.name, 0) + 1
        return super().stat(follow_symlinks=follow_symlinks)


def test_a_write_with_an_inbox_limit_stats_each_note_once(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room of the inbox is counted from the write's look (bounded): the write itself does not
    stat every note again (it did, unbounded, on the share the look had just waited for)."""
    served = serve_in_process(**{"memory.maxInboxBytes": 1_000_000})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    stats: dict[str, int] = {}
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, int):  # the inbox, opened by descriptor
            with real(path) as it:
                listing = _SlowListing([], 0.0)
                listing._entries = [_CountedEntry(e, stats) for e in it]
                return listing
        return real(path)

    monkeypatch.setattr(inbox_files.os, "scandir", scandir)
    served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
    assert (inbox / "fresh.md").exists()
    assert stats.get("plan.md") == 1, stats


def test_a_refused_write_to_a_new_agent_leaves_no_root_in_status(serve_in_process: Any) -> None:
    """A write to an agent with no inbox yet, refused (its front matter cannot be read): after a
    sweep, status lists no inbox of it (its look made the root's status before the inbox was)."""
    served = serve_in_process()
    with pytest.raises(RemoteError):
        served.call("write", {"slug": "x", "content": "---\nbad: [\n---\n# X\n"}, agent="zed")
    served.harness.sweep()
    roots = {r["name"] for r in served.call("health", {})["roots"]}
    assert "memory/zed" not in roots
