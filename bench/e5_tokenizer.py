"""multilingual-e5-small's two tokenizer files side by side, each in its own child process:
resident memory after ``load_model`` (VmRSS above the bare interpreter) and after 32 XQuAD-de
passages (the whole process), tokenising speed on all passages ("passage: " in front, best of 5;
one thread for sentencepiece, ``tokenizers``' own batch threads), tokenizer load time and the
longest stall of a 10 ms ticker thread during that load (the GIL held), a digest of the ids.

    .venv/bin/python bench/e5_tokenizer.py [--corpus ../shared/eval/xquad-de]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

VARIANTS = ("tokenizer.model", "tokenizer.json")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(variant: str, corpus: Path, cache: Path) -> dict[str, Any]:
    passages = [json.loads(line)["text"] for line in (corpus / "corpus.jsonl").open(encoding="utf-8")]
    base = rss_mb()
    from sidecar.config import load_config
    from sidecar.model.embedder import OnnxEmbedder
    from sidecar.model.files import ModelFiles
    from sidecar.model.locate import resolve_model
    from sidecar.model.tokenizer import make_tokenizer as _tokenizer

    env = {"SIDECAR_HOME": str(cache / "home"), "SIDECAR_EMBEDDER_CACHE_DIR": str(cache)}
    cfg = load_config(env={**env, "SIDECAR_EMBEDDER_THREADS": "1"})
    files = resolve_model(cfg)
    files = ModelFiles(files.onnx, files.onnx.parent / variant, files.origin, files.sha256, files.kernels)
    model = OnnxEmbedder(files, cfg.embedder, cfg.prepared_dir)
    loaded = rss_mb() - base
    model.embed_passages(passages[:32])
    after = rss_mb()  # the whole process, as BENCHMARKS.md's table gives it
    texts = ["passage: " + p for p in passages]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        ids = model.encode(texts)
        best = min(best, time.perf_counter() - t0)
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    _tokenizer(files.tokenizer)
    load_s = time.perf_counter() - t0
    done.set()
    ticker.join()
    return {
        "tokenizer": variant,
        "rss_after_load_mb": round(loaded, 1),
        "rss_after_32_passages_mb": round(after, 1),
        "ms_per_passage": round(best * 1000 / len(texts), 3),
        "tokens": sum(map(len, ids)),
        "ids_sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16],
        "tokenizer_load_s": round(load_s, 2),
        "longest_stall_s": round(max(gaps), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=Path("/work/shared/eval/xquad-de"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.corpus, args.cache)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-e5tok-") as tmp:
        from sidecar.config import load_config
        from sidecar.model.locate import resolve_model

        cache = Path(tmp)
        env = {"SIDECAR_HOME": str(cache / "home"), "SIDECAR_EMBEDDER_CACHE_DIR": tmp}
        resolve_model(load_config(env=env))  # converts once
        for variant in VARIANTS:
            cmd = [sys.executable, __file__, "--child", variant, "--cache", tmp, "--corpus", str(args.corpus)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            line = out.stdout.strip() or json.dumps({"tokenizer": variant, "error": out.stderr[-300:]})
            print(line, flush=True)


if __name__ == "__main__":
    main()
