"""What the index's size limits leave out, for health: notes whose chunks past
index.maxVectorChunksPerNote are found by keywords only, the note most of the vector queue
belongs to, and the files skipped when indexing (too large for index.maxFileBytes, ...), named.

Vault and wiki notes only are named: health must not name one agent's notes to another (they
are counted all the same). Imports the manifest and the indexer's scan (what it skipped).
"""

from __future__ import annotations

from typing import Any

from sidecar.index.indexer import Indexer
from sidecar.stores.manifest import Manifest

# Notes named in health per list; the counts cover every one.
NAMED = 5
# Skipped files listed (with their reason): `status` prints a few of them, --json all these.
SKIPPED_LISTED = 20
VECTOR_CAP_KEY = "index.maxVectorChunksPerNote"
FILE_BYTES_KEY = "index.maxFileBytes"


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


def pending_largest(manifest: Manifest, pending: int) -> dict[str, Any] | None:
    """The note with the most chunks waiting for a vector (while any wait)."""
    if pending <= 0:
        return None
    largest = manifest.pending_largest()
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
