"""Delete, a mixin of ``Indexer`` (``indexer``): every removal of notes from the stores passes
here (a sweep's, an exclusion's, a memory delete's, a crash's redone), with the row mark brought
down and the rebuild's put-back list read down with it; the inboxes a sweep emptied retired, the
ids of hard-linked copies forgotten. Its own module because it is the one way out of the index;
the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.contracts.wire import memory_agent
from sidecar.index.diff import ChangeFinder
from sidecar.index.writes import Writer
from sidecar.stores.manifest import Manifest
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.swept_roots import inboxes_in_use

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class Deletes:
    """The deletions of an ``Indexer`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    changes: ChangeFinder
    writer: Writer

    if TYPE_CHECKING:  # the indexer's own (``RowMarks``, ``PutBack``)

        def _rows_renumbered(self) -> None: ...

        def _row_mark_kept(self) -> None: ...

        def _read_back(self, read: Collection[str], *, save: bool = False) -> bool: ...

        def _say_rebuild(self) -> None: ...

    def _retire_emptied(self, gone: Sequence[str], names: set[str]) -> None:
        """Inboxes whose last entries this sweep deleted and that hold no note are no roots any
        more: their status goes now, not with the next sweep."""
        agents = sorted({a for k in gone if (a := memory_agent(k)) is not None})
        empty = [a for a in agents if not self.manifest.file_states(f"memory/{a}/")]
        kept = set(inboxes_in_use(self.cfg, empty))
        retired = {f"memory/{a}" for a in empty if a not in kept}
        if retired:
            self.supervisor.keep_memory_roots(names - retired)
            self.changes.keep_roots(names - retired)

    def _forget_linked(self, ids: set[tuple[int, int]]) -> None:
        """A hard-linked backup of notes in an excluded folder: once the notes are deleted it has
        one link and their ids, and would pass for them moved there. Their ids are forgotten."""
        forgotten = self.manifest.forget_ids(ids) if ids else []
        if forgotten:
            log.info("notes_hard_linked count=%d into=excluded folder ids=forgotten", len(forgotten))

    def delete(self, keys: Sequence[str]) -> None:
        """Remove notes from every store (intent first, so a crash mid-way is redone). Every
        delete passes here (a sweep's, an exclusion's at start or reload, a memory's, a redone
        one), so the row mark comes down with it (a few reads by row number)."""
        self._rows_renumbered()  # before this process deletes a row: its own is not another's
        self.writer.delete(keys)
        if keys:
            self._row_mark_kept()
        if self._read_back(keys):  # a note a rebuild put back, gone now (a memory delete)
            self._say_rebuild()

    def finish_interrupted(self) -> None:
        """Redo deletions a crash interrupted (interrupted indexing is redone by the next sweep)."""
        pending = self.manifest.keys_in_state("deleting")
        if pending:
            log.info("reconcile_deletions count=%d", len(pending))
            self.delete(pending)
