"""Build a vector table's ANN index in a child process.

Training an index (IVF_PQ's k-means and codebooks) allocates hundreds of MB at 100 k vectors; in
the daemon that left ~40 MB it could not give back and a 614 MB peak (BENCHMARKS.md).
In a child the memory goes away with the process; the daemon keeps serving (from the old index or
an exact scan) and writing (LanceDB commits the index next to concurrent appends), then checks out
the new version.

    python -m sidecar.stores.annbuild FOLDER TABLE KIND DIM    # exit 0 built, 1 failed
"""

from __future__ import annotations

import sys
import time

from sidecar.runtime.orphan import die_with_parent


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m sidecar.stores.annbuild FOLDER TABLE KIND DIM", file=sys.stderr)
        return 2
    import lancedb

    from sidecar.stores.vector_index import ANN_KINDS

    # An orphaned build would commit an index the next daemon is building too (LanceDB then
    # refuses one as a commit conflict).
    die_with_parent(3)
    folder, name, kind, dim = argv[0], argv[1], argv[2], int(argv[3])
    t0 = time.perf_counter()
    table = lancedb.connect(folder).open_table(name)
    table.create_index("vector", config=ANN_KINDS[kind][1](dim), replace=True)
    print(f"rows={table.count_rows()} seconds={time.perf_counter() - t0:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
