"""Who holds a home's index when no daemon answers on the socket a command looks at: a daemon
started with another socket (a service installed from a shell without XDG_RUNTIME_DIR), or an
offline `sidecar index`. `status` and `doctor` name it and its socket instead of advising a
second daemon, which would exit 4; a command run while a daemon starts (it holds the index, its
socket does not answer yet) waits for it. Light: imports config, the errors and the file-system
deadline only."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import DaemonStartingError
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


# How long a command waits for a daemon that holds the index but does not answer yet: it takes the
# lock, then binds its socket and opens its stores (a second or two; several on a loaded machine or
# a big index), and a command run in that window said "another sidecar daemon is already serving"
# (`index`) or "not running ... started with another socket" (`status`) and did nothing.
START_WAIT_S = 30.0
_POLL_S = 0.2
_SAY_EVERY_S = 5.0


def starting_daemon(cfg: Config) -> str | None:
    """Who holds this home's index when it is a daemon that listens on no socket but this
    command's (``pid N``: one starting, before its socket answers), else None: no holder, an
    offline `sidecar index` run, or a daemon listening on another socket (``other_daemon``)."""
    held, stuck = run_with_timeout(lambda: lock_holder(cfg), cfg.watch.probe_timeout_seconds, "lock")
    if stuck is not None or held is None or not held.startswith("pid "):
        return None
    sockets = listening_on(held)  # none where the platform does not say (not Linux): waited for
    if sockets and str(cfg.socket_path) not in sockets:
        return None
    return held


def _answers(path: Path) -> bool:
    """Whether a daemon takes connections on the socket at ``path`` (bound: its answer follows once
    its stores are open, which a client's call waits for)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        return False
    finally:
        sock.close()
    return True


def say_waiting(line: str) -> None:
    """A wait's progress, on stderr (stdout is the command's answer)."""
    print(f"sidecar: {line}", file=sys.stderr, flush=True)


def wait_for_starting_daemon(cfg: Config, say: Callable[[str], None]) -> bool:
    """Wait (``START_WAIT_S`` at most, ``say`` told at once and every few seconds) for the daemon
    starting on this home (``starting_daemon``) to take connections on the socket: True once it
    does, False when no daemon is starting (none holds the index, or it stopped meanwhile). A
    daemon that holds the index and takes none in time is an error saying so and what to do."""
    held = starting_daemon(cfg)
    if held is None:
        return False
    started = time.monotonic()
    said = started
    say(
        f"the daemon ({held}) holds the index and is starting: waiting up to {START_WAIT_S:g} s for it "
        f"to answer on {cfg.socket_path}"
    )
    while not _answers(cfg.socket_path):
        now = time.monotonic()
        if now - started >= START_WAIT_S:
            raise DaemonStartingError(
                f"the daemon ({held}) holds the index {cfg.index_dir} but did not answer on "
                f"{cfg.socket_path} within {START_WAIT_S:g} s: it may still be starting (a big index, a "
                "loaded machine) or hang; run the command again in a moment, and see its log "
                "(journalctl --user -u sidecar, or the terminal of `sidecar serve`) if it stays so. "
                "Do not start a second daemon: it would exit, the index being in use"
            )
        if starting_daemon(cfg) != held:  # it stopped (or another took its place): not waited for
            return False
        if now - said >= _SAY_EVERY_S:
            said = now
            say(f"still waiting for the daemon ({held}) to answer ({now - started:.0f} s)")
        time.sleep(_POLL_S)
    return True
