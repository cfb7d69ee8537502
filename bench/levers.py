"""Offline levers on a kept evaluation index: the vector arm alone, without a daemon, so a change of
what the model reads or of the query can be tried in minutes before it is built into the code.

    python bench/levers.py embedtext HOME QUESTIONS --variant V             (re-embed: strip|dedup|lead)
    python bench/levers.py sentences HOME QUESTIONS                         (sentence vectors beside chunks)
    python bench/levers.py queries HOME QUESTIONS                           (full text / content words / mean)
    python bench/levers.py pages HOME QUESTIONS [--centroid]      (a whole-note vector beside chunks)
    python bench/levers.py cues                                             (follow-up cue on the own sets)

HOME is the ``home`` folder of an ``eval.py --work`` folder (its manifest, vector table and
converted model are read, never written). A note is ranked by its best chunk by plain cosine (no
hub damping, no histories, no BM25), so the figures sit below the daemon's vector arm: compare
variants with each other, not with BENCHMARKS' daemon figures. Prints hit@1 / hit@5 / MRR@10 per
``source`` of the question file.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from common import ROOT

from sidecar.config import load_config
from sidecar.model.embedder import OnnxEmbedder, load_model
from sidecar.search.query import analyze
from sidecar.stores.embedtext import joined_embed_text

Matrix = np.ndarray[Any, Any]
Q = TypeVar("Q")
_FENCE = re.compile(r"```.*?```", re.S)
_INLINE = re.compile(r"`[^`\n]+`")
_SENTENCE = re.compile(r"(?<=[.!?:])\s+|\n+")


def chunk_rows(home: Path) -> list[tuple[str, str, int, str, str, str]]:
    """Every chunk of the home's manifest in note order: (id, key, ord, model text, text, heading
    path as JSON). The manifest keeps the model's text as a head plus where in the text the rest
    starts (``embedtext``): the column ``embed_text`` alone is only that head."""
    db = sqlite3.connect(f"file:{home}/index/manifest.sqlite?mode=ro", uri=True)
    rows = db.execute(
        "SELECT chunk_id, key, ord, embed_text, text, embed_from, headings FROM chunks ORDER BY key, ord"
    ).fetchall()
    db.close()
    return [(c, k, o, joined_embed_text(e, t, start), t, h) for c, k, o, e, t, start, h in rows]


def open_home(home: Path) -> tuple[OnnxEmbedder, list[tuple[str, str, str, str]], dict[str, Matrix]]:
    """The home's model, its chunks (id, key, model text, text) and their stored vectors."""
    import lancedb

    model = load_model(load_config(flags={"home": str(home)}, env={}))
    rows = [(c, k, e, t) for c, k, _o, e, t, _h in chunk_rows(home)]
    store = lancedb.connect(str(home / "index" / "vectors"))
    listed = store.list_tables()
    names = listed.tables if hasattr(listed, "tables") else listed
    table = store.open_table(names[0]).to_arrow()
    ids = table["chunk_id"].to_pylist()
    vectors = table["vector"].to_numpy(zero_copy_only=False)
    return model, rows, {c: np.asarray(v, dtype=np.float32) for c, v in zip(ids, vectors, strict=True)}


def embed(model: OnnxEmbedder, texts: Sequence[str]) -> list[Matrix]:
    out: list[Matrix] = []
    for i in range(0, len(texts), 256):
        out.extend(np.asarray(v, dtype=np.float32) for v in model.embed_passages(texts[i : i + 256]))
    return out


