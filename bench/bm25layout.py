"""Offline: the keyword arm alone over a kept evaluation index, with the chunk's fields laid out
and weighed in other ways, in seconds per variant and without a daemon.

    python bench/bm25layout.py HOME --questions bench/questions-de.jsonl [--variant NAME ...]
    python bench/bm25layout.py HOME --beir ../shared/eval/scifact

HOME is the ``home`` folder of an ``eval.py --work`` folder; its manifest's chunks (title,
aliases, heading path, text) are written into a fresh Tantivy index in a temporary folder per
variant, with sidecar's own analyzers. A note is ranked by its best chunk, the query is the
message's content words (a follow-up's turns added as words; no rules, no boosts), so the figures
sit near the daemon's BM25 arm but not on it: compare the variants with each other.

Variants: ``separate`` is the layout before the twelfth session (title 2.0, a headings field 1.5,
body 1.0, English- and German-stemmed copies 0.5 each); ``headings-in-body`` is today's (the
heading path is part of the body, title 1.0); ``all-in-body`` puts the title there too; the
``*-tN`` forms change the title weight, ``body-*`` the weights of the three copies of the body.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

import tantivy
from eval import load_beir, metrics
from levers import score

from sidecar.search.query import analyze
from sidecar.search.querywords import bm25_text
from sidecar.stores import bm25 as kw
from sidecar.stores import bm25_text as kt
from sidecar.stores.cjk import bigrams

Chunk = tuple[str, str, str, str, str]  # chunk id, note key, title + aliases, heading path, text
Layout = Callable[[str, str, str], tuple[str, str, str]]  # -> title, headings field, body

LAYOUTS: dict[str, Layout] = {
    "separate": lambda t, h, x: (t, h, x),
    "headings-in-body": lambda t, h, x: (t, "", f"{h}\n{x}"),
    "all-in-body": lambda t, h, x: (t, "", f"{t}\n{h}\n{x}"),
}
_BODY = {"body": 1.0, "body_en": 0.5, "body_de": 0.5}
_T1 = {"title": 1.0, "headings": 0.0}
VARIANTS: dict[str, tuple[str, dict[str, float]]] = {
    "separate": ("separate", {"title": 2.0, "headings": 1.5, **_BODY}),
    "separate-t0.5-h0.5": ("separate", {"title": 0.5, "headings": 0.5, **_BODY}),
    "headings-in-body": ("headings-in-body", {"title": 1.0, "headings": 0.0, **_BODY}),
    "headings-in-body-t0.5": ("headings-in-body", {"title": 0.5, "headings": 0.0, **_BODY}),
    "headings-in-body-t2": ("headings-in-body", {"title": 2.0, "headings": 0.0, **_BODY}),
    "all-in-body-t0": ("all-in-body", {"title": 0.0, "headings": 0.0, **_BODY}),
    "all-in-body-t1": ("all-in-body", {"title": 1.0, "headings": 0.0, **_BODY}),
    "body-0.5-en1-de0.5": ("headings-in-body", {**_T1, **_BODY, "body": 0.5, "body_en": 1.0}),
    "body-0.5-en0.5-de1": ("headings-in-body", {**_T1, **_BODY, "body": 0.5, "body_de": 1.0}),
}  # fmt: skip


def load_chunks(home: Path) -> list[Chunk]:
    db = sqlite3.connect(f"file:{home}/index/manifest.sqlite?mode=ro", uri=True)
    rows = db.execute(
        "SELECT c.chunk_id, c.key, f.title, f.front_matter, c.headings, c.text"
        " FROM chunks c JOIN files f USING (key)"
    ).fetchall()
    out = []
    for cid, key, title, front, heads, text in rows:
        aliases = json.loads(front or "{}").get("aliases") or []
        aliases = [aliases] if isinstance(aliases, str) else aliases
        out.append((cid, key, " ".join([title, *map(str, aliases)]), " ".join(json.loads(heads)), text))
    return out


def build(chunks: list[Chunk], layout: Layout, boosts: dict[str, float]) -> kw.Bm25Index:
    """A fresh index of ``chunks``: sidecar's analyzers and query code, this variant's fields."""
    kt.FIELD_ANALYZER["headings"] = kt.ANALYZER  # the field the old layout had
    kt.FIELD_BOOSTS.clear()
    kt.FIELD_BOOSTS.update(boosts)
    index = kw.Bm25Index(Path(tempfile.mkdtemp()))
    writer = index._chunks.writer  # the chunk index alone: this script ranks by chunks
    for cid, key, title, heads, text in chunks:
        t, h, body = layout(title, heads, text)
        body = bigrams(body)
        doc = {"title": bigrams(t), "headings": bigrams(h), "body": body, "body_en": body}
        writer.add_document(
            tantivy.Document(
                chunk_id=cid, key=key, source="vault", agent="", body_de=kt.german_fold(body), **doc
            )
        )
    index._chunks.dirty = True  # written past the index's own methods: committed all the same
    index.commit()
    return index


def ranked_notes(index: kw.Bm25Index, text: str, key_of: dict[str, str]) -> list[str]:
    return list(dict.fromkeys(key_of[cid] for cid, _ in index.search(text, 200)))


def score_questions(index: kw.Bm25Index, chunks: list[Chunk], path: Path) -> str:
    key_of = {c[0]: c[1] for c in chunks}
    questions = [json.loads(line) for line in path.open(encoding="utf-8")]
    texts = [
        " ".join([bm25_text(analyze(q["q"])), *(bm25_text(analyze(t)) for t in q.get("context", []))])
        for q in questions
    ]
    # A note's score is minus its rank: levers.score orders by score, so the order stays BM25's.
    return score(
        questions, texts, lambda text: {k: -i for i, k in enumerate(ranked_notes(index, text, key_of))}
    )


def score_beir(index: kw.Bm25Index, chunks: list[Chunk], folder: Path) -> str:
    _corpus, queries, qrels = load_beir(folder)
    key_of = {c[0]: c[1] for c in chunks}
    got = [
        metrics(
            [k.split("/", 1)[1] for k in ranked_notes(index, bm25_text(analyze(queries[q])), key_of)], rel
        )["ndcg@10"]
        for q, rel in qrels.items()
        if q in queries
    ]
    return f"nDCG@10 {sum(got) / len(got):.4f} ({len(got)} queries)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("home", type=Path)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--questions", type=Path, action="append", default=[])
    group.add_argument("--beir", type=Path)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS), default=[])
    args = ap.parse_args()
    chunks = load_chunks(args.home)
    for name in args.variant or list(VARIANTS):
        layout, boosts = VARIANTS[name]
        index = build(chunks, LAYOUTS[layout], boosts)
        if args.beir:
            print(name.ljust(22), score_beir(index, chunks, args.beir), flush=True)
        for path in args.questions:
            print(name.ljust(22), path.name, score_questions(index, chunks, path), flush=True)
        index.close()


if __name__ == "__main__":
    main()
