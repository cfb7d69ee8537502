"""The rewrites of a ``Bm25Index`` in its own writers, a mixin of it: the vault's and the wiki's
index (``compact_shared``) and each memory index (``compact_memory``) filled anew from the
manifest so that their deleted documents weigh in no score, the counts that say when one is due,
and the agents' times of last use that a rewrite or a refill beside keeps (``inboxes_as_in``,
``put_back_times``). Its own module because these whole-index rewrites are read and changed apart
from the index's everyday writes, commits and opening in ``bm25``; the state it works on is the
index's own, made in ``Bm25Index.__init__``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.contracts.errors import StoreError
from sidecar.stores.bm25_folder import Folder, disk_hint, engine, segment_counts
from sidecar.stores.bm25_inboxes import Pair
from sidecar.stores.bm25_search import EVERYONE, EVERYONE_DIR, Bm25Search
from sidecar.stores.bm25_text import Bm25Doc

# Its log lines keep the logger of the module they came from (``bm25``): journald users grep by it.
log = logging.getLogger("sidecar.stores.bm25")


class Bm25Rewrite(Bm25Search):
    """The rewrites of a ``Bm25Index`` (which sets the state below) in its own writers:
    ``compact_shared``, ``compact_memory``, and what they and a refill beside keep of the
    agents' indexes (``inboxes_as_in``)."""

    _closed: bool

    if TYPE_CHECKING:  # the index's own (``Bm25Index``)

        def _put(self, folder: Folder, doc_id: str, d: Bm25Doc, body: str) -> None: ...
        def _learn(self, docs: Iterable[Bm25Doc]) -> None: ...

    def memory_deleted_docs(self) -> dict[str, tuple[int, int]]:
        """(deleted, all) documents of each agent's own index and, while a person's search reads
        it, of the index of every agent's memory (``EVERYONE``), as their segments keep them:
        Tantivy counts a deleted document and its words in BM25 until its segment is merged, so
        an agent's own edits and deletes moved its notes' scores away from those a fresh index
        of the same notes gives (``compact_memory``). Read from each index's ``meta.json``: no
        index is opened. One whose count cannot be read is left out (judged again next time)."""
        bases = {agent: self.path / "memory" / agent for agent in self.agents()}
        if self._everyone is not None and self.everyone_ready:
            bases[EVERYONE] = self.path / EVERYONE_DIR
        out: dict[str, tuple[int, int]] = {}
        for name, base in bases.items():
            try:
                (gone, held), (gone_p, held_p) = (
                    segment_counts(base / "chunks"),
                    segment_counts(base / "pages"),
                )
            except StoreError:
                continue
            out[name] = (gone + gone_p, held + held_p)
        return out

    def compact_memory(
        self,
        name: str,
        docs: Sequence[Bm25Doc],
        stop: threading.Event | None = None,
        *,
        drift_only: bool = False,
    ) -> bool:
        """A memory index (an agent's own, or ``EVERYONE``) rewritten in its own writers from
        ``docs`` (the notes it holds, from the manifest), in one commit of each of its two
        folders: its deleted documents then weigh in no score. Searches keep the old snapshot
        until the commit; a failure or a kill before it leaves the old index whole (the next
        run tries again); a ``stop`` rolls it back. Nothing else changes: the folder is never
        removed, a person's search goes on reading the index of every agent's memory, and an
        agent's index keeps its time of last use (an idle one is not taken for used). One that
        does not hold exactly ``docs``' notes is rewritten too (logged as a rebuild); an agent's
        left with no note is removed. Left as it is (False) when it is not there, fails, waits
        for a commit, or is being refilled; and, with ``drift_only`` (chosen for a count that
        differed, nothing deleted to drop), when it holds exactly ``docs``' count after all."""
        self._usable()
        with self._lock:
            if self.read_only or self._retired or self._closed:
                return False
            opened = name != EVERYONE and name not in self._open
            pair = self._compactable(name)
            if pair is None:
                return False
            try:
                return self._rewrite(name, pair, docs, stop, drift_only=drift_only)
            finally:
                if opened:  # opened for this alone: let go as an eviction does
                    with self._inbox_lock:
                        if self._open.get(name) is pair:
                            del self._open[name]
                    self._scorer.forget(pair)

    def _compactable(self, name: str) -> Pair | None:
        """The pair ``compact_memory`` may rewrite now, or None."""
        if name == EVERYONE:
            pair = self._everyone if self.everyone_ready else None
        else:
            with self._inbox_lock:
                if name not in self._agents or name in self._emptied:
                    return None
            pair = self._inbox(name)
        if pair is None or any(n.startswith(f"{name}/") or n == name for n in self.failing):
            return None
        if any(f.dirty or f.closed for f in pair):
            return None  # a change waits for its commit: the next run
        return pair

    def _rewrite(
        self,
        name: str,
        pair: Pair,
        docs: Sequence[Bm25Doc],
        stop: threading.Event | None,
        *,
        drift_only: bool,
    ) -> bool:
        notes: dict[str, list[Bm25Doc]] = {}
        for d in docs:
            notes.setdefault(d.key, []).append(d)
        # One whose counts differ from ``docs`` is rewritten all the same (the safe path: the old
        # index serves until the commit); skipped, it kept its drift and was skipped again every
        # run until a restart's check refilled it. Logged as a rebuild once committed.
        held = (int(pair[0].searcher.num_docs), int(pair[1].searcher.num_docs))
        if drift_only and held == (len(docs), len(notes)):
            return False
        # An agent's last use is its index's last commit (``_last_use``): kept as it was.
        kept = {} if name == EVERYONE else _mtimes(pair)
        try:
            if not self._fill_in_place(pair, notes.values(), stop):
                return False
        finally:
            restore_mtimes(kept)
        if held != (len(docs), len(notes)):
            log.warning(
                "index_rebuilt store=bm25 part=%s reason=count mismatch expected=%s actual=%s",
                _part(name), (len(docs), len(notes)), held,
            )  # fmt: skip
        if not docs and name != EVERYONE:  # the agent has no note left: no index, as a commit does
            self._remove_inbox(name)
        return True

    def compact_shared(self, docs: Iterable[Bm25Doc], stop: threading.Event | None = None) -> bool:
        """The vault's and the wiki's index rewritten in its own writers from ``docs`` (every
        chunk of the vault and the wiki, from the manifest, a note's chunks together), in one
        commit of each of its two folders: its deleted documents then weigh in no score (the
        vault's statistics score memory hits too). No memory index is touched. Searches keep the
        old snapshot until the commit; a failure (raised) or a kill before it leaves the old index
        whole; a ``stop`` rolls it back (False). Left as it is (False) while a change waits for
        its commit."""
        self._usable()
        with self._lock:
            pair = (self._chunks, self._pages)
            if self.read_only or self._retired or self._closed or any(f.dirty or f.closed for f in pair):
                return False
            self.umlauts.clear()  # learned again from the live notes, as by a rebuild
            filled = self._fill_in_place(
                pair, _by_note(docs), stop, learn=self._learn, undo=self.umlauts.forget_unsaved
            )
            if filled:
                self.umlauts.save()
            return filled

    def _fill_in_place(
        self,
        pair: Pair,
        notes: Iterable[Sequence[Bm25Doc]],
        stop: threading.Event | None,
        *,
        learn: Callable[[Sequence[Bm25Doc]], None] | None = None,
        undo: Callable[[], None] | None = None,
    ) -> bool:
        """``pair`` emptied in its own writers and filled with ``notes`` (each note's chunks
        together; ``learn`` sees each first), one commit of each folder: searches keep the old
        snapshot until it, a failure (raised, with the disk's words) or a kill before it leaves
        the old index whole, a ``stop`` rolls it back (False). ``undo`` runs at either rollback."""
        try:
            with engine("compact"):
                for folder in pair:
                    folder.writer.delete_all_documents()
                    folder.dirty = True
                for chunks in notes:
                    if stop is not None and stop.is_set():
                        break
                    if learn is not None:
                        learn(chunks)
                    self._put_note(pair, chunks)
            if stop is not None and stop.is_set():
                for folder in pair:
                    folder.recover_writer(deliberate=True)
                if undo is not None:
                    undo()
                return False
            for folder in pair:
                folder.commit()  # the same live notes either way: one committed alone is no harm
        except BaseException as exc:
            for folder in pair:
                if folder.dirty:
                    folder.recover_writer()
            if undo is not None:
                undo()
            if isinstance(exc, StoreError):
                raise StoreError(f"{exc}{disk_hint(self.path)}") from exc
            raise
        return True

    def _put_note(self, pair: Pair, chunks: Sequence[Bm25Doc]) -> None:
        """One note's chunks and its page into ``pair``'s writers."""
        bodies = []
        for d in chunks:
            body = f"{d.headings}\n{d.body}" if d.headings else d.body
            self._put(pair[0], d.chunk_id, d, body)
            bodies.append(body)
        self._put(pair[1], chunks[0].key, chunks[0], "\n".join(bodies))

    def inboxes_as_in(self, other: Path) -> dict[Path, tuple[int, int]]:
        """After a refill beside, before the swap (committed, the write lock held): the agents'
        own indexes as the index in ``other`` has them. One it has not (removed as idle: its
        agent's memory is in the index of every agent's memory) is removed here too, rebuilt
        when its agent is back; each other's use note (``used``) is copied. Returned: the times
        of last use of this index's ``meta.json`` files, put back once it is closed
        (``put_back_times``): taken for used at each refill, an idle agent's index was never
        removed."""
        kept: dict[Path, tuple[int, int]] = {}
        with self._lock:
            for agent in self.agents():
                was = other / "memory" / agent
                if not was.is_dir():
                    self._remove_inbox(agent)
                    continue
                base = self.path / "memory" / agent
                with contextlib.suppress(OSError):
                    if (was / "used").is_file():
                        shutil.copy2(was / "used", base / "used")
                for meta, times in meta_times(was).items():
                    kept[base / meta.parent.name / meta.name] = times
        return kept

    def deleted_docs(self) -> tuple[int, int]:
        """(deleted, all) documents of the vault's and the wiki's indexes as their segments keep
        them: Tantivy drops a deleted document only when its segment is merged, and a segment of
        a vault that shrank is not merged again (its deleted notes kept the disk and counted in
        the word statistics). The memory indexes are counted apart (``memory_deleted_docs``): each
        is rewritten alone, and an agent's churn must not rebuild what every other agent searches."""
        deleted = total = 0
        for folder in (self._chunks, self._pages):
            try:
                gone, held = segment_counts(folder.path)
            except StoreError:
                continue  # unreadable: judged again next time
            deleted, total = deleted + gone, total + held
        return deleted, total


