"""Daily-note names in a vault's own format (pure): a Moment.js format as Obsidian's Daily notes and
the Periodic Notes plugin write it (``DD.MM.YYYY``, ``YYYY/MM/YYYY-MM-DD``, ``dddd, D. MMMM YYYY``)
turned into a matcher that reads the day out of a note's path. Imports nothing of the project.

Tokens read: ``YYYY``, ``YY`` (2000-2068, 1969-1999 as Moment.js reads it), ``MM``, ``M``, ``DD``,
``D``, ``Do`` (1st, 2nd, 1.), month
names ``MMMM``/``MMM`` in English and German (by their first three letters, umlaut folded: "März",
"Maerz", "Mar."), and weekday names ``dddd``/``ddd``/``dd`` (matched as any word: the day is given by
the other tokens). ``[...]`` is literal text, other characters are themselves. A format with any
other letter token (weeks, quarters, hours) or without a year, a month and a day names no day and
is not used: a weekly or monthly note is no daily note.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import unicodedata
from dataclasses import dataclass

_TOKEN = re.compile(r"\[[^\]]*\]|YYYY|YY|MMMM|MMM|MM|M|Do|DD|D|dddd|ddd|dd|d|[A-Za-z]")
_NAME = r"([^\W\d_]+\.?)"
_PARTS = {
    "YYYY": ("year", r"(\d{4})"),
    "YY": ("year2", r"(\d{2})"),
    "MMMM": ("month_name", _NAME),
    "MMM": ("month_name", _NAME),
    "MM": ("month", r"(\d{2})"),
    "M": ("month", r"(\d{1,2})"),
    "Do": ("day", r"(\d{1,2})(?:st|nd|rd|th|\.)?"),
    "DD": ("day", r"(\d{2})"),
    "D": ("day", r"(\d{1,2})"),
    "dddd": ("", r"[^\W\d_]+\.?"),
    "ddd": ("", r"[^\W\d_]+\.?"),
    "dd": ("", r"[^\W\d_]+\.?"),
}
# English and German month names by their first three letters, folded (märz -> mar, maerz -> mae).
_MONTHS = {
    "jan": 1, "feb": 2, "mar": 3, "mae": 3, "apr": 4, "may": 5, "mai": 5, "jun": 6,
    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "okt": 10, "nov": 11, "dec": 12, "dez": 12,
}  # fmt: skip
# (format, folder): a daily-note format and the vault-relative folder its notes are made in ('' for
# the vault's top: then a name in the format is a daily note wherever it is).
DayFormats = tuple[tuple[str, str], ...]
ISO_FORMAT = "YYYY-MM-DD"  # Obsidian's default, and what a note's name always may say


@dataclass(frozen=True)
class DayFormat:
    """One daily-note format, compiled: ``day`` reads a note's day out of its path."""

    format: str
    pattern: re.Pattern[str]
    fields: tuple[str, ...]  # the group each capture fills ("year", "month", "month_name", "day")
    folders: bool  # the format holds folders: it is matched against the path's tail

    def day(self, path: str) -> str:
        """The ISO day a vault-relative path (without ``.md``) names in this format, or ''."""
        m = self.pattern.search(path if self.folders else path.rsplit("/", 1)[-1])
        if m is None:
            return ""
        values: dict[str, set[int]] = {}
        for field, text in zip(self.fields, m.groups(), strict=True):
            name, number = field, 0
            if field == "month_name":
                name, number = "month", _MONTHS.get(_fold(text)[:3], 0)
            elif field == "year2":
                # As Moment.js reads a two-digit year (Obsidian's parser): 69-99 are 1969-1999.
                name, number = "year", int(text) + (1900 if int(text) > 68 else 2000)
            else:
                number = int(text)
            values.setdefault(name, set()).add(number)
        # "YYYY/MM/YYYY-MM-DD" names the year and the month twice: both must say the same.
        if any(len(v) != 1 for v in values.values()):
            return ""
        try:
            return dt.date(values["year"].pop(), values["month"].pop(), values["day"].pop()).isoformat()
        except ValueError:  # 31.02.2026, a word that is no month
            return ""


def _fold(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c))


@functools.lru_cache(maxsize=32)
def compile_format(fmt: str) -> DayFormat | None:
    """The matcher of a Moment.js format, or None when it names no day (see the module docstring)."""
    pieces: list[str] = []
    fields: list[str] = []
    at = 0
    for m in _TOKEN.finditer(fmt):
        pieces.append(re.escape(fmt[at : m.start()]))
        at = m.end()
        token = m.group(0)
        if token.startswith("["):
            pieces.append(re.escape(token[1:-1]))
        elif token in _PARTS:
            name, rx = _PARTS[token]
            pieces.append(rx)
            if name:
                fields.append(name)
        else:
            return None  # a token we do not read (weeks, quarters, hours ...)
    pieces.append(re.escape(fmt[at:]))
    names = set(fields)
    if not names & {"year", "year2"} or not names & {"month", "month_name"} or "day" not in names:
        return None
    body = "".join(pieces)
    folders = "/" in fmt
    # A format with folders is the path's tail from a folder on; a name alone may sit inside a
    # longer name ("15.11.2025 Weihnachtsmarkt"), as a YYYY-MM-DD always could; digits next to it
    # make it another number.
    pattern = rf"(?:^|/){body}$" if folders else rf"(?<!\d){body}(?!\d)"
    return DayFormat(fmt, re.compile(pattern, re.IGNORECASE), tuple(fields), folders)


def day_of_path(path: str, formats: tuple[str, ...]) -> str:
    """The ISO day a note's vault-relative path names in the first of ``formats`` that reads one."""
    for fmt in formats:
        compiled = compile_format(fmt)
        if compiled is not None and (day := compiled.day(path)):
            return day
    return ""
