"""The row and time marks, a mixin of ``Indexer`` (``indexer``): the latest note row written at
this reader's last whole sweep, by its time and by its row number (with the note there), so that
notes another release wrote meanwhile (a downgrade and back, a clock set wrong, its rebuild
numbering rows anew) are found and read again. Its own module because it is kept by every write
and delete and read at a start; the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import json
import logging
import math

from sidecar.notes.chunking import (
    CHUNKER_VERSION,
    DRAWING_READER_VERSION,
    LINK_ALIAS_READER_VERSION,
    PROPERTY_NAME_READER_VERSION,
)
from sidecar.stores.manifest import Manifest
from sidecar.vault.canvas import CANVAS_READER_VERSION

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class RowMarks:
    """The row and time marks of an ``Indexer`` (which sets the state below)."""

    manifest: Manifest
    _rows_checked: bool

    def reread_if_written_elsewhere(self) -> None:
        """Notes written into the index after this reader's last whole sweep are read again by
        the next sweep: a release reading notes otherwise, run on the index meanwhile (a
        downgrade and back), wrote them its own way (``aliases: [010]`` as 8) and knows none of
        the rows that say a one-time re-read was done, so they kept its reading for good. Each
        reader keeps its own mark (``_written_until``): one shared mark was moved past those
        writes by the other release's own whole sweep. Notes this reader wrote from file events
        after its last whole sweep are read again too (a restart): cost only, no text is
        embedded again (its vector is found by its text)."""
        self._rows_renumbered()
        since = _finite(self.manifest.get_meta(_written_until()))
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if since is None and row is None:  # none yet (this reader's first start), or not a mark
            return
        # Both marks: a note's row written since is above the row mark whatever the wall clock
        # said (a whole sweep under a clock set ahead recorded a time in the future, a release run
        # under a clock set back wrote times below the mark). Rows numbered anew at or below the
        # row mark were found above (``_rows_renumbered``).
        notes = self.manifest.reread_written_after(
            since if since is not None else math.inf, int(row) if row is not None else None
        )
        if notes:
            log.info("notes_written_since_reread notes=%d", notes)

    def _rows_renumbered(self) -> None:
        """Once per process, before it moves the row mark: rows numbered anew at or below the
        mark elsewhere (another release's rebuild numbers them from 1; its deletes of the newest
        rows gave their numbers to its next writes) read every note again once, as no row tells
        which it wrote (no text is embedded again: its vector is found by its text). A new row
        takes the number after the latest, so the row at the mark, as recorded with it (its key
        and time), still there proves no number at or below it was given again; missing or
        another, or every row below the mark, they were. This release moves the mark down with
        its own deletes and writes (``_row_mark_kept``), so that means rows written elsewhere."""
        if self._rows_checked:
            return
        self._rows_checked = True
        self._check_rows()
        # Checked: this process's own writes move the mark with them from now on.
        self.manifest.row_mark = lambda: (_written_until(ROW_MARK), _written_until(ROW_NOTE))

    def _check_rows(self) -> None:
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if row is None or row < 1 or self._mark_row_recorded(int(row)):
            return
        notes = self.manifest.reread_all()
        self._set_row_mark(self.manifest.last_row_up_to(int(row)))
        log.info("notes_renumbered_reread notes=%d", notes)

    def _mark_row_recorded(self, row: int) -> bool:
        """Whether the row at the mark is the one recorded with it (a mark without a record: by
        its being there). One read by row number."""
        note = self.manifest.row_note(row)
        recorded = self.manifest.get_meta(_written_until(ROW_NOTE))
        try:
            return note is not None and (not recorded or json.loads(recorded) == note)
        except ValueError:  # a hand edit: the row there stands
            return note is not None

    def _row_mark_kept(self) -> None:
        """The row mark moved down to the latest row below it when this process removed the row
        at the mark (a delete, the note written anew from a file event, an exclusion at start or
        reload): a new row takes the number after the latest, so with every row below the mark
        another release's next write got a number at or below it and was never read again, and
        at start a missing row at the mark is taken for rows written elsewhere."""
        self._rows_renumbered()
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if row is not None and row >= 1 and not self._mark_row_recorded(int(row)):
            self._set_row_mark(self.manifest.last_row_up_to(int(row)))

    def _set_row_mark(self, row: int) -> None:
        """The row mark and the note row there (key and time), in one transaction."""
        note = self.manifest.row_note(row)
        marks = {
            _written_until(ROW_MARK): repr(row),
            _written_until(ROW_NOTE): json.dumps(note) if note else "",
        }
        with self.manifest.transaction() as db:
            self.manifest.set_meta_in(db, marks)

    def _whole_sweep_written(self) -> None:
        """Recorded after a whole sweep: the latest note row written, by its time and by its
        row (``reread_if_written_elsewhere``)."""
        self._rows_renumbered()
        written = self.manifest.last_written()
        if written and self.manifest.get_meta(_written_until()) != repr(written):
            self.manifest.set_meta(_written_until(), repr(written))
        latest = self.manifest.last_row()
        if latest and self.manifest.get_meta(_written_until(ROW_MARK)) != repr(latest):
            self._set_row_mark(latest)


ROW_MARK = "row"  # ``_written_until``'s kind of the mark by row
ROW_NOTE = "row_note"  # ``_written_until``'s kind of the note row at the row mark: [key, indexed_at]


def _written_until(kind: str = "") -> str:
    """The meta row of this reader's mark: the latest note row at its last whole sweep (repr of
    its ``indexed_at``; ``kind`` ROW_MARK: of its rowid, ROW_NOTE: its key and time), named by
    every version of how notes are read, so another release keeps its own."""
    readers = (CHUNKER_VERSION, CANVAS_READER_VERSION, DRAWING_READER_VERSION, LINK_ALIAS_READER_VERSION)
    name = "written_until" + (f"_{kind}" if kind else "")
    return f"{name}:" + ".".join(str(v) for v in (*readers, PROPERTY_NAME_READER_VERSION))


def _finite(value: str | None) -> float | None:
    """A mark's number; None when there is none or it is no finite number (another version's
    form, a hand edit: ignored, and the next whole sweep writes it anew)."""
    try:
        number = float(value) if value else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) else None
