"""The socket loop: frame -> handler -> frame, on a private Unix socket (no TCP, ever).

The socket lives in a directory of mode 0700, has mode 0600, and every connection's peer UID is
checked (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS). Requests run on a small thread pool so a
slow search never stalls the loop; a frame over the limit is answered with an error and the
connection closed. Imports protocol and errors only: handlers arrive as a callable.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sidecar.errors import ConfigError, DaemonRunningError, SidecarError
from sidecar.protocol import Request, error_frame, ok_frame, parse_request, request_id_of

log = logging.getLogger(__name__)

Dispatch = Callable[[Request], dict[str, Any]]
_WRITE_TIMEOUT = 30.0
_LOCAL_PEERCRED = 0x001  # macOS <sys/un.h>
_SOL_LOCAL = 0


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700, or check that an existing one is ours and private."""
    created = not path.exists()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
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


def peer_uid(sock: socket.socket) -> int | None:
    """UID of the process at the other end, or None where the platform cannot tell."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            return int(uid)
        if sys.platform == "darwin":
            # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
            raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 76)
            return int(struct.unpack_from("Ii", raw)[1])
    except OSError:
        return None
    return None


def socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


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


class Server:
    def __init__(self, dispatch: Dispatch, *, max_frame: int, workers: int, idle_timeout: float) -> None:
        self.dispatch = dispatch
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="request")
        self.connections = 0
        self._uid = os.getuid()

    def call(self, req: Request) -> bytes:
        """Run one request; every failure becomes an error frame, never a dropped connection."""
        try:
            return ok_frame(req.id, self.dispatch(req))
        except SidecarError as exc:
            return error_frame(req.id, exc.code, str(exc))
        except Exception:
            log.exception("request_failed op=%s", req.op)
            return error_frame(
                req.id, "internal", f"internal error while running {req.op!r}; see the daemon log"
            )

    async def serve(self, listener: socket.socket, stop: asyncio.Event) -> None:
        server = await asyncio.start_unix_server(self._client, sock=listener, limit=self.max_frame)
        try:
            await stop.wait()
        finally:
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 5.0)
            self.pool.shutdown(wait=False, cancel_futures=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            sock = writer.get_extra_info("socket")
            uid = peer_uid(sock) if sock is not None else None
            if uid is not None and uid != self._uid:
                log.warning("peer_refused uid=%s", uid)
                await self._send(
                    writer, error_frame(None, "forbidden", "this daemon serves only its own user")
                )
                return
            await self._loop(reader, writer)
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), self.idle_timeout)
            except TimeoutError:
                return
            except ValueError:  # the line exceeded the frame limit
                await self._send(
                    writer, error_frame(None, "frame_too_large", f"request exceeds {self.max_frame} bytes")
                )
                await self._discard(reader)
                return
            if not line:
                return
            if not line.endswith(b"\n"):
                return  # the client hung up mid-frame: nothing to answer
            if not line.strip():
                continue
            try:
                req = parse_request(line)
            except SidecarError as exc:
                await self._send(writer, error_frame(request_id_of(line), exc.code, str(exc)))
                continue
            frame = await loop.run_in_executor(self.pool, self.call, req)
            await self._send(writer, frame)

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
