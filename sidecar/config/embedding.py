"""How notes become vectors: the chunking and embedder sections and each built-in model's own
settings."""

import dataclasses
from pathlib import Path
from typing import Any

from sidecar.config.fields import _opt, camel, section


@section
class ChunkingConfig:
    max_tokens: int = _opt(
        200,
        "Largest chunk in model tokens, title and heading path included. A change cuts every note "
        "again at the next start (chunks whose text stays the same keep their vectors).",
        min=32,
        max=8192,
    )
    overlap: float = _opt(0.2, "Share of a chunk repeated at the start of the next one.", min=0.0, max=0.5)


@section
class EmbedderConfig:
    enabled: bool = _opt(True, "false: BM25 only, no model is loaded.")
    model: str = _opt(
        "multilingual-e5-small",
        "Model name; also the folder name under <home>/models/. Built in: multilingual-e5-small "
        "(about 100 languages) and all-MiniLM-L6-v2 (English, about 3x faster); each sets its own "
        "maxLength, pooling, prefixes and languages (and search.stemFirst) unless they are given.",
    )
    path: Path | None = _opt(None, "Folder with model.onnx and tokenizer.json (overrides resolution).")
    max_length: int = _opt(256, "Tokens the model sees; longer input is cut.", min=16, max=8192)
    pooling: str = _opt("mean", "How token states become one vector.", choices=("mean", "cls"))
    normalize: bool = _opt(True, "L2-normalise vectors (cosine similarity).")
    query_prefix: str = _opt("", "Text put before every query ('query: ' for e5 models).")
    passage_prefix: str = _opt("", "Text put before every chunk (e.g. 'passage: ').")
    batch_tokens: int = _opt(2048, "Token budget of one inference batch.", min=64)
    max_batch: int = _opt(32, "Most texts in one inference batch.", min=1, max=1024)
    batch_cells: int = _opt(
        80_000,
        "Bound on texts x longest-text-tokens squared per batch: attention memory grows with it "
        "(about 1.2 KB per cell measured for all-MiniLM-L6-v2).",
        min=1024,
    )
    retry_minutes: float = _opt(5.0, "A model that failed to load is tried again this often.", min=0.1)
    languages: str = _opt(
        "en", "Languages the model embeds well (comma-separated); other queries lean on BM25 (all: any)."
    )
    threads: int = _opt(0, "onnxruntime intra-op threads; 0 = number of cores.", min=0, max=256)
    int8_kernels: bool = _opt(
        True,
        "Run an int8 model's weights with int8 kernels (about 60 MB less memory, vectors within "
        "cosine 0.9997); false expands them to float32 once.",
    )
    cache_dir: Path | None = _opt(
        None,
        "Where converted models, int8-kernel copies and the German word list's hashes are kept; "
        "default <home>/models/.prepared/. "
        "Copies no daemon used for 30 days are removed from it (only names sidecar writes).",
    )


# Settings each built-in model needs (dotted keys); a value from the file, the environment or a
# flag wins. e5 models were trained with "query: " / "passage: " in front and mean pooling. Their
# cosines sit higher than MiniLM's: ranking and the duplicate check read them on the model's own
# scale (``embedder.cosine_range``), so their thresholds are the same for every model.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "multilingual-e5-small": {
        "embedder.maxLength": 256,
        "embedder.pooling": "mean",
        "embedder.queryPrefix": "query: ",
        "embedder.passagePrefix": "passage: ",
        "embedder.languages": "all",
        # A query's own language's word forms lead (help sets MRR@10 +0.015 each); e5's vectors
        # keep a stem's overreach (capital / capitalize) from turning into a hit.
        "search.stemFirst": ("en", "de"),
        # recall's gate one step looser than MiniLM's: the right page among recall's hits for 162
        # of 266 German and 143 of 187 help questions (142 and 136 at 0.4 / 0.35), and no more of
        # 205 off-topic messages leaking (60 of them written after the choice); one step further
        # (0.3 / 0.25) let small talk in (BENCHMARKS.md, seventeenth session).
        "recall.minSimilarity": 0.35,
        "recall.scoreFloor": 0.3,
    },
    "all-MiniLM-L6-v2": {
        "embedder.maxLength": 256,
        "embedder.pooling": "mean",
        "embedder.queryPrefix": "",
        "embedder.passagePrefix": "",
        "embedder.languages": "en",
        # Exact forms lead: with MiniLM the English swap let small talk through ("capital" met
        # "capitalize"), the German one cost the help set 0.013 MRR@10 (BENCHMARKS.md).
        "search.stemFirst": (),
    },
}


def model_settings(ecfg: EmbedderConfig, model: str) -> EmbedderConfig:
    """``ecfg`` for ``model`` with all of that model's own ``embedder.*`` settings (how the
    previous model of a migration is loaded: the configured values were meant for the new one)."""
    own = {
        name: value
        for name, value in MODEL_DEFAULTS.get(model, {}).items()
        if name.startswith("embedder.") and name.count(".") == 1
    }
    by_dotted = {f"embedder.{camel(f.name)}": f.name for f in dataclasses.fields(EmbedderConfig)}
    return dataclasses.replace(ecfg, model=model, **{by_dotted[k]: v for k, v in own.items()})
