"""File-system work with a deadline: a hung share call must not block the caller.

The work runs in a daemon thread; a thread blocked in a hung NFS call cannot be killed, so it is
left behind and handed back, for the caller to refuse a second one on the same root while it hangs.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run_with_timeout(
    fn: Callable[[], T], timeout: float, name: str, beat: Callable[[], None] | None = None
) -> tuple[T | None, threading.Thread | None]:
    """Run ``fn`` in a daemon thread; (result, None), or (None, the stuck thread) after ``timeout``.

    A thread blocked in a hung NFS call cannot be killed; it is left behind and reported so that
    no second one is started for the same root while it hangs. ``beat`` is called about once a
    second while waiting: the caller is alive as long as the wait is bounded, so a long scan of a
    slow share does not look like a hung daemon to the watchdog.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done.wait(max(min(1.0, deadline - time.monotonic()), 0.0)):
        if time.monotonic() >= deadline:
            return None, thread
        if beat is not None:
            beat()
    if "error" in box:
        raise box["error"]
    return box["value"], None


# Folders whose stat hangs, by path: asked again while the first call still hangs, they answer
# at once (a start checks the vault twice; a hung share cost a full timeout each time).
_HANGING: dict[Path, threading.Thread] = {}


def folder_state(path: Path, timeout: float) -> tuple[bool, str | None]:
    """Whether ``path`` is a folder, asked with a deadline: (True, None) it is; (False, None) it
    does not exist (or is not a folder); (False, why) it did not answer: an I/O error, no
    permission, a dead or hung share. Never raises, never blocks past ``timeout``."""
    hanging = _HANGING.get(path)
    if hanging is not None and hanging.is_alive():
        return False, "an earlier call on it still hangs (hung share?)"
    try:
        st, stuck = run_with_timeout(lambda: os.stat(path), timeout, "folder-state")
    except (FileNotFoundError, NotADirectoryError):
        return False, None
    except OSError as exc:  # asked with os.stat: Path.is_dir hides these on newer Pythons
        return False, exc.strerror or str(exc)
    if stuck is not None:
        _HANGING[path] = stuck
        return False, f"no answer within {timeout:.0f} s (hung share?)"
    _HANGING.pop(path, None)
    return st is not None and stat.S_ISDIR(st.st_mode), None
