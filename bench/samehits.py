"""Whether two codes answer every labeled question with byte-identical hits: a change meant to
make searches cheaper must not change an answer.

    python bench/samehits.py --old-code OLD --work W [--sets de,help,ids,lang] [--limits 10,30]

``--old-code`` is a checkout (or ``git archive`` export) of the code to compare with; ``--work``
holds the kept index of each set (``W/de-e5``, ``W/help-e5`` ...: ``bench/allsets.py``'s folders).
Each set's folder is copied twice (the originals are never written), a daemon of each code runs on
its copy, and every question of the set's question files goes to both at each limit. The hits
(every field, scores as sent) are compared as JSON text, and so is the rest of the answer.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from allsets import SETS
from common import ROOT, code_daemon, emit
from eval import _GENERICS, _ID_LINES, _ID_QUERIES, _identifier

from sidecar.clients.client import Client

CORPORA = ("de", "help", "ids", "lang")


def questions(corpus: str, vault: Path) -> list[str]:
    """Every question of the labeled sets of ``corpus`` (each once, in file order)."""
    if corpus == "ids":
        return identifier_queries(vault)
    out: list[str] = []
    for command, prefix, _ in SETS.values():
        if prefix == corpus and command[0] == "questions":
            lines = (ROOT / command[1]).read_text(encoding="utf-8").splitlines()
            out += [json.loads(line)["q"] for line in lines if line.strip()]
    return list(dict.fromkeys(out))


def identifier_queries(vault: Path, notes: int = 40) -> list[str]:
    """The queries ``eval.py identifiers`` asked of this vault (the same draws: its notes already
    hold their identifier lines)."""
    rng = random.Random(7)
    picked = rng.sample(sorted(vault.rglob("*.md")), notes)
    out = []
    for i, note in enumerate(picked):
        kind = i % len(_ID_LINES)
        ident = _identifier(rng, kind)
        title = max(re.findall(r"\w+", note.stem) or [note.stem], key=len)
        out += [p.format(id=ident, title=title, generic=_GENERICS[kind]) for p in _ID_QUERIES]
    return out


def answers(folder: Path, code: Path, queries: list[str], limits: list[int]) -> list[str]:
    """Each query's answer at each limit as JSON text, from a daemon of ``code`` on ``folder``."""
    config = folder / "samehits.yaml"
    config.write_text("{}\n")
    daemon = code_daemon(folder / "home", folder / "vault", code, config)
    try:
        daemon.wait_ready(timeout=900, poll=0.2)
        with Client(daemon.cfg.socket_path) as client:
            return [
                json.dumps(client.call("search", {"query": q, "limit": limit}), sort_keys=True)
                for limit in limits
                for q in queries
            ]
    finally:
        daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-code", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path, help="the kept indexes (W/<set>-e5)")
    ap.add_argument("--sets", default=",".join(CORPORA))
    ap.add_argument("--limits", default="10,30")
    ap.add_argument("--model", default="e5")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    limits = [int(x) for x in args.limits.split(",")]
    result: dict[str, Any] = {"limits": limits, "sets": {}}
    with tempfile.TemporaryDirectory(prefix="samehits-") as tmp:
        for corpus in args.sets.split(","):
            kept = args.work / f"{corpus}-{args.model}"
            qs = questions(corpus, kept / "vault")
            got = []
            for side, code in (("new", ROOT), ("old", args.old_code.resolve())):
                folder = Path(tmp) / f"{corpus}-{side}"
                shutil.copytree(kept, folder, symlinks=True)
                got.append(answers(folder, code, qs, limits))
                shutil.rmtree(folder)
            differ = [
                {"limit": limits[i // len(qs)], "query": qs[i % len(qs)]}
                for i, (a, b) in enumerate(zip(*got, strict=True))
                if a != b
            ]
            result["sets"][corpus] = {"questions": len(qs), "answers": len(got[0]), "differ": differ}
    result["same"] = not any(s["differ"] for s in result["sets"].values())
    emit(result, args.out)


if __name__ == "__main__":
    main()
