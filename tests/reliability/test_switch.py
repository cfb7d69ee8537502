"""The switch of a read-only start (its index disk full) to writable, driven in this process over real
stores on a small tmpfs (root and mount(2) needed, else skipped): failures in the switch, a disk
that fills again, health during the switch, and a stop during it.

The space check's thread is left out (``_wait_for_space`` is a no-op here): each test calls
``_switch_to_writable`` itself, so nothing depends on its timing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import load_config
from sidecar.contracts.errors import DaemonRunningError, DiskFullError, SidecarError
from sidecar.contracts.protocol import Request
from sidecar.daemon import lifecycle, readonly, readonly_start
from sidecar.daemon.lifecycle import Daemon
from sidecar.daemon.oneshot import index_once
from sidecar.daemon.process import IndexLock
from sidecar.index.indexer import Indexer
from sidecar.stores.space import disk_full_at
from tests.reliability.disks import fill, tmpfs

_WAIT_FOR_SPACE = Daemon._wait_for_space  # the fixture makes it a no-op; one test runs it


class ReadOnlyStart:
    """A daemon started read-only on a full tmpfs, and what the tests ask it."""

    def __init__(self, disk: Path, daemon: Daemon) -> None:
        self.disk, self.d = disk, daemon

    def ask(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        dispatch = self.d._dispatch
        assert dispatch is not None
        return dispatch.dispatch(Request(op, params or {}, agent="ops"))

    def refused(self, op: str, params: dict[str, Any] | None = None) -> SidecarError:
        with pytest.raises(SidecarError) as err:
            self.ask(op, params)
        return err.value

    def free(self) -> None:
        for f in self.disk.glob("filler*.bin"):
            f.unlink()

    def handlers(self) -> str:
        dispatch = self.d._dispatch
        assert dispatch is not None
        return type(dispatch._handlers).__name__

    def workers(self) -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.name in ("indexer", "watcher", "vectors"))


@contextlib.contextmanager
def _started(
    tmp_path: Path, vault: Path, *, agents_disk: bool = False, killed_writer: bool = False
) -> Iterator[ReadOnlyStart]:
    """The daemon started read-only on a full 24 MB tmpfs (its agents folder on a tmpfs of its
    own with room, if ``agents_disk``; after a writer killed with 3 MB of commits in the manifest's
    write-ahead log, if ``killed_writer``)."""
    with contextlib.ExitStack() as stack:
        disk = stack.enter_context(tmpfs(tmp_path / "disk", "24m"))
        run = stack.enter_context(tempfile.TemporaryDirectory(dir="/tmp"))
        if agents_disk:
            stack.enter_context(tmpfs(disk / "home" / "agents", "4m"))
        for i in range(30):
            (vault / "Many").mkdir(exist_ok=True)
            (vault / "Many" / f"n{i}.md").write_text(f"# Note {i}\n\nlighthouse keeper number {i}\n")
        flags = {
            "home": str(disk / "home"),
            "vault.path": str(vault),
            "embedder.enabled": False,
            "socket": str(Path(run) / "s.sock"),
        }
        cfg = load_config(flags=flags, env={})
        (disk / "home" / "agents").mkdir(parents=True, exist_ok=True)
        index_once(cfg, rebuild=False)
        if killed_writer:
            _kill_a_writer(cfg.index_dir / "manifest.sqlite")
        fill(disk)
        d = Daemon(cfg)
        lock = d._lock = IndexLock(cfg.index_dir)
        lock.acquire()
        try:
            d.startup()
            assert d._read_only_parts is not None and d.parts is None
            yield ReadOnlyStart(disk, d)
        finally:
            d.shutdown()
            d.notifier.close()


def _kill_a_writer(manifest: Path) -> None:
    """A writer killed (SIGKILL) with 3 MB committed to the manifest's write-ahead log."""
    code = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('PRAGMA wal_autocheckpoint=0')\n"
        "db.execute(\"INSERT OR REPLACE INTO meta(name, value) VALUES ('batch', ?)\", ('x' * 3000000,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(manifest)], check=False, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert manifest.with_name("manifest.sqlite-wal").stat().st_size > 2_000_000


@pytest.fixture
def read_only_start(tmp_path: Path, vault: Path, monkeypatch: Any) -> Iterator[ReadOnlyStart]:
    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)  # the tests switch themselves
    with _started(tmp_path, vault) as start:
        yield start


def _found(start: ReadOnlyStart) -> bool:
    return bool(start.ask("search", {"query": "lighthouse keeper number 7"})["hits"])


