"""Model files on disk: where the package data and installed model packages are, the folder-like
:class:`ModelFiles` a model loads from, and the sha256 checks every built-in file passes."""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sidecar.contracts.errors import EmbedderError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class ModelFiles:
    onnx: Path
    tokenizer: Path
    origin: str  # "configured path", "home", "bundled package"
    sha256: str | None = None  # of ``onnx``, when already verified
    kernels: str | None = None  # weights already in kernel form ("4-bit"): no int8 rewrite
    accuracy: int | None = None  # MatMulNBits accuracy level chosen for this CPU (model.kernels)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(path: Path, expected: str) -> None:
    """Raise EmbedderError naming ``path`` unless its sha256 is ``expected``."""
    try:
        got = sha256_file(path)
    except OSError as exc:
        raise EmbedderError(f"model file {path}: cannot read: {exc}") from exc
    if got != expected:
        raise EmbedderError(
            f"model file {path}: sha256 {got} differs from the pinned {expected} "
            "(damaged or replaced; reinstall the package that ships it)"
        )


def package_dir(name: str) -> Path | None:
    """Folder of an installed package, found without importing (and so running) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def read_sums(folder: Path) -> dict[str, str]:
    """File name -> sha256 from the folder's SHA256SUMS."""
    try:
        lines = (folder / SUMS).read_text().splitlines()
    except OSError as exc:
        raise EmbedderError(f"model folder {folder}: cannot read {SUMS}: {exc}") from exc
    pairs = (line.partition("  ") for line in lines)
    return {name: digest for digest, _, name in pairs if name}


def folder_files(folder: Path, origin: str) -> ModelFiles | None:
    """The model in a folder of one's own (``embedder.path``, the home's models/): model.onnx (or
    onnx/model.onnx) and tokenizer.json, None when either is missing. Here, not in ``locate``: the
    command line's config check asks it without loading an engine."""
    onnx = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()), None)
    tok = folder / "tokenizer.json"
    return ModelFiles(onnx, tok, origin) if onnx is not None and tok.is_file() else None
