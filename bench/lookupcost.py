"""What the unmatched-words look-ups of a search cost (``search.unmatchedKeywordCut``): for each
question, the real ``QueryPlan.unmatched_share`` (every content word counted in the body as
written, the title, both stemmed bodies and the folded title) timed in-process on a kept keyword
index, opened read-only, with no daemon and no model. The socket figure (``searchlat.py
--old-set search.unmatchedKeywordCut=0``) holds the query's embedding and every wait for a core;
this one the counts alone.

    python bench/lookupcost.py --index W/help-e5/home/index/bm25 --questions bench/questions-help2.jsonl

The first round warms the index's caches and is not counted. Each question's best round is
reported beside the quantiles of all rounds: on shared cores a single round's p95 is mostly the
process waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common import emit

from sidecar.search.query import analyze
from sidecar.search.query_plan import QueryPlan
from sidecar.stores.bm25 import open_bm25


def quantile(values: list[float], p: float) -> float:
    """The p-quantile (0..1), to a thousandth of a millisecond (common.pct rounds to a tenth)."""
    ordered = sorted(values)
    return round(ordered[max(0, int(len(ordered) * p) - 1)], 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, type=Path, help="a kept home's index/bm25 folder")
    ap.add_argument("--questions", required=True, type=Path, action="append", help="JSONL with 'q'")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    bm25 = open_bm25(args.index, read_only=True)
    # unmatched_share reads only its stores' keyword index: the plan's other state is not needed.
    plan: Any = SimpleNamespace(stores=SimpleNamespace(bm25=bm25))
    texts = [
        json.loads(line)["q"] for f in args.questions for line in f.read_text().splitlines() if line.strip()
    ]
    analyses = [analyze(t) for t in texts]
    every: list[float] = []
    best: dict[int, float] = {}
    for round_ in range(args.rounds + 1):
        for i, qa in enumerate(analyses):
            t = time.perf_counter()
            QueryPlan.unmatched_share(plan, qa)
            ms = (time.perf_counter() - t) * 1000
            if round_:  # the first round warms the caches
                every.append(ms)
                best[i] = min(best.get(i, ms), ms)
    words = sorted(len(set(qa.content_words)) for qa in analyses)
    result = {
        "index": str(args.index),
        "chunks": bm25.collection_size(),
        "questions": len(texts),
        "rounds": args.rounds,
        "content_words_median": words[len(words) // 2],
        "p50_ms": quantile(every, 0.5) if every else None,
        "p95_ms": quantile(every, 0.95) if every else None,
        "best_round_p50_ms": quantile(list(best.values()), 0.5) if best else None,
        "best_round_max_ms": round(max(best.values()), 3) if best else None,
        "load": [round(x, 1) for x in os.getloadavg()],
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
