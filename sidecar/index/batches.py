"""The batch writer, a mixin of ``Indexer`` (``indexer``): a sweep's changes written batch by
batch, each moved note's old entry leaving with its new one, the other deletions after the new
notes, the notes saved meanwhile taken between batches, and what a failed batch leaves to retry.
Its own module because it is the order of the writes and deletions, not what a note holds
(``index_files``); the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.index.activity import Activity
from sidecar.index.diff import ChangeFinder, Diff
from sidecar.index.linkreread import LinkReread
from sidecar.index.moves import ctime_is_evidence, unchanged_move
from sidecar.index.records import Prepared, as_held
from sidecar.index.writes import Writer
from sidecar.notes.links import written_links
from sidecar.stores.manifest import Manifest
from sidecar.vault.sources import (
    NoteFile,
    Root,
)
from sidecar.vault.supervisor import Supervisor

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class Batches:
    """The batch writing of an ``Indexer``'s sweep (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    activity: Activity
    changes: ChangeFinder
    writer: Writer
    links: LinkReread
    leftover: frozenset[str] | None
    _gone_left: list[str]
    _held: dict[str, Prepared]
    hot_paths: Callable[[], frozenset[str]] | None
    hot_back: Callable[[set[str]], None] | None
    _deferred: set[str]
    _hot_written: set[str]
    _wrote: threading.local

    if TYPE_CHECKING:  # the indexer's own (``Indexer``, ``Deletes``, ``Exclusions``)

        def index_files(self, notes: Sequence[NoteFile], data: dict[str, bytes] | None = None) -> int: ...

        def delete(self, keys: Sequence[str]) -> None: ...

        def _record_excluded(
            self, diff: Diff, every: Sequence[Root] | None, whole: int | None = None
        ) -> None: ...

    def _apply(
        self,
        diff: Diff,
        moves: dict[str, str],
        every: Sequence[Root] | None,
        progress: Callable[[Activity], None] | None,
        stop: threading.Event | None,
    ) -> tuple[int, list[str]]:
        """Write a sweep's changes batch by batch (``every``: the roots, when notes saved meanwhile
        are taken between batches), then its deletions; how many notes were written, and their
        keys. ``moves``: new
        key -> old key of the notes moved (``_moves_applied``): each old entry leaves as soon as its
        new one is written."""
        act = self.activity
        self.leftover = None
        changed = 0
        wrote: list[str] = []
        batch = self.cfg.index.batch_files
        gone = list(diff.gone)
        # Moved notes whose new key an earlier sweep wrote already: nothing to wait for.
        waiting = [k for k in gone if k in diff.moves and diff.moves[k] not in moves]
        if waiting:
            indexed = self.manifest.file_states_of([diff.moves[k] for k in waiting])
            before = [k for k in waiting if (st := indexed.get(diff.moves[k])) and st.state == "indexed"]
            self._delete_moved(before, gone)
            act.done += len(before)
        for start in range(0, len(diff.work), batch):
            if stop is not None and stop.is_set():
                break
            part = diff.work[start : start + batch]
            try:
                changed += self._write_batch(part, moves, wrote)
                # Deletions after the new notes (deleted first, 6,668 moved notes were missing for
                # up to 28 s), but a moved note's old entry with its new one, not at the end.
                self._delete_moved(self._moved_written(part, moves), gone)
            except BaseException:
                # Scanned, not written (disk full ...): a retry needs only these paths, not a walk.
                left = {str(n.path) for n in diff.work[start:]}
                # Moved notes whose new entry is not written keep their old one (removed, they were
                # found under neither path until the retry): the retry looks at both paths again.
                unwritten = set(moves.values()) & set(gone)
                roots = every or self.changes.roots()
                if unwritten:
                    left |= self._paths_of(sorted(unwritten), roots)
                try:  # gone notes leave now if they can
                    self.delete([k for k in self._still_gone(gone) if k not in unwritten])
                except Exception:
                    # ... else first thing in the retry (a deletion needs disk too: left to the
                    # next full sweep, a deleted or newly excluded note was found for up to
                    # index.rescanMinutes), whose look at their paths reads a note back meanwhile.
                    self._gone_left = [k for k in self._still_gone(gone) if k not in unwritten]
                    left |= self._paths_of(gone, roots)
                self.leftover = frozenset(left)
                raise
            act.written(len(part))
            if progress is not None:
                progress(act)
            if every is not None:
                self._index_hot(stop)
        # The rest of the deletions after the new notes: a note deleted, and a move whose new
        # note was not written (unreadable, a share that hangs) leaves with the sweep as before;
        # not when the sweep was stopped before its batch: that note would be found under neither
        # path until the next sweep (which finds the move again).
        if gone:
            doomed = self._still_gone(gone)
            if stop is not None and stop.is_set():
                unwritten = set(moves.values())
                doomed = [k for k in doomed if k not in unwritten]
            self.delete(doomed)
            act.done = min(act.total, act.done + len(gone))
        act.leaving = {}
        if self._deferred and self.hot_back is not None:
            self.hot_back(set(self._deferred))  # looked at again after this sweep, with their roots
        self._deferred.clear()
        self._hot_written.clear()
        act.scan_skipped = self.changes.skip_counts()  # with the notes whose read failed now
        return changed, wrote

    def _write_batch(
        self, part: Sequence[NoteFile], moves: dict[str, str], wrote: list[str] | None = None
    ) -> int:
        """``index_files`` of a sweep's batch: each moved note's old entry leaves every answer in
        the transaction that records its new one (status counted both, answers found both, until
        its removal), not one a note saved again meanwhile wrote back (a move undone between
        batches). ``wrote`` gets the keys of the notes written."""
        self.writer.replacing = {
            n.key: moves[n.key] for n in part if n.key in moves and moves[n.key] not in self._hot_written
        }
        self._wrote.keys = wrote
        try:
            self._held = self._held_moves(part)
            return self.index_files(part)
        finally:
            self.writer.replacing = {}
            self._held = {}
            self._wrote.keys = None

    def _held_moves(self, notes: Sequence[NoteFile]) -> dict[str, Prepared]:
        """The moved notes of a batch (``Writer.replacing``) whose file is the one indexed under
        their old key, unwritten since (``moves.unchanged_move``), as that entry holds them: not
        read again (a folder renamed on a share read every note under it, each a round trip).
        None while the links of unchanged notes are read again (that pass goes by key, and a
        new key before its cursor would keep the old reader's links)."""
        replacing = self.writer.replacing
        if not replacing or self.links.due:
            return {}
        olds = self.manifest.file_states_of([replacing[n.key] for n in notes if n.key in replacing])
        out: dict[str, Prepared] = {}
        for n in notes:
            old = replacing.get(n.key)
            st = olds.get(old) if old is not None else None
            if old is None or st is None or not unchanged_move(old, st, n):
                continue
            if not ctime_is_evidence(self.supervisor.status(n.root).fs_type):
                continue
            held = self.manifest.held_note(old)
            if held is not None:
                out[n.key] = as_held(n, st.hash, held, written_links(self.manifest.read, old))
        if out:
            log.info("moved_notes_not_read count=%d", len(out))
        return out

    def _moved_written(self, part: Sequence[NoteFile], moves: dict[str, str]) -> list[str]:
        """The old keys of the notes of ``part`` that were moved and whose new entry is written."""
        new = [n.key for n in part if n.key in moves]
        if not new:
            return []
        states = self.manifest.file_states_of(new)
        return [moves[k] for k in new if k in states and states[k].state == "indexed"]

    def _delete_moved(self, old: list[str], gone: list[str]) -> None:
        """Remove moved notes' old entries now (their new ones are indexed), out of ``gone``.
        From the deletion's first step no answer shows them (``deleting``) and ``files`` no longer
        counts them; ``leaving`` says how many are being removed."""
        pending = set(gone)
        old = [k for k in self._still_gone(old) if k in pending]
        if not old:
            return
        self.activity.leaving = dict(Counter(k.split("/", 1)[0] for k in old))
        try:
            self.writer.retire(old)  # no answer shows them from now on
            self.delete(old)
        finally:
            self.activity.leaving = {}
        left = set(old)
        gone[:] = [k for k in gone if k not in left]

    def _paths_of(self, keys: Sequence[str], roots: Sequence[Root]) -> set[str]:
        """Where the notes of ``keys`` lay (their roots' paths and the file names the index
        recorded): a retry of these paths finds them gone and deletes them."""
        by_name = {r.name: r for r in roots}
        out: set[str] = set()
        for key in keys:
            rel = self.manifest.rel_of(key)
            source, rest = key.split("/", 1)
            name = f"memory/{rest.split('/', 1)[0]}" if source == "memory" else source
            root = by_name.get(name)
            if root is not None and rel is not None:
                out.add(str(root.path / rel))
        return out

    def _still_gone(self, gone: Sequence[str]) -> list[str]:
        """The sweep's deletions but the notes a file event brought back meanwhile (indexed
        between its batches: deleting them now would lose them until the next full sweep)."""
        return [k for k in gone if k not in self._hot_written]

    def _index_hot(self, stop: threading.Event | None = None) -> None:
        """Between the batches of a full sweep: the notes saved since it began, so each is
        searchable within a batch's time, not at the end of a sweep of minutes. Paths whose root
        needs a full sweep of its own are given back as they came."""
        if self.hot_paths is None:
            return
        hot = self.hot_paths()
        if not hot:
            return
        diff = Diff()
        try:
            # The roots as they are now: an agent's inbox that was empty when the sweep began (no
            # root then) may hold the note just saved; matched against ``every``, it was dropped.
            if self.changes.diff_paths(hot, self.changes.roots(), diff):
                self._deferred |= hot  # a root needs a full look: given back when this sweep ends
            self._write_hot(diff, stop)
            self._record_excluded(diff, None)
        except BaseException:
            if self.hot_back is not None:  # taken off the queue: not to be lost with the sweep
                self.hot_back(set(hot) | self._deferred)
                self._deferred.clear()
            raise
        log.debug("hot_paths paths=%d indexed=%d deleted=%d", len(hot), len(diff.work), len(diff.gone))

    def _write_hot(self, diff: Diff, stop: threading.Event | None = None) -> None:
        """The file events' changes taken between a sweep's batches, written in batches as a sweep
        writes them: a folder renamed mid-sweep (moves of any count) keeps each note's old entry
        until its new one is written (its old entries deleted first and all read in one call, the
        notes were found under neither path for the whole read); the other deletions after.
        ``stop`` set (the daemon stops) ends it between two batches (a stop waited for every
        batch of a folder of thousands renamed): the rest is given back, and the next start's
        sweep finds it anyway."""
        moves = _moves_applied(diff)
        gone = list(diff.gone)
        batch = self.cfg.index.batch_files
        for start in range(0, len(diff.work), batch):
            if stop is not None and stop.is_set():
                left = diff.work[start:]
                # Nothing more is deleted either: a moved note whose new entry is not written keeps
                # its old one (found under neither path until the next start, else).
                self._deferred |= {str(n.path) for n in left} | self._paths_of(gone, self.changes.roots())
                log.info(
                    "hot_paths_stopped written=%d of=%d (the rest is looked at again)", start, len(diff.work)
                )
                return
            part = diff.work[start : start + batch]
            self._write_batch(part, moves)
            self._hot_written.update(n.key for n in part)
            self._delete_moved(self._moved_written(part, moves), gone)
        if gone:  # newer than the sweep's listing: deleted even if an earlier event wrote them
            self.delete(gone)


def _moves_applied(diff: Diff) -> dict[str, str]:
    """New key -> old key of the moves whose old key this sweep deletes and whose new note it
    reads (``Diff.moves``)."""
    gone = set(diff.gone)
    work = {n.key for n in diff.work}
    return {new: old for old, new in diff.moves.items() if old in gone and new in work}
