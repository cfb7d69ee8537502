"""Retrieval quality harness: a BEIR folder (corpus/queries/qrels) or a question file against a real
daemon, hybrid and each arm alone from the same index, with latency.

    python bench/eval.py beir ../shared/eval/scifact --out bench/out/scifact.json
    python bench/eval.py beir ../shared/eval/xquad-de --out bench/out/xquad-de.json
    python bench/eval.py beir ../shared/eval/xquad-en --queries ../shared/eval/xquad-de  (cross-lingual)
    python bench/eval.py questions bench/questions.jsonl --vault DIR --out bench/out/help.json
    python bench/eval.py identifiers --vault ../shared/eval/vaults/obsidian-help --subset en,de
    python bench/eval.py questions bench/questions-de.jsonl --vault tldr=../shared/eval/vaults/tldr-pages-de \
        --vault rustbook=../shared/eval/vaults/rustbook-de --vault help=../shared/eval/vaults/obsidian-help:de
    python bench/eval.py questions bench/questions-de.jsonl --vault ... --check   (references only, no daemon)

BEIR documents become notes ``<id>.md`` (title as heading, text as body) in a temporary vault;
a hit's reference names the document. Arms are switched with the ``reload`` op (search.vectorWeight
1.0 / 0.0), so all three runs share one index. Question files are JSONL: ``{"q": ..., "expected":
["vault/..."], "context": [previous turns]}``; with ``context`` the ``recall`` op is used. Optional
``kind``, ``lang``, ``source`` and ``hub`` fields group the figures (hit@1, hit@5, MRR@10 per
group); ``tempting`` names wrong pages (long hubs) whose rank in the top 3 above every expected
page is counted.

``--vault`` is repeatable as ``name=DIR[:sub1,sub2]``: each folder (or the listed subfolders of
it) is copied under ``name/`` of one temporary vault, so references read ``vault/name/...``. Every
expected reference is checked against the vault's files before the daemon starts.
``--offtopic FILE`` also runs off-topic messages through ``recall`` on the same index (one index
for both on a large vault). ``--misses FILE`` writes one JSON line per question (its fields, the
expected documents, and per arm and sweep value the rank of the first expected document, None
when it is not among the returned hits, with the top five documents, their scores and boosts), so
failures can be read by kind.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import bench_daemon, emit

from tests.daemon_process import DaemonProcess

ARMS: dict[str, dict[str, Any]] = {
    "hybrid": {},
    "bm25": {"search": {"vectorWeight": 0.0, "shortQueryBm25Weight": 1.0}},
    "vector": {
        "search": {
            "vectorWeight": 1.0,
            "shortQueryBm25Weight": 0.0,
            "foreignVectorWeight": 1.0,
            "rareTermNotes": 0,
        }
    },
}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Config layers merged per section (later wins): the daemon's file is their JSON (YAML reads it)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for section, values in layer.items():
            out.setdefault(section, {}).update(values)
    return out


def setting(spec: str) -> dict[str, Any]:
    """``section.key=value`` as a config layer (the value parsed as YAML: numbers, booleans)."""
    import yaml

    key, _, value = spec.partition("=")
    section, name = key.split(".")
    return {section: {name: yaml.safe_load(value)}}


def load_beir(folder: Path) -> tuple[dict[str, Any], dict[str, str], dict[str, dict[str, int]]]:
    corpus = {d["_id"]: d for d in map(json.loads, (folder / "corpus.jsonl").open(encoding="utf-8"))}
    queries = {
        q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))
    }
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with (folder / "qrels.tsv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return corpus, queries, qrels


def safe_name(doc_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", doc_id)


def write_vault(corpus: dict[str, Any], vault: Path, with_title: bool) -> dict[str, str]:
    """One note per document; returns reference -> doc id."""
    vault.mkdir(parents=True, exist_ok=True)
    refs = {}
    for doc_id, doc in corpus.items():
        name = safe_name(doc_id)
        title = doc.get("title") or ""
        head = f"# {title}\n\n" if with_title and title else ""
        note, text = vault / f"{name}.md", head + doc["text"] + "\n"
        if not note.is_file() or note.read_text(encoding="utf-8") != text:  # kept work: no re-index
            note.write_text(text, encoding="utf-8")
        refs[f"vault/{name}"] = doc_id
    return refs


def metrics(ranked: list[str], relevant: dict[str, int]) -> dict[str, float]:
    """hit@1, hit@5, MRR@10, nDCG@10 (binary or graded gains), recall@10 for one query."""
    top = ranked[:10]
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    rr = next((1 / (i + 1) for i, d in enumerate(top) if relevant.get(d, 0) > 0), 0.0)
    found = sum(1 for d in top if relevant.get(d, 0) > 0)
    return {
        "hit@1": float(bool(ranked[:1]) and relevant.get(ranked[0], 0) > 0),
        "hit@5": float(any(relevant.get(d, 0) > 0 for d in ranked[:5])),
        "mrr@10": rr,
        "ndcg@10": dcg / idcg if idcg else 0.0,
        "recall@10": found / max(1, sum(1 for g in relevant.values() if g > 0)),
    }


def run_queries(
    d: DaemonProcess,
    queries: list[tuple[str, str, list[str]]],
    refs: dict[str, str] | None,
    relevant: dict[str, dict[str, int]],
    *,
    limit_check: bool = False,
) -> dict[str, Any]:
    """queries: (text, id, history); returns averaged metrics and latency. ``limit_check``: each
    search is asked again at limit 10 and compared with the first ten of limit 30 (``_same_ten``)."""
    per: dict[str, list[float]] = defaultdict(list)
    lat: list[float] = []
    differ: dict[str, list[str]] = {"pages": [], "order": [], "scores": []}
    return_rankings: dict[str, list[str]] = {}
    tops: dict[str, list[dict[str, Any]]] = {}  # the first five documents with their scores
    for text, qid, history in queries:
        t0 = time.perf_counter()
        if history:
            r = d.call("recall", {"message": text, "history": history, "limit": 20, "minScore": 0.0})
        else:
            r = d.call("search", {"query": text, "limit": 30})
        lat.append((time.perf_counter() - t0) * 1000)
        if limit_check and not history:
            for how in _same_ten(r["hits"], d.call("search", {"query": text, "limit": 10})["hits"]):
                differ[how].append(qid)
        if r["hits"]:
            top = r["hits"][0]
            doc = refs.get(top["reference"], top["reference"]) if refs else top["reference"]
            per["top_cosine" if doc in relevant.get(qid, {}) else "top_cosine_wrong"].append(
                top["vecScore"] or 0.0
            )
            per["top_relevance" if doc in relevant.get(qid, {}) else "top_relevance_wrong"].append(
                top.get("relevance", 0.0)
            )
        ranked: list[str] = []
        tops[qid] = []
        for h in r["hits"]:
            doc = refs.get(h["reference"], h["reference"]) if refs else h["reference"]
            if doc not in ranked:
                ranked.append(doc)
                if len(tops[qid]) < 5:
                    tops[qid].append(_brief(doc, h))
        return_rankings[qid] = ranked
    out = {"rankings": return_rankings, "latency": sorted(lat), "per": per, "tops": tops}
    if limit_check:
        out["limit_dependent"] = differ
    return out


def _same_ten(thirty: list[dict[str, Any]], ten: list[dict[str, Any]]) -> list[str]:
    """How the answer at limit 10 differs from the first ten hits at limit 30: ``pages`` (the notes
    of those hits, each once, in order: what the figures rank), ``order`` (other hits, or the same
    in another order; by reference and lines) and ``scores`` (any score or relevance); nothing
    when it is their exact prefix."""

    def pages(found: list[dict[str, Any]]) -> list[str]:
        return list(dict.fromkeys(h["reference"] for h in found[:10]))

    def hits(found: list[dict[str, Any]], scored: bool) -> list[tuple[Any, ...]]:
        return [
            (h["reference"], tuple(h["lines"]), *((h["score"], h.get("relevance")) if scored else ()))
            for h in found[:10]
        ]

    out = ["pages"] if pages(thirty) != pages(ten) else []
    return out + [
        how
        for how, scored in (("order", False), ("scores", True))
        if hits(thirty, scored) != hits(ten, scored)
    ]


def _brief(doc: str, hit: dict[str, Any]) -> dict[str, Any]:
    """A hit as the per-question report shows it: the document and why it ranked there."""
    out: dict[str, Any] = {"ref": doc, "score": round(hit.get("score", 0.0), 4)}
    for key in ("relevance", "vecScore", "bm25Score"):
        if hit.get(key) is not None:
            out[key] = round(hit[key], 4)
    if hit.get("boosts"):
        out["boosts"] = hit["boosts"]
    return out


def first_rank(ranked: list[str], relevant: dict[str, int]) -> int | None:
    """1-based rank of the first relevant document among the returned ones (None: not returned)."""
    return next((i + 1 for i, d in enumerate(ranked) if relevant.get(d, 0) > 0), None)


def write_misses(
    path: Path,
    queries: list[tuple[str, str, list[str]]],
    qrels: dict[str, dict[str, int]],
    per_arm: dict[str, dict[str, Any]],
    info: dict[str, dict[str, Any]] | None,
) -> None:
    """One JSON line per question: its fields, then per arm the rank of the first expected document
    (None: not among the returned hits) and the top five documents with their scores."""
    with path.open("w", encoding="utf-8") as f:
        for text, qid, history in queries:
            row: dict[str, Any] = {"id": qid, "q": text, **(info or {}).get(qid, {})}
            if history:
                row["context"] = history
            row["expected"] = sorted(d for d, g in qrels[qid].items() if g > 0)
            row["arms"] = {
                arm: {"rank": first_rank(res["rankings"][qid], qrels[qid]), "top": res["tops"][qid]}
                for arm, res in per_arm.items()
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def summarise(
    rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], lat: list[float]
) -> dict[str, Any]:
    sums: dict[str, float] = defaultdict(float)
    for qid, ranked in rankings.items():
        for k, v in metrics(ranked, qrels[qid]).items():
            sums[k] += v
    n = max(1, len(rankings))
    out: dict[str, Any] = {k: round(v / n, 4) for k, v in sums.items()}
    out["queries"] = len(rankings)
    out["latency_ms_p50"] = round(lat[len(lat) // 2], 1) if lat else None
    out["latency_ms_p95"] = round(lat[max(0, int(len(lat) * 0.95) - 1)], 1) if lat else None
    return out


def summarise_groups(
    rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], groups: dict[str, list[str]]
) -> dict[str, dict[str, float]]:
    """hit@1 / hit@5 / MRR@10 and the count of each group of queries (e.g. ``kind=paraphrase``)."""
    out = {}
    for name, qids in sorted(groups.items()):
        per = [metrics(rankings[q], qrels[q]) for q in qids if q in rankings]
        n = max(1, len(per))
        out[name] = {k: round(sum(m[k] for m in per) / n, 4) for k in ("hit@1", "hit@5", "mrr@10")}
        out[name]["queries"] = len(per)
    return out


def ref_language(ref: str) -> str:
    """A reference's language where the vault keeps one folder per language (``vault/de/...``)."""
    return ref.removeprefix("vault/").split("/", 1)[0]


