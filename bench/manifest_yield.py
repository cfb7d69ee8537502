"""How long a write waits behind a long read that goes through the manifest writer's connection
(both reader connections held by other reads, as two long searches hold them). The long read is
a counting query of ``--steps`` steps; the write is one meta row, begun 50 ms into the read.

    python bench/manifest_yield.py --steps 3000000 --runs 3
    PYTHONPATH=<older checkout> python bench/manifest_yield.py   # the same against older code

Prints, per run, the write's wait and the long read's time (it is read again after the write
where the read gives way).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sidecar.stores import manifest as manifest_module
from sidecar.stores.manifest import Manifest

_LONG_READ = (
    "WITH RECURSIVE c(n) AS (SELECT began() UNION ALL SELECT n + 1 FROM c WHERE n < "
    "(SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'steps')) SELECT count(*) FROM c"
)


class Gates:
    """The held readers' gate and the long read's start, as SQL functions on every connection."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self.reading = threading.Event()

    def hold(self) -> int:
        self.entered.release()
        self.release.wait()
        return 1

    def began(self) -> int:
        self.reading.set()
        return 1


def one_run(gates: Gates, steps: int) -> tuple[float, float]:
    """(the write's wait, the long read's time) in seconds."""
    with tempfile.TemporaryDirectory() as folder:
        m = Manifest(Path(folder) / "m.sqlite")
        m.set_meta("steps", str(steps))
        held = [threading.Thread(target=m._committed, args=("SELECT hold()",)) for _ in range(2)]
        for t in held:
            t.start()
            gates.entered.acquire()
        gates.reading.clear()
        took: dict[str, float] = {}

        def read() -> None:
            began = time.perf_counter()
            m._committed(_LONG_READ)
            took["read"] = time.perf_counter() - began

        reader = threading.Thread(target=read)
        reader.start()
        gates.reading.wait()
        time.sleep(0.05)
        began = time.perf_counter()
        m.set_meta("other", "1")
        took["write"] = time.perf_counter() - began
        reader.join()
        gates.release.set()
        for t in held:
            t.join()
        gates.release.clear()
        m.close()
    return took["write"], took["read"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--steps", type=int, default=3_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    gates = Gates()
    real = manifest_module.guarded_connect

    def connect(*a: Any, **k: Any) -> Any:
        db = real(*a, **k)
        db.create_function("hold", 0, gates.hold)
        db.create_function("began", 0, gates.began)
        return db

    manifest_module.guarded_connect = connect  # type: ignore[assignment]
    for run in range(args.runs):
        write, read = one_run(gates, args.steps)
        print(f"run {run}: the write waited {write * 1000:.1f} ms, the long read took {read * 1000:.0f} ms")


if __name__ == "__main__":
    main()
