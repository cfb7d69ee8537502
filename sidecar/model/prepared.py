"""The prepared copies of models in ``<home>/models/.prepared/`` (``embedder.cacheDir``): which
one a start uses, and which ones no start has used for long.

A copy is made for one onnxruntime and one version of its preparation (an e5 conversion, about
80 MB; an int8 copy, about 23 MB), so an upgrade or a switch of model leaves the earlier ones
behind. They are removed once no start has loaded them for ``UNUSED_DAYS``, not at the first
start of another: two installs sharing a home (two virtualenvs, another onnxruntime each) need
one copy each, and removing the other's at every start made each convert its model again at
every start. The time of a copy's last use is its modification time, set by each start that
loads it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

UNUSED_DAYS = 30.0
# What a preparation writes: an e5 conversion's folder (its early tokenizer, a crashed one's
# work folder), an int8 copy (and a crashed rewrite's temp file). ``.skip`` notes stay: they
# remember why a model cannot run here, and are a few bytes.
_MADE_HERE = re.compile(r"multilingual-e5-small-.+|[0-9a-f]+-p\d+-ort.+\.onnx|\.[0-9a-f]+-p\d+-ort.+\.tmp")


def used(folder: Path, paths: Iterable[Path | None]) -> None:
    """A start loaded ``paths`` (those in ``folder`` count): marked used; the copies no start
    used for ``UNUSED_DAYS`` removed."""
    in_use = [p for p in paths if p is not None and p.parent == folder]
    for path in in_use:
        mark_used(path)
    remove_unused(folder, in_use)


def mark_used(path: Path) -> None:
    """``path`` (a copy a start loads) was used now."""
    try:
        os.utime(path, follow_symlinks=False)
    except OSError as exc:  # a read-only cache: its copies are then only ever removed by hand
        log.debug("model_cache_unmarked path=%s error=%s", path, exc)


def remove_unused(folder: Path, keep: Iterable[Path], *, now: float | None = None) -> list[Path]:
    """Remove the copies in ``folder`` (but ``keep``) that no start loaded for ``UNUSED_DAYS``;
    the ones removed. Anything else there (a link, a file of another name) is left alone."""
    now = time.time() if now is None else now
    kept = {p.name for p in keep}
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if entry.name in kept or entry.name.endswith(".skip") or not _MADE_HERE.fullmatch(entry.name):
            continue
        try:
            unused = (now - entry.stat(follow_symlinks=False).st_mtime) / 86400
            if unused < UNUSED_DAYS:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            elif entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
            else:
                continue
        except OSError as exc:
            log.warning("model_cache_remove_failed path=%s error=%s", entry.path, exc)
            continue
        log.info("model_cache_removed path=%s unused_days=%.0f", entry.path, unused)
        removed.append(Path(entry.path))
    return removed
