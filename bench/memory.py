"""Where the embedder's memory goes: model load with and without constant folding and as the
int8-kernel copy that ``sidecar.model.int8prep`` makes (and after giving freed pages back), one-text
query latency, and the transient peak of one inference batch by batch shape. Each case runs in a
fresh subprocess so RSS figures do not mix.

    python bench/memory.py --out bench/out/memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import emit

from sidecar.model.int8prep import ensure_prepared
from sidecar.model.locate import bundled_model_files

CASE = r"""
import json, sys, threading, time
import numpy as np
from sidecar.runtime import heap
heap.tune()
import onnxruntime as ort
from sidecar.model.locate import bundled_model_files

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) / 1024
peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], anon()); time.sleep(0.003)
threading.Thread(target=sample, daemon=True).start()

mode, batch, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fold = mode != "nofold"
files = bundled_model_files()
source = sys.argv[4] if mode == "int8" else str(files.onnx)
opts = ort.SessionOptions()
opts.enable_cpu_mem_arena = False
opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
kw = {} if fold else {"disabled_optimizers": ["ConstantFolding"]}
base = anon()
s = ort.InferenceSession(open(source, "rb").read(), opts, providers=["CPUExecutionProvider"], **kw)
loaded = anon() - base
heap.trim()
trimmed = anon() - base
def feeds(b, n):
    ids = np.full((b, n), 2000, dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
q = feeds(1, 10)
s.run(None, q)
t0 = time.perf_counter()
for _ in range(30):
    s.run(None, q)
query_ms = (time.perf_counter() - t0) / 30 * 1000
f = feeds(batch, length)
s.run(None, f)
time.sleep(0.05)
before = anon(); peak[0] = before
t0 = time.perf_counter()
for _ in range(3):
    s.run(None, f)
per_text_ms = (time.perf_counter() - t0) / 3 / batch * 1000
time.sleep(0.05)
print(json.dumps({"mode": mode, "batch": batch, "length": length, "load_mb": round(loaded),
    "after_trim_mb": round(trimmed), "query_ms": round(query_ms, 2),
    "batch_peak_mb": round(peak[0] - before), "per_text_ms": round(per_text_ms, 1)}))
"""


def run(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CASE, *args], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    files = bundled_model_files()
    assert files is not None
    with tempfile.TemporaryDirectory() as tmp:
        prepared = ensure_prepared(files.onnx, Path(tmp) / "model.onnx")
        assert prepared is not None
        cases = [run("nofold", "4", "200")]
        for mode in ("fold", "int8"):
            cases += [run(mode, str(b), "200", str(prepared)) for b in (1, 2, 4, 6, 10, 16)]
            cases += [run(mode, str(b), "64", str(prepared)) for b in (8, 32)]
    emit({"cases": cases}, args.out)


if __name__ == "__main__":
    main()
