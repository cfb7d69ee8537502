"""The vector folder after a burst of edits and the quiet compaction: a table of ``--rows`` rows
(384 dims), ``--edits`` single-row edits (delete + add, as a note's re-index), then the quiet
compaction, then the idle upkeep called again once the 30 s grace has passed. Prints the size and
data-file count of the folder at each step. Compare two source trees in one go:

    PYTHONPATH=/tmp/old nice -n 19 python bench/quietcompact.py
    PYTHONPATH=.        nice -n 19 python bench/quietcompact.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from sidecar.stores.vectors import VectorStore


def _size(path: Path) -> str:
    files = [f for f in path.rglob("*") if f.is_file()]
    data = [f for f in files if f.suffix == ".lance"]
    return f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB, {len(data)} data files"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3300)
    ap.add_argument("--edits", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    path = Path(tempfile.mkdtemp(prefix="qc-"))
    store = VectorStore(path, "bench", 384, "mean", optimize_every=10_000)
    rows = [(f"c{i}", f"k{i}", "vault", "") for i in range(args.rows)]
    store.add(rows, rng.standard_normal((args.rows, 384)))
    store.compact_if_quiet(0.0)
    time.sleep(32)
    store.compact_if_quiet(0.0)
    print("table:", _size(path))
    for i in range(args.edits):
        j = i % 20
        store.delete_ids([f"c{j}"])
        store.add([rows[j]], rng.standard_normal((1, 384)))
    print("after the edits:", _size(path))
    store.compact_if_quiet(0.0)
    print("after the quiet compaction:", _size(path))
    time.sleep(32)
    store.compact_if_quiet(0.0)  # the backfill's idle upkeep, 32 s later
    print("32 s later, next idle upkeep:", _size(path))


if __name__ == "__main__":
    main()
