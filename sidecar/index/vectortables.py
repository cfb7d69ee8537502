"""The vector tables besides the serving one and the one being built, tidied where the tables
are attached (at start, when a model loads late): tables the manifest no longer refers to are
dropped. A stop (or kill) between a switch's cut-over and the drop of the old model's table left
that table on disk for good (about 1.5 KB a chunk: 150 MB at 100 k chunks).

A switch undone before it finished (A -> B -> A) keeps B's table for ``PAUSED_KEEP_S`` (switching
to B again resumes it: its vectors are not computed twice), shown in health as
``vectors.paused``, then drops it (also checked by the backfill while idle).
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from pathlib import Path

from sidecar.contracts.errors import StoreError
from sidecar.index.vectoring import PAUSED_KEEP_S, PAUSED_SINCE, Vectoring
from sidecar.stores.lifecycle import move_aside_into
from sidecar.stores.vectors import drop_table, table_model, table_names

log = logging.getLogger(__name__)


def tidy(vectors: Vectoring, folder: Path) -> None:
    """After the tables are attached: drop those nothing refers to. A failure here costs only
    disk space until the next try; it never keeps vectors from serving."""
    try:
        expire_paused(vectors, folder)
        drop_strays(vectors, folder)
    except (StoreError, sqlite3.Error, OSError) as exc:
        log.warning("vectors_tidy_failed error=%s", exc)


def tidy_paused(vectors: Vectoring, folder: Path) -> None:
    """``expire_paused`` now, for a daemon that runs for weeks; a failure waits for the next call."""
    try:
        expire_paused(vectors, folder)
    except (StoreError, sqlite3.Error, OSError) as exc:
        log.warning("vectors_tidy_failed error=%s", exc)


def expire_paused(vectors: Vectoring, folder: Path, now: float | None = None) -> bool:
    """Note when a switch was undone; once it has been paused ``PAUSED_KEEP_S``, drop its table
    and bookkeeping. True if dropped."""
    paused = vectors.paused_switch()
    if paused is None:
        return False
    now = time.time() if now is None else now
    manifest = vectors.manifest
    if paused["since"] is None:
        manifest.set_meta(PAUSED_SINCE, repr(now))
        log.info(
            "vectors_switch_paused table=%s vectors=%d kept_days=%.0f (switching back resumes it)",
            paused["table"],
            paused["vectors"],
            PAUSED_KEEP_S / 86400,
        )
        return False
    if now < paused["drop_at"]:
        return False
    with vectors.stores.write_lock:
        if vectors.stores.building is not None:  # the switch resumed meanwhile
            return False
        manifest.reset_vectors("has_next")
        manifest.set_meta("vector_table_next", "")
        manifest.set_meta(PAUSED_SINCE, "")
    drop_table(folder, paused["table"])
    days = PAUSED_KEEP_S / 86400
    log.info("vectors_dropped table=%s reason=a switch undone %.0f days ago", paused["table"], days)
    return True


def referenced(vectors: Vectoring) -> set[str]:
    """The tables that must stay: serving and being built (in memory and in the manifest), and
    one a switch just retired."""
    stores, manifest = vectors.stores, vectors.manifest
    names = {manifest.get_meta("vector_table"), manifest.get_meta("vector_table_next")}
    names |= {s.store.name for s in (stores.serving, stores.building) if s is not None}
    names |= vectors.retired_tables()  # dropped by the switch itself once its searches are done
    return {n for n in names if n}


def drop_strays(vectors: Vectoring, folder: Path) -> list[str]:
    """Drop the tables of ``folder`` that are neither serving nor being built; their names. One
    whose model cannot be read from it is moved aside instead (a copy kept): it may be a retiring
    table whose metadata failed to read, every vector of the index, not a stray."""
    keep = referenced(vectors)
    dropped = []
    for table in table_names(folder):
        if table in keep:
            continue
        if not _identified(folder, table) and (aside := set_aside(folder, table)) is not None:
            log.warning(
                "vectors_set_aside table=%s moved_to=%s reason=not used by the index any more, "
                "but its model cannot be read from it (kept 30 days, not dropped)",
                table, aside,
            )  # fmt: skip
        else:
            drop_table(folder, table)
            log.info("vectors_dropped table=%s reason=not used by the index any more", table)
        dropped.append(table)
    return dropped


def _identified(folder: Path, table: str) -> bool:
    """Whether the table's metadata names the model it holds."""
    try:
        found = table_model(folder, table)
    except (StoreError, OSError, ValueError, RuntimeError):
        return False
    return found is not None and bool(found[0])


def set_aside(folder: Path, table: str, *, retired: bool = False) -> Path | None:
    """Move ``table`` of ``folder`` into ``<folder>.broken-<time>/`` (``.retired-<time>/`` for a
    gone model's table, no damage), kept like a damaged table's copy (removed 30 days later);
    None when it has no files (a create cut short: removed, as there is nothing to keep)."""
    item = folder / f"{table}.lance"
    if not item.is_dir():
        return None
    if not any(p.is_file() for p in item.rglob("*")):
        shutil.rmtree(item)
        return None
    return move_aside_into(item, folder, retired=retired)
