"""What a vector table with one truncated data file costs to repair: a real LanceDB table of
``--rows`` random vectors (``--dim``) written in ``--files`` adds (one data file each), one data
file cut in half, then the repair's own steps: the table moved aside (``discard_vectors``), a new
one made and the rows that still read copied into it (``salvage_vectors``). Reported: rows kept
and lost (the chunks that are embedded again; before this repair every row was), the reads the
walk made and the seconds the copy took; with ``--compacted`` the table is compacted first
(one data file: nothing can be kept when it is the damaged one).

    python bench/vectorsalvage.py [--rows 100000] [--dim 384] [--files 20] [--compacted]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import emit

from sidecar.stores.lifecycle import discard_vectors, salvage_vectors
from sidecar.stores.vectors import VectorStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--compacted", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    path = Path(tempfile.mkdtemp(prefix="salvage-")) / "vectors"
    store = VectorStore(path, "bench-model", args.dim, "mean", optimize_every=10**9)
    per = args.rows // args.files
    for f in range(args.files):
        rows = [(f"c{f}-{i}", f"vault/n{f}-{i // 4}", "vault", "") for i in range(per)]
        store.add(rows, rng.standard_normal((per, args.dim)).astype(np.float32))
    if args.compacted:
        store.optimize()
    data = sorted((path / f"{store.name}.lance" / "data").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    # Compacted: the newest file holds every row (the older ones are no longer read).
    victim = data[-1] if args.compacted else data[len(data) // 2]
    with victim.open("r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    started = time.monotonic()
    aside = discard_vectors(path, store.name, "bench", None)
    assert aside is not None
    fresh = VectorStore(path, "bench-model", args.dim, "mean", optimize_every=10**9)
    kept, lost = salvage_vectors(aside, fresh, "mean")
    seconds = time.monotonic() - started
    fresh.verify()
    result: dict[str, Any] = {
        "rows": per * args.files,
        "dim": args.dim,
        "data_files": len(data),
        "compacted": args.compacted,
        "kept": kept,
        "lost_to_embed_again": lost,
        "before_this_fix_to_embed_again": per * args.files,
        "repair_seconds": round(seconds, 2),
        "new_table_rows": fresh.count(),
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
