"""recall's gate on a kept index: how many questions get their right page among recall's hits (no
history), and how many off-topic messages inject anything, per (recall.minSimilarity,
recall.scoreFloor) pair.

    python bench/recallgate.py --work W/help-e5 --questions bench/questions-help2.jsonl,... \\
        --offtopic bench/offtopic.txt,bench/offtopic-de.txt,... --pairs 0.4/0.35,0.35/0.3 [--model minilm]

One daemon on the ``eval.py --work`` folder's vault and home; each pair is applied by rewriting its
configuration and ``reload``. Questions with a ``context`` (follow-ups) are left out: ``eval.py``
measures those through recall already.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import bench_daemon
from nothing import config_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--questions", required=True, help="comma-separated question files")
    ap.add_argument("--offtopic", required=True, help="comma-separated message files")
    ap.add_argument("--pairs", default="0.4/0.35,0.35/0.3", help="minSimilarity/scoreFloor,...")
    ap.add_argument("--model", choices=("e5", "minilm"), default="e5")
    args = ap.parse_args()
    model = config_for(args.model)
    questions = [
        row
        for f in args.questions.split(",")
        for line in Path(f).read_text().splitlines()
        if line.strip() and not (row := json.loads(line)).get("context")
    ]
    messages = [
        m.strip() for f in args.offtopic.split(",") for m in Path(f).read_text().splitlines() if m.strip()
    ]
    config = args.work / "recallgate.yaml"
    config.write_text(json.dumps(model))
    d = bench_daemon(args.work / "vault", args.work / "home", args=["--config", str(config)])
    out = []
    try:
        d.wait_ready(timeout=3600, poll=1)
        for pair in args.pairs.split(","):
            similarity, floor = (float(x) for x in pair.split("/"))
            config.write_text(
                json.dumps({**model, "recall": {"minSimilarity": similarity, "scoreFloor": floor}})
            )
            d.call("reload")
            right = sum(
                any(
                    e in {h["reference"] for h in d.call("recall", {"message": q["q"]})["hits"]}
                    for e in q["expected"]
                )
                for q in questions
            )
            leaked = [m for m in messages if d.call("recall", {"message": m})["context"]]
            row = {
                "minSimilarity": similarity,
                "scoreFloor": floor,
                "right_page_in_recall": right,
                "questions": len(questions),
                "leaked": len(leaked),
                "messages": len(messages),
                "leaked_messages": leaked,
            }
            out.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    finally:
        d.stop()


if __name__ == "__main__":
    main()
