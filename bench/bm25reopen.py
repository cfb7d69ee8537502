"""Does the keyword index's native memory stay flat over many commits? A real ``Bm25Index``
(chunks and pages) takes ``--commits`` one-note replacements, each committed, as a note written
to every second makes; glibc's in-use bytes and the segment-file paths found in the heap are
read before and after. ``--reopen-every 0`` keeps each Tantivy index open for good (what the
daemon did before it opened them anew every ``REOPEN_EVERY`` commits).

    python bench/bm25reopen.py --commits 3000
    python bench/bm25reopen.py --commits 3000 --reopen-every 0
"""

from __future__ import annotations

import argparse
import ctypes
import random
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import emit  # noqa: E402

from sidecar.stores import bm25_folder  # noqa: E402
from sidecar.stores.bm25 import Bm25Doc, Bm25Index  # noqa: E402

WORDS = [
    "garden",
    "boat",
    "engine",
    "bread",
    "backup",
    "restic",
    "kayak",
    "paddle",
    "tomato",
    "propeller",
    "sourdough",
    "compost",
]


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _in_use_mb() -> float:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc_trim(0)
    info = libc.mallinfo2()
    return round((info.uordblks + info.hblkhd) / 2**20, 1)


def _paths_in_heap(folder: Path) -> int:
    """Distinct segment-file paths of ``folder`` in this process's heap (Tantivy's directory)."""
    pattern = re.compile(re.escape(str(folder).encode()) + rb"/(?:chunks|pages)/[0-9a-f]{32}\.[0-9a-z.]+")
    found: set[bytes] = set()
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in Path("/proc/self/maps").read_text().splitlines():
            fields = line.split()
            if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                found.update(pattern.findall(mem.read(end - start)))
            except OSError:
                continue
    return len(found)


def _doc(i: int, body: str) -> Bm25Doc:
    return Bm25Doc.of(f"c{i}", f"vault/N{i}", "vault", "", title=f"N{i}", aliases=(), headings=(), body=body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--reopen-every", type=int, default=bm25_folder.REOPEN_EVERY, help="0: never")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    bm25_folder.REOPEN_EVERY = args.reopen_every or 10**12
    folder = Path(tempfile.mkdtemp(prefix="sidecar-bm25reopen-")) / "bm25"
    idx = Bm25Index(folder)
    rng = random.Random(7)
    idx.add([_doc(i, " ".join(rng.choice(WORDS) for _ in range(60))) for i in range(2000)])
    idx.commit()
    before: dict[str, Any] = {"in_use_mb": _in_use_mb(), "paths_in_heap": _paths_in_heap(folder)}
    for step in range(args.commits):
        i = rng.randrange(2000)
        idx.replace_note(
            f"vault/N{i}", [_doc(i, " ".join(rng.choice(WORDS) for _ in range(60)) + f" u{step}")]
        )
        idx.commit()
        idx.search(rng.choice(WORDS), 10)
    after = {"in_use_mb": _in_use_mb(), "paths_in_heap": _paths_in_heap(folder)}
    idx.close()
    emit(
        {
            "commits": args.commits,
            "reopen_every": args.reopen_every,
            "before": before,
            "after": after,
            "growth_mb": round(after["in_use_mb"] - before["in_use_mb"], 1),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
