"""The notes' words written with an umlaut or ß, by their transcription (Kündigung by "kuendigung"):
what lets a query typed without umlauts (a US keyboard, a phone) be read as the notes' word.

The keyword index folds umlauts (ü -> u in every field, ue -> u in the German one), so it cannot
tell "Kuendigung" (ü typed as ue) from "poet" (a word of its own that folds to "pot"). This list
keeps the one fact the index lost: which words the notes write with the umlaut. It lives beside
the keyword index (``umlauts.txt``, one word a line), grows as notes are indexed (new words are
appended at a commit) and is written anew when the index is refilled, which drops the words of
notes deleted meanwhile. An index older than the list is read into it from the manifest once
(``Bm25Index.learn_umlauts``), without a rebuild of the index.

Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "umlauts.txt"
_HAS_UMLAUT = re.compile(r"\w*[äöüßÄÖÜ]\w*")
_TRANSCRIBE = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss"})
# Only ae/oe/ue are read: ß and ss meet in the index already (Straße = Strasse), and a typed ss
# cannot be checked against the notes (the index folds "Maße" into "masse").
_DIGRAPH = re.compile(r"[aou]e")


def transcribed(word: str) -> str:
    """``word`` lowercased as typed without umlauts: Kündigung -> kuendigung, Straße -> strasse."""
    return word.lower().translate(_TRANSCRIBE)


def umlaut_words(text: str) -> set[str]:
    """The words of ``text`` written with an umlaut or ß, lowercased."""
    # Its underscores at the edges are none of the word's, as the keyword index reads it
    # ("__Anhänge__" is "anhänge"); those inside are ("my_größe").
    return {w.strip("_").lower() for w in _HAS_UMLAUT.findall(text)} if _has_any(text) else set()


def _has_any(text: str) -> bool:
    # A plain scan first: most English chunks hold no umlaut, and the regex costs ten times more.
    return any(c in text for c in "äöüßÄÖÜ")


class UmlautWords:
    """The umlaut words of the vault's and the wiki's notes, by transcription, kept in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self._lock = threading.Lock()
        self._by_typed: dict[str, str] = {}
        self._new: list[str] = []  # learned since the last save
        # A refill's list, learned afresh: it replaces the list at the next save (searches read
        # the old one until the refilled index is committed, as they read the old index).
        self._fresh: dict[str, str] | None = None
        self.known = False  # the file exists (else it is written whole at the next save)
        self._load()
        # Whether the list holds every note's words: not for an index older than the list
        # (taught from the manifest once) or one made anew; a refill teaches it every word.
        self.complete = self.known

    def _load(self) -> None:
        words: list[str] = []
        self.known = self.path.exists()
        if self.known:
            try:
                words = self.path.read_text(encoding="utf-8").split()
            except (OSError, UnicodeDecodeError) as exc:
                log.warning("umlaut_words_unreadable path=%s error=%s", self.path, exc)
                self.known = False
        self._by_typed = {transcribed(w): w for w in words}
        self._new = []
        self._fresh = None

    def __len__(self) -> int:
        return len(self._by_typed)

    def learn(self, texts: Iterable[str]) -> None:
        """The umlaut words of ``texts`` added (saved at the next ``save``)."""
        found: set[str] = set()
        for text in texts:
            found |= umlaut_words(text)
        if not found:
            return
        with self._lock:
            for w in found:
                typed = transcribed(w)
                if self._fresh is not None:
                    self._fresh.setdefault(typed, w)
                elif typed not in self._by_typed:
                    self._by_typed[typed] = w
                    self._new.append(w)

    def clear(self) -> None:
        """Every word dropped at the next save: the index is being refilled, which teaches the
        list anew (a deleted note's words go)."""
        with self._lock:
            self._fresh = {}
            self._new = []

    def forget_unsaved(self) -> None:
        """A rollback: what was learned since the last save is not saved (a refill cut short
        keeps the old index, and so the old list)."""
        with self._lock:
            self._fresh = None
            for w in self._new:
                self._by_typed.pop(transcribed(w), None)
            self._new = []

    def save(self) -> None:
        """New words appended to the file (all of them after a refill), so the list survives a
        restart; a failure is logged, the file removed (relearned at the next start) and the list
        written whole at the next save. A process killed between the keyword index's commit and
        this save loses that commit's new words from the file until the next refill: they are
        then searched as typed, as before the list."""
        with self._lock:
            if not self._new and self._fresh is None and self.known:
                return
            rewrite = self._fresh is not None or not self.known
            table = self._by_typed if self._fresh is None else self._fresh
            words = sorted(table.values()) if rewrite else list(self._new)
            try:
                if rewrite:
                    tmp = self.path.with_suffix(".tmp")
                    tmp.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
                    tmp.replace(self.path)
                else:
                    with self.path.open("a", encoding="utf-8") as f:
                        f.write("".join(f"{w}\n" for w in words))
            except OSError as exc:
                # The file may now miss words (an append cut short) and would pass for complete at
                # the next start: it goes, so that the next start learns the list from the manifest
                # again; this process keeps its list and writes it whole at the next save.
                log.warning("umlaut_words_unsaved path=%s error=%s", self.path, exc)
                with contextlib.suppress(OSError):
                    self.path.unlink(missing_ok=True)
                self.known = False
                return
            if self._fresh is not None:
                self._by_typed, self._fresh = self._fresh, None
                self.complete = True
            self._new = []
            self.known = True

    def written_with_umlaut(self, word: str) -> str | None:
        """The notes' umlaut word that ``word`` transcribes ("Kuendigung", "Fussgaengerueberweg"
        -> "kündigung", "fußgängerüberweg"); None when ``word`` has no ae/oe/ue or the
        notes hold no such word ("poet": no note writes "pöt")."""
        if not _DIGRAPH.search(word.lower()):
            return None
        return self._by_typed.get(transcribed(word))
