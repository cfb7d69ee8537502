"""How long health's immutable-flag check (``stores.frozen.frozen_in_index``) takes on a big index.

Builds a synthetic index of the real layout's names in a temporary folder (empty files: the check
asks flags, never reads them): a vector table with ``--data`` data files and ``--versions``
manifests, ``--agents`` agents' memory keyword indexes of ``--per-agent`` files each, and times
the check ``--runs`` times; prints the entries it read from folders, the flags it asked, and the
median, lowest and highest milliseconds.

    python bench/frozen_walk.py --data 60000 --versions 20000 --agents 40 --per-agent 200
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sidecar.stores import frozen
from sidecar.stores.manifest import Manifest


def build(index: Path, data: int, versions: int, agents: int, per_agent: int) -> None:
    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    pairs = [index / "bm25", index / "bm25/memory-all"] + [
        index / f"bm25/memory/agent{a}" for a in range(agents)
    ]
    for n, folder in enumerate(pairs):
        for pair in ("chunks", "pages"):
            (folder / pair).mkdir(parents=True)
            for name in ("meta.json", ".managed.json", ".tantivy-meta.lock"):
                (folder / pair / name).write_text("{}")
            for f in range(per_agent if n >= 2 else 40):
                (folder / pair / f"{f}.idx").write_text("")
    table = index / "vectors/chunks.lance"
    for folder in ("data", "_versions", "_transactions", "_indices"):
        (table / folder).mkdir(parents=True)
    for f in range(data):
        (table / "data" / f"{f}.lance").write_text("")
    for v in range(1, versions + 1):
        (table / "_versions" / f"{v}.manifest").write_text("")
    (table / "_versions/latest_version_hint.json").write_text(f'{{"version":{versions}}}')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=int, default=60000)
    ap.add_argument("--versions", type=int, default=20000)
    ap.add_argument("--agents", type=int, default=40)
    ap.add_argument("--per-agent", type=int, default=200)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    counts = {"read": 0, "asked": 0}
    real_scandir, real_frozen = os.scandir, frozen.frozen

    @contextlib.contextmanager
    def scandir(path: Path) -> Iterator[Iterator[os.DirEntry[str]]]:
        with real_scandir(path) as listing:

            def entries() -> Iterator[os.DirEntry[str]]:
                for entry in listing:
                    counts["read"] += 1
                    yield entry

            yield entries()

    def asked(path: Path) -> bool:
        counts["asked"] += 1
        return real_frozen(path)

    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        build(index, args.data, args.versions, args.agents, args.per_agent)
        frozen.os.scandir, frozen.frozen = scandir, asked  # type: ignore[assignment]
        result = frozen.frozen_in_index(index)
        print(f"entries read {counts['read']}, flags asked {counts['asked']}, result {result}")
        frozen.os.scandir, frozen.frozen = real_scandir, real_frozen  # type: ignore[assignment]
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            frozen.frozen_in_index(index)
            times.append((time.perf_counter() - start) * 1000)
        print(
            f"median {statistics.median(times):.1f} ms, lowest {min(times):.1f}, highest {max(times):.1f} "
            f"({args.runs} runs)"
        )


if __name__ == "__main__":
    main()
