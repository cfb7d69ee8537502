"""Whether a string is a German word by a word list that ships with the install, not with the
vault: pyspellchecker's German frequency list (MIT; 339 k words), with its English list to tell
the German list's English words. ``QueryPlan.compounds`` splits a rare word by it when the notes
never write a part alone ("Abtast|rate" in a vault where no note writes "Rate"). Only a model
that reads German asks (a keyword-only daemon or an English model never opens or builds it).

The package's lists are JSON (7 MB gzipped): parsing them costs seconds and a peak of about
80 MB, and a serving daemon that parsed them kept about 27 MB of heap. So they are turned once,
by a child process (``sidecar.search.wordlist_build``), into a file of sorted 64-bit hashes in
the model cache (``embedder.cacheDir``), and that file is read through a memory map: the daemon
keeps only the pages its look-ups touch (at most the file's 2.7 MB, clean pages the system may
drop). The file's name carries its format and the source lists' sha256, so an upgraded list is
built again; a file whose header, size or checksum is wrong (damaged, foreign, cut short) is
built again, never trusted. A list that cannot be built or read (a damaged package file, a
read-only cache) is logged once (``wordlist_failed``) and counts as empty: compounds are then
split by the notes alone, and every search answers.

The lists come from film subtitles, so they hold names and English words too: ``holds_whole``
and ``is_english_word`` let the caller keep those from being read as compounds.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import logging
import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import BinaryIO

from sidecar.model import prepared
from sidecar.model.child import run as run_child

log = logging.getLogger(__name__)

# The package holding the lists and the files in it.
_PACKAGE = "spellchecker"
GERMAN = "de.json.gz"
ENGLISH = "en.json.gz"
# Shorter strings are not kept: a compound's parts have at least four letters (``_PART_MIN``).
SHORTEST = 4
# The file: magic, format, the sources' sha256, the two counts, the payload's sha256, then the
# German hashes and the English-leaning ones (each sorted, little-endian uint64). A change of
# the format or of what is hashed raises FORMAT (the name and the header carry it).
MAGIC = b"SCWORDS\0"
FORMAT = 1
HEADER = struct.Struct("<8sI4x32sQQ32s")  # 96 bytes: the arrays start 8-aligned
NAME = "wordlist-v{format}-{source}.bin"
# Building parses 7 MB of JSON and hashes 339 k words: seconds, a minute on a loaded machine.
BUILD_TIMEOUT_S = 600.0
_CHUNK = 1 << 18


def word_hash(text: str) -> int:
    """The 64-bit hash the file holds for ``text`` (stable across processes, unlike ``hash``).
    With 339 k words, a string the list does not hold matches one of them with a chance of
    339e3 / 2**64 = 1.8e-14 a look-up; a query makes at most a few hundred look-ups (the
    substrings of its rare words), so a false "word" comes about once in 1e11 queries. 32 bits
    would make it 7.9e-5 a look-up, a few percent of such queries."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def source_folder() -> Path:
    """The folder of the package's list files (an installed package is plain files)."""
    return Path(str(resources.files(_PACKAGE).joinpath("resources")))


def source_digest(folder: Path) -> bytes:
    """The sha256 of the two list files, read in chunks (nothing of them stays in memory)."""
    digest = hashlib.sha256()
    for name in (GERMAN, ENGLISH):
        digest.update(name.encode() + b"\0")
        with (folder / name).open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.digest()


def _hashes(data: memoryview | bytes) -> Sequence[int]:
    """The sorted little-endian uint64 hashes in ``data`` as a sequence of ints: a view of the map
    on a little-endian machine (a look-up by ``bisect`` on it takes a third of numpy's
    ``searchsorted`` on one value), a copy elsewhere."""
    if sys.byteorder == "little":
        return memoryview(data).cast("Q")
    swapped = array.array("Q", bytes(data))
    swapped.byteswap()
    return swapped


@dataclass(eq=False)
class WordLists:
    """The German list's hashes and, among them, the words English uses more (per word read)."""

    german: Sequence[int] = field(default_factory=lambda: _hashes(b""))
    english: Sequence[int] = field(default_factory=lambda: _hashes(b""))
    # The memory map the hashes are views of (kept open while they live); None when empty.
    _map: mmap.mmap | None = None

    def holds(self, text: str, english: bool = False) -> bool:
        hashes = self.english if english else self.german
        h = word_hash(text)
        i = bisect.bisect_left(hashes, h)
        return i < len(hashes) and hashes[i] == h


_EMPTY = WordLists()
_lock = threading.Lock()
# The lists of each cache folder, opened (or failed) once per process.
_open: dict[Path, WordLists] = {}


