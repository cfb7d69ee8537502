"""Putting a freshly written temp file in a note's place without losing a save another program
made meanwhile (an editor, a sync tool): checking the note and then renaming over it leaves a
window (the temp file's fsync on a slow disk) in which a save is replaced unseen.

Where the system has it, the replacement is an atomic exchange of the two names (Linux
``renameat2(RENAME_EXCHANGE)``, macOS ``renameatx_np(RENAME_SWAP)``): what it swapped out is then
compared with the text the write read, and a different one is swapped back. A new note is put in
place only if none appeared meanwhile (``RENAME_NOREPLACE`` / ``RENAME_EXCL``, else a hard link).
Where the exchange is missing (another system, a share answering EINVAL or ENOTSUP), the note is
hard-linked into ``.trash`` just before the rename and that link is checked to be the text read:
the window left is the few microseconds between that check and the rename. Without hard links
either, the note is renamed into ``.trash``, checked there, and the temp file renamed into its
place once that is still free (the same window). The file replaced is never removed:
it is kept in ``.trash`` (an editor still writing into it writes there), or, when .trash cannot
take it, left under its hidden temp name for the next start to keep.
Imports confine and the error classes only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from sidecar.contracts.errors import SourceError
from sidecar.vault import confine
from sidecar.vault.timeout import step

log = logging.getLogger(__name__)

# What a file system without the flags, or without hard links, answers: the next way is tried.
# EPERM / EACCES: a seccomp filter (container, sandbox) refusing a system call it does not list;
# a real permission problem fails the same way in the rename or link tried next.
_NO_FLAGS = frozenset(
    {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM, errno.EACCES}
)
_NO_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS, errno.EXDEV})


class RacedError(Exception):
    """The note is no longer the text the write read (a save landed meanwhile); it stays as that
    save left it and nothing of the write is in its place. ``later`` names where a second save,
    made within the swap back, lies in the inbox (``.trash/<name>``; its hidden temp name when
    .trash could not take it); the note then holds the first one."""

    def __init__(self, later: str | None = None) -> None:
        super().__init__(later)
        self.later = later


class StrandedError(Exception):
    """A save landed meanwhile and could not be put back in the note's place (``error``): the
    note holds the write's text, the save lies in the inbox under the hidden temp name ``left``
    (kept in .trash at the next start)."""

    def __init__(self, left: str, error: OSError) -> None:
        super().__init__(left, error)
        self.left = left
        self.error = error


def _load() -> tuple[Any, int, int] | None:
    """The system's flagged rename and its (exchange, no-replace) flags, or None."""
    if sys.platform.startswith("linux"):
        symbol, flags = "renameat2", (2, 1)  # RENAME_EXCHANGE, RENAME_NOREPLACE
    elif sys.platform == "darwin":
        symbol, flags = "renameatx_np", (2, 4)  # RENAME_SWAP, RENAME_EXCL
    else:
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), symbol)
    except (OSError, AttributeError):  # an old C library: the fallback
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn, *flags


RENAME = _load()


def _flagged(dir_fd: int, src: str, dst: str, which: int) -> bool:
    """A rename of ``src`` to ``dst`` in ``dir_fd`` with flag ``which`` (0: exchange, 1: no
    replace): True once done, False where the system or file system has no such rename."""
    if RENAME is None:
        return False
    fn, *flags = RENAME
    if fn(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), flags[which]) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_FLAGS:
        return False
    raise OSError(code, os.strerror(code), dst)


def exchange(dir_fd: int, a: str, b: str) -> bool:
    return _flagged(dir_fd, a, b, 0)