def language_share(ranked: list[str], language: str, k: int = 10) -> float:
    """Share of the first ``k`` documents in the question's language (1.0 when none returned: an
    empty answer crowds nothing out)."""
    top = ranked[:k]
    return sum(ref_language(d) == language for d in top) / len(top) if top else 1.0


def translations_of(vault: Path, refs: Sequence[str]) -> set[str]:
    """The references of the same pages in the vault's other language folders: notes whose
    permalink is that of one of ``refs`` (the expected pages, in the question's language)."""
    links = {permalink(vault / f"{r.removeprefix('vault/')}.md") for r in refs} - {None}
    langs = {ref_language(r) for r in refs}
    out = set()
    for note in vault.rglob("*.md"):
        ref = "vault/" + note.relative_to(vault).with_suffix("").as_posix()
        if ref_language(ref) not in langs and permalink(note) in links:
            out.add(ref)
    return out


def language_figures(
    rankings: dict[str, list[str]], languages: dict[str, str], translations: dict[str, set[str]]
) -> dict[str, float]:
    """Over questions with a ``lang``: the mean share of the top ten in the question's language
    (``lang@10``) and the mean count of the expected pages' translations in it (``translations@10``)."""
    shares = [language_share(rankings[q], lang) for q, lang in languages.items()]
    counts = [sum(d in translations.get(q, set()) for d in rankings[q][:10]) for q in languages]
    n = max(1, len(shares))
    return {"lang@10": round(sum(shares) / n, 4), "translations@10": round(sum(counts) / n, 4)}


