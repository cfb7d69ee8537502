"""Whether a string is a German word by a word list that ships with the install, not with the
vault: pyspellchecker's German frequency list (MIT; 339 k words). ``QueryPlan.compounds`` splits
a rare word by it when the notes never write a part alone ("Abtast|rate" in a vault where no
note writes "Rate"). Imports only the standard library and numpy; the list is read from the
package's data file, never through its spell checker.

The list is read once, by ``warm`` in a thread of the daemon's start or by the first search that
asks (about 0.7 s on a quiet core, 2.5 s on a busy one: a JSON file of 7 MB), and kept as a
sorted array of the words' hashes (2.7 MB instead of about 35 MB as a set of strings). A missing
or unreadable list is logged once (``wordlist_failed``) and counts as empty: compounds are then
split by the notes alone.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from importlib import resources

import numpy as np

log = logging.getLogger(__name__)

# The package holding the list and the file in it.
_PACKAGE = "spellchecker"
_FILE = "de.json.gz"
# Shorter strings are not kept: a compound's parts have at least four letters (``_PART_MIN``).
_SHORTEST = 4

_lock = threading.Lock()
_words: np.ndarray | None = None


def _read() -> np.ndarray:
    """The sorted hashes of the list's words of letters only and at least ``_SHORTEST`` long."""
    words = json.loads(gzip.decompress(resources.files(_PACKAGE).joinpath("resources", _FILE).read_bytes()))
    if not isinstance(words, dict):
        raise ValueError(f"{_FILE} holds no word list")
    # hash() is salted per process, and the array never leaves the process that made it.
    hashes = (hash(w.lower()) for w in words if len(w) >= _SHORTEST and w.isalpha())
    return np.unique(np.fromiter(hashes, dtype=np.int64))


def warm() -> None:
    """Read the list now (a thread of the daemon's start), not in the first search that asks."""
    _loaded()


def _loaded() -> np.ndarray:
    """The list's hashes, read on the first call (the others wait for it)."""
    global _words
    with _lock:
        if _words is None:
            start = time.monotonic()
            try:
                _words = _read()
            except (ImportError, OSError, ValueError, EOFError) as exc:  # json's errors are ValueErrors
                log.warning("wordlist_failed error=%s: compounds are split by the notes alone", exc)
                _words = np.empty(0, dtype=np.int64)
            else:
                log.info("wordlist_loaded words=%d seconds=%.2f", len(_words), time.monotonic() - start)
        return _words


def is_german_word(text: str) -> bool:
    """Whether ``text`` (lower case, letters only) is a word of the German list. A verb's stem
    counts too ("abtast" of "abtasten"): it is the first part of many compounds ("Abtast|rate",
    "Schreib|tisch")."""
    if len(text) < _SHORTEST:
        return False
    words = _loaded()
    for form in (text, text + "en", text + "n"):
        h = hash(form)
        i = int(np.searchsorted(words, h))
        if i < len(words) and int(words[i]) == h:
            return True
    return False
