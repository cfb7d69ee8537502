"""Core benchmark: cold index (scan+parse / BM25 / embedding), unchanged re-sweep, socket search
latency and daemon RSS, on a real vault. Figures go to BENCHMARKS.md.

    python bench/core.py --vault ../shared/eval/vaults/obsidian-help/en --out bench/out/en.json
    python bench/core.py --vault ../shared/eval/vaults/obsidian-help --out bench/out/all.json
    python bench/core.py --vault .../en --vault .../de --cold-only keyword   (a first start, until BM25)

Runs in-process for the index phases (timers wrap the indexer's own steps), then starts a real
daemon on the built home and measures search latency through the socket.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from common import bench_daemon, combined_vault, emit, pct, rss_mb, startup_times

from sidecar.clients.client import Client
from sidecar.config import load_config
from sidecar.daemon.compose import build
from sidecar.daemon.process import load_embedder
from sidecar.index import indexer as indexer_mod
from sidecar.model.embedder import EmbedderSlot
from sidecar.stores.lifecycle import open_vectors
from tests.daemon_process import DaemonProcess

QUERIES = [
    "record a lecture with my microphone",
    "how do I sync my notes between phone and computer",
    "link to a heading in another note",
    "change the font size of the editor",
    "publish my notes as a website",
    "keyboard shortcut for the command palette",
    "embed an image in a note",
    "create a new vault",
    "canvas cards and connections",
    "search for notes with a tag",
    "daily notes template",
    "undo a change with file recovery",
    "callout block syntax",
    "graph view filters",
    "properties and front matter",
    "install a community plugin",
    "web clipper templates",
    "bookmark a search",
    "encryption of synced data",
    "move files to another folder",
]


class Timer:
    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Any) -> Any:
        def inner(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0

        return inner


def index_phases(vault: Path, home: Path) -> dict[str, Any]:
    cfg = load_config(flags={"home": str(home), "vault.path": str(vault)}, env={})
    slot = EmbedderSlot()
    parts = build(cfg, slot)
    stores, indexer = parts.stores, parts.indexer
    t0 = time.perf_counter()
    load_embedder(cfg, slot)
    load_s = time.perf_counter() - t0
    model = slot.model
    assert model is not None
    prepare, write = Timer(), Timer()
    # A note is read and parsed (``draft``), then cut (``finish``): both are "scan + parse".
    unwrapped = indexer_mod.draft, indexer_mod.finish
    indexer_mod.draft = prepare.wrap(unwrapped[0])  # type: ignore[assignment]
    indexer_mod.finish = prepare.wrap(unwrapped[1])  # type: ignore[assignment]
    indexer.writer.write = write.wrap(indexer.writer.write)  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        summary = indexer.sweep()
    finally:
        indexer_mod.draft, indexer_mod.finish = unwrapped
    sweep_s = time.perf_counter() - t0
    chunks = stores.manifest.chunk_count()
    tokens = sum(r[0] for r in stores.manifest._query("SELECT tokens FROM chunks"))
    # Embedding phase: pure inference time versus LanceDB writes.
    embed = Timer()
    model.embed_passages = embed.wrap(model.embed_passages)  # type: ignore[method-assign]
    parts.vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)
    t0 = time.perf_counter()
    while parts.vectors.embed_pending(batch=256):
        pass
    embed_total = time.perf_counter() - t0
    stores.close()
    # Unchanged re-sweep: a restart over the same files (fresh objects, warm page cache).
    parts2 = build(cfg, slot)
    t0 = time.perf_counter()
    again = parts2.indexer.sweep()
    resweep_s = time.perf_counter() - t0
    parts2.stores.close()
    size = sum(p.stat().st_size for p in cfg.index_dir.rglob("*") if p.is_file())
    return {
        "notes": summary["changed"],
        "chunks": chunks,
        "tokens": tokens,
        "model_load_s": round(load_s, 2),
        "scan_parse_s": round(prepare.seconds, 2),
        "bm25_manifest_write_s": round(write.seconds, 2),
        "sweep_total_s": round(sweep_s, 2),
        "embed_inference_s": round(embed.seconds, 1),
        "embed_total_s": round(embed_total, 1),
        "vector_write_s": round(embed_total - embed.seconds, 2),
        "chunks_per_s": round(chunks / embed.seconds, 1),
        "tokens_per_s": round(tokens / embed.seconds, 0),
        "unchanged_resweep_s": round(resweep_s, 3),
        "unchanged_resweep_changed": again["changed"],
        "index_size_mb": round(size / 1e6, 1),
        "in_process_peak_rss_mb": rss_mb(os.getpid()).get("VmHWM"),
    }


ARM_CONFIGS = {
    "bm25": "search:\n  vectorWeight: 0.0\n  shortQueryBm25Weight: 1.0\n",
    "vector": "search:\n  vectorWeight: 1.0\n  shortQueryBm25Weight: 0.0\n  foreignVectorWeight: 1.0\n",
}


def _latencies(d: DaemonProcess, rounds: int) -> list[float]:
    lat: list[float] = []
    with Client(d.cfg.socket_path) as c:
        for _ in range(rounds):
            for q in QUERIES:
                t = time.perf_counter()
                c.call("search", {"query": q, "limit": 10})
                lat.append((time.perf_counter() - t) * 1000)
    return lat


def serve_latency(vault: Path, home: Path, rounds: int, settle: bool = False) -> dict[str, Any]:
    config = home.parent / f"{home.name}-bench.yaml"
    config.write_text("")
    d = bench_daemon(vault, home, args=["--config", str(config)])
    try:
        ready_s = d.wait_ready(timeout=600, poll=0.05)
        # Large tables get their IVF index right after start: measure with it in place.
        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline:
            h = d.call("health")
            if h["index"]["chunks"] < 20_000 or h["vectors"]["ann_index"]:
                break
            time.sleep(1)
        lat: list[float] = []
        top3 = None
        for q in QUERIES:  # warm-up
            d.call("search", {"query": q})
        with Client(d.cfg.socket_path) as c:
            for _ in range(rounds):
                for q in QUERIES:
                    t = time.perf_counter()
                    hits = c.call("search", {"query": q, "limit": 10})["hits"]
                    lat.append((time.perf_counter() - t) * 1000)
                    if q == QUERIES[0] and top3 is None:
                        top3 = [h["reference"] for h in hits[:3]]
        arms = {}
        for arm, text in ARM_CONFIGS.items():  # one arm alone: the other gets weight 0 (still computed)
            config.write_text(text)
            d.call("reload")
            arm_lat = _latencies(d, rounds)
            arms[f"{arm}_weighted_p50_ms"], arms[f"{arm}_weighted_p95_ms"] = (
                pct(arm_lat, 0.5),
                pct(arm_lat, 0.95),
            )
        config.write_text("")
        rss = rss_mb(d.pid)
        if settle:  # the daemon hands freed pages back once a minute (heap.trim)
            time.sleep(61)
        return {
            "daemon_rss_after_settle_mb": rss_mb(d.pid) if settle else None,
            "restart_ready_s": round(ready_s, 2),
            "search_p50_ms": pct(lat, 0.5),
            "search_p95_ms": pct(lat, 0.95),
            **arms,
            "searches": len(lat),
            "daemon_rss_mb": rss,
            "audio_recorder_top3": top3,
        }
    finally:
        d.stop()


def cold_daemon(vault: Path, keyword_only: bool = False) -> dict[str, Any]:
    """A daemon indexing from scratch (a first start: the model is converted too): time to
    keyword-searchable, to ready, and its peak RSS; ``keyword_only`` stops at keyword-searchable."""
    d = bench_daemon(vault, Path(tempfile.mkdtemp(prefix="sidecar-cold-")) / "home")
    try:
        keyword_s, ready_s = startup_times(d, ready=not keyword_only)
        if ready_s is None:
            return {"cold_daemon_keyword_searchable_s": round(keyword_s, 2)}
        return {
            "cold_daemon_keyword_searchable_s": round(keyword_s, 2),
            "cold_daemon_ready_s": round(ready_s, 1),
            "cold_daemon_rss_mb": rss_mb(d.pid),
        }
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", required=True, type=Path, action="append", help="repeat to combine vaults")
    ap.add_argument("--home", type=Path, default=None, help="default: a fresh temporary folder")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cold-daemon", action="store_true", help="also index from scratch inside a daemon")
    ap.add_argument("--settle", action="store_true", help="also RSS a minute after the searches")
    ap.add_argument(
        "--cold-only",
        choices=("keyword", "ready"),
        help="only the cold daemon: until keyword-searchable, or until ready",
    )
    ap.add_argument(
        "--serve-only", action="store_true", help="only the socket latency on an already built --home"
    )
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="sidecar-bench-"))
    result: dict[str, Any] = {
        "vault": [str(v) for v in args.vault],
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    vault = combined_vault(args.vault)
    if args.cold_only:
        result.update(cold_daemon(vault, keyword_only=args.cold_only == "keyword"))
        emit(result, args.out)
        return
    if not args.serve_only:
        result.update(index_phases(vault, home))
    result.update(serve_latency(vault, home, args.rounds, args.settle))
    if args.cold_daemon:
        result.update(cold_daemon(vault))
    emit(result, args.out)


if __name__ == "__main__":
    main()