def tempting_share(
    rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], tempting: dict[str, set[str]]
) -> float:
    """Share of queries with a known tempting wrong page (a long hub) that rank one in their top 3
    above every expected page."""
    hits = 0
    for qid, wrong in tempting.items():
        for ref in rankings.get(qid, [])[:3]:
            if qrels[qid].get(ref, 0) > 0:
                break
            if ref in wrong:
                hits += 1
                break
    return round(hits / max(1, len(tempting)), 4)


PERMALINK = re.compile(r"^permalink:[ \t]*[\"']?([^\"'\n]*?)[\"']?[ \t]*$", re.MULTILINE)


def permalink(note: Path) -> str | None:
    """The ``permalink`` key of a note's front matter (the help vault's pages share it across their
    translations), None without one."""
    text = note.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    block = text[3:].split("\n---", 1)[0]
    match = PERMALINK.search(block)
    return match.group(1).strip() if match else None


def copy_permalinked(vault: Path, section: str, target: Path) -> int:
    """Every note of ``vault`` whose permalink is ``section`` or lies under ``section/``, copied to
    ``target`` at its own path: one section of a translated vault in every language it has."""
    copied = 0
    for note in sorted(vault.rglob("*.md")):
        link = permalink(note)
        if link is not None and (link == section or link.startswith(section + "/")):
            dest = target / note.relative_to(vault)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.is_file() or dest.read_bytes() != note.read_bytes():  # kept work: no re-index
                shutil.copyfile(note, dest)
            copied += 1
    if not copied:
        raise SystemExit(f"no note of {vault} has a permalink under {section!r}")
    return copied


