"""Sentence embeddings with onnxruntime: the loaded model (token states -> pooled, normalised
vectors in length-sorted batches), the daemon's slot for it, and each model's cosine scale. Where
the files come from is :mod:`sidecar.model.locate`; every path ends in :func:`load_model` over a
folder-like :class:`~sidecar.model.files.ModelFiles`, which is what the tests exercise.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sidecar.config import Config, EmbedderConfig
from sidecar.contracts.errors import EmbedderError
from sidecar.model import prepared
from sidecar.model.files import ModelFiles, sha256_file
from sidecar.model.int8prep import cache_name, ensure_prepared
from sidecar.model.kernels import FLOAT, with_accuracy
from sidecar.model.locate import resolve_model
from sidecar.model.tokenizer import Tokenizer, make_tokenizer

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
CountTokens = Callable[[Sequence[str]], list[int]]


class Embedder(Protocol):
    """What the indexer and retrieval need from a model (the fake embedder in tests has it too)."""

    model_id: str
    dim: int
    pooling: str

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    def embed_passages(self, texts: Sequence[str]) -> Vectors: ...

    def embed_query(self, text: str) -> Vectors: ...


def _file_digest(path: Path) -> str:
    return sha256_file(path)[:12]


class OnnxEmbedder:
    """A sentence-embedding ONNX model: token states -> pooled, L2-normalised vectors."""

    def __init__(
        self,
        files: ModelFiles,
        ecfg: EmbedderConfig,
        prepared_dir: Path | None = None,
        on_tokenizer: Callable[[CountTokens], None] | None = None,
    ) -> None:
        import onnxruntime as ort  # heavy: only the daemon loads a model

        self.cfg = ecfg
        self.pooling = ecfg.pooling
        self.languages = ecfg.languages  # what this model reads, whatever the configuration says now
        self._tok = make_tokenizer(files.tokenizer)
        if on_tokenizer is not None:
            on_tokenizer(self.count_tokens)  # chunking can start while the session is built
        opts = _session_options(ort, ecfg)
        digest = files.sha256[:12] if files.sha256 else _file_digest(files.onnx)
        self.prepared: Path | None = None
        # What the weights are in memory: already 4-bit, int8 (the prepared copy) or float32.
        self.weights = files.kernels or "float32"
        if ecfg.int8_kernels and prepared_dir is not None and files.kernels is None:
            target = prepared_dir / cache_name(digest, ort.__version__)
            self.prepared = ensure_prepared(files.onnx, target)

        def open_session(path: Path) -> Any:
            # From bytes, not a path: onnxruntime would keep the file mapped. Its Python wrapper
            # keeps the bytes for a provider fallback that a CPU-only session never takes: drop
            # them, or the whole file stays resident beside the session (+65 MB for e5).
            data = _graph_bytes(path, files)
            session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
            if getattr(session, "_model_bytes", None) is not None:
                session._model_bytes = None
            return session

        session: Any = None
        if self.prepared is not None:
            try:
                session = open_session(self.prepared)
                self.weights = "int8"
            except Exception as exc:  # onnxruntime raises its own untyped exceptions
                log.warning("model_prepared_unusable path=%s error=%s", self.prepared, exc)
                self.prepared.unlink(missing_ok=True)  # made again at the next start
                self.prepared = None
                self.weights = "float32"
        if session is None:
            try:
                session = open_session(files.onnx)
            except Exception as exc:  # onnxruntime raises its own untyped exceptions
                raise EmbedderError(f"cannot load model {files.onnx}: {exc}") from exc
        self._session = session
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise EmbedderError(f"model {files.onnx} lacks inputs {sorted(missing)}")
        out = self._session.get_outputs()[0]
        dim = out.shape[-1]
        if not isinstance(dim, int):
            dim = int(self._run(["probe"]).shape[1])
        self.dim = int(dim)
        # The source file names the model: the prepared copy computes the same vectors (checked
        # to cosine 0.999 before it is used), so switching int8Kernels keeps the stored vectors.
        self.model_id = f"{ecfg.model}@{digest}"
        self.files = files
        # How the 4-bit weights are multiplied (kernels.json of the converted folder).
        self.compute = "float32" if files.accuracy == FLOAT or self.weights == "float32" else "int8"
        if prepared_dir is not None:  # the copies it was read from are in use (``prepared``)
            prepared.loaded(self, prepared_dir, [self.prepared, files.onnx.parent])

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens excluded, never truncated."""
        return _count(self._tok, texts)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with the special tokens, cut to ``max_length`` the way the tokenizer's own
        truncation cuts (the content first, then the specials around it)."""
        room = max(self.cfg.max_length - self._tok.specials, 1)
        return self._tok.ids_batch(texts, add_special=True, limit=room)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        prefix = self.cfg.passage_prefix
        return self._run([prefix + t for t in texts])

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self._run([self.cfg.query_prefix + text])[0]
        return vector

    def _run(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        rows = self.encode(texts)
        order = sorted(range(len(texts)), key=lambda i: len(rows[i]))
        result: Vectors | None = None  # sized by the first batch (the probe run finds the dimension)
        for batch in _batches(order, [len(r) for r in rows], self.cfg):
            lengths = np.fromiter((len(rows[i]) for i in batch), dtype=np.int64, count=len(batch))
            width = int(lengths.max())
            # Pad in one step: a mask from the lengths, the ids scattered into it.
            mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            ids[mask.astype(bool)] = np.fromiter(
                (t for i in batch for t in rows[i]), dtype=np.int64, count=int(lengths.sum())
            )
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            try:
                states = self._session.run(None, feeds)[0]
            except Exception as exc:  # onnxruntime's own exception types are not public
                raise EmbedderError(f"inference failed: {exc}") from exc
            pooled = _pool(states, mask, self.pooling)
            if result is None:
                result = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            result[batch] = pooled
        assert result is not None  # texts is not empty, so there was a batch
        vectors = result
        if self.cfg.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return vectors


def _batches(order: list[int], lengths: list[int], ecfg: EmbedderConfig) -> list[list[int]]:
    """Consecutive runs of length-sorted texts (so little padding) within three bounds: padded
    tokens, texts, and texts x width squared. Inference memory peaks with the last one (attention
    scores; measured ~1.2 KB per cell for MiniLM int8) while per-text speed levels off after a few
    long texts, so long texts go in small batches and short ones in large ones."""
    out: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = max(lengths[i], lengths[current[-1]] if current else 0)
        n = len(current) + 1
        if current and (
            width * n > ecfg.batch_tokens or n > ecfg.max_batch or n * width * width > ecfg.batch_cells
        ):
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


def _pool(states: Any, mask: Any, pooling: str) -> Any:
    if states.ndim == 2:  # the model pools itself
        return states
    if pooling == "cls":
        return states[:, 0, :]
    weights = mask[:, :, None].astype(np.float32)
    return (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def _session_options(ort: Any, ecfg: EmbedderConfig) -> Any:
    opts = ort.SessionOptions()
    # The CPU arena keeps the peak allocation forever (GBs after big batches): off.
    opts.enable_cpu_mem_arena = False
    # Full optimisation: the bundled int8 model stores weights as int8 + Cast + Mul; constant
    # folding turns them into float once (+120 MB resident) instead of on every call (a
    # one-text query took 39 ms without it, 2.6 ms with it; BENCHMARKS.md). The
    # prepared copy (sidecar.model.int8prep) has no such nodes left and keeps the weights int8.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = ecfg.threads or (os.cpu_count() or 1)
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def _graph_bytes(path: Path, files: ModelFiles) -> bytes:
    """The model file's bytes, with the kernels measured fastest on this CPU (model.kernels)."""
    data = path.read_bytes()
    if files.accuracy is not None and path == files.onnx:
        try:
            data = with_accuracy(data, files.accuracy)
        except ValueError as exc:
            log.warning("model_kernels_unchanged path=%s reason=%s", path, exc)
    return data


