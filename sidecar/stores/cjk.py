"""Chinese, Japanese and Korean text as overlapping character bigrams, for the keyword index.

These scripts write words without spaces, so a word tokenizer makes one term of a whole run
("数据库备份" is one term and "备份" never matches it). Splitting each run into overlapping pairs
("数据 据库 库备 备份") lets any word of two or more characters match, the same on both sides
(notes and queries), at the price of a few spurious pairs at word boundaries; a single character
stays a term of its own. Han, Hiragana and Katakana form one run (Japanese mixes them within a
word), Hangul its own. Other scripts pass through unchanged. Imports nothing of the project.
"""

from __future__ import annotations

import re

# Han (with extension A and compatibility ideographs), Hiragana, Katakana (with the prolonged
# sound mark and half-width forms); Hangul syllables and jamo.
_HAN_KANA = "\u3005\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_HANGUL = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
_RUN = re.compile(f"[{_HAN_KANA}]+|[{_HANGUL}]+")
_ANY = re.compile(f"[{_HAN_KANA}{_HANGUL}]")


def has_cjk(text: str) -> bool:
    return _ANY.search(text) is not None


def _pairs(m: re.Match[str]) -> str:
    run = m.group(0)
    if len(run) < 3:
        return f" {run} "
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "


def bigrams(text: str) -> str:
    """``text`` with every CJK run replaced by its overlapping bigrams, separated by spaces."""
    if not has_cjk(text):
        return text
    return _RUN.sub(_pairs, text)
