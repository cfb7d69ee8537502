"""Builds the word-list file ``sidecar.search.wordlist`` maps: ``python -m
sidecar.search.wordlist_build SOURCE TARGET`` reads the package's German and English lists from
the folder SOURCE and writes TARGET atomically. Run as a child of the daemon: parsing the JSON
peaks at about 80 MB, which would stay in the daemon's heap."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from sidecar.model.child import arguments
from sidecar.runtime.atomic import atomic_write
from sidecar.runtime.orphan import die_with_parent
from sidecar.search.wordlist import ENGLISH, FORMAT, GERMAN, HEADER, MAGIC, SHORTEST, source_digest, word_hash


def _counts(path: Path) -> dict[str, int]:
    words = json.loads(gzip.decompress(path.read_bytes()))
    if not isinstance(words, dict):
        raise ValueError(f"{path.name} holds no word list")
    counts: dict[str, int] = {}
    for w, n in words.items():
        if len(w) >= SHORTEST and w.isalpha():
            counts[w.lower()] = counts.get(w.lower(), 0) + int(n)
    return counts


def _hashes(words: list[str]) -> np.ndarray:
    return np.unique(np.fromiter((word_hash(w) for w in words), dtype="<u8", count=len(words)))


def build(source: Path) -> bytes:
    """The file's bytes for the lists in ``source``."""
    digest = source_digest(source)
    german = _counts(source / GERMAN)
    english = _counts(source / ENGLISH)
    de_total, en_total = max(sum(german.values()), 1), max(sum(english.values()), 1)
    # Subtitles quote English: "matter", "most", "word", "press" are in the German list. A word
    # English uses more often, per word read, than German is counted as English. Only this
    # comparison of the two counts is what the guard reads, so the file keeps its answer, not
    # the counts.
    leaning = [w for w, n in german.items() if english.get(w, 0) / en_total > n / de_total]
    de_hashes, en_hashes = _hashes(list(german)), _hashes(leaning)
    payload = de_hashes.tobytes() + en_hashes.tobytes()
    head = HEADER.pack(
        MAGIC, FORMAT, digest, len(de_hashes), len(en_hashes), hashlib.sha256(payload).digest()
    )
    return head + payload


def main(argv: list[str]) -> int:
    paths = arguments(argv, "python -m sidecar.search.wordlist_build SOURCE TARGET")
    if paths is None:
        return 2
    source, target = paths
    die_with_parent()  # a daemon gone: nothing waits for the list (its file is written whole or not)
    try:
        data = build(source)
    except Exception as exc:  # a damaged package file: said on the last line, for the daemon's log
        print(f"the word lists in {source} cannot be read: {exc}", file=sys.stderr)
        return 3
    try:
        atomic_write(target, data)
    except OSError as exc:
        print(f"cannot write {target}: {exc}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
