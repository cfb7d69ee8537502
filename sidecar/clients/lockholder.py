"""Who holds a home's index when no daemon answers on the socket a command looks at, and in
which phase: a daemon starting (its socket does not answer yet) or stopping (not any more), one
started with another socket (a service installed from a shell without XDG_RUNTIME_DIR), an offline
`sidecar index`, or none (a lock left by a daemon killed or crashed: stale). Commands say that
instead of "start it" (a second daemon would exit 4) or "already serving"; those that need the
daemon wait a bounded time for a start (``StartWatch``), never for a stop or a dead pid. Light:
imports config, the lock record and the file-system deadline only."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import DaemonStartingError
from sidecar.runtime import lockstate
from sidecar.runtime.lockstate import LockView
from sidecar.vault.timeout import run_with_timeout

_POLL_S = 0.1
_SAY_EVERY_S = 5.0
# A lock found free while waiting (its daemon stopped, or died: a SIGTERM to a start that
# could not stop cleanly) is looked at again after this: a restart's next daemon takes it a
# moment later.
_FREE_AGAIN_S = 0.5


def lock_view(cfg: Config, bound: float | None = None) -> LockView | None:
    """This home's lock file and whether it is held (None: none, or it cannot be read; bounded:
    a home on a share that went away hangs a read of its files)."""
    limit = cfg.watch.probe_timeout_seconds if bound is None else min(bound, cfg.watch.probe_timeout_seconds)
    view, stuck = run_with_timeout(lambda: lockstate.look(cfg.index_dir / ".lock"), limit, "lock")
    return None if stuck is not None else view


def lock_holder(cfg: Config) -> str | None:
    """Who holds the index lock (a daemon or an offline `sidecar index`: ``pid N``), or None (also
    when the lock cannot be looked at: the home check says why)."""
    try:
        view = lockstate.look(cfg.index_dir / ".lock")
    except OSError:
        return None
    return _holder(view) if view is not None and view.held else None


def _holder(view: LockView) -> str:
    """The holder's name: the record's, or the pid the system's lock table names when the record
    is an earlier daemon's (a read-only start cannot write its lock file)."""
    if view.holder is not None:
        return f"pid {view.holder}"
    return view.record.who


def phase_words(view: LockView) -> str | None:
    """What the lock says of its daemon, in words; None when it says nothing more than a holder
    (an older daemon's record, `sidecar index`, no record of the holder's own)."""
    said = phase_said(view)
    return None if said is None else said[1]


def phase_said(view: LockView) -> tuple[str, str] | None:
    """``phase_words`` with its kind (``lockstate``'s STARTING, STOPPING, STALE or HELD: a holder
    the file does not name), so that no message's words choose an error."""
    record = view.record
    if view.stale:
        return lockstate.STALE, (
            f"the index lock names {record.who}, said {record.phase} when last written "
            f"{record.age_words()} ago, and that process is no longer running: a stale lock left by "
            "a daemon killed or crashed (nothing holds the index now; the next start catches up)"
        )
    if view.moving == lockstate.STARTING:
        return (
            lockstate.STARTING,
            f"the daemon ({record.who}) is starting, {record.since_words()}: it answers once started",
        )
    if view.moving == lockstate.STOPPING:
        return lockstate.STOPPING, (
            f"the daemon ({record.who}) is stopping, {record.since_words()}: start it again once it "
            "has stopped (a service manager restarting it does so itself)"
        )
    earlier = _earlier_record(view)
    return None if earlier is None else (lockstate.HELD, earlier)


def starting_or_stopping(cfg: Config) -> str | None:
    """What the lock says of this home's daemon when it is starting or stopping, else None."""
    view = lock_view(cfg)
    return None if view is None or view.moving is None else phase_words(view)


