"""The socket loop: frame -> handler -> frame, on a private Unix socket (no TCP, ever).

The socket lives in a directory of mode 0700, has mode 0600, and every connection's peer UID is
checked (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS). Requests run on thread pools so a slow
search never stalls the loop; writes have their own pool, so searches never wait for a worker a
write holds, and health has its own, so it answers while searches fill theirs (and `index`, so a
rebuild's check of a hung share never holds a memory write); read requests in
flight are counted as foreground (write-side and background work yields the cores to them,
``sidecar.runtime.foreground``). Bounded: a frame over the limit is answered with an error and the
connection closed; at ``server.maxConnections`` the longest-idle connection is closed to make room
(with a ``busy`` frame), and a new one is refused with that frame when none is idle; input beyond
``server.maxBufferedBytes`` (summed over every connection's unfinished frame) is refused likewise; a
request running longer than ``server.requestTimeoutSeconds`` is answered ``timeout`` (should every
worker be stuck, requests go to a fresh pool). A stop drains: the requests taken up are answered
(``drain_timeout`` at most; one still running then is answered ``timeout``), those arriving
meanwhile are refused ``busy``, and only then are the connections closed. Imports protocol and
errors (and the foreground count and the peer check) only: handlers arrive as a callable.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sidecar.contracts.errors import ConfigError, DaemonRunningError, SidecarError, stopping_message
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import (
    Request,
    error_frame,
    ok_frame,
    parse_request,
    parse_response,
    request_frame,
    request_id_of,
)
from sidecar.runtime.foreground import FOREGROUND, Foreground
from sidecar.runtime.peer import peer_uid, socket_peer

log = logging.getLogger(__name__)
_FLUSH_LOGS_S = 30.0  # how often throttled lines tell what they held back


class Throttled:
    """A log line that can come in floods (a client reconnecting in a loop: 3,000 connections
    in 4 s wrote 1,702 lines): the first at once, then at most one per ``every`` seconds, saying
    how many came since the last (``times=``)."""

    def __init__(
        self, level: int, message: str, every: float = 60.0, clock: Callable[[], float] = time.monotonic
    ):
        self.level, self.message, self.every, self.clock = level, message, every, clock
        self._last: float | None = None
        self._since = 0
        self._args: tuple[object, ...] = ()

    def __call__(self, *args: object) -> None:
        self._since += 1
        self._args = args
        self.flush()

    def flush(self) -> None:
        """Log what came since the last line, once ``every`` has passed (also called now and
        then without a new one: a flood's count is told when it ends, not with the next)."""
        now = self.clock()
        if not self._since or (self._last is not None and now - self._last < self.every):
            return
        log.log(self.level, self.message + " times=%d", *self._args, self._since)
        self._last, self._since = now, 0


Dispatch = Callable[[Request], dict[str, Any]]
_WRITE_TIMEOUT = 30.0
# How long a stop waits for the requests taken up (writes above all) before it answers them
# ``timeout``: half of the whole stop's bound (``StopClock``).
STOP_DRAIN_S = 10.0
# The whole stop, every wait of it together (drain, connections, the daemon's joins, the wait for a
# write still running): 10 s under the service managers' own limits (systemd's TimeoutStopSec=30,
# the launchd agent's ExitTimeOut=25), which kill the process without a word.
STOP_BUDGET_S = 20.0
# After the drain: how long the connections get to send the answers their requests just got.
_SEND_ANSWERS_S = 2.0
# What a task gets to send its answer, or to end once cancelled, even when the stop's time is up
# (a few loop turns; the drain takes at most half the stop's bound, so this is a floor only).
_LAST_WAIT_S = 0.5


class StopClock:
    """The stop's one deadline: each wait of the stop gets at most what is left of it (the
    waits' own bounds added up to about a minute, past the service managers' limits)."""

    def __init__(self, budget: float = STOP_BUDGET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self._clock = clock
        self._deadline: float | None = None
        self._lock = threading.Lock()

    def begin(self) -> None:
        """The stop begins (the first call counts)."""
        with self._lock:
            if self._deadline is None:
                self._deadline = self._clock() + self.budget

    def left(self, most: float) -> float:
        """Seconds a wait of the stop may take: ``most``, or less as the stop's deadline nears."""
        self.begin()
        assert self._deadline is not None
        return max(0.0, min(most, self._deadline - self._clock()))


_READ_CHUNK = 1 << 16
# Ops that change the inbox or the index: they run on their own pool (see the module doc).
WRITE_OPS = frozenset({"write", "edit", "delete", "index", "reload"})
# Answered on a lane of their own, by op: behind held or slow searches in the read lane, `sidecar
# status` and the MCP memory_status gave up after 10 s while the daemon was answering; `index`
# (a write op all the same) checks the shares before a rebuild, and a share that hangs held the
# write lane's workers, with every memory write queued behind them.
OWN_LANE_OPS = {"health": "health", "index": "index", "reload": "reload"}


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700, or check that an existing one is ours and private."""
    created = not path.exists()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as exc:  # a file where the folder belongs, a read-only parent
        raise ConfigError(f"socket directory {path} cannot be made: {exc.strerror or exc}") from exc
    if st.st_uid != os.getuid():
        raise ConfigError(f"socket directory {path} belongs to another user; refusing to use it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        if created or path.name.startswith(("sidecar", "run")):
            os.chmod(path, 0o700)
        else:
            raise ConfigError(
                f"socket directory {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                "choose a private directory (mode 0700) for the socket"
            )


def socket_is_live(path: Path) -> bool:
    return socket_holder(path) is not None


def socket_holder(path: Path) -> str | None:
    """Who answers on the socket: ``pid N`` (or ``a process`` where the platform does not say);
    None when nothing does."""
    peer = socket_peer(path)
    return None if peer is None else peer[0]


def holder_health(path: Path, timeout: float = 3.0) -> dict[str, Any] | None:
    """The health of the daemon of this user answering on the socket (its home and configuration
    file tell whether it serves this home); None when nothing of this user answers a health
    request in time (another user's process is sent nothing)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    data = b""
    try:
        probe.connect(str(path))
        if peer_uid(probe) not in (None, os.getuid()):
            return None
        probe.sendall(request_frame(Request("health", {}, "holder")))
        while not data.endswith(b"\n") and (chunk := probe.recv(1 << 16)):
            data += chunk
    except OSError:
        return None
    finally:
        probe.close()
    try:
        answer = parse_response(data)
    except SidecarError:
        return None
    result = answer.get("result")
    return result if answer.get("ok") and isinstance(result, dict) else None


def bind_socket(path: Path) -> socket.socket:
    """Bind the listening socket; a live one means another daemon, a dead one is a crash leftover."""
    ensure_private_dir(path.parent)
    if path.exists() or path.is_symlink():
        if socket_is_live(path):
            raise DaemonRunningError(f"another sidecar daemon is already serving {path}")
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ConfigError(f"{path} exists and is not a socket; refusing to replace it")
        log.info("stale_socket_removed path=%s", path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise DaemonRunningError(f"socket {path} is in use") from exc
        raise ConfigError(f"cannot bind socket {path}: {exc.strerror}") from exc
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(socket.SOMAXCONN)  # bursts of connecting clients queue instead of failing
    sock.setblocking(False)
    return sock


class _Lane:
    """A thread pool for one kind of request, replaced when every worker is stuck."""

    def __init__(self, name: str, workers: int) -> None:
        self.name, self.workers = name, workers
        self.pool = self._new_pool()
        self.stuck = 0
        self._lock = threading.Lock()

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)

    def overran(self, fut: Future[bytes]) -> None:
        """A request ran past its time bound: count it until it ends; a fresh pool if all are."""
        with self._lock:
            self.stuck += 1
            if self.stuck >= self.workers:
                log.error("request_pool_replaced lane=%s stuck=%d", self.name, self.stuck)
                self.pool.shutdown(wait=False)
                self.pool = self._new_pool()
                self.stuck = 0
                return
        fut.add_done_callback(self._ended)

    def _ended(self, _fut: Future[bytes]) -> None:
        with self._lock:
            self.stuck = max(0, self.stuck - 1)


class _Once:
    """A callable that runs ``fn`` on its first call only, from whichever thread calls first."""

    def __init__(self, fn: Callable[[], object] | None) -> None:
        self._fn = fn
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            fn, self._fn = self._fn, None
        if fn is not None:
            fn()


class Server:
    def __init__(
        self,
        dispatch: Dispatch,
        *,
        max_frame: int,
        workers: int,
        idle_timeout: float,
        max_connections: int = 1024,
        max_buffered: int = 64 << 20,
        request_timeout: float = 120.0,
        write_workers: int = 2,
        foreground: Foreground = FOREGROUND,
        drain_timeout: float = STOP_DRAIN_S,
    ) -> None:
        self.dispatch = dispatch
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_buffered = max_buffered
        self.request_timeout = request_timeout
        self.drain_timeout = drain_timeout
        self.stop_clock = StopClock()  # the daemon's own, shared with its shutdown
        # Set when a stop begins (a threading event: tests in other threads wait for it).
        self.stopping = threading.Event()
        # The answer of every request taken up that someone still waits for: what a stop drains.
        # One answered ``timeout`` (requestTimeoutSeconds) or whose client hung up is dropped: a
        # read hung on a share hours ago kept every later stop waiting its full drain. (A write
        # still running holds up the stores' close all the same: see ``Dispatch.after_running``.)
        self._answers: dict[asyncio.Future[bytes], Request] = {}
        self.lanes = {
            "read": _Lane("request", workers),
            "write": _Lane("write", write_workers),
            "health": _Lane("health", 2),
            "index": _Lane("index", 2),
            # A reload waits for the model it tries again (up to 20 s): not in a write worker, with
            # memory writes queued behind it. Reloads run one at a time anyway (the reload lock).
            "reload": _Lane("reload", 1),
        }
        self.foreground = foreground
        self.connections = 0
        self.buffered = 0  # bytes of unfinished frames held, over every connection
        # Connections waiting for a request with nothing buffered, oldest first (dicts keep order).
        self._idle: dict[asyncio.StreamWriter, None] = {}
        # Every open connection's handler task and writer: Python 3.11's server leaves them open
        # when it closes, and the loop's end then cancels each one with an ERROR and a traceback.
        self._open: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        # Requests whose client hung up while a worker ran them, still timed (see ``_run``).
        self._watches: set[asyncio.Task[None]] = set()
        self._uid = os.getuid()
        self._log_refused_peer: dict[int, Throttled] = {}  # by uid: a second user is named too
        self._log_refused = Throttled(
            logging.WARNING, "connection_refused reason=too many connections limit=%d"
        )
        self._log_evicted = Throttled(
            logging.INFO, "connection_closed reason=connection limit reached, idle the longest"
        )

    def call(self, req: Request) -> bytes:
        """Run one request; every failure becomes an error frame, never a dropped connection."""
        try:
            return ok_frame(req.id, self.dispatch(req))
        except SidecarError as exc:
            return error_frame(req.id, exc.code, str(exc))
        except BaseException as exc:  # also a native library's panic (pyo3 raises it as BaseException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            log.exception("request_failed op=%s", req.op)
            return error_frame(
                req.id, "internal", f"internal error while running {quoted(req.op)}; see the daemon log"
            )

    async def run(self, req: Request, answer: asyncio.Future[bytes] | None = None) -> bytes:
        """Run a request on its lane, answering ``timeout`` if it overruns its bound. A read
        request counts as foreground from its arrival to its reply: write-side and background
        work yields the cores to it (``sidecar.runtime.foreground``). ``answer``: its future
        from ``_take_up`` when the caller took it up already."""
        if answer is None:
            answer = self._take_up(req)
        if req.op in OWN_LANE_OPS:
            return await self._run(self.lanes[OWN_LANE_OPS[req.op]], req, answer)
        if req.op in WRITE_OPS:
            return await self._run(self.lanes["write"], req, answer)
        with contextlib.ExitStack() as claim:
            claim.enter_context(self.foreground.serving())
            return await self._run(self.lanes["read"], req, answer, claim)

    async def _run(
        self,
        lane: _Lane,
        req: Request,
        answer: asyncio.Future[bytes],
        claim: contextlib.ExitStack | None = None,
    ) -> bytes:
        fut = lane.pool.submit(self.call, req)
        self._settle(fut, answer)
        deadline = asyncio.get_running_loop().time() + self.request_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(answer), self.request_timeout)
        except asyncio.CancelledError:
            self._answers.pop(answer, None)  # nobody waits for it: a stop does not either
            # Its client hung up: a read still queued is dropped before a worker starts it. A write
            # taken up is applied whole all the same (it runs, or not, as one handler call).
            if req.op in WRITE_OPS or not fut.cancel():
                # Running (or a write): it still holds a worker, so it is still timed, or a hung
                # native call would hold the lane for good with nobody counting it as stuck. A read
                # keeps its foreground claim until its worker ends (or overruns): background work
                # yielded no more to a search still computing.
                release = _Once(claim.pop_all().close if claim is not None else None)
                fut.add_done_callback(lambda _fut: release())
                watch = asyncio.get_running_loop().create_task(
                    self._overrun_watch(lane, req, fut, deadline, release)
                )
                self._watches.add(watch)
                watch.add_done_callback(self._watches.discard)
            raise
        except TimeoutError:
            self._answers.pop(answer, None)  # answered: a stop does not wait for it
            self._overran(lane, req, fut)
            return error_frame(
                req.id,
                "timeout",
                f"{quoted(req.op)} did not finish within {self.request_timeout:g} s "
                "(server.requestTimeoutSeconds); a write may still complete, check before retrying",
            )

    def _take_up(self, req: Request) -> asyncio.Future[bytes]:
        """The future of ``req``'s answer, registered at once for a stop to drain: the frame its
        worker ends with, or the one a stop answers it with when it outlasts the drain (a future
        of its own: one wrapping the worker's cannot be answered before it ends)."""
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._answers[answer] = req
        answer.add_done_callback(self._answered)
        return answer

    @staticmethod
    def _settle(fut: Future[bytes], answer: asyncio.Future[bytes]) -> None:
        loop = answer.get_loop()

        def settle(done: Future[bytes]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has ended: nobody waits any more
                loop.call_soon_threadsafe(_copy_result, done, answer)

        fut.add_done_callback(settle)

    def _answered(self, answer: asyncio.Future[bytes]) -> None:
        self._answers.pop(answer, None)

    async def _drain(self) -> None:
        """A stop begins: requests from now on are refused (``_loop``); those taken up get
        ``drain_timeout`` to end, then the ones still running are answered ``timeout`` (their
        worker runs on: the daemon closes its stores only once it ends)."""
        self.stopping.set()
        pending = [answer for answer in self._answers if not answer.done()]
        if not pending:
            return
        most = self.stop_clock.left(self.drain_timeout)
        log.info("daemon_draining requests=%d seconds=%.0f", len(pending), most)
        _done, late = await asyncio.wait(pending, timeout=most)
        for answer in late:
            req = self._answers.get(answer)
            if req is None or answer.done():
                continue
            log.warning("request_outlasted_stop op=%s seconds=%.0f", req.op, most)
            answer.set_result(
                error_frame(
                    req.id,
                    "timeout",
                    f"{quoted(req.op)} did not finish within the {most:.0f} s the daemon's "
                    "stop waits for it; a write may still complete, check before retrying",
                )
            )

    async def _overrun_watch(
        self, lane: _Lane, req: Request, fut: Future[bytes], deadline: float, release: _Once
    ) -> None:
        """Time a request nobody waits for any more, as ``_run`` would have (``call`` turns its
        failures into frames, so the future only ends, is cancelled or overruns). Past its bound
        its foreground claim is let go, as a reply would have (a hung call is nobody's foreground)."""
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), remaining)
        except TimeoutError:
            release()
            self._overran(lane, req, fut)
        except asyncio.CancelledError:  # serving stops
            release()
            raise

    def _overran(self, lane: _Lane, req: Request, fut: Future[bytes]) -> None:
        log.error("request_timeout op=%s seconds=%g", req.op, self.request_timeout)
        lane.overran(fut)

    async def serve(self, listener: socket.socket, stop: asyncio.Event) -> None:
        server = await asyncio.start_unix_server(self._client, sock=listener, limit=_READ_CHUNK)
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), _FLUSH_LOGS_S)
                for line in self._throttled():
                    line.flush()
            self.stop_clock.begin()
            await self._drain()
            # The connections whose requests were just answered send their answer and close
            # (``_loop``); the idle ones are closed below.
            sending = [task for task, writer in self._open.items() if writer not in self._idle]
            if sending:
                await asyncio.wait(sending, timeout=max(self.stop_clock.left(_SEND_ANSWERS_S), _LAST_WAIT_S))
        finally:
            self.stopping.set()
            left = self.stop_clock.left
            server.close()
            for writer in self._open.values():
                writer.close()
            tasks = list(self._open)
            for task in tasks:
                task.cancel()
            # Cancelled, they end at once: these bounds are for a hang, and share the stop's.
            if tasks:
                await asyncio.wait(tasks, timeout=max(left(5.0), _LAST_WAIT_S))
            watches = list(self._watches)  # also those the cancelled connections just left
            for watch in watches:
                watch.cancel()
            if watches:
                await asyncio.wait(watches, timeout=max(left(1.0), _LAST_WAIT_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), max(left(5.0), _LAST_WAIT_S))
            for lane in self.lanes.values():
                lane.pool.shutdown(wait=False, cancel_futures=True)

    def _throttled(self) -> list[Throttled]:
        return [self._log_refused, self._log_evicted, *self._log_refused_peer.values()]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._open[task] = writer
        try:
            sock = writer.get_extra_info("socket")
            uid = peer_uid(sock) if sock is not None else None
            if uid is not None and uid != self._uid:
                if uid not in self._log_refused_peer:
                    self._log_refused_peer[uid] = Throttled(logging.WARNING, "peer_refused uid=%s")
                self._log_refused_peer[uid](uid)
                await self._send(
                    writer, error_frame(None, "forbidden", "this daemon serves only its own user")
                )
                return
            if self.connections > self.max_connections and not self._evict_idle():
                self._log_refused(self.max_connections)
                await self._send(
                    writer,
                    error_frame(
                        None,
                        "busy",
                        f"too many open connections (server.maxConnections: {self.max_connections}); "
                        "close idle ones or retry later",
                    ),
                )
                return
            await self._loop(reader, writer)
        except (ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:  # serving stops: the connection closes quietly
            pass
        finally:
            self.connections -= 1
            if task is not None:
                self._open.pop(task, None)
            self._idle.pop(writer, None)
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest (it may reconnect); False if none is idle."""
        if not self._idle:
            return False
        writer = next(iter(self._idle))
        del self._idle[writer]
        self._log_evicted()
        with contextlib.suppress(OSError, RuntimeError):
            writer.write(
                error_frame(None, "busy", "closed to make room for new connections (server.maxConnections)")
            )
            writer.close()
        return True

    async def _loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = bytearray()
        try:
            while True:
                line = await self._next_line(reader, writer, buf)
                if line is None:
                    return
                if not line.strip():
                    continue
                try:
                    req = parse_request(line)
                except SidecarError as exc:
                    await self._send(writer, error_frame(request_id_of(line), exc.code, str(exc)))
                    continue
                if self.stopping.is_set():
                    await self._send(writer, _stopping_frame(req))
                    return
                if req.op not in WRITE_OPS and _peer_closed(writer):
                    return  # sent and hung up at once: nobody reads the answer
                # Taken up in the same step as the check of ``stopping`` above: a stop beginning
                # before its task first runs drains it (it was missed, registered a turn later).
                taken = self._take_up(req)
                try:
                    answer = await self._unless_hung_up(self.run(req, taken), reader, writer, buf)
                finally:
                    self._answers.pop(taken, None)  # answered, or its client hung up
                if answer is None:
                    return
                await self._send(writer, answer)
                if self.stopping.is_set():
                    return  # answered during a stop: the connection closes
        finally:
            self.buffered -= len(buf)

    async def _unless_hung_up(
        self,
        request: Coroutine[Any, Any, bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        buf: bytearray,
    ) -> bytes | None:
        """The request's answer, or None once its client has gone (closed or reset): the request
        is then cancelled (a queued read never reaches a worker) and the connection stops counting
        against ``server.maxConnections``. Abandoned searches piled up behind live ones before
        (1,100 of them made the next search take 19 s). Input that arrives meanwhile is kept in
        ``buf`` for the next request."""
        running = asyncio.ensure_future(request)
        watch = asyncio.ensure_future(self._watch_hang_up(reader, writer, buf))
        try:
            await asyncio.wait({running, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done() and watch.result():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
                return None
            return await running
        finally:
            watch.cancel()
            running.cancel()

    async def _watch_hang_up(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, buf: bytearray
    ) -> bool:
        """True when the client hangs up while its request runs; False (after reading as much as
        the bounds allow) when it sends more than a frame or the budget can hold, to be refused
        after the answer. A half-close (``shutdown(SHUT_WR)``, as ``nc -N`` does) is no hang-up:
        that client still reads its answer, and is watched on for its close (``_closed_later``)."""
        while len(buf) <= self.max_frame and self.buffered + _READ_CHUNK <= self.max_buffered:
            try:
                chunk = await reader.read(_READ_CHUNK)
            except ConnectionError:
                return True
            if not chunk:
                return await _closed_later(writer)
            buf += chunk
            self.buffered += len(chunk)
        return False

    async def _next_line(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, buf: bytearray
    ) -> bytes | None:
        """The next complete line, or None to close (hang-up, idle, too large, over budget).
        ``buf`` holds what was read past it; its size is counted in ``self.buffered``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.idle_timeout  # a frame, once begun, must end in this time too
        while True:
            nl = buf.find(b"\n")
            if 0 <= nl <= self.max_frame:  # a line of up to max_frame bytes, its newline not counted
                line = bytes(buf[: nl + 1])
                del buf[: nl + 1]
                self.buffered -= nl + 1
                return line
            if nl > self.max_frame or len(buf) > self.max_frame:
                await self._send(
                    writer,
                    error_frame(
                        None,
                        "frame_too_large",
                        f"request exceeds {self.max_frame} bytes (server.maxFrameBytes; a memory note "
                        "is limited further by memory.maxNoteBytes: split a larger one)",
                    ),
                )
                await self._discard(reader)
                return None
            if not buf:
                self._idle[writer] = None
            try:
                chunk = await asyncio.wait_for(reader.read(_READ_CHUNK), max(deadline - loop.time(), 0.001))
            except TimeoutError:
                return None
            finally:
                self._idle.pop(writer, None)
            if not chunk:
                return None  # hung up (mid-frame: nothing to answer)
            if self.buffered + len(chunk) > self.max_buffered:
                log.warning(
                    "connection_refused reason=unfinished input over limit limit=%d", self.max_buffered
                )
                await self._send(
                    writer,
                    error_frame(
                        None,
                        "busy",
                        f"too much unfinished input across connections (server.maxBufferedBytes: "
                        f"{self.max_buffered}); send whole lines, retry later",
                    ),
                )
                return None
            buf += chunk
            self.buffered += len(chunk)

    async def _discard(self, reader: asyncio.StreamReader) -> None:
        """Read away the rest of an oversized frame for a moment before closing: closing with unread
        data resets the connection, and the client could lose the error it was just sent."""
        deadline = asyncio.get_running_loop().time() + 2.0
        with contextlib.suppress(TimeoutError, ConnectionError):
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                if not await asyncio.wait_for(reader.read(1 << 16), left):
                    return

    async def _send(self, writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame)
        await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT)