def _by_note(docs: Iterable[Bm25Doc]) -> Iterator[list[Bm25Doc]]:
    """``docs`` (a note's chunks one after another) grouped by note."""
    chunks: list[Bm25Doc] = []
    for d in docs:
        if chunks and d.key != chunks[0].key:
            yield chunks
            chunks = []
        chunks.append(d)
    if chunks:
        yield chunks


def _part(name: str) -> str:
    """A memory index as the log names it."""
    return EVERYONE_DIR if name == EVERYONE else f"memory/{name}"


def _mtimes(pair: Pair) -> dict[Path, tuple[int, int]]:
    """The (access, modification) times of a pair's ``meta.json`` files."""
    return meta_times(pair[0].path.parent)


def meta_times(base: Path) -> dict[Path, tuple[int, int]]:
    """The (access, modification) times of the ``meta.json`` files of the pair in ``base``."""
    out = {}
    for part in ("chunks", "pages"):
        meta = base / part / "meta.json"
        with contextlib.suppress(OSError):
            st = meta.stat()
            out[meta] = (st.st_atime_ns, st.st_mtime_ns)
    return out


def restore_mtimes(kept: dict[Path, tuple[int, int]]) -> None:
    for meta, times in kept.items():
        try:
            os.utime(meta, ns=times)
        except OSError as exc:  # the index then looks used: removed as idle a while later
            log.debug("bm25_use_time_not_kept path=%s error=%s", meta, exc)


def put_back_times(kept: dict[Path, tuple[int, int]]) -> None:
    """The (access, modification) times ``inboxes_as_in`` kept, put back (the files that are)."""
    restore_mtimes({meta: times for meta, times in kept.items() if meta.exists()})