# A word longer than this (a URL, a blob, a line without spaces) counts a piece per
# ``_CHARS_PER_PIECE`` characters, as a tokenizer cuts it: counted as one word, a 4.9 MB line
# became one chunk, which every search and recall then returned whole (4.9 MB for a recall
# budget of 1,500 tokens).
_LONG_WORD = 24
_CHARS_PER_PIECE = 4


def approx_token_count(texts: Sequence[str]) -> list[int]:
    """Token estimate when no tokenizer could load (BM25-only mode): ~1.4 pieces per word, a
    long word one per four characters."""
    out = []
    for t in texts:
        words = t.split()
        long = sum(len(w) / _CHARS_PER_PIECE - 1.4 for w in words if len(w) > _LONG_WORD)
        out.append(int(len(words) * 1.4 + long) + t.count("\n"))
    return out


def load_model(cfg: Config, on_tokenizer: Callable[[CountTokens], None] | None = None) -> OnnxEmbedder:
    """The configured model; ``on_tokenizer`` gets its token counter as soon as the tokenizer is
    loaded (before the session is built, and during a first start's conversion)."""
    files = resolve_model(cfg, on_tokenizer and (lambda path: on_tokenizer(tokenizer_counter(path))))
    log.info("embedder_loading model=%s origin=%s path=%s", cfg.embedder.model, files.origin, files.onnx)
    return OnnxEmbedder(files, cfg.embedder, cfg.prepared_dir, on_tokenizer)


