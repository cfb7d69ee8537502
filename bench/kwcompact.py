"""Offline: what a compaction of a large vault's keyword index costs the watcher's writes, in place
(the rewrite in the index's own writers, the write lock held for the whole fill: what a large
vault got once half of it was deleted) and beside (``index.beside``: filled in a side folder while
the old index takes writes, the lock held for the notes written meanwhile and the swap).

    python bench/kwcompact.py [--vault DIR] [--notes N] [--share 0.3] [--ways "in place,beside,stop"]

DIR: the eval corpora's Obsidian help vault unless given.
The vault (its first ``--notes`` notes in path order, copied, when given) is swept keyword-only
into a temporary home (nothing is written to the vault). Before
each way, ``--share`` of the vault's notes are written again into the index (as edits do: their
old documents stay deleted in their segments). Meanwhile one thread writes a note into the index
as the watcher does (the write lock, a note replaced, a commit), 20 ms after the last one ended.
Printed per way: the compaction's seconds, the longest hold of the write lock by the compaction
and by the writer, and the writer's latency (asked to committed) p50 / p99 / max. The way "stop"
is beside with a stop asked as the fill's final commit begins: how long after it the compaction
returned, and when the abandoned commit and the side folder's removal ended in their thread.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kwvault import HELP_VAULT, first_notes, keyword_sweep

from sidecar.contracts.wire import memory_agent
from sidecar.index.bm25fill import bm25_doc
from sidecar.index.repair import compact_bm25


class TimedLock:
    """A reentrant lock that records how long each thread held it (outermost acquire to release)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._local = threading.local()
        self.holds: dict[str, float] = {}

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        ok = self._lock.acquire(blocking, timeout)
        if ok:
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                self._local.since = time.perf_counter()
            self._local.depth = depth + 1
        return ok

    def release(self) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            held = time.perf_counter() - self._local.since
            name = threading.current_thread().name
            self.holds[name] = max(self.holds.get(name, 0.0), held)
        self._lock.release()

    def __enter__(self) -> TimedLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class Writer(threading.Thread):
    """Writes one vault note at a time into the index as the watcher does, until stopped."""

    def __init__(self, stores: Any, notes: dict[str, list[Any]]) -> None:
        super().__init__(name="writer")
        self.stores, self.notes = stores, notes
        self.stop = threading.Event()
        self.latencies: list[float] = []

    def run(self) -> None:
        keys = sorted(self.notes)
        rng = random.Random(7)
        while not self.stop.wait(0.02):
            key = rng.choice(keys)
            asked = time.perf_counter()
            with self.stores.write_lock:
                bm25 = self.stores.bm25  # the index swapped in, once it is
                bm25.replace_note(key, self.notes[key])
                bm25.commit()
            self.latencies.append(time.perf_counter() - asked)


def churn(stores: Any, notes: dict[str, list[Any]], share: float) -> None:
    """``share`` of the notes written again: their old documents deleted in their segments."""
    keys = sorted(notes)
    random.Random(1).shuffle(keys)
    with stores.write_lock:
        for key in keys[: int(len(keys) * share)]:
            stores.bm25.replace_note(key, notes[key])
        stores.bm25.commit()


def in_place(stores: Any) -> None:
    """The rewrite in the index's own writers, the write lock held throughout."""
    with stores.write_lock:
        docs = (bm25_doc(v) for v in stores.manifest.all_chunks() if memory_agent(v.key) is None)
        assert stores.bm25.compact_shared(docs)


def beside(stores: Any) -> None:
    assert compact_bm25(stores)


def stopped(stores: Any) -> None:
    """Beside, a stop asked as the fill's final commit begins (the longest step): printed, how
    long after the stop the compaction returned (the daemon's stop waits for it, 10 s at most)."""
    from sidecar.stores.bm25 import Bm25Index

    old, stop = stores.bm25, threading.Event()
    real = Bm25Index.commit
    asked: list[float] = []

    def commit(self: Any) -> None:
        if self is not old and not asked:
            asked.append(time.perf_counter())
            stop.set()
        real(self)

    Bm25Index.commit = commit  # type: ignore[method-assign]
    try:
        assert not compact_bm25(stores, stop)
    finally:
        Bm25Index.commit = real  # type: ignore[method-assign]
    back = time.perf_counter() - asked[0]
    print(f"stop asked at the fill's commit: returned {back:.2f} s later", flush=True)
    while not stores.beside_lock.acquire(timeout=1):  # the abandoned commit ends in its thread
        pass
    stores.beside_lock.release()
    ended = time.perf_counter() - asked[0]
    print(f"the abandoned step and the side folder's removal ended {ended:.2f} s after it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vault", type=Path, default=HELP_VAULT)
    ap.add_argument("--notes", type=int, default=0, help="only the first N notes (path order)")
    ap.add_argument("--share", type=float, default=0.3)
    ap.add_argument("--ways", default="in place,beside", help="which ways, comma-separated")
    args = ap.parse_args()
    work = home = Path(tempfile.mkdtemp(prefix="kwcompact-"))
    try:
        run(args, home)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, home: Path) -> None:
    vault = first_notes(args.vault, args.notes, home / "vault")
    if args.notes:
        home = home / "home"
    stores = keyword_sweep(home, vault).stores
    notes: dict[str, list[Any]] = {}
    for v in stores.manifest.all_chunks():
        if memory_agent(v.key) is None:
            notes.setdefault(v.key, []).append(bm25_doc(v))
    ways = {"in place": in_place, "beside": beside, "stop": stopped}
    for name in args.ways.split(","):
        way = ways[name.strip()]
        churn(stores, notes, args.share)
        deleted, total = stores.bm25.deleted_docs()
        lock = stores.write_lock = TimedLock()  # type: ignore[assignment]
        writer = Writer(stores, notes)
        writer.start()
        time.sleep(0.5)  # the writer under way
        began = time.perf_counter()
        way(stores)
        seconds = time.perf_counter() - began
        time.sleep(0.5)
        writer.stop.set()
        writer.join()
        lat = sorted(writer.latencies)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(
            f"{name:<9} docs {total - deleted:,} live + {deleted:,} deleted  compaction {seconds:6.2f} s  "
            f"longest lock hold: compaction {lock.holds.get('MainThread', 0.0):6.3f} s, writer "
            f"{lock.holds.get('writer', 0.0):6.3f} s  "
            f"writer latency p50 {statistics.median(lat) * 1e3:6.1f} ms p99 {p99 * 1e3:7.1f} ms "
            f"max {lat[-1] * 1e3:7.1f} ms ({len(lat)} writes)",
            flush=True,
        )
    stores.close()


if __name__ == "__main__":
    main()
