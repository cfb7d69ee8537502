"""Words as the keyword index reads them, and the word lists of the package's data folder: the
pattern of a word, accent folding, the loaders of one-word-a-line lists (read at import by the
modules that keep a list). Imports nothing of the project."""

from __future__ import annotations

import re
import unicodedata
from importlib import resources


def _mark_class() -> str:
    """The combining marks (Mn, Mc, Me) and the zero-width (non-)joiner as a character class's
    body. Python's ``\\w`` stops at a mark, the keyword index's (Rust's) does not: "हिन्दी",
    "সম্পাদনা" or a vowelled "مُحَمَّد" became pieces no indexed word equals, and a query in
    Hindi, Bengali, Khmer or written Arabic vowels found nothing by keyword. Marks lie below
    U+20000 but for the variation selectors supplement (a scan of 70 ms at import, once)."""
    points = [cp for cp in range(0x300, 0x20000) if unicodedata.category(chr(cp)) in ("Mn", "Mc", "Me")]
    points += [0x200C, 0x200D, *range(0xE0100, 0xE01F0)]
    runs: list[tuple[int, int]] = []
    for cp in sorted(points):
        if runs and cp == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], cp)
        else:
            runs.append((cp, cp))
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in runs)


# A word as the keyword index reads one: letters, digits and the marks within them, underscores
# only inside ("my_function"; "_Cargo.toml_" is "Cargo" and "toml", as the index's layout 3 reads
# it). It starts with a letter or digit: an emoji's variation selector or joiner alone ("☀️",
# "👨‍👩‍👧") is no word (read as one, "have a nice day today ☀️" recalled the daily note).
_PART = rf"(?:[^\W_]|[{_mark_class()}])"
WORD = re.compile(rf"[^\W_]{_PART}*(?:_+{_PART}+)*")


def words_file(name: str) -> frozenset[str]:
    """One word a line, from the package's data folder (lists are data, not code)."""
    text = resources.files("sidecar").joinpath("data", name).read_text(encoding="utf-8")
    return frozenset(w.strip().lower() for w in text.splitlines() if w.strip() and not w.startswith("#"))


def numbered_file(name: str) -> dict[str, int]:
    """``word number`` a line, from the package's data folder, in the file's order."""
    text = resources.files("sidecar").joinpath("data", name).read_text(encoding="utf-8")
    pairs = (line.split() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {word.lower(): int(number) for word, number in pairs}


def kinds_file(name: str) -> dict[str, frozenset[str]]:
    """``word kind`` a line, from the package's data folder: the words of each kind."""
    text = resources.files("sidecar").joinpath("data", name).read_text(encoding="utf-8")
    pairs = [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {kind: frozenset(w.lower() for w, k in pairs if k == kind) for kind in {k for _, k in pairs}}


def fold(word: str) -> str:
    """Lowercase and strip accents, so stopword checks ignore case and diacritics."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))