def build_vault(specs: Sequence[str], subset: str, work: Path, copy: bool = False, section: str = "") -> Path:
    """The vault of a run. One plain folder is used in place (copied when ``copy``, or only its
    ``subset`` folders, or only the notes of a permalink ``section``); ``name=DIR[:sub1,sub2]`` specs
    are copied each under ``name/`` of one vault."""
    mounts = [spec for spec in specs if "=" in spec.split("/", 1)[0]]
    if not mounts:
        if len(specs) != 1:
            raise SystemExit("several --vault folders need the name=DIR form")
        vault = Path(specs[0]).resolve()
        if section:
            if subset:
                raise SystemExit("--permalink and --subset cannot be mixed")
            copy_permalinked(vault, section, work / "vault")
            return work / "vault"
        if not subset and not copy:
            return vault
        for name in subset.split(",") if subset else ["."]:
            shutil.copytree(vault / name, work / "vault" / name, dirs_exist_ok=True)
        return work / "vault"
    if len(mounts) != len(specs) or subset or section:
        raise SystemExit(
            "name=DIR[:subfolders] cannot be mixed with --subset, --permalink or a plain --vault"
        )
    for spec in mounts:
        name, _, rest = spec.partition("=")
        folder, _, subs = rest.rpartition(":") if re.search(r":[^/:]+$", rest) else (rest, "", "")
        source = Path(folder).resolve()
        for sub in subs.split(",") if subs else ["."]:
            shutil.copytree(source / sub, work / "vault" / name / sub, dirs_exist_ok=True)
    return work / "vault"


