"""A vector table's centre (the mean of its rows, for hubness), kept in a file inside the table's
folder beside the row count it was taken at. A part of ``VectorStore``, which owns the table.

The centre is taken again only once the table grew or shrank by a tenth (a sample of up to
``CENTROID_SAMPLE`` rows is read from LanceDB: 50-90 ms at 30 k rows, too much for every write).
Kept only in memory, that made it depend on the process: the daemon that built or changed the
index still served the centre of an earlier row count, a fresh start took the rows as they were,
and every hub boost (so every score) moved across a restart. Kept with the table, every process
serving the same files uses the same centre. Imports nothing of sidecar.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("sidecar.stores.vectors")

# Inside the table's folder (LanceDB ignores other files there), so the centre goes wherever the
# table goes: emptied, dropped, moved aside by a repair.
CENTRE_RECORD = "sidecar-centre.json"


def centre_path(table_folder: Path) -> Path:
    return table_folder / CENTRE_RECORD


def read_centre(path: Path, dim: int) -> tuple[int, np.ndarray[Any, Any]] | None:
    """(row count, centre) as kept, or None when there is none or it cannot be read (it is then
    taken from the rows again and written anew)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        rows, values = record["rows"], record["centre"]
        centre = np.asarray(values, dtype=np.float32)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(rows, int) or rows <= 0 or centre.shape != (dim,) or not np.isfinite(centre).all():
        return None
    centre.setflags(write=False)
    return rows, centre


def write_centre(path: Path, rows: int, centre: np.ndarray[Any, Any], table: str) -> None:
    """Keep the centre for every later open (written whole, then renamed). One that cannot be
    written (a read-only or full disk) is logged: this process serves it all the same, and the
    next start takes its own from the rows."""
    tmp = path.with_name(path.name + ".tmp")
    # A float32's repr as a float64 reads back to the same float32: the centre is kept exactly.
    record = {"rows": rows, "centre": [float(x) for x in np.asarray(centre, dtype=np.float32)]}
    try:
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("vector_centre_not_kept table=%s error=%s", table, exc)


def forget_centre(path: Path, table: str) -> None:
    """The rows are gone (the table emptied): so is their centre."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("vector_centre_not_kept table=%s error=%s", table, exc)
