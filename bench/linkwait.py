"""How long a manifest read waits while every link of the vault is resolved again (the end of a
start's first sweep), in process, without a daemon:

    python bench/linkwait.py [--notes 4000] [--links-per-note 5] [--code DIR] [--out FILE]

A manifest in a temporary folder holds ``notes`` notes and ``notes * links-per-note`` links, none
resolved yet; one thread runs ``Writer.resolve_all_links`` while another asks what a search asks
the manifest (the chunks waiting for a vector, the links of the best notes: ``pending_count`` and
``cited_by``) every 20 ms. Prints how long the resolving took and the reads' latencies (median,
max). ``--code``: a checkout to import sidecar from (old code against new: ``git archive OLD | tar
-x -C DIR``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def fill(manifest: Any, notes: int, per_note: int) -> None:
    """Notes in 50 folders, each linking to ``per_note`` others by name (none resolved yet)."""
    from sidecar.notes.links import replace_links  # the checkout chosen in main
    from sidecar.notes.linktext import Link

    keys = [f"vault/f{i % 50}/note {i}" for i in range(notes)]
    with manifest.transaction() as db:
        db.executemany(
            "INSERT INTO files(key, source, agent, rel, mtime_ns, size, hash, state) "
            "VALUES (?, 'vault', '', ?, 0, 0, '', 'indexed')",
            [(key, key.removeprefix("vault/") + ".md") for key in keys],
        )
        for i, key in enumerate(keys):
            targets = [(i * 7 + j * 131) % (notes + notes // 10) for j in range(per_note)]  # a tenth dangle
            replace_links(db, key, [Link(f"note {t}", "", "", False, "wiki", 1) for t in targets])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=4000)
    ap.add_argument("--links-per-note", type=int, default=5)
    ap.add_argument("--code", type=Path, help="a checkout to import sidecar from")
    ap.add_argument("--page", type=int, help="links resolved per transaction (links.PAGE_LINKS)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.code.resolve() if args.code else Path(__file__).resolve().parents[1]))
    from sidecar.index.writes import Writer  # after the path is chosen
    from sidecar.notes import links
    from sidecar.notes.links import cited_by
    from sidecar.stores.manifest import Manifest

    if args.page:
        links.PAGE_LINKS = args.page  # type: ignore[attr-defined]  # older code has none
    with tempfile.TemporaryDirectory(prefix="linkwait-") as tmp:
        manifest = Manifest(Path(tmp) / "manifest.sqlite")
        fill(manifest, args.notes, args.links_per_note)
        stores = SimpleNamespace(manifest=manifest, write_lock=threading.RLock())
        writer = Writer(stores, None, "wiki")  # type: ignore[arg-type]  # links need no vectors
        keys = [f"vault/f{i % 50}/note {i}" for i in range(10)]
        waits: list[float] = []
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                manifest.pending_count()
                cited_by(manifest.read, keys)
                waits.append(time.perf_counter() - t0)
                time.sleep(0.02)

        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(0.2)
        t0 = time.perf_counter()
        writer.resolve_all_links()
        resolve_s = time.perf_counter() - t0
        time.sleep(0.2)
        done.set()
        thread.join()
        link_count = manifest.read("SELECT count(*) FROM links")[0][0]
        manifest.close()
    result = {
        "notes": args.notes,
        "page": getattr(links, "PAGE_LINKS", None),
        "links": link_count,
        "resolve_seconds": round(resolve_s, 2),
        "reads": len(waits),
        "read_ms_median": round(statistics.median(waits) * 1000, 1),
        "read_ms_max": round(max(waits) * 1000, 1),
    }
    print(result)
    if args.out:
        args.out.write_text(repr(result) + "\n")


if __name__ == "__main__":
    main()
