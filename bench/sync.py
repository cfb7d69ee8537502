"""Sync benchmark: save-to-searchable latency (events and polling mode), idle CPU of a watching
daemon, and query latency while single-note updates stream in (with and without compaction).

    python bench/sync.py latency --vault ../shared/eval/vaults/obsidian-help/en --out bench/out/lat.json
    python bench/sync.py idle --vault ../shared/eval/vaults/obsidian-help --seconds 600 --out idle.json
    python bench/sync.py stream --vault ../shared/eval/vaults/obsidian-help/en --updates 500 --out ...

The vault is copied to a temporary folder first: the benchmark edits notes, the corpus stays untouched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import bench_daemon, cpu_seconds, emit, pct

from tests.daemon_process import DaemonProcess


def copy_vault(src: Path, work: Path) -> Path:
    dst = work / "vault"
    shutil.copytree(src, dst)
    return dst


def save(path: Path, text: str) -> None:
    """How editors save: write a temp file, then rename it over the note."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def edit_latencies(d: DaemonProcess, vault: Path, edits: int, tag: str) -> list[float]:
    notes = sorted(vault.rglob("*.md"))[:edits]
    out = []
    for i, note in enumerate(notes):
        word = f"quokka{tag}{i}x"
        original = note.read_text(encoding="utf-8")
        t0 = time.perf_counter()
        save(
            note, original + f"\n\nThe {word} paragraph was added to test how fast edits become searchable.\n"
        )
        while True:
            # The unique word alone: with more words the vector arm favours pages about "paragraphs"
            # (a ranking matter for issue 3), and this measures freshness, not ranking.
            hits = d.call("search", {"query": word, "limit": 5})["hits"]
            if any(word in h["text"] for h in hits):
                break
            if time.perf_counter() - t0 > 300:
                raise TimeoutError(word)
            time.sleep(0.02)
        out.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.5)
    return out


def cmd_latency(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sidecar-sync-"))
    vault = copy_vault(args.vault, work)
    d = bench_daemon(vault, work / "home")
    d.wait_ready(timeout=7200, poll=0.2)
    events = edit_latencies(d, vault, args.edits, "e")
    d.stop()
    table = work / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - cifs //nas/v rw\n")
    # A share edited from another machine delivers no events: turn them off to measure polling.
    env = {
        "SIDECAR_WATCH_MOUNT_TABLE": str(table),
        "SIDECAR_WATCH_POLL_SECONDS": str(args.poll),
        "SIDECAR_WATCH_EVENTS": "false",
    }
    d = bench_daemon(vault, work / "home", env)
    d.wait_ready(timeout=7200, poll=0.2)
    polling = edit_latencies(d, vault, max(3, args.edits // 4), "p")
    d.stop()
    shutil.rmtree(work)
    return {
        "events_ms_p50": pct(events, 0.5),
        "events_ms_p95": pct(events, 0.95),
        "edits": len(events),
        "polling_interval_s": args.poll,
        "polling_ms_p50": pct(polling, 0.5),
        "polling_ms_p95": pct(polling, 0.95),
        "polling_edits": len(polling),
    }


def cmd_idle(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sidecar-idle-"))
    home = work / "home"
    if args.home:
        shutil.copytree(args.home, home)
    out: dict[str, Any] = {"seconds": args.seconds}
    for mode in ("events", "polling"):
        env = {}
        if mode == "polling":
            table = work / "mountinfo"
            table.write_text(
                "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                f"40 22 0:35 / {args.vault.resolve()} rw - cifs //nas/v rw\n"
            )
            env = {"SIDECAR_WATCH_MOUNT_TABLE": str(table)}
        d = bench_daemon(args.vault.resolve(), home, env)
        d.wait_ready(timeout=7200, poll=0.2)
        time.sleep(5)
        c0, t0 = cpu_seconds(d.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, t1 = cpu_seconds(d.pid), time.monotonic()
        out[f"{mode}_cpu_percent_of_one_core"] = round(100 * (c1 - c0) / (t1 - t0), 2)
        out[f"{mode}_files"] = d.call("health")["index"]["files"]
        d.stop()
    shutil.rmtree(work)
    return out


def cmd_stream(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sidecar-stream-"))
    vault = copy_vault(args.vault, work)
    out: dict[str, Any] = {"updates": args.updates}
    for label, env in (
        ("with_optimize", {}),
        ("without_optimize", {"SIDECAR_INDEX_OPTIMIZE_EVERY_WRITES": "0"}),
    ):
        home = work / f"home-{label}"
        d = bench_daemon(vault, home, env)
        d.wait_ready(timeout=7200, poll=0.2)
        lat: list[float] = []
        stop = threading.Event()

        def query(d: DaemonProcess = d, stop: threading.Event = stop, lat: list[float] = lat) -> None:
            queries = ["record audio", "sync settings", "canvas cards", "graph view", "daily notes"]
            i = 0
            while not stop.is_set():
                t = time.perf_counter()
                d.call("search", {"query": queries[i % len(queries)]})
                lat.append((time.perf_counter() - t) * 1000)
                i += 1
                time.sleep(0.05)

        t = threading.Thread(target=query)
        t.start()
        notes = sorted(vault.rglob("*.md"))
        first = len(lat)
        for i in range(args.updates):
            note = notes[i % len(notes)]
            save(note, note.read_text(encoding="utf-8") + f"\n\nupdate {label} {i}\n")
            time.sleep(args.interval)
        while d.call("health")["index"]["pending_vectors"]:
            time.sleep(0.5)
        stop.set()
        t.join()
        during = lat[first:]
        files = sum(1 for p in (home / "index" / "vectors").rglob("*") if p.is_file())
        out[label] = {
            "query_ms_p50": pct(during, 0.5),
            "query_ms_p95": pct(during, 0.95),
            "queries": len(during),
            "vector_files_after": files,
        }
        d.stop()
    shutil.rmtree(work)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("latency")
    p.add_argument("--vault", type=Path, required=True)
    p.add_argument("--edits", type=int, default=20)
    p.add_argument("--poll", type=float, default=10.0)
    p = sub.add_parser("idle")
    p.add_argument("--vault", type=Path, required=True)
    p.add_argument("--home", type=Path, default=None, help="an already built home to copy (skips indexing)")
    p.add_argument("--seconds", type=int, default=600)
    p = sub.add_parser("stream")
    p.add_argument("--vault", type=Path, required=True)
    p.add_argument("--updates", type=int, default=500)
    p.add_argument("--interval", type=float, default=0.1)
    for p in sub.choices.values():
        p.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result = {"latency": cmd_latency, "idle": cmd_idle, "stream": cmd_stream}[args.cmd](args)
    emit(result, args.out)


if __name__ == "__main__":
    main()
