"""A child process that ends with the daemon that started it.

A model conversion or an index build left running by a killed daemon would race the next
daemon's own (two writers of one model folder, two commits of one index). On Linux the kernel
kills the child with its parent (``PR_SET_PDEATHSIG``, which also holds under a subreaper such
as a systemd user manager); everywhere, macOS included, a thread watches for the child being
handed to another parent.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

WATCH_SECONDS = 1.0
# The spawning daemon's pid, so that a child that finds another parent knows the daemon died
# before it could start watching (a parent of 1 says nothing: in a container the daemon is 1).
PARENT_ENV = "SIDECAR_PARENT_PID"


def child_env() -> dict[str, str]:
    """The environment for a child that calls ``die_with_parent``."""
    return {**os.environ, PARENT_ENV: str(os.getpid())}


def die_with_parent(code: int = 1, interval: float = WATCH_SECONDS) -> None:
    """End this process (exit ``code``) when its parent ends: at once on Linux, within
    ``interval`` seconds elsewhere; at once when it ended before this call (``child_env``)."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    spawner = os.environ.get(PARENT_ENV, "")
    # Read again after the prctl: a daemon gone before it took effect shows here.
    if spawner.isdigit() and int(spawner) != os.getppid():
        raise SystemExit(code)
    watch_parent(parent, code, interval)


def watch_parent(parent: int, code: int, interval: float = WATCH_SECONDS) -> None:
    """A daemon thread that exits the process with ``code`` once its parent is no longer
    ``parent`` (an orphan is re-parented to init, launchd or a subreaper)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(code)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