def _kept(start: ReadOnlyStart, monkeypatch: Any) -> Path:
    """A switch whose writable open committed (an interrupted batch redone) and then met a full
    disk again: its writable stores are kept, with those commits in the manifest's write-ahead log
    (returned). ``finish_interrupted`` is the real one again after it."""
    real = Indexer.finish_interrupted

    def redone_then_full(self: Indexer) -> None:
        self.stores.manifest.set_meta("batch", "x" * 3_000_000)  # the batch's commits (in the WAL)
        fill(start.disk)
        raise DiskFullError("the disk filled again during the resume")

    monkeypatch.setattr(Indexer, "finish_interrupted", redone_then_full)
    start.free()
    assert start.d._switch_to_writable() is False
    monkeypatch.setattr(Indexer, "finish_interrupted", real)
    wal = start.d.cfg.index_dir / "manifest.sqlite-wal"
    assert wal.stat().st_size > 2_000_000 and start.handlers() == "Handlers"
    return wal


def test_kept_stores_stay_kept_while_the_space_back_is_less_than_their_write_ahead_log(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """Kept writable stores, and some space back (more than the 1 MB that counts as full, less than
    their 3 MB write-ahead log): the switch closed them without the log written back, the writable
    open failed, and the read-only open refused the log: every request, health included, refused
    at each try. They are closed only once the log is written back; until then the switch fails
    and they keep answering."""
    start = read_only_start
    wal = _kept(start, monkeypatch)
    start.free()
    filler = fill(start.disk)
    os.truncate(filler, filler.stat().st_size - 1_500_000)
    assert not disk_full_at(start.d.cfg.index_dir)  # not full for the space check: it switches
    for _ in range(2):
        assert start.d._switch_to_writable() is False
        assert start.handlers() == "Handlers" and wal.stat().st_size > 2_000_000
        assert start.ask("health")["index"]["files"] > 30 and _found(start)
    start.free()
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)
    assert start.ask("get", {"reference": "vault/Garden"})["text"]


