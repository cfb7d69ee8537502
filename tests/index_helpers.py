"""Helpers for the index tests: store counts, a search, a closed index, an index loop the test
steps, a damaged vector table."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from sidecar.contracts.wire import hit_json
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mtime_ns,
            )
        else:
            out[str(p.relative_to(folder))] = ("dir", 0)
    return out


def store_counts(h: Harness) -> tuple[int, int, int]:
    assert h.stores.vectors is not None
    return h.stores.manifest.chunk_count(), h.stores.bm25.num_docs(), h.stores.vectors.count()


def index_and_close(cfg: Any) -> int:
    """Index the vault into real stores, close them (as a stopped daemon would); the chunk count."""
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    count = h.stores.manifest.chunk_count()
    h.close()
    return count


def search(h: Harness, query: str, **kw: Any) -> list[dict[str, Any]]:
    r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
    hits = r.search(SearchRequest(query, kw.pop("limit", 10), kw.pop("min_score", 0.0), **kw)).hits
    return [hit_json(hit) for hit in hits]


def index_loop_of(server: Any, *, rebuilds: bool = False) -> Any:
    """An index loop over an in-process server's stores, never run (the test takes its jobs),
    that the server's `index` requests go to: the sweeps asked for and the count of those done
    (with ``rebuilds``, whether a rebuild runs or is queued too)."""
    from sidecar.daemon.indexing import IndexLoop

    h = server.harness
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    service = server.handlers.service
    service.request_sweep = loop.request_sweep
    service.asked_done = lambda: loop.asked_done
    if rebuilds:
        service.rebuilding = loop.rebuilding
        service.rebuild_queued = loop.rebuild_queued
    return loop


def truncate_vector_data(cfg: Any) -> None:
    """Cut every data file of the vector table in half: the table still opens, reads fail."""
    files = list((cfg.index_dir / "vectors").rglob("data/*.lance"))
    assert files
    for f in files:
        with f.open("r+b") as fh:
            fh.truncate(f.stat().st_size // 2)


def harness_over_ann_threshold(make_cfg: Any, tmp_path: Path) -> Harness:
    """300 small notes with search.annThreshold 256: enough rows for an IVF index."""
    vault = tmp_path / "big"
    for i in range(300):
        write(vault / f"n{i:03d}.md", f"# Note {i}\n\nword{i} topic{i % 17} shared text about item {i}\n")
    return Harness(make_cfg(vault, **{"search.annThreshold": 256}), FakeEmbedder())
