"""Vector index kinds compared on a real table: build time, memory, latency, recall against exact.

Copies the vector table of a daemon home (e.g. the 10k home that ``bench/scale.py --keep``
leaves), embeds the 65 queries of ``bench/core.py`` and ``bench/questions-help.jsonl`` with the
bundled model, finds the exact top 60 of each, then for every kind in ``search.annIndex`` builds
the index with ``VectorStore.ensure_ann`` and searches through ``VectorStore.search`` (the
daemon's own code: same probes and re-ranking), each kind in a fresh process so memory figures
do not mix. Memory: anonymous resident memory the queries added (LanceDB's index cache), after
``malloc_trim``.

    python bench/ann.py --home /tmp/sidecar-scale-XXXX/home-10000 --out bench/out/ann-10k.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sidecar.runtime import heap
from sidecar.stores.vector_index import ANN_KINDS
from sidecar.stores.vectors import VectorStore

LIMIT = 60


def _anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon"):
            return int(line.split()[1]) / 1024
    return 0.0


def _store(folder: Path, kind: str) -> VectorStore:
    import lancedb

    name = lancedb.connect(str(folder)).list_tables().tables[0]
    meta = lancedb.connect(str(folder)).open_table(name).schema.metadata
    model, dim, pooling = (meta[k].decode() for k in (b"model", b"dim", b"pooling"))
    store = VectorStore(folder, model, int(dim), pooling, ann_kind=kind, ann_threshold=1)
    assert store.name == name, (store.name, name)
    return store


def child(folder: Path, kind: str, work: Path) -> dict[str, Any]:
    """Build (if needed) and measure one kind; runs in its own process."""
    heap.tune()
    out: dict[str, Any] = {"kind": kind}
    store = _store(folder, kind)
    t0 = time.perf_counter()
    store.ensure_ann()
    store.optimize()
    out["build_s"] = round(time.perf_counter() - t0, 1)
    out["index_mb"] = round(sum(i.size_bytes or 0 for i in store._table.list_indices()) / 1e6, 1)
    del store
    store = _store(folder, kind)  # a fresh handle: nothing cached from the build
    queries = np.load(work / "queries.npy")
    exact = json.loads((work / "exact.json").read_text())
    heap.trim()
    base = _anon_mb()
    lat: list[float] = []
    r10 = r60 = 0
    for rep in range(3):
        for q, e in zip(queries, exact, strict=True):
            t0 = time.perf_counter()
            ids = [i for i, _ in store.search(q, LIMIT)]
            lat.append((time.perf_counter() - t0) * 1000)
            if rep == 0:
                r10 += len(set(ids[:10]) & set(e[:10]))
                r60 += len(set(ids) & set(e))
    warm = sorted(lat[len(queries) :])  # the first pass loads the index
    heap.trim()
    out.update(
        {
            "p50_ms": round(warm[len(warm) // 2], 2),
            "p95_ms": round(warm[int(len(warm) * 0.95)], 2),
            "recall_at_10": round(r10 / (10 * len(queries)), 3),
            "recall_at_60": round(r60 / (LIMIT * len(queries)), 3),
            "index_cache_mb": round(_anon_mb() - base, 1),
            "refine_factor": ANN_KINDS[kind][2],
        }
    )
    return out


def prepare(home: Path, work: Path) -> tuple[Path, float]:
    """Copy the table, embed the queries, compute the exact top 60 (and its median time)."""
    from core import QUERIES

    from sidecar.config import load_config
    from sidecar.model.embedder import load_model

    folder = work / "vectors"
    shutil.copytree(home / "index" / "vectors", folder)
    model = load_model(load_config(flags={"home": str(home)}, env={}))
    bench = Path(__file__).resolve().parent
    texts = list(QUERIES) + [json.loads(line)["q"] for line in (bench / "questions-help.jsonl").open()]
    queries = np.stack([model.embed_query(t) for t in texts]).astype(np.float32)
    np.save(work / "queries.npy", queries)
    store = _store(folder, "ivf_sq")
    table = store._table
    for index in table.list_indices():  # every kind is built from scratch (and timed)
        table.drop_index(index.name)
    exact, lat = [], []
    for q in queries:
        t0 = time.perf_counter()
        query: Any = table.search(q).distance_type("cosine").limit(LIMIT)
        hits = query.select(["chunk_id", "_distance"]).to_arrow()
        lat.append((time.perf_counter() - t0) * 1000)
        exact.append(hits.column("chunk_id").to_pylist())
    (work / "exact.json").write_text(json.dumps(exact))
    return folder, round(sorted(lat)[len(lat) // 2], 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, help="a daemon home whose vector table is compared")
    ap.add_argument("--kinds", default=",".join(ANN_KINDS), help="comma-separated annIndex kinds")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=3, metavar=("FOLDER", "KIND", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        folder, kind, work = args.child
        print(json.dumps(child(Path(folder), kind, Path(work))))
        return
    if args.home is None:
        ap.error("--home is required")
    work = Path(tempfile.mkdtemp(prefix="sidecar-ann-"))
    try:
        folder, exact_ms = prepare(args.home, work)
        rows = []
        for kind in args.kinds.split(","):
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(folder), kind, str(work)],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
        result = {"home": str(args.home), "queries": 65, "limit": LIMIT, "exact_p50_ms": exact_ms}
        emit({**result, "kinds": rows}, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
