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

_WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS_EN = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "get",
        "got",
        "may",
        "might",
        "must",
        "shall",
        "us",
        "let",
        "i'm",
        "it's",
        "don't",
        "can't",
        "what's",
        "how's",
        "please",
        "tell",
        "show",
        "find",
        "give",
        "know",
        "want",
        "need",
        "like",
        "one",
        "thing",
        "things",
        "something",
        "anything",
    ]
)

STOPWORDS_DE = frozenset(
    [
        "aber",
        "alle",
        "allem",
        "allen",
        "aller",
        "alles",
        "als",
        "also",
        "am",
        "an",
        "ander",
        "andere",
        "anderem",
        "anderen",
        "anderer",
        "anderes",
        "anderm",
        "andern",
        "anders",
        "auch",
        "auf",
        "aus",
        "bei",
        "bin",
        "bis",
        "bist",
        "da",
        "damit",
        "dann",
        "das",
        "dass",
        "dasselbe",
        "dazu",
        "daß",
        "dein",
        "deine",
        "deinem",
        "deinen",
        "deiner",
        "deines",
        "dem",
        "demselben",
        "den",
        "denn",
        "denselben",
        "der",
        "derer",
        "derselbe",
        "derselben",
        "des",
        "desselben",
        "dessen",
        "dich",
        "die",
        "dies",
        "diese",
        "dieselbe",
        "dieselben",
        "diesem",
        "diesen",
        "dieser",
        "dieses",
        "dir",
        "doch",
        "dort",
        "du",
        "durch",
        "ein",
        "eine",
        "einem",
        "einen",
        "einer",
        "eines",
        "einig",
        "einige",
        "einigem",
        "einigen",
        "einiger",
        "einiges",
        "einmal",
        "er",
        "es",
        "etwas",
        "euch",
        "euer",
        "eure",
        "eurem",
        "euren",
        "eurer",
        "eures",
        "für",
        "gegen",
        "gewesen",
        "hab",
        "habe",
        "haben",
        "hat",
        "hatte",
        "hatten",
        "hier",
        "hin",
        "hinter",
        "ich",
        "ihm",
        "ihn",
        "ihnen",
        "ihr",
        "ihre",
        "ihrem",
        "ihren",
        "ihrer",
        "ihres",
        "im",
        "in",
        "indem",
        "ins",
        "ist",
        "jede",
        "jedem",
        "jeden",
        "jeder",
        "jedes",
        "jene",
        "jenem",
        "jenen",
        "jener",
        "jenes",
        "jetzt",
        "kann",
        "kein",
        "keine",
        "keinem",
        "keinen",
        "keiner",
        "keines",
        "können",
        "könnte",
        "machen",
        "man",
        "manche",
        "manchem",
        "manchen",
        "mancher",
        "manches",
        "mein",
        "meine",
        "meinem",
        "meinen",
        "meiner",
        "meines",
        "mich",
        "mir",
        "mit",
        "muss",
        "musste",
        "nach",
        "nicht",
        "nichts",
        "noch",
        "nun",
        "nur",
        "ob",
        "oder",
        "ohne",
        "sehr",
        "sein",
        "seine",
        "seinem",
        "seinen",
        "seiner",
        "seines",
        "selbst",
        "sich",
        "sie",
        "sind",
        "so",
        "solche",
        "solchem",
        "solchen",
        "solcher",
        "solches",
        "soll",
        "sollte",
        "sondern",
        "sonst",
        "über",
        "um",
        "und",
        "uns",
        "unsere",
        "unserem",
        "unseren",
        "unser",
        "unseres",
        "unter",
        "viel",
        "vom",
        "von",
        "vor",
        "während",
        "war",
        "waren",
        "warst",
        "was",
        "weg",
        "weil",
        "weiter",
        "welche",
        "welchem",
        "welchen",
        "welcher",
        "welches",
        "wenn",
        "werde",
        "werden",
        "wie",
        "wieder",
        "will",
        "wir",
        "wird",
        "wirst",
        "wo",
        "wollen",
        "wollte",
        "würde",
        "würden",
        "zu",
        "zum",
        "zur",
        "zwar",
        "zwischen",
        "bitte",
        "gibt",
        "gib",
        "zeig",
        "zeige",
        "finde",
    ]
)

STOPWORDS = STOPWORDS_EN | STOPWORDS_DE


def fold(word: str) -> str:
    """Lowercase and strip accents, so stopword checks ignore case and diacritics."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_FOLDED_STOPWORDS = frozenset(fold(w) for w in STOPWORDS)


MONTHS = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "januar",
        "februar",
        "märz",
        "maerz",
        "mai",
        "juni",
        "juli",
        "oktober",
        "dezember",
    ]
)
CHRONICLE_WORDS = frozenset(
    [
        "changed",
        "change",
        "changes",
        "changelog",
        "when",
        "created",
        "promoted",
        "updated",
        "history",
        "log",
        "logs",
        "timeline",
        "released",
        "release",
        "version",
        "yesterday",
        "today",
        "last",
        "ago",
        "since",
        "date",
        "geändert",
        "geaendert",
        "änderung",
        "aenderung",
        "änderungen",
        "wann",
        "erstellt",
        "aktualisiert",
        "verlauf",
        "protokoll",
        "gestern",
        "heute",
        "letzte",
        "seit",
        "datum",
    ]
)
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


def analyze(text: str) -> QueryAnalysis:
    text = unicodedata.normalize("NFC", text)
    words = tuple(_WORD.findall(text))
    content = tuple(w for w in words if not is_stopword(w))
    return QueryAnalysis(text, words, content, is_chronicle(text, words), language(text, words))
