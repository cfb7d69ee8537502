"""The rows of a vector table against the manifest's chunks: reconciled at an attach (doubled rows
and rows of unknown chunks deleted, flags set as the table has them), held until the first sweep
of a start when the manifest may not name every chunk yet, deleted with their chunks; and the
vectors of deleted chunks kept by text for a while, so that a note that comes back is not embedded
again. A part of ``Vectoring`` (``sidecar.index.vectoring``), which owns the stores and the
counters. Imports ``stores``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sidecar.runtime.steadyclock import steady_reading
from sidecar.stores.manifest import Manifest
from sidecar.stores.vectors import VectorStore

if TYPE_CHECKING:
    from sidecar.index.vectoring import Stores, VectorSet

log = logging.getLogger(__name__)

# The vectors that an edit of a note replaced are kept for its last this many edits only (an undo,
# a checkout and back); those of notes that left the index (deleted, moved, excluded) have the
# whole budget (index.keepDeletedVectorsMax). A note rewritten every minute for hours filled it
# in an afternoon, and a folder moved the day before was embedded again in full.
EDITS_KEPT_PER_NOTE = 3

# Kept vectors stamped this far behind the wall clock were not stamped by it: versions before
# this one stamped them with a counter that restarts at every boot (seconds since boot), which
# the age cut-off of the wall clock would have pruned all at once at the upgrade.
NOT_WALL_CLOCK_S = 20 * 365 * 86400.0
# Kept vectors stamped this far ahead of the wall clock at a start were stamped while it was set
# ahead (a Pi without a clock battery, a wrong manual setting), since corrected.
AHEAD_OF_WALL_CLOCK_S = 86400.0
# A wall clock before this (2025-01-01, before this version existed) is not set: nothing is
# restamped by it at a start (``mend_kept_times``).
WALL_CLOCK_FLOOR = 1_735_689_600.0


def _steady() -> float:
    return steady_reading()[1]


def _not_wall_clock(now: float) -> float:
    """Kept stamps before this are no wall-clock time: a counter since boot (``NOT_WALL_CLOCK_S``)
    or a clock not set yet (``WALL_CLOCK_FLOOR``: no version stamped a row before it)."""
    return max(now - NOT_WALL_CLOCK_S, WALL_CLOCK_FLOOR)


# How many jumps of the wall clock ahead are remembered (``VectorRows._seen_ahead``): a laptop on
# the monotonic fallback makes one at every wake after a day asleep.
_JUMPS_KEPT = 16

# How far after the newest kept stamp the vectors kept while the wall clock is behind it are
# stamped (``VectorRows._stamp``).
AFTER_NEWEST_S = 0.001

# Why a table's rows of chunks the index no longer has are there, by why the table is checked:
# at a start (an upgrade's first sweep cut notes anew) a bare count read as damage.
_ORPHANS_WHY = {
    "start": "their notes were edited, cut again or removed while no vector table was open",
    "failed write": "rows a write that failed half-way added for chunks replaced or removed since",
    "paused switch": "their notes were edited, cut again or removed while the switch to this "
    "table was paused",
}


class VectorRows:
    """A table's rows and the manifest's flags in agreement; mixed into ``Vectoring``, which sets
    the state below."""

    stores: Stores
    manifest: Manifest
    clock: Callable[[], float]
    # The wall clock's lead over a clock that counts no step (``steady_reading``): the highest
    # seen, and each jump of it more than ``AHEAD_OF_WALL_CLOCK_S`` above every earlier one, as
    # (the lead before it, the wall time of the jump), oldest first (``_seen_ahead``). In memory:
    # only this process saw them.
    _lead_top: float | None
    _jumps: list[tuple[float, float]]
    keep_seconds: float
    keep_max: int
    reused: int
    adopted: int
    first_sweep_done: bool
    _held: tuple[VectorStore, set[str]] | None
    _unsure: set[str]

    if TYPE_CHECKING:

        def _current(self, vs: VectorSet) -> bool: ...

    def _unstamp(self, table: str) -> None:
        """Clear the clean-stop stamp of a table that serves as it is; on a full disk it serves
        all the same (read-only until there is space): a change to the table no longer matches
        the stamp anyway, and the first write checks table and flags (``_unsure``) first."""
        try:
            self.manifest.set_meta("vectors_clean", "")
        except sqlite3.Error as exc:
            log.warning("vectors_clean_kept table=%s error=%s", table, exc)
            self._unsure.add("has_vector")

    def _reconcile(
        self,
        store: VectorStore,
        flag: str,
        hold: bool = False,
        forget: bool = True,
        to_next: bool = False,
        *,
        cause: str = "start",
    ) -> int:
        """Table and flags in agreement: doubled rows and rows of unknown chunks deleted (held
        instead with ``hold``, see ``first_sweep_done``), flags set as the table has them. How
        many chunks were flagged (their vector was in the table). ``forget``: the chunks deleted
        while no table was open are forgotten after (not while another table is attached next).
        ``to_next``: a switch to another model begins next; the chunks whose vector the table
        lacks (a table repaired, rows lost) are left to it, as notes cut again are (the retiring
        model embedded them all first, for vectors dropped with its table). ``cause``: why the
        table is checked (a key of ``_ORPHANS_WHY``), said in the log of the rows it removes."""
        manifest = self.manifest
        # The serving table checked while a switch builds (a write that failed half-way, the held
        # rows settled): its lost chunks are the new model's alone, as at the switch's begin.
        to_next = to_next or (flag == "has_vector" and self.stores.building is not None)
        listed = store.id_list()
        in_table = set(listed)
        known = manifest.all_chunk_ids()
        flagged = manifest.vector_ids(flag)
        doubled = [i for i, n in Counter(listed).items() if n > 1] if len(listed) != len(in_table) else []
        if doubled:  # rows of one chunk twice: drop every copy, embed it once more
            log.warning("reconcile_vectors table=%s doubled=%d", store.name, len(doubled))
            store.delete_ids(doubled)
            in_table -= set(doubled)
        orphans = sorted(in_table - known)
        if orphans and hold:
            log.info(
                "reconcile_vectors table=%s orphans=%d held=until the first sweep ends (the chunks "
                "it finds again keep them)",
                store.name,
                len(orphans),
            )
            self._held = (store, set(orphans))
        elif orphans:
            # Plain words: at an upgrade's start these are the chunks its first sweep cut anew,
            # and a bare count read as damage.
            log.info(
                "reconcile_vectors table=%s orphans=%d (vectors of chunks the index no longer has: "
                "%s; removed from the table, nothing is lost)",
                store.name,
                len(orphans),
                _ORPHANS_WHY[cause],
            )
            self._keep_orphans(store, orphans, cause)
            store.delete_ids(orphans)
            if forget:
                self.manifest.forget_kept_later()
        found = sorted((in_table & known) - flagged)
        with manifest.transaction() as db:
            manifest.set_has_vector(found, 1, db, flag)
            lost = sorted(flagged - in_table)
            manifest.set_has_vector(lost, 0, db, flag)
            if to_next and lost:
                manifest.leave_ids_to_next(lost, db)
                log.info(
                    "vectors_left_to_switch table=%s chunks=%d reason=not in the table", store.name, len(lost)
                )
        return len(found)

    def _keep_orphans(self, store: VectorStore, orphans: list[str], cause: str = "start") -> None:
        """Keep by text the vectors of the rows about to be deleted whose chunks were deleted
        while no table was open (``_keep``), as of when they were deleted (those deleted longer
        ago than ``keep_seconds`` are not kept)."""
        if self.keep_max <= 0 or self.keep_seconds <= 0:
            return
        now = self._clock_mended()
        later = self.manifest.kept_later(orphans, now - self.keep_seconds)
        if later:
            vecs = store.vectors_of(sorted(later))
            # Kept as of their deletion: their age counts from then, not from this attach.
            by_age: dict[float, list[tuple[str, bytes, str]]] = {}
            for cid, v in vecs.items():
                digest, at = later[cid]
                # kept as of notes that left the index ("" note): their whole budget
                by_age.setdefault(at, []).append((digest, np.asarray(v, dtype=np.float32).tobytes(), ""))
            for at, rows in by_age.items():
                self.manifest.keep_vectors(store.name, rows, at)
            self.manifest.prune_kept(now - self.keep_seconds, self.keep_max)
            log.info(
                "vectors_kept table=%s chunks=%d reason=%s: kept by text, an equal text takes its "
                "vector instead of the model",
                store.name,
                len(vecs),
                _ORPHANS_WHY[cause],
            )

    def _stamp(self, now: float) -> float:
        """When the vectors kept now are stamped: the wall clock's ``now``, but never before the
        newest stamp kept (a clock set back while the daemon runs). Stamped by the clock set
        back, a folder deleted meanwhile counted as older than every vector kept before it: the
        cap pushed it out first, and restored it was embedded again in full. Just after the
        newest, each edit's rows keep a stamp of their own (``prune_edits`` counts them)."""
        newest = self.manifest.newest_kept()
        return now if newest is None or now >= newest else newest + AFTER_NEWEST_S

    def mend_kept_times(self) -> None:
        """At a start: kept vectors (and chunks remembered to keep) whose stamp is no wall-clock
        time (``_not_wall_clock``) count as kept now, in their order: the newest now, the others
        as much earlier as they were kept before it, squeezed into half of ``keep_seconds``, so
        each stays at least that long and their edits stay apart (``prune_edits`` counts distinct
        stamps). Pruned at once, every note deleted or excluded in the week before the upgrade was
        embedded again when it came back. Rows stamped more than ``AHEAD_OF_WALL_CLOCK_S`` in the
        future (a clock set ahead, then corrected) count as kept now too: else no age cut-off
        reached them and the cap kept them ahead of every newer deletion, for years."""
        now = self.clock()
        if now < WALL_CLOCK_FLOOR:
            # Not set yet (a board without a clock battery boots in 1970 or 2000 until NTP steps
            # it): every row is "ahead" of it, and restamped to it they were pruned by age at the
            # step forward, every folder deleted before embedded again when it came back.
            log.warning(
                "vectors_kept_not_restamped reason=the wall clock says %s, before this version existed "
                "(not set yet?): kept vectors keep their stamps",
                time.strftime("%Y-%m-%d", time.gmtime(now)),
            )
            return
        self._restamp(now, now + AHEAD_OF_WALL_CLOCK_S)

    def _clock_mended(self) -> float:
        """The wall clock's ``now`` for a keep, the stamps mended first when they show a wrong
        clock corrected while the daemon runs. Rows kept while it read 2000 with nothing kept
        before (no wall-clock time: ``_not_wall_clock``) were pruned by age as soon as NTP
        stepped it. Rows stamped while it was set ahead (and every keep after them, stamped
        after the newest: ``_stamp``) aged out only after a restart; they are mended only when
        this process saw that step ahead undone (``_seen_ahead``), and only those stamped since
        the step. A jump ahead alone mends nothing: where the other clock stops in a sleep (the
        monotonic fallback, a VM) a wake is one too, and rows more than a day ahead of a clock
        wrongly set back after it, restamped to the clock behind, were pruned as a month old
        once NTP set it forward again."""
        now = self.clock()
        if now < WALL_CLOCK_FLOOR:
            return now  # not set yet: mended once it is
        undone = self._seen_ahead(now)
        try:
            oldest, newest = self.manifest.kept_span()
        except sqlite3.Error:
            return now
        ahead = undone is not None and newest is not None and newest > now + AHEAD_OF_WALL_CLOCK_S
        if ahead or (oldest is not None and oldest < _not_wall_clock(now)):
            # Only the rows stamped since the jump undone (a keep stamps at least its ``now``).
            self._restamp(now, max(now + AHEAD_OF_WALL_CLOCK_S, (undone or now) - AFTER_NEWEST_S))
        return now

    def _seen_ahead(self, now: float) -> float | None:
        """The wall time of a jump of the clock ahead that this process saw and that ``now``
        undoes: its lead over ``steady_reading`` is back within ``AHEAD_OF_WALL_CLOCK_S`` of the
        lead before that jump. That jump and every later one are then forgotten, the lead now
        the highest. None if no jump is undone. A jump is one to more than a day above every
        lead seen before (``_lead_top``): a clock set back and corrected returns to a lead seen
        before, no jump. A sleep the other clock does not count (the monotonic fallback, a VM)
        is a jump never undone: the lead stays up, and a clock wrongly set back after it falls
        far below the lead before it."""
        lead = now - _steady()
        for k, (before, at) in enumerate(self._jumps):
            if abs(lead - before) <= AHEAD_OF_WALL_CLOCK_S:
                del self._jumps[k:]
                self._lead_top = max(lead, before)  # the corrected clock is the one to jump from
                return at
        top = self._lead_top
        if top is not None and lead > top + AHEAD_OF_WALL_CLOCK_S:
            self._jumps = [*self._jumps, (top, now)][-_JUMPS_KEPT:]
        if top is None or lead > top:
            self._lead_top = lead
        return None

    def _restamp(self, now: float, ahead: float) -> None:
        """Rows stamped before ``_not_wall_clock(now)`` restamped in their order, those after
        ``ahead`` stamped ``now`` (``Manifest.restamp_kept``)."""
        try:
            behind, over = self.manifest.restamp_kept(_not_wall_clock(now), now, self.keep_seconds / 2, ahead)
        except sqlite3.Error as exc:  # a cache: the start goes on (they age as they were stamped)
            log.warning("vectors_kept_not_restamped error=%s", exc)
            return
        if behind:
            log.info(
                "vectors_kept_restamped rows=%d (stamped by no wall clock: by a counter since boot "
                "(an older version), or while the clock was not set; counted as kept now, in their "
                "order)",
                behind,
            )
        if over:
            log.info(
                "vectors_kept_restamped rows=%d (stamped more than a day ahead of the wall clock: "
                "a clock set ahead, then corrected; counted as kept now)",
                over,
            )

    def settle(self) -> None:
        """The first sweep of a start has ended: the manifest names every chunk. Held rows it
        did not name again are deleted, those it did are flagged (one reconcile)."""
        with self.stores.write_lock:
            self.first_sweep_done = True
            held, self._held = self._held, None
            serving = self.stores.serving
            if held is None or serving is None or serving.store is not held[0] or held[0].closed:
                return
            found = self._reconcile(held[0], "has_vector")
            self.adopted += found
            self.reused += found
        log.info("vectors_settled table=%s adopted=%d", held[0].name, self.adopted)

    def _adopt(
        self, vs: VectorSet, rows: list[tuple[str, str, str, str]]
    ) -> tuple[list[tuple[str, str, str, str]], int]:
        """Flag the rows whose vector the table holds already (held at the start, see
        ``first_sweep_done``): the rows left to embed, and how many were flagged."""
        held = self._held
        if held is None or held[0] is not vs.store or vs.flag != "has_vector":
            return rows, 0
        ids = [r[0] for r in rows if r[0] in held[1]]
        if not ids:
            return rows, 0
        with self.stores.write_lock:
            if self._held is not held or not self._current(vs):
                return rows, 0
            live = set(self.manifest.still_pending(ids, vs.flag))
            with self.manifest.transaction() as db:
                self.manifest.set_has_vector(sorted(live), 1, db, vs.flag)
            held[1].difference_update(ids)
        self.adopted += len(live)
        self.reused += len(live)
        return [r for r in rows if r[0] not in live], len(live)

    def delete_ids(self, chunk_ids: list[str]) -> None:
        if self._held is not None:
            self._held[1].difference_update(chunk_ids)
        self._keep(chunk_ids, edited=True)
        for store in self._stores_for_deletion():
            store.delete_ids(chunk_ids)

    def delete_keys(self, keys: list[str]) -> None:
        if self.keep_max > 0:
            self._keep(self.manifest.chunk_ids_of(keys), edited=False)
        for store in self._stores_for_deletion():
            store.delete_keys(keys)

    def _stores_for_deletion(self) -> list[VectorStore]:
        """The open tables; with none open (model off, loading, failed), the table on disk is no
        longer known clean: attached again, it is checked against the manifest (with the stamp
        of the last clean stop it skipped the check, and the deleted chunks' vectors stayed)."""
        stores = self.stores.vector_stores()
        if not stores and self.manifest.get_meta("vectors_clean"):
            self.manifest.set_meta("vectors_clean", "")
        return stores

    def _keep(self, chunk_ids: list[str], *, edited: bool) -> None:
        """Remember the vectors of chunks about to be deleted, by text, for a while (bounded):
        a note that comes back (a remount, a checkout, an undo, a move) is not embedded again.
        ``edited``: chunks an edit of their note replaced (``delete_ids``), kept for the note's
        last ``EDITS_KEPT_PER_NOTE`` edits; else their notes leave the index (``delete_keys``)."""
        if self.keep_max <= 0 or self.keep_seconds <= 0 or not chunk_ids:
            return
        manifest = self.manifest
        if self.stores.serving is None:
            # No table open (the model loads, or failed): its rows stay on disk until it is
            # attached, which deletes them as unknown; their texts are remembered, so that it
            # keeps their vectors first (lost, a folder excluded meanwhile was embedded again
            # when it was let back in).
            now = self._clock_mended()
            known = manifest.embed_hashes(chunk_ids[: self.keep_max])
            manifest.keep_later(sorted(known.items()), now, now - self.keep_seconds, self.keep_max)
            return
        notes = manifest.chunk_notes(chunk_ids[: self.keep_max]) if edited else {}
        for vs in (self.stores.serving, self.stores.building):
            if vs is None:
                continue
            hashes = manifest.embed_hashes(chunk_ids[: self.keep_max], vs.flag)
            if not hashes:
                continue
            vecs = vs.store.vectors_of(list(hashes))
            rows = [
                (hashes[cid], np.asarray(v, dtype=np.float32).tobytes(), notes.get(cid, ""))
                for cid, v in vecs.items()
            ]
            now = self._clock_mended()
            manifest.keep_vectors(vs.store.name, rows, self._stamp(now))
            manifest.prune_edits(vs.store.name, {n for _, _, n in rows if n}, EDITS_KEPT_PER_NOTE)
            manifest.prune_kept(now - self.keep_seconds, self.keep_max)
