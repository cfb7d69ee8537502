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
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit, pct

from sidecar.clients.client import Client


class Side:
    def __init__(self, name: str, home: Path, vault: Path, code: Path) -> None:
        self.name = name
        config = home.parent / f"{home.name}-memwrite.yaml"
        config.write_text("embedder: {enabled: false}\n")
        self.daemon = code_daemon(home, vault, code, config)
        self.times: dict[str, list[float]] = {"create": [], "rewrite": []}
        self.client: Client | None = None

    def ready(self) -> None:
        self.daemon.wait_ready(timeout=600, poll=0.1)
        self.client = Client(self.daemon.cfg.socket_path, agent="bench")
        self.client.__enter__()

    def write(self, kind: str, slug: str, content: str) -> None:
        assert self.client is not None
        t0 = time.perf_counter()
        self.client.call("write", {"slug": slug, "content": content})
        self.times[kind].append((time.perf_counter() - t0) * 1000)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.daemon.stop()


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
        sides = [
            Side("old", base / "old", vault, args.old_code.resolve()),
            Side("new", base / "new", vault, ROOT),
        ]
        try:
            for s in sides:
                s.ready()
            body = "A note an agent keeps, about the boat and the garden. " * 20
            for i in range(args.notes):
                for s in sides if i % 2 else sides[::-1]:
                    s.write("create", f"note-{i}", f"{body} {i}")
            for i in range(args.rewrites):
                for s in sides if i % 2 else sides[::-1]:
                    s.write("rewrite", "loop", f"{body} round {i}")
        finally:
            for s in sides:
                s.close()
    result: dict[str, Any] = {
        s.name: {
            kind: {"p50_ms": pct(v, 0.5), "p95_ms": pct(v, 0.95), "n": len(v)} for kind, v in s.times.items()
        }
        for s in sides
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
