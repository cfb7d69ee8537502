"""Abandoned requests against a live one: N clients each send a search and hang up at once, then
one client searches and waits for its answer. Reports how long that live search took, how many
of the abandoned searches still ran, and the open connections the server counted at the peak.

The server is sidecar's socket loop (``sidecar.daemon.server.Server``) over a stand-in handler that
spends ``--work-ms`` of CPU per search (a real search took ~17 ms), so the figure is the queueing,
not the index. Run it with PYTHONPATH at two source trees to compare them in one go:

    PYTHONPATH=/tmp/old nice -n 19 python bench/hangup.py --abandoned 1100
    PYTHONPATH=.        nice -n 19 python bench/hangup.py --abandoned 1100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sidecar.daemon.server import Server, bind_socket


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--abandoned", type=int, default=1100)
    ap.add_argument("--work-ms", type=float, default=17.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    ran = [0]

    def dispatch(req: Any) -> dict[str, Any]:
        end = time.perf_counter() + args.work_ms / 1000
        while time.perf_counter() < end:
            pass
        ran[0] += 1
        return {"hits": []}

    server = Server(dispatch, max_frame=1 << 20, workers=args.workers, idle_timeout=60.0)
    path = Path(tempfile.mkdtemp(prefix="hb-")) / "s.sock"
    listener = bind_socket(path)
    stop: list[asyncio.Event] = []
    loop: list[asyncio.AbstractEventLoop] = []

    async def serve() -> None:
        loop.append(asyncio.get_running_loop())
        stop.append(asyncio.Event())
        await server.serve(listener, stop[0])

    t = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    t.start()
    while not stop:
        time.sleep(0.01)
    frame = b'{"id": 1, "op": "search", "params": {"query": "graph view"}}\n'
    peak = 0
    for _ in range(args.abandoned):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))
        s.sendall(frame)
        s.close()
        peak = max(peak, server.connections)
    t0 = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(frame)
        answer = json.loads(s.makefile("rb").readline())
    live = time.perf_counter() - t0
    assert answer["ok"], answer
    print(
        f"abandoned={args.abandoned} live_search_s={live:.2f} abandoned_run={ran[0] - 1} "
        f"peak_connections={peak}"
    )
    loop[0].call_soon_threadsafe(stop[0].set)
    t.join(10)


if __name__ == "__main__":
    main()
