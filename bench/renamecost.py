"""What a renamed folder costs the sweep that applies it: each moved note is read and cut again
(only its vectors are kept, by text). In process, real stores, the file events of `mv` handed to
the real index loop; chunk sizes counted with the MiniLM tokenizer shipped with sidecar (as a model
would count them), bag-of-words vectors (reused, so the model does not matter here).

    python bench/renamecost.py [--notes 300] [--rounds 3] [--out FILE]

Per round the folder is renamed (back and forth) and the sweep that applies it is timed whole and
by part: read and parsed (``draft``, and how many notes), cut into chunks (``finish``), written
(``Writer.write``), the old entries removed (``Writer.retire`` + ``Writer.delete``); then the
chunks embedded again (0 when every vector is reused). For scale: the first index of the same
notes, and a sweep of the same events once nothing changed (each note looked at, none read).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sidecar.index.indexer as indexer_mod  # noqa: E402  (after the path: run from anywhere)
from sidecar.config import load_config  # noqa: E402
from sidecar.daemon.compose import build  # noqa: E402
from sidecar.daemon.indexing import IndexLoop  # noqa: E402
from sidecar.model.embedder import EmbedderSlot  # noqa: E402
from sidecar.model.tokenizer import HfTokenizer  # noqa: E402
from sidecar.stores.lifecycle import open_vectors  # noqa: E402

# The words of the notes' text (letters only: each a token or two of the tokenizer's).
WORDS = re.findall(
    r"\w+",
    "the backup server network garden recipe meeting project invoice travel photo camera battery "
    "kernel python sqlite docker lighthouse harbour keeper storm budget engine sail anchor winter",
)


class TokenCounting:
    """Bag-of-words vectors; tokens counted by the real MiniLM tokenizer (what chunking costs)."""

    model_id = "bench-bow@1"
    dim = 64
    pooling = "mean"

    def __init__(self) -> None:
        self.tok = HfTokenizer(ROOT / "sidecar" / "data" / "all-MiniLM-L6-v2.tokenizer.json")
        self.embedded = 0

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tok.ids_batch(list(texts), add_special=False)] if texts else []

    def _vec(self, text: str) -> np.ndarray[Any, Any]:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        self.embedded += len(texts)
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray[Any, Any]:
        return self._vec(text)


def make_vault(vault: Path, notes: int) -> None:
    """``notes`` notes of 2-4 KB (front matter, sections, links) in Projects/Archive, as many
    elsewhere (they stay)."""
    rnd = random.Random(1)

    def para(k: int) -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(k))

    for i in range(2 * notes):
        folder = vault / "Projects" / "Archive" if i < notes else vault / f"Area{i % 9}"
        folder.mkdir(parents=True, exist_ok=True)
        sections = [f"## Part {s}\n\n{para(rnd.randint(60, 120))}\n" for s in range(rnd.randint(2, 4))]
        text = (
            f"---\ntags: [t{i % 17}]\n---\n# Note {i}\n\n{para(40)}\n\n"
            + "\n".join(sections)
            + f"\nSee [[Note {(i * 7) % (2 * notes)}]] and [[Note {(i * 13) % (2 * notes)}]].\n"
        )
        (folder / f"Note {i}.md").write_text(text)


class Timers:
    """Seconds spent in the wrapped calls, by name, since the last ``reset``."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def reset(self) -> None:
        self.spent.clear()
        self.calls.clear()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **k: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            started = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - started

        return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="renamecost-") as tmp:
        base = Path(tmp)
        vault = base / "vault"
        make_vault(vault, args.notes)
        cfg = load_config(flags={"home": str(base / "home"), "vault.path": str(vault)}, env={})
        model = TokenCounting()
        slot = EmbedderSlot()
        slot.set_ok(model, "bench")
        parts = build(cfg, slot)
        parts.vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)
        t = Timers()
        for name, part in (("draft", "read"), ("finish", "cut")):  # as the indexer calls them
            setattr(indexer_mod, name, t.wrap(part, getattr(indexer_mod, name)))
        writer = parts.indexer.writer
        writer.write = t.wrap("write", writer.write)  # type: ignore[method-assign]
        writer.retire = t.wrap("retire", writer.retire)  # type: ignore[method-assign]
        writer.delete = t.wrap("delete", writer.delete)  # type: ignore[method-assign]
        loop = IndexLoop(
            cfg, parts.indexer, slot, parts.problems, stop=threading.Event(), beat=lambda _a: None
        )

        def run(paths: set[str]) -> tuple[float, float, int]:
            """(sweep seconds, embedding seconds after it, chunks embedded) of these events."""
            t.reset()
            model.embedded = 0
            loop.changed(paths)
            started = time.perf_counter()
            job = loop._next()
            assert job is not None
            loop._run(job)
            swept = time.perf_counter() - started
            started = time.perf_counter()
            while parts.vectors.embed_pending():
                pass
            return swept, time.perf_counter() - started, model.embedded

        started = time.perf_counter()
        parts.indexer.sweep()
        while parts.vectors.embed_pending():
            pass
        first = time.perf_counter() - started
        chunks = parts.stores.manifest.counts()["chunks"]
        rows = []
        names = ("Archive", "Archive2")
        for r in range(args.rounds):
            old, new = vault / "Projects" / names[r % 2], vault / "Projects" / names[(r + 1) % 2]
            old.rename(new)
            swept, embedding, embedded = run({str(old), str(new)})
            read = t.calls.get("read", 0)
            rows.append({"sweep": swept, "embed": embedding, "embedded": embedded, "notes_read": read})
            rows[-1].update(t.spent)
            moved = sum(
                1 for k in parts.stores.manifest.file_states("vault/Projects/") if names[(r + 1) % 2] in k
            )
            assert moved == args.notes, moved
        # The same events once nothing changed: every note looked at (stat), none read.
        here = vault / "Projects" / names[args.rounds % 2]
        still, _e, _n = run({str(here)})
        parts.stores.close()

    def med(key: str) -> float:
        return statistics.median(row.get(key, 0.0) for row in rows)

    result = {
        "notes_moved": args.notes,
        "notes_in_vault": 2 * args.notes,
        "chunks_in_vault": chunks,
        "first_index_all_seconds": round(first, 3),
        "rename_sweep_seconds_median": round(med("sweep"), 3),
        "rename_read_seconds": round(med("read"), 3),
        "rename_cut_seconds": round(med("cut"), 3),
        "rename_write_seconds": round(med("write"), 3),
        "rename_retire_delete_seconds": round(med("retire") + med("delete"), 3),
        "rename_embed_after_seconds": round(med("embed"), 3),
        "rename_chunks_embedded_again": [row["embedded"] for row in rows],
        "rename_notes_read": [row["notes_read"] for row in rows],
        "unchanged_events_sweep_seconds": round(still, 3),
        "rounds": [{k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()} for row in rows],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
