"""The words of a query as the search's arms read them: BM25's text and the words typed beside
the umlaut spelling read (``Retriever.read_spelling``), whether the model read the words at all
(``unread_words``), the stopwords by their stem per field, and a candidate's name words for the
name rules. Pure but for the keyword index's analyzer (``_stopword_stems``). Imports search's
pure modules and the keyword index's type.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence

from sidecar.notes.frontmatter import note_names
from sidecar.search.query import STOPWORDS_DE, STOPWORDS_EN, QueryAnalysis, is_stopword
from sidecar.search.words import WORD
from sidecar.search.words import fold as fold_word
from sidecar.stores.bm25 import Bm25Index


def bm25_text(qa: QueryAnalysis) -> str:
    """The words BM25 looks for: content words, or every word when the query has none."""
    return " ".join(qa.content_words or qa.words)


def typed_part(spelled: Mapping[str, str]) -> BmParts:
    """The words read with umlauts (``Retriever.read_spelling``) as typed, a part of their own at
    a word's weight: searched beside the query as read."""
    return [(" ".join(spelled), 1.0)] if spelled else []


def joined_part(joined: Sequence[str]) -> BmParts:
    """German verbs split from their particle, joined again (``Retriever.separated``), a part of
    their own at a word's weight: the verb as typed in another spelling, outside the query's
    scale as the words typed beside their umlaut reading are."""
    return [(" ".join(joined), 1.0)] if joined else []


def _with_umlauts(text: str, spelled: Mapping[str, str]) -> str:
    """``text`` with each word of ``spelled`` (by the word lowercased) replaced, its case kept."""
    if not spelled:
        return text

    def read(m: re.Match[str]) -> str:
        typed = m.group(0)
        written = spelled.get(typed.lower())
        if written is None:
            return typed
        if typed.isupper() and len(typed) > 1:
            return written.upper()
        return written[:1].upper() + written[1:] if typed[:1].isupper() else written

    return WORD.sub(read, text)


# Characters per word piece below which the model has not read a query's words. A tokenizer keeps
# the words of its training text whole or in long pieces (e5: "Geschenkgutschein" 5.7) and breaks
# made-up ones into scraps ("xyzzy" 1.7, "asdfgh" 1.5). A query with a word kept whole, however short
# ("AI"), is read, and digits are no word it could read or not (BENCHMARKS.md, seventeenth
# session: 3.8 % of 505 real questions, 98.7 % of 540 random-letter and 90 % of random-syllable
# phrases; it applies only when no word of the query is in the vault).
UNREAD_CHARS_PER_PIECE = 3.0
_ALPHABETS = ("LATIN", "GREEK", "CYRILLIC")
BmParts = list[tuple[str, float]]  # (words, weight): the message's words, then the history's


@functools.lru_cache(maxsize=16)
def _language_set(languages: str) -> frozenset[str]:
    return frozenset(x.strip().lower() for x in languages.split(",") if x.strip())


@functools.lru_cache(maxsize=65_536)  # titles repeat across queries; folding them was 4 ms a query
def _words(text: str) -> frozenset[str]:
    return frozenset(fold_word(w) for w in WORD.findall(text) if not is_stopword(w))


# Every candidate of every search asks (90 and more a search, the same notes again and again);
# a pure function of its arguments, so nothing to invalidate.
@functools.lru_cache(maxsize=16_384)
def _name_words(
    key: str, title: str, aliases: tuple[str, ...]
) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """A candidate's name words (the file name's and every name's: the slug rule) and each name's
    word set (title and aliases, ``note_names``: the full-name rules), folded."""
    full = tuple(w for w in map(_words, note_names(title, aliases)) if w)
    return _words(key.rsplit("/", 1)[-1]).union(*full), full


_STOPWORD_STEMS: dict[str, dict[str, tuple[str, ...]]] = {}
_STOPWORD_STEMS_LOCK = threading.Lock()


def _stopword_stems(bm25: Bm25Index, field: str) -> dict[str, tuple[str, ...]]:
    """The stopwords of the field's language by their stem in that field (every index analyzes a
    field alike: once per process and field). The server's threads search at once: the first
    to need a field builds its table under the lock and the others wait for it (unlocked, each
    thread that came before it was done built one of its own, a few hundred analyzer calls)."""
    done = _STOPWORD_STEMS.get(field)
    if done is not None:
        return done
    with _STOPWORD_STEMS_LOCK:
        done = _STOPWORD_STEMS.get(field)
        if done is None:
            by_stem: dict[str, list[str]] = {}
            for w in sorted(STOPWORDS_DE if field == "body_de" else STOPWORDS_EN):
                for t in bm25.analyze(w, field):
                    by_stem.setdefault(t, []).append(w)
            done = {t: tuple(ws) for t, ws in by_stem.items()}
            _STOPWORD_STEMS[field] = done
    return done


def unread_words(words: Sequence[str], pieces: Sequence[int]) -> bool:
    """Whether a tokenizer broke ``words`` (with ``pieces`` word pieces each) into scraps: every
    word it split is in Latin, Greek or Cyrillic letters, at least one was split, none was kept
    whole, and the split ones average fewer than ``UNREAD_CHARS_PER_PIECE`` characters a piece.
    Digits are left out (a number is no word to read); a logographic script is one piece per
    character by design, so a query in one is read."""
    judged = [(w, n) for w, n in zip(words, pieces, strict=True) if not w.isdigit()]
    if not judged or any(n < 2 or not _alphabetic(w) for w, n in judged):
        return False
    return sum(len(w) for w, _ in judged) < UNREAD_CHARS_PER_PIECE * sum(n for _, n in judged)


def _alphabetic(word: str) -> bool:
    return all(ch.isdigit() or unicodedata.name(ch, "").startswith(_ALPHABETS) for ch in word)