def test_a_retry_does_not_grow_the_manifest_into_space_that_cannot_hold_its_log(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """Kept writable stores and some space back, less than their write-ahead log needs: each
    retry's write-back grew the manifest's file into the freed space and failed, so whatever the
    user freed the space for found the disk full again. The write-back is not tried while the
    file cannot grow by what the log holds; once there is room it is, and the switch succeeds."""
    start = read_only_start
    _kept(start, monkeypatch)
    manifest = start.d.cfg.index_dir / "manifest.sqlite"
    start.free()
    filler = fill(start.disk)
    os.truncate(filler, filler.stat().st_size - 1_500_000)
    size, free = manifest.stat().st_size, os.statvfs(start.disk).f_bfree
    for _ in range(2):
        assert start.d._switch_to_writable() is False
    assert manifest.stat().st_size == size and os.statvfs(start.disk).f_bfree == free
    assert start.handlers() == "Handlers" and _found(start)
    start.free()
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_kept_stores_whose_shm_turned_immutable_say_the_flag_not_the_disk(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """Kept writable stores, room on the disk again, and the manifest's ``-shm`` made immutable
    (a backup tool's flag): the write-back's checkpoint was refused and the switch said "cannot
    be written back into the file yet (not enough space)", so status sent the user to free space
    the disk had. It says the flag and ``chattr -i`` now, the stores stay kept and answering, and
    once the flag is gone the switch succeeds."""
    start = read_only_start
    _kept(start, monkeypatch)
    start.free()
    shm = start.d.cfg.index_dir / "manifest.sqlite-shm"
    if subprocess.run(["chattr", "+i", str(shm)], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot make a file immutable here")
    try:
        assert start.d._switch_to_writable() is False
        health = start.ask("health")
        index = [p["error"] for p in health["problems"]["active"] if p["area"] == "index"]
        assert index and f"{shm} is immutable" in index[0] and "chattr -i" in index[0], index
        assert "space" not in index[0].split("(", 1)[0] and "not enough space" not in index[0], index
        assert health["index"]["immutable"] == str(shm), health["index"]
        assert start.handlers() == "Handlers" and _found(start)
    finally:
        subprocess.run(["chattr", "-i", str(shm)], capture_output=True, check=True)
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_memory_writes_are_refused_at_once_through_kept_stores(
    tmp_path: Path, vault: Path, monkeypatch: Any
) -> None:
    """With kept writable stores and the inboxes on another disk, a memory write went through
    their writable indexer: it waited a minute for a tokenizer never loaded (the clients' own
    timeout), then wrote into the index on the full disk. It is refused (``storage``), nothing
    written, and saved again once the switch succeeds."""
    import sidecar.index.indexer as indexer_module

    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)
    monkeypatch.setattr(indexer_module, "TOKENIZER_WAIT_S", 0.5)  # the old wait, cut short here
    with _started(tmp_path, vault, agents_disk=True) as start:
        _kept(start, monkeypatch)
        err = start.refused("write", {"slug": "plan", "content": "# Plan\n\nRotate the harbour lights.\n"})
        assert err.code == "storage" and "memory writes and rebuilds wait" in str(err)
        assert not list(start.d.cfg.agents_dir.rglob("plan.md"))
        index = [p for p in start.ask("health")["problems"]["active"] if p["area"] == "index"]
        assert "memory writes are saved" not in index[0]["error"]
        start.free()
        assert start.d._switch_to_writable() is True
        start.ask("write", {"slug": "plan", "content": "# Plan\n\nRotate the harbour lights.\n"})


def test_an_unforeseen_failure_of_the_read_only_reopen_leaves_nothing_held(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A failure of a kind outside the storage errors while the index was reopened read-only after a
    failed switch ended the space check with every request held, and health saying a switch was
    under way, for good. Requests are refused (``storage``; health answers a record saying so) until
    the next try, which succeeds."""
    start = read_only_start
    real_finish, real_build = Indexer.finish_interrupted, readonly_start.build_read_only

    def full(self: Indexer) -> None:
        raise DiskFullError("the disk filled again during the resume")

    def broken(*a: Any, **kw: Any) -> Any:
        raise ValueError("simulated unforeseen failure")

    monkeypatch.setattr(Indexer, "finish_interrupted", full)
    monkeypatch.setattr(readonly_start, "build_read_only", broken)
    start.free()
    assert start.d._switch_to_writable() is False
    assert start.handlers() == "Refusing"
    err = start.refused("search", {"query": "harbour"})
    assert err.code == "storage" and "cannot be read now" in str(err)
    health = start.ask("health")  # a record in health's shape, saying so in words
    assert health["index"]["state"] == "refusing" and "cannot be read now" in health["refusing"], health
    monkeypatch.setattr(readonly_start, "build_read_only", real_build)
    fill(start.disk)
    assert start.d._space_check() is False  # still full: read-only again
    assert start.handlers() == "Handlers" and _found(start)
    monkeypatch.setattr(Indexer, "finish_interrupted", real_finish)
    start.free()
    assert start.d._space_check() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_a_start_on_a_full_disk_after_a_kill_reads_the_write_ahead_log(
    tmp_path: Path, vault: Path, monkeypatch: Any
) -> None:
    """A daemon killed with commits in the manifest's write-ahead log (kept writable stores, a kill
    -9) and started again on the full disk exited 5: the read-only open refused the log. It now
    reads the log through its -shm (nothing made, nothing written back) and serves read-only; the
    switch then opens for writing as usual."""
    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)
    with _started(tmp_path, vault, killed_writer=True) as start:
        parts = start.d._read_only_parts
        assert parts is not None and parts.stores.manifest.get_meta("batch") == "x" * 3_000_000
        assert start.handlers() == "Handlers" and _found(start)
        start.free()
        assert start.d._switch_to_writable() is True
        assert start.handlers() == "Handlers" and _found(start)


def test_stores_are_not_kept_while_a_thread_of_the_failed_switch_still_runs(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A thread of a failed switch that did not stop within the cleanup's bound went on writing
    through the writable stores kept for the read-only handlers (onto the full disk), and was
    dropped from the daemon's threads (the stop neither waited for it nor reported it). Then its
    stores were closed under it (a statement of its could keep the closed connection with the
    write lock, failing every later switch). They are neither kept nor closed under it now: the
    read-only handlers open the index anew, the thread stays listed and can still read, the next
    switch waits for it, and its stores are closed once it ends."""
    from sidecar.daemon.indexing import IndexLoop

    start = read_only_start
    hang = threading.Event()
    real_run, real_build = IndexLoop.run, lifecycle.build_scheduler
    after: list[object] = []

    def deaf(self: IndexLoop) -> None:  # ignores the stop until the test lets it go
        hang.wait(60)
        try:
            manifest = self.indexer.stores.manifest
            after.append(manifest.get_meta("batch") == "x" * 3_000_000)
            manifest.set_meta("late", "written by the thread")  # the disk has room by then
        except Exception as exc:  # the old close under it: "Cannot operate on a closed database"
            after.append(exc)

    monkeypatch.setattr(IndexLoop, "run", deaf)
    _disk_fills_during_the_switch(start, monkeypatch)
    start.free()
    try:
        assert start.d._switch_to_writable() is False
        parts = start.d._read_only_parts
        assert parts is not None and parts.stores.manifest.read_only  # not the kept writer
        assert parts.stores.manifest.get_meta("batch") == "x" * 3_000_000
        indexer = [t for t in start.d._threads if t.is_alive() and t.name == "indexer"]
        assert len(indexer) == 1
        assert start.handlers() == "Handlers" and _found(start)
        monkeypatch.setattr(IndexLoop, "run", real_run)
        monkeypatch.setattr(lifecycle, "build_scheduler", real_build)
        start.free()
        assert start.d._switch_to_writable() is False  # waits for the thread
        assert start.d._read_only_parts is parts and _found(start)
    finally:
        hang.set()
    indexer[0].join(10)
    closing = start.d._closing
    assert closing is not None
    closing.join(10)
    assert after == [True]
    # Read as it is (not as an unchanging file: a writer of this process had it open).
    assert parts.stores.manifest.get_meta("late") == "written by the thread"
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)


def _disk_fills_during_the_switch(start: ReadOnlyStart, monkeypatch: Any) -> None:
    """The switch writes 3 MB into the manifest, the disk fills again and the switch fails (at its
    scheduler: after the indexer thread started); the stop waits 0.2 s for each thread."""

    def full(*a: Any, **kw: Any) -> Any:
        start.d.parts.stores.manifest.set_meta("batch", "x" * 3_000_000)  # type: ignore[union-attr]
        fill(start.disk)
        raise DiskFullError("the disk filled again during the resume")

    monkeypatch.setattr(lifecycle, "build_scheduler", full)
    monkeypatch.setattr(lifecycle, "_JOIN_TIMEOUT", 0.2)


def test_a_switch_that_fails_with_the_disk_full_again_keeps_answering(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A switch whose writable open committed (an interrupted batch redone) and then met a full disk
    again left commits in the manifest's write-ahead log, which the read-only open refuses: every
    request, health included, was refused until space was freed. The writable connection is kept
    and the read-only handlers read through it; writes are refused (``storage``)."""
    start = read_only_start
    real = Indexer.finish_interrupted

    def redone_then_full(self: Indexer) -> None:
        self.stores.manifest.set_meta("batch", "x" * 3_000_000)  # the batch's commits (in the WAL)
        fill(start.disk)
        raise DiskFullError("the disk filled again during the resume")

    monkeypatch.setattr(Indexer, "finish_interrupted", redone_then_full)
    start.free()
    assert start.d._switch_to_writable() is False
    wal = start.d.cfg.index_dir / "manifest.sqlite-wal"
    assert wal.stat().st_size > 0  # the commits could not be written back
    health = start.ask("health")
    assert "the disk holding the index is full" in str(health["problems"]["active"])
    assert _found(start)
    assert start.ask("get", {"reference": "vault/Garden"})["text"]
    err = start.refused("write", {"slug": "new", "content": "# New\n\nx\n"})
    assert err.code == "storage" and "the disk holding the index is full" in str(err)
    assert start.workers() == []
    monkeypatch.setattr(Indexer, "finish_interrupted", real)
    start.free()
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)
    start.ask("write", {"slug": "new", "content": "# New\n\nThe disk has room again.\n"})


@pytest.mark.parametrize("where", ["handlers", "scheduler"])
def test_a_switch_that_fails_after_its_first_steps_closes_what_it_opened(
    read_only_start: ReadOnlyStart, monkeypatch: Any, where: str
) -> None:
    """A failure after the switch's guarded indexer steps (the inboxes' folder unreadable, the
    scheduler not starting) left the writable stores open beside the read-only ones, and the
    indexer, watcher and vector threads running: the keyword writer's lock made every later switch
    fail ("in use by another process") and the daemon stayed read-only for good. Everything the
    switch opened or started is closed or stopped; the next try succeeds."""
    start = read_only_start
    failures = [OSError(errno.EIO, "simulated I/O error")]

    def once() -> None:
        if failures:
            raise failures.pop()

    if where == "handlers":
        real_handlers = Daemon._handlers

        def handlers(self: Daemon, *a: Any) -> Any:
            once()
            return real_handlers(self, *a)

        monkeypatch.setattr(Daemon, "_handlers", handlers)
    else:  # after the indexer, vector and watcher threads started
        real_build = lifecycle.build_scheduler

        def build_scheduler(*a: Any, **kw: Any) -> Any:
            once()
            return real_build(*a, **kw)

        monkeypatch.setattr(lifecycle, "build_scheduler", build_scheduler)
    start.free()
    assert start.d._switch_to_writable() is False
    assert start.d.parts is None and start.workers() == []
    health = start.ask("health")
    assert health["index"]["files"] > 30 and _found(start)
    index = [p for p in health["problems"]["active"] if p["area"] == "index"]
    assert "could not be opened for writing (" in index[0]["error"]  # not "the disk ... is full"
    assert start.d._switch_to_writable() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_health_answers_at_once_during_the_switch_and_held_requests_are_bounded(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """health was held for the whole switch (``sidecar status`` gave up after 10 s, the MCP status
    too) and every request up to 60 s, the clients' own timeout: a memory write held that long
    was applied after its client had given up. health now answers at once from the read-only
    handlers' last answer, saying the index is switching; a held request is refused well before
    the clients give up (``storage``, nothing done)."""
    start = read_only_start
    entered, finish = threading.Event(), threading.Event()
    real = Indexer.finish_interrupted

    def slow(self: Indexer) -> None:
        entered.set()
        assert finish.wait(60)
        real(self)

    monkeypatch.setattr(Indexer, "finish_interrupted", slow)
    assert readonly._SWITCH_WAIT <= 20  # well below the clients' 60 s
    monkeypatch.setattr(readonly, "_SWITCH_WAIT", 0.3)
    start.free()
    switch = threading.Thread(target=lambda: switched.append(start.d._switch_to_writable()))
    switched: list[bool] = []
    switch.start()
    try:
        assert entered.wait(60)
        health = start.ask("health")
        index = [p for p in health["problems"]["active"] if p["area"] == "index"]
        assert len(index) == 1 and "switching to writable" in index[0]["error"]
        assert health["index"]["files"] > 30
        err = start.refused("write", {"slug": "held", "content": "# Held\n\nx\n"})
        assert err.code == "storage" and "try again" in str(err)
    finally:
        finish.set()
        switch.join(60)
    assert switched == [True]
    assert not list((start.d.cfg.agents_dir).rglob("held.md"))  # refused: never applied later
    assert "switching" not in str(start.ask("health")["problems"]["active"])


def test_a_stop_during_the_switch_keeps_the_index_locked_and_hands_nothing_on(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A stop during a long switch (a re-cut of every note) released the index lock while the
    switch still ran, and the switch then re-armed the requests with stores opened after the
    stop. The stop now waits for the switch; one still running keeps the lock until the process
    exits, and what the switch opened is closed by it, with nothing handed on."""
    start = read_only_start
    entered, finish = threading.Event(), threading.Event()

    def recut(self: Indexer) -> None:
        entered.set()
        assert finish.wait(60)

    monkeypatch.setattr(Indexer, "reparse_if_chunking_changed", recut)
    monkeypatch.setattr(lifecycle, "_JOIN_TIMEOUT", 0.2)
    start.free()
    switched: list[bool] = []
    switch = threading.Thread(target=lambda: switched.append(start.d._switch_to_writable()))
    switch.start()
    try:
        assert entered.wait(60)
        start.d.shutdown()
        assert start.d.stuck
        other = IndexLock(start.d.cfg.index_dir)
        with pytest.raises(DaemonRunningError):
            other.acquire()
    finally:
        finish.set()
        switch.join(60)
    assert switched == [False]
    assert start.d.parts is None and start.workers() == []
    err = start.refused("health")
    assert err.code == "busy" and "stopping" in str(err)  # as the drain refuses, not a file error
    lock = start.d._lock
    assert lock is not None
    lock.release()  # what the process's exit does
    with contextlib.suppress(Exception):
        other.release()


def test_no_layout_temp_file_is_left_on_a_full_disk(tmp_path: Path) -> None:
    """Recording the keyword index's layout on a full disk left an empty ``.layout.json.tmp`` in
    the index folder; it is removed when the write fails."""
    from sidecar.stores.versions import record_bm25_layout

    with tmpfs(tmp_path / "disk", "1m") as disk:
        folder = disk / "bm25"
        folder.mkdir()
        fill(disk)
        with pytest.raises(OSError, match="No space left") as err:
            record_bm25_layout(folder)
        assert err.value.errno == errno.ENOSPC
        assert sorted(p.name for p in folder.iterdir()) == []


def test_memory_writes_are_saved_while_read_only_when_the_inboxes_are_on_another_disk(
    tmp_path: Path, vault: Path, monkeypatch: Any
) -> None:
    """Memory writes were refused while the index was read-only, also when the agents' inboxes are
    on another disk with room: the write promises the note is kept in its inbox, and the index part
    can wait. It is saved now (``searchable: false``, with why), an edit and a delete too, and the
    catch-up sweep after the switch indexes what is there; indexing itself stays refused."""
    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)
    with _started(tmp_path, vault, agents_disk=True) as start:
        saved = start.ask("write", {"slug": "plan", "content": "# Plan\n\nRotate the harbour lights.\n"})
        assert saved["searchable"] is False and "not searchable yet" in saved["warning"]
        start.ask("write", {"slug": "gone", "content": "# Gone\n\nA note to delete.\n"})
        assert start.ask("delete", {"slug": "gone"})["deleted"] is True
        edited = start.ask("edit", {"slug": "plan", "content": "# Plan\n\nRotate the harbour lanterns.\n"})
        assert edited["action"] == "updated"
        inbox = start.d.cfg.agents_dir / "ops" / "memory"
        assert "lanterns" in (inbox / "plan.md").read_text() and not (inbox / "gone.md").exists()
        err = start.refused("index")
        assert err.code == "storage" and "memory writes are saved in the inboxes" in str(err)
        index = [p for p in start.ask("health")["problems"]["active"] if p["area"] == "index"]
        assert "the disk holding the index is full" in index[0]["error"]
        start.free()
        assert start.d._switch_to_writable() is True
        deadline = time.monotonic() + 60
        while not start.ask("search", {"query": "harbour lanterns"})["hits"]:
            assert time.monotonic() < deadline, "the catch-up sweep did not index the saved note"
            time.sleep(0.1)