def _read_back(dir_fd: int, name: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a file, None when it is gone or no regular file."""
    try:
        return confine.read_fd(confine.open_regular(name, dir_fd=dir_fd, follow=False), limit)
    except (FileNotFoundError, confine.NotRegularError):
        return None


def _ours(dir_fd: int, name: str, fd: int) -> bool:
    """Whether ``name`` is the file open as ``fd``."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def install_new(dir_fd: int, tmp: str, name: str) -> None:
    """``tmp`` becomes the note ``name``, which did not exist when read; RacedError if one appeared."""
    try:
        if _flagged(dir_fd, tmp, name, 1):
            return
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError as exc:
        raise RacedError from exc
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        if exists_in(dir_fd, name):
            raise RacedError from exc
        step()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    os.unlink(tmp, dir_fd=dir_fd)


def exists_in(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def install_over(
    dir_fd: int,
    tmp: str,
    name: str,
    fd: int,
    old: bytes,
    *,
    trash_fd: Callable[[], contextlib.AbstractContextManager[int]],
    hold_name: str,
    rescue: Callable[[str], str],
    keep: Callable[[int, str], None],
) -> None:
    """``tmp`` (open as ``fd``) replaces the note ``name``, whose text was read as ``old``;
    RacedError when the note there is another text by then, which stays the note. ``trash_fd`` opens
    .trash (the fallback's link lies there as ``hold_name``); ``rescue`` moves a file that lies at
    ``tmp`` and is not this write's into .trash (a third save within the swap back) and returns
    its name there; ``keep(folder, name)`` renames the file replaced, the note's own, into .trash
    as a kept text, also when it holds no text to lose (empty, or only the ``updated`` stamp
    differs): an editor still writing into it (a stalled in-place save) writes there, never into
    a removed file."""
    try:
        swapped = exchange(dir_fd, tmp, name)
    except FileNotFoundError as exc:  # the note was removed meanwhile
        raise RacedError from exc
    if not swapped:
        with trash_fd() as tfd:
            _install_linked(dir_fd, tmp, name, old, trash_fd=tfd, hold=hold_name, keep=keep)
        return
    if _read_back(dir_fd, tmp, len(old) + 1) == old:
        # The text read: kept in .trash (an editor may still write into it), or left where it is.
        _kept(keep, dir_fd, tmp, name)
        return
    # A save landed between the check and the exchange: it goes back in the note's place.
    later = None
    try:
        try:
            back = exchange(dir_fd, tmp, name)
        except OSError:
            back = False
        if not back:
            try:
                step()
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError as exc:  # theirs stays where it lies, never removed
                log.error("memory_write_raced_not_put_back note=%s left=%s error=%s", name, tmp, exc)
                raise StrandedError(tmp, exc) from exc
        elif not _ours(dir_fd, tmp, fd):
            later = _rescued(rescue, tmp, name)  # yet another save replaced ours within the swap back
    finally:
        # The swap back made lasting (a crash before it leaves a save at the temp name, which
        # the next start keeps in .trash).
        step()
        os.fsync(dir_fd)
    log.warning("memory_write_raced note=%s kept=theirs later=%s", name, later)
    raise RacedError(later)


def _rescued(rescue: Callable[[str], str], tmp: str, note: str) -> str:
    """Where the save lying at ``tmp`` is kept: ``.trash/<name>`` once ``rescue`` moved it, else
    ``tmp`` itself (left there, for the next start to keep)."""
    try:
        return f".trash/{rescue(tmp)}"
    except (OSError, SourceError) as exc:
        log.warning("memory_write_raced_not_moved note=%s left=%s error=%s", note, tmp, exc)
        return tmp


def _kept(keep: Callable[[int, str], None], dir_fd: int, name: str, note: str) -> None:
    """``keep(dir_fd, name)``. When .trash cannot take the file replaced, it stays where it lies
    (never removed: a program may still write into it), under a name no cap or age removes and the
    indexer skips; the next start (for a ``.held`` name in .trash, the daily prune too) keeps it."""
    try:
        keep(dir_fd, name)
    except (OSError, SourceError) as exc:
        where = f".trash/{name}" if name.endswith(".held") else name
        log.warning("memory_previous_not_moved note=%s left=%s error=%s", note, where, exc)


def _install_linked(
    dir_fd: int,
    tmp: str,
    name: str,
    old: bytes,
    *,
    trash_fd: int,
    hold: str,
    keep: Callable[[int, str], None],
) -> None:
    """The fallback: the note hard-linked into .trash, checked to be the text read, then replaced;
    the link then becomes the kept previous text (``keep``)."""
    try:
        os.link(name, hold, src_dir_fd=dir_fd, dst_dir_fd=trash_fd, follow_symlinks=False)
    except FileNotFoundError as exc:
        raise RacedError from exc
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        _install_moved(dir_fd, tmp, name, old, trash_fd=trash_fd, hold=hold, keep=keep)
        return
    done = False
    try:
        try:
            fd = confine.open_regular(hold, dir_fd=trash_fd, follow=False)
        except (FileNotFoundError, confine.NotRegularError) as exc:  # removed meanwhile: not checked
            raise RacedError from exc
        held = os.fstat(fd)
        # The text read, and still in the note's place right before the rename.
        if confine.read_fd(fd, len(old) + 1) != old or _changed(dir_fd, name, held):
            raise RacedError
        step()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        done = True
    finally:
        if not done:  # a second name of the note, which stays in place
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hold, dir_fd=trash_fd)
    _kept(keep, trash_fd, hold, name)


def _install_moved(
    dir_fd: int,
    tmp: str,
    name: str,
    old: bytes,
    *,
    trash_fd: int,
    hold: str,
    keep: Callable[[int, str], None],
) -> None:
    """The fallback without hard links: the note is renamed into .trash as ``hold`` (its file,
    which an editor may still be writing into, stays there: a rename over the note removed it),
    checked to be the text read, and ``tmp`` renamed into its place once that is still free (a
    window of microseconds, as the check before a rename over it left). A save found meanwhile
    goes back to the note's place, or stays at ``hold`` (no cap or age removes it; kept as a text
    at the next start or daily prune) when another file took that place."""
    try:
        step()
        os.rename(name, hold, src_dir_fd=dir_fd, dst_dir_fd=trash_fd)
    except FileNotFoundError as exc:
        raise RacedError from exc
    except OSError:  # .trash cannot take it: the check right before the rename is all there is
        if _read_back(dir_fd, name, len(old) + 1) != old:
            raise RacedError from None
        step()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    if _read_back(trash_fd, hold, len(old) + 1) == old and not exists_in(dir_fd, name):
        step()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        _kept(keep, trash_fd, hold, name)
        return
    if not exists_in(dir_fd, name):  # a save landed meanwhile: back in the note's place
        step()
        os.rename(hold, name, src_dir_fd=trash_fd, dst_dir_fd=dir_fd)
        raise RacedError
    log.warning("memory_write_raced_not_moved note=%s left=.trash/%s", name, hold)
    raise RacedError(f".trash/{hold}")


def _changed(dir_fd: int, name: str, held: os.stat_result) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return (st.st_ino, st.st_size, st.st_mtime_ns) != (held.st_ino, held.st_size, held.st_mtime_ns)
