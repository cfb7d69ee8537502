"""Memory write latency and restart time with a large .trash, old code against new: keyword-only
daemons (the model's time would hide the inbox's own bookkeeping). Each side writes ``--writes``
replacements (before), then ``--files`` texts of 600 B are put in its agent's .trash with names as
the daemon writes them, spread over the last 80 days (below memory.trashDays), the daemon is
restarted (seconds until the socket answers: before the texts are put there, with them, and once
more after the writes) and it writes again (after; the first write after is shown apart).

    python bench/trashscale.py [--old-code DIR] [--files 100000] [--set memory.maxTrashFiles=0]

``--old-code`` is a checkout (``git archive`` export) of the code to compare with; ``--set``
applies to the new code's daemon only (e.g. caps raised, to time writes over a trash as large
as the old code kept).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit

from sidecar.clients.client import Client

AGENT = "bench"


def writes(d: Any, n: int, tag: str) -> list[float]:
    out = []
    with Client(d.cfg.socket_path, agent=AGENT, timeout=300) as c:
        for i in range(n):
            t0 = time.perf_counter()
            c.call("write", {"slug": f"s{i % 3}", "content": f"# s\n\nmeasure {tag} {i} " + "word " * 80})
            out.append(round((time.perf_counter() - t0) * 1000, 1))
    return out


def populate(trash: Path, n: int) -> None:
    now = time.time()
    for i in range(n):
        ts = now - 80 * 86400 + i * (80 * 86400 / n)
        name = (
            f"old{i % 50}--" + time.strftime("%Y%m%dT%H%M%S", time.localtime(ts)) + f"{i % 1_000_000:06d}.md"
        )
        fd = os.open(trash / name, os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(fd, b"x" * 600)
        os.close(fd)


def answering(d: Any, timeout: float = 600) -> float:
    while d.seconds() < timeout:
        if d.health_or_none() is not None:
            return round(d.seconds(), 2)
        time.sleep(0.02)
    raise TimeoutError("no answer")


def side(
    name: str, code: Path, base: Path, vault: Path, args: argparse.Namespace, extra: list[str]
) -> dict[str, Any]:
    home = base / name
    config = base / f"{name}.yaml"
    sections: dict[str, list[str]] = {"embedder": ["enabled: false"]}
    for item in extra:
        key, value = item.split("=", 1)
        section, field = key.split(".", 1)
        sections.setdefault(section, []).append(f"{field}: {value}")
    lines = [f"{s}: {{{', '.join(fields)}}}" for s, fields in sections.items()]
    config.write_text("\n".join(lines) + "\n")
    d = code_daemon(home, vault, code, config)
    d.wait_ready(timeout=600, poll=0.1)
    before = writes(d, args.writes, "before")
    d.stop()
    d = code_daemon(home, vault, code, config)
    restart_before = answering(d)
    d.wait_ready(timeout=600, poll=0.1)
    d.stop()
    trash = home / "agents" / AGENT / "memory" / ".trash"
    populate(trash, args.files)
    d = code_daemon(home, vault, code, config)
    start = answering(d)
    d.wait_ready(timeout=600, poll=0.1)
    after = writes(d, args.writes + 1, "after")
    d.stop()
    d = code_daemon(home, vault, code, config)
    restart_again = answering(d)
    d.wait_ready(timeout=600, poll=0.1)
    d.stop()
    du = subprocess.run(["du", "-sk", str(trash)], check=True, capture_output=True, text=True).stdout.split()[
        0
    ]
    return {
        "write_before_median_ms": statistics.median(before),
        "write_before_max_ms": max(before),
        "restart_before_s": restart_before,
        "restart_with_trash_s": start,
        "restart_again_s": restart_again,
        "first_write_after_ms": after[0],
        "write_after_median_ms": statistics.median(after[1:]),
        "write_after_max_ms": max(after[1:]),
        "trash_files_after": len(os.listdir(trash)),
        "trash_du_mib_after": round(int(du) / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, default=None)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], help="section.key=value for the new code's daemon")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"files": args.files, "set": args.set}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault = base / "vault"
        vault.mkdir()
        (vault / "Note.md").write_text("# Note\n\nA vault note about backup sync.\n")
        if args.old_code is not None:
            result["old"] = side("old", args.old_code.resolve(), base, vault, args, [])
        result["new"] = side("new", ROOT, base, vault, args, args.set)
    emit(result, args.out)


if __name__ == "__main__":
    main()