def score(
    questions: list[dict[str, Any]],
    queries: Sequence[Q],
    note_scores: Callable[[Q], dict[str, float]],
) -> str:
    """hit@1 / hit@5 / MRR@10 overall and per source, a note ranked by its score for the
    question's query (a vector here, a text in bm25layout.py)."""
    per: dict[str, list[float]] = {}
    for q, qv in zip(questions, queries, strict=True):
        scores = note_scores(qv)
        ranked = sorted(scores, key=lambda k: -scores[k])[:10]
        rank = next((i + 1 for i, k in enumerate(ranked) if k in q["expected"]), None)
        for group in ("all", q.get("source", "-")):
            acc = per.setdefault(group, [0.0, 0.0, 0.0, 0.0])
            acc[0] += rank == 1
            acc[1] += bool(rank and rank <= 5)
            acc[2] += 1 / rank if rank else 0.0
            acc[3] += 1
    return "  ".join(
        f"{g} ({int(a[3])}) {a[0] / a[3]:.3f} / {a[1] / a[3]:.3f} / {a[2] / a[3]:.3f}" for g, a in per.items()
    )


def best_per_note(keys: Sequence[str], matrix: Matrix) -> Callable[[Matrix], dict[str, float]]:
    def run(qv: Matrix) -> dict[str, float]:
        best: dict[str, float] = {}
        for k, s in zip(keys, (matrix @ qv).tolist(), strict=True):
            if s > best.get(k, -9.0):
                best[k] = s
        return best

    return run


_LEAD_SKIP = re.compile(r"^\s*(#|```|\||<|!\[|---|>\s*\[!)")


def note_leads(home: Path) -> dict[str, str]:
    """Each note's lead: the first sentence of its first line of prose (at most 200 characters)."""
    db = sqlite3.connect(f"file:{home}/index/manifest.sqlite?mode=ro", uri=True)
    out: dict[str, str] = {}
    for key, text in db.execute("SELECT key, text FROM chunks WHERE ord = 0"):
        for raw in text.split("\n"):
            line = raw.strip()
            if len(line.split()) >= 4 and not _LEAD_SKIP.match(line):
                out[key] = _SENTENCE.split(line.lstrip(">-* ").strip())[0][:200]
                break
    return out


def lead_in(embed_text: str, lead: str) -> str:
    """The embed text with the note's lead after its first line (the title)."""
    head, _, rest = embed_text.partition("\n")
    return f"{head}\n{lead}\n{rest}" if lead and lead not in embed_text else embed_text


def strip_code(text: str) -> str:
    """The embed text without fenced and inline code (kept when little else is left)."""
    rest = "\n".join(line for line in _INLINE.sub(" ", _FENCE.sub(" ", text)).split("\n") if line.strip())
    return rest if len(rest.split()) >= 4 else text


def dedup(text: str) -> str:
    """The embed text without a line that repeats one of the prefix lines (title, heading path)."""
    out: list[str] = []
    for line in text.split("\n"):
        norm = line.strip("# ").strip()
        if out and norm and norm in {o.strip("# ").strip() for o in out[:4]}:
            continue
        out.append(line)
    return "\n".join(out)


def queries_of(
    model: OnnxEmbedder, questions: list[dict[str, Any]], text: Callable[[str], str]
) -> list[Matrix]:
    vectors = [np.asarray(model.embed_query(text(q["q"])), dtype=np.float32).reshape(-1) for q in questions]
    return [v / max(float(np.linalg.norm(v)), 1e-12) for v in vectors]


def cmd_embedtext(args: argparse.Namespace) -> None:
    model, rows, stored = open_home(args.home)
    questions = [json.loads(line) for line in args.questions.open(encoding="utf-8")]
    if args.variant == "lead":  # every chunk after the first gets its note's lead sentence
        leads = note_leads(args.home)
        fresh = [
            (c, lead_in(e, leads[k]))
            for c, k, o, e, _t, _h in chunk_rows(args.home)
            if o > 0 and leads.get(k)
        ]
    else:
        change = {"strip": strip_code, "dedup": dedup}[args.variant]
        fresh = [(c, change(e)) for c, _k, e, _t in rows if change(e) != e]
    print(f"re-embedding {len(fresh)} of {len(rows)} chunks", file=sys.stderr)
    new = dict(zip([c for c, _ in fresh], embed(model, [t for _, t in fresh]), strict=True))
    keys = [k for _c, k, _e, _t in rows]
    queries = queries_of(model, questions, lambda t: t)
    before = np.stack([stored[c] for c, *_ in rows])
    after = np.stack([new.get(c, stored[c]) for c, *_ in rows])
    print("stored  ", score(questions, queries, best_per_note(keys, before)))
    print(args.variant.ljust(8), score(questions, queries, best_per_note(keys, after)))


