"""Confinement by construction: private folders opened one level at a time, regular files only.

Every folder on the way to an agent's inbox is opened relative to its parent's descriptor with
``O_NOFOLLOW | O_DIRECTORY`` and checked (a real folder, owned by this user, mode 0700), so a path
swapped for a symlink between the check and the use cannot redirect a read or a write. Files are
opened with ``O_NONBLOCK`` and checked to be regular before a byte is read, so a named pipe or a
device never blocks a thread. Names are bytes until proven text (``decodable``). Also: the private
modes of the home (``tighten_home``). Imports errors only.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from sidecar.contracts.errors import SourceError

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotPrivateError(SourceError):
    """A folder on the way to an inbox is a symlink, not a folder, or another user's."""

    code = "forbidden"


class NotRegularError(OSError):
    """A path that is a symlink where none is followed, a pipe, a device or a folder."""


def decodable(name: str) -> bool:
    """False for a name that is not valid UTF-8 (os functions hand it over with surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(path: object) -> str:
    """A path for logs and messages, undecodable bytes shown as ``\\xNN`` and control characters
    escaped (a file name holding a newline cannot forge a log line)."""
    text = os.fsencode(str(path)).decode("utf-8", "backslashreplace")
    return (
        text
        if text.isprintable()
        else "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    )


def open_private_dir(parent_fd: int, name: str, *, create: bool, what: str) -> int:
    """Descriptor of the folder ``name`` inside ``parent_fd``: created 0700 if asked and missing,
    never through a symlink, owned by this user, tightened to 0700. Raises NotPrivateError, or
    FileNotFoundError when it is missing and ``create`` is false."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent_fd)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file
        raise NotPrivateError(f"{what} is a symbolic link or not a folder; refused") from exc
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise NotPrivateError(f"{what} belongs to another user; refused")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def private_dirs(
    base: Path, parts: Sequence[str], *, create: bool, what: str, existing: int = 0
) -> Iterator[list[int]]:
    """Descriptors of ``base/parts[0]``, ``base/parts[0]/parts[1]`` ... (each checked as above);
    ``base`` itself is opened as given (the home, resolved when the configuration was read).
    With ``create``, missing folders are made, but for ``base`` and the first ``existing`` parts
    when ``existing`` is set: those must be there (FileNotFoundError), never made anew (a share's
    bare mount point is no place for them)."""
    fds: list[int] = []
    if create and not existing:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fds.append(os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for i, name in enumerate(parts):
            label = f"{what} ({'/'.join(parts[: i + 1])})"
            fds.append(open_private_dir(fds[-1], name, create=create and i >= existing, what=label))
        yield fds[1:]
    finally:
        for fd in fds:
            os.close(fd)


def open_regular(name: str | Path, *, dir_fd: int | None = None, follow: bool = True) -> int:
    """Open a regular file for reading without ever blocking; NotRegularError for anything else."""
    flags = _READ_FLAGS | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if not follow and exc.errno == errno.ELOOP:  # the name is a symlink
            raise NotRegularError(exc.errno, "a symbolic link (not followed)") from exc
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularError(0, "not a regular file")
    return fd


def opened_path(fd: int) -> Path | None:
    """The real path of an open file (what a symlink led to when it was opened), or None where
    the system cannot say (then the caller's earlier check stands)."""
    try:
        if sys.platform.startswith("linux"):
            return Path(os.readlink(f"/proc/self/fd/{fd}"))
        if sys.platform == "darwin":
            import fcntl

            raw = fcntl.fcntl(fd, 50, b"\0" * 1024)  # F_GETPATH
            return Path(os.fsdecode(raw.split(b"\0", 1)[0]))
    except OSError:
        return None
    return None


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of an open file (closes it)."""
    parts: list[bytes] = []
    got = 0
    try:
        while got < limit:
            block = os.read(fd, min(limit - got, 1 << 20))
            if not block:
                break
            parts.append(block)
            got += len(block)
    finally:
        os.close(fd)
    return b"".join(parts)


def tighten_home(
    home: Path, subtrees: Sequence[Path], skip: Sequence[Path] = (), own: Sequence[Path] = ()
) -> int:
    """Remove group and other permissions from the home folder, everything in the daemon's own
    ``subtrees`` of it (index, models, run; not whatever else a user keeps in the folder named as
    home) and the single entries ``own`` (the agents' folders and inboxes, not the notes in them).
    Symlinks and the folders in ``skip`` (a vault kept inside the home) are left alone. Returns
    how many entries were changed, and says so in the log."""
    changed: list[str] = []
    skipped = {p.resolve() for p in skip}
    subtrees = [t for t in subtrees if t.is_dir() and not t.is_symlink()]

    def fix(path: str, st: os.stat_result) -> None:
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077 and st.st_uid == os.geteuid():
            with contextlib.suppress(OSError):
                os.chmod(path, mode & 0o700, follow_symlinks=False)
                changed.append(path)

    for top in (home, *subtrees, *own):
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if not stat.S_ISLNK(st.st_mode) and top.resolve() not in skipped:
            fix(str(top), st)
    for folder, dirs, files in (w for top in subtrees for w in os.walk(top, followlinks=False)):
        dirs[:] = [d for d in dirs if Path(folder, d).resolve() not in skipped]
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                fix(path, st)
    if changed:
        log.warning(
            "home_tightened count=%d example=%s reason=readable by other users; now private (0700 / 0600)",
            len(changed),
            printable(changed[0]),
        )
    return len(changed)
