"""Where a memory write's time goes: the same writes through the socket to a daemon with the
default model and to a keyword-only one (``embedder.enabled: false``), interleaved so both see the
same machine load. The difference is what the model costs: a write answers once its note is
searchable by meaning (the duplicate check's vectors are the ones the index keeps).

    python bench/writecost.py --vault ../shared/eval/vaults/obsidian-help/en --out bench/out/writecost.json

Notes are made of words drawn from the vault's pages (each write its own draw, so none is a copy
of another), at three sizes.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import bench_daemon, emit, pct

from sidecar.clients.client import Client

SIZES = {"40 words": 40, "400 words": 400, "1600 words (~10 kB)": 1600}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--vault", type=Path, required=True, help="a folder of notes (the words are drawn from it)"
    )
    ap.add_argument("--writes", type=int, default=10, help="writes per size and daemon")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    pages = sorted(args.vault.rglob("*.md"))
    words = [w for p in pages for w in p.read_text(errors="replace").split() if w.isalpha()]
    rng = random.Random(7)
    times: dict[str, dict[str, list[float]]] = {"model": {}, "keywords only": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault = base / "vault"
        vault.mkdir()
        for p in pages[:40]:  # a small vault: the write, not the index's size, is measured
            shutil.copy(p, vault / p.name)
        off = base / "off.yaml"
        off.write_text("embedder: {enabled: false}\n")
        daemons = {
            "model": bench_daemon(vault, base / "model"),
            "keywords only": bench_daemon(vault, base / "off", args=["--config", str(off)]),
        }
        try:
            for d in daemons.values():
                d.wait_ready(timeout=1800, poll=0.5)
            clients = {name: Client(d.cfg.socket_path, agent="bench") for name, d in daemons.items()}
            for c in clients.values():
                c.__enter__()
            for size, n in SIZES.items():
                for i in range(args.writes):
                    content = " ".join(rng.choice(words) for _ in range(n))
                    for name in list(clients) if i % 2 else list(clients)[::-1]:
                        t0 = time.perf_counter()
                        clients[name].call("write", {"slug": f"w{n}-{i}", "content": content})
                        times[name].setdefault(size, []).append((time.perf_counter() - t0) * 1000)
            for c in clients.values():
                c.close()
        finally:
            for d in daemons.values():
                d.stop()
    result: dict[str, Any] = {
        name: {size: {"p50_ms": pct(v, 0.5), "max_ms": round(max(v), 1)} for size, v in by_size.items()}
        for name, by_size in times.items()
    }
    result["model share of p50"] = {
        size: round(
            1 - result["keywords only"][size]["p50_ms"] / max(result["model"][size]["p50_ms"], 1e-9), 2
        )
        for size in SIZES
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
