"""The stop closes the stores while other threads may still be in them (a read it does not wait
for, a memory write given up on, a job past its join): no call ever runs on a closed connection.
A call inside SQLite's own code finishes first (the close is left to its thread), and a call
after the close is refused with a clear "stopping" error. The pauses are SQLite's own trace
callback, which runs inside its step on the calling thread with the connection's mutex held:
only the pause is fake. Before, the close freed the connection under the statement, and the
process died of a segmentation fault."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import BusyError, RemoteError, StorageError, StoresClosedError
from sidecar.contracts.protocol import parse_request
from sidecar.daemon.readonly import Dispatch
from sidecar.memory import inbox as inbox_module
from sidecar.stores import manifest_file
from sidecar.stores.manifest import Manifest, ManifestClosedError
from tests.in_process import InProcessServer

_VIEWS = "FROM chunks c JOIN files f"  # the statement of ``Manifest.views`` (searches, duplicates)
_REPO = Path(__file__).resolve().parent.parent


class InSqlite:
    """Reads on the manifest's reader connections held inside SQLite, once armed, at the first
    statement whose text holds ``pattern``, until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, pattern: str = _VIEWS) -> None:
        self.pattern = pattern
        self.armed, self.entered, self.release = threading.Event(), threading.Event(), threading.Event()
        real = Manifest._open_reader

        def opened(manifest: Manifest) -> Any:
            db = real(manifest)
            if db is not None:
                db.set_trace_callback(self.trace)
            return db

        monkeypatch.setattr(Manifest, "_open_reader", opened)

    def trace(self, sql: str) -> None:
        if self.armed.is_set() and self.pattern in sql and not self.entered.is_set():
            self.entered.set()
            self.release.wait(60)


@contextlib.contextmanager
def _held_inside_sqlite(held: InSqlite, call: Callable[[], None]) -> Iterator[None]:
    """``call`` run on a thread of its own and held inside SQLite (``held``) for the block; let go
    and joined after it."""
    thread = threading.Thread(target=call)
    try:
        held.armed.set()
        thread.start()
        assert held.entered.wait(30)
        yield
    finally:
        held.release.set()
        thread.join(30)


def _manifest_with_a_note(path: Path) -> Manifest:
    from sidecar.stores.manifest_rows import ChunkRecord, FileRecord

    m = Manifest(path)
    record = FileRecord("vault/Boat.md", "vault", "", "Boat.md", 1, 10, "h", "indexed")
    chunk = ChunkRecord(
        "c1", record.key, 0, "The boat needs plugs.", (), 1, 2, "The boat needs plugs.", 5, ""
    )
    with m.transaction() as db:
        m.commit_file(record, [chunk], db)
    return m


def _close_under_a_read(folder: str) -> None:
    """Run in a child process (a segmentation fault must not take the test run with it): a read
    held inside SQLite on a reader while the manifest closes; prints what each side saw."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        held = InSqlite(monkeypatch)
        m = _manifest_with_a_note(Path(folder) / "m.sqlite")
        held.armed.set()
        got: list[Any] = []
        reading = threading.Thread(target=lambda: got.append(sorted(m.views(["c1"]))))
        reading.start()
        assert held.entered.wait(30)
        closing = threading.Thread(target=m.close)
        closing.start()
        closing.join(30)  # before: the close waited for SQLite's mutex, then freed it under the read
        closed_at_once = not closing.is_alive()
        held.release.set()
        reading.join(30)
        closing.join(30)
        try:
            m.views(["c1"])
            after = "answered"
        except ManifestClosedError as exc:
            after = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"closed_at_once": closed_at_once, "read": got, "after": after}))


def test_a_read_inside_sqlite_as_the_manifest_closes_ends_well_and_later_calls_say_stopping(
    tmp_path: Path,
) -> None:
    """The CI crash: the stop closed a reader connection while a memory write's duplicate check
    read through it, and the process died (SIGSEGV). Now the close leaves that reader to its read
    (closed by its thread as it ends), returns at once, the read gets its rows, and a read after
    the close raises the stop's error. Run in a child process: before, it died of signal 11."""
    code = f"from tests.test_stop_closes_stores import _close_under_a_read as run; run({str(tmp_path)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=_REPO, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["closed_at_once"] is True
    assert said["read"] == [["c1"]]
    assert said["after"].startswith("ManifestClosedError: the index is closed (the daemon is stopping)")


