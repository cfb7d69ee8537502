"""Memory write latency through the socket, old code against new, writes interleaved (A B A B ...)
so both see the same machine load. Keyword-only daemons (the model's time would hide what the
inbox's own bookkeeping costs): ``--notes`` new notes, then ``--rewrites`` replacements of one
note (each keeps its old text in .trash).

    python bench/memwrite.py --old-code DIR --out bench/out/memwrite.json

``--old-code`` is a checkout of the code to compare with (a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from common import WriteSide, emit, interleaved, old_and_new, pct


class Side(WriteSide):
    def __init__(self, name: str, home: Path, vault: Path, code: Path) -> None:
        super().__init__(name, home, vault, code, "embedder: {enabled: false}\n")
        self.times: dict[str, list[float]] = {"create": [], "rewrite": []}

    def ready(self) -> None:
        self.daemon.wait_ready(timeout=600, poll=0.1)
        self.connect()

    def write(self, kind: str, slug: str, content: str) -> None:
        self.times[kind].append(self.timed_write(slug, content))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--notes", type=int, default=300)
    ap.add_argument("--rewrites", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault = base / "vault"
        vault.mkdir()
        (vault / "Note.md").write_text("# Note\n\nA vault note.\n")
        with old_and_new(Side, base, vault, args.old_code) as sides:
            for s in sides:
                s.ready()
            body = "A note an agent keeps, about the boat and the garden. " * 20
            for i, s in interleaved(sides, args.notes):
                s.write("create", f"note-{i}", f"{body} {i}")
            for i, s in interleaved(sides, args.rewrites):
                s.write("rewrite", "loop", f"{body} round {i}")
    result: dict[str, Any] = {
        s.name: {
            kind: {"p50_ms": pct(v, 0.5), "p95_ms": pct(v, 0.95), "n": len(v)} for kind, v in s.times.items()
        }
        for s in sides
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
