"""A vector table's centre (the mean of its rows, for hubness), kept in a file inside the table's
folder beside the row count it was taken at and the rows added and deleted since (its churn). A
part of ``VectorStore``, which owns the table.

The centre is taken again once the churn reaches a tenth of the rows it was taken at (a sample of
up to ``CENTROID_SAMPLE`` rows is read from LanceDB: 50-90 ms at 30 k rows, too much for every
write). The churn, not the net change of the row count: content that turns over at a steady size
(edits, a branch switch, memory written and deleted) would otherwise keep the centre of rows long
gone for good. Kept only in memory, the centre depended on the process: the daemon that built or
changed the index still served the centre of an earlier row count, a fresh start took the rows as
they were, and every hub boost (so every score) moved across a restart. Kept with the table (the
churn too), every process serving the same files uses the same centre.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.runtime.atomic import atomic_write

log = logging.getLogger("sidecar.stores.vectors")

# Inside the table's folder (LanceDB ignores other files there), so the centre goes wherever the
# table goes: emptied, dropped, moved aside by a repair.
CENTRE_RECORD = "sidecar-centre.json"


def centre_path(table_folder: Path) -> Path:
    return table_folder / CENTRE_RECORD


@dataclass(frozen=True)
class Centre:
    """The centre, the row count it was taken at, and the rows added and deleted since."""

    rows: int
    churn: int
    mean: np.ndarray[Any, Any]

    def stale(self, count: int) -> bool:
        """Taken again once a tenth of its rows changed: counted by the churn (the net change
        too, for writes the churn missed: a kill between a table's write and its record's)."""
        return 10 * max(self.churn, abs(count - self.rows)) >= self.rows


def read_centre(path: Path, dim: int) -> Centre | None:
    """The centre as kept, or None when there is none or it cannot be read (it is then taken from
    the rows again and written anew). A record without a churn (the first that were kept) counts
    none."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        rows, churn, values = record["rows"], record.get("churn", 0), record["centre"]
        centre = np.asarray(values, dtype=np.float32)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(rows, int) or rows <= 0 or not isinstance(churn, int) or churn < 0:
        return None
    if centre.shape != (dim,) or not np.isfinite(centre).all():
        return None
    centre.setflags(write=False)
    return Centre(rows, churn, centre)


def write_centre(path: Path, centre: Centre, table: str) -> None:
    """Keep the centre for every later open (written whole, synced, then renamed; a missing
    folder, a dropped table's, is not made again). One that cannot be written (a read-only or
    full disk) is logged: this process serves it all the same, and the next start takes its own
    from the rows."""
    # A float32's repr as a float64 reads back to the same float32: the centre is kept exactly.
    values = [float(x) for x in np.asarray(centre.mean, dtype=np.float32)]
    record = {"rows": centre.rows, "churn": centre.churn, "centre": values}
    try:
        atomic_write(path, json.dumps(record).encode("utf-8"), make_folder=False)
    except OSError as exc:
        log.warning("vector_centre_not_kept table=%s error=%s", table, exc)


def forget_centre(path: Path, table: str) -> None:
    """The rows are gone (the table emptied): so is their centre."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("vector_centre_not_kept table=%s error=%s", table, exc)