def missing_references(rows: list[dict[str, Any]], vault: Path) -> list[str]:
    """Expected references (``vault/<path>`` without ``.md``) that name no note of the vault."""
    missing = []
    for i, row in enumerate(rows, 1):
        for ref in [*row["expected"], *row.get("tempting", [])]:
            rel = ref.removeprefix("vault/")
            if not ref.startswith("vault/") or not (vault / f"{rel}.md").is_file():
                missing.append(f"line {i}: {ref}")
    return missing


def evaluate(
    vault: Path,
    work: Path,
    queries: list[tuple[str, str, list[str]]],
    qrels: dict[str, dict[str, int]],
    refs: dict[str, str] | None,
    sweeps: Sequence[str] = (),
    base: dict[str, Any] | None = None,
    groups: dict[str, list[str]] | None = None,
    tempting: dict[str, set[str]] | None = None,
    offtopic: Sequence[str] = (),
    only: Sequence[str] = (),
    misses: Path | None = None,
    info: dict[str, dict[str, Any]] | None = None,
    languages: dict[str, str] | None = None,
    translations: dict[str, set[str]] | None = None,
    limit_check: bool = False,
) -> dict[str, Any]:
    base = base or {}
    config = work / "sidecar.yaml"
    config.write_text(json.dumps(merged(base, ARMS["hybrid"])))
    d = bench_daemon(vault, work / "home", args=["--config", str(config)])
    arms = {k: v for k, v in ARMS.items() if not only or k in only}
    for sweep in sweeps:  # e.g. search.foreignVectorWeight=0.1,0.2,0.3: one hybrid run per value
        key, _, values = sweep.partition("=")
        arms.update({f"{key}={v}": setting(f"{key}={v}") for v in values.split(",")})
    try:
        out: dict[str, Any] = {"index_ready_s": round(d.wait_ready(timeout=7200, poll=2, verbose=True), 1)}
        h = d.call("health")["index"]
        out["chunks"], out["files"] = h["chunks"], h["files"]
        per_arm: dict[str, dict[str, Any]] = {}
        for arm, text in arms.items():
            config.write_text(json.dumps(merged(base, text)))
            d.call("reload")
            res = per_arm[arm] = run_queries(d, queries, refs, qrels, limit_check=limit_check)
            out[arm] = summarise(res["rankings"], qrels, res["latency"])
            if limit_check:
                asked = sum(1 for _, _, history in queries if not history)
                out[arm]["limit_dependent"] = {
                    "searches": asked,
                    **{how: len(ids) for how, ids in res["limit_dependent"].items()},
                    "questions": res["limit_dependent"]["order"],
                }
            out[arm]["calibration"] = {k: spread(v) for k, v in sorted(res["per"].items())}
            if groups:
                out[arm]["groups"] = summarise_groups(res["rankings"], qrels, groups)
            if tempting:
                out[arm]["tempting_in_top3"] = tempting_share(res["rankings"], qrels, tempting)
            if languages:
                out[arm].update(language_figures(res["rankings"], languages, translations or {}))
            print(arm, json.dumps(out[arm]), file=sys.stderr)
        if misses:
            write_misses(misses, queries, qrels, per_arm, info)
        if offtopic:  # the same index with the run's own settings: auto-injection should stay empty
            config.write_text(json.dumps(merged(base, ARMS["hybrid"])))
            d.call("reload")
            out["offtopic"] = recall_offtopic(d, offtopic)
            print("offtopic", json.dumps(out["offtopic"]), file=sys.stderr)
        return out
    finally:
        d.stop()


def _base(args: argparse.Namespace) -> dict[str, Any]:
    """Settings of this run under every arm: index-time ones (the arms only change search settings
    through reload) and ``--set`` ones."""
    layers: list[dict[str, Any]] = []
    if args.max_tokens:
        layers.append({"chunking": {"maxTokens": args.max_tokens}})
    # One inference thread where the machine is shared: a two-thread pool waiting for a
    # descheduled thread ran 30x slower here.
    if getattr(args, "no_model", False):  # keyword arm only: every arm then ranks by BM25 alone
        layers.append({"embedder": {"enabled": False}})
    elif args.threads:
        layers.append({"embedder": {"threads": args.threads}})
    return merged(*layers, *(setting(s) for s in args.set))


