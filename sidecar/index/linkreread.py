"""Links of unchanged notes read again once an upgrade reads links differently.

The link reader's version (``notes.linktext.LINKS_VERSION``) is recorded with the index. A sweep
reads only the notes that changed, so after an upgrade whose reader reads links differently (an
anchor written ``[[Note#Heading\\|alias]]``, a link to a Canvas) the notes nobody edited kept the
links the old reader found, for good. This pass reads each indexed note once more for its links
alone: no chunk, keyword document or vector is touched (the text is as indexed, checked by its
hash), so it costs a read and a parse per note, never an embedding. It runs in batches between
sweeps, root by root in key order; the last key done of each root is kept in the manifest, so a
stop or a kill -9 resumes there. A root that is offline or whose read hangs is passed over until it
answers (the other roots go on: one share away for good held every root's links before), and a
batch stops at a read that hangs: marking those notes for the sweep would cut and write every note
of a share that was away for a moment. A note that cannot be read (a read error) is left to the
next sweep, which reads it whole (its vectors kept by text), as a chunker upgrade does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.index.records import Drafted, Reader, draft
from sidecar.index.writes import Writer
from sidecar.notes.linktext import LINKS_VERSION, Link
from sidecar.stores.manifest import Manifest
from sidecar.vault.sources import NoteFile, Root
from sidecar.vault.supervisor import RootUnreachable

log = logging.getLogger(__name__)

VERSION_META = "links_read"  # the reader version every indexed note's links were read with
# Per root, the last key whose links this pass read again (JSON). Not the name the single cursor
# of earlier versions had ("links_reread_after"): one of those going back mid-pass read this value
# as a key above every note's, ended the pass and recorded the new version.
CURSOR_META = "links_reread_roots"
OLD_CURSOR_META = "links_reread_after"
BATCH = 200  # notes per batch: the index loop looks at its queue between batches


@dataclass
class LinkProgress:
    """How far the pass is, for status (None in health once there is nothing to do); ``waiting``
    names the roots whose notes wait for them to answer again."""

    done: int = 0
    total: int = 0
    waiting: tuple[str, ...] = ()


class LinkReread:
    """The pass over one index: ``due`` says whether notes wait, ``step`` reads one batch."""

    def __init__(self, manifest: Manifest, writer: Writer, max_bytes: int) -> None:
        self.manifest = manifest
        self.writer = writer
        self.max_bytes = max_bytes
        have = manifest.get_meta(VERSION_META)
        self.progress: LinkProgress | None = None
        if have == str(LINKS_VERSION):
            return
        if have is None and not manifest.read("SELECT 1 FROM files LIMIT 1"):
            self.finish()  # a new index: every note is read by today's reader
            return
        total = int(manifest.read("SELECT count(*) FROM files WHERE state = 'indexed'")[0][0])
        done = sum(self._count(name, after) for name, after in self._cursors().items())
        self.progress = LinkProgress(done, total)
        log.info(
            "links_reread_started notes=%d done=%d old=%s new=%d", total, done, have or "1", LINKS_VERSION
        )

    @property
    def due(self) -> bool:
        return self.progress is not None

    def waits_for(self, roots: Sequence[Root], away: Callable[[Root], bool]) -> bool:
        """Whether every root with notes left to read is away now (nothing to do until one
        answers); the roots it waits for are kept for status."""
        if self.progress is None:
            return False
        left = self._left(roots)
        self.progress.waiting = tuple(r.name for r in left if away(r))
        return len(self.progress.waiting) == len(left) > 0

    def step(self, roots: Sequence[Root], offline: Callable[[Root], bool], read: Reader) -> bool:
        """Read the links of the next batch of notes of the first root not done that answers, and
        write them (one transaction); up to a read that hangs. A root away is passed over (the
        pass comes back to it). Whether the pass moved on."""
        progress = self.progress
        if progress is None:
            return False
        left = self._left(roots)
        if not left:
            self.finish()
            return True
        root = next((r for r in left if not offline(r)), None)
        if root is None:
            progress.waiting = tuple(r.name for r in left)
            return False
        cursors = self._cursors()
        after = cursors.get(root.name, "")
        low, high = _range(root.name)
        rows = self.manifest.read(
            "SELECT key, rel, hash, mtime_ns, size FROM files "
            "WHERE state = 'indexed' AND key > ? AND key < ? ORDER BY key LIMIT ?",
            (max(after, low), high, BATCH),
        )
        found: dict[str, tuple[str, tuple[Link, ...]]] = {}
        later: list[str] = []  # unreadable: the next sweep reads them whole
        last, done, stopped = after, 0, False
        for key, rel, digest, mtime_ns, size in rows:
            if digest:  # else the sweep reads it
                note = NoteFile(key, root, root.path / rel, rel, mtime_ns, size)
                try:
                    got = draft(note, None, None, self.max_bytes, read)
                except RootUnreachable:
                    stopped = True  # this note and those after it: once the root answers again
                    break
                if isinstance(got, Drafted) and got.hash == digest:
                    found[key] = (digest, got.links)
                elif got is not None and not isinstance(got, Drafted):
                    later.append(key)  # unreadable now: what is indexed stays until it reads again
                # A changed note (another hash) or one gone: the sweep indexes or deletes it.
            last, done = str(key), done + 1
        self.writer.relink(found, later)
        if not stopped and len(rows) < BATCH:
            cursors[root.name] = _DONE
        elif last != after:
            cursors[root.name] = last
        else:  # stopped at its first note (a read that hangs): nothing to write, wait for it
            progress.waiting = tuple(sorted({*progress.waiting, root.name}))
            return False
        self.manifest.set_meta(CURSOR_META, json.dumps(cursors, sort_keys=True))
        progress.done = min(progress.total, progress.done + done)  # notes new since: read anew
        if not self._left(roots):
            self.finish()
            return True
        return True

    def _left(self, roots: Sequence[Root]) -> list[Root]:
        """The roots with notes whose links are not read again yet, in key order (a root with
        none left is done, offline or not: an empty vault away held the pass for good)."""
        cursors = self._cursors()
        left = []
        for r in sorted(roots, key=lambda r: _range(r.name)[0]):
            after = cursors.get(r.name, "")
            if after == _DONE:
                continue
            low, high = _range(r.name)
            if self.manifest.read(
                "SELECT 1 FROM files WHERE state = 'indexed' AND key > ? AND key < ? LIMIT 1",
                (max(after, low), high),
            ):
                left.append(r)
        return left

    def _cursors(self) -> dict[str, str]:
        """Each root's last key done (``_DONE`` once all its notes are read). The one key an
        older version kept for the whole index is not read: the pass starts over, which costs a
        read and a parse per note again, never an embedding."""
        raw = self.manifest.get_meta(CURSOR_META) or ""
        try:
            got = json.loads(raw)
        except (ValueError, RecursionError):  # edited by hand: start over (links only, cheap)
            got = None
        if not isinstance(got, dict):
            return {}
        # A value that is no key of its root (edited by hand) starts that root over rather than
        # mark it done unread.
        return {
            k: v
            for k, v in got.items()
            if isinstance(k, str) and isinstance(v, str) and (v == _DONE or _range(k)[0] < v < _range(k)[1])
        }

    def _count(self, name: str, after: str) -> int:
        """How many of a root's notes the pass has read (up to ``after``)."""
        low, high = _range(name)
        upto = high if after == _DONE else after
        return int(
            self.manifest.read(
                "SELECT count(*) FROM files WHERE state = 'indexed' AND key > ? AND key <= ? AND key < ?",
                (low, upto, high),
            )[0][0]
        )

    def finish(self) -> None:
        """Every indexed note's links are today's reader's (the pass ended, or the index is new)."""
        # The cursors go first: a kill between the two leaves the old version with no cursor (the
        # pass starts over), never a cursor of done roots that the next upgrade's pass would trust.
        self.manifest.delete_meta([CURSOR_META, OLD_CURSOR_META])
        self.manifest.set_meta(VERSION_META, str(LINKS_VERSION))
        if self.progress is not None:
            log.info("links_reread_done notes=%d", self.progress.done)
        self.progress = None


_DONE = "done"  # a root's cursor once all its notes are read (no key: keys hold a "/")


def _range(name: str) -> tuple[str, str]:
    """The keys of a root's notes lie strictly between these two: ``name/`` and ``name0`` ('0'
    follows '/'), so ``memory/a`` holds no key of ``memory/ab``."""
    return f"{name}/", f"{name}0"
