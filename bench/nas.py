"""File-system work a memory write causes on a vault that lives on a network share.

    python bench/nas.py --notes 2000 --writes 20 --out bench/out/nas.json
    python bench/nas.py --code /tmp/before   # the same run with another checkout's sidecar/

The vault is declared a network mount (cifs) through `watch.mountTable`, so the daemon treats it
as a share; scheduled polls and full sweeps are pushed out of the measured window. The daemon
runs under `strace -f`; after it is idle, an agent stores ``--writes`` memory notes one a second,
and every stat/lstat/statx/newfstatat/openat/getdents64 call naming a path inside the vault
during that window is counted (the model is disabled: embedding does not touch files). Needs
strace. Prints and writes: calls on the share per memory write, and the daemon's wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sidecar.clients.client import Client  # noqa: E402
from sidecar.config import load_config  # noqa: E402
from sidecar.contracts.errors import DaemonNotRunningError  # noqa: E402

CALLS = "stat,lstat,newfstatat,statx,openat,getdents64,fstatat64"


def make_vault(vault: Path, n: int) -> None:
    rng = random.Random(3)
    words = ["garden", "boat", "engine", "bread", "backup", "kayak", "paddle", "lighthouse", "storm"]
    for i in range(n):
        p = vault / f"Folder {i % 20}" / f"Sub {i % 7}" / f"note-{i}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# Note {i}\n\n" + " ".join(rng.choice(words) for _ in range(60)) + "\n")


def wait_idle(sock: Path, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with Client(sock, timeout=30) as c:
                h = c.call("health")
            idx = h["index"]
            if idx["phase"] == "idle" and idx["first_sweep_done"] and h["queue"]["depth"] == 0:
                return h
        except DaemonNotRunningError:
            pass
        time.sleep(0.2)
    raise SystemExit("daemon did not become idle")


def count(trace: Path, start: int, vault: str) -> int:
    with trace.open("rb") as fh:
        fh.seek(start)
        text = fh.read().decode("utf-8", "replace")
    pattern = re.compile(r'"' + re.escape(vault) + r'(/[^"]*)?"')
    hits = [line for line in text.splitlines() if pattern.search(line)]
    for line in hits[:5]:
        print("share call:", line[:200], file=sys.stderr)
    return len(hits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--code", type=Path, default=ROOT, help="folder holding the sidecar/ package to run")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("needs strace")
    tmp = Path(tempfile.mkdtemp(prefix="sidecar-nas-"))
    vault, home = tmp / "nas" / "Vault", tmp / "home"
    make_vault(vault, args.notes)
    table = tmp / "mountinfo"
    share = tmp / "nas"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {share} rw - cifs //nas/v rw\n")
    trace = tmp / "trace.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    env.update(
        PYTHONPATH=str(args.code.resolve()),
        SIDECAR_EMBEDDER_ENABLED="false",
        SIDECAR_WATCH_MOUNT_TABLE=str(table),
        SIDECAR_WATCH_POLL_SECONDS="3600",
        SIDECAR_INDEX_RESCAN_MINUTES="600",
    )
    cmd = [
        "strace", "-f", "-qq", "-e", f"trace={CALLS}", "-o", str(trace),
        sys.executable, "-m", "sidecar", "serve", "--home", str(home), "--vault", str(vault),
    ]  # fmt: skip
    log = (tmp / "daemon.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=tmp)
    sock = load_config(flags={"home": str(home)}, env={}).socket_path
    try:
        t0 = time.monotonic()
        pid = wait_idle(sock)["pid"]  # the daemon under strace
        cold = time.monotonic() - t0
        time.sleep(3)
        wait_idle(sock)
        start = trace.stat().st_size
        latencies = []
        with Client(sock, agent="bench", timeout=60) as c:
            for i in range(args.writes):
                t = time.perf_counter()
                c.call("write", {"slug": f"w-{i}", "content": f"# W {i}\n\nzeppelin hangar {i}\n"})
                latencies.append(time.perf_counter() - t)
                time.sleep(1.0)  # the file event (debounced 300 ms) is handled in between
        wait_idle(sock)
        time.sleep(1.0)
        calls = count(trace, start, str(vault))
    finally:
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    out = {
        "code": str(args.code),
        "notes": args.notes,
        "writes": args.writes,
        "share_calls_total": calls,
        "share_calls_per_write": round(calls / args.writes, 1),
        "write_p50_ms": round(sorted(latencies)[len(latencies) // 2] * 1000, 1),
        "startup_seconds": round(cold, 1),
    }
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
