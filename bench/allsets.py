"""Every labeled set in one run, for one model: the tuned-on and the blind question sets, SciFact,
XQuAD-de (and optionally XQuAD-en and the identifiers set), each through ``eval.py`` on a kept
index, then one table of MRR@10 (nDCG@10 for the BEIR-form sets) per arm and sweep value, with the
reciprocal ranks each value gains over the question sets ("net"). How BENCHMARKS.md compares
ranking changes since the sixteenth session:

    python bench/allsets.py --work W --model e5 --sweep search.vectorWeight=0.6,0.65
    python bench/allsets.py --work W --model minilm --only de,help,scifact --out bench/out/all-minilm

W holds one ``eval.py --work`` folder per corpus and model (``help-e5``, ``de-e5``, ``scifact-e5``,
``xqde-e5``, ``xqen-e5``, ``ids-e5``, ``lang-e5``; ``-minilm`` likewise): the first run builds
them (which takes as long as indexing each corpus), later runs reuse them. Corpora come from
``../shared/eval``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
HELP = EVAL / "vaults" / "obsidian-help"
GERMAN_VAULTS = [
    "--vault",
    f"tldr={EVAL / 'vaults' / 'tldr-pages-de'}",
    "--vault",
    f"rustbook={EVAL / 'vaults' / 'rustbook-de'}",
    "--vault",
    f"help={HELP}:de",
]
HELP_VAULT = ["--vault", str(HELP), "--subset", "en,de"]
# The help vault's "teams" permalink section (its smallest section of more than one page) in all of
# its 34 languages; each folder is one language, so the share of the question's language is counted.
TEAMS_34 = ["--vault", str(HELP), "--permalink", "teams", "--language-folders"]
MODELS = {"e5": [], "minilm": ["--set", "embedder.model=all-MiniLM-L6-v2"]}

# name -> (eval.py command and its input, corpus folder prefix, questions counted in "net")
SETS: dict[str, tuple[list[str], str, bool]] = {
    "de": (["questions", "bench/questions-de.jsonl", *GERMAN_VAULTS], "de", True),
    "blind-de": (["questions", "bench/questions-blind-de.jsonl", *GERMAN_VAULTS], "de", True),
    "short-de": (["questions", "bench/questions-blind-short-de.jsonl", *GERMAN_VAULTS], "de", True),
    "ascii-de": (["questions", "bench/questions-ascii-de.jsonl", *GERMAN_VAULTS], "de", True),
    "compound-de": (["questions", "bench/questions-compound-de.jsonl", *GERMAN_VAULTS], "de", True),
    "separable-de": (["questions", "bench/questions-separable-de.jsonl", *GERMAN_VAULTS], "de", True),
    "inflected-de": (["questions", "bench/questions-inflected-de.jsonl", *GERMAN_VAULTS], "de", True),
    # the help sets' English questions with their German pages (bench/endequestions.py writes it)
    "en-de": (["questions", "bench/questions-en-de.jsonl", *GERMAN_VAULTS], "de", True),
    # questions that search by a name (people, places, products, commands)
    "names-de": (["questions", "bench/questions-names-de.jsonl", *GERMAN_VAULTS], "de", True),
    # questions about one page with a word that names another page (its "tempting" neighbour)
    "neighbour-de": (["questions", "bench/questions-neighbour-de.jsonl", *GERMAN_VAULTS], "de", True),
    "help": (["questions", "bench/questions-help.jsonl", *HELP_VAULT], "help", True),
    "help2": (["questions", "bench/questions-help2.jsonl", *HELP_VAULT], "help", True),
    "blind-help": (["questions", "bench/questions-blind-help.jsonl", *HELP_VAULT], "help", True),
    "short-help": (["questions", "bench/questions-blind-short-help.jsonl", *HELP_VAULT], "help", True),
    "aliases": (["questions", "bench/questions-aliases.jsonl", *HELP_VAULT], "help", True),
    "inflected-en": (["questions", "bench/questions-inflected-en.jsonl", *HELP_VAULT], "help", True),
    "names-help": (["questions", "bench/questions-names-help.jsonl", *HELP_VAULT], "help", True),
    "neighbour-help": (["questions", "bench/questions-neighbour-help.jsonl", *HELP_VAULT], "help", True),
    "lang": (["questions", "bench/questions-lang.jsonl", *TEAMS_34], "lang", True),
    "scifact": (["beir", str(EVAL / "scifact")], "scifact", False),
    "xqde": (["beir", str(EVAL / "xquad-de")], "xqde", False),
    "xqen": (["beir", str(EVAL / "xquad-en")], "xqen", False),
    "ids": (["identifiers", *HELP_VAULT], "ids", False),
}
DEFAULT_SETS = "de,blind-de,short-de,help,help2,blind-help,short-help,scifact,xqde"


def run_set(name: str, work: Path, model: str, out: Path, extra: list[str]) -> dict[str, Any]:
    command, corpus, _ = SETS[name]
    result = out / f"{name}.json"
    cmd = [sys.executable, str(ROOT / "bench" / "eval.py"), *command]
    cmd += ["--work", str(work / f"{corpus}-{model}"), *MODELS[model], "--arms", "hybrid"]
    cmd += ["--out", str(result), "--misses", str(out / f"{name}.misses.jsonl"), *extra]
    with (out / f"{name}.log").open("w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return json.loads(result.read_text())


def figure(name: str, arm: dict[str, Any]) -> float:
    """MRR@10 for question sets, nDCG@10 for the BEIR-form ones (their first relevant document
    is not the whole story)."""
    return float(arm["ndcg@10"] if SETS[name][0][0] == "beir" else arm["mrr@10"])


def language_table(results: dict[str, dict[str, Any]]) -> str:
    """For the sets that count languages: hit@5, MRR@10 (the question's language only), the share of
    the question's language in the top ten and the expected pages' translations in it, per arm."""
    lines = []
    for name, res in results.items():
        for arm, summary in res.items():
            if isinstance(summary, dict) and "lang@10" in summary:
                if not lines:
                    head = "| set | arm | hit@5 | MRR@10 | lang@10 | translations@10 |"
                    lines = [head, "| --- | --- |" + " ---: |" * 4]
                figures = (summary[k] for k in ("hit@5", "mrr@10", "lang@10", "translations@10"))
                lines.append(f"| {name} | {arm} | " + " | ".join(f"{v:.3f}" for v in figures) + " |")
    return "\n".join(lines)


def limit_table(results: dict[str, dict[str, Any]]) -> str:
    """With ``--limit-check``: per set and arm, the searches whose first ten hits at limit 30 are
    not the answer at limit 10 (other notes or their order; other hits or order; other scores),
    of the searches asked."""
    lines = []
    for name, res in results.items():
        for arm, summary in res.items():
            dependent = summary.get("limit_dependent") if isinstance(summary, dict) else None
            if dependent:
                if not lines:
                    lines = [
                        "| set | arm | searches | pages differ | hits differ | scores differ |",
                        "| --- | --- |" + " ---: |" * 4,
                    ]
                figures = (dependent[k] for k in ("searches", "pages", "order", "scores"))
                lines.append(f"| {name} | {arm} | " + " | ".join(map(str, figures)) + " |")
    return "\n".join(lines)


def table(results: dict[str, dict[str, Any]]) -> str:
    """Rows per arm or sweep value; "net" = reciprocal ranks gained against the hybrid default
    over the question sets (MRR difference × questions)."""
    names = list(results)
    rows: dict[str, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for name, res in results.items():
        for arm, summary in res.items():
            if isinstance(summary, dict) and "mrr@10" in summary:
                rows.setdefault(arm, {})[name] = figure(name, summary)
                if SETS[name][2]:
                    sizes[name] = int(summary["queries"])
    base = rows.get("hybrid", {})
    lines = ["| | " + " | ".join(names) + " | net |", "| --- |" + " ---: |" * (len(names) + 1)]
    for arm, row in rows.items():
        net = sum((row[n] - base[n]) * sizes[n] for n in sizes if n in row and n in base)
        cells = " | ".join(f"{row[n]:.3f}" if n in row else "-" for n in names)
        lines.append(f"| {arm} | {cells} | {net:+.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="folder of the kept eval.py --work folders")
    ap.add_argument("--model", choices=sorted(MODELS), default="e5")
    ap.add_argument("--only", default=DEFAULT_SETS, help=f"comma-separated sets of: {', '.join(SETS)}")
    ap.add_argument("--sweep", action="append", default=[], help="section.key=v1,v2: passed to eval.py")
    ap.add_argument("--set", action="append", default=[], help="section.key=value: passed to eval.py")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "allsets")
    ap.add_argument(
        "--limit-check",
        action="store_true",
        help="passed to eval.py: count the answers whose first ten differ between limit 10 and 30",
    )
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SETS]
    if unknown:
        ap.error(f"unknown set(s): {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    extra = [x for s in args.sweep for x in ("--sweep", s)] + [x for s in args.set for x in ("--set", s)]
    extra += ["--limit-check"] if args.limit_check else []
    results = {}
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = run_set(name, args.work, args.model, args.out, extra)
    text = table(results)
    languages = language_table(results)
    if languages:
        text += "\n\n" + languages
    limits = limit_table(results)
    if limits:
        text += "\n\n" + limits
    (args.out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
