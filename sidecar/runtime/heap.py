"""glibc heap tuning for a long-running process with many native threads (Linux only; a no-op
elsewhere). Imports nothing from sidecar.

onnxruntime, LanceDB (tokio) and Tantivy threads each get their own malloc arena by default and
keep its high-water mark: measured here, an embedding run left 586 MB resident with the default
arenas and 369 MB with two (BENCHMARKS.md). Blocks from 1 MB are mapped on their own, so they
leave the resident set when freed. ``trim`` hands freed pages back after bursts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_ARENA_MAX = -8  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
# Allocations from this size on are mapped on their own and unmapped when freed. glibc raises
# its threshold to the largest block freed so far (up to 32 MB), after which the MB-sized
# buffers of every write (vector copies, Arrow batches, replies) come from the heap and stay
# resident behind the small long-lived blocks allocated between them.
MMAP_FROM = 1 << 20
_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            lib.mallopt  # noqa: B018 - musl has no mallopt: then leave the heap alone
            lib.malloc_trim  # noqa: B018
            _libc = lib
        except (OSError, AttributeError):
            return None
    return _libc


def tune(arenas: int = 2) -> bool:
    """Cap malloc arenas (``arenas``) and map MB-sized blocks on their own (``MMAP_FROM``); call
    before native threads start (before the daemon imports its stores). False where glibc's
    mallopt is missing or refused."""
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_FROM)
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim() -> None:
    """Return free heap pages to the system (after a sweep or an embedding burst)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
