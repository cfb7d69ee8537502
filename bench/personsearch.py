"""A person's search across many agents' inboxes, and what ``sidecar status`` prints for them:
a keyword-only daemon over a small vault and ``--agents`` inboxes of ``--notes`` notes each
(words drawn, seeded, from a small vocabulary so that a query meets many inboxes). Times, over the
socket, a person's search (no agent: every inbox), one agent's search (the vault and its own
inbox) and a vault-only search (``sources: vault, wiki``), and counts the lines and the memory
lines of ``sidecar status``.

    python bench/personsearch.py [--old-code DIR] [--agents 300] [--notes 5] [--queries 40]

``--old-code`` is a checkout (``git worktree``, ``git archive`` export) of the code to compare with.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, clean_env, code_daemon, emit

WORDS = (  # noqa: SIM905  # a list literal of 47 words reads worse
    "backup restic schedule garden tomato invoice tax deadline python rust compiler kernel "
    "network router firmware travel train ticket recipe lentil soup meeting budget printer "
    "toner server disk cache memory thread socket index search vector keyword agent inbox "
    "review draft letter insurance doctor appointment bicycle repair chain brake"
).split()


def populate(home: Path, vault: Path, agents: int, notes: int, rng: random.Random) -> None:
    vault.mkdir(parents=True)
    for i in range(40):
        body = " ".join(rng.choices(WORDS, k=60))
        (vault / f"Note {i}.md").write_text(f"# Note {i}\n\n{body}\n")
    for a in range(agents):
        inbox = home / "agents" / f"agent{a:04d}" / "memory"
        inbox.mkdir(parents=True, mode=0o700)
        for n in range(notes):
            body = " ".join(rng.choices(WORDS, k=30))
            (inbox / f"note{n}.md").write_text(f"# Note {n}\n\nAgent {a} remembers: {body}.\n")


def timed(d: Any, queries: list[str], params: dict[str, Any], agent: str | None) -> dict[str, float]:
    out = []
    with d.client(agent) as c:
        t0 = time.perf_counter()
        c.call("search", {"query": queries[0], **params})  # the first: opens what it reads
        first = (time.perf_counter() - t0) * 1000
        for q in queries:
            t0 = time.perf_counter()
            c.call("search", {"query": q, **params})
            out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return {
        "first_ms": round(first, 1),
        "p50_ms": round(statistics.median(out), 1),
        "p95_ms": round(out[int(len(out) * 0.95)], 1),
    }


def status_lines(code: Path, d: Any) -> dict[str, int]:
    text = subprocess.run(
        [sys.executable, "-m", "sidecar", "status", "--home", str(d.home), "--socket", str(d.socket)],
        capture_output=True,
        text=True,
        check=False,
        env={**clean_env(), "PYTHONPATH": str(code)},
        cwd=code,
    ).stdout
    lines = text.splitlines()
    return {"lines": len(lines), "memory_lines": sum(1 for line in lines if "memory/" in line)}


def side(name: str, code: Path, base: Path, args: argparse.Namespace) -> dict[str, Any]:
    home, vault = base / name / "home", base / name / "vault"
    populate(home, vault, args.agents, args.notes, random.Random(1))
    config = base / f"{name}.yaml"
    config.write_text("embedder: {enabled: false}\nlogging: {level: warning}\n")
    d = code_daemon(home, vault, code, config)
    try:
        d.wait_ready(timeout=900, poll=0.2)
        rng = random.Random(2)
        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
        return {
            "ready_s": round(d.seconds(), 1),
            "person_all_inboxes": timed(d, queries, {"limit": 10}, None),
            "agent_own_inbox": timed(d, queries, {"limit": 10}, "agent0001"),
            "vault_only": timed(d, queries, {"limit": 10, "source": "vault"}, None),
            "status": status_lines(code, d),
        }
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, default=None)
    ap.add_argument("--agents", type=int, default=300)
    ap.add_argument("--notes", type=int, default=5)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"agents": args.agents, "notes": args.notes, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="ps-") as tmp:
        base = Path(tmp)
        if args.old_code is not None:
            result["old"] = side("old", args.old_code.resolve(), base, args)
        result["new"] = side("new", ROOT, base, args)
    emit(result, args.out)


if __name__ == "__main__":
    main()