def workdir(args: argparse.Namespace) -> Path:
    """A fresh temporary folder, or ``--work DIR`` kept between runs: its home still holds the
    index, so the next run (another question file, changed ranking code) starts in seconds
    instead of embedding everything again. Copies of unchanged files are not re-indexed."""
    if getattr(args, "work", None) is None:
        return Path(tempfile.mkdtemp(prefix="sidecar-eval-"))
    args.work.mkdir(parents=True, exist_ok=True)
    return Path(args.work).resolve()


def cmd_beir(args: argparse.Namespace) -> dict[str, Any]:
    corpus, queries, qrels = load_beir(args.folder)
    if args.queries:
        _, queries, qrels = load_beir(args.queries)
    work = workdir(args)
    refs = write_vault(corpus, work / "vault", with_title=not args.no_title)
    qs = [(text, qid, []) for qid, text in queries.items() if qid in qrels][: args.limit or None]
    result = evaluate(
        work / "vault",
        work,
        qs,
        qrels,
        refs,
        args.sweep,
        _base(args),
        only=args.arms,
        misses=args.misses,
        limit_check=args.limit_check,
    )
    return {
        "set": str(args.folder),
        "queries_from": str(args.queries or args.folder),
        "docs": len(corpus),
        **result,
    }


def cmd_questions(args: argparse.Namespace) -> dict[str, Any]:
    rows = [json.loads(line) for line in args.file.open(encoding="utf-8") if line.strip()]
    qs = [(r["q"], str(i), r.get("context", [])) for i, r in enumerate(rows)]
    qrels = {str(i): dict.fromkeys(r["expected"], 1) for i, r in enumerate(rows)}
    groups: dict[str, list[str]] = defaultdict(list)
    for i, r in enumerate(rows):
        for field in ("kind", "lang", "source"):
            if field in r:
                groups[f"{field}={r[field]}"].append(str(i))
        if r.get("hub"):
            groups["hub"].append(str(i))
    work = workdir(args)
    # a vault made of some folders of a larger one (e.g. en and de of the help vault), or of several
    vault = build_vault(args.vault, args.subset, work, section=args.permalink)
    missing = missing_references(rows, vault)
    print(
        f"references: {sum(len(r['expected']) for r in rows)} checked, {len(missing)} missing",
        file=sys.stderr,
    )
    if missing:
        raise SystemExit("expected references without a note:\n" + "\n".join(missing))
    if args.check:
        shutil.rmtree(work)
        return {"questions": str(args.file), "vault": args.vault, "checked": len(rows), "missing": 0}
    tempting = {str(i): set(r["tempting"]) for i, r in enumerate(rows) if r.get("tempting")}
    offtopic = read_messages(args.offtopic) if args.offtopic else []
    languages: dict[str, str] = {}
    translations: dict[str, set[str]] = {}
    if args.language_folders:  # the vault's first folders are languages: count the question's own
        languages = {str(i): r["lang"] for i, r in enumerate(rows) if "lang" in r}
        translations = {q: translations_of(vault, rows[int(q)]["expected"]) for q in languages}
    result = evaluate(
        vault,
        work,
        qs,
        qrels,
        None,
        args.sweep,
        _base(args),
        groups or None,
        tempting or None,
        offtopic,
        only=args.arms,
        misses=args.misses,
        limit_check=args.limit_check,
        info={
            str(i): {k: r[k] for k in ("kind", "lang", "source", "hub", "tempting") if k in r}
            for i, r in enumerate(rows)
        },
        languages=languages,
        translations=translations,
    )
    return {"questions": str(args.file), "vault": args.vault, "subset": args.subset, **result}


