"""Source boosts on labeled sets that have a wiki: what a preference for curated pages costs the
questions whose answer is a plain vault note, and what it gains the others.

No labeled corpus here has a wiki, so one folder of a kept ``eval.py --work`` vault plays it: the
daemon answers every question with all source factors 1.0 (the limits ``eval.py`` asks with), and each form of
preference below re-ranks those hits offline, treating the hits of that folder as wiki pages. A
source factor multiplies a hit's final score (every rule after fusion is a product or a sum within
one note, whose chunks share a source), so re-ranking the unboosted hits is what the daemon would
answer with those factors; the additive forms are applied the same way, to the final score.

    python bench/boosts.py --work W/de-e5 --wiki rustbook --wiki help --wiki tldr \\
        --questions bench/questions-de.jsonl --questions bench/questions-blind-de.jsonl \\
        --questions bench/questions-blind-short-de.jsonl --out bench/out/boosts-de
    python bench/boosts.py --work W/help-e5 --wiki en/Plugins --questions bench/questions-help.jsonl ...

``--model minilm`` for a MiniLM work folder (the daemon must run the model its index was built
with). The hits are kept in ``OUT/hits-<set>.json``; ``--reuse`` scores them again without a daemon.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import bench_daemon
from eval import merged, metrics

MODELS: dict[str, dict[str, Any]] = {"e5": {}, "minilm": {"embedder": {"model": "all-MiniLM-L6-v2"}}}
# As eval.py asks (a larger limit fetches more candidates, which moves the figures a little); a
# hit past these limits could rise into the top 10 only by a factor above 2.
SEARCH = {"limit": 30}
RECALL = {"limit": 20, "minScore": 0.0}
FLAT = {"search": {"boosts": {"vault": 1.0, "wiki": 1.0, "memory": 1.0}}}

# A form maps (score, relevance, is_wiki) to the score that orders the hits.
Form = Callable[[float, float, bool], float]


def product(wiki: float, vault: float) -> Form:
    return lambda s, r, w: s * (wiki if w else vault)


def offset(margin: float) -> Form:
    """The wiki page wins by ``margin`` of score, whatever the scores: a fixed lead, not a ratio."""
    return lambda s, r, w: s + (margin if w else 0.0)


def near(wiki: float, vault: float) -> Form:
    """The factors' lead applied to a hit's score only as far as it is relevant: the ratio
    shrinks to none as relevance falls to 0 (boost ** relevance)."""
    return lambda s, r, w: s * (wiki if w else vault) ** max(0.0, min(1.0, r))


FORMS: dict[str, Form] = {
    "none (1.0 / 1.0)": product(1.0, 1.0),
    "seed product 1.4 / 0.65": product(1.4, 0.65),
    "product 1.2 / 0.8": product(1.2, 0.8),
    "product 1.15 / 0.9": product(1.15, 0.9),
    "product 1.3 / 1.0": product(1.3, 1.0),
    "product 1.2 / 1.0": product(1.2, 1.0),
    "product 1.15 / 1.0": product(1.15, 1.0),
    "product 1.1 / 1.0": product(1.1, 1.0),
    "product 1.05 / 1.0": product(1.05, 1.0),
    "offset +0.02": offset(0.02),
    "offset +0.05": offset(0.05),
    "offset +0.1": offset(0.1),
    "relevance-scaled 1.4 / 0.65": near(1.4, 0.65),
}


def ask(work: Path, model: str, sets: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Every question of every set through the daemon with flat source factors: per set, per
    question, its expected references and its hits (reference, score, relevance)."""
    config = work / "boosts.yaml"
    config.write_text(json.dumps(merged(MODELS[model], FLAT)))
    d = bench_daemon(work / "vault", work / "home", args=["--config", str(config)])
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        d.wait_ready(timeout=7200, poll=2, verbose=True)
        for path in sets:
            rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
            answers = []
            for row in rows:
                if row.get("context"):
                    r = d.call("recall", {"message": row["q"], "history": row["context"], **RECALL})
                else:
                    r = d.call("search", {"query": row["q"], **SEARCH})
                hits = [
                    {"reference": h["reference"], "score": h["score"], "relevance": h.get("relevance", 0.0)}
                    for h in r["hits"]
                ]
                answers.append({"expected": row["expected"], "hits": hits})
            out[path.stem.removeprefix("questions-")] = answers
    finally:
        d.stop()
    return out


def under(reference: str, folder: str) -> bool:
    return reference.startswith(f"vault/{folder.strip('/')}/")


def score(answers: list[dict[str, Any]], form: Form, wiki: str) -> dict[str, dict[str, float]]:
    """Mean hit@1 / hit@5 / MRR@10 over all questions and split by where the answer lies."""
    groups: dict[str, list[dict[str, float]]] = {"all": [], "answer in wiki": [], "answer in vault": []}
    for a in answers:
        ranked = sorted(
            a["hits"], key=lambda h: -form(h["score"], h["relevance"], under(h["reference"], wiki))
        )
        refs = list(dict.fromkeys(h["reference"] for h in ranked))
        m = metrics(refs, dict.fromkeys(a["expected"], 1))
        side = "answer in wiki" if any(under(e, wiki) for e in a["expected"]) else "answer in vault"
        groups["all"].append(m)
        groups[side].append(m)
    return {
        g: {k: round(sum(m[k] for m in ms) / len(ms), 3) for k in ("hit@1", "hit@5", "mrr@10")}
        | {"n": len(ms)}
        for g, ms in groups.items()
        if ms
    }


def table(answers: dict[str, list[dict[str, Any]]], wiki: str) -> str:
    lines = [f"### `{wiki}/` as the wiki", ""]
    head = "| form | " + " | ".join(f"{s}: all / answer in wiki / in vault" for s in answers) + " |"
    lines += [head, "| --- |" + " --- |" * len(answers)]
    for name, form in FORMS.items():
        cells = []
        for answers_of_set in answers.values():
            r = score(answers_of_set, form, wiki)
            cells.append(
                " / ".join(
                    f"{r[g]['mrr@10']:.3f}" for g in ("all", "answer in wiki", "answer in vault") if g in r
                )
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    sizes = {s: score(a, FORMS["none (1.0 / 1.0)"], wiki) for s, a in answers.items()}
    lines += [
        "",
        "MRR@10; questions per set (all / wiki / vault): "
        + ", ".join(
            f"{s} "
            + " / ".join(str(r.get(g, {}).get("n", 0)) for g in ("all", "answer in wiki", "answer in vault"))
            for s, r in sizes.items()
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="a kept eval.py --work folder (vault + home)")
    p.add_argument("--model", choices=sorted(MODELS), default="e5")
    p.add_argument("--questions", type=Path, action="append", required=True)
    p.add_argument("--wiki", action="append", required=True, help="folder of the vault that plays the wiki")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reuse", action="store_true", help="score the kept hits again, no daemon")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kept = args.out / "hits.json"
    if args.reuse:
        answers = json.loads(kept.read_text())
    else:
        answers = ask(args.work.resolve(), args.model, args.questions)
        kept.write_text(json.dumps(answers))
    report = "\n".join(table(answers, w) for w in args.wiki)
    (args.out / "boosts.md").write_text(report)
    print(report)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
