"""Offline: what health's manifest reads cost the index's writes. A copy of a manifest is opened;
one thread writes a one-row transaction every ``--every`` ms (a sweep's pace of small batches)
while another reads what a health call reads of the manifest (the counts of files, chunks and
skipped notes, the chunks waiting for vectors and those left to a model switch), over and over,
for ``--seconds``. Two ways in one run, alternated ``--runs`` times:

- ``writer``: each read through the writer's connection under its lock (``Manifest._query``),
  as health read them before;
- ``now``: as health reads them now (``counts`` in one read transaction on a reader connection,
  the vector counts on a reader).

Printed per way and run: health reads done and their p50 seconds, the writer's latency (asked to
committed) p50 / p99 / max in ms.

    python bench/healthwait.py --manifest PATH [--seconds 10] [--every 20] [--runs 2]

PATH: any index's ``manifest.sqlite`` (copied into a temporary folder first; nothing is written
to it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import _COUNTED
from sidecar.stores.vectorbook import NEXT_ONLY

# The reads health made before, each on its own through the writer's connection.
_BEFORE = (
    f"SELECT source, count(*), coalesce(sum(chunks), 0) FROM files WHERE {_COUNTED} GROUP BY source",
    "SELECT agent, count(*), coalesce(sum(chunks), 0) FROM files "
    f"WHERE {_COUNTED} AND source = 'memory' GROUP BY agent",
    "SELECT error, count(*) FROM files WHERE state = 'skipped' GROUP BY error",
    "SELECT key, error FROM files WHERE state = 'indexed' AND error IS NOT NULL "
    "AND source != 'memory' ORDER BY key",
)


def _health_before(m: Manifest) -> None:
    for sql in _BEFORE:
        m._query(sql)
    m._query("SELECT count(*) FROM chunks WHERE has_vector = 0 AND ord < ?", (m.vector_cap,))
    m._query(f"SELECT count(*) FROM chunks WHERE has_vector = {NEXT_ONLY} AND ord < ?", (m.vector_cap,))


def _health_now(m: Manifest) -> None:
    m.counts()
    m.pending_count()
    m.left_to_switch()


def _run(m: Manifest, way: str, seconds: float, every: float) -> str:
    read = _health_before if way == "writer" else _health_now
    stop = threading.Event()
    waits: list[float] = []
    reads: list[float] = []

    def writer() -> None:
        n = 0
        while not stop.is_set():
            asked = time.perf_counter()
            m.set_meta("bench_healthwait", str(n))
            waits.append(time.perf_counter() - asked)
            n += 1
            stop.wait(every)

    def reader() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            read(m)
            reads.append(time.perf_counter() - began)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    ms = sorted(w * 1000 for w in waits)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"{way:7s} health reads {len(reads):4d} p50 {statistics.median(reads):.3f} s | writes {len(ms):4d} "
        f"latency p50 {statistics.median(ms):.1f} ms p99 {p99:.1f} ms max {ms[-1]:.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=20.0, help="ms between the writer's transactions")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.sqlite"
        shutil.copyfile(args.manifest, path)
        m = Manifest(path)
        try:
            files = m._query("SELECT count(*) FROM files")[0][0]
            chunks = m._query("SELECT count(*) FROM chunks")[0][0]
            print(f"manifest: {files:,} files, {chunks:,} chunks")
            for _ in range(args.runs):
                for way in ("writer", "now"):
                    print(_run(m, way, args.seconds, args.every / 1000), flush=True)
        finally:
            m.close()


if __name__ == "__main__":
    main()