def test_the_stops_close_never_waits_for_a_read_inside_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read held inside its statement after its snapshot began (SQLite's progress handler runs
    there; the trace callback above runs before it): the stop's close checkpointed the log with
    TRUNCATE, which waits for that read's snapshot up to the busy timeout (5 s a manifest, past
    the stop's bound). With the busy timeout raised, that wait shows as a close that has not
    ended while the read is held. Now the stop's checkpoint never waits: the close ends, the
    read gets its rows, and the manifest opens again with everything written."""
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()
    real = Manifest._open_reader

    def opened(manifest: Manifest) -> Any:
        db = real(manifest)
        if db is not None:

            def step() -> int:
                if armed.is_set() and not entered.is_set():
                    entered.set()
                    release.wait(60)
                return 0

            db.set_progress_handler(step, 1)
        return db

    monkeypatch.setattr(Manifest, "_open_reader", opened)
    path = tmp_path / "m.sqlite"
    m = _manifest_with_a_note(path)
    for i in range(50):  # frames in the log past the read's snapshot: a checkpoint to wait for
        m.set_meta(f"k{i}", "v" * 100)
    m._db.execute("PRAGMA busy_timeout=600000")
    armed.set()
    got: list[Any] = []
    reading = threading.Thread(target=lambda: got.append(sorted(m.views(["c1"]))))
    reading.start()
    closing = threading.Thread(target=lambda: m.close(stopping=True))
    try:
        assert entered.wait(30)
        closing.start()
        closing.join(30)
        closed_at_once = not closing.is_alive()
    finally:
        release.set()
        reading.join(30)
        closing.join(30)
    assert closed_at_once
    assert got == [["c1"]] and m.closed
    again = Manifest(path)
    try:
        assert again.get_meta("k49") == "v" * 100
    finally:
        again.close()


def test_a_call_after_the_close_is_refused_as_stopping_and_is_an_sqlite_error_too(tmp_path: Path) -> None:
    """Every kind of call on a closed manifest (a read on a reader, a read and a write on the
    writer's connection) raises one error: a StoresClosedError (answered ``busy``) that the
    stores' handlers of SQLite's errors still catch as one (they caught ProgrammingError)."""
    m = _manifest_with_a_note(tmp_path / "m.sqlite")
    m.close()
    assert m.closed
    for call in (lambda: m.views(["c1"]), lambda: m.get_meta("x"), lambda: m.set_meta("x", "1")):
        with pytest.raises(ManifestClosedError) as err:
            call()
        assert isinstance(err.value, StoresClosedError) and isinstance(err.value, sqlite3.Error)
        assert err.value.code == "busy"
    m.close()  # a second close does nothing


def test_a_job_holding_the_writer_past_the_closes_wait_closes_it_itself_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A background job (the daily give-back, a compaction left past its join) inside a
    statement on the writer's connection as the stop closes the manifest: the close waits for it
    only ``CLOSE_WAIT_S`` (a hung disk must not hang the stop; before, it waited without end),
    then hands the close to the job, whose write commits whole and whose thread closes the
    connection as it lets go; the next call says stopping, and a new open finds the write."""
    monkeypatch.setattr(manifest_file, "CLOSE_WAIT_S", 0.0)
    m = _manifest_with_a_note(tmp_path / "m.sqlite")
    entered, release = threading.Event(), threading.Event()

    def trace(sql: str) -> None:
        if "INSERT OR REPLACE INTO meta" in sql and not entered.is_set():
            entered.set()
            release.wait(60)

    m._db.set_trace_callback(trace)
    job = threading.Thread(target=lambda: m.set_meta("given_back", "yes"))
    job.start()
    try:
        assert entered.wait(30)
        closing = threading.Thread(target=lambda: m.close(stopping=True))
        closing.start()
        closing.join(30)
        assert not closing.is_alive()  # handed over, not waited for
        assert "manifest_close_handed" in caplog.text
        assert not m.closed
    finally:
        release.set()
        job.join(30)
    assert m.closed
    with pytest.raises(ManifestClosedError):
        m.get_meta("given_back")
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        m._db.execute("SELECT 1")  # closed by the job's thread
    again = Manifest(tmp_path / "m.sqlite")
    try:
        assert again.get_meta("given_back") == "yes"
    finally:
        again.close()


# --- through the daemon's stop ---------------------------------------------------------------

_SEARCH = b'{"id": 5, "op": "search", "agent": "alice", "params": {"query": "zebrafinch"}}\n'
_NOTE = "Zebrafinch migration notes: the zebrafinch flock leaves the valley in autumn.\n"


def _daemon_over(server: InProcessServer, dispatch: Dispatch) -> Any:
    from sidecar.daemon.compose import Parts
    from sidecar.daemon.lifecycle import Daemon

    h = server.harness
    daemon = Daemon(server.cfg)
    daemon._dispatch = dispatch
    daemon.parts = Parts(h.problems, h.stores, h.vectors, h.supervisor, h.indexer, h.repair)
    return daemon


def test_a_search_inside_sqlite_when_the_stop_closes_the_stores_is_answered_and_the_process_lives(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop does not wait for a read (one hung on a share would hold every stop): it closed
    the stores under a search reading chunk views, and the process died. Now the stop ends
    without waiting for it (its stores closed, the index released), and the search, let go,
    ends: answered, or refused ``busy`` with the stop's words; nothing at ERROR."""
    held = InSqlite(monkeypatch)
    server: InProcessServer = serve_in_process()
    dispatch = Dispatch(server.handlers)
    daemon = _daemon_over(server, dispatch)
    outcome: list[Any] = []

    def search() -> None:
        try:
            outcome.append(dispatch.dispatch(parse_request(_SEARCH)))
        except BusyError as exc:
            outcome.append(exc)

    try:
        with _held_inside_sqlite(held, search):
            server.close()
            stopping = threading.Thread(target=daemon.shutdown)
            stopping.start()
            stopping.join(30)
            assert not stopping.is_alive() and daemon.stopped.is_set()  # not waiting for the read
            assert server.harness.stores.manifest.closed
    finally:
        daemon.notifier.close()
    assert len(outcome) == 1
    if isinstance(outcome[0], BusyError):
        assert "the daemon is stopping" in str(outcome[0])
    else:
        assert "hits" in outcome[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_memory_write_inside_sqlite_when_the_stores_close_is_refused_with_nothing_written(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI crash, through the server: a memory write's duplicate check inside SQLite (chunk
    views) when the stores are closed under it (a write the stop's drain gave up on, closed
    without waiting by a harness or a stuck stop). Now the process lives and the write is refused
    ``busy`` with the stop's words, its note not written (whole or not at all: not at all)."""
    held = InSqlite(monkeypatch)
    server: InProcessServer = serve_in_process()
    note = server.cfg.agents_dir / "alice" / "memory" / "late.md"
    answer: list[Any] = []

    def write() -> None:
        try:
            answer.append(server.call("write", {"slug": "late", "content": _NOTE}, agent="alice"))
        except RemoteError as exc:
            answer.append(exc)

    with _held_inside_sqlite(held, write):
        closing = threading.Thread(target=server.harness.stores.close)
        closing.start()
        closing.join(30)
        assert not closing.is_alive()  # the reader is left to the write's thread
    assert len(answer) == 1 and isinstance(answer[0], RemoteError), answer
    assert answer[0].code == "busy" and "the daemon is stopping" in str(answer[0])
    # Refused before anything was written: "not run", not "cut short" (what a change that wrote
    # before meeting the closed index is told)
    assert "'write' was not run" in str(answer[0]), answer[0]
    assert not note.exists()


def test_memory_changes_after_the_stores_closed_are_refused_busy_with_nothing_changed(
    serve_in_process: Any,
) -> None:
    """A write or a delete that reaches the stores after the stop closed them (one its client
    gave up on, run late by its worker): refused ``busy`` with the stop's words, the inbox as it
    was (a write answered ``internal`` before; a delete moved the note to .trash and left its
    index entry)."""
    server: InProcessServer = serve_in_process()
    inbox = server.cfg.agents_dir / "alice" / "memory"
    server.call("write", {"slug": "kept", "content": _NOTE}, agent="alice")
    before = (inbox / "kept.md").read_bytes()
    server.harness.stores.close()
    for op, params in (("write", {"slug": "late", "content": _NOTE}), ("delete", {"slug": "kept"})):
        with pytest.raises(RemoteError) as err:
            server.call(op, params, agent="alice")
        assert err.value.code == "busy" and "the daemon is stopping" in str(err.value), (op, err.value)
    assert not (inbox / "late.md").exists()
    assert (inbox / "kept.md").read_bytes() == before


def test_a_memory_write_saved_and_indexed_as_the_stores_close_is_answered_saved_not_refused(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stores close after a memory write's note is written and indexed, before its answer
    reads how it can be found: it was answered ``busy`` "nothing was read from or written to",
    and the agent would write again a note it had saved. Now it is answered as saved, with the
    stop's reason why its searchability is not confirmed."""
    server: InProcessServer = serve_in_process()
    note = server.cfg.agents_dir / "alice" / "memory" / "late.md"
    indexer = server.harness.indexer
    real = indexer.index_now

    def index_then_close(*args: Any, **kwargs: Any) -> Any:
        key = real(*args, **kwargs)
        server.harness.stores.close()
        return key

    monkeypatch.setattr(indexer, "index_now", index_then_close)
    answer = server.call("write", {"slug": "late", "content": _NOTE}, agent="alice")
    assert answer["action"] == "created" and answer["searchable"] is False
    assert answer["warning"] == "saved, but not confirmed searchable: the daemon is stopping"
    assert _NOTE in note.read_text(encoding="utf-8")


def test_a_rebuilds_put_back_meeting_the_closed_stores_keeps_the_copy_without_an_error_log(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A rebuild's put-back of the notes it could not read, run as the stop closes the stores:
    the stop's error has no SQLite code and none of its words, so it was judged a copy of another
    version and logged ``rebuild_aside_dropped`` at ERROR (while the drop itself met the closed
    stores too and dropped nothing). Now it passes as a stop does: raised, the copy kept for the
    next start's put-back, nothing at ERROR."""
    server: InProcessServer = serve_in_process()
    indexer = server.harness.indexer
    server.harness.stores.close()
    indexer._aside = True
    with pytest.raises(StoresClosedError):
        indexer._restore_aside()
    assert indexer._aside  # put back at the next start
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# --- a memory change given up on keeps its note's lock ----------------------------------------


def test_a_given_up_write_keeps_its_notes_lock_until_it_really_ends(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write given up on (its inbox's share hangs in the write itself: answered "not
    confirmed") still runs and may rename its file into place; its note's lock was let go at
    the answer, and the daily prune (which leaves alone the leftovers of a note whose lock is
    held) settled that note's files under it. Now the lock is kept until the write has ended:
    the prune leaves the note's leftover in .trash, another change of the note is refused with
    nothing done; once the write ends the lock goes and the next prune settles the leftover."""
    served: InProcessServer = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inboxes = served.handlers.memory.inboxes
    inbox = served.cfg.agents_dir / "ada" / "memory"
    served.call("write", {"slug": "plan", "content": "# Plan\n\nRotate the zeppelin disks.\n"}, agent="ada")
    (inbox / ".trash").mkdir(mode=0o700, exist_ok=True)
    leftover = inbox / ".trash" / ".fresh--20260101T000000000000.0123abcd.held"
    leftover.write_text("# Fresh\n\nAn older text of the note.\n", encoding="utf-8")
    release, entered = threading.Event(), threading.Event()
    real = inbox_module.write_in

    def write_in(*args: Any, **kwargs: Any) -> Any:
        if args[1] == "fresh.md":
            entered.set()
            release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_module, "write_in", write_in)
    text = "# Fresh\n\nThe canoe goes in the boathouse.\n"
    stuck = served.harness.supervisor
    try:
        with pytest.raises(RemoteError, match=r"not confirmed: writing fresh\.md"):
            served.call("write", {"slug": "fresh", "content": text}, agent="ada")
        assert entered.is_set()
        inboxes.prune_trash()
        assert leftover.exists()  # the write still runs: its note is left alone
        with (
            pytest.raises(StorageError, match=r"earlier change of 'fresh' .* still under way"),
            inboxes.locked("ada", "fresh"),
        ):
            pass
    finally:
        release.set()
    st = stuck.roots["memory/ada"]
    assert st._stuck is not None
    st._stuck.join(20)
    assert text.strip() in (inbox / "fresh.md").read_text(encoding="utf-8")
    assert ("ada", "fresh") not in inboxes._locks  # let go as the write ended
    inboxes.prune_trash()
    assert not leftover.exists()  # settled now
    with inboxes.locked("ada", "fresh"):
        pass


def test_the_prune_skips_a_note_kept_by_a_change_given_up_on_since_it_looked_and_goes_on(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prune looks whether a note's lock is held, then takes it: a change of the note given
    up on in between (its share hangs) keeps the lock, and taking it is refused "still under
    way". That refusal went up uncaught and the rest of the day's prune was skipped (the
    leftovers after it, the caps). Now just that note is left to the next prune: its inbox temp
    file and its ``.held`` leftover stay, the rest is pruned, and once the change ends the next
    prune settles them."""
    served: InProcessServer = serve_in_process()
    inboxes = served.handlers.memory.inboxes
    inbox = served.cfg.agents_dir / "ada" / "memory"
    for slug in ("plan", "fresh"):
        served.call(
            "write", {"slug": slug, "content": f"# {slug}\n\nRotate the zeppelin disks.\n"}, agent="ada"
        )
    trash = inbox / ".trash"
    trash.mkdir(mode=0o700, exist_ok=True)
    held = trash / ".plan--20260101T000000000000.0123abcd.held"
    held.write_text("# Plan\n\nAn older text of the note.\n", encoding="utf-8")
    temp = inbox / ".fresh.abcdefgh.tmp"
    temp.write_text("# Fresh\n\nA killed write's text.\n", encoding="utf-8")
    killed_keep = trash / ".plan--20260101T000000000000.0123abcd.tmp"  # removed after the .held ones
    killed_keep.write_text("x", encoding="utf-8")
    real = inboxes.locked
    ended: list[Any] = []

    def locked(agent: str, slug: str) -> Any:
        if slug in ("plan", "fresh") and len(ended) < 2 and slug not in [s for s, _ in ended]:
            with real(agent, slug):  # a change of the note begins, and is given up on
                ended.append((slug, inboxes.keep(agent, slug)))
        return real(agent, slug)

    monkeypatch.setattr(inboxes, "locked", locked)
    inboxes.prune_trash()
    assert sorted(s for s, _ in ended) == ["fresh", "plan"]
    assert held.exists() and temp.exists()  # left to the next prune
    assert not killed_keep.exists()  # the rest of the prune ran
    monkeypatch.undo()
    for _slug, end in ended:
        end()
    inboxes.prune_trash()
    assert not held.exists() and not temp.exists()


def test_a_change_given_up_before_it_began_never_begins_and_keeps_nothing() -> None:
    """A change whose request gave up before its first call is refused "not written, nothing
    written" and never runs afterwards (it ran once its thread got there, after the answer said
    nothing was done); nothing of the note's lock is kept."""
    from sidecar.memory.inbox_bounded import _Change
    from sidecar.vault.sources import GivenUp

    change = _Change()
    kept: list[str] = []
    assert change.give_up(lambda: lambda: kept.append("released")) is False
    with pytest.raises(GivenUp):
        change.begin("fresh")
    change.end()
    assert kept == []
    begun = _Change()
    begun.begin("fresh")
    assert begun.give_up(lambda: lambda: kept.append("released")) is True
    assert kept == []
    begun.end()
    assert kept == ["released"]


def test_a_close_handed_to_the_holder_runs_at_its_last_release_and_nowhere_else() -> None:
    """The lock's hand-over: a close that could not wait for the holder runs as the holder lets
    go of its outermost hold (not an inner one, not in another thread's look at whether the lock
    is free, which may hold a lock the close takes); from then on taking the lock raises."""
    from sidecar.stores.closing import ClosingLock

    lock = ClosingLock(lambda: StoresClosedError("closed"))
    ran: list[str] = []
    held, let_go = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            with lock:
                held.set()
                assert let_go.wait(30)
            ran.append("inner released")  # the close has not run at the inner release

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(30)
    assert lock.close_with(lambda: ran.append(threading.current_thread().name), 0.0) is False
    assert not lock.is_free() and ran == []
    let_go.set()
    t.join(30)
    assert ran == ["inner released", t.name] and lock.closed
    with pytest.raises(StoresClosedError):
        lock.__enter__()
    assert lock.close_with(lambda: ran.append("again"), 0.0) is True and ran[-1] == t.name


def test_an_engine_error_in_a_handed_close_is_logged_not_raised_in_the_holders_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A close handed to the holder that raises what is no ``Exception`` (a Rust panic of the
    engine is a ``BaseException``): it left the holder's ``with`` in place of that call's own
    result, read there as the call failing. Now it is logged, and the call ends as it would."""
    from sidecar.stores.closing import ClosingLock

    class Panic(BaseException):
        pass

    def close() -> None:
        raise Panic("the engine panicked in its close")

    lock = ClosingLock(lambda: StoresClosedError("closed"))
    held, let_go = threading.Event(), threading.Event()
    ended: list[object] = []

    def holder() -> None:
        try:
            with lock:
                held.set()
                assert let_go.wait(30)
            ended.append("ended well")
        except BaseException as exc:  # what the holder's call met
            ended.append(exc)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(30)
    assert lock.close_with(close, 0.0) is False
    let_go.set()
    t.join(30)
    assert ended == ["ended well"] and lock.closed
    assert "store_close_failed" in caplog.text and "panicked" in caplog.text


class _Gate:
    """The raw lock of a ``ClosingLock``, with a hook at each step (for the hand-over's races)."""

    def __init__(
        self, real: Any, on_acquire: Any = None, on_release: Any = None, on_enter: Any = None
    ) -> None:
        self.real, self.on_acquire, self.on_release, self.on_enter = real, on_acquire, on_release, on_enter

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = bool(self.real.acquire(blocking, timeout))
        if self.on_acquire is not None:
            self.on_acquire(blocking, timeout, got)
        return got

    def release(self) -> None:
        if self.on_release is not None:
            self.on_release()
        self.real.release()

    def __enter__(self) -> bool:
        if self.on_enter is not None:
            self.on_enter()
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def _is_owned(self) -> bool:
        return bool(self.real._is_owned())


@pytest.mark.parametrize("race", ["a look at whether the lock is free", "the holder letting go"])
def test_a_close_handed_as_the_holder_lets_go_is_never_lost(race: str) -> None:
    """The close's wait fails, the holder lets go, and the close is handed and tried at once.
    Lost before, the close neither run nor left to anyone (the connection open, its log not
    written back, at the stop): when another thread's look at whether the lock was free held it
    for that instant, or when the holder looked for a close handed before it was handed and let
    go after the try. Now the look never takes the lock, and the handing and a release's look
    are one step: the close runs, here or by the holder."""
    from sidecar.stores.closing import ClosingLock

    lock = ClosingLock(lambda: StoresClosedError("closed"))
    ran: list[str] = []
    closer = threading.current_thread()
    holds, go, in_release, tried, look_in = (threading.Event() for _ in range(5))
    looking: list[threading.Thread] = []

    def holder() -> None:
        with lock:
            holds.set()
            assert go.wait(30)

    h = threading.Thread(target=holder)

    def on_acquire(blocking: bool, timeout: float, got: bool) -> None:
        me = threading.current_thread()
        if me is closer and blocking and not got:  # the close's timed wait failed
            go.set()
            if race == "the holder letting go":
                in_release.wait(30)  # the holder has looked for a close handed: none yet
                return
            h.join(30)  # the holder let go; a look holds the lock now
            look = threading.Thread(target=lock.is_free)
            looking.append(look)
            look.start()
            while not look_in.is_set() and look.is_alive():
                look_in.wait(0.01)
        elif me is closer and not blocking:  # the try after the handing
            tried.set()
        elif looking and me is looking[0] and got:
            look_in.set()
            tried.wait(30)

    def on_release() -> None:
        if threading.current_thread() is h and race == "the holder letting go":
            in_release.set()
            tried.wait(30)  # let go once the closer tried (or waits to hand: the fix)

    lock._lock = _Gate(lock._lock, on_acquire, on_release)  # type: ignore[assignment]
    if hasattr(lock, "_hand"):  # the fix's: the closer waits there for the holder's release

        def handing() -> None:
            if threading.current_thread() is closer:
                tried.set()

        lock._hand = _Gate(threading.Lock(), on_enter=handing)  # type: ignore[assignment]
    h.start()
    assert holds.wait(30)
    handed_here = lock.close_with(lambda: ran.append("closed"), 0.0)
    h.join(30)
    for look in looking:
        look.join(30)
    assert lock.closed and ran == ["closed"], (handed_here, ran, lock._handed)


# --- the keyword index and the vector tables at the stop ---------------------------------------


def _doc(key: str, body: str) -> Any:
    from sidecar.stores.bm25_text import Bm25Doc

    name = key.rsplit("/", 1)[-1]
    return Bm25Doc.of(f"{key}#0", key, "vault", "", title=name, aliases=(), headings=(), body=body)


def _held_in(target: Any, name: str, entered: threading.Event, release: threading.Event) -> None:
    """``target.name`` (a real call) held at its first call until ``release``, ``entered`` set."""
    real = getattr(target, name)

    def held(*args: Any, **kwargs: Any) -> Any:
        if not entered.is_set():
            entered.set()
            release.wait(60)
        return real(*args, **kwargs)

    setattr(target, name, held)


def test_the_stops_close_of_the_keyword_index_hands_a_held_commit_its_close_and_refuses_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit under way (a disk that hangs in its fsync: only the pause is fake) holds the
    keyword index as the stop closes the stores: the close waited for its lock without a bound,
    and the stop with it. Now it waits ``CLOSE_WAIT_S`` only, hands the close to the commit's
    thread, which commits whole and closes as it lets go; every later search or write is refused
    ``busy`` (the daemon is stopping) before it reaches a Tantivy writer or searcher, and a new
    open finds the commit."""
    from sidecar.index.vectoring import Stores
    from sidecar.stores import bm25_folder, closing
    from sidecar.stores.bm25 import Bm25ClosedError, Bm25Index

    monkeypatch.setattr(closing, "CLOSE_WAIT_S", 0.0)
    bm25 = Bm25Index(tmp_path / "bm25")
    stores = Stores(_manifest_with_a_note(tmp_path / "m.sqlite"), bm25)
    entered, release = threading.Event(), threading.Event()
    _held_in(bm25_folder.Folder, "commit", entered, release)
    bm25.add([_doc("vault/Boat", "The zebrafinch boat needs plugs.")])
    job = threading.Thread(target=bm25.commit)
    job.start()
    closing_thread = threading.Thread(target=lambda: stores.close(stopping=True))
    try:
        assert entered.wait(30)
        closing_thread.start()
        closing_thread.join(30)
        assert not closing_thread.is_alive()  # handed over, not waited for (before: waited)
        assert "bm25_close_handed" in caplog.text and not bm25.closed_for_stop
    finally:
        release.set()
        job.join(30)
        closing_thread.join(30)
    assert bm25.closed_for_stop
    for call in (
        lambda: bm25.search("zebrafinch", 5),
        lambda: bm25.add([_doc("vault/Late", "zebrafinch")]),
        bm25.commit,
        lambda: bm25.compact_shared([]),
    ):
        with pytest.raises(Bm25ClosedError, match="the daemon is stopping") as err:
            call()
        assert err.value.code == "busy"
    monkeypatch.undo()
    again = Bm25Index(tmp_path / "bm25")
    try:
        assert [cid for cid, _s in again.search("zebrafinch", 5)] == ["vault/Boat#0"]
    finally:
        again.close()


def _vector_store(path: Path) -> Any:
    from sidecar.stores.vectors import VectorStore

    return VectorStore(path, "test-model", 4, "mean")


def _rows(*ids: str) -> tuple[list[tuple[str, str, str, str]], Any]:
    import numpy as np

    rows = [(i, f"vault/{i}", "vault", "") for i in ids]
    return rows, np.ones((len(ids), 4), dtype=np.float32)


def test_no_vector_write_lands_after_the_stops_close_and_one_under_way_keeps_the_index_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector tables were not closed at a stop: a job stuck past it (a backfill batch, a
    memory write given up on) wrote vectors after the index lock was released, when another
    daemon may hold the index. Now the stop's close refuses every vector write that comes after
    it (``busy``) and lets go of LanceDB's handles (a search is refused too); a write already
    under way past its short wait is said (False), so that the stop keeps the lock until the
    process exits."""
    from sidecar.index.vectoring import Stores, VectorSet
    from sidecar.stores import closing
    from sidecar.stores.bm25 import Bm25Index
    from sidecar.stores.vectors import VectorsClosedError

    monkeypatch.setattr(closing, "CLOSE_WAIT_S", 0.0)
    store = _vector_store(tmp_path / "vectors")
    store.add(*_rows("a"))
    stores = Stores(_manifest_with_a_note(tmp_path / "m.sqlite"), Bm25Index(tmp_path / "bm25"))
    stores.serving = VectorSet(store, None, "has_vector")  # type: ignore[arg-type]  # no model needed
    entered, release = threading.Event(), threading.Event()
    _held_in(store._table, "add", entered, release)  # a LanceDB add under way (a hung disk)
    job = threading.Thread(target=lambda: store.add(*_rows("b")))
    job.start()
    closed: list[Any] = []
    try:
        assert entered.wait(30)
        closed.append(stores.close(stopping=True))
    finally:
        release.set()
        job.join(30)
    assert closed == [False]  # a write was under way: the stop keeps the index locked
    for call in (lambda: store.add(*_rows("c")), lambda: store.search(_rows("x")[1][0], 5)):
        with pytest.raises(VectorsClosedError, match="the daemon is stopping") as err:
            call()
        assert err.value.code == "busy"
    again = _vector_store(tmp_path / "vectors")
    assert sorted(again.ids()) == ["a", "b"]  # the write under way landed whole, none after it
    quiet = _vector_store(tmp_path / "quiet")
    assert quiet.close(stopping=True) is True
    with pytest.raises(VectorsClosedError):
        quiet.add(*_rows("d"))


@pytest.mark.parametrize("keyword_close", ["closes", "raises"])
def test_the_stop_keeps_the_index_lock_while_a_vector_write_may_still_land_and_says_stopped_at_exit(
    serve_in_process: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    keyword_close: str,
) -> None:
    """The daemon's stop with a LanceDB add still under way past the close's wait (a hung disk:
    only the pause is fake), on the real index lock. Released, the lock let another daemon open
    the index while that write landed: it is kept until the process exits, also when the keyword
    index's close then raises (the same failing disk: its error is the one fake), which lost the
    vector tables' answer and let the lock go. Kept, its record said ``stopping`` after a clean
    exit, which every client read as a daemon killed or crashed: it says why it is kept while the
    process runs, ``stopped`` as it exits, and the next start takes the lock."""
    from sidecar.clients.lockholder import phase_said
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.daemon.process import IndexLock
    from sidecar.index.vectoring import VectorSet
    from sidecar.runtime import lockstate
    from sidecar.stores import closing

    monkeypatch.setattr(closing, "CLOSE_WAIT_S", 0.2)
    server: InProcessServer = serve_in_process()
    daemon = _daemon_over(server, Dispatch(server.handlers))
    lock = IndexLock(server.cfg.index_dir)
    lock.acquire()
    lock.phase(lockstate.STOPPING)  # as the stop says it
    daemon._lock = lock
    stores = server.harness.stores
    store = _vector_store(tmp_path / "vectors")
    store.add(*_rows("a"))
    stores.serving, stores.building = VectorSet(store, None, "has_vector"), None  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()
    _held_in(store._table, "add", entered, release)
    job = threading.Thread(target=lambda: store.add(*_rows("b")))
    job.start()
    if keyword_close == "raises":

        def failing(*, stopping: bool = False, wait: float | None = None) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(stores.bm25, "close", failing)
    assert daemon._switching.acquire(timeout=30)  # as the stop takes it
    lock_path = server.cfg.index_dir / ".lock"
    try:
        assert entered.wait(30)
        with (
            pytest.raises(OSError, match="Input/output")
            if keyword_close == "raises"
            else contextlib.nullcontext()
        ):
            daemon._close_stores(idle=True, stuck=False)
        assert "the index stays locked until this process exits" in caplog.text
        with pytest.raises(DaemonRunningError, match="is stopping"):
            IndexLock(server.cfg.index_dir).acquire()  # kept: a second daemon is refused
        view = lockstate.look(lock_path)
        assert view is not None and view.moving == lockstate.STOPPING
        assert view.record.step is not None and "vector write" in view.record.step
        daemon.exiting()  # ``cmd_serve``, as the process exits
        assert lock._fh is not None
        lock._fh.close()  # the exit lets the lock go
    finally:
        release.set()
        job.join(30)
        daemon.notifier.close()
        monkeypatch.undo()  # the keyword index closes at the harness's end
    view = lockstate.look(lock_path)
    assert view is not None and view.record.phase == lockstate.STOPPED and not view.stale
    assert phase_said(view) is None  # no "killed or crashed"
    again = IndexLock(server.cfg.index_dir)
    again.acquire()  # a service manager's restart takes it
    again.release()


def test_the_stops_closes_count_inside_the_stops_one_bound(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The stores' closes at a stop came after its one bound (20 s), 2 s each for a call under
    way that does not end: four held stores took the stop past launchd's ExitTimeOut (25 s),
    which kills it. Now each close waits only what the stop's clock leaves: with the bound spent
    (and each close's own wait made long here), a LanceDB add held under way does not hold the
    stop; the lock is kept to the exit as for any write that may still land."""
    from sidecar.daemon.server import StopClock
    from sidecar.index.vectoring import VectorSet
    from sidecar.stores import closing

    monkeypatch.setattr(closing, "CLOSE_WAIT_S", 60.0)
    server: InProcessServer = serve_in_process()
    daemon = _daemon_over(server, Dispatch(server.handlers))
    daemon.stop_clock = StopClock(budget=0.0)  # the stop's bound spent by its drain
    stores = server.harness.stores
    store = _vector_store(tmp_path / "vectors")
    store.add(*_rows("a"))
    stores.serving, stores.building = VectorSet(store, None, "has_vector"), None  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()
    _held_in(store._table, "add", entered, release)
    job = threading.Thread(target=lambda: store.add(*_rows("b")))
    job.start()
    assert daemon._switching.acquire(timeout=30)  # as the stop takes it
    closer = threading.Thread(target=lambda: daemon._close_stores(idle=True, stuck=False))
    try:
        assert entered.wait(30)
        closer.start()
        closer.join(30)
        held = closer.is_alive()
    finally:
        release.set()
        job.join(30)
        closer.join(60)
        daemon.notifier.close()
    assert not held, "the stop's close waited past the stop's bound"
    assert daemon.lock_kept and stores.vectors_settled is False


@pytest.mark.parametrize(
    ("op", "slug", "action"), [("write", "late", "created"), ("edit", "kept", "updated")]
)
def test_a_memory_write_or_edit_whose_note_was_saved_as_the_index_closed_says_saved_and_what_waits(
    serve_in_process: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    op: str,
    slug: str,
    action: str,
) -> None:
    """A memory write (or edit) whose note was written when the stop closed the index, before it
    was indexed: it was logged ``memory_index_failed`` at ERROR (a problem in status) and told a
    fault. Now it is answered saved, indexed at the next start, and logged at info only."""
    server: InProcessServer = serve_in_process()
    inbox = server.cfg.agents_dir / "alice" / "memory"
    server.call("write", {"slug": "kept", "content": _NOTE}, agent="alice")
    indexer = server.harness.indexer
    real = indexer.index_now

    def close_then_index(*args: Any, **kwargs: Any) -> Any:
        server.harness.stores.close()
        return real(*args, **kwargs)

    monkeypatch.setattr(indexer, "index_now", close_then_index)
    caplog.set_level(logging.INFO)
    content = _NOTE + f"Changed by the {op}.\n"
    answer = server.call(op, {"slug": slug, "content": content}, agent="alice")
    assert answer["action"] == action and answer["searchable"] is False
    said = "saved, but not searchable yet: the daemon is stopping; it is indexed at its next start"
    assert answer["warning"] == said
    assert content in (inbox / f"{slug}.md").read_text(encoding="utf-8")
    assert "memory_index_stopped" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_the_stops_close_never_waits_unbounded_for_a_search_taking_the_vector_centre(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search taking the vector table's centre holds its lock over a LanceDB read (one hung on
    a disk: only the pause is fake); the stop's close wrote the centre's churn first and waited
    for that lock without a bound, and the stop with it. Now that wait is bounded like the
    others; the close says False (that search may still write the centre's file), so the stop
    keeps the index locked until the process exits."""
    from sidecar.index.vectoring import Stores, VectorSet
    from sidecar.stores import closing
    from sidecar.stores import vectors as vector_module
    from sidecar.stores.bm25 import Bm25Index
    from sidecar.stores.vectors import VectorsClosedError

    monkeypatch.setattr(closing, "CLOSE_WAIT_S", 0.2)
    monkeypatch.setattr(vector_module, "CENTROID_MIN_ROWS", 1)
    store = _vector_store(tmp_path / "vectors")
    store.add(*_rows("a", "b"))
    stores = Stores(_manifest_with_a_note(tmp_path / "m.sqlite"), Bm25Index(tmp_path / "bm25"))
    stores.serving = VectorSet(store, None, "has_vector")  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()
    _held_in(store, "_sampled_mean", entered, release)
    read: list[object] = []

    def search_takes_the_centre() -> None:
        try:
            read.append(store.centroid())
        except VectorsClosedError as exc:  # its read met the closed table: refused busy
            read.append(exc)

    reader = threading.Thread(target=search_takes_the_centre)
    reader.start()
    closed: list[bool] = []
    closer = threading.Thread(target=lambda: closed.append(stores.close(stopping=True)))
    try:
        assert entered.wait(30)
        closer.start()
        closer.join(30)
        hung = closer.is_alive()
    finally:
        release.set()
        reader.join(30)
        closer.join(30)
    assert not hung, "the stop's close waited for the centre's lock past its bound"
    assert closed == [False] and stores.vectors_settled is False
    assert len(read) == 1 and isinstance(read[0], VectorsClosedError) and read[0].code == "busy"


def test_the_daily_give_back_cut_by_the_stops_close_is_said_stopped_not_failed(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The daily give-back of the manifest's free pages, run as the stop closes the stores: it
    was logged ``manifest_give_back_failed`` (a warning that asks for a look); it is a stop, and
    is said as one (``manifest_give_back_stopped``)."""
    server: InProcessServer = serve_in_process()
    daemon = _daemon_over(server, Dispatch(server.handlers))
    server.harness.stores.close()
    caplog.set_level(logging.INFO)
    try:
        daemon._give_back_manifest()
    finally:
        daemon.notifier.close()
    assert "manifest_give_back_failed" not in caplog.text
    assert "manifest_give_back_stopped" in caplog.text


def test_a_delete_that_met_the_closed_index_says_it_moved_the_note_and_what_waits(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A memory delete whose note was moved to .trash when the stores closed: its answer carried
    the index's "nothing was read from or written to", after the note had been moved, and an
    ERROR asked for a look. Now it says what was done (moved) and what waits (the index entry,
    at the next start); no ERROR. A search cut short by the closed index says no note changed."""
    server: InProcessServer = serve_in_process()
    server.call("write", {"slug": "kept", "content": _NOTE}, agent="alice")
    inbox = server.cfg.agents_dir / "alice" / "memory"
    ops = server.handlers.memory
    real = ops.inboxes.delete

    def delete_then_close(*args: Any, **kwargs: Any) -> Any:
        moved = real(*args, **kwargs)
        server.harness.stores.close()
        return moved

    monkeypatch.setattr(ops.inboxes, "delete", delete_then_close)
    answer = server.call("delete", {"slug": "kept"}, agent="alice")
    assert not (inbox / "kept.md").exists()
    assert "moved to .trash" in answer["warning"] and "next start" in answer["warning"]
    assert "nothing was" not in answer["warning"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    with pytest.raises(BusyError, match=r"cut short .*no note was changed"):
        Dispatch(server.handlers).dispatch(parse_request(_SEARCH))