def _stopping_frame(req: Request) -> bytes:
    return error_frame(req.id, "busy", stopping_message(quoted(req.op)))


def _copy_result(done: Future[bytes], answer: asyncio.Future[bytes]) -> None:
    """``done``'s outcome into ``answer``, unless a stop answered it already."""
    if answer.done():
        return
    if done.cancelled():
        answer.cancel()
    elif (exc := done.exception()) is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(done.result())


async def _closed_later(writer: asyncio.StreamWriter) -> bool:
    """After end of input: True once the peer closes for good (a half-closed client that then
    gives up, on its own timeout: its queued read ran for nobody); runs until cancelled, or False
    where a close cannot be told. Asked by polling (a reader on the socket would spin: its end of
    input stays readable), every 50 ms at first, every 0.5 s at most."""
    if _peer_closed(writer):
        return True
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(select, "poll"):
        return False
    wait = 0.05
    while not _peer_closed(writer):
        await asyncio.sleep(wait)
        wait = min(wait * 2, 0.5)
    return True


def _peer_closed(writer: asyncio.StreamWriter) -> bool:
    """After end of input: has the peer closed its end for good (not only for writing)? Linux
    flags that as POLLHUP on a Unix socket (tested), macOS too by its poll(2) (not tested here);
    where that cannot be told, assume the client still reads (its request runs as before)."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLOUT)
    return any(events & (select.POLLHUP | select.POLLERR) for _fd, events in poller.poll(0))
