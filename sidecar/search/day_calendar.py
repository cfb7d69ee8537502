"""The calendar under the time phrases (pure): ``since:``/``until:`` values as a day (``parse_day``),
the windows of days a phrase names (a week, a month, a year, the last N days, a month or a day by
its name and the year it is of), how a text's phrases are read (``Reading``) and the pattern
pieces they are written with (numbers, weekdays, month names, years). ``FilterError`` is here, the
lowest module that raises it (a ``since:`` value that is no day); ``query`` raises it for the other
filters. Imports nothing of the project but ``words`` (folding, the word lists)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.search.words import fold, numbered_file


class FilterError(ValueError):
    """An inline filter or time value that cannot be honoured; the message names it."""


_WEEKDAYS = numbered_file("weekdays.txt")
_NUMBERS = numbered_file("numbers.txt")
_TODAY = ("today", "heute")
_YESTERDAY = ("yesterday", "gestern")
_TOMORROW = ("tomorrow", "morgen")  # "until:tomorrow", "since:morgen": a plan for the coming day
_ISO_LOOSE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$")
_ISO_MONTH_ONLY = re.compile(r"^(\d{4})-(\d{1,2})$")
_DAYS_AGO = re.compile(r"^(\d{1,4})d$")
_ISO_DAY = r"(\d{4}-\d{1,2}-\d{1,2})"  # a day in a time phrase ("since 2026-11-20")
# German dates as a daily-note format writes them: 04.12.2026, 4.12.2026, 4.12. (this year)
_DOTTED = re.compile(r"^(\d{1,2})\.(\d{1,2})\.(\d{4})?$")
DAY_VALUES = (
    "YYYY-MM-DD, YYYY-MM, DD.MM.YYYY, today/heute, yesterday/gestern, tomorrow/morgen, "
    "a weekday (Monday/Montag: the last one) or Nd (N days ago)"
)


def _last_weekday(today: dt.date, weekday: int) -> dt.date:
    return today - dt.timedelta(days=(today.weekday() - weekday) % 7)


def _month_end(day: dt.date) -> dt.date:
    nxt = (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return nxt - dt.timedelta(days=1)


def _written_day(v: str, today: dt.date, end: bool) -> dt.date | None:
    """A day written as digits (ISO, a month, the German dotted form); None: not so written.
    Raises ValueError for a form that names no day (2026-02-30)."""
    if m := _ISO_LOOSE.match(v):
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    if m := _ISO_MONTH_ONLY.match(v):
        first = dt.date(int(m[1]), int(m[2]), 1)
        return _month_end(first) if end else first
    if m := _DOTTED.match(v):
        return dt.date(int(m[3]) if m[3] else today.year, int(m[2]), int(m[1]))
    return None


def parse_day(value: str, today: dt.date, *, name: str, end: bool = False) -> dt.date:
    """A ``since:``/``until:`` value as a day; ``end`` picks the last day of a month value."""
    v = value.strip().lower()
    try:
        written = _written_day(v, today, end)
    except ValueError as exc:
        raise FilterError(f"{name}:{value} is not a valid date ({exc})") from exc
    if written is not None:
        return written
    if v in _TODAY:
        return today
    if v in _YESTERDAY:
        return today - dt.timedelta(days=1)
    if v in _TOMORROW:
        return today + dt.timedelta(days=1)
    if v in _WEEKDAYS:
        return _last_weekday(today, _WEEKDAYS[v])
    if m := _DAYS_AGO.match(v):
        return today - dt.timedelta(days=int(m[1]))
    raise FilterError(f"{name}:{value} is not a date: use {DAY_VALUES}")


_NUM = (
    r"(\d{1,3}|"
    + "|".join(sorted((w for w in _NUMBERS if w not in ("a", "an")), key=len, reverse=True))
    + ")"
)
_WD = "(" + "|".join(_WEEKDAYS) + ")"
Window = tuple[dt.date, dt.date]


class _Whole(tuple[dt.date, dt.date]):
    """A window read whole, not ended at today: a period asked about while it runs, as the one
    begun ("What am I doing from December to February?" asked on December 7th)."""


class _Planned(_Whole):
    """A window of plans, kept when it lies ahead of today as the agenda's is ("What do I have to
    do between January and March?" asked in December: the coming January to March)."""


@dataclass(frozen=True)
class Reading:
    """How a text's time phrases are read: ``ahead`` for a question about the agenda (a named day
    or month is the coming one, a period runs to its end, not to today), ``week_start`` the
    weekday a week begins on (0 Monday ... 6 Sunday; Obsidian's calendar setting)."""

    ahead: bool = False
    week_start: int = 0
    gone: bool = False  # the phrase names a day gone by (notes "from" or "vom" it)
    # Whether a year back ("vor einem Jahr") is read as its days: given the text and the text
    # without the phrase, the message asks only what happened then (see _year_ago). None: it is.
    plain: Callable[[str, str], bool] | None = None


