"""File-system work with a deadline: a hung share call must not block the caller.

The work runs in a daemon thread; a thread blocked in a hung NFS call cannot be killed, so it is
left behind and handed back, for the caller to refuse a second one on the same root while it hangs.

``run_with_timeout`` is the one runner of bounded work: a whole deadline, and with ``calls`` a
deadline per call of the work (a scan's listings and stats, a watch's walk, a memory change's
fsync and rename), each waited for on its own, not their sum, so a slow share that answers each
call in time is not taken for a hung one. The work tells its calls to ``calls`` (``Asking``),
or, deep in code that has no ``Asking`` to hand, by ``step()``.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Calls(Protocol):
    """What bounded work tells of its calls (``sources.Asking``): the call under way and since
    when (monotonic), or None between calls; ``again`` starts that call's wait anew."""

    now: tuple[str, str, float] | None

    def again(self) -> None: ...


_local = threading.local()


def step() -> None:
    """The next call of the bounded work this thread runs begins (a fsync, a rename, an entry
    of a listing): its wait starts again (``run_with_timeout``'s ``per_call``). Outside bounded
    work, nothing."""
    calls: Calls | None = getattr(_local, "calls", None)
    if calls is not None:
        calls.again()


def run_with_timeout(
    fn: Callable[[], T],
    timeout: float,
    name: str,
    beat: Callable[[], None] | None = None,
    give_up: Callable[[], bool] | None = None,
    *,
    calls: Calls | None = None,
    per_call: float | None = None,
) -> tuple[T | None, threading.Thread | None]:
    """Run ``fn`` in a daemon thread; (result, None), or (None, the stuck thread) after ``timeout``.

    A thread blocked in a hung NFS call cannot be killed; it is left behind and reported so that
    no second one is started for the same root while it hangs. ``beat`` is called about once a
    second while waiting: the caller is alive as long as the wait is bounded, so a long scan of a
    slow share does not look like a hung daemon to the watchdog. ``give_up`` (asked as often)
    ends the wait early, as the deadline does. ``calls``: what ``fn`` tells of its calls (and
    ``step`` in its thread); with ``per_call``, the wait also ends once one call has not
    answered for that long: one call of a long scan that hangs.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        _local.calls = calls
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            _local.calls = None
            done.set()

    def call_hung() -> bool:
        now = calls.now if calls is not None else None
        return per_call is not None and now is not None and time.monotonic() - now[2] >= per_call

    thread = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    # Checked at least as often as a call may take (a per-call bound under a second).
    tick = 1.0 if per_call is None else min(1.0, max(per_call / 2, 0.01))
    while not done.wait(max(min(tick, deadline - time.monotonic()), 0.0)):
        if time.monotonic() >= deadline or call_hung() or (give_up is not None and give_up()):
            return None, thread
        if beat is not None:
            beat()
    if "error" in box:
        raise box["error"]
    return box["value"], None


class NoAnswer(Exception):  # noqa: N818 - a state of the share, not a bug
    """A file-system call did not answer within its deadline, or an earlier one still hangs;
    ``stuck``: the thread still in that call (for the caller to mark what it asked as hanging)."""

    def __init__(self, message: str, stuck: threading.Thread | None = None) -> None:
        super().__init__(message)
        self.stuck = stuck


def bounded_call(fn: Callable[[], T], timeout: float, hanging: SharedProbes, key: Any, name: str) -> T:
    """``fn()`` with a deadline: NoAnswer when it hangs, and at once while an earlier call under
    the same ``key`` (kept in ``hanging``) still does, so a hung share costs one timeout and one
    stuck thread, not one per question. Each call asks its own question (reads of different
    notes of one root): its answer is not shared. Raises what ``fn`` raises."""
    return hanging.ask(key, fn, timeout, name, shared=False)


class _Flight:
    """One probe under way: its answer once ``done``, and when its callers stop waiting."""

    def __init__(self, deadline: float) -> None:
        self.done = threading.Event()
        self.deadline = deadline
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None


class SharedProbes:
    """One stuck thread per key, for every call with a deadline on a share that may hang: while
    a call under a key is past its deadline and still in, the next is told NoAnswer at once (one
    stuck thread per key, not one per call). A ``shared`` question (is the vault there?) is also
    asked once at a time: a caller beside one under way waits for that one and reads its answer
    (a second probe took as long again, and its caller could be told "no answer" a hair before
    the first answered); an unshared one (``bounded_call``: a read of one note) runs its own.
    A probe that ended is not reused: the next caller asks afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight] = {}

    def ask(
        self,
        key: Any,
        fn: Callable[[], T],
        timeout: float,
        name: str,
        beat: Callable[[], None] | None = None,
        *,
        shared: bool = True,
    ) -> T:
        """``fn()``'s answer (or error), the running probe's under ``key`` if ``shared``."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and not flight.done.is_set() and time.monotonic() >= flight.deadline:
                raise NoAnswer("an earlier call on it still hangs (hung share?)", flight.thread)
            if not shared or flight is None or flight.done.is_set():
                flight = self._start(fn, timeout, name)
                if shared:
                    self._flights[key] = flight
        while not flight.done.wait(max(min(1.0, flight.deadline - time.monotonic()), 0.0)):
            if time.monotonic() >= flight.deadline:
                if not shared:
                    with self._lock:  # the stuck one is what the next call under the key meets
                        self._flights[key] = flight
                raise NoAnswer(f"no answer within {timeout:g} s (hung share?)", flight.thread)
            if beat is not None:
                beat()
        if flight.error is not None:
            raise flight.error
        return flight.value  # type: ignore[no-any-return]  # fn's own result

    @staticmethod
    def _start(fn: Callable[[], Any], timeout: float, name: str) -> _Flight:
        flight = _Flight(time.monotonic() + timeout)

        def target() -> None:
            try:
                flight.value = fn()
            except BaseException as exc:  # re-raised in each caller's thread
                flight.error = exc
            finally:
                flight.done.set()

        flight.thread = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
        flight.thread.start()
        return flight


def bounded_stat(path: Path, timeout: float, hanging: SharedProbes, name: str) -> os.stat_result:
    """``os.stat(path)`` with a deadline (``bounded_call``). Raises OSError as os.stat does."""
    return bounded_call(lambda: os.stat(path), timeout, hanging, path, name)


# Folders whose stat hangs, by path (a start checks the vault twice).
_HANGING = SharedProbes()


def folder_state(path: Path, timeout: float) -> tuple[bool, str | None]:
    """Whether ``path`` is a folder, asked with a deadline: (True, None) it is; (False, None) it
    does not exist (or is not a folder); (False, why) it did not answer: an I/O error, no
    permission, a dead or hung share. Never raises, never blocks past ``timeout``."""
    there, why, _stuck = folder_look(path, timeout)
    return there, why


def folder_look(path: Path, timeout: float) -> tuple[bool, str | None, threading.Thread | None]:
    """``folder_state``, and the thread still in the stat when it did not answer (for the
    daemon's supervisor to mark the root in ``path`` hanging)."""
    try:
        st = bounded_stat(path, timeout, _HANGING, "folder-state")
    except NoAnswer as exc:
        return False, str(exc), exc.stuck
    except (FileNotFoundError, NotADirectoryError):
        return False, None, None
    except OSError as exc:  # asked with os.stat: Path.is_dir hides these on newer Pythons
        return False, exc.strerror or str(exc), None
    return stat.S_ISDIR(st.st_mode), None, None


def near_folder(top: Path, sub: str, timeout: float, loose: bool = True) -> str | None:
    """A folder below ``top`` that ``sub`` (a relative path that is not there) likely meant: the
    same name in other case (``Wiki`` for ``wiki/``), and when ``loose`` one it starts (``wi``) or a
    close spelling; found part by part, each listing asked with a deadline. None when nothing is
    near. Not ``loose`` for a name nobody wrote (the default): ``Wikipedia/`` is not a wiki meant."""
    import difflib  # only for a folder that is missing

    def listing(folder: Path) -> list[str]:
        with os.scandir(folder) as it:
            return [e.name for e in it if not e.name.startswith(".") and e.is_dir()]

    found: list[str] = []
    folder = top
    for part in Path(sub).parts:
        try:
            names, _stuck = run_with_timeout(functools.partial(listing, folder), timeout, "near-folder")
        except OSError:
            return None
        if not names:
            return None
        if part in names:
            match = part
        else:
            folded = [n for n in names if n.casefold() == part.casefold()]
            starts = sorted(n for n in names if n.casefold().startswith(part.casefold()))
            by_fold = {n.casefold(): n for n in names}
            close = difflib.get_close_matches(part.casefold(), list(by_fold), n=1, cutoff=0.75)
            pick = folded or (
                ((starts[:1] if len(starts) == 1 else []) or [by_fold[c] for c in close]) if loose else []
            )
            if not pick:
                return None
            match = pick[0]
        found.append(match)
        folder = folder / match
    return "/".join(found) if found and "/".join(found) != sub.strip("/") else None
