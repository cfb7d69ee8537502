"""The walks of the folders the file watch covers (moved out of ``watcher``): the folders under a
watched folder whose names decode (``_walk``), each stat and listing told to the
``Asking`` a bounded walk gives (``bounded_walk``: a share that hangs is given up on at one call);
the walk of a watched folder on a share learnt slow, on a thread of its own (``_Behind``); a
folder-by-folder watch's look at the paths new in a batch, on a thread of its own (``_Looks``);
and what such a watch does not cover yet (``_new_folders``) or covers around a folder left out
(``_around``).

Imports: vault."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import watchfiles

from sidecar.vault.confine import decodable, printable
from sidecar.vault.sources import Asking, _listed, asked
from sidecar.vault.timeout import NoAnswer, run_with_timeout
from sidecar.vault.watch_filter import _in_settings

# Its log lines keep the logger of the module they came from (``watcher``): users grep by it.
log = logging.getLogger("sidecar.vault.watcher")


# Watching folder by folder: more than this many and the scheduled sweeps have to do.
MAX_FLAT_FOLDERS = 50_000


Walked = tuple[list[Path], bool]


# How a watched folder's walk is asked: (the folder, the walk told of each call by its Asking).
AskWalk = Callable[[Path, Callable[[Asking], Walked]], Walked]


def _walk(paths: Sequence[Path], limit: int = MAX_FLAT_FOLDERS, asking: Asking | None = None) -> Walked:
    """The folders under ``paths`` whose names decode, without dot-folders or symlinks (at most
    ``limit``), and whether the watch must go folder by folder: a folder symlink
    was met on the way, or a folder ``asking`` says to avoid was left out (a recursive watch
    would ask it). ``asking`` is told of each stat and listing (relative to the first of
    ``paths``): a share that hangs is given up on there."""
    asking = asking if asking is not None else Asking()
    top = paths[0] if paths else Path()
    out: list[Path] = []
    linked = False
    stack = []
    for p in paths:
        with contextlib.suppress(OSError), asked(asking, "stat", _rel(p, top)):
            if p.is_dir():
                stack.append(p)
    while stack and len(out) < limit:
        folder = stack.pop()
        out.append(folder)
        try:
            entries = _listed(folder, _rel(folder, top), asking)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or not decodable(e.name):
                continue
            if asking.avoid and _rel(Path(e.path), top) in asking.avoid:
                linked = True  # left out: not asked, and no recursive watch may reach it
                continue
            # Per entry: a symlink loop (x.md -> x.md) or a dangling link raises here, and must
            # not drop the rest of its folder from the watch.
            try:
                with asked(asking, "stat", _rel(Path(e.path), top)):  # a stat where d_type is unknown
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
                    elif not linked and e.is_symlink():
                        linked = e.is_dir(follow_symlinks=True)
            except OSError:
                continue
    return out, linked


def _walk_one(path: Path, limit: int, asking: Asking) -> Walked:
    """``_walk`` of one watched folder."""
    return _walk([path], limit, asking)


def _walk_noting(path: Path, limit: int, left: dict[Path, threading.Thread], asking: Asking) -> Walked:
    """``_walk_one``, noting in ``left`` the folders it went around (``Asking.avoid``) and the
    thread still in a call in each (the last walk's, when it is asked again)."""
    found = _walk_one(path, limit, asking)
    left.clear()
    left.update({path / rel: stuck for rel, stuck in asking.avoid.items()})
    return found


def _rel(path: Path, top: Path) -> str:
    """``path`` relative to ``top`` as the calls on a share are named ("." for ``top``)."""
    try:
        return path.relative_to(top).as_posix()
    except ValueError:
        return str(path)


def bounded_walk(
    path: Path,
    walk: Callable[[Asking], Walked],
    timeout: float,
    stuck: dict[Path, threading.Thread],
    total: float = 600.0,
) -> Walked:
    """``walk`` of a watched folder, given up on once one of its calls has not answered for
    ``timeout`` (NoAnswer), or the whole after ``total`` (a scan's bound, scanTimeoutSeconds),
    and at once while an earlier walk of the folder is still in its call (``stuck``: one thread
    left in a share that hangs, not one per try)."""
    earlier = stuck.get(path)
    if earlier is not None and earlier.is_alive():
        raise NoAnswer(f"an earlier walk of {path} still hangs (hung share?)", earlier)
    asking = Asking()
    # The whole walk of a big tree may take long on a slow share: one call that does not answer
    # ends it (each listing's entries start the clock again), or the whole past a scan's bound.
    value, left = run_with_timeout(
        lambda: walk(asking), total, "watch-walk", None, None, calls=asking, per_call=timeout
    )
    if left is None:
        stuck.pop(path, None)
        return value  # type: ignore[return-value]  # the walk's own result
    asking.abandon()  # it ends at its next call once this one answers
    stuck[path] = left
    now = asking.now
    if now is None or time.monotonic() - now[2] < timeout:  # each call answered: the whole is too long
        raise NoAnswer(f"the walk of {path} did not end within {total:g} s (hung share?)", left)
    raise NoAnswer(_walk_hung(path, now, timeout), left)


def _walk_hung(path: Path, now: tuple[str, str, float] | None, timeout: float) -> str:
    """Why a watched folder's walk was given up on, in words."""
    call = f"{now[0]} {now[1]}" if now is not None else "a call"
    return f"{call} in {path} did not answer within {timeout:g} s (hung share?)"


def _is_real_folder(path: str) -> bool:
    """A folder, not a link to one (links are never followed)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


_Key = tuple[str, str]  # ("real", path): is it a folder; ("walk", path): the folders under it


class _Looks:
    """A folder-by-folder watch's look-ups at new paths, made by one thread of their own: the
    watch's thread, which carries every root's events, waits for each call on its own up to
    ``timeout`` (a batch of many quick calls, or a slow share's calls, are all answered), and
    stops waiting at a call that takes longer. That call's thread goes on; its answers, and
    those of the calls queued after it, are kept for the next ask. One thread at most: while
    a call hangs, nothing more goes into the share."""

    def __init__(self, timeout: float, stop: threading.Event) -> None:
        self.timeout = timeout
        self.stop = stop
        self.asking = Asking()
        self._cond = threading.Condition()
        self._todo: list[_Key] = []
        self._queued: set[_Key] = set()
        self._answers: dict[_Key, bool | list[str]] = {}
        self._thread: threading.Thread | None = None

    def ask(self, keys: list[_Key]) -> dict[_Key, bool | list[str]]:
        """The answers to ``keys`` that came: all of them, unless a call took longer than the
        timeout (the others are asked at once and kept for the next ask)."""
        with self._cond:
            for k in keys:
                if k not in self._answers and k not in self._queued:
                    self._queued.add(k)
                    self._todo.append(k)
            if self._todo and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="watch-new", daemon=True)
                self._thread.start()
            while not all(k in self._answers for k in keys) and not self.stop.is_set():
                now = self.asking.now
                if now is not None and time.monotonic() - now[2] > self.timeout:
                    break
                self._cond.wait(min(0.05, self.timeout))
            return {k: self._answers.pop(k) for k in keys if k in self._answers}

    def waiting_on(self) -> str:
        now = self.asking.now
        return f"{now[0]} {now[1]}" if now is not None else "none"

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._todo:
                    self._thread = None
                    return
                key = self._todo.pop(0)
            try:
                answer = self._look(key)
            except Exception as exc:  # the thread must end cleanly, or no look would start again
                log.warning("watcher_look_failed path=%s error=%s", printable(key[1]), exc)
                answer = False if key[0] == "real" else []
            with self._cond:
                self._queued.discard(key)
                self._answers[key] = answer
                self._cond.notify_all()

    def _look(self, key: _Key) -> bool | list[str]:
        kind, path = key
        with asked(self.asking, "stat", path):
            real = _is_real_folder(path)
        if kind == "real" or not real:
            return real if kind == "real" else []
        return [str(f) for f in _walk([Path(path)], asking=self.asking)[0]]


class _Behind:
    """The walk of a watched folder on a share learnt slow (the vault: ``slow_folder`` is never
    true of the agents folder itself), on a thread of its own (its calls
    waited for as that share's scans' are): the watch of the other folders is set up meanwhile,
    and this one's answer (or error) is used at the next set-up."""

    def __init__(self, ask_walk: AskWalk, path: Path, limit: int) -> None:
        self.left: dict[Path, threading.Thread] = {}
        self.answer: Walked | None = None
        self.error: NoAnswer | OSError | None = None
        walk = functools.partial(_walk_noting, path, limit, self.left)
        self.thread = threading.Thread(
            target=self._run, args=(ask_walk, path, walk), name="watch-walk-behind", daemon=True
        )
        self.thread.start()

    def _run(self, ask_walk: AskWalk, path: Path, walk: Callable[[Asking], Walked]) -> None:
        try:
            self.answer = ask_walk(path, walk)
        except (NoAnswer, OSError) as exc:  # raised at the set-up that uses it, as in line
            self.error = exc
        except Exception:  # a bug: the watch goes on without this folder, and says so
            log.exception("watcher_walk_failed path=%s", path)
            self.error = NoAnswer(f"the walk of {path} failed")


def _new_folders(
    changes: set[tuple[watchfiles.Change, str]],
    known: set[str],
    again: set[str],
    roots: Sequence[Path] = (),
) -> set[str]:
    """Folders a folder-by-folder watch does not cover: new or made again in this batch, and
    those made inside ``again`` between the watch's walk and its start (no event for them).
    A folder symlink is none: the watch never follows one (taken for new, it restarted the
    watch every few seconds, walking out of the vault through it). Obsidian's settings folder
    is never walked (its plugins' folders are not watched: walked, each restarted the watch)."""
    new = {
        p
        for change, p in changes
        if (p not in known or change == watchfiles.Change.added) and _is_real_folder(p)
    }
    if again and len(known) < MAX_FLAT_FOLDERS:  # beyond the limit some are never watched
        real = [Path(p) for p in again if _is_real_folder(p) and not _in_settings(p, roots)]
        new.update(str(f) for f in _walk(real)[0] if str(f) not in known)
    return new


def _around(top: Path, walked: list[Path], left_out: list[Path]) -> list[Path]:
    """The folders of ``top`` a watch that went around ``left_out`` covers whole: each folder
    just below ``top`` that was walked and neither is nor holds a folder left out, and the same
    within each one that holds one."""
    out: list[Path] = []
    for folder in walked:
        if folder.parent != top or folder in left_out:
            continue
        if any(gone.is_relative_to(folder) for gone in left_out):
            out += _around(folder, walked, left_out)
        else:
            out.append(folder)
    return out
