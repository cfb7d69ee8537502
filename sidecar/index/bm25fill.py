"""The keyword index filled from the manifest: every indexed chunk (a refill, in place or beside),
or the notes written while a refill beside ran (its catch-up). No note is read: the manifest
holds every chunk's text. Imports the stores only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.bm25_text import Bm25Doc
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import ChunkView


class Stopping(Protocol):
    """What ends a fill or a catch-up between notes: a stop event, or a refill's own reasons
    (``beside``: a compaction gives way to a rebuild)."""

    def is_set(self) -> bool: ...


_FILL_BATCH = 5000  # chunks added at a time by a refill (a stop is looked at between them)


def fill_bm25(
    index: Bm25Index,
    manifest: Manifest,
    stop: Stopping | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Every indexed chunk of the manifest into ``index`` (emptied first), committed. A stop
    ends it between notes, uncommitted: a daemon told to stop within its service's timeout must
    not wait for a refill of a large vault (the next start refills, its counts not matching).
    ``progress`` is told the chunks added so far after each batch."""
    index.delete_all()
    docs: list[Bm25Doc] = []
    added = 0
    for v in manifest.all_chunks():  # in note order: a note's chunks go in together (its page)
        # Looked at for every chunk (a flag's read), not at each batch only: after a stop the
        # stores are closed soon, and a batch of 5,000 chunks went on reading the manifest.
        if stop is not None and stop.is_set():
            index.rollback()  # the emptying too: the index stays as it was
            return
        if len(docs) >= _FILL_BATCH and docs[-1].key != v.key:
            index.add(docs)
            added += len(docs)
            if progress is not None:
                progress(added)
            docs = []
        docs.append(bm25_doc(v))
    if stop is not None and stop.is_set():
        index.rollback()
        return
    index.add(docs)
    if progress is not None:
        progress(added + len(docs))
    if stop is not None and stop.is_set():  # came during the last batch: no commit begun
        index.rollback()
        return
    index.commit()


def bm25_doc(v: ChunkView) -> Bm25Doc:
    """A chunk's keyword document, from the manifest."""
    return Bm25Doc.of(
        v.chunk_id,
        v.key,
        v.source,
        v.agent,
        title=v.title,
        aliases=v.aliases,
        headings=v.headings,
        body=v.text,
    )


def catch_up(
    new: Bm25Index,
    manifest: Manifest,
    keys: set[str],
    *,
    everything: bool,
    stop: Stopping | None = None,
) -> None:
    """The notes written or deleted during a refill beside, into ``new`` as the manifest holds
    them now; every note when the old index was emptied meanwhile (a rebuild). A stop ends it
    between notes (the refill is then dropped: what was written needs no undoing)."""
    if everything:
        fill_bm25(new, manifest, stop)
        return
    for key in sorted(keys):
        if stop is not None and stop.is_set():
            return
        docs = [bm25_doc(v) for v in manifest.indexed_chunks_of(key)]
        if docs:
            new.replace_note(key, docs)
        else:
            new.delete_key(key)