def _num(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _one(day: dt.date) -> Window:
    return day, day


# Periods are whole here (this week to its last day); time_window ends them at today unless the
# question is about the agenda.
def _week(today: dt.date, back: int, start: int = 0) -> Window:
    """This week (``back`` 0) or an earlier one, beginning on weekday ``start``."""
    first = today - dt.timedelta(days=(today.weekday() - start) % 7) - dt.timedelta(weeks=back)
    return first, first + dt.timedelta(days=6)


def _month(today: dt.date, back: int) -> Window:
    first = today.replace(day=1)
    for _ in range(back):
        first = (first - dt.timedelta(days=1)).replace(day=1)
    return first, _month_end(first)


def _weekday_of_week(today: dt.date, back: int, weekday: str, start: int = 0) -> Window:
    """One weekday of this week (``back`` 0) or of an earlier one ("letzte Woche Dienstag")."""
    first = _week(today, back, start)[0]
    return _one(first + dt.timedelta(days=(_weekday_number(weekday) - start) % 7))


def _year(today: dt.date, back: int) -> Window:
    first = dt.date(today.year - back, 1, 1)
    return first, dt.date(first.year, 12, 31)


def _months_back(today: dt.date, months: int) -> dt.date:
    """The same day ``months`` months before (that month's last day when it has fewer days)."""
    index = today.year * 12 + today.month - 1 - months
    first = dt.date(index // 12, index % 12 + 1, 1)
    return first.replace(day=min(today.day, _month_end(first).day))


def _rolling(today: dt.date, unit: str, count: int) -> Window:
    """The last ``count`` days, weeks, months or years up to today, today counted ("in the last 3
    days" is today and the two days before; "in the past year", "in den letzten 12 Monaten" the
    day after the same day a year ago up to today): "in the last week" was eight days."""
    return _ROLLING_START[unit.lower()[:3]](today, count) + dt.timedelta(days=1), today


# The day before a rolling window's first, by the unit's first three letters (English, German).
_ROLLING_START: dict[str, Callable[[dt.date, int], dt.date]] = {
    "day": lambda t, n: t - dt.timedelta(days=n),
    "tag": lambda t, n: t - dt.timedelta(days=n),
    "wee": lambda t, n: t - dt.timedelta(weeks=n),
    "woc": lambda t, n: t - dt.timedelta(weeks=n),
    "mon": _months_back,
    "yea": lambda t, n: _months_back(t, 12 * n),
    "jah": lambda t, n: _months_back(t, 12 * n),
}


# "the last week of the project", "die letzte Woche des Urlaubs", "the last month before the
# move": a week, month or year of something else, not the one before this one.
_LAST_EN = r"(?:last|previous)"
_LAST_DE = r"(?:letzte|vorige|vergangene)[rnsm]?"
_LAST_WEEK = rf"(?:{_LAST_EN}\s+week|{_LAST_DE}\s+woche)"
_THIS_WEEK = r"(?:(?:this|current)\s+week|diese[rn]?\s+woche)"
# German genitives too: "Anfang letzten Monats", "im Sommer letzten Jahres"
_LAST_MONTH = rf"(?:{_LAST_EN}\s+month|{_LAST_DE}\s+monats?)"
_LAST_YEAR = rf"(?:{_LAST_EN}\s+year|{_LAST_DE}\s+jahr(?:es)?)"
_ON_WD = r"(?:(?:on|am)\s+)?" + _WD  # "on Tuesday", "am Dienstag"
# What follows "in the last year" or "im letzten Jahr" when it is a year of something else ("in
# the last year of the project", "im letzten Monat der Schwangerschaft", "in der letzten Woche vor
# dem Umzug").
# Only the genitive possessives mean "of": "im letzten Monat meine Mutter besucht" is last month
# ("meine" begins the sentence's object), "im letzten Jahr meines Studiums" a year of something else.
_OF_SOMETHING = (
    r"(?!\s+(?:of|before|des|der|vor|meine[rs]|unse?re[rs]|seine[rs]|ihre[rs]|deine[rs]|eure[rs])\b)"
)
_UNITS_EN = r"(days?|weeks?|months?|years?)"
_UNITS_DE = r"(tage?|tagen|wochen?|monate?|monaten|jahre?|jahren)"

PhraseWindow = Callable[[dt.date, re.Match[str], Reading], Window]
Phrase = tuple[str, PhraseWindow]

# Month names by their number, English and German ("März" also as "Maerz"); "mar", "sep" … are
# no names of their own here ("in mar" is no month anyone says). Keys folded (see _month_number).
_MONTH_NAMES = (
    ("january", "januar", "jänner"),
    ("february", "februar", "feber"),
    ("march", "märz", "maerz"),
    ("april",),
    ("may", "mai"),
    ("june", "juni"),
    ("july", "juli"),
    ("august",),
    ("september",),
    ("october", "oktober"),
    ("november",),
    ("december", "dezember"),
)
_MONTH_NUMBERS = {fold(name): number for number, names in enumerate(_MONTH_NAMES, start=1) for name in names}
_MONTH = "(" + "|".join(sorted((n for names in _MONTH_NAMES for n in names), key=len, reverse=True)) + ")"
# A year after a month or day: "2025", "of 2025", "'25", "last year", "letzten Jahres". Atomic
# ("(?>…)"): "in May 2025 to June" must not fall back to "in May" of this year.
_YEAR_FORMS = (
    r"(?:,?\s+(?:of\s+)?((?:19|20)\d\d|'\d\d)"
    r"|\s+(?:of\s+)?((?:last|previous)\s+year|(?:des\s+)?(?:letzte|vorige|vergangene)[ns]?\s+jahr(?:es)?))"
)
_YEAR_OF = "(?>" + _YEAR_FORMS + "?)"
_YEAR_SAID = "(?>" + _YEAR_FORMS + ")"  # the same, said
# What makes a day or month no window of its own: a range ("from December 3 to 5", "vom 1.10. bis
# 31.10.": its first day alone would hide the rest) or "of" something ("in March of the Penguins").
_NO_RANGE = r"(?!\s*(?:-|–|bis\b|to\b|until\b|till\b|through\b|and\b|und\b|of\b))"
# English titles go on with a capital ("in November Rain", "Last Friday Night"); German nouns too,
# so only after the English forms.
_NO_TITLE = r"(?!\s+(?-i:[A-Z][a-z]))"
_MONTH_BACK_DAYS = 62  # a month named at a year's turn: December asked in January is the last one
_DAY_BACK_DAYS = 31


def _weekday_number(name: str) -> int:
    """A weekday's number by its name, as written in any case ("FRİDAY" folds to friday)."""
    return _WEEKDAYS[fold(name)]


def _month_number(name: str) -> int:
    """A month's number by its name; lowercase "may" is the verb ("sign in may fail")."""
    if name.lower() == "may" and not name[0].isupper():
        raise FilterError("'may' in lowercase is a verb")
    return _MONTH_NUMBERS[fold(name)]


def _year_of(today: dt.date, year: str | None, previous: str | None) -> int | None:
    if year:
        return int(year) if len(year) == 4 else 2000 + int(year[1:])
    return today.year - 1 if previous else None


def _named_month(
    today: dt.date,
    name: str,
    year: str | None,
    previous: str | None = None,
    *,
    ahead: bool = False,
    gone: bool = False,
) -> Window:
    """A month by its name: of the year said; else this year's once begun, or last year's when it
    ended within two months ("im Dezember" asked in January); else no window ("im Mai bin ich im
    Urlaub" asked in January is the May to come). Asked ``ahead`` (the agenda), this year's
    unless it ended more than two months ago, else next year's ("was habe ich im März vor?"
    asked in December; "im Dezember" asked in January stays the one just over). A month ``gone``
    by (notes "from" it) is the last one however long ago, and "may" there no verb."""
    number = _MONTH_NUMBERS[fold(name)] if gone else _month_number(name)
    said = _year_of(today, year, previous)
    first = dt.date(said or today.year, number, 1)
    if said is None and first > today:  # last year's, if it ended within two months
        first = first.replace(year=today.year - 1)
        if not gone and (today - _month_end(first)).days > _MONTH_BACK_DAYS:
            if not ahead:
                raise FilterError("a month to come")
            first = first.replace(year=today.year)  # the agenda: the coming one
    elif said is None and ahead and (today - _month_end(first)).days > _MONTH_BACK_DAYS:
        first = first.replace(year=today.year + 1)  # over and not just over: the coming one
    return first, _month_end(first)


def _named_day(
    today: dt.date,
    day: str,
    month: int,
    year: str | None,
    previous: str | None = None,
    *,
    ahead: bool = False,
    gone: bool = False,
) -> Window:
    """A day of a month: of the year said; else this year's once come, or last year's within a
    month ("am 30. Dezember" asked on January 3rd); else no window (a day to come). Asked
    ``ahead`` (the agenda), the coming one ("was steht am 3. März an?" asked in December), unless
    it went by within a month ("was steht am 30. November an?" asked December 5th). A day
    ``gone`` by (notes "from" it) is the last one however long ago: a note was written then."""
    said = _year_of(today, year, previous)
    try:
        when = dt.date(said or today.year, month, int(day))
    except ValueError as exc:  # "am 31. Februar", Feb 29 of a common year: words
        raise FilterError(f"no such day ({exc})") from exc
    if said is None and when > today:  # last year's, if it went by within a month
        try:
            when = when.replace(year=today.year - 1)
        except ValueError as exc:  # Feb 29 asked in a leap year before it: last year had none
            if not ahead:
                raise FilterError(f"no such day ({exc})") from exc
        else:
            if (today - when).days > _DAY_BACK_DAYS and not gone:
                if not ahead:
                    raise FilterError("a day to come")
                when = when.replace(year=today.year)  # the agenda: the coming one
    elif said is None and ahead and not gone and (today - when).days > _DAY_BACK_DAYS:
        try:  # gone by and not just gone by: the coming one
            when = when.replace(year=today.year + 1)
        except ValueError as exc:  # Feb 29 a year on: no such day
            raise FilterError(f"no such day ({exc})") from exc
    return _one(when)
