"""Who holds a home's index when no daemon answers on the socket a command looks at: a daemon
started with another socket (a service installed from a shell without XDG_RUNTIME_DIR), or an
offline `sidecar index`. `status` and `doctor` name it and its socket instead of advising a
second daemon, which would exit 4. Light: imports config and the file-system deadline only."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
from pathlib import Path

from sidecar.config import Config
from sidecar.vault.timeout import run_with_timeout


def lock_holder(cfg: Config) -> str | None:
    """Who holds the index lock (a daemon or an offline `sidecar index`), or None (also when the
    lock cannot be looked at: the home check says why)."""
    lock = cfg.index_dir / ".lock"
    try:
        if not lock.is_file():
            return None
        with lock.open("r") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released at once: a probe only
            except BlockingIOError:
                return fh.read().strip() or "another process"
            fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError:
        return None
    return None


def listening_on(holder: str) -> list[str]:
    """The Unix socket paths the process named by a lock ("pid N") listens on (Linux, best
    effort: another user's process or another system shows none)."""
    pid = holder.removeprefix("pid ").strip()
    if not pid.isdigit():
        return []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        inodes = set()
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        table = Path("/proc/net/unix").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in table.splitlines()[1:]:
        # Num RefCount Protocol Flags Type St Inode Path; flag 0x10000: a listening socket.
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[6] in inodes and int(fields[3], 16) & 0x10000:
            out.append(fields[7])
    return out


def other_daemon(cfg: Config) -> str | None:
    """When no daemon answers on this command's socket but one holds this home's index (one
    started with another socket, a service installed from a shell without XDG_RUNTIME_DIR): what
    to say instead of "start it", which would start a second daemon that exits 4. None otherwise."""
    held, stuck = run_with_timeout(lambda: lock_holder(cfg), cfg.watch.probe_timeout_seconds, "lock")
    if stuck is not None or held is None:
        return None
    sockets = listening_on(held)
    where = f" and listens on {', '.join(sockets)}" if sockets else ""
    use = (
        f"use its socket (--socket {shlex.quote(sockets[0])}, or `socket:` in the configuration file)"
        if sockets
        else "use its socket (--socket, or `socket:` in the configuration file)"
    )
    return (
        f"the index {cfg.index_dir} is held by {held}{where}: a daemon started with another socket "
        f"(or XDG_RUNTIME_DIR), or a `sidecar index` run. Do not start a second one: {use}, or run "
        "`sidecar service install` again from this shell and restart the service"
    )
