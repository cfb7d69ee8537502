"""Memory rewrites through the socket with vectors, old code against new, writes interleaved
(A B A B ...) so both see the same machine load: what keeping the vector table's centre costs a
write. Each daemon indexes the same vault (``--notes`` notes, more rows than a centre needs),
answers one search (the centre is taken then), then rewrites one memory note ``--rewrites``
times (each rewrite deletes the note's rows and adds the new ones, synchronously). Reported: the
write latency and how often the centre's record (``sidecar-centre.json``) was written.

    python bench/centrewrite.py --old-code DIR --out bench/out/centrewrite.json

``--old-code`` is a checkout of the code to compare with (``git archive`` of an older commit).
The model is MiniLM (the faster built-in one): the cost looked at is the table's, not the model's.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path
from typing import Any

from common import WriteSide, emit, interleaved, old_and_new, pct

WORDS = ["garden", "boat", "engine", "bread", "backup", "kayak", "paddle", "tomato", "heat", "pump"]


class Side(WriteSide):
    def __init__(self, name: str, home: Path, vault: Path, code: Path) -> None:
        super().__init__(name, home, vault, code, "embedder: {model: all-MiniLM-L6-v2}\n")
        self.times: list[float] = []
        self.records: set[tuple[int, int]] = set()  # (inode, mtime) of each record seen

    def ready(self) -> None:
        self.daemon.wait_for(
            lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=1800
        )
        self.connect().call("search", {"query": "kayak paddle", "limit": 5})  # the centre is taken

    def record(self) -> None:
        """Note the record as it is now: a new inode or time is a write (atomic: a rename)."""
        for path in (self.daemon.home / "index").rglob("sidecar-centre.json"):
            st = path.stat()
            self.records.add((st.st_ino, st.st_mtime_ns))

    def rewrite(self, i: int) -> None:
        body = " ".join(random.Random(i).choice(WORDS) for _ in range(60))
        self.times.append(self.timed_write("loop", f"{body} round {i}"))
        self.record()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--notes", type=int, default=300)
    ap.add_argument("--rewrites", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault = base / "vault"
        rng = random.Random(3)
        for n in range(args.notes):
            (vault / f"f{n % 7}").mkdir(parents=True, exist_ok=True)
            text = " ".join(rng.choice(WORDS) for _ in range(40))
            (vault / f"f{n % 7}" / f"note-{n}.md").write_text(f"# Note {n}\n\n{text}\n")
        with old_and_new(Side, base, vault, args.old_code) as sides:
            for s in sides:
                s.ready()
                s.record()
            for i, s in interleaved(sides, args.rewrites):
                s.rewrite(i)
    result: dict[str, Any] = {
        s.name: {
            "rewrite": {"p50_ms": pct(s.times, 0.5), "p95_ms": pct(s.times, 0.95), "n": len(s.times)},
            "centre_records_written": len(s.records) - 1,
        }
        for s in sides
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
