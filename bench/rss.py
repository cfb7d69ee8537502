"""Where a serving daemon's resident memory sits: RSS and smaps by mapping (anonymous heap,
thread arenas, each library, index files) when ready, after searches, and after the minute's
trim. Reuses ``--home`` if it is already built (cold index otherwise).

    python bench/rss.py --vault A --vault B --home /tmp/h --out bench/out/rss.json
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from common import BenchDaemon, combined_vault, emit, pct

from sidecar.clients.client import Client

QUERIES = [
    "how do I sync my vault",
    "Tastenkürzel ändern",
    "embed a file in a note",
    "wie erstelle ich eine Vorlage",
    "graph view filters",
    "Dateien wiederherstellen",
    "publish site custom domain",
    "community plugins safe mode",
    "Links umbenennen",
    "daily notes template",
]


def smaps(pid: int) -> dict[str, Any]:
    """Rss (MB) summed by what a mapping is: a library, an index file kind, heap or anonymous."""
    by: collections.Counter[str] = collections.Counter()
    anon_sizes: list[float] = []
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            name = head[5] if len(head) > 5 else "[anon]"
            if "/" in name:
                base = name.rsplit("/", 1)[1]
                if "/index/" in name:
                    name = "index:" + (base.rsplit(".", 1)[-1] if "." in base else base)
                else:
                    name = re.sub(r"[.-][0-9a-f]{8,}", "", base)
        elif head[0] == "Rss:":
            kb = int(head[1])
            by[name] += kb
            if name == "[anon]" and kb > 1024:
                anon_sizes.append(round(kb / 1024, 1))
    top = {k: round(v / 1024, 1) for k, v in by.most_common(14)}
    return {"by_mapping_mb": top, "anon_regions_over_1mb": sorted(anon_sizes, reverse=True)[:12]}


def status(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads")):
            key, value, *_ = line.split()
            out[key.rstrip(":")] = round(int(value) / 1024, 1) if key != "Threads:" else int(value)
    return out


def snapshot(pid: int) -> dict[str, Any]:
    return {**status(pid), **smaps(pid)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", required=True, type=Path, action="append")
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--no-settle", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="sidecar-rss-")) / "home"
    cold = not (home / "index").exists()
    vault = combined_vault(args.vault)
    d = BenchDaemon(vault, home)
    result: dict[str, Any] = {"cold": cold, "home": str(home)}
    try:
        result["ready_s"] = round(d.wait_ready(poll=0.2, limit=3600), 1)
        result["chunks"] = d.call("health")["index"]["chunks"]
        time.sleep(3)
        result["ready"] = snapshot(d.proc.pid)
        lat = []
        with Client(d.cfg.socket_path) as c:
            for i in range(args.searches):
                t = time.perf_counter()
                c.call("search", {"query": QUERIES[i % len(QUERIES)], "limit": 10})
                lat.append((time.perf_counter() - t) * 1000)
        result["search_p50_ms"], result["search_p95_ms"] = pct(lat, 0.5), pct(lat, 0.95)
        result["after_searches"] = snapshot(d.proc.pid)
        if not args.no_settle:
            time.sleep(62)  # the daemon's minute trim
            result["settled"] = snapshot(d.proc.pid)
    finally:
        d.stop()
    emit(result, args.out)


if __name__ == "__main__":
    main()
