"""The batch write protocol: every store changes in one order, so a crash at any point is redone.

Per batch: the manifest marks the files ``indexing``; BM25 docs are replaced and vectors of
vanished chunks deleted; BM25 commits; then one manifest transaction records the new chunks,
their links and ``indexed``. Deletions mark ``deleting`` first (their links dropped and the links to
them resolved again with it, also while a start defers the rest), in the same order. A start finds
any file still marked ``indexing`` / ``deleting`` and redoes it.

Writers queued behind the write lock share one batch (group commit): one Tantivy commit and one
manifest transaction for all of them, in the same order, and each call returns only once its
notes are committed. Before the commit the writer yields to searches in flight (bounded).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence

from sidecar.contracts.errors import DiskFullError, StorageError, StoreError
from sidecar.contracts.wire import memory_agent
from sidecar.index.bm25fill import bm25_doc
from sidecar.index.records import Prepared, file_record, records
from sidecar.index.repair import inboxes_before_write
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.notes.frontmatter import aliases_of
from sidecar.notes.links import (
    drop_links,
    names_of,
    pointed_at,
    replace_links,
    reresolve,
    reresolve_pages,
    set_excluded,
)
from sidecar.notes.linktext import Link
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.group import GroupCommit
from sidecar.stores.bm25_text import Bm25Doc
from sidecar.stores.manifest_rows import ChunkRecord, FileRecord, FileState, IndexedNote

log = logging.getLogger(__name__)

# A commit waits at most this long for the searches in flight to finish (they get the cores first).
COMMIT_YIELD_S = 0.5
# Resolving every link at a start waits for the searches in flight this long between two pages,
# and this long in all over its pages: it holds the write lock throughout (memory writes wait for
# it), and a search that needs that lock itself (an idle agent's inbox rebuilt) counts as in flight,
# so a page's own wait at COMMIT_YIELD_S added 0.5 s per 2,000 links, 25 s at 102,000.
RERESOLVE_PAGE_YIELD_S = 0.05
RERESOLVE_YIELD_S = 1.0


class Writer:
    """Writes prepared notes and deletions into manifest, BM25 and vectors under the write lock."""

    def __init__(
        self,
        stores: Stores,
        vectors: Vectoring,
        wiki_subfolder: str,
        excluded: Callable[[str], str | None] = lambda _key: None,
        exists: Callable[[str, str | None], bool] | None = None,
    ) -> None:
        self.stores = stores
        self.vectors = vectors
        self.wiki_subfolder = wiki_subfolder
        # The rule that leaves a note out now (``Indexer.excluded_by``), asked under the lock.
        self.excluded = excluded
        # Whether a note's file (key, file name) is still there (``Indexer.file_exists``): asked
        # of a link target kept from a rebuild's copy while links are resolved later.
        self.exists = exists
        # During the first sweep of a start every link is resolved once at its end
        # (resolve_all_links): resolving after each batch as well would redo the whole vault's
        # names again and again.
        self.defer_links = False
        # Notes a batch left out as excluded since they were read (``_write_groups``), for the
        # sweep to record after its own findings (``Indexer._record_excluded``).
        self.left_out: dict[str, dict[str, str]] = {}
        self.group: GroupCommit[Sequence[Prepared]] = GroupCommit(stores.write_lock)
        # New key -> old key of moved notes (a folder renamed): the old entry is taken out of
        # every answer in the transaction that records the new one, never both counted or found
        # (``Indexer._apply`` sets it for a sweep's batch; the old entry is removed after).
        self.replacing: Mapping[str, str] = {}
        # Note key -> the chunks its last write added (new texts: each waits for a vector), taken
        # by the indexer once the write returns (``Indexer.index_files``).
        self.added: dict[str, int] = {}
        # A switch to the configured model follows as soon as it loads (set at a start by
        # ``Indexer.reparse_if_chunking_changed``): the notes cut again before it begins are left
        # to its table too; a table attached without a switch takes them back.
        self.switch_due = False

    def write(self, prepared: Sequence[Prepared]) -> None:
        """Write a batch of notes (sharing the commit with writers queued behind the lock)."""
        if not prepared:
            self._write(prepared)
            return
        self.group.run(prepared, [p.note.key for p in prepared], self._write_groups)

    def _write_groups(self, groups: list[Sequence[Prepared]]) -> None:
        prepared = [p for g in groups for p in g]
        # A memory write and the sweep its own file event starts read the same bytes: whichever
        # comes second finds them indexed already (checked under the lock) and writes nothing.
        states = self.stores.manifest.file_states_of([p.note.key for p in prepared])
        fresh = []
        same = 0
        left_out: dict[str, dict[str, str]] = {}  # key -> {key: the rule}, as a sweep finds them
        for p in prepared:
            if (rule := self.excluded(p.note.key)) is not None:
                # Listed or read before a reload excluded it (a long sweep's batch): written now,
                # it was searchable after the reload answered, which removed what was in under
                # this lock (``Indexer.remove_excluded``).
                left_out[p.note.key] = {p.note.key: rule}
            elif _already_indexed(p, states.get(p.note.key)):  # as a sweep treats an unchanged note
                n = p.note
                self.stores.manifest.touch(n.key, n.mtime_ns, n.size, n.ctime_ns, n.ids())
                same += 1
            elif p.note.root.source == "memory" and not os.path.lexists(p.note.path):
                # Read by a sweep, then deleted by its agent (the delete removed the entry under
                # this lock already, or will): written now, a deleted note would be found again.
                log.debug("write_skipped reason=deleted since read key=%s", p.note.key)
            else:
                fresh.append(p)
        if same:
            log.debug("write_skipped reason=already indexed with these bytes count=%d", same)
        if left_out:
            log.info("write_skipped reason=excluded since read count=%d", len(left_out))
            # Recorded as excluded now (a link target, counted in health), not at the next sweep;
            # kept for the sweep under way too, whose listing (older) would record them as absent.
            self.set_excluded(left_out)
            self.left_out.update(left_out)
        if fresh:
            self._write(fresh)

    def _write(self, prepared: Sequence[Prepared]) -> None:
        stores = self.stores
        built = [records(p, "indexed") for p in prepared]
        twice = {k for k, n in Counter(p.note.key for p in prepared).items() if n > 1}
        with stores.write_lock:
            # Before the marks: a rebuild reads the agent's notes as indexed, these ones' last
            # state included (what ``held`` below takes the index to hold).
            inboxes_before_write(stores, {a for p in prepared if (a := memory_agent(p.note.key)) is not None})
            # Read before the marks: only a note recorded ``indexed`` is known to be in BM25 as
            # the manifest says (twice in one batch: the second must replace the first entirely).
            before = {p.note.key: stores.manifest.indexed_chunks(p.note.key) for p in prepared}
            recut, edited = self._recut_for_switch(prepared)
            stores.manifest.mark(file_record(p, "indexing") for p in prepared)
            vanished: list[str] = []
            for (record, chunks), p in zip(built, prepared, strict=True):
                prior = None if record.key in twice else before[record.key]
                old = set(prior.chunks) if prior is not None else stores.manifest.chunk_ids(record.key)
                vanished.extend(old - {c.chunk_id for c in chunks})
                self.added[record.key] = len({c.chunk_id for c in chunks} - old)
                held = _held(prior, record, chunks)
                stores.bm25.replace_note(record.key, _bm25_docs(record, p, chunks), held, old - held)
            if vanished:
                self.vectors.delete_ids(vanished)
            FOREGROUND.yield_to(COMMIT_YIELD_S)
            stores.bm25.commit()
            with stores.manifest.transaction() as db:
                # The names the notes answered to before too: an alias dropped leaves the links
                # it made ambiguous (their count kept it as a candidate).
                names = _alias_names(db, [r.key for r, _ in built])
                for (record, chunks), p in zip(built, prepared, strict=True):
                    stores.manifest.commit_file(record, chunks, db)
                    replace_links(db, record.key, p.links, later=self.defer_links, exists=self.exists)
                    names |= names_of(record.key, p.parsed.aliases if p.parsed else ())
                # A new or changed note may be what an ambiguous or dangling name now means.
                if not self.defer_links:
                    reresolve(db, self.wiki_subfolder, names=names, keys=[r.key for r, _ in built])
                if recut:
                    stores.manifest.leave_to_next(recut, db)
                if edited:
                    # Their chunks whose text stayed kept the flag of the re-cut: the serving
                    # model embeds them too now (a note edited during the switch is found by meaning).
                    stores.manifest.wait_again(edited, db)
                moved = [o for r, _ in built if (o := self.replacing.get(r.key)) is not None]
                if moved:
                    self._retire_in(db, moved)
            # A text whose vector was kept when its chunk was deleted (a note back in the index)
            # has it at once, not after the backfill: never counted as waiting for the model.
            self.vectors.reuse_kept([c for _, chunks in built for c in chunks])
        self.vectors.notify_written()

    def _recut_for_switch(self, prepared: Sequence[Prepared]) -> tuple[list[str], list[str]]:
        """While a switch to another model builds its table, or before it begins: the notes only
        cut again (marked so, their files unchanged), whose new chunks are embedded by that model
        alone (``NEXT_ONLY``), and the others (new, edited). An agent's memory notes are among the
        others: small, and what agents search for, they stay found by meaning during the switch
        (the serving model embeds them first, as it always did)."""
        stores = self.stores
        if stores.building is None and not (self.switch_due and stores.serving is None):
            return [], []
        states = stores.manifest.file_states_of([p.note.key for p in prepared])
        recut: list[str] = []
        others: list[str] = []
        for p in prepared:
            st = states.get(p.note.key)
            only_cut = (
                st is not None and st.state == "indexed" and st.size == -1 and st.mtime_ns == p.note.mtime_ns
            )
            (recut if only_cut and memory_agent(p.note.key) is None else others).append(p.note.key)
        return recut, others

    def delete(self, keys: Sequence[str]) -> None:
        """Remove notes from every store (intent first, so a crash mid-way is redone)."""
        if not keys:
            return
        stores = self.stores
        with stores.write_lock:
            self._retire(keys)
            for key in keys:
                stores.bm25.delete_key(key)
            self.vectors.delete_keys(list(keys))
            stores.bm25.commit()
            with stores.manifest.transaction() as db:
                for key in keys:
                    stores.manifest.delete_file(key, db)
        log.info("notes_deleted count=%d", len(keys))

    def retire(self, keys: Sequence[str]) -> None:
        """Take notes out of every answer now, their removal to follow (``delete``)."""
        with self.stores.write_lock:
            self._retire(keys)

    def _retire(self, keys: Sequence[str]) -> None:
        """The intent, in one transaction before the stores are touched: the notes marked
        ``deleting`` (from then on no answer shows them), their links dropped and the names they
        answered to resolved again without them (a renamed folder's links then name the new
        notes at once, not their old paths while the old entries are removed). Also during a
        start's first sweep, which defers every other resolving to its end: only the links these
        names reach are read, and the old paths stayed linked for the whole sweep. Notes marked
        already (``retire``, a deletion a crash interrupted) are resolved again only where a link
        still points at one of them."""
        with self.stores.manifest.transaction() as db:
            self._retire_in(db, keys)

    def _retire_in(self, db: sqlite3.Connection, keys: Sequence[str]) -> None:
        """``_retire`` within the transaction ``db``."""
        fresh = [k for k in keys if _state(db, k) not in (None, "deleting")]
        # Read before the rows go: a link named by a deleted note's alias (its copy left
        # under a new path) kept the deleted note among its candidates.
        names = _names(keys) | _alias_names(db, keys)
        db.executemany("UPDATE files SET state = 'deleting' WHERE key = ?", [(k,) for k in fresh])
        drop_links(db, keys)
        if fresh or pointed_at(db, keys):
            reresolve(db, self.wiki_subfolder, names=names, keys=keys)

    def set_excluded(self, found: dict[str, dict[str, str]], sources: Collection[str] | None = None) -> None:
        """Remember the excluded notes a sweep found (see ``links.set_excluded``); links whose
        name one of those that came or went could mean are resolved again. ``sources``: the
        sources indexed (the rows of others go); None: every source's rows stay."""
        stores = self.stores
        with stores.write_lock, stores.manifest.transaction() as db:
            if sources is None:
                held = {row[0] for row in db.execute("SELECT DISTINCT source FROM excluded_notes")}
                sources = held | {k.split("/", 1)[0] for k in found}
            changed = set_excluded(db, found, sources)
            if changed and not self.defer_links:
                reresolve(db, self.wiki_subfolder, names=_names(sorted(changed)), keys=sorted(changed))
        if changed:
            log.info("excluded_notes_changed count=%d", len(changed))

    def relink(self, found: Mapping[str, tuple[str, Sequence[Link]]], later: Sequence[str]) -> None:
        """Links of unchanged notes read again (``index.linkreread``): {key: (the hash they were
        read from, links)}, written where the note is still indexed with that hash (a sweep may
        have indexed a newer text meanwhile), then resolved; ``later``: notes not read now, left
        to the next sweep to read whole (their vectors are kept by text)."""
        stores = self.stores
        with stores.write_lock, stores.manifest.transaction() as db:
            written: list[str] = []
            for key, (digest, links) in found.items():
                row = db.execute("SELECT hash, state FROM files WHERE key = ?", (key,)).fetchone()
                if row is not None and tuple(row) == (digest, "indexed"):
                    replace_links(db, key, links, later=self.defer_links, exists=self.exists)
                    written.append(key)
            if later:
                stores.manifest.reread_keys(later, db)
            if written and not self.defer_links:
                reresolve(db, self.wiki_subfolder, keys=written)

    def resolve_all_links(self) -> None:
        """Once per start: resolve every link again (the rules or the notes may have changed while
        the daemon was down, e.g. a wiki subfolder renamed in the config)."""
        stores = self.stores
        manifest = stores.manifest
        # A page of links per transaction, the searches in flight served between pages (waited
        # for within RERESOLVE_YIELD_S in all): the manifest is not held for the whole vault's
        # links. The write lock keeps the notes (and so the names) as they are until the last page.
        budget = RERESOLVE_YIELD_S

        def between() -> None:
            nonlocal budget
            if budget > 0:
                budget -= FOREGROUND.yield_to(min(RERESOLVE_PAGE_YIELD_S, budget))

        with stores.write_lock:
            changed = reresolve_pages(
                manifest.read, manifest.transaction, self.wiki_subfolder, between=between
            )
        if changed:
            log.info("links_reresolved count=%d", changed)

    def clear(self, meta: Mapping[str, str], emptied: Callable[[], None]) -> None:
        """Empty every store (for a rebuild), writing the ``meta`` rows with the manifest's
        emptying. StorageError, nothing emptied: no room on the index's disk for the copy of the
        notes indexed (``Manifest.set_aside``). ``emptied`` is told once the manifest's copy and
        emptying are committed, even when the keyword index or the vectors fail after it: the
        rebuild has begun then and its copy is kept (was: its retry took it for a rebuild not
        begun and, on a disk the copy had filled, said "Nothing was changed" over an empty index)."""
        stores = self.stores
        with stores.write_lock:
            try:
                with stores.manifest.transaction() as db:
                    stores.manifest.set_aside(db)
                    stores.manifest.clear(db)
                    stores.manifest.set_meta_in(db, meta)
            except DiskFullError as exc:  # the room check (``aside_room``): nothing was emptied
                raise StorageError(str(exc)) from exc
            except sqlite3.OperationalError as exc:
                if not disk_full(exc):
                    raise
                # The disk filled since the room check: rolled back, nothing was emptied.
                raise StorageError(
                    f"not rebuilt: the disk of the index ({stores.manifest.path.parent}) filled while "
                    "the rebuild kept its copy of the notes indexed. Nothing was changed. Free some "
                    "space and run `sidecar index --rebuild` again"
                ) from exc
            try:
                stores.bm25.delete_all()
                stores.bm25.commit()
                self.vectors.clear()
            finally:
                emptied()

    def restore_aside(self, wanted: Collection[str], kept_as: str | None = None) -> list[str]:
        """The notes ``wanted`` of those indexed before a rebuild that it did not read back, put
        back as they were (``Manifest.restore_aside``) into the manifest and the keyword index;
        their vectors come from those kept by text or are computed again. Returns their keys (kept
        as JSON in the meta row ``kept_as`` with them, ``Manifest.restore_aside``)."""
        stores = self.stores
        with stores.write_lock:
            keys = stores.manifest.restore_aside(wanted, kept_as)
            if keys:
                try:
                    stores.bm25.add(bm25_doc(v) for k in keys for v in stores.manifest.chunks_of(k))
                    stores.bm25.commit()
                except StoreError as exc:
                    # The notes are back in the manifest (committed): their keys are kept for
                    # status; the keyword index is refilled from it by the check after the sweep.
                    log.warning("rebuild_put_back_keywords_later count=%d error=%s", len(keys), exc)
        return keys


