"""recall's gate on a kept index: how many questions get their right page among recall's hits, and
how many off-topic messages inject anything, per (recall.minSimilarity, recall.scoreFloor) pair,
in all and per file.

    python bench/recallgate.py --work W/help-e5 --questions bench/questions-help2.jsonl,... \\
        --offtopic bench/offtopic.txt,bench/offtopic-de.txt,... --pairs 0.4/0.35,0.35/0.3 [--model minilm] \\
        [--dump OUT.jsonl] [--set search.key=value]

One daemon on the ``eval.py --work`` folder's vault and home; each pair is applied by rewriting its
configuration and ``reload``. Questions with a ``context`` (follow-ups) are asked with their turns
as recall's history and counted apart (``followups``). ``--dump`` writes every recall answer of
the first pair with ``preview`` (hits, and the candidates the gates dropped where the daemon
reports them), one JSON line per message, for reading a gate's cases offline.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from common import bench_daemon
from eval import merged, setting
from nothing import config_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--questions", required=True, help="comma-separated question files")
    ap.add_argument("--offtopic", required=True, help="comma-separated message files")
    ap.add_argument("--pairs", default="0.4/0.35,0.35/0.3", help="minSimilarity/scoreFloor,...")
    ap.add_argument("--model", choices=("e5", "minilm"), default="e5")
    ap.add_argument("--dump", type=Path, help="every answer of the first pair, one JSON line each")
    ap.add_argument("--set", action="append", default=[], help="section.key=value added to the configuration")
    args = ap.parse_args()
    model = merged(config_for(args.model), *(setting(s) for s in args.set))
    questions = [
        {**json.loads(line), "file": Path(f).name}
        for f in args.questions.split(",")
        for line in Path(f).read_text().splitlines()
        if line.strip()
    ]
    messages = [
        (Path(f).name, m.strip())
        for f in args.offtopic.split(",")
        for m in Path(f).read_text().splitlines()
        if m.strip()
    ]
    config = args.work / "recallgate.yaml"
    config.write_text(json.dumps(model))
    d = bench_daemon(args.work / "vault", args.work / "home", args=["--config", str(config)])
    dump = args.dump.open("w", encoding="utf-8") if args.dump else None
    try:
        d.wait_ready(timeout=3600, poll=1)
        for i, pair in enumerate(args.pairs.split(",")):
            similarity, floor = (float(x) for x in pair.split("/"))
            config.write_text(
                json.dumps(merged(model, {"recall": {"minSimilarity": similarity, "scoreFloor": floor}}))
            )
            d.call("reload")

            def ask(message: str, history: list[str], row: dict[str, Any], first: bool = i == 0) -> Any:
                r = d.call("recall", {"message": message, "history": history, "preview": True})
                if first and dump is not None:
                    dump.write(json.dumps({**row, "answer": r}, ensure_ascii=False) + "\n")
                return r

            per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            missed: list[str] = []
            for q in questions:
                r = ask(q["q"], q.get("context", []), q)
                got = bool(set(q["expected"]) & {h["reference"] for h in r["hits"]})
                key = q["file"] + (" (follow-ups)" if q.get("context") else "")
                per[key][0] += got
                per[key][1] += 1
                if not got:
                    missed.append(q["q"])
            leaked: dict[str, list[str]] = defaultdict(list)
            for name, m in messages:
                if ask(m, [], {"offtopic": name, "q": m})["context"]:
                    leaked[name].append(m)
            plain = [v for k, v in per.items() if not k.endswith("(follow-ups)")]
            follow = [v for k, v in per.items() if k.endswith("(follow-ups)")]
            row = {
                "minSimilarity": similarity,
                "scoreFloor": floor,
                "right_page_in_recall": sum(v[0] for v in plain),
                "questions": sum(v[1] for v in plain),
                "followups_right": sum(v[0] for v in follow),
                "followups": sum(v[1] for v in follow),
                "leaked": sum(len(v) for v in leaked.values()),
                "messages": len(messages),
                "per_set": {k: f"{v[0]}/{v[1]}" for k, v in per.items()},
                "leaked_per_set": {
                    name: f"{len(leaked.get(name, []))}/{sum(1 for n, _ in messages if n == name)}"
                    for name in dict.fromkeys(n for n, _ in messages)
                },
                "leaked_messages": [m for v in leaked.values() for m in v],
                "missed_questions": missed,
            }
            print(json.dumps(row, ensure_ascii=False), flush=True)
    finally:
        if dump is not None:
            dump.close()
        d.stop()


if __name__ == "__main__":
    main()
