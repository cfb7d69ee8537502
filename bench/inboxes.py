"""What the agents' own keyword indexes cost: a real ``Bm25Index`` holding a vault (the help
vault's ``en/`` and ``de/`` paragraphs) and ``--agents`` inboxes (the German Rust book's
paragraphs, spread over them). Times the keyword arm's search for the vault alone and for the
vault with one agent's memory (every inbox's query is reweighted to the vault's statistics:
``stores.bm25_scoring.Scorer``), for chunks and pages, and reads the process's resident memory and
threads after opening the index anew (an inbox's writer is held only while it is written).
Each query is three words drawn from the memory notes (seeded), so each search meets both.

    python bench/inboxes.py --agents 20
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import emit  # noqa: E402

from sidecar.stores.bm25 import Bm25Doc, Bm25Index  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval" / "vaults"


def _paragraphs(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [p for p in text.split("\n\n") if len(p) > 80]


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _timed(queries: list[str], run: Callable[[str], Any]) -> dict[str, float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        run(q)
        out.append((time.perf_counter() - start) * 1000)
    out.sort()
    return {"p50_ms": round(statistics.median(out), 3), "p95_ms": round(out[int(len(out) * 0.95)], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    path = Path(tempfile.mkdtemp(prefix="inboxes-")) / "bm25"
    idx = Bm25Index(path)
    vault: list[Bm25Doc] = []
    for lang in ("en", "de"):
        for note in sorted((EVAL / "obsidian-help" / lang).rglob("*.md")):
            key = f"vault/{note.relative_to(EVAL / 'obsidian-help').with_suffix('').as_posix()}"
            for i, body in enumerate(_paragraphs(note)):
                vault.append(
                    Bm25Doc.of(
                        f"{key}#{i}", key, "vault", "", title=note.stem, aliases=(), headings=(), body=body
                    )
                )
    idx.add(vault)
    memory: list[Bm25Doc] = []
    for n, note in enumerate(sorted((EVAL / "rustbook-de").rglob("*.md"))):
        agent = f"agent{n % args.agents}"
        key = f"memory/{agent}/{note.stem.lower()}-{n}"
        for i, body in enumerate(_paragraphs(note)):
            memory.append(
                Bm25Doc.of(
                    f"{key}#{i}", key, "memory", agent, title=note.stem, aliases=(), headings=(), body=body
                )
            )
    idx.add(memory)
    idx.commit()
    idx.close()

    rss, threads = _rss_mb(), _threads()
    idx = Bm25Index(path)
    idx.search("warm", 5)
    opened = {"rss_mb": round(_rss_mb() - rss, 1), "threads": _threads() - threads}

    rng = random.Random(1)
    own = [d for d in memory if d.agent == "agent0"]
    words = [w for d in own for w in d.body.split() if w.isalpha() and len(w) > 4]
    queries = [" ".join(rng.sample(words, 3)) for _ in range(args.queries)]
    for q in queries[:20]:  # statistics read once per commit, as after a daemon's sweep
        idx.search(q, 60, None, "agent0")
        idx.search_pages(q, 60, None, "agent0")
    result: dict[str, Any] = {
        "vault_chunks": len(vault),
        "memory_chunks": len(memory),
        "agents": args.agents,
        "agent0_chunks": len(own),
        "opened": opened,
    }
    for round_ in (1, 2):  # two rounds: the second is the one to read
        result[f"round{round_}"] = {
            "vault_only": _timed(queries, lambda q: idx.search(q, 60, ["vault", "wiki"])),
            "vault_and_own_memory": _timed(queries, lambda q: idx.search(q, 60, None, "agent0")),
            "pages_vault_and_own_memory": _timed(queries, lambda q: idx.search_pages(q, 60, None, "agent0")),
            "all_memory_no_agent": _timed(queries, lambda q: idx.search(q, 60, None, None)),
        }
    idx.close()
    emit(result, args.out)


if __name__ == "__main__":
    main()
