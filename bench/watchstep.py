"""Idle wakeups of a file watch: ``watchfiles.watch`` on an empty folder with the daemon's
debounce (300 ms) and a given ``step``, as the watcher runs it; prints the process's voluntary
context switches over 10 s idle (Linux: read from /proc).

    nice -n 19 python bench/watchstep.py 50     # the old step
    nice -n 19 python bench/watchstep.py 150    # half the debounce (sidecar.vault.watcher.watch_step)
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

import watchfiles


def _switches() -> int:
    total = 0
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/status", encoding="ascii") as f:
            status = f.read()
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total


def main() -> None:
    step = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    folder, stop = tempfile.mkdtemp(), threading.Event()

    def watch() -> None:
        for _ in watchfiles.watch(
            folder, debounce=300, step=step, stop_event=stop, rust_timeout=5000, yield_on_timeout=True
        ):
            pass

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(1)
    before = _switches()
    time.sleep(10)
    n = _switches() - before
    print(f"step={step} ms: {n} voluntary context switches in 10 s idle ({n / 10:.1f}/s)")
    stop.set()
    t.join()


if __name__ == "__main__":
    main()
