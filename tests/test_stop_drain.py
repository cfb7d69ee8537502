"""A stop during requests: those taken up are answered before the connections close, those
arriving meanwhile are refused ``busy``, one outlasting the drain is answered ``timeout``, and the
stores close only once no request can touch them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.protocol import parse_request
from sidecar.daemon.compose import Parts
from sidecar.daemon.readonly import Dispatch
from sidecar.memory.ops import MemoryOps
from tests.daemon_process import exchange
from tests.in_process import InProcessServer

_NOTE = "Zebrafinch migration notes: the zebrafinch flock leaves the valley in autumn.\n"


def _write_frame(slug: str) -> bytes:
    frame = {"id": 1, "op": "write", "agent": "alice", "params": {"slug": slug, "content": _NOTE}}
    return json.dumps(frame).encode() + b"\n"


def _answer(s: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


class Held:
    """A memory write held in the middle (between its checks and its writing) until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real = MemoryOps._near_duplicates

        def held(ops: MemoryOps, *args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.release.wait(60)
            return real(ops, *args, **kwargs)

        monkeypatch.setattr(MemoryOps, "_near_duplicates", held)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    h = Held(monkeypatch)
    yield h
    h.release.set()


def _send_write(server: InProcessServer, held: Held, slug: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(server.socket))
    s.sendall(_write_frame(slug))
    assert held.entered.wait(30)
    return s


def _note(server: InProcessServer, slug: str) -> Path:
    return server.cfg.agents_dir / "alice" / "memory" / f"{slug}.md"


def test_a_stop_lets_a_running_write_finish_and_refuses_new_requests(
    serve_in_process: Any, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop (SIGTERM at a restart) closed the connections at once: the write running got a broken
    connection and ran on into closed stores. Now the write is answered and its note is on disk
    and in the index; a request sent after the stop began is refused ``busy``, nothing run."""
    server: InProcessServer = serve_in_process()
    with _send_write(server, held, "held") as s:
        server.ask_stop()
        assert server.server.stopping.wait(30)
        refused = exchange(server.socket, b'{"id": 2, "op": "health"}\n')
        assert refused[0]["error"]["code"] == "busy"
        assert "the daemon is stopping" in refused[0]["error"]["message"]
        held.release.set()
        answer = _answer(s)
    assert answer["ok"] is True, answer
    server.close()
    assert _note(server, "held").read_text(encoding="utf-8").endswith(_NOTE)
    found = server.handlers.dispatch(
        parse_request(b'{"id": 3, "op": "search", "agent": "alice", "params": {"query": "zebrafinch"}}\n')
    )
    assert "memory/held" in [h["reference"] for h in found["hits"]]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_write_outlasting_the_drain_is_answered_timeout_and_the_stores_close_after_it(
    serve_in_process: Any, held: Held, caplog: pytest.LogCaptureFixture, make_cfg: Any, vault: Path
) -> None:
    """A write still running when the stop's drain ends is answered ``timeout`` (not a broken
    connection, not an internal error); the daemon's stop closes the stores and logs
    ``daemon_stopped`` only once the write has ended: it never touches closed stores."""
    from sidecar.daemon.lifecycle import Daemon

    server: InProcessServer = serve_in_process()
    server.server.drain_timeout = 0.0  # the drain's bound has passed at once
    dispatch = Dispatch(server.handlers)
    server.server.dispatch = dispatch.dispatch
    h = server.harness
    daemon = Daemon(server.cfg)
    daemon._dispatch = dispatch
    daemon.parts = Parts(h.problems, h.stores, h.vectors, h.supervisor, h.indexer, h.repair)
    closed_during: list[bool] = []
    close = h.stores.close

    def recording_close(*, stopping: bool = False, left: Any = None) -> bool:
        closed_during.append(held.release.is_set())
        return close(stopping=stopping, left=left)

    h.stores.close = recording_close  # type: ignore[method-assign]
    try:
        with _send_write(server, held, "late") as s:
            server.ask_stop()
            answer = _answer(s)
            assert answer["error"]["code"] == "timeout", answer
            assert "stop" in answer["error"]["message"]
            server.close()
            daemon.shutdown()  # the write still runs: the stores stay open
            assert not daemon.stopped.is_set() and closed_during == []
            assert "daemon_stopped" not in caplog.text
            held.release.set()
            assert daemon.stopped.wait(30)
        assert closed_during == [True]
        assert _note(server, "late").read_text(encoding="utf-8").endswith(_NOTE)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        held.release.set()
        daemon.notifier.close()


_HEALTH = parse_request(b'{"id": 7, "op": "health"}\n')


def test_requests_held_by_a_switch_are_refused_busy_when_a_stop_begins() -> None:
    """Requests held while the index is reopened for writing waited out the stop's drain when a
    stop began meanwhile; they are refused at once, ``busy`` with the text of a request refused
    during the drain (they got ``storage``, which the docs do not say), and a dispatch holding
    nothing is left as is."""
    from sidecar.contracts.errors import BusyError
    from sidecar.daemon.readonly import Stopping
    from sidecar.daemon.server import _stopping_frame

    class Answering:
        def dispatch(self, req: Any) -> dict[str, Any]:
            return {"answered": True}

    serving = Dispatch(Answering())
    serving.close_if_held(Stopping())
    assert serving.dispatch(_HEALTH) == {"answered": True}

    held = Dispatch(Answering())
    assert held.hold(most=0)
    outcome: list[BusyError] = []

    def ask() -> None:
        try:
            held.dispatch(_HEALTH)
        except BusyError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=ask)
    waiting.start()
    held.close_if_held(Stopping())
    waiting.join(30)
    assert [e.code for e in outcome] == ["busy"]
    said = json.loads(_stopping_frame(_HEALTH))["error"]
    assert (said["code"], said["message"]) == ("busy", str(outcome[0]))
    held.release(Answering())  # the switch ends later: it hands nothing on
    with pytest.raises(BusyError):
        held.dispatch(_HEALTH)


class HeldReads:
    """The daemon's handlers with every search held until released."""

    def __init__(self, handlers: Any) -> None:
        self.handlers = handlers
        self.entered, self.release = threading.Event(), threading.Event()

    def dispatch(self, req: Any) -> dict[str, Any]:
        if req.op == "search":
            self.entered.set()
            assert self.release.wait(60)
        result: dict[str, Any] = self.handlers.dispatch(req)
        return result


_SEARCH = b'{"id": 5, "op": "search", "agent": "alice", "params": {"query": "zebrafinch"}}\n'


def _stopping_daemon(server: InProcessServer, dispatch: Dispatch) -> Any:
    from sidecar.daemon.lifecycle import Daemon

    h = server.harness
    daemon = Daemon(server.cfg)
    daemon._dispatch = dispatch
    daemon.parts = Parts(h.problems, h.stores, h.vectors, h.supervisor, h.indexer, h.repair)
    return daemon


@contextlib.contextmanager
def _stopping_with_reads_held(server: InProcessServer) -> Iterator[tuple[HeldReads, Dispatch, Any]]:
    """A daemon over the server's stores to stop, whose searches are held until released (they
    are released, and its notifier closed, on the way out)."""
    reads = HeldReads(server.handlers)
    dispatch = Dispatch(reads)
    daemon = _stopping_daemon(server, dispatch)
    try:
        yield reads, dispatch, daemon
    finally:
        reads.release.set()
        daemon.notifier.close()


def test_a_read_answered_timeout_long_before_holds_up_neither_the_drain_nor_the_stores_close(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A read answered ``timeout`` (requestTimeoutSeconds) long before the stop, its worker hung on
    a share: every later stop waited its full drain for it, answered it again
    (``request_outlasted_stop``) and never closed the stores. Now nobody waits for it: the drain
    is empty and the stores close at once; the read, once it returns, fails quietly ``busy``."""
    server: InProcessServer = serve_in_process()
    with _stopping_with_reads_held(server) as (reads, dispatch, daemon):
        server.server.dispatch = dispatch.dispatch
        server.server.request_timeout = 0.0  # the read overruns at once
        server.server.drain_timeout = 0.0
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(server.socket))
            s.sendall(_SEARCH)
            assert _answer(s)["error"]["code"] == "timeout"
        assert reads.entered.is_set()
        server.close()
        assert "daemon_draining" not in caplog.text and "request_outlasted_stop" not in caplog.text
        daemon.shutdown()
        assert daemon.stopped.is_set()  # no write runs: closed at once
        assert daemon.requests_left() == 1
        caplog.clear()
        reads.release.set()
        for _ in range(3000):  # the read ends on its worker thread
            if not daemon.requests_left():
                break
            threading.Event().wait(0.01)
        assert daemon.requests_left() == 0
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_read_left_running_by_the_stop_fails_busy_on_the_closed_stores(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A read the stop did not wait for that touches the closed stores is refused ``busy`` (the
    daemon is stopping), not logged at ERROR as an internal failure."""
    from sidecar.contracts.errors import BusyError

    server: InProcessServer = serve_in_process()
    with _stopping_with_reads_held(server) as (reads, dispatch, daemon):
        outcome: list[Any] = []

        def read() -> None:
            try:
                outcome.append(dispatch.dispatch(parse_request(_SEARCH)))
            except BusyError as exc:
                outcome.append(exc)

        reading = threading.Thread(target=read)
        reading.start()
        assert reads.entered.wait(30)
        server.close()
        daemon.shutdown()
        assert daemon.stopped.is_set()
        reads.release.set()
        reading.join(30)
        assert len(outcome) == 1
        if isinstance(outcome[0], BusyError):
            assert "the daemon is stopping" in str(outcome[0])
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_read_whose_client_hung_up_is_not_drained(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A read whose client hung up while its worker hangs held every later stop for its drain."""
    server: InProcessServer = serve_in_process()
    reads = HeldReads(server.handlers)
    server.server.dispatch = Dispatch(reads).dispatch
    server.server.drain_timeout = 0.0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(server.socket))
            s.sendall(_SEARCH)
            assert reads.entered.wait(30)
        for _ in range(3000):  # the server sees the hang-up on its loop
            if server.server.connections == 0:
                break
            threading.Event().wait(0.01)
        assert server.server.connections == 0
        server.close()
        assert "daemon_draining" not in caplog.text and "request_outlasted_stop" not in caplog.text
    finally:
        reads.release.set()


def test_a_request_taken_up_as_the_stop_begins_is_drained(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request past the check of ``stopping`` whose task had not run yet when the drain began
    was missed by it (its answer was registered a loop turn later): the drain now counts it."""
    from sidecar.daemon.server import Server

    real = Server._unless_hung_up

    async def racing(self: Server, *args: Any) -> Any:
        drain = asyncio.ensure_future(self._drain())  # the stop begins in this very turn
        answer = await real(self, *args)
        await drain
        return answer

    monkeypatch.setattr(Server, "_unless_hung_up", racing)
    server: InProcessServer = serve_in_process()
    caplog.set_level(logging.INFO)
    answer = exchange(server.socket, b'{"id": 2, "op": "health"}\n')
    assert answer[0]["ok"] is True
    assert "daemon_draining requests=1" in caplog.text


def test_an_interrupt_during_the_joins_leaves_the_index_unmarked(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C (or an error) while the stop waited for its workers closed the stores and stamped
    the index clean with the workers still running: the next start skipped its catch-up."""
    server: InProcessServer = serve_in_process()
    dispatch = Dispatch(server.handlers)
    daemon = _stopping_daemon(server, dispatch)
    marked: list[bool] = []
    monkeypatch.setattr(server.harness.vectors, "mark_clean", lambda: marked.append(True))

    def interrupted() -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(daemon, "_join_workers", interrupted)
    server.close()
    try:
        with pytest.raises(KeyboardInterrupt):
            daemon.shutdown()
        assert marked == []
        assert daemon.stopped.is_set()
    finally:
        daemon.notifier.close()


def test_a_second_interrupt_during_the_stop_exits_at_once_without_closing(
    caplog: pytest.LogCaptureFixture, make_cfg: Any, vault: Path
) -> None:
    """The stop's second Ctrl-C ends the process with its own exit code, the index left as a
    crash leaves it, instead of breaking off the joins into a close with workers running."""
    import signal

    from sidecar.contracts.errors import ExitCode
    from sidecar.daemon.lifecycle import Daemon

    daemon = Daemon(make_cfg(vault))
    exits: list[int] = []
    daemon._exit = exits.append
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        daemon._exit_on_second_signal()
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)
        daemon.notifier.close()
    assert exits == [int(ExitCode.STOP_ABANDONED)]
    assert "shutdown_forced" in caplog.text


def test_the_drain_gets_only_what_is_left_of_the_stops_bound(
    serve_in_process: Any, held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    """Every wait of the stop had its own bound (about a minute added up, past systemd's and
    launchd's limits): the drain now gets what is left of one deadline for the whole stop."""
    from sidecar.daemon.server import StopClock

    server: InProcessServer = serve_in_process()
    caplog.set_level(logging.INFO)
    server.server.stop_clock = StopClock(budget=0.0)  # the stop's time is up
    with _send_write(server, held, "spent") as s:
        server.ask_stop()
        answer = _answer(s)
        held.release.set()
    assert answer["error"]["code"] == "timeout", answer
    assert "daemon_draining requests=1 seconds=0" in caplog.text
    # The write runs on: waited for here, as the daemon's stop waits for it before closing the
    # stores (left running, it met the stores this test's teardown closed, in the next test).
    server.close()
    server.server.lanes["write"].pool.shutdown(wait=True)
    assert _note(server, "spent").read_text(encoding="utf-8").endswith(_NOTE)


def test_the_daemons_waits_share_the_stops_one_deadline(make_cfg: Any, vault: Path) -> None:
    """The joins of the stop (10 s for each thread still running) and the wait for a write add up
    to no more than the stop's one bound: a stop with threads stuck ended past TimeoutStopSec."""
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.server import StopClock

    now = [0.0]
    waited: list[float] = []

    class Stuck:
        name = "stuck"

        def join(self, timeout: float) -> None:
            waited.append(timeout)
            now[0] += timeout

        def is_alive(self) -> bool:
            return True

    daemon = Daemon(make_cfg(vault))
    daemon.stop_clock = StopClock(budget=20.0, clock=lambda: now[0])
    daemon._threads = [Stuck(), Stuck(), Stuck()]  # type: ignore[list-item]
    try:
        daemon.shutdown()
        assert daemon.stuck
        assert sum(waited) <= 20.0 and waited[-1] == 0.0
        assert daemon.stop_clock.left(10.0) == 0.0  # wait_stopped gets nothing more either
    finally:
        daemon.notifier.close()


def test_the_stop_beginning_refuses_requests_held_by_a_switch(make_cfg: Any, vault: Path) -> None:
    """``daemon_stopping`` (said as the stop begins) answers the requests a switch holds, at once."""
    from sidecar.contracts.errors import BusyError
    from sidecar.daemon.lifecycle import Daemon

    class Answering:
        def dispatch(self, req: Any) -> dict[str, Any]:
            return {"answered": True}

    daemon = Daemon(make_cfg(vault))
    dispatch = daemon._dispatch = Dispatch(Answering())
    assert dispatch.hold(most=0)
    try:
        daemon._say_stopping()
        with pytest.raises(BusyError):
            dispatch.dispatch(_HEALTH)
    finally:
        daemon.notifier.close()


def test_a_write_running_past_the_stops_bound_is_given_up_on(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write still running when the stop's time is up: ``wait_stopped`` says so
    (``shutdown_timeout``) and returns False, for serve to exit without closing the index."""
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.server import StopClock

    daemon = Daemon(make_cfg(vault))
    daemon.stop_clock = StopClock(budget=0.0)
    try:
        assert daemon.wait_stopped() is False
        assert "shutdown_timeout requests=still running" in caplog.text
    finally:
        daemon.notifier.close()
