"""Offline: the memory a refill of the keyword index from the manifest takes (a large vault's
compaction beside, an upgrade's refill), reading the manifest's chunks a page of notes at a time
(``ManifestChunks.all_chunks``) against all at once (as before: one query, every chunk's text in
memory for the whole fill).

    python bench/kwfillmem.py [--vault DIR] [--notes N]

DIR: the eval corpora's Obsidian help vault unless given (its first ``--notes`` notes in path
order, copied, when given). The vault is swept keyword-only into a temporary home (nothing is
written to the vault). Then each way fills a new keyword index from that manifest in a fresh
process (so neither inherits the other's heap): printed, its resident memory before the fill, the
peak during it (sampled every 10 ms from /proc) and the growth, and the fill's seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kwvault import HELP_VAULT, first_notes, keyword_sweep

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def fill_only(home: Path, vault: Path, at_once: bool) -> None:
    """One fill of a new index from the manifest in ``home``, its memory printed."""
    from sidecar.config import load_config
    from sidecar.index.bm25fill import fill_bm25
    from sidecar.stores import manifest_chunks
    from sidecar.stores.bm25 import Bm25Index
    from sidecar.stores.manifest import Manifest

    if at_once:
        manifest_chunks._PAGE_NOTES = 10**12  # one page: the whole manifest in one query
    cfg = load_config(flags={"home": str(home), "vault.path": str(vault)}, env={})
    manifest = Manifest(cfg.index_dir / "manifest.sqlite")
    side = Path(tempfile.mkdtemp(prefix="kwfillmem-"))
    try:
        index = Bm25Index(side / "bm25")
        before = peak = rss_bytes()
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.01):
                peak = max(peak, rss_bytes())

        sampler = threading.Thread(target=sample)
        sampler.start()
        began = time.perf_counter()
        fill_bm25(index, manifest)
        seconds = time.perf_counter() - began
        done.set()
        sampler.join()
        docs = index.num_docs()
        index.close()
        way = "at once" if at_once else "by pages"
        print(
            f"{way:<8} docs {docs:,}  RSS before {before / 2**20:6.0f} MB  peak {peak / 2**20:6.0f} MB  "
            f"growth {(peak - before) / 2**20:6.0f} MB  fill {seconds:6.1f} s",
            flush=True,
        )
    finally:
        manifest.close()
        shutil.rmtree(side, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vault", type=Path, default=HELP_VAULT)
    ap.add_argument("--notes", type=int, default=0, help="only the first N notes (path order)")
    ap.add_argument("--fill-only", nargs=3, metavar=("HOME", "VAULT", "WAY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fill_only:
        home, vault, way = args.fill_only
        fill_only(Path(home), Path(vault), way == "at-once")
        return
    work = Path(tempfile.mkdtemp(prefix="kwfillmem-home-"))
    try:
        vault = first_notes(args.vault, args.notes, work / "vault")
        home = work / "home"
        keyword_sweep(home, vault).stores.close()
        for way in ("at-once", "by-pages"):
            subprocess.run([sys.executable, __file__, "--fill-only", str(home), str(vault), way], check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