def _earlier_record(view: LockView) -> str | None:
    """A held lock whose file names a process of an earlier run (a daemon on an index it may not
    write cannot write its lock file): the holder the system names, or that the file does not."""
    record = view.record
    if not view.held or record.pid is None or view.current:
        return None
    if view.holder is not None:
        return (
            f"the index is held by pid {view.holder}, whose lock file still names {record.who} of an "
            "earlier run (a daemon on an index it may not write cannot write its lock file)"
        )
    if view.alive and record.phase != lockstate.STOPPED:
        return None
    return (
        f"the index is held by a process its lock file does not name (it names {record.who}, not "
        "running here: a daemon of an earlier run, the holder being one on an index it may not write, "
        "which cannot write its lock file; or a daemon in another container)"
    )


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
    view = lock_view(cfg)
    if view is None or not view.held or phase_words(view) is not None:
        return None  # none, or one starting or stopping: said so (``phase_words``)
    held = _holder(view)
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


def say_waiting(line: str) -> None:
    """A wait's progress, on stderr (stdout is the command's answer)."""
    print(f"sidecar: {line}", file=sys.stderr, flush=True)


def _whole(seconds: float) -> str:
    """``45``, ``0.3``: a bound in words (what is left of a timeout is not a round figure)."""
    return f"{round(seconds, 1):g}"


class StartWatch:
    """What a client of this home does when its daemon's socket does not answer: refused or not
    there (``absent``), or connected with no answer yet (``unanswered``: a start binds its socket
    first, then opens its stores), and what it says then (``why_not``). The lock is read only
    then: a daemon that answers serves, whatever its lock says. ``wait``: a daemon starting is
    waited for, within the command's own timeout; otherwise (the prompt hook, the MCP shim's
    calls, status) it is said at once. Never waited for: a stop, a lock whose pid is dead and that
    no one takes again, a lock without a phase (an older daemon: as before)."""

    def __init__(self, cfg: Config, *, wait: bool, say: Callable[[str], None] = say_waiting) -> None:
        self.cfg, self.wait, self.say = cfg, wait, say

    def absent(self, timeout: float) -> bool:
        """The socket refused or is not there. True: a start was waited for (within
        ``timeout``), the socket may answer now; False: the lock says no daemon starts."""
        view = lock_view(self.cfg, timeout)
        if view is None or not view.starting:
            return False
        if not self.wait:
            raise DaemonStartingError(f"{phase_words(view)}; try again in a moment")
        self._wait_for(view, timeout)
        return True

    def unanswered(self, timeout: float) -> tuple[str, str] | None:
        """Connected, but no answer yet: what the lock says of a daemon starting (a request waits
        in its socket's queue until it serves) or stopping (one left in the queue is never read),
        as ``phase_said``'s kind (STARTING or STOPPING) and words; None otherwise (a daemon
        serving, busy)."""
        view = lock_view(self.cfg, timeout)
        return None if view is None or view.moving is None else phase_said(view)

    def _wait_for(self, view: LockView, bound: float) -> None:
        started = time.monotonic()
        self.say(f"{phase_words(view)}, waiting up to {_whole(bound)} s for it")
        said = started
        while True:
            now = time.monotonic()
            if now - started >= bound:
                raise DaemonStartingError(
                    f"the daemon ({view.record.who}) is still starting after {_whole(bound)} s of waiting, "
                    f"{view.record.since_words()}: run the command again in a while (`sidecar status` says "
                    "how far it is; its log says what it does). Do not start a second daemon: it "
                    "would exit, the index being in use"
                )
            if now - said >= _SAY_EVERY_S:
                said = now
                self.say(f"still waiting for the daemon ({view.record.who}): {view.record.phase_words()}")
            time.sleep(_POLL_S)
            seen = lock_view(self.cfg, bound)
            if seen is not None and not seen.held:
                # Let go (stopped), or its pid died: a restart's next daemon takes it in a moment.
                time.sleep(_FREE_AGAIN_S)
                seen = lock_view(self.cfg, bound)
            if seen is None or not seen.starting:
                return  # serving (asked now), or stopped or died meanwhile: the connection says
            view = seen  # another daemon's start (a restart) is waited for in the same bound

    def why_not(self) -> tuple[str, str] | None:
        """Why no daemon answers, from the lock: ``phase_said``'s kind and words; None when it
        says nothing more."""
        view = lock_view(self.cfg, 2.0)
        return None if view is None else phase_said(view)
