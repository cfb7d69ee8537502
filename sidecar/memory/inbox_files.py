"""An inbox's files as they lie in its folder, read and moved relative to its descriptor: a note's
state (inode, size, mtime, ctime), whether it changed a moment ago, the texts kept in its .trash,
the sizes of its notes. Functions only, of no ``Inboxes`` state; the ones a test stands in for
(the pause, the clocks, ``write_in``) stay in :mod:`sidecar.memory.inbox` with their callers.
Imports confine, sources and trash.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator

from sidecar.memory import replace
from sidecar.memory.trash import KEPT, Fd, Trash, trash_dir
from sidecar.vault.confine import NotRegularError, open_regular, read_fd
from sidecar.vault.notenames import inbox_copy_reason, is_markdown_name
from sidecar.vault.sources import Asking, asked
from sidecar.vault.timeout import step

# A note changed this recently by another program may be in the middle of its save (an editor
# truncates, then writes its buffer; a slow or network disk stretches that gap): looked at again
# after a pause of ``_SETTLE_S`` before it is read as a whole text.
_RECENT_NS = 2_000_000_000


_MAX_EXISTING = 1 << 26  # the largest note an edit or a replacement reads (and keeps in .trash)


# (inode, size, mtime, ctime in ns) of a note, None when there is none: ctime moves with any save,
# even one of the same size within a coarse clock's tick.
_State = tuple[int, int, int, int] | None


def _empty(dir_fd: int, name: str) -> bool:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size == 0


def _state(inbox_fd: int, name: str) -> _State:
    try:
        st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _recent(ctime_ns: int, reference: int) -> bool:
    """Whether a note changed a moment ago, judged by its ctime (which only the kernel sets: a
    sync tool or ``touch`` sets mtime to anything) against ``reference``, the time now by the
    clock that set it (see ``_clock_there``); a time ahead of it (that clock stepped back)
    counts as not recent, else such a note would be "being saved" for ever."""
    return 0 <= reference - ctime_ns <= _RECENT_NS


def _read_back(dir_fd: int, name: str) -> bytes | None:
    """A file's bytes (up to what a write reads), None when there is none to read."""
    try:
        return read_fd(open_regular(name, dir_fd=dir_fd, follow=False), _MAX_EXISTING + 1)
    except (FileNotFoundError, NotRegularError):
        return None


def _newest_kept(trash_fd: int, slug: str) -> tuple[str, bytes | None] | None:
    """The name and text of the newest text kept of ``slug`` in .trash (lists the folder: at
    start only)."""
    names = [n for n in os.listdir(trash_fd) if (m := KEPT.match(n)) and n[: m.start(1) - 2] == slug]
    if not names:
        return None
    newest = max(names, key=lambda n: n[len(slug) + 2 :])
    return newest, _read_back(trash_fd, newest)


def _move_kept(ledger: Trash, src_fd: int, name: str, trash_fd: int, slug: str) -> str:
    """Rename ``name`` (in ``src_fd``) into .trash as a new kept text of ``slug``, under the
    ledger's lock (held by the caller); returns the name given."""
    target = f"{slug}--{_stamp()}.md"
    while replace.exists_in(trash_fd, target):
        target = f"{slug}--{_stamp()}.md"
    move = lambda: os.rename(name, target, src_dir_fd=src_fd, dst_dir_fd=trash_fd)  # noqa: E731
    ledger.change(trash_fd, target, +1, move)
    return target


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")


@contextlib.contextmanager
def _trash_fd(inbox_fd: int) -> Iterator[int]:
    with contextlib.closing(Fd(trash_dir(inbox_fd))) as trash:
        yield trash.fd


def _file_sizes(dir_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the regular files of a folder (not its folders or links)."""
    step()
    with os.scandir(dir_fd) as entries:
        for e in entries:
            step()  # each entry's answer, and its stat, a call of its own
            with contextlib.suppress(OSError):  # gone meanwhile
                if e.is_file(follow_symlinks=False):
                    yield e.name, e.stat(follow_symlinks=False).st_size


def _note_sizes(inbox_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the inbox's notes: the files memory list shows as its notes (a hidden
    '.x.md', a sync-conflict copy or a numbered copy or a link is none: status counted them while
    list did not)."""
    return iter(_note_sizes_asked(inbox_fd, Asking()).items())  # told to nobody: unbounded


def _note_sizes_asked(inbox_fd: int, asking: Asking) -> dict[str, int]:
    """``_note_sizes``, each call into the folder told to ``asking`` (the listing, each entry's
    answer, each note's stat), so its caller bounds each call, not their sum: an inbox of
    thousands of notes on a slow share takes long, and each of its calls still answers."""
    entries = []
    asking.ask("listing", ".")
    try:
        step()
        with os.scandir(inbox_fd) as it:
            for e in it:
                entries.append(e)
                step()
                asking.ask("listing", ".")  # a large folder comes in many answers
    finally:
        asking.answered()
    out = {}
    for e in entries:
        if not is_markdown_name(e.name) or _is_copy(e.name):
            continue
        step()
        with asked(asking, "stat", e.name):
            try:
                if e.is_file(follow_symlinks=False):
                    out[e.name] = e.stat(follow_symlinks=False).st_size
            except OSError:  # gone meanwhile
                continue
    return out


def _is_copy(name: str) -> bool:
    """A copy of the person's text beside a note, waiting to be merged (``inbox_copy_reason``)."""
    return is_markdown_name(name) and inbox_copy_reason(name) is not None


def _notes_bytes(inbox_fd: int) -> int:
    """The size of the inbox's notes together."""
    return sum(size for _name, size in _note_sizes(inbox_fd))
