"""The vector table's write path alone, old code against new: a table of ``--rows`` rows (384
dimensions) whose centre is taken, then ``--edits`` small edits (a note of one chunk deleted and
added again), each timed; the two codes' runs alternate over ``--rounds`` rounds so both see the
same machine load. What keeping the centre's churn costs each write, without a model or a daemon.

    python bench/centrestore.py --old-code DIR --out bench/out/centrestore.json

``--old-code`` is a checkout of the code to compare with (``git archive`` of an older commit).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, emit, pct

# Run inside each code's checkout (PYTHONPATH): prints the edits' times in ms as JSON.
_ONE_RUN = """
import json, sys, tempfile, time
from pathlib import Path
import numpy as np
from sidecar.stores.vectors import VectorStore
rows, edits = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(1)
vecs = rng.standard_normal((rows + edits, 384)).astype(np.float32)
vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
with tempfile.TemporaryDirectory() as tmp:
    store = VectorStore(Path(tmp), "bench@1", 384, "mean")
    store.add([(f"c{i}", f"vault/n{i}", "vault", "") for i in range(rows)], vecs[:rows])
    store.search(vecs[0], 10)  # the centre is taken (and kept) now
    times = []
    for i in range(edits):
        t0 = time.perf_counter()
        store.delete_keys([f"vault/n{i}"])
        store.add([(f"e{i}", f"vault/n{i}", "vault", "")], vecs[rows + i : rows + i + 1])
        times.append((time.perf_counter() - t0) * 1000)
print(json.dumps(times))
"""


def one_run(code: Path, rows: int, edits: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-P", "-c", _ONE_RUN, str(rows), str(edits)],
        env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    )
    return list(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--edits", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    codes = {"old": args.old_code.resolve(), "new": ROOT}
    times: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 else ("new", "old"):
            times[name] += one_run(codes[name], args.rows, args.edits)
    result: dict[str, Any] = {
        name: {
            "p50_ms": pct(v, 0.5),
            "p90_ms": pct(v, 0.9),
            "mean_ms": round(sum(v) / len(v), 1),
            "n": len(v),
        }
        for name, v in times.items()
    }
    result["rows"], result["edits_per_round"], result["rounds"] = args.rows, args.edits, args.rounds
    emit(result, args.out)


if __name__ == "__main__":
    main()