# Sentences a person (or an agent) adds to a note, each naming something only that note names:
# ticket numbers, host names, codes. {id} is the identifier.
_ID_LINES = (
    "Follow-up is tracked in ticket {id}.",
    "This setup runs on the host {id} since the spring.",
    "Reference {id} in the contract folder covers this page.",
    "The {id} paragraph was added after the last review.",
)
_ID_QUERIES = ("{id}", "{id} {title}", "{id} {generic}", "where did I write about {id}?")
_GENERICS = ("ticket", "host", "contract", "paragraph")


def _identifier(rng: random.Random, kind: int) -> str:
    letters = "abcdefghijkmnpqrstuvwxyz"
    if kind == 0:
        return f"OPS-{rng.randrange(1000, 9999)}"
    if kind == 1:
        return f"srv-{rng.choice(('nas', 'db', 'web'))}{rng.randrange(10, 99)}{rng.choice(letters)}"
    if kind == 2:
        return "".join(rng.choice(letters) for _ in range(3)) + str(rng.randrange(100, 999))
    return "".join(rng.choice(letters) for _ in range(2)) + str(rng.randrange(1, 9)) + rng.choice(letters) * 2


def cmd_identifiers(args: argparse.Namespace) -> dict[str, Any]:
    """Notes that name an identifier (ticket, host, code) found nowhere else, and queries naming it
    alone, with a title word, with a generic word and in a question: does the note come first?"""
    # With --work (a copy of another run's kept index of the same vault) only the changed notes
    # are embedded again; the work folder's vault is then the changed one, for this command only.
    work = workdir(args)
    vault = build_vault(args.vault, args.subset, work, copy=True)  # notes get a line added
    rng = random.Random(7)
    notes = rng.sample(sorted(vault.rglob("*.md")), args.notes)
    qs: list[tuple[str, str, list[str]]] = []
    qrels: dict[str, dict[str, int]] = {}
    for i, note in enumerate(notes):
        kind = i % len(_ID_LINES)
        ident = _identifier(rng, kind)
        line = _ID_LINES[kind].format(id=ident)
        note.write_text(note.read_text(encoding="utf-8") + f"\n\n{line}\n", encoding="utf-8")
        title = max(re.findall(r"\w+", note.stem) or [note.stem], key=len)
        ref = "vault/" + note.relative_to(vault).with_suffix("").as_posix()
        for j, pattern in enumerate(_ID_QUERIES):
            qid = f"{i}-{j}"
            qs.append((pattern.format(id=ident, title=title, generic=_GENERICS[kind]), qid, []))
            qrels[qid] = {ref: 1}
    result = evaluate(
        vault,
        work,
        qs,
        qrels,
        None,
        args.sweep,
        _base(args),
        only=args.arms,
        misses=args.misses,
        limit_check=args.limit_check,
    )
    return {"vault": args.vault, "subset": args.subset, "notes": len(notes), **result}


def read_messages(path: Path) -> list[str]:
    return [m.strip() for m in path.read_text(encoding="utf-8").splitlines() if m.strip()]


def recall_offtopic(d: DaemonProcess, messages: Sequence[str]) -> dict[str, Any]:
    """How many messages get an empty auto-injection block, and what the others injected."""
    leaked = {}
    tops: list[tuple[float, float]] = []  # (relevance, cosine) of each message's best search hit
    for m in messages:
        r = d.call("recall", {"message": m})
        if r["context"]:
            leaked[m] = [h["reference"] for h in r["hits"]]
        hits = d.call("search", {"query": m, "limit": 1, "minScore": 0.0})["hits"]
        if hits:
            tops.append((hits[0].get("relevance", 0.0), hits[0]["vecScore"] or 0.0))
    return {
        "messages": len(messages),
        "empty": len(messages) - len(leaked),
        "leaked": leaked,
        "search_top_relevance": spread([t[0] for t in tops]),
        "search_top_cosine": spread([t[1] for t in tops]),
    }


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median, 10th and 90th percentile and maximum: where a score's scale is (calibration)."""
    if not values:
        return None
    v = sorted(values)
    pick = lambda q: round(v[min(len(v) - 1, int(q * len(v)))], 4)  # noqa: E731
    return {"p10": pick(0.1), "median": pick(0.5), "p90": pick(0.9), "max": round(v[-1], 4)}


