"""Query analysis (pure): content words versus filler words of German and English.

Filler words are removed from the BM25 query; the number of content words picks the fusion
weights (a one- or two-word query leans on BM25); chronicle questions (months, years, "when",
"changed", "geändert") keep change logs from being demoted; inline filters (``tag:``, ``path:``,
``since:``, ``until:``, ``source:``) are split off. Imports nothing of the project.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from importlib import resources

_WORD = re.compile(r"\w+", re.UNICODE)


def _words_file(name: str) -> frozenset[str]:
    """One word a line, from the package's data folder (lists are data, not code)."""
    text = resources.files("sidecar").joinpath("data", name).read_text(encoding="utf-8")
    return frozenset(w.strip().lower() for w in text.splitlines() if w.strip() and not w.startswith("#"))


# Filler words: articles, pronouns, auxiliaries and the chat frame around a question ("kannst du
# mir sagen", "ok thanks", "do you know"). Words that are also command or feature names (sort,
# kill, right, wrong) stay content words.
STOPWORDS_EN = _words_file("stopwords-en.txt")
STOPWORDS_DE = _words_file("stopwords-de.txt")
STOPWORDS = STOPWORDS_EN | STOPWORDS_DE


def fold(word: str) -> str:
    """Lowercase and strip accents, so stopword checks ignore case and diacritics."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_FOLDED_STOPWORDS = frozenset(fold(w) for w in STOPWORDS)
MONTHS = _words_file("months.txt")
CHRONICLE_WORDS = _words_file("chronicle.txt")  # about when something happened or changed
_YEAR = re.compile(r"^(19|20)\d\d$")
_ISO_MONTH = re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])(-\d\d)?\b")
_FILTER = re.compile(r"(?<!\S)(tag|path|since|until|source):(\"[^\"]*\"|\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class Filters:
    """Restrictions a query can carry inline (``tag:garten path:projekte/ since:2026-09-01``)."""

    tags: tuple[str, ...] = ()
    path_prefix: str | None = None
    since: str | None = None  # ISO date, inclusive
    until: str | None = None
    sources: tuple[str, ...] = ()

    def merged(self, other: Filters) -> Filters:
        return Filters(
            tuple(dict.fromkeys(self.tags + other.tags)),
            other.path_prefix or self.path_prefix,
            other.since or self.since,
            other.until or self.until,
            tuple(dict.fromkeys(self.sources + other.sources)),
        )

    @property
    def active(self) -> bool:
        return bool(self.tags or self.path_prefix or self.since or self.until)


def split_filters(text: str) -> tuple[str, Filters]:
    """Strip inline filter syntax from the text that is ranked; return both."""
    tags: list[str] = []
    sources: list[str] = []
    found: dict[str, str] = {}
    for m in _FILTER.finditer(text):
        name, value = m.group(1).lower(), m.group(2).strip('"')
        if name == "tag":
            tags.append(value.lstrip("#").lower())
        elif name == "source":
            sources.append(value.lower())
        else:
            found[name] = value
    rest = " ".join(_FILTER.sub(" ", text).split())
    return rest, Filters(
        tuple(tags), found.get("path"), found.get("since"), found.get("until"), tuple(sources)
    )


@dataclass(frozen=True)
class QueryAnalysis:
    text: str
    words: tuple[str, ...]
    content_words: tuple[str, ...]
    chronicle: bool = False  # about when/what changed: logs are not demoted
    language: str | None = None  # "de" or "en" when the words say so

    @property
    def word_class(self) -> int:
        """0, 1 (one or two content words) or 2 (three or more)."""
        n = len(self.content_words)
        return 0 if n == 0 else (1 if n <= 2 else 2)


def is_stopword(word: str) -> bool:
    return word.lower() in STOPWORDS or fold(word) in _FOLDED_STOPWORDS


def is_chronicle(text: str, words: tuple[str, ...]) -> bool:
    """Month names (de/en), years, ``2026-09``, and words like changed / when / geändert / wann."""
    if _ISO_MONTH.search(text):
        return True
    return any(
        w.lower() in MONTHS or w.lower() in CHRONICLE_WORDS or fold(w) in CHRONICLE_WORDS or _YEAR.match(w)
        for w in words
    )


_ONLY_DE = STOPWORDS_DE - STOPWORDS_EN
_ONLY_EN = STOPWORDS_EN - STOPWORDS_DE


def language(text: str, words: tuple[str, ...]) -> str | None:
    """``de`` or ``en`` by filler words and German letters; None when undecided."""
    lower = [w.lower() for w in words]
    de = sum(w in _ONLY_DE for w in lower) + (2 if re.search(r"[äöüß]", text, re.IGNORECASE) else 0)
    en = sum(w in _ONLY_EN for w in lower)
    return "de" if de > en else ("en" if en > de else None)


# "karl's", "don't", "geht's": the clitic is not a word of its own (it was the content word "s").
_CLITIC = re.compile(r"(?<=\w)['’](?:s|t|re|ve|ll|d|m)\b", re.IGNORECASE)


def analyze(text: str) -> QueryAnalysis:
    text = unicodedata.normalize("NFC", text)
    words = tuple(_WORD.findall(_CLITIC.sub("", text)))
    content = tuple(w for w in words if not is_stopword(w))
    return QueryAnalysis(text, words, content, is_chronicle(text, words), language(text, words))
