"""Copies of damaged stores moved aside (``<name>.broken-<time>``), of stores a newer release
wrote, replaced by a rebuild asked for after a downgrade (``<name>.newer-<time>``), and of a
previous model's vectors no switch could use, its model gone (``<name>.retired-<time>``): listed for
status and doctor, removed by the daily housekeeping or at a start once older than
``KEEP_MOVED_ASIDE_DAYS``. No engine is imported: thin clients read this."""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Copies of damaged stores are derived data kept for a person to look at: a month is long enough
# to notice and inspect one, and a service running for years does not gather a full copy of its
# index at every damage or downgrade.
KEEP_MOVED_ASIDE_DAYS = 30
_MOVED_ASIDE = re.compile(r"^(?P<store>.+)\.(?P<why>broken|newer|retired)-(?P<when>\d{8}-\d{6})-\d+$")


def aside_name(path: Path, *, newer: bool = False, retired: bool = False) -> Path:
    """Where a damaged store ``path`` is moved: ``<name>.broken-<time>`` beside it;
    ``<name>.newer-<time>`` for one a newer release wrote, ``<name>.retired-<time>`` for a gone
    model's vectors (no damage either: status tells them apart)."""
    why = "newer" if newer else "retired" if retired else "broken"
    return path.with_name(f"{path.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}")


@dataclass(frozen=True)
class MovedAside:
    path: Path
    store: str  # what it was a copy of: manifest.sqlite, bm25, vectors, bm25-memory-<agent>
    age_days: float
    newer: bool = False  # a newer release's store replaced by a rebuild asked for, not damaged
    retired: bool = False  # a previous model's vectors, its model gone: not damaged


def moved_aside(index_dir: Path, now: float | None = None) -> list[MovedAside]:
    """The copies of stores moved aside in ``index_dir``, oldest first (their side files -wal/-shm
    not counted apart)."""
    now = time.time() if now is None else now
    found = []
    try:
        entries = list(index_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        m = _MOVED_ASIDE.match(entry.name)
        if m is None:
            continue
        try:
            made = time.mktime(time.strptime(m["when"], "%Y%m%d-%H%M%S"))
        except (ValueError, OverflowError):
            continue
        age = max(0.0, (now - made) / 86400)
        found.append(MovedAside(entry, m["store"], age, m["why"] == "newer", m["why"] == "retired"))
    return sorted(found, key=lambda c: -c.age_days)


def remove_old_moved_aside(index_dir: Path, now: float | None = None) -> None:
    """Remove the copies of damaged stores older than ``KEEP_MOVED_ASIDE_DAYS`` (with their
    side files); one that cannot be removed is logged and left."""
    for copy in moved_aside(index_dir, now):
        if copy.age_days < KEEP_MOVED_ASIDE_DAYS:
            continue
        try:
            for side in (copy.path, *(copy.path.with_name(copy.path.name + s) for s in ("-wal", "-shm"))):
                if side.is_dir() and not side.is_symlink():
                    shutil.rmtree(side)
                elif side.exists() or side.is_symlink():
                    side.unlink()
        except OSError as exc:
            log.warning("moved_aside_not_removed path=%s error=%s", copy.path, exc)
            continue
        log.info("moved_aside_removed path=%s age_days=%.0f", copy.path, copy.age_days)
