"""Search latency through the socket, old code against new, queries interleaved (A B A B ...) so
both see the same machine load; and whether both answer every query with the same hits.

    python bench/searchlat.py --home H --vault V                       (this checkout alone)
    python bench/searchlat.py --home H --vault V --old-home H2 --old-code DIR
    python bench/searchlat.py --home H --vault V --old-home H2 --old-set search.unmatchedKeywordCut=0

``--old-code`` is a checkout (or ``git archive`` export) of the code to compare with; ``--old-home``
a copy of ``--home`` (two daemons cannot share one home). ``--old-set`` (repeatable) gives the old
side settings of its own under every setting below: one code, a rule on against off (the old side
then runs this checkout unless ``--old-code`` names another). Each side runs its daemon on its own
home; every query goes to one, then to the other, in a rotating order. Three settings, switched
with ``reload``: the defaults (hybrid), BM25 alone (vector share 0) and vectors alone. This
checkout's daemon (and the old one) runs with ``search.queryCache: 0`` unless ``--cache``: every
figure is then a query embedded afresh, as a distinct query would be. The load average is read
before and after each setting (other processes share the cores); beside the percentiles, the
median of each query's new/old time ratio (its two searches ran one after the other: steadier on a
loaded machine), and each daemon's CPU time per search over the timed rounds (its own clock: the
steadiest figure where other processes share the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import yaml
from common import ROOT, code_daemon, cpu_seconds, emit, pct, rss_mb
from core import ARM_CONFIGS, QUERIES

from sidecar.clients.client import Client

SETTINGS: dict[str, dict[str, Any]] = {
    "hybrid": {},
    "bm25": {"search": {"vectorWeight": 0.0, "shortQueryBm25Weight": 1.0}},
    "vector": {"search": {"vectorWeight": 1.0, "shortQueryBm25Weight": 0.0, "foreignVectorWeight": 1.0}},
}
assert set(ARM_CONFIGS) < set(SETTINGS)  # the same arms as core.py's


def _merged(setting: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` merged into the sections of ``setting`` (``extra`` wins)."""
    out: dict[str, Any] = {k: dict(v) for k, v in setting.items()}
    for section, values in extra.items():
        out.setdefault(section, {}).update(values)
    return out


def _config(setting: dict[str, Any], extra: dict[str, Any]) -> str:
    """The settings as YAML (JSON is YAML), ``extra`` merged into its sections."""
    return json.dumps(_merged(setting, extra))


Hits = tuple[list[tuple[Any, ...]], list[list[float]]]
SCORES = ("score", "relevance", "vecScore", "bm25Score")


def _hits(reply: dict[str, Any]) -> Hits:
    """Every hit's reference, lines, boost names and text (the order), and its scores."""
    order = [
        (h["reference"], tuple(h["lines"]), tuple(sorted(h["boosts"])), h["text"]) for h in reply["hits"]
    ]
    scores = [[float(h.get(k) or 0.0) for k in SCORES] for h in reply["hits"]]
    return order, scores


def _score_gap(a: Hits, b: Hits) -> float:
    """The largest difference of any score of the same hit (both in the same order)."""
    pairs = zip(a[1], b[1], strict=True)
    return max((abs(x - y) for ra, rb in pairs for x, y in zip(ra, rb, strict=True)), default=0.0)


