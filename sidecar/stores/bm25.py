"""BM25 over chunk text with Tantivy: the keyword arm. One writer (this process), readers reload.

Here: the index opened, its writes, commits and repairs, and the pair of every agent's memory.
Its searches (queries built from analysed terms, no user text parsed): ``bm25_search``; the
agents' own indexes: ``bm25_inboxes``; its rewrites in its own writers (compactions):
``bm25_rewrite``; how text is read: ``bm25_text``; one index folder:
``bm25_folder``; an inbox's hits on the vault's scale: ``bm25_scoring``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path

import tantivy

from sidecar.contracts.errors import (
    DaemonRunningError,
    IndexNotOpenError,
    PassingFaultError,
    StoreError,
    StoreOutdatedError,
)
from sidecar.contracts.wire import memory_agent
from sidecar.stores.aside import aside_name
from sidecar.stores.bm25_folder import (
    REMOVED_MARK,
    Folder,
    check_layout,
    disk_hint,
    engine,
    live_docs,
    low_disk,
    remove_folder,
    subfolders,
)
from sidecar.stores.bm25_inboxes import Pair
from sidecar.stores.bm25_rewrite import Bm25Rewrite, meta_times, restore_mtimes
from sidecar.stores.bm25_scoring import Scorer
from sidecar.stores.bm25_search import EVERYONE, EVERYONE_DIR
from sidecar.stores.bm25_text import (
    READABLE_LAYOUTS,
    Bm25Doc,
    all_analyzers,
    build_schema,
    field_analyzers,
    german_fold,
)
from sidecar.stores.cjk import bigrams
from sidecar.stores.umlauts import UmlautWords
from sidecar.stores.versions import BM25_LAYOUT, LAYOUT_FILE, bm25_layout, record_bm25_layout

log = logging.getLogger(__name__)


def _close_after_failure(folder: Folder) -> None:
    """Close a folder after the open of the index failed; an error of the close is logged, never
    raised: raised, it hid the open's error (a permission denied, which decides between the
    read-only state and a retry, or damage)."""
    try:
        folder.close()
    except Exception as exc:
        log.warning("bm25_close_failed path=%s error=%s (after a failed open)", folder.path, exc)


# ``filled`` in the folder of every agent's memory (``EVERYONE_DIR``) says it holds all memory (an
# install from before it fills it from the manifest; until then a person's search reads the inboxes).
_FILLED = "filled"

NOT_OPEN = "the keyword index is not open"  # how a search or write on a lost index begins


class Bm25Index(Bm25Rewrite):
    """BM25 over chunks and over whole notes (pages): one Tantivy index each in ``chunks/`` and
    ``pages/`` for the vault and the wiki, and the same pair for each agent's memory in
    ``memory/<agent>/``; ``add``/``delete_key`` then ``commit`` make changes visible.

    Hits are chunks, but a note's words are spread over its chunks: a page holding every word of
    a question in different sections matches it better than any of its chunks does. The page
    index scores that (``search_pages``), and fusion hands it to the page's chunks.

    The keyword statistics (documents, lengths, how many hold a word) are those of the vault and
    the wiki alone: an agent's memory is scored against them and counted in none (``Scorer``).
    An inbox's pair is opened when used (at most ``_OPEN_INBOXES`` at once) and removed when a
    commit leaves it empty, or when its agent has not used it for a long while (``remove_idle``;
    rebuilt from the manifest when the agent is back, ``inbox_missing``). Every agent's memory is
    also written to one more pair, ``memory-all``: a person's search reads that one, not every
    inbox (see ``_everyone_hits``).
    """

    def __init__(self, path: Path, *, read_only: bool = False, layout: int = BM25_LAYOUT) -> None:
        self.path = path  # made by its parts' folders (with their guard)
        check_layout(path, layout)  # before anything is made or written in the folder
        # An older layout's index is read with its own analyzers while an upgrade refills the
        # index in a side folder (``index.upgrade``); writes reach it too, and are noted there.
        self.layout = layout
        # Readers only (its disk is full): nothing is made, moved aside, removed or written.
        self.read_only = read_only
        if (path / "meta.json").exists():  # one index in the folder itself: before pages
            raise StoreOutdatedError(f"BM25 index {path} has no page index")
        if (path / "chunks").exists() and not (path / "memory").is_dir():
            raise StoreOutdatedError(f"BM25 index {path} holds memory beside the vault")
        self.schema = build_schema(layout)
        self.analyzers = all_analyzers(layout)
        self._field_analyzer = field_analyzers(layout)
        # Notes written since an upgrade's refill began (``changes_since``), None when none runs;
        # ``_all_changed``: every document was dropped meanwhile (a rebuild).
        self._changed: set[str] | None = None
        self._all_changed = False
        self._lock = threading.Lock()  # writes, commits, and closing an inbox
        self._inbox_lock = threading.RLock()  # the table of open inboxes
        self._closed = False
        self._unclosed: list[Folder] = []  # folders whose close raised: the next close tries again
        # Why it is closed with no index open in its place (``lost``), else None.
        self.unavailable: str | None = None
        # Why the index takes no commit until it is made anew (a leftover file that cannot be
        # removed: ``_note_stuck``), else None: the repair moves it aside and refills it.
        self.stuck: str | None = None
        # Failed commits on a leftover (``Folder.leftover_failures``, its error) of each inbox
        # closed meanwhile (``_evict``): an inbox reopened went on from 0 and was never stuck.
        self._leftover_counts: dict[str, list[tuple[int, str]]] = {}
        # The index that took this one's place at an upgrade's swap (``retire``): searches read it.
        self._successor: Bm25Index | None = None
        self._retired = False
        self._chunks = Folder(path / "chunks", self.schema, read_only=read_only, layout=layout)
        try:
            self._pages = Folder(path / "pages", self.schema, read_only=read_only, layout=layout)
        except BaseException:
            _close_after_failure(self._chunks)  # its writer's lock released: the next try found it busy
            raise
        self._open: OrderedDict[str, Pair] = OrderedDict()  # least recently used first
        self._emptied: set[str] = set()  # agents whose documents ``delete_all`` dropped (uncommitted)
        self._touched: set[str] = set()  # agents whose inbox was written since the last commit
        # Inbox indexes that failed (``<agent>/chunks`` or ``/pages`` for a search, ``<agent>`` for
        # one moved aside as damaged -> error): skipped by searches, reported as a problem until a
        # search of that index succeeds or a refill rebuilt it (the repair refills the index).
        self.failing: dict[str, str] = {}
        self._refilling = False  # ``delete_all`` was called: the next commit ends a refill
        self.refills = 0  # refills committed (a rebuild): what health's last compaction is about
        self._kept_use: dict[Path, tuple[int, int]] = {}  # agents' last use a refill puts back
        self._scorer = Scorer()
        # The notes' words written with an umlaut (``umlaut_readings``), kept beside the index.
        self.umlauts = UmlautWords(path)
        self._wide_until = 0.0  # a person's search was lately: ``_MAX_OPEN_INBOXES`` stay open until
        self._everyone: Pair | None = None  # every agent's memory (None: read-only and not made)
        self.everyone_ready = False  # it holds all memory: a person's search reads it alone
        self._used_at: dict[str, float] = {}  # agent -> when its use was last noted on disk
        try:
            self._open_memory(path, read_only, layout)
        except BaseException:
            # No file handles left, say: the vault's writers closed, or the next try (the reopen
            # of a lost index) finds their locks held and takes them for another daemon's.
            _close_after_failure(self._chunks)
            _close_after_failure(self._pages)
            raise

    def _open_memory(self, path: Path, read_only: bool, layout: int) -> None:
        """The agents' inboxes found and the pair of every agent's memory opened."""
        memory = path / "memory"
        if read_only:
            self._agents = {p.name for p in subfolders(memory) if "." not in p.name}
            self._open_everyone()
            return
        try:
            memory.mkdir(exist_ok=True)
            # An agent's name has no dot: ``x.broken-…`` or a stray folder is none of theirs.
            found = [p for p in memory.iterdir() if p.is_dir()]
        except OSError as exc:
            raise StoreError(f"BM25 index {memory} cannot be made: {exc.strerror or exc}") from exc
        self._agents = {p.name for p in found if "." not in p.name}
        for p in found:
            if REMOVED_MARK in p.name:  # a removal cut short (a crash, a file that would not go)
                shutil.rmtree(p, ignore_errors=True)
        self._open_everyone()
        if not read_only and not (path / LAYOUT_FILE).is_file():
            try:
                record_bm25_layout(path, layout)
            except OSError as exc:  # a full disk: the layout is read from the analyzers meanwhile
                log.warning("bm25_layout_not_recorded path=%s error=%s", path, exc.strerror or exc)

    @property
    def _searcher(self) -> tantivy.Searcher:
        return self._chunks.searcher

    def _open_everyone(self) -> None:
        """The pair holding every agent's memory, opened (made when missing). Made new beside no
        inbox, it holds all memory there is to hold (a new install); beside inboxes (an install
        from before it) it is filled from the manifest at start (``fill_everyone``). Damaged, it
        is moved aside and made anew, to be filled likewise."""
        folder = self.path / EVERYONE_DIR
        made = not (folder / "chunks" / "meta.json").is_file()
        try:
            self._everyone = self._everyone_pair()
        except (DaemonRunningError, PassingFaultError):
            if self.read_only:
                return
            raise
        except StoreError as exc:
            if self.read_only:  # nothing made or moved: a person's search reads the inboxes
                log.warning("bm25_everyone_unavailable path=%s error=%s (read-only)", folder, exc)
                return
            self._everyone_aside(exc)
            self._everyone = self._everyone_pair()
            made = False  # memory there is: filled from the manifest
        if (folder / _FILLED).is_file():
            self.everyone_ready = True
        elif made and not self._agents and not self.read_only:
            self._mark_filled()

    def _everyone_pair(self) -> Pair:
        return self._pair(self.path / EVERYONE_DIR)

    def _pair(self, base: Path) -> Pair:
        ro, layout = self.read_only, self.layout
        return Folder(base / "chunks", self.schema, lazy=True, read_only=ro, layout=layout), Folder(
            base / "pages", self.schema, lazy=True, read_only=ro, layout=layout
        )

    def _everyone_aside(self, exc: BaseException) -> None:
        """The damaged pair of every agent's memory moved aside (next to the index, where status
        names it and a month removes it); refilled from the manifest."""
        pair, self._everyone, self.everyone_ready = self._everyone, None, False
        if pair is not None:
            self._scorer.forget(pair)
        folder = self.path / EVERYONE_DIR
        target = aside_name(self.path.parent / f"bm25-{EVERYONE_DIR}")
        try:
            folder.rename(target)
        except FileNotFoundError:
            pass
        except OSError:
            remove_folder(folder)
        log.error("index_rebuilt store=bm25 part=%s reason=%s moved_to=%s", EVERYONE_DIR, exc, target)

    def _mark_filled(self) -> None:
        """The pair of every agent's memory holds all of it from now on (and after a restart)."""
        self.everyone_ready = True
        try:
            (self.path / EVERYONE_DIR / _FILLED).write_text("all memory\n", encoding="utf-8")
        except OSError as exc:  # a full disk: the next start fills it again
            log.warning("bm25_everyone_not_recorded error=%s", exc.strerror or exc)

    def _everyone_holds(self, agent: str) -> bool:
        """Whether the pair of every agent's memory holds a note of ``agent`` (as last committed)."""
        pair = self._everyone
        if pair is None:
            return False
        searcher = pair[1].searcher
        if searcher.num_docs == 0:
            return False
        with engine("count"):
            query = tantivy.Query.term_query(self.schema, "agent", agent)
            return bool(searcher.search(query, limit=1, count=True).count)  # type: ignore[attr-defined]  # missing from the stubs

    def everyone_gap(self) -> str | None:
        """Why a person's search does not read the pair of every agent's memory, but the agents'
        own indexes (where an agent whose own one was removed as idle has no word found):
        ``filling`` (not filled yet: an upgrade's first start, one moved aside and refilled),
        ``damaged`` (its searches fail, the repair refills it), ``read-only`` (it cannot be
        filled); None while it reads it."""
        if any(name.startswith(f"{EVERYONE}/") for name in dict(self.failing)):
            return "damaged"
        if self._everyone is not None and self.everyone_ready:
            return None
        return "read-only" if self.read_only else "filling"

    def _folders(self) -> list[Folder]:
        everyone = self._everyone or ()
        return [self._chunks, self._pages, *everyone, *(f for pair in self._open_pairs() for f in pair)]

    def _targets(
        self, key: str, agent: str | None = None, *, everyone: bool = True, new: bool = True
    ) -> list[Pair]:
        """Where note ``key``'s documents are written: the shared pair; or its agent's inbox
        (emptied first when a refill's ``delete_all`` dropped it) and the pair of every agent's
        memory (unless not ``everyone``). An agent without an index of its own gets one when
        ``new`` and it has no memory yet (a new agent); one whose index was removed as idle gets
        none: a search with its scope rebuilds it whole from the manifest (made here, it would
        hold this note alone)."""
        owner = memory_agent(key)
        if owner is None:
            return [(self._chunks, self._pages)]
        name = agent or owner
        out = []
        if name in self._agents or (
            new and not (everyone and self.everyone_ready and self._everyone_holds(name))
        ):
            pair = self._inbox(name, create=True)
            assert pair is not None
            self._touched.add(name)
            if name in self._emptied:
                for folder in pair:
                    folder.writer.delete_all_documents()
                    folder.dirty = True
                self._emptied.discard(name)
            out.append(pair)
        if everyone and self._everyone is not None:
            out.append(self._everyone)
        return out

    def add(self, docs: Iterable[Bm25Doc]) -> None:
        """Chunks, grouped by note: each note's chunks also make its page (all of a note's chunks
        come in one call, after ``delete_key``)."""
        notes: dict[str, list[Bm25Doc]] = {}
        for d in docs:
            notes.setdefault(d.key, []).append(d)
        self._note_changes(notes)
        self._learn(d for chunks in notes.values() for d in chunks)
        self._add(notes)

    def changes_since(self, on: bool = True) -> None:
        """From now on, note the keys of the notes written or deleted (an upgrade's refill began:
        what changes meanwhile is written into the new index from the manifest before the swap);
        ``on`` False: no more (the refill was given up)."""
        with self._lock:
            self._changed, self._all_changed = (set() if on else None), False

    def changes(self) -> tuple[set[str], bool]:
        """The keys written or deleted since ``changes_since``, and whether every document was
        dropped meanwhile (a rebuild); called with the stores' write lock held, nothing more
        comes until it is released."""
        with self._lock:
            return set(self._changed or ()), self._all_changed

    def emptied_meanwhile(self) -> bool:
        """Whether every document was dropped since ``changes_since`` (a rebuild began): a flag's
        read, looked at for each chunk a refill beside adds."""
        return self._all_changed

    def noted_count(self) -> int:
        """How many notes were written or deleted since ``changes_since`` (0 when not noting).
        Without the lock: a writer's commit holds it for seconds, and a size read is whole."""
        return len(self._changed or ())

    def _note_changes(self, keys: Iterable[str]) -> None:
        if self._changed is not None:
            self._changed.update(keys)

    def _add(self, notes: dict[str, list[Bm25Doc]], *, everyone: bool = True) -> None:
        with self._lock, self._writing("write"):
            for key, chunks in notes.items():  # a note's chunks and its page, then the next note
                if (owner := memory_agent(key)) is not None:
                    self._make_room(owner)
                for target in self._targets(key, chunks[0].agent, everyone=everyone):
                    bodies = []
                    for d in chunks:
                        body = f"{d.headings}\n{d.body}" if d.headings else d.body
                        self._put(target[0], d.chunk_id, d, body)
                        bodies.append(body)
                    self._put(target[1], key, chunks[0], "\n".join(bodies))

    def replace_note(
        self, key: str, docs: Sequence[Bm25Doc], held: Collection[str] = (), stale: Collection[str] = ()
    ) -> None:
        """One note's chunks (all of them, in order) in place of what the index holds of it, and
        its page. ``held``: chunk ids whose documents the index holds as they are (left alone:
        a line appended to a note of 2,000 chunks re-added all of them, most of a second);
        ``stale``: the note's other chunk ids in the index, removed. Without ``held`` every chunk
        of the note is replaced."""
        self._learn(d for d in docs if d.chunk_id not in held)
        self._note_changes((key,))
        # Every chunk held, none stale: the note's documents are as the index holds them (a note
        # read again unchanged, as a start does for notes written from file events), its page
        # too (same title, front matter and chunk texts; no positions are indexed, so their
        # order counts for nothing). Written anew, the deleted copy counted in the page index's
        # BM25 statistics until a merge: a restart answered with other page scores.
        unchanged = bool(docs) and not stale and all(d.chunk_id in held for d in docs)
        with self._lock, self._writing("write"):
            owner = memory_agent(key)
            if owner is not None:
                self._make_room(owner)
            # No docs: a note removed, which makes no agent's index (one that never held anything
            # has nothing to remove).
            for chunks, pages in self._targets(key, docs[0].agent if docs else None, new=bool(docs)):
                if held:
                    for chunk_id in stale:
                        chunks.writer.delete_documents_by_term("chunk_id", chunk_id)
                else:
                    chunks.writer.delete_documents_by_term("key", key)
                if unchanged:
                    continue
                pages.writer.delete_documents_by_term("key", key)
                chunks.dirty = pages.dirty = True
                bodies = []
                for d in docs:
                    body = f"{d.headings}\n{d.body}" if d.headings else d.body
                    if d.chunk_id not in held:
                        self._put(chunks, d.chunk_id, d, body)
                    bodies.append(body)
                if docs:  # the page is the whole note: rewritten whenever any chunk changed
                    self._put(pages, key, docs[0], "\n".join(bodies))

    def _learn(self, docs: Iterable[Bm25Doc]) -> None:
        """The umlaut words of the vault's and the wiki's chunks into ``umlauts`` (an agent's
        memory, counted in no statistic, neither)."""
        self.umlauts.learn(f"{d.title}\n{d.headings}\n{d.body}" for d in docs if memory_agent(d.key) is None)

    def learn_umlauts(self, docs: Iterable[Bm25Doc]) -> None:
        """``docs`` (the whole index's, from the manifest) taught to an umlaut list that the index
        predates, and the list saved: an upgrade needs no refill of the index."""
        self._learn(docs)
        self.umlauts.complete = True
        self.umlauts.save()

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A change to the writers; a failure leaves them usable again. A writer whose worker
        thread died (a segment flush that hit a full disk) refuses every later document ("an
        index writer was killed"): without a new one the index never recovered, however much
        space was freed. What was not committed is redone by the next sweep."""
        self._usable()  # before the writers are touched: a lost index opens none
        try:
            with engine(what):
                yield
        except StoreError as exc:
            for folder in self._folders():
                # Also a writer that failed before it took anything (not dirty): replaced.
                if folder.dirty or not folder.lazy or folder._writer is not None:
                    folder.recover_writer()
            self._forget_marks()  # the emptying is rolled back with the rest
            raise StoreError(f"{exc}{disk_hint(self.path)}") from exc

    def _forget_marks(self) -> None:
        """What ``delete_all`` and writes marked for the next commit, dropped (a rollback or a
        failure): left, the next ordinary commit removed every inbox a failed refill had marked
        emptied, and a later write to one wiped its other notes."""
        self._emptied.clear()
        self._touched.clear()
        self._refilling = False
        self._kept_use = {}

    def _put(self, folder: Folder, doc_id: str, d: Bm25Doc, body: str) -> None:
        folder.writer.add_document(self._document(doc_id, d, body))
        folder.dirty = True

    @staticmethod
    def _document(doc_id: str, d: Bm25Doc, body: str) -> tantivy.Document:
        text = bigrams(body)
        return tantivy.Document(
            chunk_id=doc_id,
            key=d.key,
            source=d.source,
            agent=d.agent,
            title=bigrams(d.title),
            body=text,
            body_en=text,
            body_de=german_fold(text),
        )

    def delete_key(self, key: str) -> None:
        self._note_changes((key,))
        with self._lock, self._writing("delete"):
            for pair in self._targets(key, new=False):
                for folder in pair:
                    folder.writer.delete_documents_by_term("key", key)
                    folder.dirty = True

    def delete_all(self) -> None:
        """Every document dropped (at the commit). An inbox is emptied when it is written again
        or removed at the commit: no writer is opened for each agent's."""
        with self._lock, self._writing("delete"):
            self._all_changed = self._changed is not None
            for folder in (self._chunks, self._pages, *(self._everyone or ())):
                folder.writer.delete_all_documents()
                folder.dirty = True
            with self._inbox_lock:
                self._emptied = set(self._agents)
            # The refill writes each agent's notes again: its time of last use (its last
            # commit, ``_last_use``) is put back after the commit, or an idle agent's index was
            # taken for used and kept another ``idleDays``.
            self._kept_use = {}
            for agent in self._emptied:
                self._kept_use |= meta_times(self.path / "memory" / agent)
            self._refilling = True
            self.umlauts.clear()

    def rollback(self) -> None:
        """Drop what was written since the last commit (a refill cut short by a stop)."""
        if self.unavailable is not None:  # nothing written: no writer opened on a lost index
            return
        with self._lock:
            self._forget_marks()
            self.umlauts.forget_unsaved()
            for folder in self._folders():
                folder.recover_writer(deliberate=True)  # its files said at info, blamed on nothing

    def commit(self) -> None:
        self._usable()
        with self._lock:
            folders = self._folders()
            try:
                for folder in (self._chunks, self._pages, *(self._everyone or ())):
                    folder.commit()
                with self._inbox_lock:
                    inboxes = list(self._open.items())
                for agent, pair in inboxes:
                    self._commit_inbox(agent, pair)
            except StoreError as exc:
                for folder in folders:
                    if folder.dirty:
                        folder.recover_writer()
                self._forget_marks()
                self.umlauts.forget_unsaved()
                self._note_stuck()
                raise StoreError(f"{exc}{disk_hint(self.path)}") from exc
            self._after_commit()
            # A commit of the stuck folder that worked after all (the leftover gone meanwhile):
            # no longer handed to the repair, which refilled the whole index a minute later.
            if self.stuck is not None and all(
                f.stuck() is None for f in (self._chunks, self._pages, *(self._everyone or ()))
            ):
                self.stuck = None
            self._stamp_everyone()
            self.umlauts.save()
            self._evict()

    def _note_stuck(self) -> None:
        """After a failed commit: the vault's and the wiki's index, or the pair of every agent's
        memory, whose commits keep failing on a leftover file that cannot be removed
        (``Folder.stuck``) is handed to the repair (``stuck``), which moves the whole index aside
        and refills it from the manifest, as when it is damaged. An agent's own index is moved
        aside alone (``_commit_inbox``)."""
        if self.stuck is not None or low_disk(self.path) is not None:
            return  # a disk this full fails commits anyway: a refill would fail as well
        for folder in (self._chunks, self._pages, *(self._everyone or ())):
            why = folder.stuck()
            if why is not None:
                self.stuck = why
                log.error("bm25_commits_stuck path=%s reason=%s", folder.path, why)
                return

    def _stamp_everyone(self) -> None:
        """After a commit: the pair of every agent's memory holds what every inbox holds, as of
        now (``filled``'s time; see ``everyone_behind``)."""
        if self.read_only or self._everyone is None or not self.everyone_ready:
            return
        try:
            os.utime(self.path / EVERYONE_DIR / _FILLED)
        except OSError as exc:  # the next start refills it: memory is small
            log.debug("bm25_everyone_not_stamped error=%s", exc)

    def everyone_behind(self) -> bool:
        """Whether an agent's own index was committed after the pair of every agent's memory was
        last known to hold all memory (``filled``'s time, set at each commit): by a version from
        before that pair (a downgrade), which writes the inboxes and the manifest only. The
        start's count check misses such an edit or rename, and a person's search kept the old
        text and names for good."""
        if self._everyone is None or not self.everyone_ready:
            return False
        try:
            stamp = (self.path / EVERYONE_DIR / _FILLED).stat().st_mtime_ns
        except OSError:
            return True
        for agent in self.agents():
            for part in ("chunks", "pages"):
                with contextlib.suppress(OSError):
                    if (self.path / "memory" / agent / part / "meta.json").stat().st_mtime_ns > stamp:
                        return True
        return False

    def _after_commit(self) -> None:
        """Inboxes a refill emptied and did not write again, and those written since the last
        commit that it left empty, removed."""
        gone = set(self._emptied)
        for agent in self._touched:
            pair = self._open.get(agent)
            if pair is None:  # closed by a search since its last write: counted from its files
                with contextlib.suppress(StoreError):
                    base = self.path / "memory" / agent
                    if live_docs(base / "chunks") == live_docs(base / "pages") == 0:
                        gone.add(agent)
            elif not any(f.dirty for f in pair) and all(f.searcher.num_docs == 0 for f in pair):
                gone.add(agent)
        if self._refilling:  # rebuilt from the manifest: what failed before is replaced
            self.refills += 1
            self.failing.clear()
            restore_mtimes({m: t for m, t in self._kept_use.items() if m.exists()})
            if self._everyone is not None and not self.everyone_ready:
                self._mark_filled()
        self._forget_marks()
        for agent in gone:
            self._remove_inbox(agent)

    def all_ids(self) -> set[str]:
        """Every chunk id in the index, memory's too (for consistency checks)."""
        out = self._ids(self._chunks)
        if self._everyone is not None and self.everyone_ready:
            return out | self._ids(self._everyone[0])
        for agent in self.agents():
            pair = self._inbox(agent)
            if pair is not None:
                out |= self._ids(pair[0])
        return out

    @staticmethod
    def _ids(folder: Folder) -> set[str]:
        searcher = folder.searcher
        n = searcher.num_docs
        if n == 0:
            return set()
        with engine("read"):
            hits = searcher.search(tantivy.Query.all_query(), limit=n, count=False).hits
            return {str(searcher.doc(address).get_first("chunk_id")) for _score, address in hits}

    def num_docs(self) -> int:
        """Chunks in the index, memory's too (what the manifest's count is checked against)."""
        return int(self._searcher.num_docs) + self._inbox_docs("chunks")

    def num_pages(self) -> int:
        return int(self._pages.searcher.num_docs) + self._inbox_docs("pages")

    def _inbox_docs(self, part: str) -> int:
        """Memory's documents: those of the pair of every agent's memory once it holds all, else
        the inboxes' as their last commits left them; an inbox whose count cannot be read is
        moved aside as damaged (it failed every sweep's check, reported nowhere) and counts none,
        so that the check refills the index."""
        if self._everyone is not None and self.everyone_ready:
            try:
                return live_docs(self.path / EVERYONE_DIR / part)
            except PassingFaultError:
                raise  # no file handles left: counted again later (as 0, the check refilled it)
            except StoreError:  # unreadable: the check refills it
                return 0
        total = 0
        with self._inbox_lock:
            agents = [a for a in sorted(self._agents) if a not in self._emptied]
        for agent in agents:
            try:
                total += live_docs(self.path / "memory" / agent / part)
            except PassingFaultError:
                raise  # no file handles left: counted again later, nothing moved aside
            except StoreError as exc:
                with self._lock:
                    self._move_aside(agent, exc)
        return total

    def shared_counts(self) -> tuple[int, int]:
        """Chunks and pages of the vault's and the wiki's index."""
        return int(self._searcher.num_docs), int(self._pages.searcher.num_docs)

    def refill_everyone(self, docs: Sequence[Bm25Doc]) -> None:
        """The pair of every agent's memory replaced by ``docs`` (all memory, from the manifest),
        committed; the other indexes left as they are. One whose searches failed is moved aside
        first. A person's search reads the inboxes until the commit."""
        self._usable()
        with self._lock:
            if self.read_only:
                return
            if any(n.startswith(f"{EVERYONE}/") for n in self.failing) or self._everyone is None:
                self._everyone_aside(StoreError(self.failing.get(f"{EVERYONE}/chunks", "not open")))
                self._everyone = self._everyone_pair()
            pair = self._everyone
            self.everyone_ready = False
            with self._writing("refill"):
                for folder in pair:
                    folder.writer.delete_all_documents()
                    folder.dirty = True
                notes: dict[str, list[Bm25Doc]] = {}
                for d in docs:
                    notes.setdefault(d.key, []).append(d)
                for key, chunks in notes.items():
                    bodies = []
                    for d in chunks:
                        body = f"{d.headings}\n{d.body}" if d.headings else d.body
                        self._put(pair[0], d.chunk_id, d, body)
                        bodies.append(body)
                    self._put(pair[1], key, chunks[0], "\n".join(bodies))
            try:
                for folder in pair:
                    folder.commit()
            except StoreError as exc:
                for folder in pair:
                    folder.recover_writer()
                raise StoreError(f"{exc}{disk_hint(self.path)}") from exc
            self._scorer.forget(pair)
            self._mark_filled()
            for part in ("chunks", "pages"):
                self.failing.pop(f"{EVERYONE}/{part}", None)

    def everyone_counts(self) -> tuple[int, int] | None:
        """Chunks and pages of the pair of every agent's memory as its last commit left them;
        None until it holds all memory."""
        if self._everyone is None or not self.everyone_ready:
            return None
        base = self.path / EVERYONE_DIR
        return live_docs(base / "chunks"), live_docs(base / "pages")

    def collection_size(self) -> int:
        """Chunks whose words make the keyword statistics: the vault's and the wiki's."""
        return int(self._searcher.num_docs)

    def move(self, rename: Callable[[], Path]) -> None:
        """Its folder renamed by ``rename`` (returning the new path: an upgrade's swap, this index
        closed and the stores' write lock held): an inbox a search opens from now on is opened
        there, never in the new index that takes the old name (read with this layout's
        analyzers, its fields would not match, and it would be moved aside as damaged)."""
        with self._inbox_lock:
            self.path = rename()

    def retire(self, successor: Bm25Index | None = None) -> None:
        """Swapped out by ``successor`` (an upgrade, this index closed, its folder about to be
        removed; None: the new one not open yet): a search that took this index before reads
        ``successor``; an inbox not open yet is never opened (made) in the removed folder."""
        with self._inbox_lock:
            self._retired, self._successor = True, successor

    def lost(self, why: str) -> None:
        """Closed, and no index could be opened in its place (an upgrade's swap undone, or its
        refill in place, and the open after it failed too: too many open files): every search
        and write raises a StoreError saying so, nothing is written or removed in its folder,
        until the stores hold one opened again (``index.upgrade.reopen_bm25``). Left closed and
        unmarked, every write failed ("IndexWriter was consumed") until a restart. Marked also
        when the close raises: unmarked, it took writes on closed writers."""
        try:
            self.close()
        finally:
            self.unavailable = why

    def _usable(self) -> None:
        if self.unavailable is not None:
            raise IndexNotOpenError(
                f"{NOT_OPEN} ({self.unavailable}); it is opened again by itself every few seconds"
            )

    def close(self) -> None:
        """Wait for background merges and release the writer locks; safe to call twice. Each
        folder is closed even when one before it raises (the first error is raised after):
        a folder left open kept its writer's lock, and a reopen took it for another daemon's.
        A second call closes again the folders whose close raised (it did nothing: they kept
        their writers)."""
        with self._lock:
            folders = self._unclosed if self._closed else self._folders()
            self._closed, self._unclosed = True, []
            failed: BaseException | None = None
            for folder in folders:
                try:
                    folder.close()
                except BaseException as exc:  # raised below, once the rest is closed
                    self._unclosed.append(folder)
                    failed = failed or exc
            if failed is not None:
                try:
                    raise failed
                finally:
                    failed = None  # no cycle through this frame: it kept the writers it reached


def open_bm25(path: Path, *, read_only: bool = False) -> Bm25Index:
    """The keyword index in ``path``: one of an older layout this version still reads is opened
    in it (it answers while an upgrade refills it beside, ``index.upgrade``); any other in this
    version's (an older one it cannot read raises StoreOutdatedError: replaced)."""
    layout = bm25_layout(path)
    if layout is not None and layout < BM25_LAYOUT and layout in READABLE_LAYOUTS:
        return Bm25Index(path, read_only=read_only, layout=layout)
    return Bm25Index(path, read_only=read_only)
