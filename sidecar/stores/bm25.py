"""BM25 over chunk text with Tantivy: the keyword arm. One writer (this process), readers reload.

Queries are built from analysed terms with ``Query.term_query``: no user text ever reaches
Tantivy's query parser, so ``[[x]]``, ``"``, ``(``, ``AND``, ``foo:bar`` cannot raise or match
everything. How text is read: ``bm25_text``; one index folder: ``bm25_folder``; an inbox's
hits on the vault's scale: ``bm25_scoring``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import threading
import time
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
    is_io_fault,
    is_passing_fault,
)
from sidecar.contracts.wire import memory_agent
from sidecar.stores.aside import aside_name
from sidecar.stores.bm25_folder import (
    REMOVED_MARK,
    Folder,
    check_layout,
    disk_hint,
    engine,
    engine_failure,
    leftover_met,
    live_docs,
    low_disk,
    remove_folder,
    segment_counts,
    subfolders,
)
from sidecar.stores.bm25_scoring import Scorer, Terms
from sidecar.stores.bm25_text import (
    READABLE_LAYOUTS,
    Bm25Doc,
    all_analyzers,
    build_schema,
    field_analyzers,
    field_boosts,
    german_fold,
)
from sidecar.stores.cjk import bigrams
from sidecar.stores.umlauts import UmlautWords
from sidecar.stores.versions import BM25_LAYOUT, LAYOUT_FILE, bm25_layout, record_bm25_layout

log = logging.getLogger(__name__)

Pair = tuple[Folder, Folder]  # an index's chunks and pages

# An agent's inbox index is opened when used and closed when more than this many others were
# used since: each open Tantivy index keeps a thread that polls its files (a thousand agent names
# held 2,000 threads and a tenth of a core at rest).
_OPEN_INBOXES = 64
# A person's search reads every inbox. Under the cap above, past 64 agents with memory it opened
# each inbox anew every time (the least recently used one is the next one read): 300 agents cost
# 2-7 s a search. After a search reading more inboxes than that, up to this many stay open for
# ``_HOLD_SECONDS`` (a person's next searches find them open: 300 inboxes about 80 ms), then
# the cap is 64 again (600 open indexes cost 4 % of a core at rest and 22 MB). Inboxes past this
# many are opened for each search and closed after it (600 inboxes: about 300 ms a search).
_MAX_OPEN_INBOXES = 512
_HOLD_SECONDS = 300.0
# Inbox writers open at once (2 MB and six threads each): past this the dirty ones are committed
# and released first (a refill of 200 agents' memory held 2,800 threads and 1.1 GB).
_OPEN_WRITERS = 8

# Every agent's memory in one more pair of indexes (``bm25/memory-all``), written beside the
# inboxes: a person's search (no agent scope) reads it alone instead of every inbox (300 inboxes
# cost 0.7-1.2 s a search and 640 threads for five minutes). Its name in ``failing`` has a dot,
# which no agent's name has. ``filled`` in its folder says it holds all memory (an install from
# before it fills it from the manifest; until then a person's search reads the inboxes).
EVERYONE = ".all"
SHARED = ""  # the vault's and the wiki's index, as a search's ``read`` names it (no agent's name)
_EVERYONE_DIR = "memory-all"
_FILLED = "filled"
# An agent's use of its own index (a search with its scope) is noted on disk at most this often
# (the mtime of ``memory/<agent>/used``); a write is its commit's (``meta.json``'s mtime).
_USE_NOTED_EVERY = 3600.0
_MOVED_ASIDE = "moved aside as damaged"  # how ``failing`` names an inbox index moved aside
_NOT_REBUILT = "could not be rebuilt"  # how ``failing`` names an inbox index whose refill failed


NOT_OPEN = "the keyword index is not open"  # how a search or write on a lost index begins

SearchFault = tuple[
    str, PassingFaultError
]  # a memory index a search could not read (EVERYONE or an agent), and why


def _passed(part: str, exc: PassingFaultError, faults: list[SearchFault] | None) -> None:
    """A memory index a search could not read for a fault that passes: no damage (not reported
    for repair), but its hits are missing, which the caller is told (``faults``) to say so. Was:
    logged alone, and the answer came back thinner with nothing in status or the answer."""
    log.warning(
        "keyword_search_failed part=%s error=%s", _EVERYONE_DIR if part == EVERYONE else f"memory/{part}", exc
    )
    if faults is not None:
        faults.append((part, exc))


def _told(read: set[str] | None, part: str) -> None:
    """A search read ``part`` without a fault (see ``Bm25Index.search``'s ``read``)."""
    if read is not None:
        read.add(part)


class Bm25Index:
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
            self._chunks.close()  # its writer's lock released: the next try would find it busy
            raise
        self._open: OrderedDict[str, Pair] = OrderedDict()  # least recently used first
        self._emptied: set[str] = set()  # agents whose documents ``delete_all`` dropped (uncommitted)
        self._touched: set[str] = set()  # agents whose inbox was written since the last commit
        # Inbox indexes that failed (``<agent>/chunks`` or ``/pages`` for a search, ``<agent>`` for
        # one moved aside as damaged -> error): skipped by searches, reported as a problem until a
        # search of that index succeeds or a refill rebuilt it (the repair refills the index).
        self.failing: dict[str, str] = {}
        self._refilling = False  # ``delete_all`` was called: the next commit ends a refill
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
            self._chunks.close()
            self._pages.close()
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
        folder = self.path / _EVERYONE_DIR
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
        return self._pair(self.path / _EVERYONE_DIR)

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
        folder = self.path / _EVERYONE_DIR
        target = aside_name(self.path.parent / f"bm25-{_EVERYONE_DIR}")
        try:
            folder.rename(target)
        except FileNotFoundError:
            pass
        except OSError:
            remove_folder(folder)
        log.error("index_rebuilt store=bm25 part=%s reason=%s moved_to=%s", _EVERYONE_DIR, exc, target)

    def _mark_filled(self) -> None:
        """The pair of every agent's memory holds all of it from now on (and after a restart)."""
        self.everyone_ready = True
        try:
            (self.path / _EVERYONE_DIR / _FILLED).write_text("all memory\n", encoding="utf-8")
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

    def inbox_missing(self, agent: str, held: Callable[[str], bool] | None = None) -> bool:
        """Whether ``agent`` has memory but no index of its own (removed while it was idle, or
        its first note written after that): to be rebuilt from the manifest (``refill_inbox``)
        before a search with its scope. Told by the pair of every agent's memory while a person's
        search reads it (``everyone_gap``), else by ``held`` (the manifest): asked of that pair
        alone, an agent back before it was filled (an upgrade, one moved aside as damaged)
        searched without its memory, and its next write made an index of that one note."""
        if self.read_only:
            return False
        with self._inbox_lock:
            if agent in self._agents:
                return False
        if self.everyone_gap() is None:
            with contextlib.suppress(StoreError):
                return self._everyone_holds(agent)
        return held is not None and held(agent)

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

    def note_use(self, agent: str) -> None:
        """An agent searches with its own scope: its index counts as used (``remove_idle``). Told
        before the search looks for the index (``ready_inbox``): a removal as idle after this
        waits (it reads ``_used_at`` under the same lock); one before it left no index, which
        the search then rebuilds. Told after the look, a removal in between left the search
        without the agent's memory, and nothing said so."""
        now = time.time()
        if self.read_only or now - self._used_at.get(agent, 0.0) < _USE_NOTED_EVERY:
            return
        folder = self.path / "memory" / agent
        with self._inbox_lock:
            if not folder.is_dir():
                return
            self._used_at[agent] = now
        try:
            (folder / "used").touch()
        except OSError as exc:
            log.debug("bm25_use_not_noted agent=%s error=%s", agent, exc)

    def remove_idle(self, seconds: float) -> list[str]:
        """Agents' own indexes not used (no search with their scope, no write) for ``seconds``,
        removed: each costs about 76 KB, 20 files and a thread while open, for good, and agents
        named per session leave thousands. Their memory stays in ``memory-all`` for a person's
        search; an agent back is given its index anew from the manifest (``inbox_missing``).
        Nothing is removed before ``memory-all`` holds all memory, while it fails (a person's
        search reads the agents' own indexes then), while read-only, or while the index is lost."""
        if seconds <= 0 or self.read_only or self.everyone_gap() is not None or self.unavailable is not None:
            return []
        cutoff = time.time() - seconds
        removed = []
        with self._lock:
            for agent in self.agents():
                pair = self._open.get(agent)
                if pair is not None and any(f.dirty or f._writer is not None for f in pair):
                    continue
                # A failing index is moved aside by the repair (kept as evidence), not deleted.
                failing = (agent, f"{agent}/chunks", f"{agent}/pages")
                if any(n in self.failing for n in failing) or self._last_use(agent) >= cutoff:
                    continue
                with self._inbox_lock:  # a search that told its use meanwhile keeps the index
                    if self._used_at.get(agent, 0.0) >= cutoff:
                        continue
                    self._remove_inbox(agent)
                    self._used_at.pop(agent, None)
                removed.append(agent)
        if removed:
            log.info("inbox_indexes_idle_removed count=%d days=%.0f", len(removed), seconds / 86400)
        return removed

    def _last_use(self, agent: str) -> float:
        """When ``agent``'s index was last used: noted by a search, or its last commit."""
        base = self.path / "memory" / agent
        last = 0.0
        for path in (base / "used", base / "chunks" / "meta.json", base / "pages" / "meta.json"):
            with contextlib.suppress(OSError):
                last = max(last, path.stat().st_mtime)
        return last if last else time.time()  # unreadable: not taken for idle

    def agents(self) -> list[str]:
        """Agents with an inbox index."""
        with self._inbox_lock:
            return sorted(self._agents)

    def _inbox(self, agent: str, *, create: bool = False) -> Pair | None:
        """An agent's two indexes, opened (made when ``create``); None for an agent without."""
        with self._inbox_lock:
            pair = self._open.get(agent)
            if pair is not None:
                self._open.move_to_end(agent)
                return pair
            if not create and agent not in self._agents:
                return None
            if self._retired:
                # Swapped out, its folder removed: an inbox opened now would be made empty there
                # (a folder is made when missing), holding none of the agent's memory.
                return None
            try:
                pair = self._open_pair(agent)
            except (DaemonRunningError, PassingFaultError):
                raise  # in use, a full disk, no handles: nothing is damaged, nothing moved aside
            except StoreError as exc:  # damaged: moved aside, started empty, refilled by the repair
                if self.read_only:
                    raise  # nothing moved or made while read-only
                self._move_aside(agent, exc)
                pair = self._open_pair(agent)
            self._agents.add(agent)
            if not create and len(self._open) >= _MAX_OPEN_INBOXES:
                # Read once and closed, the open ones kept: evicting the least recently used
                # closed the next one a person's search reads (600 inboxes: 1.2 s a search).
                return pair
            self._open[agent] = pair
        self._close_idle()
        return pair

    def _open_pair(self, agent: str) -> Pair:
        pair = self._pair(self.path / "memory" / agent)
        for folder, (failures, error) in zip(pair, self._leftover_counts.pop(agent, ()), strict=False):
            folder.leftover_failures, folder.leftover_error = failures, error
        return pair

    def _move_aside(self, agent: str, exc: BaseException) -> None:
        """A damaged inbox index moved into the index folder (where status names it and a month
        removes it); ``failing`` reports it so that the repair refills the keyword index."""
        if self.read_only:  # said, not moved: repaired once the index can be written
            log.error("index_damaged store=bm25 inbox=%s reason=%s (read-only: left in place)", agent, exc)
            self.failing[agent] = f"damaged ({exc}); repaired once the index can be written"
            return
        with self._inbox_lock:
            pair = self._open.pop(agent, None)
            self._leftover_counts.pop(agent, None)
        if pair is not None:
            self._scorer.forget(pair)
        folder = self.path / "memory" / agent
        target = aside_name(self.path.parent / f"bm25-memory-{agent}")
        try:
            folder.rename(target)
        except OSError as err:
            if is_io_fault(err):  # a read-only or failing share: what cannot be moved is not removed
                log.error("index_move_aside_failed store=bm25 inbox=%s error=%s", agent, err)
                return  # opened again when next used; damaged still, it is found again then
            remove_folder(folder)
        log.error("index_rebuilt store=bm25 inbox=%s reason=%s moved_to=%s", agent, exc, target)
        self.failing[agent] = f"{_MOVED_ASIDE} ({exc})"

    def _cap(self) -> int:
        """Inboxes that may stay open now (see ``_MAX_OPEN_INBOXES``)."""
        return _MAX_OPEN_INBOXES if time.monotonic() < self._wide_until else _OPEN_INBOXES

    def close_idle(self) -> None:
        """Inboxes past the cap closed, when no write holds the index (a sweep calls this: the
        inboxes a person's search kept open are closed once it is a while ago)."""
        self._close_idle()

    def _close_idle(self) -> None:
        """``_evict``, from a search: under the write lock, taken only when free (a search does
        not wait for a write), so that no writer is handed an inbox that is being closed."""
        if len(self._open) <= self._cap() or not self._lock.acquire(blocking=False):
            return
        try:
            self._evict()
        finally:
            self._lock.release()

    def _evict(self) -> None:
        """Close the least recently used inboxes past the cap that hold nothing to commit (the
        write lock held)."""
        cap = self._cap()
        with self._inbox_lock:
            for agent in list(self._open):
                if len(self._open) <= cap:
                    break
                pair = self._open[agent]
                if any(f.dirty or f._writer is not None for f in pair):
                    continue
                del self._open[agent]
                self._scorer.forget(pair)
                if any(f.leftover_failures for f in pair):  # counted on when reopened
                    self._leftover_counts[agent] = [(f.leftover_failures, f.leftover_error) for f in pair]

    def _remove_inbox(self, agent: str) -> None:
        """An inbox's index gone (committed empty, or emptied by a refill): closed and deleted."""
        with self._inbox_lock:
            pair = self._open.pop(agent, None)
            self._agents.discard(agent)
            self._leftover_counts.pop(agent, None)
        if pair is not None:
            for folder in pair:
                folder.close(removed=True)
            self._scorer.forget(pair)
        remove_folder(self.path / "memory" / agent)
        for name in (agent, f"{agent}/chunks", f"{agent}/pages"):
            self.failing.pop(name, None)

    def _open_pairs(self) -> list[Pair]:
        with self._inbox_lock:
            return list(self._open.values())

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

    def _make_room(self, agent: str) -> None:
        """Before a note of ``agent`` is written (the write lock held): past ``_OPEN_WRITERS``
        inbox writers, the other inboxes written so far are committed and their writers released
        (whole notes each; the one being written is not: a refill writes an agent's notes in a
        row, so an inbox is published whole); past ``_OPEN_INBOXES`` the least recently used are
        closed (a refill reads every agent's)."""
        with self._inbox_lock:
            others = [pair for name, pair in self._open.items() if name != agent]
        held = [f for pair in others for f in pair if f._writer is not None]
        if len(held) >= _OPEN_WRITERS:
            for f in held:
                f.commit() if f.dirty else f._release()
        self._evict()

    def analyze(self, text: str, field: str = "body") -> list[str]:
        """Terms of ``text`` as the field indexes them (CJK runs as bigrams, see ``stores.cjk``)."""
        name = self._field_analyzer[field]
        text = bigrams(text)
        return list(self.analyzers[name].analyze(german_fold(text) if field == "body_de" else text))

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
            os.utime(self.path / _EVERYONE_DIR / _FILLED)
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
            stamp = (self.path / _EVERYONE_DIR / _FILLED).stat().st_mtime_ns
        except OSError:
            return True
        for agent in self.agents():
            for part in ("chunks", "pages"):
                with contextlib.suppress(OSError):
                    if (self.path / "memory" / agent / part / "meta.json").stat().st_mtime_ns > stamp:
                        return True
        return False

    def _commit_inbox(self, agent: str, pair: Pair) -> None:
        """Commit one agent's inbox. One whose files are damaged (a commit reads its segments to
        merge them) is moved aside, reported in ``failing`` and refilled from the manifest by the
        repair, which holds this commit's notes too: it held back every commit (the vault's
        and every other agent's) for as long as the daemon ran. A full disk is no damage: the
        whole commit fails and is retried."""
        try:
            for folder in pair:
                folder.commit()
        except StoreError as exc:
            # A full disk, a share's fault or a file a cut commit left (removed by now) is no
            # damage: the commit fails and is retried (a share that hiccuped moved every inbox
            # with a pending write aside).
            # A leftover file that cannot be removed is: every commit after failed on it for good.
            stuck = next((why for f in pair if (why := f.stuck()) is not None), None)
            passing = is_passing_fault(exc) or (leftover_met(exc) and stuck is None)
            if self._refilling or passing or low_disk(self.path) is not None:
                raise
            for folder in pair:
                folder.recover_writer()
            self._move_aside(agent, exc if stuck is None else StoreError(stuck))
            self._touched.discard(agent)  # not removed as emptied: refilled

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
            self.failing.clear()
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

    def doc_freq(
        self, word: str, *, pages: bool = False, agent: str | None = None, field: str = "body"
    ) -> int:
        """Chunks (with ``pages``: notes) of the vault and the wiki, and of ``agent``'s own memory,
        whose body holds ``word`` (its rarest term when the analyzer splits it). Counted by a
        query, not read from the term dictionary, which still counts the chunks of edited notes
        until their segment is merged. ``field``: the title, or a stemmed body, instead."""
        searchers = [self._pages.searcher if pages else self._searcher]
        own = self._inbox(agent) if agent is not None else None
        if own is not None:
            searchers.append(own[1].searcher if pages else own[0].searcher)
        with engine("count"):
            counts = [
                sum(
                    s.search(tantivy.Query.term_query(self.schema, field, t), limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
                    for s in searchers
                )
                for t in dict.fromkeys(self.analyze(word, field))
            ]
        return int(min(counts, default=0))

    def holding(
        self, words: Sequence[str], among: Sequence[str], agents: Collection[str] = (), field: str = "body"
    ) -> set[str]:
        """Those of the chunks ``among`` whose body as written holds one of ``words`` (every term
        of it, when the analyzer splits a word): the chunks ``doc_freq`` counts, not those that
        match only a stemmed form. ``agents``: the inboxes the memory chunks among them are of
        (no other is asked). ``field``: the title, or a stemmed body (``body_de``: any form of
        the word), instead."""
        schema = self.schema
        per_word = []
        for word in words:
            terms = list(dict.fromkeys(self.analyze(word, field)))
            if terms:
                per_word.append(
                    tantivy.Query.boolean_query(
                        [(tantivy.Occur.Must, tantivy.Query.term_query(schema, field, t)) for t in terms]
                    )
                )
        if not per_word or not among:
            return set()
        any_word = tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_word])
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, any_word),
                (tantivy.Occur.Must, tantivy.Query.term_set_query(schema, "chunk_id", list(among))),
            ]
        )
        folders = [(self._chunks, query)]
        if agents and self._everyone is not None and self.everyone_ready:
            # Whether a chunk holds a word is the chunk's alone: one index answers for every agent
            # named (no agent's own index opened).
            named = tantivy.Query.term_set_query(schema, "agent", sorted(agents))
            folders.append(
                (
                    self._everyone[0],
                    tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, named)]),
                )
            )
            agents = ()
        for agent in sorted(agents):
            pair = self._inbox(agent)
            if pair is not None:
                folders.append((pair[0], query))
        out: set[str] = set()
        for folder, asked in folders:
            searcher = folder.searcher
            if searcher.num_docs == 0:
                continue
            with engine("search"):
                result = searcher.search(asked, limit=len(among), count=False)
                out.update(
                    str(searcher.doc(address).get_first("chunk_id")) for _score, address in result.hits
                )
        return out

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
                return live_docs(self.path / _EVERYONE_DIR / part)
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

    def inbox_counts(self) -> dict[str, tuple[int, int]]:
        """Chunks and pages of each agent's inbox as its last commit left them; one whose count
        cannot be read is moved aside as damaged (see ``_inbox_docs``) and holds none."""
        with self._inbox_lock:
            agents = [a for a in sorted(self._agents) if a not in self._emptied]
        out: dict[str, tuple[int, int]] = {}
        for agent in agents:
            base = self.path / "memory" / agent
            try:
                out[agent] = (live_docs(base / "chunks"), live_docs(base / "pages"))
            except PassingFaultError:
                raise  # no file handles left: counted again later, nothing moved aside
            except StoreError as exc:
                with self._lock:
                    self._move_aside(agent, exc)
        return out

    def shared_counts(self) -> tuple[int, int]:
        """Chunks and pages of the vault's and the wiki's index."""
        return int(self._searcher.num_docs), int(self._pages.searcher.num_docs)

    def not_rebuilt(self, agent: str, exc: BaseException) -> None:
        """``agent``'s index could not be rebuilt (none is left): reported in ``failing`` until a
        refill is committed, so that its searches say its notes may be missing and the repair
        refills it."""
        self.failing[agent] = f"{_NOT_REBUILT} ({exc})"

    def refill_inbox(self, agent: str, docs: Sequence[Bm25Doc]) -> None:
        """One agent's inbox index replaced by ``docs`` (its notes, from the manifest), committed;
        the other indexes are left as they are (refilling all for one agent's cost what the whole
        index costs). One whose searches failed is moved aside first (once); one that merely
        disagrees with the manifest is dropped, as a refill empties it."""
        self._usable()  # before its folder is removed: a lost index's files are kept as they are
        names = (agent, f"{agent}/chunks", f"{agent}/pages")
        with self._lock:
            why = self.failing.get(names[1]) or self.failing.get(names[2])
            if why is not None and not self.failing.get(agent, "").startswith(_MOVED_ASIDE):
                self._move_aside(agent, StoreError(why))
            failed = {n: self.failing[n] for n in names if n in self.failing}
            self._remove_inbox(agent)  # the empty one opened in its place since, if any
            self.failing.update(failed)  # reported until the refill is committed
            self._emptied.discard(agent)
        try:
            if docs:  # its own index alone: the pair of every agent's memory holds them already
                notes: dict[str, list[Bm25Doc]] = {}
                for d in docs:
                    notes.setdefault(d.key, []).append(d)
                self._add(notes, everyone=False)
            self.commit()
        except BaseException as exc:
            # A full disk, an I/O error, a panic in Tantivy (no Exception: ``engine_failure``):
            # the half-made index would pass for the agent's whole memory (empty, unreported, kept
            # until a restart). Dropped, so that the next search with its scope rebuilds it again;
            # reported meanwhile (the answer says its notes may be missing, the repair refills it).
            if not (isinstance(exc, Exception) or engine_failure(exc)):
                raise
            with self._lock:
                self._remove_inbox(agent)
                self.failing.update(failed)
            self.not_rebuilt(agent, exc)
            raise
        for name in failed:
            self.failing.pop(name, None)

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
        base = self.path / _EVERYONE_DIR
        return live_docs(base / "chunks"), live_docs(base / "pages")

    def collection_size(self) -> int:
        """Chunks whose words make the keyword statistics: the vault's and the wiki's."""
        return int(self._searcher.num_docs)

    def deleted_docs(self) -> tuple[int, int]:
        """(deleted, all) documents of the vault's and the wiki's indexes as their segments keep
        them: Tantivy drops a deleted document only when its segment is merged, and a segment of
        a vault that shrank is not merged again (its deleted notes kept the disk and counted in
        the word statistics). An inbox's are not counted: its own statistics are weighed out of
        its scores, and an agent's churn must not rebuild what every other agent searches."""
        deleted = total = 0
        for folder in (self._chunks, self._pages):
            try:
                gone, held = segment_counts(folder.path)
            except StoreError:
                continue  # unreadable: judged again next time
            deleted, total = deleted + gone, total + held
        return deleted, total

    def search(
        self,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
        *,
        key: str | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        """(chunk_id, bm25 score) for chunks matching any word of ``text``, best first (of one note
        when ``key`` is given).

        ``text`` is a string or (text, weight) parts (a follow-up's history words count less than
        the message's). It is analysed per field (never parsed as query syntax); ``sources``
        restricts to those sources; ``agent_scope`` limits memory to one agent's inbox (vault and
        wiki stay). Restrictions score nothing: a hit's score is its text's match alone, the same
        with or without them. ``faults``: told each memory index that could not be read for a
        fault that passes (no file handles left, a share's hiccup): its hits are missing, the
        others' are returned. Every agent's memory (``EVERYONE``) that cannot be read has the
        agents' own indexes read in its place (each one that fails told as well): only the
        agents without one (removed as unused) are missed. ``read``: told each index read
        without a fault (``SHARED``, ``EVERYONE``, an agent), whether it matched or not.
        """
        if self._successor is not None:  # a search that took this index before the swap
            return self._successor.search(
                text, limit, sources, agent_scope, key=key, stem=stem, faults=faults, read=read
            )
        return self._search(
            False,
            text,
            limit,
            sources=sources,
            agent_scope=agent_scope,
            key=key,
            stem=stem,
            faults=faults,
            read=read,
        )

    def search_pages(
        self,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
        *,
        key: str | None = None,
        keys: Sequence[str] | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        """(note key, bm25 score) for whole notes (only the one ``key``, or only ``keys``), as
        ``search`` scores chunks."""
        if self._successor is not None:
            return self._successor.search_pages(
                text, limit, sources, agent_scope, key=key, keys=keys, stem=stem, faults=faults, read=read
            )
        return self._search(
            True,
            text,
            limit,
            sources=sources,
            agent_scope=agent_scope,
            key=key,
            keys=keys,
            stem=stem,
            faults=faults,
            read=read,
        )

    def umlaut_readings(self, words: Iterable[str], agent: str | None = None) -> dict[str, str]:
        """The notes' umlaut words that ``words`` transcribe ("Kuendigung" -> "kündigung",
        "Uebersicht" -> "übersicht"), by the word lowercased, for a search beside the words as
        typed: only the German field folds ue into u, weighted half unless the query was taken for
        German (a word or two is not), so "Kuendigung" scored a third of "Kündigung" and fell
        under recall's floor.
        A word is read when the notes write it with the umlaut (``umlauts``): asked of the index
        alone, which folds umlauts, "poet" read as "pot", "aerial" as "arial" and "neuen" as
        "neun", which no note writes as "pöt", "ärial" or "neün". It is not read when a title or
        a text searched (the vault's, the wiki's, ``agent``'s memory) writes it as typed: then
        the typed spelling is the notes' own too ("Uebersicht.md", "Queue", a memory's
        "Kuendigung"), and a passing mention of the umlaut word, matched in every field, would
        outrank the note named so. No count is asked of the umlaut word: a deleted note's word,
        kept in the list until a refill, finds nothing."""
        if not len(self.umlauts):
            return {}
        out: dict[str, str] = {}
        for word in {w.lower() for w in words}:  # each distinct word asked once
            written = self.umlauts.written_with_umlaut(word)
            if written is not None and not self._written_as_typed(word, agent):
                out[word] = written
        return out

    def _written_as_typed(self, word: str, agent: str | None) -> bool:
        """Whether a chunk's title or text (of the vault and the wiki, and of ``agent``'s memory)
        holds ``word`` as written (the title's and body's analyzer folds ü but not ue)."""
        searchers = [self._searcher]
        own = self._inbox(agent) if agent is not None else None
        if own is not None:
            searchers.append(own[0].searcher)
        terms = dict.fromkeys(self.analyze(word))
        with engine("count"):
            return any(
                s.search(tantivy.Query.term_query(self.schema, f, t), limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
                for s in searchers
                for f in ("title", "body")
                for t in terms
            )

    def _terms(self, text: str | Sequence[tuple[str, float]], stem: str | None) -> Terms:
        parts = [(text, 1.0)] if isinstance(text, str) else list(text)
        terms: Terms = {}
        boosts = field_boosts(stem)
        for part, weight in parts:
            for f, boost in boosts.items():
                for t in self.analyze(part, f):
                    terms[f, t] = max(terms.get((f, t), 0.0), boost * weight)
            # A title is folded as written (ü -> u) and not German-stemmed: 'Kuendigung' meets a
            # title 'Kündigung' through its German folding, as it meets the word in a body.
            for t in self.analyze(german_fold(part), "title"):
                terms["title", t] = max(terms.get(("title", t), 0.0), boosts["title"] * weight)
        return terms

    def _search(
        self,
        pages: bool,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        *,
        sources: Sequence[str] | None,
        agent_scope: str | None,
        key: str | None,
        keys: Sequence[str] | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        self._usable()
        terms = self._terms(text, stem)
        if not terms or limit <= 0:
            return []
        shared_folder = self._pages if pages else self._chunks
        # Which notes' keys go where: a vault or wiki key to the shared index, a memory key to
        # its agent's inbox (of the agents in scope).
        in_scope = [agent_scope] if agent_scope is not None else self.agents()
        want_shared = sources is None or any(s != "memory" for s in sources)
        want_memory = sources is None or "memory" in sources
        shared_keys: Sequence[str] | None = keys
        inbox_keys: dict[str, list[str] | None] = dict.fromkeys(in_scope) if want_memory else {}
        if key is not None or keys is not None:
            wanted = [key] if key is not None else list(keys or ())
            shared_keys = [k for k in wanted if memory_agent(k) is None]
            want_shared = want_shared and bool(shared_keys)
            per_agent: dict[str, list[str]] = {}
            for k in wanted:
                owner = memory_agent(k)
                if owner is not None and owner in inbox_keys:
                    per_agent.setdefault(owner, []).append(k)
            inbox_keys = dict(per_agent)
        found: list[tuple[str, float]] = []
        shared = shared_folder.searcher
        if agent_scope is None and want_memory and self._everyone is not None and self.everyone_ready:
            # A person's search: every agent's memory from one index, no inbox opened.
            wanted_keys = None
            if key is not None or keys is not None:
                wanted_keys = [k for k in ([key] if key is not None else keys or ()) if memory_agent(k)]
            try:
                found += self._everyone_hits(
                    pages,
                    terms=terms,
                    limit=limit,
                    keys=wanted_keys,
                    shared_folder=shared_folder,
                    shared=shared,
                )
                self.failing.pop(f"{EVERYONE}/{'pages' if pages else 'chunks'}", None)
                inbox_keys = {}
                _told(read, EVERYONE)
            except PassingFaultError as exc:  # no handles left, a full disk: no damage, not repaired
                _passed(EVERYONE, exc, faults)
            except StoreError as exc:  # read the inboxes instead; reported until the repair
                log.warning("keyword_search_failed part=%s error=%s", _EVERYONE_DIR, exc)
                self.failing[f"{EVERYONE}/{'pages' if pages else 'chunks'}"] = str(exc)
        if len(inbox_keys) > _OPEN_INBOXES:  # a person's search: the inboxes it opens stay a while
            self._wide_until = time.monotonic() + _HOLD_SECONDS
        if want_shared:
            found += self._query(
                shared,
                terms,
                limit,
                sources=None if sources is None else [s for s in sources if s != "memory"],
                keys=shared_keys,
            )
            _told(read, SHARED)
        for agent, agent_keys in inbox_keys.items():
            try:
                found += self._inbox_hits(
                    agent,
                    pages=pages,
                    terms=terms,
                    limit=limit,
                    keys=agent_keys,
                    shared_folder=shared_folder,
                    shared=shared,
                )
                _told(read, agent)
            except PassingFaultError as exc:  # not made yet for want of space (or handles): no damage
                _passed(agent, exc, faults)
            except StoreError as exc:
                # One agent's damaged index: its hits are missing, no one else's search fails;
                # reported (``failing``) until a search of it succeeds or the repair rebuilds it.
                log.warning("keyword_search_failed inbox=%s error=%s", agent, exc)
                self.failing[f"{agent}/{'pages' if pages else 'chunks'}"] = str(exc)
        found.sort(key=lambda hit: -hit[1])
        return found[:limit]

    def _everyone_hits(
        self,
        pages: bool,
        *,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """Every agent's memory hits from the pair that holds it all, its terms reweighted to the
        vault's statistics as an inbox's are (``Scorer``): the idf is the vault's, the length
        normalisation that of all memory (an inbox's was its own agent's). A person sees all
        memory: the statistics of all of it tell a person nothing new."""
        assert self._everyone is not None
        if keys == []:
            return []
        folder = self._everyone[1] if pages else self._everyone[0]
        return self._on_vault_scale(
            folder, terms=terms, limit=limit, keys=keys, shared_folder=shared_folder, shared=shared
        )

    def _inbox_hits(
        self,
        agent: str,
        *,
        pages: bool,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """An agent's hits from its own index, on the vault's scale (``_on_vault_scale``)."""
        pair = self._inbox(agent)
        if pair is None:
            return []
        folder = pair[1] if pages else pair[0]
        if folder.searcher.num_docs == 0:
            return []
        hits = self._on_vault_scale(
            folder, terms=terms, limit=limit, keys=keys, shared_folder=shared_folder, shared=shared
        )
        self.failing.pop(f"{agent}/{'pages' if pages else 'chunks'}", None)
        if self._open.get(agent) is not pair:  # opened for this search alone (see ``_inbox``)
            self._scorer.forget(pair)
        return hits

    def _on_vault_scale(
        self,
        folder: Folder,
        *,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """Hits of a memory index (an inbox's, or all memory's), its terms reweighted to the
        vault's statistics (``Scorer``); one searcher of each index for the statistics and the
        search (a commit between two reads mixed an old count with a new index: a score nine
        times too high). An index that matched nothing is checked for damage."""
        searcher = folder.searcher
        if searcher.num_docs == 0:
            return []
        weighted = self._scorer.terms(
            self._scorer.counts(folder, searcher), self._scorer.counts(shared_folder, shared), terms
        )
        hits = self._query(searcher, weighted, limit, sources=None, keys=keys) if weighted else []
        if not hits:
            self._check_files(folder)
        return hits

    def _check_files(self, folder: Folder) -> None:
        """An inbox that holds notes and matched nothing: StoreError if a file of it was damaged
        under the running daemon (it answers nothing, without an error). Skipped while a write
        holds the index (a search does not wait for one; the next search checks)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            why = folder.damage()
        finally:
            self._lock.release()
        if why is not None:
            raise StoreError(f"BM25 index {folder.path} is damaged: {why}")

    def _restricted(
        self, terms: Terms, sources: Sequence[str] | None, keys: Sequence[str] | None
    ) -> tantivy.Query:
        schema = self.schema
        should = [
            (tantivy.Occur.Should, tantivy.Query.boost_query(tantivy.Query.term_query(schema, f, t), boost))
            for (f, t), boost in terms.items()
        ]
        clauses = [(tantivy.Occur.Must, tantivy.Query.boolean_query(should))]
        restrict: list[tantivy.Query] = []
        if sources is not None:
            restrict.append(tantivy.Query.term_set_query(schema, "source", list(sources)))
        if keys is not None:
            restrict.append(tantivy.Query.term_set_query(schema, "key", list(keys)))
        # Restrictions score nothing: a hit's score is its text's match alone.
        clauses += [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in restrict]
        return tantivy.Query.boolean_query(clauses)

    def _query(
        self,
        searcher: tantivy.Searcher,
        terms: Terms,
        limit: int,
        *,
        sources: Sequence[str] | None,
        keys: Sequence[str] | None,
    ) -> list[tuple[str, float]]:
        query = self._restricted(terms, sources, keys)
        with engine("search"):  # damaged segment files
            result = searcher.search(query, limit=limit, count=False)
            return [
                (str(searcher.doc(address).get_first("chunk_id")), float(score))
                for score, address in result.hits
            ]

    def ideal_score(self, text: str, *, pages: bool = False, stem: str | None = None) -> float:
        """What a chunk (a page) scores that holds every word of ``text`` once, at average length,
        in its body (each word's idf once per copy of the body, at that copy's weight: see
        ``field_boosts``).
        Dividing by it puts BM25 on a scale that means the same for every query: 1 is "all of it,
        once", a match of the rarest of three words counts more than one of the commonest. Words
        the index has never seen count fully (a query about something absent is not a good match)."""
        searcher = (self._pages if pages else self._chunks).searcher
        n = max(int(searcher.num_docs), 1)
        total = 0.0
        boosts = field_boosts(stem)
        for f in ("body", "body_en", "body_de"):
            for t in dict.fromkeys(self.analyze(text, f)):
                try:
                    with engine("doc_freq"):
                        df = int(searcher.doc_freq(f, t))
                except StoreError:
                    df = 0
                total += boosts[f] * math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        return total

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