def cmd_sentences(args: argparse.Namespace) -> None:
    model, rows, stored = open_home(args.home)
    questions = [json.loads(line) for line in args.questions.open(encoding="utf-8")]
    seen: set[tuple[str, str]] = set()
    texts, skeys = [], []
    for _c, key, embed_text, text in rows:
        title = embed_text.split("\n", 1)[0]
        for raw in _SENTENCE.split(text):
            s = raw.strip(" ->#*`")
            if len(s.split()) >= 3 and (key, s) not in seen:
                seen.add((key, s))
                texts.append(f"{title}: {s}")
                skeys.append(key)
    print(f"embedding {len(texts)} sentences", file=sys.stderr)
    sentences = np.stack(embed(model, texts))
    chunk_best = best_per_note([k for _c, k, _e, _t in rows], np.stack([stored[c] for c, *_ in rows]))
    sentence_best = best_per_note(skeys, sentences)
    queries = queries_of(model, questions, lambda t: t)

    def blend(w: float) -> Callable[[Matrix], dict[str, float]]:
        def run(qv: Matrix) -> dict[str, float]:
            c, s = chunk_best(qv), sentence_best(qv)
            lo_c, lo_s = min(c.values()), min(s.values())
            return {k: w * c.get(k, lo_c) + (1 - w) * s.get(k, lo_s) for k in set(c) | set(s)}

        return run

    for w in (1.0, 0.0, 0.5, 0.7):
        print(f"chunk share {w}", score(questions, queries, blend(w)))


def note_texts(home: Path) -> dict[str, str]:
    """Each note's title and its chunks' lines in order, a line repeated by a chunk's overlap once."""
    out: dict[str, list[str]] = {}
    seen: dict[str, set[str]] = {}
    for _c, key, _o, embed_text, text, _h in chunk_rows(home):
        lines = out.setdefault(key, [embed_text.split("\n", 1)[0]])
        mine = seen.setdefault(key, set())
        for line in text.split("\n"):
            if line.strip() and line not in mine:
                mine.add(line)
                lines.append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def note_outlines(home: Path) -> dict[str, str]:
    """Each note's title, lead sentence and headings in order: what the whole page is about."""
    leads = note_leads(home)
    out: dict[str, list[str]] = {}
    for _c, key, _o, embed_text, _t, headings in chunk_rows(home):
        lines = out.setdefault(key, [embed_text.split("\n", 1)[0], leads.get(key, "")])
        for h in json.loads(headings or "[]"):
            if h and h not in lines:
                lines.append(h)
    return {k: "\n".join(x for x in v if x) for k, v in out.items()}


