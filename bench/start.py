"""A daemon's start, old code against new, alternately: a first start on an empty home (time to
keyword-searchable; the model is converted beside it) and a restart on a copy of a built home
(time to keyword-searchable and to ready, vectors served).

    python bench/start.py --vault V --home BUILT --old-code DIR [--rounds 3] [--out F]

``--old-code`` is a checkout (or ``git archive`` export) of the code to compare with; each side's
daemons run with ``PYTHONPATH`` set to its code. ``--home`` is a fully indexed home of the same
vault (an ``eval.py --work`` folder's ``home`` and ``vault``): each side restarts on its own copy.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, bench_daemon, emit, startup_times


def first_start(vault: Path, code: Path, scratch: Path) -> float:
    home = Path(tempfile.mkdtemp(prefix="first-", dir=scratch)) / "home"
    d = bench_daemon(vault, home, env={"PYTHONPATH": str(code)})
    try:
        return round(startup_times(d, ready=False, timeout=120, poll=0.02)[0], 2)
    finally:
        d.stop()
        shutil.rmtree(home.parent, ignore_errors=True)


def restart(vault: Path, code: Path, home: Path) -> tuple[float, float]:
    d = bench_daemon(vault, home, env={"PYTHONPATH": str(code)})
    try:
        keyword, ready = startup_times(d, timeout=600, poll=0.02)
        assert ready is not None
        return round(keyword, 2), round(ready, 2)
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--home", type=Path, required=True, help="a fully indexed home of this vault")
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "start.json")
    args = ap.parse_args()
    vault = args.vault.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="sidecar-start-"))
    codes = {"old": args.old_code.resolve(), "new": ROOT}
    homes = {}
    for side in codes:
        homes[side] = scratch / side / "home"
        shutil.copytree(args.home, homes[side])
    result: dict[str, Any] = {side: {"first_keyword_s": [], "restart_s": []} for side in codes}
    try:
        for i in range(args.rounds):
            for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
                keyword, ready = restart(vault, codes[side], homes[side])
                first = first_start(vault, codes[side], scratch)
                result[side]["restart_s"].append({"keyword": keyword, "ready": ready})
                result[side]["first_keyword_s"].append(first)
                print(
                    side, "first start keyword", first, "restart keyword / ready", keyword, ready, flush=True
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    emit({"vault": str(vault), **result}, args.out)


if __name__ == "__main__":
    main()
