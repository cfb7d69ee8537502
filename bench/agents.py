"""What many agent names cost the keyword index: a keyword-only daemon over a small vault and
``--agents`` agents (comma-separated counts) with one small note each. For each count, and for
old code against new in one run, it reads the files and bytes under ``index/bm25``, the daemon's
threads at rest, a person's search (no agent: all memory) first and median, the threads right
after it, and one agent's own search. New code only: the agents' own indexes aged past
``memory.indexIdleDays`` and the daemon restarted, then the same figures, and the first search of
an agent whose index was removed (rebuilt from the manifest).

    python bench/agents.py --old-code DIR [--agents 100,300,1000] [--queries 20]

``--old-code`` is a checkout (``git archive main`` export) of the code to compare with.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit

WORDS = (  # noqa: SIM905  # a list literal reads worse
    "backup restic schedule garden tomato invoice tax deadline python rust compiler kernel "
    "network router firmware travel train ticket recipe lentil soup meeting budget printer "
    "toner server disk cache memory thread socket index search vector keyword agent inbox "
    "review draft letter insurance doctor appointment bicycle repair chain brake"
).split()


def populate(home: Path, vault: Path, agents: int, rng: random.Random) -> None:
    vault.mkdir(parents=True)
    for i in range(40):
        body = " ".join(rng.choices(WORDS, k=60))
        (vault / f"Note {i}.md").write_text(f"# Note {i}\n\n{body}\n")
    for a in range(agents):  # one note of about 400 bytes each
        inbox = home / "agents" / f"sess-{a:04d}" / "memory"
        inbox.mkdir(parents=True, mode=0o700)
        body = " ".join(rng.choices(WORDS, k=55))
        (inbox / "note.md").write_text(f"# Session {a}\n\nSession {a} remembers: {body}.\n")


def disk(home: Path) -> dict[str, float]:
    files = [p for p in (home / "index" / "bm25").rglob("*") if p.is_file()]
    return {"bm25_files": len(files), "bm25_mb": round(sum(p.stat().st_size for p in files) / 1e6, 2)}


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def timed(d: Any, queries: list[str], agent: str | None) -> dict[str, float]:
    out = []
    with d.client(agent) as c:
        t0 = time.perf_counter()
        c.call("search", {"query": queries[0], "limit": 10})  # the first: opens what it reads
        first = (time.perf_counter() - t0) * 1000
        for q in queries[1:]:
            t0 = time.perf_counter()
            c.call("search", {"query": q, "limit": 10})
            out.append((time.perf_counter() - t0) * 1000)
    return {"first_ms": round(first, 1), "p50_ms": round(statistics.median(out), 1)}


def measure(d: Any, home: Path, queries: list[str]) -> dict[str, Any]:
    time.sleep(3)  # the sweep's writers released
    out: dict[str, Any] = {**disk(home), "threads_rest": threads(d.pid)}
    out["person"] = timed(d, queries, None)
    out["threads_after_person"] = threads(d.pid)
    out["agent_own"] = timed(d, queries, "sess-0001")
    return out


def age(home: Path, days: float) -> None:
    when = time.time() - days * 86400
    for p in (home / "index" / "bm25" / "memory").rglob("*"):
        os.utime(p, (when, when))


def side(name: str, code: Path, base: Path, agents: int, queries: list[str], *, idle: bool) -> dict[str, Any]:
    home, vault = base / name / "home", base / name / "vault"
    populate(home, vault, agents, random.Random(1))
    config = base / f"{name}.yaml"
    config.write_text("embedder: {enabled: false}\nlogging: {level: warning}\n")
    d = code_daemon(home, vault, code, config)
    try:
        d.wait_ready(timeout=1800, poll=0.2)
        result = {"ready_s": round(d.seconds(), 1), **measure(d, home, queries)}
    finally:
        d.stop()
    if idle:  # every agent's own index unused for 40 days; the start's sweep removes them
        age(home, 40)
        d = code_daemon(home, vault, code, config)
        try:
            d.wait_ready(timeout=1800, poll=0.2)
            after = measure(d, home, queries)  # sess-0001's search rebuilds its index
            with d.client("sess-0002") as c:
                t0 = time.perf_counter()
                c.call("search", {"query": queries[0], "limit": 10})
                after["agent_back_first_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            result["after_idle_removal"] = after
        finally:
            d.stop()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, default=None)
    ap.add_argument("--agents", default="100,300,1000")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(2)
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
    result: dict[str, Any] = {"cpus": os.cpu_count(), "runs": {}}
    for n in (int(x) for x in args.agents.split(",")):
        run: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="ag-") as tmp:
            base = Path(tmp)
            if args.old_code is not None:
                run["old"] = side("old", args.old_code.resolve(), base, n, queries, idle=False)
            run["new"] = side("new", ROOT, base, n, queries, idle=True)
        result["runs"][str(n)] = run
        print(n, run, file=sys.stderr, flush=True)
    emit(result, args.out)


if __name__ == "__main__":
    main()
