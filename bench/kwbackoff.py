"""Offline: what a busy vault pays for its keyword compaction's hourly runs, with and without the
back-off after a give-way (``repair.BACKOFF_MAX_RUNS``; 0 is the behaviour before it: every run
that finds the rewrite due fills a whole copy).

    python bench/kwbackoff.py [--vault DIR] [--notes N] [--runs 8] [--swap 20] [--batch 20]

DIR: the eval corpora's Obsidian help vault unless given. Its first ``--notes`` notes (path order)
are swept keyword-only into a temporary home (nothing is written to the vault), 40 % of them
written again (a fifth of the index deleted: the compaction due). Then, per way, one thread writes
``--batch`` notes into the index per commit, 20 ms after the last (a vault that stays busy: a
sync, a checkout), while the schedule's run (``compact_bm25``) is called ``--runs`` times one
after the other, each taken for an hourly one (before each, 40 % of the notes written again if
Tantivy's merges left the index no longer due: an hour of that vault's edits). ``--swap`` stands
for ``beside.SWAP_NOTES`` (500): the notes a swap writes under the lock, scaled to this small
vault and this writer, so that each run falls behind as a large vault's does under a sync. Printed
per way: whole fills begun, give-ways, skips, the seconds spent in the runs, and the writer's
latency p50 / p99.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kwcompact import Writer, churn
from kwvault import HELP_VAULT, first_notes, keyword_sweep

from sidecar.contracts.wire import memory_agent
from sidecar.index import beside, repair
from sidecar.index.bm25fill import bm25_doc


class BatchWriter(Writer):
    """Writes ``batch`` vault notes at a time into the index, as a sweep's batch does (a sync, a
    checkout), 20 ms after its last batch ended, until stopped."""

    def __init__(self, stores: Any, notes: dict[str, list[Any]], batch: int) -> None:
        super().__init__(stores, notes)
        self.batch = batch

    def run(self) -> None:
        keys = sorted(self.notes)
        rng = random.Random(7)
        while not self.stop.wait(0.02):
            asked = time.perf_counter()
            with self.stores.write_lock:
                bm25 = self.stores.bm25  # the index swapped in, once it is
                for key in rng.sample(keys, self.batch):
                    bm25.replace_note(key, self.notes[key])
                bm25.commit()
            self.latencies.append(time.perf_counter() - asked)


def _runs(stores: Any, notes: dict[str, list[Any]], args: argparse.Namespace, backoff: int) -> str:
    runs = args.runs
    repair.BACKOFF_MAX_RUNS = backoff
    stores.keyword_backoff = None
    fills: list[int] = []
    real_fill = beside.fill_bm25

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        fills.append(1)
        real_fill(index, manifest, stop, progress)

    beside.fill_bm25 = fill  # type: ignore[assignment]
    outcomes: list[str] = []
    writer = BatchWriter(stores, notes, args.batch)
    writer.start()
    time.sleep(0.5)
    began = time.perf_counter()
    try:
        for _ in range(runs):
            if not repair.compaction_due(*stores.bm25.deleted_docs()):
                churn(stores, notes, 0.4)  # an hour of a busy vault's edits (its merges dropped them)
            before = stores.keyword_compaction_last
            repair.compact_bm25(stores)
            while not stores.beside_lock.acquire(timeout=1):  # a given-up refill's step ends
                pass
            stores.beside_lock.release()
            last = stores.keyword_compaction_last
            outcomes.append(last[0] if last is not None and last is not before else "not due")
    finally:
        seconds = time.perf_counter() - began
        writer.stop.set()
        writer.join()
        beside.fill_bm25 = real_fill  # type: ignore[assignment]
    lat = sorted(writer.latencies)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    name = "every run (before)" if backoff == 0 else f"back-off up to {backoff} runs"
    return (
        f"{name:<24} runs {runs}: fills {len(fills)}, gave way {outcomes.count('gave way')}, skipped "
        f"{outcomes.count('skipped')}, compacted {outcomes.count('compacted')}, not due "
        f"{outcomes.count('not due')}; "
        f"{seconds:6.1f} s in the runs; "
        f"writer p50 {statistics.median(lat) * 1e3:.1f} ms p99 {p99 * 1e3:.1f} ms ({len(lat)} batches)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vault", type=Path, default=HELP_VAULT)
    ap.add_argument("--notes", type=int, default=600, help="only the first N notes (path order)")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--swap", type=int, default=20, help="beside.SWAP_NOTES for this small vault")
    ap.add_argument("--batch", type=int, default=20, help="notes the busy writer writes per commit")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kwbackoff-"))
    try:
        vault = first_notes(args.vault, args.notes, work / "vault")
        stores = keyword_sweep(work / "home", vault).stores
        notes: dict[str, list[Any]] = {}
        for v in stores.manifest.all_chunks():
            if memory_agent(v.key) is None:
                notes.setdefault(v.key, []).append(bm25_doc(v))
        beside.SWAP_NOTES = args.swap
        churn(stores, notes, 0.4)
        deleted, total = stores.bm25.deleted_docs()
        print(f"index: {total - deleted:,} live + {deleted:,} deleted documents", flush=True)
        for backoff in (0, repair.BACKOFF_MAX_RUNS):
            print(_runs(stores, notes, args, backoff), flush=True)
        stores.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
