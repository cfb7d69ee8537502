"""A note's bytes and text, read safely: the file opened must be one a scan would read (a symlink
swapped after the scan's check is refused), a memory note is opened only through its inbox's
checked folders, and a file that cannot be indexed as text (binary, not UTF-8, too large, a
malformed Canvas) raises ``NoteUnreadable`` with the reason counted in health. Imports
``confine``, ``canvas``, ``sources`` and ``notenames``."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from sidecar.vault.canvas import CanvasError, canvas_markdown, is_canvas_name
from sidecar.vault.confine import (
    NotPrivateError,
    NotRegularError,
    open_regular,
    opened_path,
    private_dirs,
    read_fd,
)
from sidecar.vault.notenames import TOO_LARGE
from sidecar.vault.sources import Root, _where_refusal

log = logging.getLogger(__name__)


class NoteUnreadable(Exception):  # noqa: N818 - a reason to skip a file, not a failure
    """A file that exists but cannot be indexed as text; ``reason`` is counted in health."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_note(path: Path, max_bytes: int, root: Root | None = None) -> tuple[bytes, str]:
    """Raw bytes and text of a note; raise NoteUnreadable for binary, non-UTF-8, huge files and
    anything that is not a regular file (a pipe is never opened for a blocking read). With
    ``root``, the file actually opened must be one ``scan`` would read: a symlink swapped after the
    scan's check (to a file outside the root, in a hidden folder) is refused, not read."""
    try:
        fd = open_regular(path)
        try:
            why = _opened_refusal(root, fd) if root is not None else None
        except BaseException:
            os.close(fd)
            raise
        if why is not None:
            os.close(fd)
            if not os.path.lexists(path):  # moved away meanwhile (Obsidian's delete: into .trash)
                raise FileNotFoundError(2, "gone while it was read", str(path))
            raise NoteUnreadable(why)
        data = read_fd(fd, max_bytes + 1)
    except FileNotFoundError:
        raise
    except NotRegularError as exc:
        raise NoteUnreadable(exc.strerror or "not a regular file") from exc
    except OSError as exc:
        raise NoteUnreadable(f"unreadable ({exc.strerror})") from exc
    text = decode_note(data, max_bytes, path)
    return data, canvas_text(text, path) if is_canvas_name(path.name) else text


def read_refusal(path: Path) -> str | None:
    """Why the note at ``path`` cannot be read now ("unreadable (Permission denied)", as
    ``read_note`` says it), or None: it opens and its first byte reads. Nothing else is looked at
    (a note gone, or no regular file any more, is the sweep's to find)."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotRegularError):
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        os.read(fd, 1)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    finally:
        os.close(fd)
    return None


def canvas_text(text: str, path: Path) -> str:
    """A Canvas's JSON read as its Markdown (``vault.canvas``); one that is no Canvas is skipped."""
    try:
        return canvas_markdown(text)
    except CanvasError as exc:
        log.warning("canvas_unreadable path=%s reason=%s", path, exc.detail)
        raise NoteUnreadable(f"malformed Canvas ({exc})") from None


def _opened_refusal(root: Root, fd: int) -> str | None:
    """Why the open file ``fd`` may not be read as a note of ``root`` (see ``link_refusal``)."""
    real = opened_path(fd)
    if real is None:  # no way to ask this system: the scan's check stands
        return None
    try:
        base = _real_root(root.path)
    except (OSError, RuntimeError):
        return "root cannot be resolved"
    rel = _below(real, base)
    if rel is None:
        return "symlink leads outside the root"
    return _where_refusal(root, base / rel, base)


def _below(real: Path, base: Path) -> Path | None:
    """``real`` relative to the folder ``base``, or None when it is not inside. The folder is
    compared by identity where the spelling differs: a case-insensitive file system (macOS by
    default) reports the name's case on disk, which the configured path may not share."""
    if real.is_relative_to(base):
        return real.relative_to(base)
    for depth in range(len(real.parts) - 1, 0, -1):
        with contextlib.suppress(OSError):
            if os.path.samefile(Path(*real.parts[:depth]), base):
                return Path(*real.parts[depth:])
    return None


_REAL_ROOTS: dict[Path, tuple[float, Path]] = {}
_REAL_ROOT_TTL_S = 10.0


def _real_root(path: Path) -> Path:
    """A root's real path, resolved at most every few seconds (not once per note read: a sweep
    of a large vault on a share reads thousands)."""
    now = time.monotonic()
    known = _REAL_ROOTS.get(path)
    if known is not None and now - known[0] < _REAL_ROOT_TTL_S:
        return known[1]
    real = path.resolve(strict=True)
    _REAL_ROOTS[path] = (now, real)
    return real


def read_inbox_note(root: Root, name: str, max_bytes: int) -> tuple[bytes, str]:
    """A memory note, opened through its inbox's checked folders and never through a symlink."""
    agents = root.path.parent.parent
    try:
        with private_dirs(
            agents.parent, [agents.name, root.agent, "memory"], create=False, what="inbox"
        ) as fds:
            fd = open_regular(name, dir_fd=fds[-1], follow=False)
        data = read_fd(fd, max_bytes + 1)
    except FileNotFoundError:
        raise
    except NotPrivateError as exc:
        raise NoteUnreadable(str(exc)) from exc
    except NotRegularError as exc:
        raise NoteUnreadable(exc.strerror or "not a regular file") from exc
    except OSError as exc:
        raise NoteUnreadable(f"unreadable ({exc.strerror})") from exc
    return data, decode_note(data, max_bytes)


def decode_note(data: bytes, max_bytes: int, where: object = "-") -> str:
    """The text of a note's bytes; NoteUnreadable when it cannot be indexed as text."""
    if len(data) > max_bytes:
        raise NoteUnreadable(TOO_LARGE)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # its NUL bytes are no binary data, but text
        raise NoteUnreadable("not UTF-8 (UTF-16)")
    if b"\0" in data[:8192]:
        raise NoteUnreadable("binary")
    try:
        return data.decode("utf-8-sig")  # -sig strips a BOM that would hide the front matter
    except UnicodeDecodeError:
        # A few bad bytes (a paste, a truncated sync) in UTF-8 text: keep the note, mark them.
        # Mostly undecodable bytes mean another encoding or binary data: skipped, counted.
        text = data.decode("utf-8-sig", errors="replace")
        bad = text.count("\ufffd")
        if bad * 100 > max(len(text), 1):
            raise NoteUnreadable("not UTF-8") from None
        log.warning("note_invalid_utf8 path=%s replaced=%d", where, bad)
        return text