def cmd_offtopic(args: argparse.Namespace) -> dict[str, Any]:
    """How many off-topic messages get an empty auto-injection block."""
    messages = read_messages(args.file)
    work = workdir(args)  # --work: another run's kept index of the same vault
    vault = build_vault(args.vault, args.subset, work)
    config = work / "sidecar.yaml"
    config.write_text(json.dumps(_base(args)))
    d = bench_daemon(vault, work / "home", args=["--config", str(config)])
    try:
        d.wait_ready(timeout=7200, poll=5, verbose=True)
        return recall_offtopic(d, messages)
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("beir")
    p.add_argument("folder", type=Path)
    p.add_argument(
        "--queries", type=Path, default=None, help="take queries and qrels from another BEIR folder"
    )
    p.add_argument("--no-title", action="store_true", help="index the text only (XQuAD titles are English)")
    p.add_argument("--limit", type=int, default=0)
    vault_help = "DIR, or name=DIR[:sub1,sub2] (repeatable): copied under name/ of one vault"
    p = sub.add_parser("offtopic")
    p.add_argument("file", type=Path)
    p.add_argument("--vault", action="append", required=True, help=vault_help)
    p.add_argument("--subset", default="")
    p = sub.add_parser("identifiers")
    p.add_argument("--vault", action="append", required=True, help=vault_help)
    p.add_argument("--subset", default="")
    p.add_argument("--notes", type=int, default=40)
    p = sub.add_parser("questions")
    p.add_argument("file", type=Path)
    p.add_argument("--vault", action="append", required=True, help=vault_help)
    p.add_argument(
        "--subset", default="", help="comma-separated folders of the vault to copy into the test vault"
    )
    p.add_argument(
        "--permalink",
        default="",
        help="copy only the notes whose front matter permalink is this or lies under it/ (all languages)",
    )
    p.add_argument(
        "--language-folders",
        action="store_true",
        help="the vault's first folders are languages: report lang@10 and translations@10",
    )
    p.add_argument("--check", action="store_true", help="check the expected references and stop")
    p.add_argument(
        "--offtopic", type=Path, default=None, help="also run these off-topic messages on the same index"
    )
    for p in sub.choices.values():
        p.add_argument("--out", type=Path, default=None)
        p.add_argument("--work", type=Path, default=None, help="keep vault and index here, reuse them")
        p.add_argument("--no-model", action="store_true", help="embedder.enabled: false (BM25 only)")
        p.add_argument(
            "--sweep",
            action="append",
            default=[],
            help="section.key=v1,v2,...: extra hybrid runs, one per value (repeatable)",
        )
        p.add_argument(
            "--arms",
            type=lambda v: [a for a in v.split(",") if a],
            default=[],
            help="comma-separated arms to run (hybrid,bm25,vector; default all) besides the sweeps",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            help="section.key=value under every arm (repeatable), e.g. search.cosineFloor=0.8",
        )
        p.add_argument(
            "--misses",
            type=Path,
            default=None,
            help="write one JSON line per question: rank of the first expected document per arm, top 5",
        )
        p.add_argument(
            "--limit-check",
            action="store_true",
            help="ask each search at limit 10 too: count the answers that are not the first ten of limit 30",
        )
        p.add_argument("--max-tokens", type=int, default=0, help="chunking.maxTokens of the index")
        p.add_argument("--threads", type=int, default=0, help="embedder.threads of the daemon (0: cores)")
    args = ap.parse_args()
    commands = {
        "beir": cmd_beir,
        "questions": cmd_questions,
        "offtopic": cmd_offtopic,
        "identifiers": cmd_identifiers,
    }
    result = commands[args.cmd](args)
    emit(result, args.out)


if __name__ == "__main__":
    main()
