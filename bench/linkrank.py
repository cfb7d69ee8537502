"""Does the link graph help ranking? Keyword-only search (no model) over a copy of a vault, the
question files' hits re-ranked by link signals, note-level hit@1 / hit@5 / MRR@10 per variant.

    python bench/linkrank.py --vault ../shared/eval/vaults/obsidian-help --subset en,de \
        bench/questions-help.jsonl bench/questions-help2.jsonl

Variants (each on the same top-30 notes of the shipped keyword ranking):
``cited``: a note gets ``1 + b * (top hits linking to it) / 10``, a lift for a page many top hits
link to; ``prior``: ``1 + b * log1p(backlinks) / log1p(max backlinks)``; ``hub``: damping
``1 / (1 + b * log1p(backlinks))`` for pages everything links to. Also counts backlinks of ten
pages independently (plain string search of the raw files) against the graph.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sidecar.config import load_config
from sidecar.daemon.compose import build
from sidecar.model.embedder import EmbedderSlot
from sidecar.notes.links import LinkGraph
from sidecar.search.query import Filters
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever


def metrics(rankings: list[list[str]], expected: list[set[str]]) -> dict[str, float]:
    n = len(rankings)
    h1 = sum(bool(r) and r[0] in e for r, e in zip(rankings, expected, strict=True)) / n
    h5 = sum(any(x in e for x in r[:5]) for r, e in zip(rankings, expected, strict=True)) / n
    mrr = 0.0
    for r, e in zip(rankings, expected, strict=True):
        mrr += next((1.0 / (i + 1) for i, x in enumerate(r[:10]) if x in e), 0.0)
    return {"hit@1": round(h1, 4), "hit@5": round(h5, 4), "mrr@10": round(mrr / n, 4)}


def independent_backlinks(vault: Path, pages: list[str]) -> dict[str, int]:
    """Per page key, the notes whose raw text (code removed) holds a link naming it, by plain
    string search: ``[[Name]]``, ``[[Name|``, ``[[Name\\|`` (tables), ``[[Name#``, ``/Name]]``...,
    ``(Name.md`` and ``(Name%20x.md`` (Markdown links). Knows nothing of the resolver."""
    texts = {}
    for p in vault.rglob("*.md"):
        t = p.read_text(encoding="utf-8", errors="replace")
        t = re.sub(r"(?ms)^(```|~~~).*?^\1", "", t)
        texts[p.relative_to(vault).with_suffix("").as_posix().lower()] = re.sub(r"`[^`\n]*`", "", t).lower()
    out = {}
    for key in pages:
        rel = key.split("/", 1)[1].lower()
        name = rel.rsplit("/", 1)[-1]
        pats = [f"[[{name}]]", f"[[{name}|", f"[[{name}\\|", f"[[{name}#", f"[[{name}.md", f"/{name}]]"]
        pats += [
            f"/{name}|",
            f"/{name}#",
            f"/{name}.md",
            f"({name}.md",
            f"({quote(name)}.md",
            f"/{quote(name)}.md",
        ]
        out[key] = sum(1 for r, t in texts.items() if r != rel and any(x in t for x in pats))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--subset", default="")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="linkrank-"))
    vault = tmp / "vault"
    for sub in [s for s in args.subset.split(",") if s] or ["."]:
        shutil.copytree(args.vault / sub, vault / sub, dirs_exist_ok=True)
    cfg = load_config(
        flags={"home": str(tmp / "home"), "vault.path": str(vault), "embedder.enabled": "false"}, env={}
    )
    slot = EmbedderSlot()
    slot.set_failed("keyword-only run")
    parts = build(cfg, slot)
    stores = parts.stores
    parts.indexer.sweep()
    graph = LinkGraph(stores.manifest.read)
    indeg = graph.backlink_counts()
    top_in = max(indeg.values(), default=1)
    out_links: dict[str, set[str]] = defaultdict(set)
    for src, dst in stores.manifest.read("SELECT src, dst FROM links WHERE dst IS NOT NULL AND dst != src"):
        out_links[src].add(dst)
    ranked = sorted(indeg.items(), key=lambda kv: -kv[1])
    pages = [k for k, _ in ranked[:5] + ranked[40:43] + ranked[100:102]]
    independent = independent_backlinks(vault, pages)
    backlinks = {k: {"graph": indeg[k], "independent": independent[k]} for k in pages}
    retriever = Retriever(stores, slot, cfg.search, cfg.recall)
    questions = [json.loads(line) for f in args.files for line in f.open(encoding="utf-8") if line.strip()]
    expected = [set(q["expected"]) for q in questions]
    base: list[list[tuple[str, float]]] = []
    for q in questions:
        req = SearchRequest(q["q"], 30, 0.0, None, None, Filters())
        seen: dict[str, float] = {}
        for h in retriever.search(req).hits:
            seen.setdefault(h.reference, h.score)
        base.append(list(seen.items()))
    result: dict[str, Any] = {"questions": len(questions), "notes": len(stores.manifest.file_states())}
    result["backlinks"] = backlinks
    result["backlinks_match"] = sum(v["graph"] == v["independent"] for v in backlinks.values())
    result["baseline"] = metrics([[k for k, _ in r] for r in base], expected)

    def rerank(factor: Any) -> list[list[str]]:
        out = []
        for r in base:
            top = [k for k, _ in r[:10]]
            scored = [(k, s * factor(k, top)) for k, s in r]
            out.append([k for k, _ in sorted(scored, key=lambda x: -x[1])])
        return out

    for b in (0.1, 0.2, 0.4):
        result[f"cited b={b}"] = metrics(
            rerank(lambda k, top, b=b: 1 + b * sum(k in out_links[t] for t in top if t != k) / 10), expected
        )
        result[f"prior b={b}"] = metrics(
            rerank(lambda k, _top, b=b: 1 + b * math.log1p(indeg.get(k, 0)) / math.log1p(top_in)), expected
        )
        result[f"hub b={b}"] = metrics(
            rerank(lambda k, _top, b=b: 1 / (1 + b * math.log1p(indeg.get(k, 0)))), expected
        )
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