def _check(fh: BinaryIO, source: bytes) -> tuple[int, int] | str:
    """The counts of the file ``fh`` (German, English-leaning), or why it cannot be trusted."""
    head = fh.read(HEADER.size)
    if len(head) != HEADER.size:
        return "cut short"
    magic, fmt, src, n_german, n_english, payload = HEADER.unpack(head)
    problem = ""
    if magic != MAGIC or fmt != FORMAT:
        problem = "not a word list of this format"
    elif src != source:
        problem = "made from other lists"
    elif os.fstat(fh.fileno()).st_size != HEADER.size + 8 * (n_german + n_english) or not n_german:
        problem = "wrong size"
    else:
        digest = hashlib.sha256()
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
        if digest.digest() != payload:
            problem = "checksum differs"
    return problem or (n_german, n_english)


def _read(path: Path, source: bytes) -> WordLists | str:
    """The lists in ``path``, or why the file cannot be trusted. The checksum is read through
    the file (the page cache), not the map, so the daemon maps only what its look-ups touch."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return "missing"
    with fh:
        counts = _check(fh, source)
        if isinstance(counts, str):
            return counts
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    n_german, n_english = counts
    view = memoryview(mapped)
    middle = HEADER.size + 8 * n_german
    german = _hashes(view[HEADER.size : middle])
    english = _hashes(view[middle : middle + 8 * n_english])
    return WordLists(german, english, mapped)


def _build(source_dir: Path, path: Path) -> None:
    """Build ``path`` in a child process: the parse's memory never enters the daemon."""
    code, last = run_child("sidecar.search.wordlist_build", source_dir, path, BUILD_TIMEOUT_S)
    if code != 0:
        raise RuntimeError(last or f"the word list build exited with {code}")


def _load(folder: Path) -> WordLists:
    start = time.monotonic()
    # Said first, before any build or read: a daemon that must not open the list (no model, an
    # English one) shows it at once in its log, not seconds later when a build would end.
    log.info("wordlist_opening folder=%s", folder)
    source_dir = source_folder()
    source = source_digest(source_dir)
    path = folder / NAME.format(format=FORMAT, source=source.hex()[:12])
    found = _read(path, source)
    built = False
    if isinstance(found, str):
        if found != "missing":
            log.warning("wordlist_rebuilt path=%s reason=%s", path, found)
        _build(source_dir, path)
        built = True
        found = _read(path, source)
        if isinstance(found, str):
            raise RuntimeError(f"{path} as built: {found}")
    # The cache's tidy removes copies no daemon used for 30 days: marked used while it is open.
    prepared.loaded(found, folder, [path])
    log.info(
        "wordlist_loaded words=%d path=%s built=%s seconds=%.2f",
        len(found.german),
        path,
        str(built).lower(),
        time.monotonic() - start,
    )
    return found


def lists(folder: Path | None, wait: bool = True) -> WordLists:
    """The lists of the cache ``folder``, opened (built first if need be) on the first call; the
    others wait for it, or with ``wait`` false get none meanwhile (a search while the start's
    thread builds the file, seconds the first time: it ranks as without a list, not later).
    Empty when ``folder`` is None or the lists cannot be had (logged once)."""
    if folder is None:
        return _EMPTY
    found = _open.get(folder)
    if found is not None:
        return found
    if not _lock.acquire(blocking=wait):
        return _EMPTY
    try:
        found = _open.get(folder)
        if found is None:
            try:
                found = _load(folder)
            except Exception as exc:
                # Any damage (the package's files, the cache, a read-only home, a killed child):
                # no list, never a failed search.
                log.warning(
                    "wordlist_failed folder=%s error=%s: compounds are split by the notes alone",
                    folder,
                    exc,
                )
                found = _EMPTY
            _open[folder] = found
        return found
    finally:
        _lock.release()


def warm(folder: Path) -> None:
    """Open (or build) the lists now (a thread of the daemon's start), not in the first search."""
    lists(folder)


def _form(lists: WordLists, text: str) -> str | None:
    """The list's form of ``text``: itself or, for a verb's stem ("abtast" of "abtasten"), the
    infinitive; None when the list holds neither."""
    if len(text) < SHORTEST:
        return None
    return next((f for f in (text, text + "en", text + "n") if lists.holds(f)), None)


def is_german_word(lists: WordLists, text: str) -> bool:
    """Whether ``text`` (lower case, letters only) is a word of the German list. A verb's stem
    counts too ("abtast" of "abtasten"): it is the first part of many compounds ("Abtast|rate",
    "Schreib|tisch")."""
    return _form(lists, text) is not None


def is_english_word(lists: WordLists, text: str) -> bool:
    """Whether the German list's word ``text`` is one English uses more ("matter", "press",
    "power"): the subtitles the list was made from quote English."""
    form = _form(lists, text)
    return form is not None and lists.holds(form, english=True)


def holds_whole(lists: WordLists, text: str) -> bool:
    """Whether the German list holds ``text`` (lower case) itself: a word common enough to be a
    word of its own, or a name ("frankfurt", "hoffmann"), not a compound to read from parts."""
    return len(text) >= SHORTEST and lists.holds(text)
