"""Embedding throughput: the daemon's own pipeline against a bare onnxruntime loop on the same texts.

    python bench/throughput.py --vault ../shared/eval/vaults/obsidian-help/en \
        --vault ../shared/eval/vaults/obsidian-help/de --out bench/out/throughput.json

Method (one process, one model session, so the figures compare within one run):
1. The vaults are indexed keyword-only into a temporary home (real chunker, real token counts).
2. Pipeline: ``Vectoring.embed_pending`` until nothing waits, exactly as the daemon's backfill runs
   it: manifest reads in priority order, de-duplication, tokenization, padding, inference, pooling,
   LanceDB writes and manifest flags. A proxy in front of the onnxruntime session records the
   feeds of every ``run`` call.
3. Bare loop: ``session.run`` over the recorded feeds again (same texts, same batch shapes), nothing
   else: the ceiling for those batches on this machine.
4. Ideal shapes: the distinct texts sorted by length over the whole corpus and cut with the same
   token budget: how much a longer look-ahead could save on padding.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import combined_vault, emit, rss_mb

from sidecar.config import load_config
from sidecar.daemon.compose import build
from sidecar.daemon.process import load_embedder
from sidecar.model.embedder import EmbedderSlot, OnnxEmbedder, _batches
from sidecar.stores.embedtext import joined_embed_text
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.manifest import Manifest


class Recorder:
    """Stands in for the onnxruntime session: times every run and keeps its feeds."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.feeds: list[dict[str, np.ndarray[Any, Any]]] = []
        self.seconds = 0.0

    def run(self, names: Any, feeds: dict[str, np.ndarray[Any, Any]]) -> Any:
        self.feeds.append(feeds)
        t0 = time.perf_counter()
        try:
            return self.session.run(names, feeds)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


class RssSampler:
    """Largest VmRSS seen per phase (sampled every 20 ms in a thread)."""

    def __init__(self) -> None:
        self.phase = "start"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now = rss_mb(os.getpid())["VmRSS"]
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), now)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peaks


def bare(session: Any, feeds: list[dict[str, np.ndarray[Any, Any]]]) -> float:
    t0 = time.perf_counter()
    for f in feeds:
        session.run(None, f)
    return time.perf_counter() - t0


def ideal_feeds(model: OnnxEmbedder, texts: list[str], inputs: set[str]) -> list[dict[str, Any]]:
    enc = model.encode(texts)
    lengths = [len(e) for e in enc]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out = []
    for batch in _batches(order, lengths, model.cfg):
        width = max(lengths[i] for i in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, i in enumerate(batch):
            ids[row, : lengths[i]] = enc[i]
            mask[row, : lengths[i]] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        out.append(feeds)
    return out


def waiting_texts(manifest: Manifest) -> list[tuple[str, int, str]]:
    """(model text, tokens, embed hash) of each chunk without a vector: the manifest keeps a
    model text as a head plus where in the chunk's text the rest starts (``embedtext``), so the
    column ``embed_text`` alone is only that head."""
    rows = manifest.read(
        "SELECT embed_text, text, embed_from, tokens, embed_hash FROM chunks WHERE has_vector = 0"
    )
    return [(joined_embed_text(e, t, start), n, h) for e, t, start, n, h in rows]


def run(vault: Path, home: Path, overrides: dict[str, str]) -> dict[str, Any]:
    cfg = load_config(flags={"home": str(home), "vault.path": str(vault), **overrides}, env={})
    sampler = RssSampler()
    slot = EmbedderSlot()
    parts = build(cfg, slot)
    stores, indexer = parts.stores, parts.indexer
    sampler.phase = "model_load"
    load_embedder(cfg, slot)
    model = slot.model
    assert isinstance(model, OnnxEmbedder)
    sampler.phase = "keyword_sweep"
    t0 = time.perf_counter()
    indexer.sweep()
    sweep_s = time.perf_counter() - t0
    rows = waiting_texts(stores.manifest)
    distinct = {h: (t, n) for t, n, h in rows}
    session = model._session
    inputs = {i.name for i in session.get_inputs()}
    warm = ideal_feeds(model, [t for t, _ in list(distinct.values())[:64]], inputs)
    bare(session, warm)  # first runs plan memory; keep them out of every figure
    recorder = Recorder(session)
    model._session = recorder
    parts.vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)
    rss_before = rss_mb(os.getpid())["VmRSS"]
    sampler.phase = "pipeline"
    t0 = time.perf_counter()
    while parts.vectors.embed_pending():
        pass
    pipeline_s = time.perf_counter() - t0
    rss_after = rss_mb(os.getpid())
    model._session = session
    sampler.phase = "bare"
    bare_s = bare(session, recorder.feeds)
    padded = sum(int(f["input_ids"].size) for f in recorder.feeds)
    sampler.phase = "ideal"
    ideal = ideal_feeds(model, [t for t, _ in distinct.values()], inputs)
    ideal_s = bare(session, ideal)
    ideal_padded = sum(int(f["input_ids"].size) for f in ideal)
    tokens = sum(n for _, n in distinct.values())
    stores.bm25.close()
    stores.manifest.close()
    return {
        "chunks": len(rows),
        "distinct_texts": len(distinct),
        "model_tokens": tokens,
        "keyword_sweep_s": round(sweep_s, 2),
        "batches": len(recorder.feeds),
        "padded_tokens": padded,
        "pipeline_s": round(pipeline_s, 2),
        "pipeline_inference_s": round(recorder.seconds, 2),
        "bare_same_batches_s": round(bare_s, 2),
        "pipeline_vs_bare": round(pipeline_s / bare_s, 3),
        "pipeline_chunks_per_s": round(len(rows) / pipeline_s, 1),
        "pipeline_tokens_per_s": round(tokens / pipeline_s),
        "bare_chunks_per_s": round(len(distinct) / bare_s, 1),
        "bare_tokens_per_s": round(tokens / bare_s),
        "ideal_batches": len(ideal),
        "ideal_padded_tokens": ideal_padded,
        "bare_ideal_shapes_s": round(ideal_s, 2),
        "pipeline_vs_ideal": round(pipeline_s / ideal_s, 3),
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "rss_peak_by_phase_mb": sampler.stop(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", required=True, type=Path, action="append")
    ap.add_argument("--set", action="append", default=[], help="config override: embedder.batchTokens=4096")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    overrides = dict(s.split("=", 1) for s in args.set)
    vault = combined_vault(args.vault)
    home = Path(tempfile.mkdtemp(prefix="sidecar-throughput-"))
    result: dict[str, Any] = {
        "vaults": [str(v) for v in args.vault],
        "overrides": overrides,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    result.update(run(vault, home, overrides))
    emit(result, args.out)


if __name__ == "__main__":
    main()
