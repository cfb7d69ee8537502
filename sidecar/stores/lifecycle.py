"""Opening the stores, and moving a broken one aside so that a fresh one is built in its place.

The manifest and BM25 are opened at start; a store in an older layout is replaced (derived data),
one that cannot be opened is renamed ``<name>.broken-<time>`` (kept for inspection for a month:
``stores.aside``) and started fresh. Without the manifest the keyword index cannot be trusted, so
it is moved aside with it; the vector tables are kept (their rows are found again by chunk id). A
vector table is moved aside alone (the folder also holds the other model's table during a
switch, which serves). A full disk is no damage: nothing is moved, the error is
raised for the caller to try again; an open that fails for another reason asks the disk first
(``stores.space``), as SQLite says "disk I/O error" for a full one. An index written by a newer
sidecar (a downgrade) is not damage either: nothing is moved, the start is refused with what to
do. What was moved is noted on ``problems`` for health to show.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sidecar.config import Config
from sidecar.contracts.errors import (
    DiskFullError,
    PassingFaultError,
    PermissionDeniedError,
    StoreError,
    StoreNewerError,
    StoreOutdatedError,
    says_damage,
)
from sidecar.stores.aside import aside_name, remove_old_moved_aside
from sidecar.stores.bm25 import Bm25Index, open_bm25
from sidecar.stores.bm25_folder import check_layout
from sidecar.stores.bm25_side import settle
from sidecar.stores.manifest import Manifest
from sidecar.stores.space import denied_at, disk_full_at
from sidecar.stores.vectors import VectorStore, table_name

log = logging.getLogger(__name__)


class Notes(Protocol):
    """Where a store that was moved aside is noted (health's problems)."""

    def note(self, area: str, what: str, *, subject: str = "") -> None: ...


def open_stores(cfg: Config, problems: Notes, *, replace_newer: bool = False) -> tuple[Manifest, Bm25Index]:
    """Open manifest and BM25; a store that cannot be opened is moved aside and started fresh.
    A store written by a newer sidecar is refused (StoreNewerError), unless ``replace_newer`` (a
    rebuild asked for on purpose): then it is moved aside like a damaged one."""
    index_dir = cfg.index_dir
    index_dir.mkdir(parents=True, exist_ok=True)
    remove_old_moved_aside(index_dir)
    settle(index_dir)  # an upgrade's refill or swap cut short: the old index or the new one
    if not replace_newer:
        with contextlib.suppress(StoreOutdatedError):  # refilled beside it, or replaced
            check_layout(index_dir / "bm25")  # refused before the manifest's open writes anything
    manifest = _open_or_reset(index_dir / "manifest.sqlite", Manifest, cfg, problems, replace_newer)
    try:
        bm25 = _open_or_reset(index_dir / "bm25", open_bm25, cfg, problems, replace_newer)
    except BaseException:
        manifest.close_after_failure()  # no write-ahead log left behind by a refused or failed start
        raise
    return manifest, bm25


def _open_or_reset(
    path: Path, opener: Callable[[Path], Any], cfg: Config, problems: Notes, replace_newer: bool = False
) -> Any:
    try:
        return opener(path)
    except PassingFaultError:
        # No damage: moved aside, a manifest took the keyword index with it and the next start
        # read every note again. The daemon stops (exit 5); its service starts it again until
        # there is space.
        raise
    except StoreNewerError as exc:
        if not replace_newer:
            raise  # a newer version's index: kept as it is for it, the start refused (exit 3)
        return _reset(path, opener, cfg, problems, exc, asked=True)
    except StoreOutdatedError as exc:
        # Derived data in an older layout (e.g. the BM25 fields of 0.2): replaced, not kept.
        log.info("index_upgraded store=%s reason=%s", path.name, exc)
        shutil.rmtree(path)
        return opener(path)
    except StoreError as exc:
        _unless_disk_full(path, exc)
        return _reset(path, opener, cfg, problems, exc)


def _reset(
    path: Path,
    opener: Callable[[Path], Any],
    cfg: Config,
    problems: Notes,
    exc: StoreError,
    *,
    asked: bool = False,
) -> Any:
    """Move the store at ``path`` aside (a manifest takes the keyword index along) and open a new
    one; ``asked``: a newer version's store replaced by a rebuild the user asked for (no damage)."""
    aside = move_aside(path, newer=asked)
    if asked:
        log.warning("index_newer_replaced store=%s moved_to=%s (a rebuild asked for)", path.name, aside)
    else:
        log.error("index_rebuilt store=%s reason=%s moved_to=%s", path.name, exc, aside)
        problems.note(
            "stores",
            f"{path.name} could not be opened ({exc}); moved to {aside.name} and rebuilt",
            subject=path.stem,
        )
    if path.name == "manifest.sqlite":
        # Without the manifest the keyword index cannot be trusted: started over too. The
        # vector tables stay: a row's chunk id is its note's key and embedded text, so the
        # rebuilt manifest names the same ids again, and the rows it does not name are
        # deleted after the first sweep (``Vectoring.first_sweep_done``). A table that does
        # not open is moved aside on its own when it is attached.
        bm25 = cfg.index_dir / "bm25"
        if bm25.exists():
            move_aside(bm25, newer=asked)  # the newer release's, beside its manifest
    return opener(path)


def _unless_disk_full(path: Path, exc: StoreError) -> None:
    """Raise DiskFullError (nothing is moved) when ``path``'s disk is full: its open failed for
    lack of space, whatever the engine's words; PermissionDeniedError when this process may not
    write it (SQLite says "disk I/O error" then: taken for damage, it was moved aside)."""
    if disk_full_at(path.parent):
        raise DiskFullError(
            f"{exc} (the disk of {path.parent} is full: nothing was moved aside; "
            "free some space and the daemon starts again)"
        ) from exc
    # An engine that said plainly its files are damaged is believed: a read-only file of a
    # damaged store (a restore from a backup) would have kept the damage in place for ever.
    denied = None if says_damage(exc) else denied_at(path)
    if denied is not None:
        raise PermissionDeniedError(
            f"{denied} ({path.name} could not be opened: {exc}; nothing was moved aside: once it "
            "may be written again the daemon starts again)"
        ) from exc


def move_aside_name(path: Path, *, newer: bool = False) -> Path:
    return aside_name(path, newer=newer)


def move_aside(path: Path, *, newer: bool = False) -> Path:
    """Rename a broken store to ``<name>.broken-<time>`` (kept for inspection for a month); a
    newer release's (``newer``) to ``<name>.newer-<time>``."""
    target = move_aside_name(path, newer=newer)
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


def open_vectors(
    cfg: Config, model_id: str, dim: int, pooling: str, problems: Notes | None = None
) -> VectorStore:
    """The vector table of this model (created if new); a table that cannot be opened is moved
    aside and made afresh. A full disk raises DiskFullError and moves nothing."""
    path = cfg.index_dir / "vectors"
    opts: dict[str, Any] = {
        "optimize_every": cfg.index.optimize_every_writes,
        "ann_threshold": cfg.search.ann_threshold,
        "nprobes": cfg.search.ann_probes,
        "ann_kind": cfg.search.ann_index,
    }
    try:
        return VectorStore(path, model_id, dim, pooling, **opts)
    except PassingFaultError:
        raise  # a fault that passes: the caller tries again once there is space
    except StoreError as exc:
        _unless_disk_full(path, exc)
        table = table_name(model_id, dim, pooling)
        if not discard_vectors(path, table, f"could not be opened ({exc})", problems):
            raise
        return VectorStore(path, model_id, dim, pooling, **opts)


def discard_vectors(path: Path, table: str, why: str, problems: Notes | None) -> Path | None:
    """Move a broken vector table aside (into ``vectors.broken-<time>/``); its chunks are embedded
    again into a new one (those ``salvage_vectors`` can read excepted). The folder's other tables
    stay: during a model switch the other model's table serves. Without a folder of that table
    the vectors folder itself fails (a file where it belongs): it is moved aside whole, unless it
    holds another table (then nothing is moved and None is returned: moving it would lose a
    healthy table). Else the folder where the table's copy is now (``<it>/<table>.lance``; none
    there when an unfinished table was removed)."""
    folder = path / f"{table}.lance"
    if folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
        # A create cut short (a full disk, a kill): empty folders, nothing to keep for inspection.
        shutil.rmtree(folder)
        log.info("vectors_unfinished_table_removed table=%s reason=%s", table, why)
        return folder
    if folder.exists():
        aside = move_aside_into(folder, path)
    elif path.exists() and not (path.is_dir() and any(path.glob("*.lance"))):
        aside = move_aside(path)
    else:
        return None
    log.error("index_rebuilt store=vectors table=%s reason=%s moved_to=%s", table, why, aside)
    if problems is not None:
        problems.note(
            "stores",
            f"vectors {why}; moved to {aside.name}, re-embedding what cannot be read",
            subject="vectors",
        )
    return aside


def salvage_vectors(aside: Path, into: VectorStore, pooling: str) -> tuple[int, int]:
    """The rows of the table copy in ``aside`` (moved there by ``discard_vectors``) that can still
    be read, added to ``into`` (the new table of the same model): only the chunks of a damaged
    data file are embedded again (one truncated file re-embedded every chunk: hours on a large
    vault). (rows kept, rows lost); (0, 0) when there is no copy, and every row is lost when the
    copy cannot be opened at all."""
    if not (aside / f"{into.name}.lance").is_dir():
        return 0, 0
    started = time.monotonic()
    try:
        walk = VectorStore(aside, into.model_id, into.dim, pooling).readable_rows()
    except StoreError as exc:  # the copy does not open (its manifest is damaged): nothing kept
        log.warning("vectors_salvage_failed table=%s error=%s", into.name, exc)
        return 0, 0
    kept = 0
    for rows, vectors in walk.batches():
        into.add(rows, vectors)  # a failure here is the new table's: raised, as any write's
        kept += len(rows)
    log.warning(
        "vectors_salvaged table=%s kept=%d lost=%d reads=%d seconds=%.2f",
        into.name,
        kept,
        walk.lost_rows,
        walk.reads,
        time.monotonic() - started,
    )
    return kept, walk.lost_rows


def move_aside_into(item: Path, store: Path, *, retired: bool = False) -> Path:
    """Move one part of ``store`` (a table of the vectors folder) to ``<store>.broken-<time>/``
    (``.retired-<time>/`` for a gone model's table: no damage)."""
    target = aside_name(store, retired=retired)
    target.mkdir()
    item.rename(target / item.name)
    return target