def tokenizer_counter(path: Path) -> CountTokens:
    """Token counts as a model with this tokenizer counts them (its specials not included)."""
    tok = make_tokenizer(path)
    return lambda texts: _count(tok, texts)


def _count(tok: Tokenizer, texts: Sequence[str]) -> list[int]:
    return [len(ids) for ids in tok.ids_batch(texts, add_special=False)] if texts else []


class EmbedderSlot:
    """The daemon's view of the model: state ``idle | loading | ok | failed`` and the loaded model
    (``fallback``: the configured model failed to load and another one answers in its place)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = "idle"
        self.error: str | None = None
        self.model: Embedder | None = None
        self.origin: str | None = None
        self.fallback: dict[str, str] | None = None  # {"configured": name, "error": why it failed}
        # The model's tokenizer, usable before the model: chunk sizes are counted with it, so
        # keyword indexing need not wait seconds for the session (or a first start's conversion).
        self._counter: CountTokens | None = None
        self._countable = threading.Event()

    def set_loading(self) -> None:
        with self._lock:
            self.state, self.error = "loading", None

    def set_counter(self, count: CountTokens) -> None:
        """The tokenizer of the model being loaded is ready: chunking may start."""
        with self._lock:
            self._counter = count
        self._countable.set()

    def set_ok(self, model: Embedder, origin: str) -> None:
        self._set_model(model, origin, None)

    def set_fallback(self, model: Embedder, origin: str, configured: str, error: str) -> None:
        """The configured model failed to load (``error``); ``model``, whose table the index
        serves, answers in its place: state ``ok``, since search and new notes are served whole."""
        self._set_model(model, origin, {"configured": configured, "error": error})

    def _set_model(self, model: Embedder, origin: str, fallback: dict[str, str] | None) -> None:
        with self._lock:
            self.model, self.state, self.error, self.origin = model, "ok", None, origin
            self.fallback = fallback
            self._counter = model.count_tokens
        self._countable.set()

    def set_failed(self, error: str, *, state: str = "failed") -> None:
        """No model: it failed to load, or (``state="off"``) the configuration turns it off."""
        with self._lock:
            self.model, self.state, self.error, self.fallback = None, state, error, None
            self._counter = None
        self._countable.set()

    def wait_countable(self, timeout: float) -> bool:
        """Wait until chunks can be counted as the model counts them (its tokenizer loaded) or
        loading failed; False when ``timeout`` ran out first."""
        return self._countable.wait(timeout)

    def counter(self) -> CountTokens | None:
        """The model's token counter (its tokenizer's, while the model itself still loads)."""
        with self._lock:
            model = self.model
            return model.count_tokens if model is not None else self._counter

    def describe(self) -> dict[str, Any]:
        with self._lock:
            model = self.model
            return {
                "state": self.state,
                "error": self.error,
                "model": model.model_id if model else None,
                "dim": model.dim if model else None,
                "origin": self.origin,
                # 4-bit or int8 weights kept so in memory, or expanded to float32
                "weights": None if model is None else getattr(model, "weights", "float32"),
                "compute": None if model is None else getattr(model, "compute", None),
                # The configured model and its load error while ``model`` answers in its place.
                "fallback": dict(self.fallback) if self.fallback else None,
            }


# Cosine of unrelated text and of a clear match, per model: the vector arm's raw scores mean
# different things for different models. Measured on the help vault (en + de, 4,461 chunks; see
# BENCHMARKS.md): e5's best chunk for an off-topic message median 0.83, p90 0.86; for a labeled
# question the right page's best chunk p10 0.87, median 0.89, p90 0.91. MiniLM: off-topic best
# about 0.10, right pages median 0.42, p90 0.63.
COSINE_RANGES = {
    "all-MiniLM-L6-v2": (0.10, 0.62),
    "multilingual-e5-small": (0.82, 0.92),
}
DEFAULT_COSINE_RANGE = (0.10, 0.62)


def model_name(model_id: str) -> str:
    """The model's name in a model id (``name@digest``): what per-model tables are keyed by."""
    return model_id.split("@", 1)[0]


def cosine_range(model: Embedder | None, search: Any) -> tuple[float, float]:
    """The vector arm's (unrelated, clear match) cosines: configured, else the model's own."""
    if search.cosine_floor is not None and search.cosine_full is not None:
        return float(search.cosine_floor), float(search.cosine_full)
    name = model_name(model.model_id) if model is not None else ""
    return COSINE_RANGES.get(name, DEFAULT_COSINE_RANGE)
