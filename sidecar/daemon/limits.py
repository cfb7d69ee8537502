"""What the index's size limits leave out, for health: notes whose chunks past
index.maxVectorChunksPerNote are found by keywords only, the note most of the vector queue
belongs to, the notes written continuously, and the files skipped when indexing (too large for
index.maxFileBytes, ...), named.

Vault and wiki notes only are named: health must not name one agent's notes to another (they
are counted all the same). Imports the manifest and the indexer's scan (what it skipped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.index.indexer import Indexer
from sidecar.stores.manifest import Manifest

# Notes named in health per list; the counts cover every one.
NAMED = 5
# Skipped files listed (with their reason): `status` prints a few of them, --json all these.
SKIPPED_LISTED = 20
VECTOR_CAP_KEY = "index.maxVectorChunksPerNote"
FILE_BYTES_KEY = "index.maxFileBytes"


# Chunks waiting below which no note is named as most of the queue: status names one only from
# that many of its chunks on (cli_render's _LARGEST_NAMED; a test keeps them equal).
LARGEST_NAMED = 256
# Seconds a figure below is kept: each is a scan of the pending index under the manifest's lock
# (long at a million chunks waiting) and `sidecar index` asks for health twice a second.
KEPT_SECONDS = 1.0


class Limits:
    """keyword_only and pending_largest of health, each counted at most once a second (as the
    retriever's pending count is); a changed per-note limit (a reload) counts them anew."""

    def __init__(self, manifest: Manifest, clock: Callable[[], float] = time.monotonic) -> None:
        self.manifest = manifest
        self.clock = clock
        self._kept: dict[str, tuple[float, int, dict[str, Any] | None]] = {}  # name -> (when, limit, figure)

    def keyword_only(self) -> dict[str, Any] | None:
        return self._counted("keyword_only", lambda: keyword_only(self.manifest))

    def pending_largest(self, pending: int, less: Mapping[str, int] | None = None) -> dict[str, Any] | None:
        """``pending``: the chunks counted as waiting, ``less`` those left out of them, by note."""
        if pending < LARGEST_NAMED:  # no note could be named: spare the scan
            return None
        largest = self._counted("pending_largest", lambda: pending_largest(self.manifest, pending, less))
        # Counted up to a second ago: never more of the queue than waits now.
        return {**largest, "chunks": min(largest["chunks"], pending)} if largest else None

    def _counted(self, name: str, count: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
        now, cap = self.clock(), self.manifest.vector_cap
        kept = self._kept.get(name)
        if kept is not None and kept[1] == cap and 0 <= now - kept[0] <= KEPT_SECONDS:
            return kept[2]
        figure = count()
        self._kept[name] = (now, cap, figure)
        return figure


def keyword_only(manifest: Manifest) -> dict[str, Any] | None:
    """Notes with chunks past the per-note vector limit and no vector (None when there are none)."""
    notes, chunks, examples = manifest.keyword_only(NAMED)
    if not notes:
        return None
    return {
        "notes": notes,
        "chunks": chunks,
        "limit": manifest.vector_cap,
        "setting": VECTOR_CAP_KEY,
        "examples": [{"reference": k, "chunks": total, "keyword_only": n} for k, total, n in examples],
    }


def continuous(manifest: Manifest, keys: Mapping[str, int], pending: int) -> dict[str, Any] | None:
    """The notes written continuously now (``sidecar.daemon.hot``, key -> chunks its last indexing
    added): how many, how many of the ``pending`` chunks waiting for a vector are theirs (at most
    what each one's last indexing added: an older backlog counts as one), a few named (None when
    there are none)."""
    if not keys:
        return None
    named = sorted(k for k in keys if not k.startswith("memory/"))[:NAMED]
    return {
        "notes": len(keys),
        "pending_vectors": min(pending, manifest.pending_count_of(keys)) if pending else 0,
        "examples": named,
    }


def pending_largest(
    manifest: Manifest, pending: int, less: Mapping[str, int] | None = None
) -> dict[str, Any] | None:
    """The note with the most chunks waiting for a vector (while any wait), ``less`` left out."""
    if pending <= 0:
        return None
    largest = manifest.pending_largest(less=less)
    return {"reference": largest[0], "chunks": largest[1]} if largest else None


def skipped_files(indexer: Indexer, manifest: Manifest) -> list[dict[str, Any]]:
    """The files skipped now (the folder scans' and the manifest's), vault and wiki only, by
    reference, at most ``SKIPPED_LISTED``: reference, reason and, for those too large, bytes."""
    out: dict[str, dict[str, Any]] = {}
    for key, skip in sorted(indexer.changes.skipped_files().items()):
        if not key.startswith("memory/"):
            entry: dict[str, Any] = {"reference": _printable(key), "reason": skip.reason}
            if skip.size:
                entry["bytes"] = skip.size
            out[key] = entry
    for key, reason in manifest.skipped_files(SKIPPED_LISTED + 1):
        out.setdefault(key, {"reference": key, "reason": reason or "unknown"})
    return [out[k] for k in sorted(out)[:SKIPPED_LISTED]]


def _printable(key: str) -> str:
    """A key as JSON can carry it: a file name that is not valid UTF-8 (skipped for that) holds
    the bytes Python decoded as surrogates, shown escaped (``\\udcff``); it names no reference."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")
