"""Does the daemon's memory level off under long use? Phases of one kind of work, each followed by a
settle (sweep done, nothing pending, the minute's malloc_trim ran) and a breakdown of what is
resident and what is on disk, so growth can be pinned on a kind of request and on a store.

    python bench/soak.py --out bench/out/soak.json
    python bench/soak.py --plan search,search,search,write,write,write,mixed --seconds 90

Phases: ``search`` (search and recall only), ``write`` (memory writes only, each client its own
agent and 20 slugs it rewrites) and ``mixed`` (the chaos bench's 60/25/15 mix). The vault is 1,000
generated notes unless ``--vault`` names real ones.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos import MIXED, _daemon, run_clients  # noqa: E402
from common import emit, pct  # noqa: E402

from tests.conftest import make_notes  # noqa: E402
from tests.daemon_process import DaemonProcess  # noqa: E402

SETTLE_SECONDS = 65  # one full interval of the daemon's minute trim


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
            value = int(rest.split()[0])
            out[name] = value if name == "Threads" else value // 1024
    return out


def _smaps(pid: int) -> dict[str, int]:
    """Resident MB by kind of mapping: heap and anonymous memory, libraries, and each store's files."""
    kinds: dict[str, int] = {}
    kind = "anon"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            path = parts[5] if len(parts) > 5 else ""
            if not path or path.startswith("["):
                kind = "anon"
            elif ".so" in path:
                kind = "libraries"
            elif ".lance" in path:
                kind = "lance_files"
            elif "/bm25/" in path:
                kind = "tantivy_files"
            elif path.endswith(".onnx"):
                kind = "model_file"
            else:
                kind = "other_files"
        elif parts and parts[0] == "Rss:":
            kinds[kind] = kinds.get(kind, 0) + int(parts[1])
    return {k: v // 1024 for k, v in sorted(kinds.items())}


def _size_mb(folder: Path) -> float:
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20, 1)


def _disk(home: Path) -> dict[str, Any]:
    """What the stores hold on disk: LanceDB versions and data files, Tantivy segments, manifest rows."""
    index = home / "index"
    tables = list((index / "vectors").glob("*.lance"))
    lance = tables[0] if tables else None
    meta = index / "bm25" / "meta.json"
    segments = len(json.loads(meta.read_text())["segments"]) if meta.exists() else None
    with sqlite3.connect(f"file:{index / 'manifest.sqlite'}?mode=ro", uri=True) as db:
        files, chunks = (db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("files", "chunks"))
    return {
        "lance_versions": len(list((lance / "_versions").iterdir())) if lance else None,
        "lance_data_files": len(list((lance / "data").iterdir())) if lance else None,
        "lance_mb": _size_mb(lance) if lance else None,
        "bm25_segments": segments,
        "bm25_mb": _size_mb(index / "bm25"),
        "manifest_files": files,
        "manifest_chunks": chunks,
    }


def _settle(d: DaemonProcess) -> None:
    d.wait_for(lambda h: h["index"]["phase"] == "idle" and h["index"]["pending_vectors"] == 0, 900)
    time.sleep(SETTLE_SECONDS)


def _snapshot(d: DaemonProcess, label: str, requests: int) -> dict[str, Any]:
    assert d.proc is not None
    snap = {
        "after": label,
        "requests_so_far": requests,
        **_status(d.proc.pid),
        "smaps_mb": _smaps(d.proc.pid),
    }
    snap.update(_disk(d.home), fds=len(list(Path(f"/proc/{d.proc.pid}/fd").iterdir())))
    print(json.dumps(snap), file=sys.stderr, flush=True)
    return snap


MIXES = {"search": (0.7, 1.0), "write": (0.0, 0.0), "mixed": MIXED}


def _phase(d: DaemonProcess, kind: str, clients: int, seconds: float, round_: int) -> dict[str, Any]:
    lat, errors = run_clients(d, clients, seconds, MIXES[kind], "Soak", seed=round_)
    return {
        "phase": kind,
        "requests": sum(len(v) for v in lat.values()) + len(errors),
        "errors": len(errors),
        "error_samples": errors[:3],
        **{f"{op}_count": len(v) for op, v in lat.items()},
        **{f"{op}_p50_ms": pct(v, 0.5) for op, v in lat.items() if v},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", default="search,search,search,write,write,write,mixed,mixed,mixed")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=90, help="length of each phase")
    ap.add_argument("--vault", type=Path, action="append", default=[])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sidecar-soak-"))
    vault = work / "vault"
    if args.vault:
        for v in args.vault:
            shutil.copytree(v, vault / v.name)
    else:
        make_notes(vault, 1000)
    d = _daemon(work / "home", vault)
    d.start(timeout=1800)
    _settle(d)
    total = 0
    snaps = [_snapshot(d, "start", 0)]
    phases = []
    for n, kind in enumerate(args.plan.split(",")):
        result = _phase(d, kind, args.clients, args.seconds, n)
        total += result["requests"]
        phases.append(result)
        _settle(d)
        snaps.append(_snapshot(d, f"{n}:{kind}", total))
    d.stop()
    start, end = snaps[0]["VmRSS"], snaps[-1]["VmRSS"]
    emit(
        {
            "plan": args.plan,
            "clients": args.clients,
            "seconds_per_phase": args.seconds,
            "requests": total,
            "errors": sum(p["errors"] for p in phases),
            "rss_start_mb": start,
            "rss_end_mb": end,
            "phases": phases,
            "snapshots": snaps,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
