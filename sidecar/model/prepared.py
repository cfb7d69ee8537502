"""The prepared copies of models in ``<home>/models/.prepared/`` (``embedder.cacheDir``): which
ones this process uses, and which ones no process has used for long.

A copy is made for one onnxruntime and one version of its preparation (an e5 conversion, about
80 MB; an int8 copy, about 23 MB), so an upgrade or a switch of model leaves the earlier ones
behind. They are removed once no daemon has used them for ``UNUSED_DAYS``, not at the start of
another: two installs sharing a home (two virtualenvs, another onnxruntime each) need one copy
each, and removing the other's at every start made each convert its model again at every start.
A copy's last use is its modification time: set when a model is loaded from it and again by the
daily tidy while the model stays loaded (a daemon up for months keeps its copies). The tidy runs
a while after the start, never during it: a switch of model loads the previous one after the new
one, and a removal at the first load took the copy the second was about to read.

Only names the preparations write are touched (``embedder.cacheDir`` may be a folder of the
user's); ``.skip`` notes stay (they remember why a model cannot run here, and are tiny)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

UNUSED_DAYS = 30.0
# A work folder, an early tokenizer or a temp file older than this is left by a preparation that
# died (the children are stopped after 10-15 minutes): not kept for a month (83 MB). A work
# folder whose process is gone goes at once; one whose process id lives on (reused after a
# reboot, in a container) goes at this age too.
LEFT_OVER_S = 3600.0
# The onnxruntime version a copy was made with ("1.32.0", "1.22.0.dev20250101", "1.17.0rc1").
_ORT = r"ort\d+\.\d+(?:\.\d+)?(?:\.?(?:dev|post|rc|a|b)\d+)*(?:\+\w+)?"
# What the preparations write: an e5 conversion's folder (sidecar.model.e5folder), an int8 copy
# (sidecar.model.int8prep), the German word list's hashes (sidecar.search.wordlist), and a copy
# being removed (renamed first, see ``_remove``).
_COPY = re.compile(
    rf"(?:multilingual-e5-small-[0-9a-f]{{12}}-e\d+-{_ORT}|[0-9a-f]{{12}}-p\d+-{_ORT}\.onnx"
    r"|wordlist-v\d+-[0-9a-f]{12}\.bin)"
)
# What a preparation under way writes beside its copy: e5's work folder (its process id last) and
# early tokenizer, an int8 rewrite's temp file (runtime.atomic).
_WORK = re.compile(rf"(?P<copy>{_COPY.pattern})\.(?:tmp-(?P<pid>\d+)|tokenizer\.model)")
_TEMP = re.compile(rf"\.(?:[0-9a-f]{{12}}-p\d+-{_ORT}|wordlist-v\d+-[0-9a-f]{{12}})\.\w+\.tmp")
_REMOVING = ".removing-"

# A loaded model (by id) -> the copies it was read from. No lock: a model's finalizer removes its
# entry, and a collection can run it in a thread that holds any lock (it waited for itself); each
# change of the dict is one atomic step, and ``tidy`` reads a copy.
_loaded: dict[int, tuple[Path, ...]] = {}


def loaded(model: object, folder: Path, paths: Iterable[Path | None]) -> None:
    """``model`` was loaded from ``paths``: those that are copies in ``folder`` are marked used
    now, and again by each ``tidy`` while ``model`` lives."""
    copies = tuple(p for p in paths if p is not None and p.parent == folder and _COPY.fullmatch(p.name))
    for path in copies:
        _mark_used(path)
    _loaded[id(model)] = copies
    weakref.finalize(model, _loaded.pop, id(model), None)


def _mark_used(path: Path) -> None:
    try:
        os.utime(path, follow_symlinks=False)
    except OSError as exc:  # a read-only cache: its copies are then only ever removed by hand
        log.debug("model_cache_unmarked path=%s error=%s", path, exc)


def tidy(folder: Path, *, now: float | None = None) -> list[Path]:
    """The copies the loaded models use marked again; those no daemon used for ``UNUSED_DAYS``
    and what a dead preparation left removed. The paths removed."""
    in_use = {p for copies in _loaded.copy().values() for p in copies}
    for path in in_use:
        _mark_used(path)
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if Path(entry.path) in in_use or not _stale(entry, now):
            continue
        if _remove(Path(entry.path)):
            removed.append(Path(entry.path))
    return removed


def copies(folder: Path) -> list[tuple[Path, int, float]]:
    """The model copies in ``folder``: (path, bytes, when last used), least recently used first
    (doctor's disk line: what they hold and which can go). No model is loaded to tell."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if entry.is_symlink() or not _COPY.fullmatch(entry.name):
            continue
        path = Path(entry.path)
        try:
            used = entry.stat(follow_symlinks=False).st_mtime
            files = [path] if entry.is_file() else [f for f in path.rglob("*") if f.is_file()]
            size = sum(f.stat().st_size for f in files)
        except OSError:
            continue
        found.append((path, size, used))
    return sorted(found, key=lambda c: c[2])


def _stale(entry: os.DirEntry[str], now: float) -> bool:
    """Whether ``entry`` is a copy unused for ``UNUSED_DAYS``, or what a dead preparation left."""
    name = entry.name
    if entry.is_symlink() or name.endswith(".skip"):  # a link the user made; a refusal noted
        return False
    if name.startswith(_REMOVING):  # a removal cut short; not one another daemon makes now
        was, _, pid = name[len(_REMOVING) :].rpartition(".")
        ours = any(p.fullmatch(was) for p in (_COPY, _WORK, _TEMP))
        return ours and (pid == str(os.getpid()) or not _alive(pid))
    work = _WORK.fullmatch(name)
    left_over = work is not None or _TEMP.fullmatch(name) is not None
    if not left_over and not _COPY.fullmatch(name):
        return False
    try:
        age = now - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return False
    if work is not None and work["pid"]:
        # A conversion under way keeps its folder; a dead one's goes at once.
        return not _alive(work["pid"]) or age >= LEFT_OVER_S
    return age >= (LEFT_OVER_S if left_over else UNUSED_DAYS * 86_400)


def remove_dead_work(folder: Path, copy: str) -> list[Path]:
    """The work folders of ``copy``'s preparations whose process is gone, removed (the parent's
    cleanup after a child that failed, timed out or was killed: each attempt left 77 MB, and the
    model retry makes one every few minutes)."""
    removed: list[Path] = []
    for path in folder.glob(f"{copy}.tmp-*"):
        work = _WORK.fullmatch(path.name)
        if work is not None and work["pid"] and not _alive(work["pid"]) and _remove(path):
            removed.append(path)
    return removed


def _alive(pid: str) -> bool:
    """Whether a process of id ``pid`` (as written in a name) runs; a number no process can have
    is none."""
    if not pid.isdigit() or len(pid) > 9:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _remove(path: Path) -> bool:
    """Remove ``path``: renamed to a hidden name first, so that a start reading it finds it whole
    or not at all, and a folder that cannot be changed (read-only) is left whole, not emptied."""
    if path.name.startswith(_REMOVING):
        gone = path
    else:
        gone = path.with_name(f"{_REMOVING}{path.name}.{os.getpid()}")
        try:
            path.rename(gone)
        except OSError as exc:
            log.warning("model_cache_remove_failed path=%s error=%s", path, exc)
            return False
    try:
        if gone.is_dir() and not gone.is_symlink():
            shutil.rmtree(gone)
        else:
            gone.unlink()
    except OSError as exc:
        log.warning("model_cache_remove_failed path=%s error=%s", gone, exc)
        return False
    log.info("model_cache_removed path=%s", path)
    return True
