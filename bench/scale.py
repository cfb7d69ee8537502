"""Scale benchmark: vaults of 1k, 10k and 50k notes built from the shared corpora, indexed by a real
daemon from a cold start.

    python bench/scale.py --sizes 1000,10000 --out bench/out/scale.json
    python bench/scale.py --sizes 50000 --embed-budget 900 --out bench/out/scale-50k.json

The note pool is real Markdown from ``../shared/eval/vaults``: the Obsidian help vault in seven
Latin-script languages plus its release notes and sandbox, the German tldr pages (many small notes)
and the German Rust book (long chapters). A vault of N notes takes the pool in a fixed shuffled order
and, past the pool's size, copies it again under ``copy-<n>/`` (distinct paths, same text: the
de-duplication of equal chunk texts makes such copies cheap to embed, which the figures say).

For each size: time to keyword-searchable (first sweep done), then embedding until done or until
``--embed-budget`` seconds (then extrapolated from the measured rate, and marked so), restart time
over the unchanged vault, search latency p50/p95 through the socket with 1 and with 16 concurrent
clients, daemon RSS while serving and while indexing (peak), and the index size on disk.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import bench_daemon, emit, keyword_searchable, pct, rss_mb
from core import QUERIES

from sidecar.clients.client import Client
from tests.daemon_process import DaemonProcess

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval" / "vaults"
HELP_LANGUAGES = ("en", "de", "fr", "es", "it", "pt", "nl", "Release notes", "Sandbox")


def pool(root: Path) -> list[tuple[Path, str]]:
    """(file, path inside the vault) of every pool note, in a fixed shuffled order."""
    notes: list[tuple[Path, str]] = []
    for lang in HELP_LANGUAGES:
        base = root / "obsidian-help" / lang
        notes += [(p, f"help/{lang}/{p.relative_to(base)}") for p in sorted(base.rglob("*.md"))]
    for name in ("tldr-pages-de", "rustbook-de"):
        base = root / name
        notes += [(p, f"{name}/{p.relative_to(base)}") for p in sorted(base.rglob("*.md"))]
    random.Random(7).shuffle(notes)
    return notes


def build_vault(target: Path, size: int, notes: list[tuple[Path, str]]) -> None:
    for n in range(size):
        src, rel = notes[n % len(notes)]
        copy = n // len(notes)
        dest = target / (f"copy-{copy}/{rel}" if copy else rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def latencies(d: DaemonProcess, clients: int, rounds: int) -> tuple[list[float], int]:
    """Search latencies (ms) of ``clients`` threads each running the query set ``rounds`` times."""
    lat: list[float] = []
    errors = 0
    lock = threading.Lock()

    def run(offset: int) -> None:
        nonlocal errors
        mine: list[float] = []
        with Client(d.cfg.socket_path, timeout=120) as c:
            for r in range(rounds):
                for i in range(len(QUERIES)):
                    q = QUERIES[(i + offset + r) % len(QUERIES)]
                    t = time.perf_counter()
                    try:
                        c.call("search", {"query": q, "limit": 10})
                    except Exception:  # counted, not fatal: the figure says how many
                        with lock:
                            errors += 1
                    mine.append((time.perf_counter() - t) * 1000)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, errors


def dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def one_size(
    size: int, notes: list[tuple[Path, str]], work: Path, budget: float, rounds: int
) -> dict[str, Any]:
    vault = work / f"vault-{size}"
    home = work / f"home-{size}"
    build_vault(vault, size, notes)
    out: dict[str, Any] = {"notes": size, "vault_mb": dir_mb(vault)}
    d = bench_daemon(vault, home)
    keyword_s = None
    peak_indexing = 0.0
    samples: list[tuple[float, int]] = []
    try:
        while True:
            h = d.health_or_none()
            now = d.seconds()
            if h is not None:
                peak_indexing = max(peak_indexing, rss_mb(d.pid)["VmRSS"])
                idx = h["index"]
                if keyword_s is None and keyword_searchable(h):
                    keyword_s = now
                    out["keyword_searchable_s"] = round(now, 1)
                    out["chunks"] = idx["chunks"]
                    first = time.perf_counter()
                if keyword_s is not None:
                    samples.append((now, idx["pending_vectors"]))
                    if idx["state"] == "ready":
                        out["fully_embedded_s"] = round(now, 1)
                        out["fully_embedded_measured"] = True
                        break
                    if time.perf_counter() - first > budget:
                        break
            time.sleep(0.5)
        h = d.call("health")
        out["embedded_in_run"] = h["vectors"].get("embedded")
        out["vectors_reused"] = h["vectors"].get("reused")
        if "fully_embedded_s" not in out:
            (t0, p0), (t1, p1) = samples[0], samples[-1]
            rate = (p0 - p1) / max(t1 - t0, 1e-9)
            out["embed_rate_chunks_per_s"] = round(rate, 1)
            out["fully_embedded_s"] = round(t1 + p1 / rate, 0) if rate > 0 else None
            out["fully_embedded_measured"] = False  # extrapolated from the measured rate
            out["pending_at_stop"] = p1
        out["peak_rss_indexing_mb"] = round(max(peak_indexing, rss_mb(d.pid)["VmHWM"]), 1)
    finally:
        d.stop()
    # Restart over the unchanged vault.
    d = bench_daemon(vault, home)
    try:
        while True:
            h = d.health_or_none()
            if keyword_searchable(h):
                out["restart_keyword_ready_s"] = round(d.seconds(), 2)
                break
            time.sleep(0.05)
        if out.get("fully_embedded_measured"):
            out["restart_ready_s"] = round(d.wait_ready(timeout=7200, poll=0.05), 2)
        # The IVF index comes with the first idle moment above the threshold: measure with it.
        deadline = time.perf_counter() + 300
        while time.perf_counter() < deadline:
            h = d.call("health")
            if h["index"]["chunks"] < 20_000 or h["vectors"]["ann_index"] or h["index"]["pending_vectors"]:
                break
            time.sleep(1)
        out["ann_index"] = d.call("health")["vectors"]["ann_index"]
        latencies(d, 1, 1)  # warm-up
        one, e1 = latencies(d, 1, rounds)
        many, e16 = latencies(d, 16, max(1, rounds // 2))
        out.update(
            {
                "search_1_client_p50_ms": pct(one, 0.5),
                "search_1_client_p95_ms": pct(one, 0.95),
                "search_16_clients_p50_ms": pct(many, 0.5),
                "search_16_clients_p95_ms": pct(many, 0.95),
                "searches": len(one) + len(many),
                "search_errors": e1 + e16,
                "rss_serving_mb": rss_mb(d.pid),
                "index_mb": dir_mb(home / "index"),
            }
        )
    finally:
        d.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated note counts")
    ap.add_argument(
        "--embed-budget", type=float, default=3600, help="seconds of embedding before extrapolating"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--eval", type=Path, default=EVAL, help="the shared eval vaults folder")
    ap.add_argument("--keep", action="store_true", help="keep the vaults and homes")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    notes = pool(args.eval)
    work = Path(tempfile.mkdtemp(prefix="sidecar-scale-"))
    result: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "pool_notes": len(notes),
        "work": str(work),
        "sizes": [],
    }
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            result["sizes"].append(one_size(size, notes, work, args.embed_budget, args.rounds))
            emit(result, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
