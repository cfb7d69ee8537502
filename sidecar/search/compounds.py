"""A compound word of a query split into words of the notes (pure): "Rückerstattung" asked of
notes that say "Erstattung", "Textsuche" of ones that say "Suche nach Text". German writes a
compound as one word; a page about the same thing often says it in parts, or with another head.

Which splits count is asked of the notes' own words (``held``: how many chunks hold a word), so
no dictionary is needed and a split never yields a word the notes lack. A compound the notes
hold often is left whole. Imports only the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# German linking elements between the parts (Arbeit-s-zeit, Tag-es-licht, Seite-n-rand,
# Kind-er-garten; Hund-e-hütte): a head is also looked up without them.
LINKS = ("s", "es", "n", "en", "er", "e")
MIN_WORD = 8  # shorter words are rarely compounds of two words of four letters
MIN_HEAD = 4  # "Rück", "Text": shorter heads ("pip" of Pipeline) split too many plain words
MIN_TAIL = 4
RARE = 2  # a compound held by at most this many chunks is also searched by its parts


def split(
    word: str, held: Callable[[str], int], stopword: Callable[[str], bool] = lambda _: False
) -> tuple[str, str] | None:
    """``word``'s best split into two words of the notes (the one whose parts the notes hold
    most, by the geometric mean of their chunk counts, as Koehn and Knight's), the head without
    its linking element; None when ``word`` is short, not a capitalised word of letters (a
    German noun: a verb's prefix is no part, "mitlesen" is not "mit lesen", nor is an English
    word's end, "confuses"), held by more than ``RARE`` chunks, or has no such split. A part
    that is a ``stopword`` ("unter", "nach") names nothing and is no part either."""
    w = word.lower()
    if len(w) < MIN_WORD or not w.isalpha() or not word[0].isupper() or held(w) > RARE:
        return None
    best: tuple[str, str] | None = None
    most = 0.0
    for i in range(MIN_HEAD, len(w) - MIN_TAIL + 1):
        head, tail = w[:i], w[i:]
        tail_count = 0 if stopword(tail) else held(tail)
        if not tail_count:
            continue
        heads = [head] + [
            head[: -len(k)] for k in LINKS if head.endswith(k) and len(head) - len(k) >= MIN_HEAD
        ]
        for h in heads:
            count = 0 if stopword(h) else held(h)
            score = math.sqrt(count * tail_count)
            if count and score > most:
                best, most = (h, tail), score
    return best


def parts(
    words: list[str] | tuple[str, ...],
    held: Callable[[str], int],
    stopword: Callable[[str], bool] = lambda _: False,
) -> list[str]:
    """The parts of every compound among ``words`` (see ``split``), each once, in order."""
    out: list[str] = []
    for word in words:
        found = split(word, held, stopword)
        if found:
            out.extend(p for p in found if p not in out)
    return out