class Side:
    def __init__(
        self, name: str, home: Path, vault: Path, code: Path, extra: dict[str, Any], limit: int = 10
    ) -> None:
        self.name, self.extra, self.limit = name, extra, limit
        self.config = home.parent / f"{home.name}-searchlat.yaml"
        self.config.write_text(_config({}, extra))
        self.daemon = code_daemon(home, vault, code, self.config)
        self.client: Client | None = None

    def ready(self) -> None:
        self.daemon.wait_ready(timeout=600, poll=0.1)
        # What the daemon imported sidecar from (its working folder decides, see __init__).
        self.code = os.readlink(f"/proc/{self.daemon.pid}/cwd")
        self.client = Client(self.daemon.cfg.socket_path)
        self.client.__enter__()

    def use(self, setting: dict[str, Any]) -> None:
        self.config.write_text(_config(setting, self.extra))
        self.daemon.call("reload")

    def search(self, query: str) -> tuple[float, Hits]:
        assert self.client is not None
        t = time.perf_counter()
        reply = self.client.call("search", {"query": query, "limit": self.limit})
        return (time.perf_counter() - t) * 1000, _hits(reply)

    def stop(self) -> None:
        if self.client is not None:
            self.client.__exit__(None, None, None)
        self.daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--vault", required=True, type=Path)
    ap.add_argument("--old-home", type=Path, default=None)
    ap.add_argument("--old-code", type=Path, default=None)
    ap.add_argument(
        "--questions", type=Path, default=ROOT / "bench" / "questions-help2.jsonl", help="JSONL with 'q'"
    )
    ap.add_argument("--core-queries", action="store_true", help="core.py's 20 short queries instead")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache", action="store_true", help="leave this checkout's query cache on")
    ap.add_argument("--settings", default="hybrid,bm25,vector")
    ap.add_argument(
        "--old-set", action="append", default=[], help="section.key=value for the old side only (repeatable)"
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=10, help="hits each search asks for")
    args = ap.parse_args()
    if args.old_home is None and (args.old_code is not None or args.old_set):
        ap.error("--old-code and --old-set need --old-home")
    if args.old_home is not None and args.old_code is None and not args.old_set:
        ap.error("--old-home needs --old-code or --old-set")
    old_extra: dict[str, Any] = {}
    for spec in args.old_set:
        key, sep, value = spec.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and section and name):
            ap.error(f"--old-set {spec!r}: expected section.key=value")
        old_extra.setdefault(section, {})[name] = yaml.safe_load(value)
    queries = (
        QUERIES
        if args.core_queries
        else [json.loads(line)["q"] for line in args.questions.read_text().splitlines() if line.strip()]
    )
    extra = {} if args.cache else {"search": {"queryCache": 0}}
    sides = [Side("new", args.home.resolve(), args.vault.resolve(), ROOT, extra, args.limit)]
    if args.old_home is not None:
        # The same settings on both sides: with its cache on, the old side answered the timed
        # rounds from what the warm-up pass had embedded.
        sides.append(
            Side(
                "old",
                args.old_home.resolve(),
                args.vault.resolve(),
                (args.old_code or ROOT).resolve(),
                _merged(extra, old_extra),
                args.limit,
            )
        )
    result: dict[str, Any] = {
        "queries": len(queries),
        "rounds": args.rounds,
        "cache": args.cache,
        "limit": args.limit,
    }
    if old_extra:
        result["old_settings"] = old_extra
    try:
        for s in sides:
            s.ready()
            result[f"{s.name}_code"] = s.code
            print(f"{s.name} pid {s.daemon.pid} code {s.code}", flush=True)  # for a profiler
        for name in args.settings.split(","):
            for s in sides:
                s.use(SETTINGS[name])
            for s in sides:  # warm-up: one pass each
                for q in queries:
                    s.search(q)
            load_before = os.getloadavg()[0]
            lat: dict[str, list[float]] = {s.name: [] for s in sides}
            cpu_before = {s.name: cpu_seconds(s.daemon.pid) for s in sides}
            differ: set[str] = set()
            gap = 0.0
            n = 0
            for _ in range(args.rounds):
                for q in queries:
                    order = sides if n % 2 == 0 else sides[::-1]  # neither side always goes first
                    n += 1
                    answers = {}
                    for s in order:
                        ms, hits = s.search(q)
                        lat[s.name].append(ms)
                        answers[s.name] = hits
                    if len(answers) == 2:
                        if answers["new"][0] != answers["old"][0]:
                            differ.add(q)
                        else:
                            gap = max(gap, _score_gap(answers["new"], answers["old"]))
            row: dict[str, Any] = {"load_before": round(load_before, 2), "load_after": os.getloadavg()[0]}
            for s in sides:
                values = lat[s.name]
                row[f"{s.name}_p50_ms"], row[f"{s.name}_p95_ms"] = pct(values, 0.5), pct(values, 0.95)
                # The daemon's own CPU clock over the timed searches (its idle threads included):
                # what a search costs, whatever else runs on the cores.
                spent = cpu_seconds(s.daemon.pid) - cpu_before[s.name]
                row[f"{s.name}_cpu_ms_per_search"] = round(1000 * spent / len(values), 2)
            if len(sides) == 2:  # hits in another order or other hits; else how far scores moved
                # Each query's pair of times (one after the other, same load): the median of their
                # ratios holds still where the load moves both percentiles.
                pairs = zip(lat["new"], lat["old"], strict=True)
                row["new_over_old_median"] = round(statistics.median(a / b for a, b in pairs if b > 0), 3)
                row["queries_with_other_hits"] = sorted(differ)
                row["largest_score_difference"] = gap
            result[name] = row
            print(name, json.dumps(row), flush=True)
        for s in sides:  # after every search: the vectors' copy in memory is part of it
            result[f"{s.name}_rss_mb"] = rss_mb(s.daemon.pid).get("VmRSS")
    finally:
        for s in sides:
            s.stop()
    emit(result, args.out)


if __name__ == "__main__":
    main()
