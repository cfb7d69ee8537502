"""Read retries, a mixin of ``ChangeFinder`` (``diff``): a note whose read keeps failing (an
EIO, a file of mode 000) is tried again after 1, 2, 4 ... full sweeps, up to about
RETRY_MOST_HOURS, at once on a file event or a change of its stat; the failures in a row are kept
in the manifest across restarts. Its own module because the backoff is one policy over a note's
failures, whatever made them; the state it works on is the ``ChangeFinder``'s own.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

from sidecar.config import Config
from sidecar.stores.manifest import Manifest
from sidecar.vault.sources import (
    NoteFile,
    Root,
    vault_roots,
)

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.diff")


# The longest a note whose reads keep failing waits for its next read (``ChangeFinder.failed_read``).
RETRY_MOST_HOURS = 6.0
# The meta row keeping ``ChangeFinder._retry``'s failures across restarts, as JSON rows: root
# name, path, failures in a row.
_RETRIES = "read_retries"
# A loaded count of failures is cut to this: its wait is at the cap (RETRY_MOST_HOURS) already.
_RETRY_MOST_FAILURES = 32
_Where = tuple[str, str]  # (root name, path) of a note
_Stamp = tuple[int, int, int]  # mtime, size and ctime of a note whose read failed


class ReadRetries:
    """The read backoff of a ``ChangeFinder`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    full_sweeps: int
    _retry: dict[tuple[str, str], tuple[int, int, _Stamp]]
    _retry_saved: dict[_Where, int]

    def _load_retries(self) -> dict[_Where, int]:
        """``_retry``'s failures in a row as the last process saved them, for the notes of roots
        configured now. Only the backoff is kept: each such note is read again by this start's
        first full sweep (a restart is a way out for a share that healed without a change of the
        note), and a failure then is its next in a row (no new warning, a longer wait). Never
        named unreadable from a row: a note that reads now, or is gone, is no unreadable note
        (a rebuild was refused for it). A row that cannot be read is dropped."""
        names = {r.name for r in vault_roots(self.cfg)}
        try:
            for name, where, failures in json.loads(self.manifest.get_meta(_RETRIES) or "[]"):
                if str(name) in names or str(name).startswith("memory/"):
                    # Turn 1: this start's first full sweep. A count past the cap waits no longer.
                    count = min(max(int(failures), 1), _RETRY_MOST_FAILURES)
                    self._retry[(str(name), str(where))] = (count, 1, (0, 0, 0))
        except (ValueError, TypeError) as exc:  # another shape: forgotten, as before it was kept
            log.warning("read_retries_dropped error=%s", exc)
            self._retry = {}
        return self._saved_retries()

    def _saved_retries(self) -> dict[_Where, int]:
        """What ``save_retries`` keeps of ``_retry``: the failures in a row of each note."""
        return {where: failures for where, (failures, _turn, _stamp) in self._retry.items()}

    def save_retries(self) -> None:
        """Keep ``_retry``'s failures in the manifest when they changed (after a sweep). A failed
        write keeps them for the next."""
        now = self._saved_retries()
        if now == self._retry_saved:
            return
        rows = [[name, where, failures] for (name, where), failures in sorted(now.items())]
        try:
            self.manifest.set_meta(_RETRIES, json.dumps(rows) if rows else "")
        except sqlite3.Error as exc:
            log.warning("read_retries_not_saved error=%s", exc)
            return
        self._retry_saved = now

    def failed_read(self, root: Root, path: Path, stamp: _Stamp) -> bool:
        """A read of a note (of mtime, size and ctime ``stamp``) failed: it is tried again after
        twice as many full sweeps as the last time (1, 2, 4, ...; at most about RETRY_MOST_HOURS),
        or once its stat changes (a chmod that makes it readable moves its ctime: a restart, or
        `sidecar index` with no events told, read it at once). True: the first failure in a row,
        the one worth a warning."""
        where = (root.name, str(path))
        failures = self._retry.get(where, (0, 0, stamp))[0] + 1
        most = max(1, int(RETRY_MOST_HOURS * 60 / self.cfg.index.rescan_minutes))
        self._retry[where] = (failures, self.full_sweeps + min(2 ** (failures - 1), most), stamp)
        return failures == 1

    def _retry_later(self, n: NoteFile) -> bool:
        """Whether a note whose read failed, unchanged since, waits for a later full sweep."""
        failed = self._retry.get((n.root.name, str(n.path)))
        stamp = (n.mtime_ns, n.size, n.ctime_ns)
        return failed is not None and self.full_sweeps < failed[1] and failed[2] == stamp
