"""Offline: how long the keyword arm answers nothing, and how long a memory write waits, while the
keyword index is brought to a new layout at the first start after an upgrade.

    python bench/kwupgrade.py HOME [HOME ...] [--word WORD]

HOME is the ``home`` folder of an ``eval.py --work`` folder; its manifest is copied into a
temporary folder (the kept index is not touched), a keyword index of layout 2 is filled from it,
then brought to this version's layout two ways:

- ``in place``: what versions before the thirty-third session did at the first start: the old
  index removed, an empty one opened (it serves), filled from the manifest under the write lock;
- ``beside``: ``index.upgrade``: filled in a side folder while the old index answers, the notes
  written meanwhile written again, then swapped in by rename.

Meanwhile one thread searches ``WORD`` (a word of the first chunk unless given) without a pause
and one takes the write lock as a memory write does, every 20 ms. Printed per way: the refill's
seconds, the longest stretch in which searches found nothing or failed, and the longest wait of a
write for the lock.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from sidecar.contracts.errors import StoreError
from sidecar.index.repair import fill_bm25, rebuild_bm25
from sidecar.index.upgrade import upgrade_bm25
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25 import Bm25Index, open_bm25
from sidecar.stores.manifest import Manifest


class Watch:
    """The searching and the writing thread, and what they saw."""

    def __init__(self, stores: Stores, word: str) -> None:
        self.stores, self.word = stores, word
        self.stop = threading.Event()
        self.gap = 0.0  # the longest stretch of searches that found nothing
        self.write_wait = 0.0  # the longest wait for the write lock
        self.searches = 0
        self.threads = [threading.Thread(target=self._search), threading.Thread(target=self._write)]

    def __enter__(self) -> Watch:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def _search(self) -> None:
        empty_since: float | None = None
        while not self.stop.is_set():
            try:
                found = bool(self.stores.bm25.search(self.word, 10))
            except StoreError:
                found = False
            now = time.monotonic()
            self.searches += 1
            if found:
                empty_since = None
            elif empty_since is None:
                empty_since = now
            if empty_since is not None:
                self.gap = max(self.gap, now - empty_since)

    def _write(self) -> None:
        while not self.stop.wait(0.02):
            asked = time.monotonic()
            with self.stores.write_lock:
                self.write_wait = max(self.write_wait, time.monotonic() - asked)


def layout_2(index_dir: Path, manifest: Manifest) -> None:
    """A keyword index of layout 2 in ``index_dir/bm25``, filled from ``manifest``."""
    shutil.rmtree(index_dir / "bm25", ignore_errors=True)
    old = Bm25Index(index_dir / "bm25", layout=2)
    fill_bm25(old, manifest)
    old.close()


def in_place(stores: Stores, index_dir: Path) -> None:
    """The old way: removed, opened empty (it serves), refilled under the write lock."""
    old = stores.bm25
    old.close()
    shutil.rmtree(index_dir / "bm25")
    stores.bm25 = Bm25Index(index_dir / "bm25")
    rebuild_bm25(stores)


def beside(stores: Stores, index_dir: Path) -> None:
    assert upgrade_bm25(stores)


def measure(home: Path, word: str | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="kwupgrade-"))
    try:
        index_dir = work / "index"
        index_dir.mkdir()
        shutil.copy2(home / "index" / "manifest.sqlite", index_dir / "manifest.sqlite")
        manifest = Manifest(index_dir / "manifest.sqlite")
        chunks = manifest.indexed_chunk_count()
        if word is None:
            first = next(iter(manifest.all_chunks()))
            word = next(w for w in re.findall(r"[^\W\d_]{5,}", first.text))
        for name, way in (("in place", in_place), ("beside", beside)):
            layout_2(index_dir, manifest)
            stores = Stores(manifest, open_bm25(index_dir / "bm25"))
            assert stores.bm25.layout == 2
            assert stores.bm25.search(word, 10), f"{word!r} finds nothing: give another --word"
            started = time.monotonic()
            with Watch(stores, word) as watch:
                way(stores, index_dir)
                seconds = time.monotonic() - started
            stores.bm25.close()
            print(
                f"{home.parent.name:<10} {chunks:>7,} chunks  {name:<9} refill {seconds:6.2f} s  "
                f"searches found nothing for {watch.gap:6.2f} s  (of {watch.searches:,})  "
                f"longest write wait {watch.write_wait:6.2f} s",
                flush=True,
            )
        manifest.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("home", type=Path, nargs="+")
    ap.add_argument("--word")
    args = ap.parse_args()
    for home in args.home:
        measure(home, args.word)


if __name__ == "__main__":
    main()
