"""A long read through the manifest writer's connection (both reader connections held by other
reads, as two long searches hold them) against writes. The long read is a counting query of
``--steps`` steps. Three scenes:

- ``one``: one meta row written 50 ms into the read: how long the write waits, how long the
  read takes (it is read again after the write where it gives way);
- ``steady``: a one-row write every ``--every`` ms for the whole read (an indexing run's pace):
  how long the read takes and how often it started, and the longest a write waited;
- ``busy``: no write, one busy Python thread beside the read: how long the read takes (a
  progress handler took the GIL back at each of its questions).

    python bench/manifest_yield.py --steps 3000000 --runs 3
    python bench/manifest_yield.py --scene steady --runs 3
    python bench/manifest_yield.py --scene busy --steps 2000000 --runs 5
    PYTHONPATH=<older checkout> python bench/manifest_yield.py   # the same against older code

Prints one line per run.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.stores import manifest as manifest_module
from sidecar.stores.manifest import Manifest

_LONG_READ = (
    "WITH RECURSIVE c(n) AS (SELECT began() UNION ALL SELECT n + 1 FROM c WHERE n < "
    "(SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'steps')) SELECT count(*) FROM c"
)


class Gates:
    """The held readers' gate and the long read's starts, as SQL functions on every connection."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self.reading = threading.Event()
        self.starts = 0

    def hold(self) -> int:
        self.entered.release()
        self.release.wait()
        return 1

    def began(self) -> int:
        self.starts += 1
        self.reading.set()
        return 1


def with_long_read(gates: Gates, steps: int, beside: Callable[[Manifest, threading.Event], str]) -> str:
    """The long read on a manifest whose two readers are held, ``beside`` run meanwhile in this
    thread (given the manifest and the read's end, it answers its line's start); the line."""
    with tempfile.TemporaryDirectory() as folder:
        m = Manifest(Path(folder) / "m.sqlite")
        m.set_meta("steps", str(steps))
        held = [threading.Thread(target=m._committed, args=("SELECT hold()",)) for _ in range(2)]
        for t in held:
            t.start()
            gates.entered.acquire()
        gates.reading.clear()
        gates.starts = 0
        took: dict[str, float] = {}
        over = threading.Event()

        def read() -> None:
            began = time.perf_counter()
            m._committed(_LONG_READ)
            took["read"] = time.perf_counter() - began
            over.set()

        reader = threading.Thread(target=read)
        reader.start()
        gates.reading.wait()
        said = beside(m, over)
        reader.join()
        gates.release.set()
        for t in held:
            t.join()
        gates.release.clear()
        m.close()
    return f"{said}, the long read took {took['read'] * 1000:.0f} ms, started {gates.starts} times"


def one_write(m: Manifest, over: threading.Event) -> str:
    time.sleep(0.05)
    began = time.perf_counter()
    m.set_meta("other", "1")
    return f"the write waited {(time.perf_counter() - began) * 1000:.1f} ms"


def steady_writes(every_s: float, for_s: float) -> Callable[[Manifest, threading.Event], str]:
    def writes(m: Manifest, over: threading.Event) -> str:
        waits: list[float] = []
        done = threading.Event()

        def write() -> None:
            while not done.is_set():
                began = time.perf_counter()
                m.set_meta("other", str(len(waits)))
                waits.append(time.perf_counter() - began)
                time.sleep(every_s)

        writer = threading.Thread(target=write)
        writer.start()
        # The writes go on until the read has ended, or ``for_s`` (a read restarted at every
        # write never ends while they go on).
        ended = over.wait(for_s)
        done.set()
        writer.join()
        cut = "" if ended else f" (stopped after {for_s:.0f} s: the read had not ended)"
        return f"{len(waits)} writes{cut}, the longest waited {max(waits) * 1000:.0f} ms"

    return writes


def busy_thread(m: Manifest, over: threading.Event) -> str:
    done = threading.Event()

    def spin() -> None:
        x = 0
        while not done.is_set():
            x += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    over.wait()
    done.set()
    spinner.join()
    return "one busy Python thread"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--scene", choices=("one", "steady", "busy"), default="one")
    parser.add_argument("--steps", type=int, default=3_000_000)
    parser.add_argument("--every", type=float, default=20.0, help="ms between steady writes")
    parser.add_argument("--for", dest="for_s", type=float, default=20.0, help="s of steady writes at most")
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
    beside = {"one": one_write, "steady": steady_writes(args.every / 1000, args.for_s), "busy": busy_thread}[
        args.scene
    ]
    for run in range(args.runs):
        print(f"run {run}: {with_long_read(gates, args.steps, beside)}", flush=True)


if __name__ == "__main__":
    main()
