"""Whether a string is a German word by a word list that ships with the install, not with the
vault: pyspellchecker's German frequency list (MIT; 339 k words), with its English list to tell
the German list's English words. ``QueryPlan.compounds`` splits a rare word by it when the notes
never write a part alone ("Abtast|rate" in a vault where no note writes "Rate"). Imports only the
standard library and numpy; the lists are read from the package's data files, never through its
spell checker.

The lists are read once, by the first search that asks or by ``warm`` (a thread of the daemon's
start, only when the model reads German: nothing else asks), and kept as sorted arrays of the
words' hashes. The lists come from film subtitles, so they hold names and English words too:
``whole`` and ``english`` let the caller keep those from being read as compounds. A missing or
unreadable list (any error: a damaged file must never break a search) is logged once
(``wordlist_failed``) and counts as empty: compounds are then split by the notes alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gzip
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

import numpy as np

log = logging.getLogger(__name__)

# The package holding the lists and the files in it.
_PACKAGE = "spellchecker"
_GERMAN = "de.json.gz"
_ENGLISH = "en.json.gz"
# Shorter strings are not kept: a compound's parts have at least four letters (``_PART_MIN``).
_SHORTEST = 4
_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class _Lists:
    german: np.ndarray  # sorted hashes of the German list's words
    english: np.ndarray  # of those, the ones the English list holds more often (per word read)


_lock = threading.Lock()
_lists: _Lists | None = None


def _counts(name: str) -> dict[str, int]:
    words = json.loads(gzip.decompress(resources.files(_PACKAGE).joinpath("resources", name).read_bytes()))
    if not isinstance(words, dict):
        raise ValueError(f"{name} holds no word list")
    counts: dict[str, int] = {}
    for w, n in words.items():
        if len(w) >= _SHORTEST and w.isalpha():
            counts[w.lower()] = counts.get(w.lower(), 0) + int(n)
    return counts


def _hashes(words: Iterable[str]) -> np.ndarray:
    # hash() is salted per process, and the arrays never leave the process that made them.
    return np.unique(np.fromiter((hash(w) for w in words), dtype=np.int64))


def _read() -> _Lists:
    german = _counts(_GERMAN)
    english = _counts(_ENGLISH)
    de_total, en_total = max(sum(german.values()), 1), max(sum(english.values()), 1)
    # Subtitles quote English: "matter", "most", "word", "press" are in the German list. A word
    # English uses more often, per word read, than German is counted as English.
    leaning = [w for w, n in german.items() if english.get(w, 0) / en_total > n / de_total]
    lists = _Lists(_hashes(german), _hashes(leaning))
    del german, english, leaning
    _give_back()
    return lists


def _give_back() -> None:
    """Hand the freed memory of the parsed lists back to the system (glibc keeps it otherwise:
    about 40 MB that nothing uses again)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (macOS): its allocator returns it itself
        return
    if trim is not None:
        trim(0)


def warm() -> None:
    """Read the lists now (a thread of the daemon's start), not in the first search that asks."""
    _loaded()


def _loaded() -> _Lists:
    """The lists' hashes, read on the first call (the others wait for it)."""
    global _lists
    with _lock:
        if _lists is None:
            start = time.monotonic()
            try:
                _lists = _read()
            except Exception as exc:
                # Any damage to a data file (zlib, json, a wrong shape): no list, never a failed search.
                log.warning("wordlist_failed error=%s: compounds are split by the notes alone", exc)
                _lists = _Lists(_EMPTY, _EMPTY)
            else:
                took = time.monotonic() - start
                log.info("wordlist_loaded words=%d seconds=%.2f", len(_lists.german), took)
        return _lists


def _holds(array: np.ndarray, text: str) -> bool:
    h = hash(text)
    i = int(np.searchsorted(array, h))
    return i < len(array) and int(array[i]) == h


def _form(text: str) -> str | None:
    """The list's form of ``text``: itself or, for a verb's stem ("abtast" of "abtasten"), the
    infinitive; None when the list holds neither."""
    if len(text) < _SHORTEST:
        return None
    german = _loaded().german
    return next((f for f in (text, text + "en", text + "n") if _holds(german, f)), None)


def is_german_word(text: str) -> bool:
    """Whether ``text`` (lower case, letters only) is a word of the German list. A verb's stem
    counts too ("abtast" of "abtasten"): it is the first part of many compounds ("Abtast|rate",
    "Schreib|tisch")."""
    return _form(text) is not None


def is_english_word(text: str) -> bool:
    """Whether the German list's word ``text`` is one English uses more ("matter", "press",
    "power"): the subtitles the list was made from quote English."""
    form = _form(text)
    return form is not None and _holds(_loaded().english, form)


def holds_whole(text: str) -> bool:
    """Whether the German list holds ``text`` (lower case) itself: a word common enough to be a
    word of its own, or a name ("frankfurt", "hoffmann"), not a compound to read from parts."""
    return len(text) >= _SHORTEST and _holds(_loaded().german, text)