def test_memory_writes_are_refused_while_read_only_when_the_inboxes_disk_is_full_too(
    tmp_path: Path, vault: Path, monkeypatch: Any
) -> None:
    """The inboxes on another disk that is full too (or a btrfs subvolume of the index's own full
    disk: another device number, the same space): the index's problem said memory writes were
    saved in the inboxes while each write answered "not written". They are refused with the
    read-only message, which says they wait."""
    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)
    with _started(tmp_path, vault, agents_disk=True) as start:
        agents = start.d.cfg.agents_dir
        fill(agents)
        err = start.refused("write", {"slug": "plan", "content": "# Plan\n\nx\n"})
        assert err.code == "storage" and "memory writes and rebuilds wait" in str(err)
        index = [p for p in start.ask("health")["problems"]["active"] if p["area"] == "index"]
        assert "memory writes are saved" not in index[0]["error"]
        assert not list(agents.rglob("plan.md"))


def test_memory_writes_stay_refused_while_read_only_when_the_inboxes_share_the_full_disk(
    read_only_start: ReadOnlyStart,
) -> None:
    """On the index's own full disk a memory write is refused as before, nothing written."""
    err = read_only_start.refused("write", {"slug": "plan", "content": "# Plan\n\nx\n"})
    assert err.code == "storage" and "memory writes and rebuilds wait" in str(err)
    assert not list(read_only_start.d.cfg.agents_dir.rglob("plan.md"))


