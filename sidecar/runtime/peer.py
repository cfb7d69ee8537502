"""Who is at the other end of a Unix socket: the daemon checks its clients with it, and every
client checks the daemon with it before sending anything (a socket path another local user
created first, e.g. the ``/tmp/sidecar-<uid>`` fallback, must not receive queries or notes).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
from pathlib import Path

_LOCAL_PEERCRED = 0x001  # macOS <sys/un.h>
_SOL_LOCAL = 0


def peer_uid(sock: socket.socket) -> int | None:
    """UID of the process at the other end, or None where the platform cannot tell."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            return int(uid)
        if sys.platform == "darwin":
            # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
            # (what getpeereid(3) reads there)
            raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 76)
            return int(struct.unpack_from("Ii", raw)[1])
    except OSError:
        return None
    return None


def peer_pid(sock: socket.socket) -> int | None:
    """PID of the process at the other end, or None where the platform cannot tell (Linux only)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[0])


def socket_peer(path: Path) -> tuple[str, int | None] | None:
    """Who answers on the socket: ``pid N`` (or ``a process`` where the platform does not say)
    and the user id of its process (None where the platform does not say); None when nothing
    answers."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
        pid, uid = peer_pid(probe), peer_uid(probe)
    except OSError:
        return None
    finally:
        probe.close()
    return (f"pid {pid}" if pid else "a process"), uid


def path_owner_problem(path: Path, uid: int) -> str | None:
    """Why the socket file ``path`` may be another user's, judged from the file system when the
    peer's credentials cannot be read: the socket must be ``uid``'s, in a folder of ``uid`` that
    nobody else may write (else another user could put their own socket there); None if fine."""
    try:
        st = os.lstat(path)
        folder = os.lstat(path.parent)
    except OSError as exc:
        return f"it cannot be checked: {exc.strerror or exc}"
    if not stat.S_ISSOCK(st.st_mode):
        return "it is not a socket"
    if st.st_uid != uid:
        return f"the socket belongs to uid {st.st_uid}"
    if folder.st_uid != uid:
        return f"its folder {path.parent} belongs to uid {folder.st_uid}"
    if stat.S_IMODE(folder.st_mode) & 0o022:
        return f"its folder {path.parent} may be written by others (mode {stat.S_IMODE(folder.st_mode):o})"
    return None
