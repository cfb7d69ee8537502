"""How long a deleted note stays in search, old code against new (one after the other, each over
its own copy of the vault): one note deleted, then a folder of ten notes (above the few a minute
that file events apply at once), a few rounds, 5 s apart.

    python bench/deletelag.py --old-code DIR [--notes 300] [--rounds 5] [--out FILE]

Per side and kind: seconds from the unlink to the note's word no longer found (search polled
through the socket every 20 ms), median and max. Keyword-only (the embedder off): the deletion path
alone. ``--old-code`` is an export of the code to compare with (``git archive OLD | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit

from sidecar.clients.client import Client


def marker(i: int) -> str:
    """A word of letters only, unique to note ``i``."""
    return "zq" + "".join(chr(97 + (i // 26**k) % 26) for k in range(3)) + "xq"


def make_vault(vault: Path, notes: int, rounds: int) -> None:
    for i in range(notes):
        path = vault / f"folder{i % 7}" / f"note-{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\nThe keeper of lighthouse {marker(i)} logs storm {i}.\n")
    for r in range(rounds):
        for j in range(10):
            path = vault / f"batch{r}" / f"b{j}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# Batch {r} {j}\n\nThe ferry {marker(100_000 + r * 10 + j)} leaves at {j}.\n")


def gone_after(client: Client, word: str, began: float, timeout: float = 120.0) -> float:
    while time.perf_counter() - began < timeout:
        if not client.call("search", {"query": word})["hits"]:
            return time.perf_counter() - began
        time.sleep(0.02)
    raise TimeoutError(f"{word} still found after {timeout} s")


def side(code: Path, notes: int, rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="deletelag-"))
    try:
        vault = work / "vault"
        make_vault(vault, notes, rounds)
        config = work / "config.yaml"
        config.write_text("embedder:\n  enabled: false\n")
        d = code_daemon(work / "home", vault, code, config)
        try:
            d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["phase"] == "idle", 300)
            single: list[float] = []
            folder: list[float] = []
            with d.client() as client:
                for r in range(rounds):
                    i = r * 7  # a note of folder0
                    (vault / "folder0" / f"note-{i:04d}.md").unlink()
                    single.append(gone_after(client, marker(i), time.perf_counter()))
                    time.sleep(5)  # rounds apart: each deletion its own burst
                    shutil.rmtree(vault / f"batch{r}")
                    began = time.perf_counter()
                    folder.append(
                        max(gone_after(client, marker(100_000 + r * 10 + j), began) for j in range(10))
                    )
                    time.sleep(5)
            held = [r["name"] for r in d.health()["roots"] if r.get("hold")]
        finally:
            d.stop()
        return {
            "single_note_s": {"median": round(statistics.median(single), 2), "max": round(max(single), 2)},
            "folder_of_10_s": {"median": round(statistics.median(folder), 2), "max": round(max(folder), 2)},
            "held": held,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--notes", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {
        "notes": args.notes,
        "rounds": args.rounds,
        "old": side(args.old_code.resolve(), args.notes, args.rounds),
        "new": side(ROOT, args.notes, args.rounds),
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