def test_failed_switches_start_no_second_count_of_a_hung_inbox_and_keep_its_last_figure(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """Each failed switch to writable (tried every few seconds) built new handlers, and with them
    a new inbox counter: one more stuck count thread of a hung inbox at each try, and the last
    figure forgotten (health's inbox null). The daemon keeps one counter: one stuck thread, and
    health answers the last figure, marked stale."""
    from sidecar.contracts.errors import StorageError
    from sidecar.memory import ops
    from sidecar.memory.inbox import Inboxes

    start = read_only_start
    monkeypatch.setattr(ops, "USAGE_WAIT_S", 0.2)

    def fails(self: Indexer) -> None:
        raise StorageError("the resume failed")  # a switch that fails for another reason

    monkeypatch.setattr(Indexer, "finish_interrupted", fails)
    start.free()
    release, hang = threading.Event(), threading.Event()
    real = Inboxes.usage

    def usage(self: Inboxes, agent: str) -> dict[str, int]:
        if hang.is_set():
            release.wait(60)  # the agents' share stopped answering
        return real(self, agent)

    monkeypatch.setattr(Inboxes, "usage", usage)
    try:
        assert start.ask("health")["inbox"]["notes"] == 0
        earlier = set(threading.enumerate())
        hang.set()
        for _ in range(3):
            before = start.d._dispatch._handlers  # type: ignore[union-attr]
            assert start.d._space_check() is False
            assert start.d._dispatch._handlers is not before  # type: ignore[union-attr]
            inbox = start.ask("health")["inbox"]
            assert inbox is not None and inbox["notes"] == 0 and "hung share" in inbox["stale"]
        assert sum(1 for t in set(threading.enumerate()) - earlier if t.name == "inbox-count") == 1
    finally:
        release.set()


def test_a_switch_waiting_for_a_thread_of_a_failed_one_says_so_and_asks_for_a_restart(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A thread of a failed switch that never ends (a read of a hard-hung share) defers every
    later switch: status and the refused indexing said "the disk holding the index is full: 21.9 MB
    free" with the space freed. They say the switch waits for that thread; past a bound status has
    a problem of its own asking for a restart (the stores are not closed under the thread)."""
    from sidecar.daemon.indexing import IndexLoop

    start = read_only_start
    hang = threading.Event()
    real_run, real_build = IndexLoop.run, lifecycle.build_scheduler

    def deaf(self: IndexLoop) -> None:
        hang.wait(60)

    monkeypatch.setattr(IndexLoop, "run", deaf)
    _disk_fills_during_the_switch(start, monkeypatch)
    start.free()

    def problems() -> dict[str, str]:
        return {p["area"]: p["error"] for p in start.ask("health")["problems"]["active"]}

    try:
        assert start.d._switch_to_writable() is False
        monkeypatch.setattr(IndexLoop, "run", real_run)
        monkeypatch.setattr(lifecycle, "build_scheduler", real_build)
        start.free()
        assert start.d._space_check() is False
        said = problems()
        assert "(indexer) is still running" in said["index"] and "restart the daemon if" in said["index"]
        assert "disk holding the index is full" not in said["index"] and "restart" not in said
        refused = start.refused("index")
        assert "(indexer) is still running" in str(refused)
        # The inbox has room and may be written: a memory write is saved there meanwhile.
        saved = start.ask("write", {"slug": "later", "content": "# Later\n\nafter the space\n"})
        assert saved["searchable"] is False and "indexed once the index can be written" in saved["warning"]
        monkeypatch.setattr(readonly_start, "_CLOSING_STUCK_S", 0.0)
        assert start.d._space_check() is False
        assert "only a restart ends it" in problems()["restart"]
    finally:
        hang.set()
    closing = start.d._closing
    assert closing is not None
    closing.join(10)
    assert start.d._space_check() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_a_write_back_that_waits_for_room_is_not_tried_each_check_and_says_what_it_needs(
    read_only_start: ReadOnlyStart, monkeypatch: Any, caplog: Any
) -> None:
    """Kept writable stores, some space back, less than their log needs: every check (5 s) held
    the requests, rebuilt the read-only handlers and logged index_read_only_still and
    index_read_only again, and status said "the disk holding the index is full: 1.5 MB free".
    The switch is not tried while the write-back waits; status says the space it needs."""
    import logging

    start = read_only_start
    _kept(start, monkeypatch)
    start.free()
    filler = fill(start.disk)
    os.truncate(filler, filler.stat().st_size - 1_500_000)
    caplog.set_level(logging.INFO)
    caplog.clear()
    for _ in range(4):
        assert start.d._space_check() is False
    said = [r.getMessage().split(" ")[0] for r in caplog.records if r.levelno >= logging.WARNING]
    assert said.count("index_read_only") <= 1 and said.count("index_read_only_still") <= 1, said
    index = {p["area"]: p["error"] for p in start.ask("health")["problems"]["active"]}["index"]
    assert "MB needed to write the index's log back" in index, index
    assert start.handlers() == "Handlers" and _found(start)
    start.free()
    assert start.d._space_check() is True
    assert start.handlers() == "Handlers" and _found(start)


def test_the_write_back_is_tried_on_a_full_disk_when_the_file_need_not_grow(tmp_path: Path) -> None:
    """The write-back waited for room even when the manifest's file need not grow (its log only
    rewrites pages it has): the checkpoint then only frees space, and is tried."""
    from sidecar.stores.manifest import Manifest

    with tmpfs(tmp_path / "disk", "8m") as disk:
        manifest = Manifest(disk / "manifest.sqlite")
        try:
            manifest._db.execute("PRAGMA wal_autocheckpoint=0")
            manifest.set_meta("batch", "x" * 1_000_000)
            manifest._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            manifest.set_meta("batch", "y" * 1_000_000)  # the same pages rewritten: in the log
            wal = disk / "manifest.sqlite-wal"
            assert wal.stat().st_size > 1_000_000 and manifest._growth() == 0
            fill(disk)
            assert disk_full_at(disk)
            assert manifest.written_back() is True
            assert wal.stat().st_size == 0
        finally:
            manifest.close()


def _reload_file_excludes(start: ReadOnlyStart, folder: str) -> None:
    """The configuration file, read again by a reload, now excludes ``folder`` (the daemon's other
    settings as started)."""
    cfg = start.d.cfg
    flags = {
        "home": str(cfg.home),
        "vault.path": str(cfg.vault.path),
        "embedder.enabled": False,
        "socket": str(cfg.socket_path),
        "index.exclude": folder,
    }
    start.d.reload_config = lambda: load_config(flags=flags, env={})


def _many_found(start: ReadOnlyStart) -> bool:
    return bool(start.ask("search", {"query": "lighthouse keeper number 7", "minScore": 0})["hits"])


def test_a_reload_asked_while_read_only_builds_the_switch_s_parts_and_is_answered_after_it(
    read_only_start: ReadOnlyStart,
) -> None:
    """A reload asked while read-only waits (status says so, also after a failed switch, whose
    parts have new problems); the switch builds its parts with the file's reloadable settings,
    so its catch-up sweep already leaves the excluded folder out, and the reload is answered
    after it (the problem line gone)."""
    start = read_only_start
    _reload_file_excludes(start, "Many/")
    with pytest.raises(SidecarError) as err:
        start.d.reload()
    assert "applied as soon as the index is writable" in str(err.value)
    waits = "a configuration reload waits until the index is writable again"
    assert {p["area"]: p["error"] for p in start.ask("health")["problems"]["active"]}["config"] == waits
    assert _many_found(start)
    assert start.d._switch_to_writable() is False  # the disk is still full: read-only parts again
    assert {p["area"]: p["error"] for p in start.ask("health")["problems"]["active"]}["config"] == waits
    start.free()
    assert start.d._switch_to_writable() is True
    parts = start.d.parts
    assert parts is not None and parts.indexer.ignore.patterns == ("Many/",)
    start.d._writable_now()
    assert "config" not in {p["area"] for p in start.ask("health")["problems"]["active"]}
    deadline = time.monotonic() + 30
    while _many_found(start) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _many_found(start)
    assert start.d.reload()["changed"] == []  # nothing left to apply


def test_a_reload_during_the_switch_is_carried_not_applied_to_the_parts_it_replaces(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """A reload (SIGHUP is not held with the requests) while the switch builds its parts skipped
    the read-only guard (those parts were already closed), was applied to the retriever about to
    be replaced and answered as applied: lost. It waits like one asked while read-only."""
    start = read_only_start
    answers: list[object] = []
    real = Indexer.finish_interrupted

    def reload_meanwhile(self: Indexer) -> None:
        try:
            answers.append(start.d.reload())
        except SidecarError as exc:
            answers.append(exc)
        real(self)

    monkeypatch.setattr(Indexer, "finish_interrupted", reload_meanwhile)
    _reload_file_excludes(start, "Many/")
    start.free()
    assert start.d._switch_to_writable() is True
    assert len(answers) == 1 and isinstance(answers[0], SidecarError)
    start.d._writable_now()
    parts = start.d.parts
    assert parts is not None and parts.indexer.ignore.patterns == ("Many/",)
    assert start.d.reload()["changed"] == []


def test_a_failure_of_the_waiting_reload_does_not_switch_a_second_time(
    read_only_start: ReadOnlyStart, monkeypatch: Any
) -> None:
    """The reload waiting for the switch ran inside the space check's retry: a failure of it other
    than a configuration error (a store's) looked like a failed check, and the next one built the
    parts a second time over the running ones."""
    start = read_only_start
    _reload_file_excludes(start, "Many/")
    with pytest.raises(SidecarError):
        start.d.reload()
    start.free()
    builds: list[int] = []
    real_start = Daemon._start_parts

    def counted(self: Daemon) -> Any:
        builds.append(1)
        return real_start(self)

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("the manifest failed under the reload")

    monkeypatch.setattr(Daemon, "_start_parts", counted)
    monkeypatch.setattr(Daemon, "_reload", broken)
    monkeypatch.setattr(readonly_start.random, "uniform", lambda *_a: 0.001)
    thread = threading.Thread(target=_WAIT_FOR_SPACE, args=(start.d,), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and builds == [1]
    # The daemon serves; the exclusion the waiting reload carried is in force (its notes left at
    # the switch, before any sweep) although the reload itself failed.
    assert start.handlers() == "Handlers" and not _many_found(start)
