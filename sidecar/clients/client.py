"""Blocking socket client with typed errors. Light: imports protocol, errors and the peer check
only, so the CLI and the MCP shim start fast and never load a model or open an index.

Before anything is sent, the server must be this user's (its UID from the socket's credentials,
else from the socket file and its folder): whoever listens on the path gets every query and note,
and another user can create a path first (``/tmp/sidecar-<uid>/…`` when the home's is too long).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import itertools
import os
import shlex
import socket
import struct
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from sidecar.contracts.errors import (
    DaemonNotRunningError,
    DaemonStartingError,
    DaemonUnreachableError,
    NoAnswerError,
    ProtocolError,
    RemoteError,
)
from sidecar.contracts.protocol import Request, check_values, parse_response, request_frame
from sidecar.runtime.lockstate import STALE, STARTING, STOPPING
from sidecar.runtime.peer import path_owner_problem, peer_uid

_MAX_RESPONSE = 256 * 1024 * 1024
_CONNECT_TRIES = 10
# The sockets whose daemon refused ``today`` (one older than it), by the socket file's identity
# (path, inode, status change time): not sent there again by this process (the MCP shim opens a
# client per call; asking each time cost two requests a call). A daemon restarted after an
# upgrade binds a new socket file, which is asked with it again.
_REFUSES_TODAY: set[tuple[str, int, int]] = set()


def local_today() -> str:
    """The asker's local date, sent as ``today`` with the ops that read time phrases: "today",
    "gestern" are the asker's days, not those of a daemon in another time zone."""
    return dt.date.today().isoformat()


def refuses_today(exc: RemoteError) -> bool:
    """The refusal of a daemon older than ``today``: it names it, alone, as unknown (the op was
    refused before anything was done, so asking again without it is safe)."""
    return exc.code == "bad_request" and str(exc).startswith("unknown parameter(s) 'today';")


def serve_hint(config_file: Path | None, flags: Sequence[str] = ()) -> str:
    """How to start the daemon this client looks for: with the file whose socket it knocks at and
    the ``flags`` (``--home``, ``--socket``) the client was given; without them a daemon started
    as told listens on another socket."""
    words = ["sidecar", "serve", *(["--config", str(config_file)] if config_file is not None else []), *flags]
    if config_file is None:
        words += ["--vault", "PATH"]
    service = installed_service_start()
    return f"`{shlex.join(words)}`" + (f" (or `{service}`)" if service else "")


def installed_service_start() -> str | None:
    """The command that starts the installed user service, None when none is installed: the
    hint named `systemctl --user start sidecar` to a person who had never installed one (and on
    macOS too)."""
    import sys

    from sidecar.clients.service import LABEL, UNIT  # only on this error path: the client stays light

    try:
        if sys.platform == "darwin":
            plist = Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"
            return f"launchctl kickstart gui/$(id -u)/{LABEL}" if plist.is_file() else None
        xdg = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
        return "systemctl --user start sidecar" if (base / "systemd" / "user" / UNIT).is_file() else None
    except (OSError, RuntimeError):  # no home to look in (RuntimeError: none can be told)
        return None


class StartWatch(Protocol):
    """Asked by ``Client`` (``lockholder.StartWatch``, set by the CLI for its home) only when the
    socket does not answer: ``absent`` when it refuses or is not there (a start is waited for,
    or said), ``unanswered`` when connected with no answer yet (a start binds its socket before
    it serves), ``why_not`` for the words (and their kind) of the refusal. A daemon that answers
    serves, whatever its lock file says."""

    wait: bool

    def absent(self, timeout: float) -> bool: ...

    def unanswered(self, timeout: float) -> tuple[str, str] | None: ...

    def say(self, line: str) -> None: ...

    def why_not(self) -> tuple[str, str] | None: ...


# An answer not come within this long has the lock file looked at (a daemon starting queues the
# request until it serves). Requests that change something are never given up on there: queued,
# they are done once it serves, and a retry would do them twice.
_FIRST_ANSWER_S = 1.0
_CHANGES = frozenset({"write", "edit", "delete", "index", "reload"})
_AGAIN = 3  # connections tried after waiting for a start (a restart may be waited for between)


