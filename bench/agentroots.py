"""Roots, health size, sweep time and file watches of a home with many agents whose inboxes hold
nothing (they wrote once; their notes were deleted), old code against new: keyword-only daemons.
Each side gets the same home: ``--agents`` agent folders, of which ``--busy`` hold three notes
each and the rest only an emptied inbox (a kept text in ``.trash`` and an audit log), beside a
small vault.

    python bench/agentroots.py [--old-code DIR] [--agents 500] [--busy 10] [--sweeps 5]

``--old-code`` is a checkout (``git worktree``, ``git archive`` export) of the code to compare
with. Reported: the roots in health, the bytes of a health reply, the first sweep's seconds (from
its ``sweep_done`` log line), the median wall time of a full sweep asked for with the index op,
and the inotify watches the daemon holds.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit


def populate(home: Path, agents: int, busy: int) -> None:
    for i in range(agents):
        agent = home / "agents" / f"agent{i:04d}"
        inbox = agent / "memory"
        (inbox / ".trash").mkdir(parents=True, mode=0o700)
        (agent / "audit.log").write_text('{"op": "write"}\n{"op": "delete"}\n')
        if i < busy:
            for n in range(3):
                (inbox / f"note{n}.md").write_text(f"# Note {n}\n\nAgent {i} remembers item {n}.\n")
        else:
            (inbox / ".trash" / "note0--20260101T000000000000.md").write_text("# Old\n\nDeleted.\n")


def health_bytes(sock: Path) -> int:
    """Bytes of one health reply as it comes over the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(str(sock))
        s.sendall(b'{"op": "health"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    return len(data)


def inotify_watches(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        count += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return count


def full_sweep_seconds(d: Any) -> float:
    before = d.health()["index"]["sweeps"]
    t0 = time.perf_counter()
    d.call("index")
    d.wait_for(lambda h: h["index"]["sweeps"] > before and h["index"]["phase"] == "idle", 300, 0.01)
    return time.perf_counter() - t0


def side(name: str, code: Path, base: Path, vault: Path, args: argparse.Namespace) -> dict[str, Any]:
    home = base / name
    populate(home, args.agents, args.busy)
    config = base / f"{name}.yaml"
    config.write_text("embedder: {enabled: false}\nlogging: {level: info}\n")
    d = code_daemon(home, vault, code, config)
    try:
        d.wait_ready(timeout=600, poll=0.1)
        h = d.health()
        time.sleep(1.0)  # the watch is set up beside the first sweep
        first = re.search(r"sweep_done .*?seconds=([\d.]+)", d.log.read_text())
        sweeps = [full_sweep_seconds(d) for _ in range(args.sweeps)]
        return {
            "roots": len(h["roots"]),
            "memory_roots": sum(1 for r in h["roots"] if r["name"].startswith("memory/")),
            "health_bytes": health_bytes(d.socket),
            "ready_s": round(d.seconds(), 2),
            "first_sweep_s": float(first.group(1)) if first else None,
            "full_sweep_median_ms": round(statistics.median(sweeps) * 1000, 1),
            "inotify_watches": inotify_watches(d.pid),
        }
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, default=None)
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--busy", type=int, default=10)
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"agents": args.agents, "busy": args.busy}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault = base / "vault"
        vault.mkdir()
        (vault / "Note.md").write_text("# Note\n\nA vault note about backup sync.\n")
        (vault / "wiki").mkdir()
        (vault / "wiki" / "Backups.md").write_text("# Backups\n\nrestic every night.\n")
        if args.old_code is not None:
            result["old"] = side("old", args.old_code.resolve(), base, vault, args)
        result["new"] = side("new", ROOT, base, vault, args)
    emit(result, args.out)


if __name__ == "__main__":
    main()
