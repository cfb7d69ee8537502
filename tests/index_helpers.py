"""Helpers for the index tests: store counts, a search, a closed index, an index loop the test
steps, a damaged vector table."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from sidecar.contracts.wire_json import hit_json
from sidecar.notes import links
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


def edit_links(db: sqlite3.Connection, *statements: str) -> None:
    """Change the link graph as UPDATE or DELETE statements on its ``links`` view (by key) would,
    written to its tables: a graph as a crash or another version left it."""
    db.execute("CREATE TEMP TABLE edited_links AS SELECT * FROM links")
    for sql in statements:
        db.execute(re.sub(r"\blinks\b", "edited_links", sql, count=1))
    links.clear(db)
    links.put_back(db, "edited_links")
    db.execute("DROP TABLE temp.edited_links")


def as_old_links(db: sqlite3.Connection) -> None:
    """The link graph as manifest schemas 4 and 5 kept it: one table, each row holding its
    source's and target's keys as text, indexed by both."""
    db.executescript(
        """
        CREATE TABLE old_links (
          src TEXT NOT NULL, ord INTEGER NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL,
          anchor TEXT NOT NULL, display TEXT NOT NULL, embed INTEGER NOT NULL, kind TEXT NOT NULL,
          line INTEGER NOT NULL, dst TEXT, candidates INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (src, ord)
        );
        INSERT INTO old_links SELECT * FROM links;
        DROP VIEW links;
        DROP TABLE link_rows;
        DROP TABLE link_keys;
        ALTER TABLE old_links RENAME TO links;
        CREATE INDEX links_by_dst ON links(dst);
        CREATE INDEX links_by_name ON links(name);
        """
    )


def with_agents(make_cfg: Any, vault: Path, notes: dict[str, dict[str, str]]) -> Any:
    """The vault fixture and agents' inboxes holding ``notes`` (agent -> slug -> text); swept
    and closed."""
    cfg = make_cfg(vault)
    for agent, slugs in notes.items():
        inbox = cfg.agents_dir / agent / "memory"
        inbox.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(inbox.parent, 0o700)
        for slug, text in slugs.items():
            write(inbox / f"{slug}.md", text)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.close()
    return cfg


def made_idle(s: Any, agent: str) -> float:
    """``agent``'s own keyword index made to look unused for 40 days (closed, its use forgotten)
    on the in-process server ``s``; the time of last use it now has."""
    bm25 = s.harness.stores.bm25
    base = s.cfg.index_dir / "bm25" / "memory" / agent
    old = time.time() - 40 * 86400
    for path in (base / "used", base / "chunks" / "meta.json", base / "pages" / "meta.json"):
        if path.exists():
            os.utime(path, (old, old))
    with bm25._inbox_lock:
        bm25._open.pop(agent, None)
    bm25._used_at.pop(agent, None)
    return old


def newer_manifest_in_log(path: Path, schema: int = 99) -> sqlite3.Connection:
    """A new manifest a newer sidecar runs on: its schema (above this version's) and every other
    commit only in the write-ahead log, the file's header still saying 0 (no checkpoint yet). The
    connection is the running writer: the caller closes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT)")
    db.execute(f"PRAGMA user_version={schema}")
    db.commit()
    return db
