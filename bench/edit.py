"""Edit cost with the configured model: how many chunks one small edit of a long note re-embeds.

    python bench/edit.py --vault ../shared/eval/vaults/obsidian-help/en [--min-chunks 20] [--notes 5]

The vault is copied to a temporary folder (the benchmark edits notes there) and swept keyword-only
to find notes of at least ``--min-chunks`` chunks under the model's own tokenizer; the other notes
are removed from the copy, the rest embedded. Then, for each such note, one paragraph near the
middle gets one word replaced, and another one a sentence appended; after each edit a sweep and
the backfill run, and every text handed to the model is counted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import emit

from sidecar.config import load_config
from sidecar.daemon.compose import build
from sidecar.daemon.process import load_embedder
from sidecar.model.embedder import EmbedderSlot
from sidecar.stores.lifecycle import open_vectors

ADDED = " This sentence was added later to see how many chunks an edit costs."


def _paragraphs(lines: list[str]) -> list[int]:
    """Indexes of plain body lines long enough to edit (no headings, fences, tables, front matter)."""
    out, fence = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        elif not fence and len(line.split()) >= 12 and not line.startswith(("#", "|", "---", ">")):
            out.append(i)
    return out


def _save(path: Path, text: str, tick: list[int]) -> None:
    path.write_text(text, encoding="utf-8")
    tick[0] += 2_000_000_000  # a visibly newer mtime even within one clock tick
    os.utime(path, ns=(tick[0], tick[0]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", required=True, type=Path)
    ap.add_argument("--min-chunks", type=int, default=20)
    ap.add_argument("--notes", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sidecar-edit-"))
    vault = work / "vault"
    shutil.copytree(args.vault, vault)
    home = work / "home"
    cfg = load_config(flags={"home": str(home), "vault.path": str(vault)}, env={})
    slot = EmbedderSlot()
    load_embedder(cfg, slot)
    model = slot.model
    assert model is not None
    parts = build(cfg, slot)
    stores = parts.stores
    parts.indexer.sweep()  # keyword only: no vector table attached yet
    sizes: dict[str, int] = {}
    for path in sorted(vault.rglob("*.md")):
        key = "vault/" + path.relative_to(vault).with_suffix("").as_posix()
        sizes[key] = len(stores.manifest.chunks_of(key))
    chosen = sorted((k for k, n in sizes.items() if n >= args.min_chunks), key=lambda k: -sizes[k])
    chosen = chosen[: args.notes]
    stores.bm25.close()
    stores.manifest.close()
    # Only the chosen notes, in a vault and home of their own (removing the rest from the first
    # copy would trip the mass-deletion guard); the loaded model is reused.
    vault = work / "long-notes"
    for key in chosen:
        rel = key.removeprefix("vault/") + ".md"
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "vault" / rel, vault / rel)
    cfg = load_config(flags={"home": str(work / "home-long"), "vault.path": str(vault)}, env={})
    parts = build(cfg, slot)
    stores, indexer, vectors = parts.stores, parts.indexer, parts.vectors
    indexer.sweep()
    embedded: list[str] = []
    real = model.embed_passages

    def counting(texts: Any) -> Any:
        embedded.extend(texts)
        return real(texts)

    model.embed_passages = counting  # type: ignore[method-assign]
    vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)
    t0 = time.perf_counter()
    while vectors.embed_pending(batch=256):
        pass
    first = {"texts": len(embedded), "seconds": round(time.perf_counter() - t0, 2)}
    tick = [time.time_ns()]
    edits: list[dict[str, Any]] = []
    for key in chosen:
        path = vault / (key.removeprefix("vault/") + ".md")
        lines = path.read_text(encoding="utf-8").split("\n")
        body = _paragraphs(lines)
        if len(body) < 2:
            continue
        mid = len(body) // 2
        for kind, index in (("one word replaced", body[mid]), ("one sentence appended", body[mid - 1])):
            before = {v.chunk_id for v in stores.manifest.chunks_of(key)}
            words = lines[index].split(" ")
            if kind == "one word replaced":
                words[len(words) // 2] = "lighthouses"
                lines[index] = " ".join(words)
            else:
                lines[index] += ADDED
            _save(path, "\n".join(lines), tick)
            embedded.clear()
            t0 = time.perf_counter()
            indexer.sweep()
            while vectors.embed_pending(batch=256):
                pass
            after = {v.chunk_id for v in stores.manifest.chunks_of(key)}
            edits.append(
                {
                    "note": key,
                    "edit": kind,
                    "chunks_before": len(before),
                    "chunks_after": len(after),
                    "new_chunk_ids": len(after - before),
                    "texts_embedded": len(embedded),
                    "seconds": round(time.perf_counter() - t0, 3),
                }
            )
    emit(
        {
            "model": model.model_id,
            "notes_with_min_chunks": len([k for k, n in sizes.items() if n >= args.min_chunks]),
            "notes_used": {k: sizes[k] for k in chosen},
            "first_embedding": first,
            "edits": edits,
        },
        args.out,
    )
    stores.bm25.close()
    stores.manifest.close()


if __name__ == "__main__":
    main()