# SQLite's result code of a full disk (or a database at its page limit).
SQLITE_FULL = 13


def disk_full(exc: sqlite3.Error) -> bool:
    """Whether a database error is a full disk, by its result code (an error raised by hand has
    none: by SQLite's message then). Was: any message with "full" in it, e.g. a column so named."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == SQLITE_FULL)
    return "database or disk is full" in str(exc)


def _bm25_docs(record: FileRecord, p: Prepared, chunks: Sequence[ChunkRecord]) -> list[Bm25Doc]:
    aliases = p.parsed.aliases if p.parsed else ()
    return [
        Bm25Doc.of(
            c.chunk_id,
            c.key,
            record.source,
            record.agent,
            title=record.title,
            aliases=aliases,
            headings=c.headings,
            body=c.text,
        )
        for c in chunks
    ]


def _held(prior: IndexedNote | None, record: FileRecord, chunks: Sequence[ChunkRecord]) -> frozenset[str]:
    """The chunks whose keyword documents stay as they are: same id, text and heading path, and
    the note's title and front matter (its title field) unchanged."""
    if prior is None or (prior.title, prior.front_matter) != (record.title, record.front_matter):
        return frozenset()
    return frozenset(
        c.chunk_id
        for c in chunks
        if prior.chunks.get(c.chunk_id) == (c.text, json.dumps(c.headings, ensure_ascii=False))
    )


def _already_indexed(p: Prepared, state: FileState | None) -> bool:
    return (
        state is not None
        and state.state == "indexed"
        and p.parsed is not None
        and p.skip_reason is None
        and state.hash == p.hash
    )


def _state(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT state FROM files WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _alias_names(db: sqlite3.Connection, keys: Sequence[str]) -> set[str]:
    """The link names of these notes' aliases as the manifest holds them now."""
    out: set[str] = set()
    for start in range(0, len(keys), 500):
        part = list(keys[start : start + 500])
        marks = ",".join("?" * len(part))
        sql = f"SELECT key, front_matter FROM files WHERE key IN ({marks}) AND front_matter LIKE '%alias%'"
        for key, front_matter in db.execute(sql, part):
            with contextlib.suppress(ValueError, TypeError):
                out |= names_of(key, aliases_of(json.loads(front_matter)))
    return out


def _names(keys: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for k in keys:
        out |= names_of(k)
    return out