_watch: StartWatch | None = None


def watch_starts(watch: StartWatch | None) -> None:
    """Have every connection of this process look at the home's lock (``watch``), or none."""
    global _watch  # one setting of the process, made at the CLI's edge
    _watch = watch


class Client:
    def __init__(
        self,
        socket_path: Path,
        *,
        timeout: float = 60.0,
        agent: str | None = None,
        config_file: Path | None = None,
        serve_flags: Sequence[str] = (),
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.agent = agent
        self.config_file = config_file  # named in the hint when no daemon listens
        self.serve_flags = tuple(serve_flags)  # so are these (--home, --socket)
        self._sock: socket.socket | None = None
        self._buf = b""
        self._ids = itertools.count(1)
        self._socket_id: tuple[str, int, int] | None = None  # of the connected socket file

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        deadline = time.monotonic() + self.timeout
        for again in range(_AGAIN + 1):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                self._connect(sock)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                left = deadline - time.monotonic()
                if _watch is not None and again < _AGAIN and left > 0 and _watch.absent(left):
                    continue  # a start waited for: its socket answers now
                raise self._not_running() from exc
            except OSError as exc:  # no permission to its folder or the socket: not ours, at any rate
                sock.close()
                raise DaemonUnreachableError(f"cannot connect to {self.socket_path}: {exc.strerror}") from exc
        try:
            check_peer(sock, self.socket_path)
        except DaemonUnreachableError:
            sock.close()
            raise
        self._sock = sock
        self._socket_id = self._socket_file()

    def _connect(self, sock: socket.socket) -> None:
        for attempt in range(_CONNECT_TRIES):
            try:
                sock.connect(str(self.socket_path))
                return
            except BlockingIOError:  # the daemon's accept queue is full for a moment
                if attempt == _CONNECT_TRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _not_running(self) -> DaemonNotRunningError:
        said = _watch.why_not() if _watch is not None else None
        if said is not None and said[0] != STALE:  # held: by a daemon starting, stopping, or unnamed
            kind, why = said
            error = DaemonStartingError if kind == STARTING else DaemonNotRunningError
            return error(f"no sidecar daemon answers on {self.socket_path}: {why}.")
        return DaemonNotRunningError(
            f"no sidecar daemon is listening on {self.socket_path}"
            + (f" ({said[1]})" if said is not None else "")
            + f". Start it with {serve_hint(self.config_file, self.serve_flags)}."
        )

    def _socket_file(self) -> tuple[str, int, int] | None:
        """The socket file's identity: a daemon restarted since (upgraded, maybe) bound a new one."""
        try:
            st = os.stat(self.socket_path)
        except OSError:
            return None
        return str(self.socket_path), st.st_ino, st.st_ctime_ns

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def call(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer; raise RemoteError if the daemon refused it.

        A daemon older than the asker's date (``today``) refuses it as unknown until it is
        restarted: the request is sent once more without it, and ``today`` is no longer sent by
        this process to that socket file (its time phrases then count from the daemon's own date,
        as they did); the socket file of a daemon restarted since is asked with it again."""
        params = params or {}
        if "today" not in params:
            return self._call(op, params)
        without = {k: v for k, v in params.items() if k != "today"}
        if (self._socket_id if self._sock is not None else self._socket_file()) in _REFUSES_TODAY:
            return self._call(op, without)
        try:
            return self._call(op, params)
        except RemoteError as exc:
            if not refuses_today(exc):
                raise
        if self._socket_id is not None:
            _REFUSES_TODAY.add(self._socket_id)
        return self._call(op, without)

    def _call(self, op: str, params: dict[str, Any]) -> dict[str, Any]:
        try:  # refused here as the daemon would refuse it (a lone surrogate cannot even be sent)
            check_values(params or {})
            check_values({"agent": self.agent})
        except ProtocolError as exc:
            raise RemoteError(exc.code, str(exc)) from exc
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        req_id = next(self._ids)
        try:
            self._sock.sendall(request_frame(Request(op, params or {}, req_id, self.agent)))
            line = self._answer(op)
        except TimeoutError as exc:  # it has the request: what became of it is not known
            self.close()
            raise NoAnswerError(op, f"the daemon did not answer {op!r} within {self.timeout:g} s") from exc
        except OSError as exc:
            self.close()
            raise DaemonNotRunningError(f"the connection to the daemon broke: {exc}") from exc
        data = parse_response(line)
        if not data.get("ok"):
            err = data.get("error") or {}
            raise RemoteError(str(err.get("code", "error")), str(err.get("message", "request failed")))
        result = data.get("result")
        if not isinstance(result, dict):
            raise ProtocolError("the daemon sent a malformed answer")
        return result

    def _answer(self, op: str) -> bytes:
        """The answer's line. One not come within a moment, its request still unread, has the lock
        file looked at (``StartWatch.unanswered`` decides what it says): a daemon starting (its
        socket bound, its stores opening) is said at once to a command that does not wait, except
        for a change (done once it serves: a retry would do it twice); a command that waits is
        told and waits within its own timeout, as the request does. A daemon stopping never reads
        a request left in its queue: said as a refused connection is."""
        assert self._sock is not None
        if _watch is None or self.timeout <= _FIRST_ANSWER_S:
            return self._readline()
        self._sock.settimeout(_FIRST_ANSWER_S)
        try:
            return self._readline()
        except TimeoutError:
            pass
        finally:
            self._sock.settimeout(self.timeout)
        # Read by the daemon (it serves, busy with it): not a start, whatever its lock says.
        unread = _unread(self._sock)
        said = _watch.unanswered(self.timeout - _FIRST_ANSWER_S) if unread is not False else None
        kind, words = said if said is not None else (None, "")
        if kind == STOPPING and unread and op not in _CHANGES:
            # A stop drains what it took up, then closes its socket: a request left in the queue
            # before that close is never read. Said as a refused connection is, not waited for.
            self.close()
            raise self._not_running()
        if kind == STARTING and not _watch.wait and op not in _CHANGES:
            self.close()
            raise DaemonStartingError(f"{words}; try again in a moment")
        if kind == STARTING and _watch.wait:
            _watch.say(f"{words}, waiting up to {round(self.timeout, 1):g} s for it")
        self._sock.settimeout(max(0.001, self.timeout - _FIRST_ANSWER_S))
        try:
            return self._readline()
        except (TimeoutError, ConnectionError) as exc:
            # Where the queue cannot be asked (``_unread`` None), a stopping daemon's request may
            # have been read (the stop drains it: answered) or not (never read): waited for, and
            # the stop said once its socket closes (the connection ends) or the time is up.
            if kind != STOPPING or op in _CHANGES:
                raise
            self.close()
            raise self._not_running() from exc
        finally:
            if self._sock is not None:
                self._sock.settimeout(self.timeout)

    def _readline(self) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buf:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise ConnectionResetError("the daemon closed the connection")
            self._buf += chunk
            if len(self._buf) > _MAX_RESPONSE:
                raise ProtocolError("answer too large")
        line, _, self._buf = self._buf.partition(b"\n")
        return line


def _unread(sock: socket.socket) -> bool | None:
    """Whether the request still waits in the socket unread: its bytes still count in this end's
    send queue (Linux); a daemon starting leaves it in its accept queue. None where the queue
    cannot be asked (macOS and the BSDs refuse the ioctl on a socket): the lock file then
    decides a start (one reads nothing before it says serving), and a stop is waited for."""
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    except (OSError, AttributeError):
        return None
    return bool(struct.unpack("i", queued)[0] > 0)


def check_peer(
    sock: socket.socket, path: Path, read_uid: Callable[[socket.socket], int | None] = peer_uid
) -> None:
    """Refuse a server that is not this user's (its UID from the connection's credentials; where
    the platform gives none, from the owner and mode of the socket file and its folder)."""
    me = os.geteuid()
    uid = read_uid(sock)
    if uid is None:
        problem = path_owner_problem(path, me)
    else:
        problem = None if uid == me else f"it is served by uid {uid}"
    if problem is not None:
        raise DaemonUnreachableError(
            f"refusing to talk to {path}: {problem} and this user is uid {me}; another user may have "
            "created that path, so nothing was sent. Use a socket in a private folder (--socket, "
            "socket: or SIDECAR_SOCKET), or remove that one"
        )
