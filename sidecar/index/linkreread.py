"""Links of unchanged notes read again once an upgrade reads links differently.

The link reader's version (``notes.linktext.LINKS_VERSION``) is recorded with the index. A sweep
reads only the notes that changed, so after an upgrade whose reader reads links differently (an
anchor written ``[[Note#Heading\\|alias]]``, a link to a Canvas) the notes nobody edited kept the
links the old reader found, for good. This pass reads each indexed note once more for its links
alone: no chunk, keyword document or vector is touched (the text is as indexed, checked by its
hash), so it costs a read and a parse per note, never an embedding. It runs in batches between
sweeps, in key order; the last key done is kept in the manifest, so a stop or a kill -9 resumes
there. The pass waits while a root is offline or a read of it hangs (``Indexer.links_due``), and a
batch stops at a read that hangs: marking those notes for the sweep would cut and write every note
of a share that was away for a moment. A note that cannot be read (a read error) is left to the
next sweep, which reads it whole (its vectors kept by text), as a chunker upgrade does.
"""

from __future__ import annotations

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
CURSOR_META = "links_reread_after"  # the last key whose links this pass read again
BATCH = 200  # notes per batch: the index loop looks at its queue between batches


@dataclass
class LinkProgress:
    """How far the pass is, for status (None in health once there is nothing to do)."""

    done: int = 0
    total: int = 0


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
        after = manifest.get_meta(CURSOR_META) or ""
        total, done = manifest.read(
            "SELECT count(*), coalesce(sum(key <= ?), 0) FROM files WHERE state = 'indexed'", (after,)
        )[0]
        self.progress = LinkProgress(int(done), int(total))
        log.info(
            "links_reread_started notes=%d done=%d old=%s new=%d", total, done, have or "1", LINKS_VERSION
        )

    @property
    def due(self) -> bool:
        return self.progress is not None

    def step(self, roots: Sequence[Root], offline: Callable[[Root], bool], read: Reader) -> bool:
        """Read the links of the next batch of notes again and write them (one transaction); none
        while a root is offline (the pass waits for it), up to a read that hangs. Whether the
        pass moved on."""
        progress = self.progress
        if progress is None or any(offline(r) for r in roots):
            return False
        after = self.manifest.get_meta(CURSOR_META) or ""
        rows = self.manifest.read(
            "SELECT key, source, agent, rel, hash, mtime_ns, size FROM files "
            "WHERE state = 'indexed' AND key > ? ORDER BY key LIMIT ?",
            (after, BATCH),
        )
        if not rows:
            self.finish()
            return True
        by_name = {r.name: r for r in roots}
        found: dict[str, tuple[str, tuple[Link, ...]]] = {}
        later: list[str] = []  # unreadable: the next sweep reads them whole
        last, done, stopped = after, 0, False
        for key, source, agent, rel, digest, mtime_ns, size in rows:
            root = by_name.get(f"memory/{agent}" if source == "memory" else source)
            if root is not None and digest:  # else no root of it any more, or the sweep reads it
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
        if last != after:
            self.manifest.set_meta(CURSOR_META, last)
        progress.done = min(progress.total, progress.done + done)  # notes new since: read anew
        if not stopped and len(rows) < BATCH:
            self.finish()
            return True
        return last != after

    def finish(self) -> None:
        """Every indexed note's links are today's reader's (the pass ended, or the index is new)."""
        self.manifest.set_meta(VERSION_META, str(LINKS_VERSION))
        self.manifest.delete_meta([CURSOR_META])
        if self.progress is not None:
            log.info("links_reread_done notes=%d", self.progress.done)
        self.progress = None
