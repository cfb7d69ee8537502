"""Offline: what a health call's manifest reads cost the index's writes. A copy of a manifest is
opened; one thread writes a one-row transaction every ``--every`` ms (a sweep's pace of small
batches) while another reads all that a health call reads of the manifest, over and over, for
``--seconds``: the counts of files, chunks and skipped notes, the chunks waiting for vectors and
those left to a model switch, the note with most chunks waiting, the chunks found by keywords only,
the skipped files named, the links' totals and the meta rows. Two ways in one run, alternated
``--runs`` times:

- ``writer``: each read through the writer's connection under its lock (``Manifest._query``),
  as health read them before;
- ``now``: as health reads them now: all in one snapshot (``Manifest.snapshot``: one read
  transaction on a reader connection).

``--backlog`` marks every chunk of the copy as waiting for its vector first (a first sweep's
backlog: the largest waiting note is then looked up at each call); ``--links N`` adds link rows
to the copy until it has N (a large vault's link graph).

Printed per way and run: health reads done and their p50 seconds, the writer's latency (asked to
committed) p50 / p99 / max in ms.

``--checkpoint``: instead of the one-row writes, a write-back (``Manifest.written_back``: a
TRUNCATE checkpoint, as at a switch to writable, a shrink, the daily give-back) every ``--every``
ms, its latency printed the same way; a reader's transaction (the snapshot) makes it wait through
the busy handler until that transaction ends. A third way, ``none``, runs no health reads: the
checkpoint's own cost.

    python bench/healthwait.py --manifest PATH [--seconds 10] [--every 20] [--runs 2] [--backlog] [--links N]
        [--checkpoint]

PATH: any index's ``manifest.sqlite``; it and its ``-wal`` (a running daemon's last commits)
are copied into a temporary folder first; nothing is written to them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sidecar.notes.links import LinkGraph
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


def _rest(m: Manifest) -> None:
    """The reads besides the counts: how health reads them (``_query``: on the snapshot's
    reader inside ``snapshot``, else the writer's connection under its lock)."""
    m.keyword_only(5)
    m.pending_largest()
    m.skipped_files(21)
    LinkGraph(m.read).totals()
    m.get_meta("writers")


def _health_before(m: Manifest) -> None:
    for sql in _BEFORE:
        m._query(sql)
    m._query("SELECT count(*) FROM chunks WHERE has_vector = 0 AND ord < ?", (m.vector_cap,))
    m._query(f"SELECT count(*) FROM chunks WHERE has_vector = {NEXT_ONLY} AND ord < ?", (m.vector_cap,))
    _rest(m)


def _health_now(m: Manifest) -> None:
    with m.snapshot():
        m.counts()
        m.pending_count()
        m.left_to_switch()
        _rest(m)


def _add_links(m: Manifest, total: int) -> None:
    """Link rows up to ``total``, ten per made-up source note (numbers past the real ones'):
    only their number matters to the links' totals."""
    have = m._query("SELECT count(*) FROM link_rows")[0][0]
    base = 1 + (m._query("SELECT coalesce(max(src), 0) FROM link_rows")[0][0] or 0) + 10**6
    rows = (
        (base + i // 10, i % 10, f"t{i}", f"t{i}", "", "", 0, "wikilink", 1, None, 0)
        for i in range(max(total - have, 0))
    )
    with m.transaction() as db:
        db.executemany(
            "INSERT INTO link_rows(src, ord, target, name, anchor, display, embed, kind, line, dst, "
            "candidates) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def _run(m: Manifest, way: str, seconds: float, every: float, *, checkpoint: bool = False) -> str:
    read = _health_before if way == "writer" else _health_now
    stop = threading.Event()
    waits: list[float] = []
    reads: list[float] = [0.0]

    def writer() -> None:
        n = 0
        while not stop.is_set():
            if checkpoint:
                m.set_meta("bench_healthwait", str(n))  # something in the log for it to write back
            asked = time.perf_counter()
            if checkpoint:
                m.written_back()
            else:
                m.set_meta("bench_healthwait", str(n))
            waits.append(time.perf_counter() - asked)
            n += 1
            stop.wait(every)

    def reader() -> None:
        del reads[0]
        while not stop.is_set():
            began = time.perf_counter()
            read(m)
            reads.append(time.perf_counter() - began)

    threads = [threading.Thread(target=writer)] + ([threading.Thread(target=reader)] if way != "none" else [])
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    ms = sorted(w * 1000 for w in waits)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"{way:7s} health reads {len(reads):4d} p50 {statistics.median(reads):.3f} s | "
        f"{'checkpoints' if checkpoint else 'writes'} {len(ms):4d} "
        f"latency p50 {statistics.median(ms):.1f} ms p99 {p99:.1f} ms max {ms[-1]:.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=20.0, help="ms between the writer's transactions")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--backlog", action="store_true", help="every chunk waiting for its vector")
    ap.add_argument("--links", type=int, default=0, help="link rows added up to this many")
    ap.add_argument("--checkpoint", action="store_true", help="time TRUNCATE checkpoints, not writes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.sqlite"
        # With its log: a running daemon's last commits may be in the -wal only.
        for suffix in ("", "-wal"):
            if (src := Path(f"{args.manifest}{suffix}")).exists():
                shutil.copyfile(src, f"{path}{suffix}")
        m = Manifest(path)
        try:
            if args.backlog:
                with m.transaction() as db:
                    db.execute("UPDATE chunks SET has_vector = 0")
            if args.links:
                _add_links(m, args.links)
            files = m._query("SELECT count(*) FROM files")[0][0]
            chunks = m._query("SELECT count(*) FROM chunks")[0][0]
            links = m._query("SELECT count(*) FROM link_rows")[0][0]
            waiting = m.pending_count()
            print(f"manifest: {files:,} files, {chunks:,} chunks ({waiting:,} waiting), {links:,} links")
            for _ in range(args.runs):
                for way in ("writer", "now", *(("none",) if args.checkpoint else ())):
                    said = _run(m, way, args.seconds, args.every / 1000, checkpoint=args.checkpoint)
                    print(said, flush=True)
        finally:
            m.close()


if __name__ == "__main__":
    main()
