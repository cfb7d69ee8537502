"""The long reliability run behind RELIABILITY.md: crashes, vanishing shares, load, storage faults
and hostile input against real daemon processes, with counts of runs and failures.

    python bench/chaos.py --out bench/out/chaos.json                 # everything (about 25 min)
    python bench/chaos.py --only crash --runs 30 --out bench/out/chaos-crash.json

Scenarios:
- crash: SIGKILL at random moments while the daemon indexes a 300-note vault, an agent writes
  memory notes without pause, and LanceDB compacts after every third write; after each restart
  every acknowledged write must be on disk with its exact content, at the end searchable, and the
  index must equal a clean rebuild of the same files (manifest, Tantivy, LanceDB chunk ids).
- shares: the vault vanishes and returns N times while a client searches; notes are added, edited
  and deleted while it is away. No failed request, every change found, no chunk lost or doubled.
- load: 32 clients run mixed search / recall / write for 2 minutes while a sweep re-indexes
  edited notes: errors, p50/p95/p99 per operation, daemon RSS before and after.
- mixed: 16 clients, 70 % search and 30 % memory writes for 60 s on an idle daemon (searches
  must not queue behind writes): errors, latencies, RSS before, after and settled, the load
  average; then a second identical load on the same daemon (the same notes rewritten) and its
  settled RSS, which tells growth with the data from growth without it.
  ``--code DIR[,KEY=VALUE...]`` (repeatable) and ``--rounds N`` run it for other source trees
  (or settings) in turn, on copies of one index (``--mixed-cache DIR`` keeps it): an A/B is
  ``git archive OLD | tar -x -C /tmp/old``, then ``--code /tmp/old --code .``.
- faults, hostile: the disk-full / read-only / broken-note tests and the protocol fuzz of
  tests/reliability run repeatedly (hypothesis with 2,000 examples, 10,000 idle connections).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import clean_env, emit, pct, rss_mb  # noqa: E402

from sidecar.contracts.errors import RemoteError  # noqa: E402
from tests.conftest import make_notes, store_ids, write  # noqa: E402
from tests.daemon_process import DaemonProcess  # noqa: E402
from tests.reliability.disks import FAST_RETRY  # noqa: E402
from tests.reliability.writer import AckedWriter  # noqa: E402


def _daemon(home: Path, vault: Path, env: dict[str, str] | None = None) -> DaemonProcess:
    return DaemonProcess(home, vault, env={**FAST_RETRY, **(env or {})}, base_env=clean_env())


def _clean_rebuild(d: DaemonProcess, vault: Path, work: Path) -> tuple[set[str], set[str], set[str]]:
    """The same files indexed from scratch by ``sidecar index`` (agents' inboxes copied along)."""
    home = work / f"clean-{time.time_ns()}"
    home.mkdir()
    if (d.home / "agents").exists():
        shutil.copytree(d.home / "agents", home / "agents")
    clean = _daemon(home, vault)
    clean.run_cli("index", "--vault", str(vault), check=True)
    return store_ids(home)


def crash(work: Path, runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    vault = work / "crash-vault"
    make_notes(vault, 1500)  # indexing and embedding it spans many of the kills
    d = _daemon(work / "crash-home", vault, {"SIDECAR_INDEX_OPTIMIZE_EVERY_WRITES": "3"})
    writer = AckedWriter(d, "chaos")
    out: dict[str, Any] = {"runs": runs, "kills_by_phase": {}}
    lost: set[str] = set()
    changed: set[str] = set()
    for run in range(runs):
        d.start(wait=None)
        with writer.running():
            time.sleep(rng.uniform(0.5, 5.0))
            try:
                idx = d.health()["index"]
                phase = "embedding" if idx["phase"] == "idle" and idx["pending_vectors"] else idx["phase"]
            except Exception:
                phase = "starting"
            d.stop(signal.SIGKILL)
        out["kills_by_phase"][phase] = out["kills_by_phase"].get(phase, 0) + 1
        if rng.random() < 0.3:  # the vault changes between crashes too
            victim = vault / f"folder{rng.randrange(7)}" / f"note-{rng.randrange(300):03d}.md"
            victim.unlink(missing_ok=True)
            write(vault / "late" / f"late-{run}.md", f"# Late {run}\n\nadded between two crashes\n")
        gone, altered = writer.damaged()
        lost |= gone
        changed |= altered
    d.start(wait=None)
    d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=600)
    unsearchable = 0
    for slug in writer.acked:
        hits = d.call("search", {"query": writer.token(slug), "source": "memory"}, agent="chaos")["hits"]
        if f"memory/{slug}" not in [h["reference"] for h in hits]:
            unsearchable += 1
    d.stop()
    ids, bm25_ids, vec_ids = store_ids(d.home)
    clean_ids, _, _ = _clean_rebuild(d, vault, work)
    out.update(
        {
            "acknowledged_writes": len(writer.acked),
            "lost_writes": len(lost),
            "changed_writes": len(changed),
            "unsearchable_writes": unsearchable,
            "index_equals_clean_rebuild": ids == clean_ids,
            "stores_agree": ids == bm25_ids == vec_ids,
            "chunks": len(ids),
        }
    )
    return out


def shares(work: Path, cycles: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    vault = work / "share-vault"
    make_notes(vault, 100)
    d = _daemon(work / "share-home", vault, {"SIDECAR_WATCH_POLL_SECONDS": "1"})
    d.start(timeout=300)
    errors: list[str] = []
    latencies: list[float] = []
    done = threading.Event()

    def query() -> None:
        with d.client() as c:
            while not done.is_set():
                t0 = time.perf_counter()
                try:
                    c.call("search", {"query": "kayak paddle"})
                    latencies.append((time.perf_counter() - t0) * 1000)
                except Exception as exc:  # counted
                    errors.append(repr(exc))
                time.sleep(0.02)

    thread = threading.Thread(target=query)
    thread.start()
    away = work / "share-away"
    expect_present: dict[str, str] = {}
    expect_gone: set[str] = set()
    t_start = time.monotonic()
    try:
        for i in range(cycles):
            vault.rename(away)
            d.call("index")
            d.wait_for(lambda h: any(r["mode"] == "offline" for r in h["roots"] if r["name"] == "vault"), 60)
            write(away / "away" / f"added-{i}.md", f"# Added {i}\n\nWritten while away, token aw{i}q.\n")
            expect_present[f"aw{i}q"] = f"vault/away/added-{i}"
            if i % 2 == 0:  # an edit of a note that stays
                note = away / f"folder{(i + 1) % 7}" / f"note-{(i * 7 + 1) % 100:03d}.md"
                if (
                    note.exists()
                    and f"vault/{note.relative_to(away).with_suffix('').as_posix()}" not in expect_gone
                ):
                    with note.open("a", encoding="utf-8") as fh:
                        fh.write(f"\n\nEdited while away: ed{i}q\n")
                    expect_present[f"ed{i}q"] = f"vault/{note.relative_to(away).with_suffix('').as_posix()}"
            if i % 3 == 0:
                victim = away / f"folder{i % 7}" / f"note-{rng.randrange(100):03d}.md"
                if victim.exists():
                    victim.unlink()
                    gone = f"vault/{victim.relative_to(away).with_suffix('').as_posix()}"
                    expect_gone.add(gone)
                    expect_present = {t: r for t, r in expect_present.items() if r != gone}
            away.rename(vault)
            want = 100 + i + 1 - len(expect_gone)  # every note added so far, minus the deleted ones
            d.wait_for(lambda h, n=want: h["index"]["files"] == n, timeout=120)
    finally:
        done.set()
        thread.join()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0, timeout=300)
    # Found = among the hits of its unique token (the notes are random words of one small
    # vocabulary, so the vector arm ranks them alike; the ranking is not under test here).
    missing = [
        t
        for t, ref in expect_present.items()
        if ref not in [h["reference"] for h in d.call("search", {"query": t})["hits"]]
    ]
    still = []
    for ref in expect_gone:
        try:
            d.call("get", {"reference": ref})
            still.append(ref)
        except RemoteError:
            pass  # gone, as it should be
    d.stop()
    ids, bm25_ids, vec_ids = store_ids(d.home)
    clean_ids, _, _ = _clean_rebuild(d, vault, work)
    return {
        "cycles": cycles,
        "seconds": round(time.monotonic() - t_start, 1),
        "queries": len(latencies),
        "query_errors": len(errors),
        "query_p50_ms": pct(latencies, 0.5) if latencies else None,
        "query_p95_ms": pct(latencies, 0.95) if latencies else None,
        "changes_missing": len(missing) + len(still),
        "deleted_while_away": len(expect_gone),
        "index_equals_clean_rebuild": ids == clean_ids,
        "stores_agree": ids == bm25_ids == vec_ids,
    }


QUERIES = ["how do I sync my notes", "link to a heading", "Kündigung", "canvas cards", "backup plan"]
MIXED = (0.6, 0.85)  # shares up to which an op is a search, then a recall; the rest are writes


def run_clients(
    d: DaemonProcess, clients: int, seconds: float, mix: tuple[float, float], label: str, seed: int = 0
) -> tuple[dict[str, list[float]], list[str]]:
    """``clients`` threads, each its own agent, calling search / recall / write (20 slugs each,
    rewritten) in the ``mix`` for ``seconds``: latencies in ms per op, and the errors."""
    lat: dict[str, list[float]] = {"search": [], "recall": [], "write": []}
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(k: int) -> None:
        rng = random.Random(k * 1000 + seed)
        with d.client(agent=f"{label.lower()}{k}") as c:
            i = 0
            while time.monotonic() < deadline:
                r = rng.random()
                op = "search" if r < mix[0] else "recall" if r < mix[1] else "write"
                params: dict[str, Any]
                if op == "search":
                    params = {"query": rng.choice(QUERIES)}
                elif op == "recall":
                    params = {"message": rng.choice(QUERIES)}
                else:
                    params = {"slug": f"n{i % 20}", "content": f"# {label} {k}\n\nclient {k} write {i}\n"}
                    i += 1
                t0 = time.perf_counter()
                try:
                    c.call(op, params)
                    with lock:
                        lat[op].append((time.perf_counter() - t0) * 1000)
                except Exception as exc:  # counted: the run measures what survives
                    with lock:
                        errors.append(f"{op}: {exc!r}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, errors


def load(work: Path, clients: int, seconds: float, vaults: list[Path]) -> dict[str, Any]:
    vault = work / "load-vault"
    if vaults:
        for v in vaults:
            shutil.copytree(v, vault / v.name)
    else:
        make_notes(vault, 1000)
    d = _daemon(work / "load-home", vault)
    d.start(timeout=1800)
    assert d.proc is not None
    rss_before = rss_mb(d.proc.pid)
    notes = sorted(vault.rglob("*.md"))
    for p in notes[: len(notes) // 2]:  # a sweep with real work runs during the load
        with p.open("a", encoding="utf-8") as fh:
            fh.write("\n\nEdited during the load run.\n")
    d.call("index")
    lat, errors = run_clients(d, clients, seconds, MIXED, "Load")
    sweep_phase = d.health()["index"]["phase"]
    time.sleep(10)
    rss_after = rss_mb(d.proc.pid)
    # Settled: the sweep and the re-embedding it caused are done and the minute's malloc_trim ran;
    # only then does a higher RSS than before the load mean memory that stays.
    d.wait_for(_idle, 600)
    time.sleep(65)
    rss_settled = rss_mb(d.proc.pid)
    d.stop()
    return {
        "clients": clients,
        "seconds": seconds,
        "notes": len(notes),
        "requests": sum(len(v) for v in lat.values()) + len(errors),
        "errors": len(errors),
        "error_samples": errors[:5],
        **{
            f"{op}_{name}_ms": pct(v, q) if v else None
            for op, v in lat.items()
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
        },
        **{f"{op}_count": len(v) for op, v in lat.items()},
        "phase_at_end": sweep_phase,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "rss_settled_mb": rss_settled,
        # The bound RELIABILITY.md states: settled RSS at most 10 % above the start of the load.
        "rss_within_bound": rss_settled["VmRSS"] <= 1.1 * rss_before["VmRSS"],
    }


def mixed(
    work: Path, clients: int, seconds: float, codes: list[str], rounds: int, cache: Path | None = None
) -> dict[str, Any]:
    """16 clients, 70 % search and 30 % memory writes, on an idle daemon (no sweep running): do
    searches wait for writes? Reports latencies per op, errors and RSS before, after and settled.

    The index is built once (with this checkout's code; kept in ``cache`` for later runs if given)
    and each run starts on a copy of it. ``codes``: source trees to run, each ``DIR`` or
    ``DIR,KEY=VALUE,...`` (environment for that daemon, e.g. a setting); with several, the runs
    alternate between them, ``rounds`` times, so an A/B shares one machine state as far as it can."""
    base = cache or work
    vault, seed = base / "mixed-vault", base / "mixed-seed"
    if not (seed / "index").is_dir():
        shutil.rmtree(vault, ignore_errors=True)
        make_notes(vault, 1000)
        d = _daemon(seed, vault)
        d.start(timeout=1800)
        d.wait_for(_idle, 1800)
        d.stop()
    runs = []
    for r in range(rounds):
        for n, spec in enumerate(codes):
            code, *sets = spec.split(",")
            home = work / f"mixed-home-{r}-{n}"
            shutil.copytree(seed, home, ignore=shutil.ignore_patterns("*.sock"))
            # The daemon imports this tree's package, never the current directory's.
            env = {"PYTHONPATH": str(Path(code).resolve()), "PYTHONSAFEPATH": "1"}
            env.update(kv.split("=", 1) for kv in sets)
            loaded = subprocess.run(
                [sys.executable, "-c", "import sidecar; print(sidecar.__file__)"],
                env={**clean_env(), **env},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            once = _mixed_once(_daemon(home, vault, env), clients, seconds)
            runs.append({"code": spec, "imports": loaded, "round": r, **once})
            print(json.dumps(runs[-1]), file=sys.stderr)
            shutil.rmtree(home, ignore_errors=True)
    return runs[0] if len(runs) == 1 else {"runs": runs}


def _idle(h: dict[str, Any]) -> bool:
    """No sweep running and every chunk embedded."""
    return bool(h["index"]["phase"] == "idle" and h["index"]["pending_vectors"] == 0)


def _settled_rss(d: DaemonProcess) -> dict[str, float]:
    """RSS once the daemon is idle again and 65 s more have passed."""
    assert d.proc is not None
    d.wait_for(_idle, 600)
    time.sleep(65)
    return rss_mb(d.proc.pid)


def _mixed_once(d: DaemonProcess, clients: int, seconds: float) -> dict[str, Any]:
    d.start(timeout=600)
    assert d.proc is not None
    d.wait_for(_idle, 600)
    alone: list[float] = []
    with d.client() as c:
        for i in range(100):
            t0 = time.perf_counter()
            c.call("search", {"query": QUERIES[i % len(QUERIES)]})
            alone.append((time.perf_counter() - t0) * 1000)
    rss_before = rss_mb(d.proc.pid)
    load_before = os.getloadavg()[0]
    lat, errors = run_clients(d, clients, seconds, (0.7, 0.7), "Mixed")
    load_after = os.getloadavg()[0]
    rss_after = rss_mb(d.proc.pid)
    vectors = d.health().get("vectors", {})
    rss_settled = _settled_rss(d)
    # The first load adds 320 notes (16 agents x 20 slugs) to the index, so part of its growth is
    # data. A second identical load rewrites the same notes: what it adds is growth without data,
    # the figure that tells bounded memory from a leak.
    lat2, errors2 = run_clients(d, clients, seconds, (0.7, 0.7), "Mixed")
    rss_again = _settled_rss(d)
    d.stop()
    return {
        "clients": clients,
        "seconds": seconds,
        "load_average_1m": [round(load_before, 2), round(load_after, 2)],
        "search_alone_p50_ms": pct(alone, 0.5),
        "search_alone_p99_ms": pct(alone, 0.99),
        "requests": sum(len(v) for v in lat.values()) + len(errors),
        "errors": len(errors),
        "error_samples": errors[:5],
        **{
            f"{op}_{name}_ms": pct(v, q) if v else None
            for op, v in lat.items()
            if op != "recall"
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
        },
        "search_count": len(lat["search"]),
        "write_count": len(lat["write"]),
        "embedded": vectors.get("embedded"),
        "reused": vectors.get("reused"),
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "rss_settled_mb": rss_settled,
        "rss_within_bound": rss_settled["VmRSS"] <= 1.1 * rss_before["VmRSS"],
        "second_load": {
            "errors": len(errors2),
            **{f"search_{name}_ms": pct(lat2["search"], q) for name, q in (("p50", 0.5), ("p99", 0.99))},
            "rss_settled_mb": rss_again,
            "rss_growth_vs_first": round(rss_again["VmRSS"] / rss_settled["VmRSS"], 3),
        },
    }


def pytest_runs(expr: str, runs: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    passed = failed = 0
    failures: list[str] = []
    for _ in range(runs):
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *expr.split()],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=3600,
        )
        if r.returncode == 0:
            passed += 1
        else:
            failed += 1
            failures.append(r.stdout[-2000:])
    return {"runs": runs, "passed": passed, "failed": failed, "failures": failures[:2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="crash,shares,load,mixed,faults,hostile")
    ap.add_argument("--runs", type=int, default=30, help="crash runs")
    ap.add_argument("--cycles", type=int, default=50, help="share outages")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--mixed-clients", type=int, default=16)
    ap.add_argument("--mixed-seconds", type=float, default=60)
    ap.add_argument(
        "--code",
        action="append",
        default=[],
        help="source tree for the mixed runs, DIR or DIR,KEY=VALUE,... (repeatable, run in turn; "
        "default: this checkout)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="mixed runs per source tree")
    ap.add_argument("--mixed-cache", type=Path, default=None, help="keep the mixed run's index here")
    ap.add_argument("--vault", type=Path, action="append", default=[], help="vault(s) for the load run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 10,000 idle connections need fds
    work = Path(tempfile.mkdtemp(prefix="sidecar-chaos-"))
    result: dict[str, Any] = {"work": str(work)}
    only = set(args.only.split(","))
    try:
        if "crash" in only:
            result["crash"] = crash(work, args.runs, args.seed)
            emit(result, args.out)
        if "shares" in only:
            result["shares"] = shares(work, args.cycles, args.seed)
            emit(result, args.out)
        if "load" in only:
            result["load"] = load(work, args.clients, args.seconds, args.vault)
            emit(result, args.out)
        if "mixed" in only:
            result["mixed"] = mixed(
                work,
                args.mixed_clients,
                args.mixed_seconds,
                args.code or [str(ROOT)],
                args.rounds,
                args.mixed_cache,
            )
            emit(result, args.out)
        if "faults" in only:
            result["faults"] = pytest_runs("tests/reliability/test_faults.py", 3)
            emit(result, args.out)
        if "hostile" in only:
            env = {"SIDECAR_CHAOS_EXAMPLES": "2000", "SIDECAR_CHAOS_IDLE": "10000"}
            result["hostile"] = pytest_runs("tests/reliability/test_socket_abuse.py", 1, env)
            emit(result, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "work"}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
