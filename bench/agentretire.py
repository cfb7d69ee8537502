"""Agents that are gone: do their folders, watches and rows go too? 2,000 agents (``--agents``)
each write one note and delete it through the socket, as the MCP shim does; measured then, and
again after the trash retention passed (the kept texts renamed 100 days older, the daemon
restarted: its start runs the same prune as the daily housekeeping): agent folders left, inotify
watches of the daemon (/proc/PID/fdinfo), manifest rows ``root:memory/*``, and the time of
``inboxes_in_use`` over the agent folders there are. Keyword-only daemon of the code in
``--code`` (default: this checkout), under ``nice``; run it once per code to compare:

    python bench/agentretire.py --work W --label new
    python bench/agentretire.py --work W --label old --code OLD_EXPORT
"""

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--work", type=Path, required=True, help="scratch folder (a subfolder per label)")
ap.add_argument("--label", default="new")
ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
ap.add_argument("--agents", type=int, default=2000)
ARGS = ap.parse_args()
LABEL, CODE, N = ARGS.label, ARGS.code.resolve(), ARGS.agents
BASE = ARGS.work.resolve() / LABEL
HOME, SOCK, VAULT = BASE / "home", BASE / "run" / "s.sock", BASE / "vault"
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(CODE), "PYTHONDONTWRITEBYTECODE": "1"}


def call(op, params=None, agent=None, s=None):
    own = s is None
    if own:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(120)
        s.connect(str(SOCK))
    req = {
        "v": 1,
        "id": 1,
        "op": op,
        **({"agent": agent} if agent else {}),
        **({"params": params} if params else {}),
    }
    s.sendall(json.dumps(req).encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    if own:
        s.close()
    r = json.loads(buf)
    if not r.get("ok"):
        raise RuntimeError(r.get("error"))
    return r["result"]


def start():
    log = open(BASE / "daemon.log", "a")  # noqa: SIM115 - the daemon's log for its whole life
    p = subprocess.Popen(
        ["nice", "-n", "10", PY, "-m", "sidecar", "serve", "--config", str(BASE / "config.yaml")],
        env=ENV,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    for _ in range(600):
        try:
            call("health")
            break
        except (OSError, RuntimeError, ValueError):
            time.sleep(0.2)
    idle()
    return p


def idle(quiet=3.0):
    """Wait until the daemon's index queue is empty for ``quiet`` seconds."""
    calm = 0.0
    while calm < quiet:
        h = call("health")
        busy = h["queue"]["depth"] or h["index"]["phase"] != "idle"
        calm = 0.0 if busy else calm + 0.5
        time.sleep(0.5)


def stop(p):
    os.kill(p.pid, signal.SIGTERM)
    p.wait(60)


def watches(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/fdinfo/{fd}") as info:
            n += sum(1 for line in info if line.startswith("inotify wd:"))
    return n


def meta_rows():
    for _ in range(20):
        try:
            con = sqlite3.connect(HOME / "index" / "manifest.sqlite", timeout=30)
            try:
                return con.execute("SELECT count(*) FROM meta WHERE name LIKE 'root:memory/%'").fetchone()[0]
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            err = exc
            time.sleep(1)
    return f"error: {err}"


TIMER = """
import os, sys, time
from pathlib import Path
from sidecar.config import load_config, valid_agent
from sidecar.vault.sources import inboxes_in_use, roots
cfg = load_config(config_file=sys.argv[1], env={})
names = sorted(n for n in os.listdir(cfg.agents_dir) if valid_agent(n))
for _ in range(2): roots(cfg)
k = 20
t = time.perf_counter()
for _ in range(k): used = inboxes_in_use(cfg, names)
print(f"{(time.perf_counter() - t) / k * 1000:.1f} {len(names)} {len(used)}")
"""


def timing():
    out = subprocess.run(  # noqa: PLW1510 - its return code is read below
        ["nice", "-n", "10", PY, "-c", TIMER, str(BASE / "config.yaml")],
        env=ENV,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    ms, names, used = out.stdout.split()
    return float(ms), int(names), int(used)


def figures(what, p):
    agents = HOME / "agents"
    folders = sum(1 for n in os.listdir(agents) if not n.startswith("."))
    ms, _names, used = timing()
    row = {
        "label": LABEL,
        "when": what,
        "agent_folders": folders,
        "inotify_watches": watches(p.pid),
        "meta_root_memory_rows": meta_rows(),
        "inboxes_in_use_ms": ms,
        "inboxes_in_use": used,
        "retired_audit_logs": len(os.listdir(agents / ".retired")) if (agents / ".retired").is_dir() else 0,
    }
    print(json.dumps(row), flush=True)
    with open(ARGS.work / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def age_trash(days=100):
    old = (dt.datetime.now() - dt.timedelta(days=days)).strftime("%Y%m%dT%H%M%S%f")
    kept = re.compile(r"^(.*)--\d{8}T\d{12}(\.md)$")
    for trash in (HOME / "agents").glob("*/memory/.trash"):
        for f in trash.iterdir():
            m = kept.match(f.name)
            if m:
                f.rename(trash / f"{m.group(1)}--{old}{m.group(2)}")


def main():
    shutil.rmtree(BASE, ignore_errors=True)
    (VAULT / "wiki").mkdir(parents=True)
    (BASE / "run").mkdir(mode=0o700)
    for i in range(20):
        (VAULT / f"note{i}.md").write_text(f"# Note {i}\n\nkayak garden boat {i}\n")
    (BASE / "config.yaml").write_text(
        f"home: {HOME}\nsocket: {SOCK}\nvault:\n  path: {VAULT}\n  wikiSubfolder: wiki\n"
        "embedder:\n  enabled: false\nlogging:\n  level: info\n"
    )
    p = start()
    try:
        figures("start", p)
        t = time.time()
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(120)
        s.connect(str(SOCK))
        for i in range(N):
            agent = f"session-{i:05d}"
            call("write", {"slug": "m", "content": f"session note {i} kayak"}, agent, s)
            call("delete", {"slug": "m"}, agent, s)
        s.close()
        idle()
        print(f"# {N} agents wrote and deleted a note in {time.time() - t:.0f} s", flush=True)
        figures("after writes and deletes (trash within retention)", p)
        stop(p)
        age_trash()
        p = start()  # its start prunes, as the daily housekeeping does
        time.sleep(5)
        idle()
        figures("after the prune, trash retention passed", p)
        r = call("write", {"slug": "m", "content": "back again"}, "session-00007")
        d = call("list", {}, "session-00007")
        print(
            "# a retired agent writes again:", r["action"], [n["reference"] for n in d["notes"]], flush=True
        )
    finally:
        stop(p)


main()
