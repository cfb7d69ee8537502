"""The agents' own keyword indexes (inboxes), a mixin of ``Bm25Index``: each agent's pair opened
when used and closed past a cap, removed when idle, moved aside when damaged, refilled from the
manifest. Its own module because this life cycle (how many stay open, when one goes) is read and
changed apart from the writes, commits and searches of ``bm25`` and ``bm25_search``; the state it
works on is the index's own, made in ``Bm25Index.__init__``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.contracts.errors import (
    DaemonRunningError,
    PassingFaultError,
    StoreError,
    is_io_fault,
    is_passing_fault,
)
from sidecar.stores.aside import aside_name
from sidecar.stores.bm25_folder import (
    Folder,
    engine_failure,
    leftover_met,
    live_docs,
    low_disk,
    remove_folder,
)
from sidecar.stores.bm25_scoring import Scorer
from sidecar.stores.bm25_text import Bm25Doc
from sidecar.stores.closing import ClosingLock

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
# An agent's use of its own index (a search with its scope) is noted on disk at most this often
# (the mtime of ``memory/<agent>/used``); a write is its commit's (``meta.json``'s mtime).
_USE_NOTED_EVERY = 3600.0
_MOVED_ASIDE = "moved aside as damaged"  # how ``failing`` names an inbox index moved aside
_NOT_REBUILT = "could not be rebuilt"  # how ``failing`` names an inbox index whose refill failed


class Bm25Inboxes:
    """The inboxes of a ``Bm25Index`` (which sets the state below): at most ``_OPEN_INBOXES`` open
    at once (``_MAX_OPEN_INBOXES`` for a while after a person's search), one removed when its
    agent has not used it for long (``remove_idle``) and rebuilt when it is back
    (``inbox_missing``, ``refill_inbox``)."""

    path: Path
    read_only: bool
    unavailable: str | None
    failing: dict[str, str]
    _lock: ClosingLock
    _inbox_lock: threading.RLock
    _agents: set[str]
    _open: OrderedDict[str, Pair]
    _emptied: set[str]
    _touched: set[str]
    _refilling: bool
    _leftover_counts: dict[str, list[tuple[int, str]]]
    _retired: bool
    _scorer: Scorer
    _wide_until: float
    _used_at: dict[str, float]

    if TYPE_CHECKING:  # the index's own (``Bm25Index``)

        def _pair(self, base: Path) -> Pair: ...
        def everyone_gap(self) -> str | None: ...
        def _everyone_holds(self, agent: str) -> bool: ...
        def _usable(self) -> None: ...
        def _add(self, notes: dict[str, list[Bm25Doc]], *, everyone: bool = True) -> None: ...
        def commit(self) -> None: ...

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

    def _hold_open(self, inboxes: int) -> None:
        """A search reads ``inboxes`` inboxes: past the cap (a person's search) the inboxes it
        opens stay a while (see ``_MAX_OPEN_INBOXES``)."""
        if inboxes > _OPEN_INBOXES:
            self._wide_until = time.monotonic() + _HOLD_SECONDS

    def close_idle(self) -> None:
        """Inboxes past the cap closed, when no write holds the index (a sweep calls this: the
        inboxes a person's search kept open are closed once it is a while ago)."""
        self._close_idle()

    def _close_idle(self) -> None:
        """``_evict``, from a search: under the write lock, taken only when free (a search does
        not wait for a write), so that no writer is handed an inbox that is being closed."""
        if len(self._open) <= self._cap() or not self._lock.try_free():
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
        base = self.path / "memory" / agent
        # Its time of last use, put back after the refill's commit (a repair is no use: an idle
        # agent's index refilled at a start was kept another ``idleDays``).
        last = self._last_use(agent) if base.is_dir() else None
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
        if last is not None:  # a search that asked for it noted its use (``_used_at``): kept
            when = max(last, self._used_at.get(agent, 0.0))
            for part in ("chunks", "pages"):
                with contextlib.suppress(OSError):
                    os.utime(base / part / "meta.json", (when, when))