def cmd_pages(args: argparse.Namespace) -> None:
    model, rows, stored = open_home(args.home)
    questions = [json.loads(line) for line in args.questions.open(encoding="utf-8")]
    texts = note_outlines(args.home) if args.outline else note_texts(args.home)
    keys = sorted(texts)
    if args.first:  # the note's first chunk (title and opening) stands for the page: no embedding
        db = sqlite3.connect(f"file:{args.home}/index/manifest.sqlite?mode=ro", uri=True)
        pages = {k: stored[c] for c, k in db.execute("SELECT chunk_id, key FROM chunks WHERE ord = 0")}
    elif args.centroid:  # the mean of the note's chunk vectors: no embedding at all
        sums: dict[str, Matrix] = {}
        for c, k, _e, _t in rows:
            sums[k] = sums.get(k, 0) + stored[c]
        pages = {k: v / max(float(np.linalg.norm(v)), 1e-12) for k, v in sums.items()}
    else:
        print(f"embedding {len(keys)} notes", file=sys.stderr)
        pages = dict(zip(keys, embed(model, [texts[k] for k in keys]), strict=True))
    chunk_best = best_per_note([k for _c, k, _e, _t in rows], np.stack([stored[c] for c, *_ in rows]))
    page_matrix = np.stack([pages[k] for k in keys])
    room = model.cfg.max_length - 2
    fits = {k for k, n in zip(keys, model.count_tokens([texts[k] for k in keys]), strict=True) if n <= room}
    print(f"{len(fits)} of {len(keys)} notes fit in {room} tokens", file=sys.stderr)
    queries = queries_of(model, questions, lambda t: t)

    def blend(w: float, how: str) -> Callable[[Matrix], dict[str, float]]:
        def run(qv: Matrix) -> dict[str, float]:
            c = chunk_best(qv)
            p = dict(zip(keys, (page_matrix @ qv).tolist(), strict=True))
            if how == "max":
                return {k: max(c[k], p[k]) for k in c}
            if how == "fits":  # only where the page vector saw the whole note
                return {k: w * c[k] + (1 - w) * p[k] if k in fits else c[k] for k in c}
            return {k: w * c[k] + (1 - w) * p[k] for k in c}

        return run

    for w in (1.0, 0.0, 0.8, 0.7, 0.5):
        print(f"chunk share {w}", score(questions, queries, blend(w, "mix")))
    print("max         ", score(questions, queries, blend(0, "max")))
    for w in (0.7, 0.5):
        print(f"fits {w}    ", score(questions, queries, blend(w, "fits")))


def cmd_queries(args: argparse.Namespace) -> None:
    model, rows, stored = open_home(args.home)
    questions = [json.loads(line) for line in args.questions.open(encoding="utf-8")]
    note = best_per_note([k for _c, k, _e, _t in rows], np.stack([stored[c] for c, *_ in rows]))
    full = queries_of(model, questions, lambda t: t)
    content = queries_of(model, questions, lambda t: " ".join(analyze(t).content_words) or t)
    mean = [(a + b) / max(float(np.linalg.norm(a + b)), 1e-12) for a, b in zip(full, content, strict=True)]
    for name, vectors in (("full", full), ("content", content), ("mean", mean)):
        print(name.ljust(8), score(questions, vectors, note))


def cmd_cues(args: argparse.Namespace) -> None:
    """How often the follow-up cue fires on the follow-ups (questions with turns) and on the
    standalone questions of the own sets."""
    for path in sorted((ROOT / "bench").glob("questions-*.jsonl")):
        rows = [json.loads(line) for line in path.open(encoding="utf-8")]
        follow = [analyze(r["q"]).refers_back for r in rows if r.get("context")]
        alone = [analyze(r["q"]).refers_back for r in rows if not r.get("context")]
        print(
            f"{path.name}: follow-ups flagged {sum(follow)} of {len(follow)},",
            f"standalone {sum(alone)} of {len(alone)}",
        )
        if args.verbose:
            for r in rows:
                if bool(r.get("context")) != analyze(r["q"]).refers_back:
                    print("  missed" if r.get("context") else "  raised", r["q"])


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("embedtext", "sentences", "queries", "pages"):
        p = sub.add_parser(name)
        p.add_argument("home", type=Path)
        p.add_argument("questions", type=Path)
        if name == "pages":
            p.add_argument("--centroid", action="store_true")
            p.add_argument("--outline", action="store_true")
            p.add_argument("--first", action="store_true")
        if name == "embedtext":
            p.add_argument("--variant", choices=("strip", "dedup", "lead"), default="dedup")
    p = sub.add_parser("cues")
    p.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    {
        "embedtext": cmd_embedtext,
        "sentences": cmd_sentences,
        "queries": cmd_queries,
        "pages": cmd_pages,
        "cues": cmd_cues,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
