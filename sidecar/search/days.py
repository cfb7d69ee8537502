"""Days (pure): ``since:``/``until:`` values and the time phrases of a question ("last week",
"seit Montag", "am 4.12.") read as a window of days. ``FilterError`` is here, the lowest module
that raises it (a ``since:`` value that is no day); ``query`` raises it for the other filters.
Imports nothing of the project but ``words`` (the word pattern, folding, the word lists) and
``tense`` (whether a question speaks of what happened or of what is to come)."""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from sidecar.search.tense import (
    asks_ahead,
    asks_coming,
    asks_plans,
    clause_asks,
    clause_says_done,
    ends_asked,
    phrase_alone,
    says_done,
    says_nowadays,
)
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


# Days either side of the day a year (or years) ago: a year back is said loosely ("vor einem Jahr"
# is rarely that very day, and a whole calendar year answered with a year of notes), and its
# weekday is another one; a week centred on it holds what was written around then whatever the
# weekday, as "2 weeks ago" is a week.
_AROUND_DAYS = 3


def _around(day: dt.date) -> Window:
    return day - dt.timedelta(days=_AROUND_DAYS), day + dt.timedelta(days=_AROUND_DAYS)


class _LoosePhraseError(FilterError):
    """A loose phrase (a year back) in a message that is about something of its own: its words,
    a word of time inside it too ("heute vor einem Jahr" is not today)."""


def _year_ago(around: bool) -> PhraseWindow:
    """ "a year ago", "vor 2 Jahren" (``around``: the week about that day), "heute vor einem Jahr",
    "a year ago today" (that day). Only for a message asking what happened then and nothing else
    ("Was war vor einem Jahr?", "What did I do a year ago?"): beside a word of its own ("Welche
    Wärmepumpe habe ich vor einem Jahr gekauft?") a week hid the note, dated other days, that the
    words find; "vor einem Jahr" is said loosely."""

    def window(t: dt.date, m: re.Match[str], r: Reading) -> Window:
        if r.plain is not None and not r.plain(m.string, m.string[: m.start()] + " " + m.string[m.end() :]):
            raise _LoosePhraseError("a year back beside other words")
        day = _months_back(t, 12 * _num(m[1]))
        return _around(day) if around else _one(day)

    return window


def _today(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "today", "heute", "this morning": today; words where "today" or "heute" alone is said of
    the present at large ("Wie macht man heute Backups?", "how do people today sync their vault",
    see ``tense.says_nowadays``): a window of today hid the notes, written any day, that answer a
    how-to question."""
    if not r.ahead and m.group(0).lower() in _TODAY and says_nowadays(m):
        raise FilterError("today as nowadays")
    return t, t


def _weekday_before(today: dt.date, weekday: str) -> Window:
    """ "last Tuesday", "letzten Dienstag": the Tuesday before today (a week ago on a Tuesday)."""
    back = (today.weekday() - _weekday_number(weekday)) % 7 or 7
    return _one(today - dt.timedelta(days=back))


def _weekend(today: dt.date, back: int) -> Window:
    # a weekend is Saturday and Sunday whichever day a week begins on
    saturday = _week(today, back)[0] + dt.timedelta(days=5)
    return saturday, saturday + dt.timedelta(days=1)


# A day by its month's name: "3. Dezember", "3.Dezember", "3 December", "December 3rd", "the 3rd
# of December", each with an optional year. Only after "on"/"am" or notes "from"/"vom" it: "December
# 3 deadline" may name a day to come as often as not, "Rechnung vom 3. Dezember" or "the invoice
# from December 3" a paper's date, not the day the note was written.
_ORD = r"(?:st|nd|rd|th)?"
# (the note word stays before the phrase: "my notes from December 3" is no possessive's day)
_NOTES_FROM = (
    r"(?:(?:(?<=notes\s)|(?<=note\s)|(?<=entries\s))from"
    r"|(?:(?<=notizen\s)|(?<=notiz\s)|(?<=einträge\s)|(?<=eintrag\s))vom)\s+"
)
_DAY_FORMS: tuple[Phrase, ...] = (
    (
        r"(\d{1,2})(?:\.\s*|" + _ORD + r"\s+)(?:of\s+)?" + _MONTH + _YEAR_OF + _NO_RANGE,
        lambda t, m, r: _named_day(
            t, m[1], _month_number(m[2]), m[3], m[4], ahead=r.ahead, gone=_said_gone(m, r)
        ),
    ),
    (
        r"the\s+(\d{1,2})" + _ORD + r"\s+of\s+" + _MONTH + _YEAR_OF + _NO_RANGE,
        lambda t, m, r: _named_day(
            t, m[1], _month_number(m[2]), m[3], m[4], ahead=r.ahead, gone=_said_gone(m, r)
        ),
    ),
    (
        _MONTH + r"\s+(\d{1,2})" + _ORD + _YEAR_OF + _NO_RANGE,
        lambda t, m, r: _named_day(
            t, m[2], _month_number(m[1]), m[3], m[4], ahead=r.ahead, gone=_said_gone(m, r)
        ),
    ),
)
# German numerals, "3.12.", "3.12" or "03.12.2026": only after "am" and "seit dem" ("ab 5.1." is
# mostly a version, "vom 30.09." a paper's date).
_NUMERIC_DAY = r"(\d{1,2})\.(\d{1,2})(?:\.((?:19|20)\d\d)?)?(?![\d.])" + _NO_RANGE


def _numeric_day(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    return _named_day(t, m[1], int(m[2]), m[3], ahead=r.ahead, gone=_said_gone(m, r))


def _said_gone(m: re.Match[str], r: Reading) -> bool:
    """Whether a day without its year is the last one however long ago: notes "from" it, or a
    past form in its own clause ("Was war am 24.12.?" asked on December 6th is last year's, asked
    in March the one of December gone; it was words past a month). A question about the agenda
    reads the coming one ("Was steht am 24.12. an?"); one with no tense keeps the month's grace."""
    return r.gone or (not r.ahead and clause_says_done(m))


def _iso_day(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    return _one(parse_day(m[1], t, name="day"))


def _gone(day: PhraseWindow) -> PhraseWindow:
    """A day notes are "from": one gone by, whatever the question ("what's on the note from
    December 1?" opens as an agenda question does, and read the December to come)."""
    return lambda t, m, r: day(t, m, replace(r, ahead=False, gone=True))


# A weekday after "on" or "am" alone ("was war am Donnerstag?", "what happened on Thursday"),
# or notes "from"/"vom" it; not a weekday of something ("am Donnerstag vor Ostern", "on Thursday
# of that week", "am Montag im Urlaub"), one with its date after it ("am Donnerstag, 3.12.", "on
# Thursday, December 3": the date is the day), the first of a range ("from Monday to Friday", "am
# Montag bis Mittwoch", "Friday & Saturday": its first day alone would hide the rest), in a word
# ("am Freitag-Termin", "on Friday.md"), a title ("on Friday Night Lights") or a habit ("on
# Monday mornings").
_MONTH_WORD = "(?:" + _MONTH[1:]  # a month's name, no group of its own
_WD_ALONE = (
    r"(?![-./]\w)(?!,?\s+(?:of|in|im|during|während|before|after|des|der|dem|den|vor|nach|the)\b)(?!,?\s*(?:\d|"
    + _MONTH_WORD
    + r"\b))(?!\s*(?:[-–&/+]|bis\b|to\b|until\b|till\b|through\b|thru\b))"
    r"(?!\s+(?:mornings|afternoons|evenings|nights|weekly)\b)"
)


def _weekday_near(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """The weekday named: asked about the agenda ("Was steht am Donnerstag an?", "what's on
    Thursday?") the coming one; with a past form in its own clause ("was war am Donnerstag?",
    "what did I do on Thursday") or as the whole message ("am Donnerstag?", "and on Thursday?")
    the last one; never today (that is "today"). Else words: "Meeting am Donnerstag", "don't deploy
    on Friday", "Where did I write that the dentist is on Friday?", "What did I buy for the party
    on Saturday?" name a day to come or none as often as a day gone by (see ``tense.clause_says_done``)."""
    weekday = _weekday_number(m[1] or m[2])
    if r.ahead:
        return _one(t + dt.timedelta(days=(weekday - t.weekday()) % 7 or 7))
    if phrase_alone(m) or clause_says_done(m):
        return _weekday_before(t, m[1] or m[2])
    raise FilterError("a weekday with no tense")


# A day or a week of "last March" is no whole month: "last March 3", "last March weekend".
_NO_DAY_OF = r"(?!\s*\d)(?!\s+(?:weekends?|wochenenden?|weeks?|wochen?)\b)"
# "before last March", "bis letzten März", "nach letztem März": the time before or after it, not
# the month (words: a window of the month itself would be the opposite).
_BEFORE_OR_AFTER = re.compile(
    r"(?:before|after|until|till|vor|nach|bis)(?:\s+(?:dem|zum))?\s+$", re.IGNORECASE
)


def _last_named_month(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "last March", "letzten März": the last March before this month, however the question
    reads (asked in March, last year's; "last March" is never the month in progress nor one to
    come). With its year ("letzten März 2024", "last March of last year") that year's: what a
    user means, not this year's with the year dropped. With another month's name in its clause
    words, as a month notes are from, and so after "before"/"after"/"until" (see _BEFORE_OR_AFTER)."""
    _one_month_in_its_clause(m)
    if _BEFORE_OR_AFTER.search(m.string, max(0, m.start() - 12), m.start()):
        raise FilterError("the time before or after a month")
    number = _month_number(m[1] or m[4])
    said = _year_of(t, m[2] or m[5], m[3] or m[6])
    if said is not None:
        first = dt.date(said, number, 1)
        return first, _month_end(first)
    first = dt.date(t.year, number, 1)
    if first >= t.replace(day=1):
        first = first.replace(year=t.year - 1)
    return first, _month_end(first)


def _month_in(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "in March", "im Mai 2025" (see _named_month). In a question in the present of happening or
    doing ("Was passiert im März?", "What am I doing in March?") a month without its year is the
    coming one: no window but the agenda's (the month gone by was read, and its notes listed)."""
    if _LIST_AFTER.match(m.string, m.end()):
        raise FilterError("a list of months")  # "im März, April und Mai": no one month's
    ahead = r.ahead or (not (m[2] or m[5] or m[3] or m[6]) and asks_coming(m))
    return _named_month(t, m[1] or m[4], m[2] or m[5], m[3] or m[6], ahead=ahead)


# A month named by its year alone ("Stromrechnung März 2025", "March 2025 meeting notes") is
# words: mostly a label, and the bill or report of a month is written after it. Only "in"/"im", a
# since form, "ab" or notes "from" it read it (_month_in, _SINCE_ONLY, _DAYS).
_ANY_NAMED_MONTH = re.compile(r"(?<!\w)" + _MONTH + r"(?!\w)", re.IGNORECASE)
_MONTH_CLAUSE_END = re.compile(r"[.!?;:,\n]")


@dataclass(frozen=True)
class _Marks:
    """Where a text's clauses end and its capitalised month names stand, found once per text: a
    phrase's clause looked up for each match (most fail there) made a long text cost by the
    square of its length."""

    ends: list[int]
    starts: list[int]
    stops: list[int]


# A comma before a capitalised month goes on with a list of months, not a new clause ("Notizen
# aus März, April und Mai", "notes from March 2025, April 2025"): the list is no one month's.
_LIST_GOES_ON = re.compile(
    r"\s*(?=(?-i:[A-ZÄÖÜ]))" + _MONTH[1:-1].join(("(?:", ")")) + r"(?!\w)", re.IGNORECASE
)

_LIST_AFTER = re.compile(r"\s*," + _LIST_GOES_ON.pattern, re.IGNORECASE)


@functools.lru_cache(maxsize=8)
def _marks(text: str) -> _Marks:
    names = [n.span() for n in _ANY_NAMED_MONTH.finditer(text) if n.group(0)[0].isupper()]
    ends = [
        e.start()
        for e in _MONTH_CLAUSE_END.finditer(text)
        if e.group(0) != "," or _LIST_GOES_ON.match(text, e.end()) is None
    ]
    return _Marks(ends, [a for a, _ in names], [b for _, b in names])


def _one_month_in_its_clause(m: re.Match[str]) -> None:
    """Two months in one clause ("notes from March 2025 vs April 2025", "ab Januar/Februar
    2025") compare or list them: no window, as a range of them is none (_NO_RANGE). Capitalised
    names only: "may" and "march" are mostly verbs."""
    marks = _marks(m.string)
    before = bisect.bisect_left(marks.ends, m.start())
    start = marks.ends[before - 1] + 1 if before else 0
    after = bisect.bisect_left(marks.ends, m.end())
    end = marks.ends[after] if after < len(marks.ends) else len(m.string)
    # the clause's names, and of them those in the phrase (a range holds its two)
    first, last = bisect.bisect_left(marks.starts, start), bisect.bisect_left(marks.starts, end)
    inside = bisect.bisect_left(marks.starts, m.start()), bisect.bisect_left(marks.starts, m.end())
    if (
        first < inside[0]
        or inside[1] < last
        or (inside[1] > inside[0] and marks.stops[inside[1] - 1] > m.end())
    ):
        raise FilterError("two months in one clause")


# Phrases that name a period (pattern, window from today and the match). "since"/"seit"/"seit
# dem"/"from … on" before any of them runs from the period's first day up to today (_SINCE_FORMS).
_PERIODS: tuple[Phrase, ...] = (
    # The last N days, weeks, months or years, up to today.
    # ("the last 6 months of my thesis", "in den letzten 3 Monaten der Schwangerschaft": words)
    (
        r"(?:in\s+)?(?:the\s+)?(?:last|past)\s+" + _NUM + r"\s+" + _UNITS_EN + _OF_SOMETHING,
        lambda t, m, r: _rolling(t, m[2], _num(m[1])),
    ),
    (
        # "die letzten 3 Monate" is as common as "in den letzten 3 Monaten" ("meine letzten 3
        # Jahre" stays words: a possessive before the phrase)
        r"(?:in\s+)?(?:de[nm]\s+|die\s+)?(?:letzten|vergangenen)\s+"
        + _NUM
        + r"\s+"
        + _UNITS_DE
        + _OF_SOMETHING,
        lambda t, m, r: _rolling(t, m[2], _num(m[1])),
    ),
    # "in the last year", "over the past week": the last twelve months (seven days, one month) up
    # to today, as "in the last 12 months" and "in the last 7 days" are; "the last year" alone or
    # "in the last year of the project" is a year of something else (words). Without its
    # preposition "past year" is as often a name ("past year review", "the past month view",
    # "this past year"): only "the past week" ending a clause ("what did I do the past week?")
    # is the period. A missed window costs little (the words are still searched); a wrong one
    # answers with the period's notes instead of the topic's.
    (
        r"(?:(?:in|over|during|within|for)\s+the\s+(?:last|past)\s+(week|month|year)"
        + _OF_SOMETHING
        + r"|the\s+past\s+(week|month|year)(?=\s*(?:[.,;:!?)]|$)))",
        lambda t, m, r: _rolling(t, m[1] or m[2], 1),
    ),
    # "im letzten Jahr", "in der letzten Woche": read as "letztes Jahr", "letzte Woche" are, the
    # calendar year (week, month) before this one, the reading German speakers mostly mean;
    # the rolling sense has its own unambiguous phrase ("in den letzten 12 Monaten").
    (
        r"(?:im|in\s+de[mr])\s+(?:letzten|vorigen|vergangenen)\s+(woche|monat|jahr)" + _OF_SOMETHING,
        lambda t, m, r: (
            _week(t, 1, r.week_start)
            if m[1].lower() == "woche"
            else {"monat": _month, "jahr": _year}[m[1].lower()](t, 1)
        ),
    ),
    (_NUM + r"\s+days?\s+ago", lambda t, m, r: _one(t - dt.timedelta(days=_num(m[1])))),
    (r"vor\s+" + _NUM + r"\s+tage?n?", lambda t, m, r: _one(t - dt.timedelta(days=_num(m[1])))),
    # "2 weeks ago", "vor zwei Wochen": that week, Monday to Sunday
    (r"(an?|" + _NUM[1:] + r"\s+weeks?\s+ago", lambda t, m, r: _week(t, _num(m[1]), r.week_start)),
    (r"vor\s+" + _NUM + r"\s+wochen?", lambda t, m, r: _week(t, _num(m[1]), r.week_start)),
    # "a month ago", "vor zwei Monaten": that month, as "last month" is the month before this one
    (r"(an?|" + _NUM[1:] + r"\s+months?\s+ago", lambda t, m, r: _month(t, _num(m[1]))),
    (r"vor\s+" + _NUM + r"\s+monate?n?", lambda t, m, r: _month(t, _num(m[1]))),
    # "a year ago", "vor einem Jahr": the week around that day (see _around); "heute vor einem
    # Jahr", "a year ago today": that day
    (r"(an?|" + _NUM[1:] + r"\s+years?\s+ago", _year_ago(around=True)),
    (r"vor\s+" + _NUM + r"\s+jahre?n?", _year_ago(around=True)),
    (r"heute\s+vor\s+" + _NUM + r"\s+jahre?n?", _year_ago(around=False)),
    (r"today,?\s+(an?|" + _NUM[1:] + r"\s+years?\s+ago", _year_ago(around=False)),
    (r"(an?|" + _NUM[1:] + r"\s+years?\s+ago,?\s+today", _year_ago(around=False)),
    # A weekday with its week ("letzte Woche Dienstag", "Tuesday last week"): that day.
    (_ON_WD + r"\s+(?:of\s+)?" + _LAST_WEEK, lambda t, m, r: _weekday_of_week(t, 1, m[1], r.week_start)),
    (_LAST_WEEK + r"(?:\s+(?:on|am))?\s+" + _WD, lambda t, m, r: _weekday_of_week(t, 1, m[1], r.week_start)),
    (_ON_WD + r"\s+(?:of\s+)?" + _THIS_WEEK, lambda t, m, r: _weekday_of_week(t, 0, m[1], r.week_start)),
    (_THIS_WEEK + r"(?:\s+(?:on|am))?\s+" + _WD, lambda t, m, r: _weekday_of_week(t, 0, m[1], r.week_start)),
    (r"(?:the\s+)?week\s+before\s+last|vorletzte[rn]?\s+woche", lambda t, m, r: _week(t, 2, r.week_start)),
    (_THIS_WEEK, lambda t, m, r: _week(t, 0, r.week_start)),
    (_LAST_WEEK, lambda t, m, r: _week(t, 1, r.week_start)),
    # last week's Saturday and Sunday
    (
        rf"(?:{_LAST_EN}|{_LAST_DE})\s+(?:weekend|wochenende)",
        lambda t, m, r: _weekend(t, 1),
    ),
    # "last Tuesday", "letzten Dienstag": the one before today; words when a determiner comes
    # before it ("the last Tuesday", "jeden letzten Freitag"), a place in time after it ("last
    # Tuesday of the month", "letzten Dienstag vor Weihnachten") or a title goes on ("Last Friday
    # Night")
    (
        rf"(?:{_LAST_EN}\s+{_WD}{_NO_TITLE}|{_LAST_DE}\s+{_WD})"
        r"(?!\s+(?:of|in|before|after|des|der|im|vor|nach)\b)",
        lambda t, m, r: _weekday_before(t, m[1] or m[2]),
    ),
    # the weekend just gone: this one on a Sunday, else last week's ("this weekend" is mostly one
    # to come, "am Wochenende" either; "over the weekend of the wedding" one of something)
    (r"over\s+the\s+weekend" + _OF_SOMETHING, lambda t, m, r: _weekend(t, 0 if t.weekday() == 6 else 1)),
    (r"this\s+month|diese[nrm]?\s+monat", lambda t, m, r: _month(t, 0)),
    (_LAST_MONTH, lambda t, m, r: _month(t, 1)),
    # "last March", "im vergangenen März", "vom letzten März", "since last March": the last such
    # month before this one (asked in March, a year ago); see _last_named_month
    (
        r"(?:(?:in|during|from)\s+)?"
        + _LAST_EN
        + r"\s+"
        + _MONTH
        + _NO_TITLE
        + _YEAR_OF
        + _OF_SOMETHING
        + _NO_RANGE
        + _NO_DAY_OF
        + r"|(?:(?:im|in\s+dem|vom|von(?:\s+dem)?|aus\s+dem|am)\s+)?"
        + _LAST_DE
        + r"\s+"
        + _MONTH
        + _YEAR_OF
        + _OF_SOMETHING
        + _NO_RANGE
        + _NO_DAY_OF,
        _last_named_month,
    ),
    (r"this\s+year|dieses\s+jahr|diesem\s+jahr", lambda t, m, r: _year(t, 0)),
    (_LAST_YEAR, lambda t, m, r: _year(t, 1)),
    (r"(?:the\s+)?day\s+before\s+yesterday|vorgestern", lambda t, m, r: _one(t - dt.timedelta(days=2))),
    (r"(?:yesterday|gestern)", lambda t, m, r: _one(t - dt.timedelta(days=1))),
    (r"(?:today|heute|this\s+(?:morning|afternoon|evening))", _today),
    # "in November", "im Mai 2025", "in March of last year": that month (see _named_month)
    (
        r"(?:(?<!notes\s)(?<!note\s)(?<!entries\s)(?<!entry\s)(?<!notizen\s)(?<!notiz\s)(?<!einträge\s)"
        r"(?<!eintrag\s)(?:(?:in|during)\s+"
        + _MONTH
        + _YEAR_OF
        + _NO_TITLE
        + r"|im\s+"
        + _MONTH
        + _YEAR_OF
        + "))"
        + _NO_RANGE,
        _month_in,
    ),
    # a day after "on" or "am" (see _DAY_FORMS)
    *((r"(?:on|am)\s+" + pat, fn) for pat, fn in _DAY_FORMS),
    (r"am\s+" + _NUMERIC_DAY, _numeric_day),
    # an ISO day after "on"/"am" or notes "from"/"vom" it: the default daily-note name, and how
    # agents write days ("what did I do on 2026-11-25" was words, and recall injected another day)
    (r"(?:(?:on|am)\s+|" + _NOTES_FROM + ")" + _ISO_DAY + r"(?![\d-])" + _NO_RANGE, _iso_day),
)
# Days that are no period to count "since" from: a weekday alone (see _weekday_near; "since
# Thursday" is in _SINCE_ONLY) and the day notes are "from" (a day gone by, see _gone).
_WEEKDAY_DAYS: tuple[Phrase, ...] = (
    (rf"(?:on\s+{_WD}{_NO_TITLE}|am\s+{_WD}){_WD_ALONE}", _weekday_near),
    (_NOTES_FROM + _WD + _WD_ALONE, _gone(lambda t, m, r: _weekday_before(t, m[1]))),
)


def _weekend_done(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "am Wochenende", "on the weekend" with a past form in its clause ("Was war am Wochenende?",
    "What did I do on the weekend?"): the weekend just gone, as "over the weekend" is. Else words:
    "am Wochenende" is as often the one to come ("Was machst du am Wochenende?", "Ausflug am
    Wochenende") or a habit ("am Wochenende schlafe ich aus")."""
    # With a weekday or another weekend beside it a list or a range ("on Friday and at the
    # weekend"); in quotes someone's words: words, as a weekday alone is (see _weekday_alone).
    text = m.string
    if len(_ANY_WEEKDAY.findall(text)) != 1 or _QUOTED.search(text):
        raise FilterError("a weekend in a list or a quote")
    # A question about what happened, in the weekend's own clause: "Ich war am Wochenende krank,
    # was hilft gegen Husten?" asks about a cough (the weekend's clause is no question).
    # Or the weekend alone, asked ("und am Wochenende?", "and on the weekend?"): a follow-up, as
    # "und am Donnerstag?" is the Thursday gone by (recall lists its notes only after a question
    # about the person's doings). Without its "?" it stays words ("am Wochenende" is a title, a
    # search for the word).
    asked_alone = phrase_alone(m) and ends_asked(text)
    if r.ahead or not (asked_alone or (clause_says_done(m) and clause_asks(m))):
        raise FilterError("a weekend with no question about what happened")
    # Another time phrase or a year says which weekend ("am Wochenende … letztes Jahr", "am
    # Wochenende im Mai 2025"): this one's is not it, and the other phrase is read.
    others = text[: m.start()] + " " * (m.end() - m.start()) + text[m.end() :]
    if _A_YEAR.search(others) or time_window(others, t, r.week_start, r.plain)[1] is not None:
        raise FilterError("a weekend beside another time phrase")
    return _weekend(t, 0 if t.weekday() == 6 else 1)


_A_YEAR = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")


# A month notes are "from", "in", "vom", "von", "aus (dem)" or "im" ("notes from March", "notes in
# March", "Notizen aus März", "Notizen im März"): the last one however long ago, as a day notes
# are from (a note was written then), this one so far when it is this month; alone, a month's
# name without its year is words ("August" a name, "march" and "may" verbs, "Mai" a topic).
_NOTES_OF_MONTH = (
    (r"(?:(?<=notes\s)|(?<=note\s)|(?<=entries\s)|(?<=entry\s))(from|in|during)\s+", _NO_TITLE),
    (r"(?:(?<=notizen\s)|(?<=notiz\s)|(?<=einträge\s)|(?<=eintrag\s))(vom|von|aus(?:\s+dem)?|im|in)\s+", ""),
)
# Without an article a name may follow the month: "Notizen von Mai Thi", "Notizen aus August
# Müllers Ablage" are a person's (a month and its year says which it is).
_NAME_NEXT = re.compile(r"\s+(?-i:[A-ZÄÖÜ][a-zäöüß])")


def _month_gone(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    _one_month_in_its_clause(m)
    lead = m[1].lower()
    if lead in ("in", "during"):
        _month_number(m[2])  # "notes in may be lost": the verb
    if lead in ("von", "aus", "im", "in") and not (m[3] or m[4]) and _NAME_NEXT.match(m.string, m.end()):
        raise FilterError("a month's name before a name")
    if lead in _LEADS_OF_PLANS and (r.ahead or (not (m[3] or m[4]) and asks_coming(m))):
        # asked about plans ("Welche Einträge im Mai stehen an?", "Notizen aus März, was steht
        # an?"), read as "im Mai" is: the coming one
        return _named_month(t, m[2], m[3], m[4], ahead=True)
    if lead in _LEADS_OF_PLANS and not (m[3] or m[4]) and _asks_open(m.string):
        # "Which entries in May are coming up?", "Welche Einträge im Mai sind offen?": read as
        # "in May" is (a month not yet begun is none), never a year-old May
        return _named_month(t, m[2], None)
    return _named_month(t, m[2], m[3], m[4], gone=True)


_LEADS_OF_PLANS = ("in", "im", "during", "aus")
# Words of what is still to do or to come, beside those asks_ahead/asks_coming read.
_OPEN = re.compile(
    r"\b(?:coming\s+up|upcoming|pending|offen|anstehend\w*|ausstehend\w*)\b",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=8)
def _asks_open(text: str) -> bool:
    """Whether ``text`` names what is still open or coming (once per text: a long text of month
    phrases looks it up per phrase)."""
    return _OPEN.search(text) is not None


# A range of months: "from March to May", "between March and May 2025", "von März bis Mai",
# "zwischen März und Mai", "März bis Mai 2025", "March–May". A year on the last month holds for
# both unless the first has its own; without one it is the last range begun (its first month
# the last one begun: "März bis Mai" asked in December this year's, asked in April this one up to
# today; "November bis Februar" asked in January November of last year up to today), one begun
# this month too, as that month named alone is this one ("Was habe ich von Dezember bis Februar
# gemacht?" asked on December 28th is this December so far, as "im Dezember" is: the range
# reached back to last winter, and the two readings of one December disagreed). Asked about the
# agenda, the coming one; asked in the present of doing ("What am I doing from December to February?", "Was
# mache ich von Dezember bis Februar?"), the one begun whole, or none when none has begun (see
# asks_coming, as for "in March"); asked about one's duties or appointments ("What do I have to do
# between January and March?", "Welche Termine habe ich zwischen Januar und März?", see
# asks_plans), the one begun whole or the coming one, kept ahead of today as the agenda's is.
# Its first month's first day to its last month's last day.
_RANGE_TO = (
    r"(?:\s*[-–—]\s*|\s+(?:to|till|until|through|thru|bis(?:\s+(?:zum|einschließlich|inklusive))?)\s+)"
)
_RANGE_FORMS = (
    r"(between|zwischen)\s+(?:dem\s+)?"
    + _MONTH
    + _YEAR_OF
    + r"\s+(?:and|und)\s+(?:dem\s+)?"
    + _MONTH
    + _YEAR_OF,
    r"(?:(from|von|vom|in|im|during|während)\s+)?(?:de[mn]\s+)?"
    + _MONTH
    + _YEAR_OF
    + _RANGE_TO
    + _MONTH
    + _YEAR_OF,
)
# Leads that read a range wherever it stands, as "in March" is read ("between March and May" names a
# period: "Ausgaben zwischen März und Mai", "mood between October and December" ask for its notes);
# after "from"/"von" or none a range is mostly a label's ("Stromrechnung März bis Mai 2025",
# "invoice from March to May": its paper written after it), read only after note words or where
# its clause asks for the notes (see _month_range); alone it is words, as a month with its year
# alone is ("März–Mai 2025" is mostly a report's title searched for). A range "between" with its
# year inside a title ("Quartalsbericht zwischen März und Mai 2025") is read too: no word tells that
# title from a search of a thing over the period ("Ausgaben zwischen März und Mai 2025").
_RANGE_ANYWHERE = ("between", "zwischen", "in", "im", "during", "während")
# "the difference between March and May", "Vergleich zwischen März und Mai 2025": two months
# compared, not a period asked about; with a thing between ("compare my spending between March
# and May", "difference in spending between March and May", "Unterschied der Ausgaben zwischen
# März und Mai") that thing over the period, whose window holds both months.
_COMPARED = re.compile(
    r"\b(?:differences?|compar\w*|unterschied\w*|vergleich\w*|differenz\w*)\s+"
    r"(?:(?:the|a|der|die|das|den|dem|ein|einen|einem)\s+)?$",
    re.IGNORECASE,
)
_NOTE_WORDS_BEFORE = re.compile(r"(?:notes?|entries|entry|notizen|notiz|einträge|eintrag)\s+$", re.IGNORECASE)
_DAY_BEFORE = re.compile(r"(?:\d\.?|\d(?:st|nd|rd|th)|\bof)\s*$", re.IGNORECASE)


# a subject pronoun ("From March to May I ran daily"): any other word may begin a label's noun
# ("from March to May invoices", "von März bis Mai die Stromrechnung", "… meine Kontoauszüge")
_WORD_NEXT = re.compile(r"\s+(?:I|[Ww]e|ich|wir)\b")
_NOT_SPACE = re.compile(r"\S")


def _opens_its_clause(m: re.Match[str]) -> bool:
    """Whether the phrase begins its clause and a subject pronoun follows ("From March to May I
    ran daily, which shoes?"): a period said, as "since Monday" is, no label's (a label's range
    follows its noun, "Stromrechnung von März bis Mai 2025", or goes before one, "von Januar bis
    März 2025 Kontoauszüge", "from March to May invoices", "von März bis Mai die Stromrechnung")."""
    ends = _marks(m.string).ends
    before = bisect.bisect_left(ends, m.start())
    start = ends[before - 1] + 1 if before else 0
    return (
        _NOT_SPACE.search(m.string, start, m.start()) is None
        and _WORD_NEXT.match(m.string, m.end()) is not None
    )


def _month_range(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """A range of months (see _RANGE_FORMS); words when a day's number is before it ("vom 3.
    März bis Mai"), a name after a last month without its year ("zwischen März und Mai Thi"),
    another month in its clause, or, after "from"/"von" or none, it is a label or alone (see
    _RANGE_ANYWHERE)."""
    text = m.string
    lead = (m[1] or "").lower()
    if _DAY_BEFORE.search(text, max(0, m.start() - 8), m.start()):
        raise FilterError("a range from a day")
    if not (m[6] or m[7]) and _NAME_NEXT.match(text, m.end()):
        raise FilterError("a name after a month")
    _one_month_in_its_clause(m)
    if lead in ("between", "zwischen") and _COMPARED.search(text, max(0, m.start() - 40), m.start()):
        raise FilterError("two months compared")
    yearless = not (m[3] or m[4] or m[6] or m[7])
    planned = yearless and not r.ahead and asks_plans(m)
    coming = planned or (yearless and asks_coming(m))
    if lead not in _RANGE_ANYWHERE and not (
        (lead and _opens_its_clause(m))
        or (r.ahead and clause_asks(m))
        or coming
        or _NOTE_WORDS_BEFORE.search(text, max(0, m.start() - 12), m.start())
        or (clause_asks(m) and clause_says_done(m, of_a_thing=False))
        or _ASKS_FOR.search(_clause(m))
    ):
        raise FilterError("a range in a label")
    first_number, last_number = _month_number(m[2]), _month_number(m[5])
    crosses = int(last_number < first_number)  # "November bis Februar": into the next year
    first_year, last_year = _year_of(t, m[3], m[4]), _year_of(t, m[6], m[7])
    if first_year is None and last_year is None:
        if r.ahead or coming:  # the agenda or what one does then: the coming one, or the one begun
            first_year = _named_month(t, m[2], None, ahead=True)[0].year
        else:  # the last one begun, this month's too (time_window ends one in progress at today)
            first_year = t.year if first_number <= t.month else t.year - 1
    if first_year is None:
        assert last_year is not None
        first_year = last_year - crosses
    if last_year is None:
        last_year = first_year + crosses
    first, last = dt.date(first_year, first_number, 1), _month_end(dt.date(last_year, last_number, 1))
    if last < first:
        raise FilterError("a range that ends before it begins")
    if planned:
        return _Planned((first, last))
    return _Whole((first, last)) if coming else (first, last)


_DAYS: tuple[Phrase, ...] = (
    *((form + r"(?!\.?\s*\d)", _month_range) for form in _RANGE_FORMS),
    *((lead + _MONTH + _YEAR_OF + tail + _NO_RANGE, _month_gone) for lead, tail in _NOTES_OF_MONTH),
    *((_NOTES_FROM + pat, _gone(fn)) for pat, fn in _DAY_FORMS),
    (_NOTES_FROM + _NUMERIC_DAY, _gone(_numeric_day)),
    (
        r"(?:am|übers|(?:on|at)\s+the)\s+(?:wochenende|weekend)" + _OF_SOMETHING,
        _weekend_done,
    ),
)


# "since X" in the forms it is said in; "from last week" alone is "of last week" ("notes from last
# week"), so "from" needs its "onwards", or an "on" that ends the clause: "on" before a word
# names a topic or a day ("notes from last week on Kubernetes", "… on Tuesday", "from Monday on
# Zoom").
# "since the beginning of last month", "seit Anfang letzten Monats" is since last month.
# "seit Ende letzten Monats" runs from that month's first day too: more days, never fewer.
_START_OF = (
    r"(?:(?:the\s+)?(?:beginning|start|end|middle)\s+of\s+|(?:anfang|beginn|ende|mitte)\s+(?:de[sr]\s+)?)?"
)
_SINCE = r"(?:since|seit(?:\s+de[mnr])?)\s+" + _START_OF
# German "ab letzter Woche", "ab gestern" (from then on); not before a weekday, a month or a day:
# "ab Montag bin ich im Urlaub", "ab Januar gilt die neue Regel" are mostly the ones to come.
_AB = r"ab(?:\s+de[mnr])?\s+" + _START_OF
_SINCE_FORMS = ((_SINCE, ""), (r"from\s+", r"\s+(?:onwards?|on(?=\s*(?:[.,;:!?)]|$)))"))


def _since(period: PhraseWindow) -> PhraseWindow:
    """Since a period: from its first day up to today ("since last weekend" ended on Sunday),
    read as the past whatever the question ("Was habe ich seit März vor?" counts from March gone)."""
    return lambda t, m, r: (period(t, m, Reading(False, r.week_start))[0], t)


def _for(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "seit 3 Tagen", "seit einem Jahr", "since a year": from that long ago up to today. Only
    where it asks for that time's notes: its clause a question about what happened ("Was habe ich
    seit einem Jahr über Knoblauch notiert?", "What did I write about garlic since a year?") or a
    request ("Show me my notes since a week", see _ASKS_FOR), the phrase alone ("und seit 2
    Wochen?") or after keywords ("garlic seit 3 Tagen", "Meeting notes since 2 weeks"), unless
    those are a German noun and its verb ("Knoblauch wächst seit einem Jahr", see _noun_and_verb).
    Else it says how long a state lasts ("Ich wohne seit einem Jahr in Berlin, welcher Arzt war
    gut?", "Ich habe seit 3 Tagen Husten, was hilft?") and stays words: a window there listed a
    year of daily notes for a question about a doctor."""
    asked = clause_says_done(m, of_a_thing=False) and clause_asks(m)
    asked = asked or _ASKS_FOR.search(_clause(m)) is not None
    keywords = _after_keywords(m) and not _noun_and_verb(m.string, 0, m.start())
    if not (phrase_alone(m) or keywords or asked):
        raise FilterError("a duration of a state")
    return _ROLLING_START[m[2].lower()[:3]](t, _num(m[1])), t


# Words that make a text a sentence rather than keywords: a subject ("Ich wohne seit einem Jahr",
# "I live here since a year").
_SUBJECT = re.compile(r"\b(?:i|ich|we|wir|you|du|ihr|he|er|she|sie|it|es|they|man)\b", re.IGNORECASE)


def _after_keywords(m: re.Match[str]) -> bool:
    """Whether the phrase ends the text and only keywords come before it ("garlic seit 3 Tagen"):
    no punctuation, no subject."""
    before, after = m.string[: m.start()], m.string[m.end() :]
    return (
        re.fullmatch(r"[\w\s-]*", before) is not None
        and re.fullmatch(r"\s*[?!.]*\s*", after) is not None
        and _SUBJECT.search(before) is None
    )


_CLAUSE_END = re.compile(r"[.!?;:,\n]")


def _clause(m: re.Match[str]) -> str:
    """The phrase's own clause: from the punctuation before it to the one after it."""
    text = m.string
    begin = max((e.end() for e in _CLAUSE_END.finditer(text, 0, m.start())), default=0)
    end = _CLAUSE_END.search(text, m.end())
    return text[begin : end.start() if end else len(text)]


# A request, or the notes named, anywhere: "I need my notes since Monday", "Ich bin seit gestern
# krank. Zeig mir meine Notizen." ask for the period's notes, whatever is stated beside.
_ASKS_FOR = re.compile(
    r"\b(?:need|want|looking|search(?:ing)?|find|show|list|brauche|suche|möchte|hätte|zeig\w*"
    r"|notes?|notiz(?:en)?|einträge|eintrag|entries|entry)\b",
    re.IGNORECASE,
)
# A subject that is one: these pronouns are no object ("notes about it since Monday" is keywords),
# "es", "it", "sie", "you", "ihr" only where they open the clause, "mir ist", "mir geht es", and
# "es" after its verb inside the clause ("Seit Montag regnet es"; "Geht es …" opens a question).
_STATED_BY = re.compile(
    r"\b(?:i|ich|we|wir|he|er|she|du|they)\b"
    r"|^\s*(?:(?:and|und|but|aber)\s+)?(?:es|it|sie|you|ihr)\s+\w"
    r"|^\s*(?:mir|mich|uns)\s+(?:ist|geht|tut)\b"
    r"|\S\s+(?:regnet|schneit|geht|ist)\s+es\b",
    re.IGNORECASE,
)
# A relative clause about one's own doings asks for them: "Rezepte, die ich seit März koche",
# "Books that I buy since March".
_RELATIVE = re.compile(
    r"\b(?:that|which|die|der|das|den|dem|was)\s+(?:i|ich|we|wir|du|you|he|er|she|sie|they)\b",
    re.IGNORECASE,
)
# A German subject and its finite verb right before the phrase: "Knoblauch wächst seit März",
# "Die Heizung ist seit Montag kaputt", "Das Projekt läuft seit März gut". Only these verbs, in
# lower case (German nouns have a capital): keywords ("Mein Gewicht morgens seit Januar", "Die
# Rechnungen offen seit März") ask for the notes.
_NOUN_AND_VERB = re.compile(
    r"\s*(?:(?:der|die|das|ein|eine|mein|meine|unser|unsere|dein|deine|sein|seine|ihr|ihre)\s+)?"
    r"(?-i:[A-ZÄÖÜ])[\w-]*\s+(?-i:ist|sind|hat|haben|wächst|wachsen|läuft|laufen|steht|stehen|liegt"
    r"|liegen|wohnt|wohnen|lebt|leben|geht|gehen|hängt|hängen|blüht|blühen|funktioniert"
    r"|funktionieren|klappt|schläft|schlafen|arbeitet|arbeiten|dauert|fehlt|fehlen|hakt|streikt"
    r"|tropft|leckt|brennt|regnet|schneit|tut|tun|bleibt|bleiben|wackelt|juckt|schmerzt|schmerzen"
    r"|hustet|wartet|warten|reift|keimt|kränkelt|stockt|ruht|gilt|steigt|sinkt|fällt|wirkt)\s*",
    re.IGNORECASE,
)


def _noun_and_verb(text: str, begin: int, end: int) -> bool:
    """Whether ``text[begin:end]`` is a German subject and its verb (see _NOUN_AND_VERB)."""
    return _NOUN_AND_VERB.fullmatch(text, begin, end) is not None


_PRONOUN = re.compile(r"\b(?:i|ich|we|wir|you|du|ihr|he|er|she|sie|it|es|they)\b", re.IGNORECASE)
_ASKING = re.compile(
    r"\W*(?:(?:and|und)\s+)?(?:what|which|where|who|how|was|wo|wann|wer|welche[rnms]?|wie)\b", re.IGNORECASE
)


def _asks_doings(text: str) -> bool:
    """Whether ``text`` asks about someone's doings: a clause with a past form and a pronoun, in a
    question ("…, how did it go?", "… Was habe ich gegessen?", "…, was hat sie gesagt?")."""
    return any(
        says_done(clause) and _PRONOUN.search(clause) and (ends_asked(text) or _ASKING.match(clause))
        for clause in _CLAUSE_END.split(text)
    )


def _states(m: re.Match[str]) -> bool:
    """Whether the phrase's own clause states a state rather than asking for notes: a subject
    pronoun in it ("Ich bin seit gestern krank, was hilft?", "I have been sick since Monday, what
    helps?", "Mir ist seit gestern schlecht") or a German noun and its verb right before the phrase
    ("Die Heizung ist seit Montag kaputt, was tun?", see _NOUN_AND_VERB); and nothing asks for the
    notes: no request in the message (see _ASKS_FOR), no question about one's doings in it ("…, how
    did it go?", "… Was habe ich gegessen?", see _asks_doings), no question, past form or relative
    clause in the phrase's own clause ("Everything I've read since Monday", "Alles, was ich seit
    Montag gelesen habe"); "…, welcher Arzt war gut?" asks about no doings of one's own."""
    text = m.string
    if _ASKS_FOR.search(text) or clause_asks(m) or _asks_doings(text):
        return False
    begin = max((e.end() for e in _CLAUSE_END.finditer(text, 0, m.start())), default=0)
    clause = _clause(m)
    if says_done(clause) or _RELATIVE.search(clause):
        return False
    return _STATED_BY.search(clause) is not None or _noun_and_verb(text, begin, m.start())


def _unless_a_state(period: PhraseWindow) -> PhraseWindow:
    """A "since" phrase's window, unless its clause states a state (see _states): words then, as
    a duration of a state is (see _for); its window listed the period's notes for a question
    about a cough."""

    def window(t: dt.date, m: re.Match[str], r: Reading) -> Window:
        if _states(m):  # the period inside it is no window either ("seit gestern krank")
            raise _LoosePhraseError("since a point, stating a state")
        return period(t, m, r)

    return window


# A duration goes on ("seit einem Jahr und drei Monaten", "since a year and a half"): cut short
# at its first unit it was a shorter window; words. Causal "since" before a verb ("Since a year
# has twelve months, …", "since a week is too short for …") is no time.
_MORE = (
    r"(?!\s+(?:und|and)\s+(?:a\s+half\b|(?:einem|einer|einen|eine|ein)\s+halb|einhalb\b|(?:"
    + _NUM[1:]
    + r"\s))"
)
_VERB_EN = (
    r"(?!\s+(?:has|have|had|is|are|was|were|passed|went|goes|gone|will|would|can|could|should|may|"
    r"might|must|seems?|feels?|makes?|means?)\b)"
)
# The English article belongs to the English lead only ("seit a Jahr" is no German).
_FOR_FORMS = (
    (r"seit\s+" + _NUM + r"\s+" + _UNITS_DE + _MORE, ""),
    (r"since\s+(an?|" + _NUM[1:] + r"\s+" + _UNITS_EN + _MORE, _VERB_EN),
)


_THIS: dict[str, Callable[[dt.date, Reading], Window]] = {
    "wee": lambda t, r: _week(t, 0, r.week_start),
    "woc": lambda t, r: _week(t, 0, r.week_start),
    "mon": lambda t, r: _month(t, 0),
    "yea": lambda t, r: _year(t, 0),
    "jah": lambda t, r: _year(t, 0),
}


# Points that are no period of their own: "since Monday" (the last Monday), "since 2026-11-20";
# and German "seit 3 Tagen" / "seit 2 Wochen" / "seit einem Jahr", a duration (for three days),
# not a point; "since a year", "since 2 months" as German speakers write it in English.
_SINCE_ONLY: tuple[Phrase, ...] = (
    *(
        (lead + _WD + tail, lambda t, m, r: (_last_weekday(t, _weekday_number(m[1])), t))
        for lead, tail in _SINCE_FORMS
    ),
    *(
        (lead + _ISO_DAY + tail, lambda t, m, r: (parse_day(m[1], t, name="since"), t))
        for lead, tail in (*_SINCE_FORMS, (_AB, ""))
    ),
    *((form + _OF_SOMETHING + verb, _for) for form, verb in _FOR_FORMS),
    # since a month by its name, or a day of one ("seit dem 3. Dezember", "since December 3rd")
    *(
        (
            lead + _MONTH + _YEAR_OF + tail + _NO_RANGE,
            lambda t, m, r: (_named_month(t, m[1], m[2], m[3])[0], t),  # since: never ahead
        )
        for lead, tail in _SINCE_FORMS
    ),
    *((lead + pat + tail, _since(fn)) for pat, fn in _DAY_FORMS for lead, tail in _SINCE_FORMS),
    (r"seit\s+dem\s+" + _NUMERIC_DAY, _since(_numeric_day)),
    # "since the start of the year", "seit Anfang des Monats", "seit Jahresbeginn": this one's
    *(
        (lead + pat, lambda t, m, r: (_THIS[m[1].lower()[:3]](t, r)[0], t))
        for lead in (r"(?:since|seit)\s+",)
        for pat in (
            r"(?:the\s+)?(?:beginning|start)\s+of\s+(?:the|this)\s+(week|month|year)(?!\s+\d)",
            r"(?:anfang|beginn)\s+(?:de[sr]|dieser|dieses)\s+(woche|monats|jahres)",
            r"(woche|monat|jahr)(?:e?s|n)?(?:beginn|anfang)",
        )
    ),
)


def _month_from(t: dt.date, m: re.Match[str], r: Reading) -> Window:
    """ "ab März 2025": from that month on ("ab März" without its year is mostly the one to come).
    A lower-case word after it is mostly a verb, a rule's start: "ab März 2025 gilt der neue
    Tarif" is words, as on a note written before it."""
    _one_month_in_its_clause(m)
    if _LOWER_NEXT.match(m.string, m.end()):
        raise FilterError("a rule from a month on")
    return _named_month(t, m[1], m[2], m[3])[0], t


_LOWER_NEXT = re.compile(r"\s+(?-i:[a-zäöüß])")
_AB_MONTH: Phrase = (_AB + _MONTH + _YEAR_SAID + _NO_RANGE, _unless_a_state(_month_from))
# A month read by a preposition before it, "last March" and a range of months give way to any
# other time phrase in the message ("Zu den Notizen aus dem März 2025: was habe ich gestern
# notiert?" asks about yesterday).
_GIVING_WAY = frozenset((_month_gone, _AB_MONTH[1], _last_named_month, _month_range))


# (pattern, window from today and the match). Of the phrases in a text the first counts (by
# position, the longest at that position: "since last week" before "last week"); see time_window.
def _need(pat: str) -> str | None:
    """What a text must hold for the pattern to match: a month's name, a digit, or nothing known."""
    return "month" if _MONTH in pat else "digit" if _NUMERIC_DAY in pat else None


_PHRASES: tuple[tuple[re.Pattern[str], PhraseWindow, str | None], ...] = tuple(
    # "today's date" names a thing, not a time: a possessive is no phrase.
    (re.compile(r"(?<!\w)(?:" + pat + r")(?![\w'’])", re.IGNORECASE), fn, _need(pat))
    for pat, fn in (
        *((pat, fn if fn is _for else _unless_a_state(fn)) for pat, fn in _SINCE_ONLY),
        *(
            (lead + "(?:" + pat + ")" + tail, _unless_a_state(_since(fn)))
            for pat, fn in _PERIODS
            for lead, tail in (*_SINCE_FORMS, (_AB, ""))
        ),
        _AB_MONTH,
        *_PERIODS,
        *_DAYS,
    )
)
# One pass tells which patterns can match at all (half of them name a month or a numeral day).
_ANY_MONTH = re.compile(r"(?<!\w)" + _MONTH + r"(?!\w)", re.IGNORECASE)
_ANY_DIGIT = re.compile(r"\d")


# A determiner or a possessive before "last week" makes it a week of something else ("the last
# week of the project", "die letzte Woche des Urlaubs", "my last year at school", "our last week in
# Berlin"), not the one before this one ("in the last year" and "im letzten Jahr" are phrases of
# their own, matched from "in" on, see _PERIODS). Without one, "letzte Woche der Arzt" and "last
# week before the deadline" are the week before this one.
_DETERMINED = re.compile(
    r"(?:^|[^\w])(?:the|my|our|his|her|their|your|its|every|each|die|der|dem|den|des|das|im|"
    r"jede[rnms]?|mein(?:e[rnms]?)?|unser(?:e[rnms]?)?|seine[rnms]?|ihre[rnms]?|dein(?:e[rnms]?)?|"
    r"euer|eure[rnms]?)\s+$",
    re.IGNORECASE,
)


_LOOKBEHIND = 40  # characters: the longest determiner, its spaces and the character before it


# Weekday names (plurals and "montags" too) and weekends: a second one makes a range, a list or a
# habit of the first ("on Monday or Tuesday", "on Monday, Tue and Wed"). Quotes and code marks
# hold someone's words or a title ("Never on Sunday", `on Monday`), not the day asked about.
_ANY_WEEKDAY = re.compile(
    r"(?<!\w)(?:" + _WD[1:-1] + r"|tues?|wed|thu(?:rs?)?|fri|weekend|wochenende)s?(?!\w)", re.IGNORECASE
)
_QUOTED = re.compile(r"[\"`“”„«»‹›]|(?<!\w)['‘’]|['‘’](?!\w)")
_WEEKDAY_PHRASES = tuple(
    (re.compile(r"(?<!\w)(?:" + pat + r")(?![\w'’])", re.IGNORECASE), fn) for pat, fn in _WEEKDAY_DAYS
)


def _weekday_alone(text: str, today: dt.date, reading: Reading) -> tuple[re.Match[str], Window] | None:
    """A weekday after "on"/"am" or notes "from"/"vom" it, read only as the message's one time
    phrase (time_window calls it when no other was said: "on Monday two weeks ago" is the week
    two weeks ago), its one weekday, and outside quotes; one pass over the text for each test."""
    if len(_ANY_WEEKDAY.findall(text)) != 1 or _QUOTED.search(text):
        return None
    for pattern, window in _WEEKDAY_PHRASES:
        m = pattern.search(text)
        if m is None:
            continue
        try:
            days = window(today, m, reading)
        except FilterError:
            return None
        if _DETERMINED.search(text, max(0, m.start() - _LOOKBEHIND), m.start()):
            return None
        return m, days
    return None


# Two time phrases joined by a conjunction, nothing else between them ("last March and last week").
_JOIN = r"\s*,?\s*(?:and|und|or|oder|sowie|plus|&|\+)(?:\s+(?:also|auch))?\s*"
_JOINING = re.compile(_JOIN, re.IGNORECASE)
# A month joined to the phrase after it: a month before "and" is no phrase of its own (see
# _NO_RANGE: "März und April" is a list), but "Notizen aus März und gestern" asks for both. Only
# a month after a preposition or "last"/"letzten": "mit Mai und gestern" names a person.
_MONTH_LEAD = (
    r"(?:(?:im|in|aus|vom|von|from|seit|since|during|während|ab)\s+(?:de[mnr]\s+|the\s+)?"
    r"(?:(?:letzten|vergangenen|last|past)\s+)?|(?:last|letzten|letztem|vergangenen)\s+)"
)
_MONTH_AND = re.compile(_MONTH_LEAD + _MONTH + r"(?:,?\s+(?:19|20)\d\d)?" + _JOIN + r"$", re.IGNORECASE)


def _month_joined_before(text: str, start: int) -> bool:
    joined = _MONTH_AND.search(text, max(0, start - 56), start)
    if joined is None or not joined.group(1)[0].isupper():  # "may" and "march" mostly verbs
        return False
    return joined.start() == 0 or not text[joined.start() - 1].isalnum()


def _joined(text: str, one: re.Match[str], other: re.Match[str]) -> bool:
    first, second = sorted((one, other), key=lambda m: m.start())
    return _JOINING.fullmatch(text, first.end(), second.start()) is not None


_Found = tuple[tuple[int, int], re.Match[str], Window, bool]


def _chosen(text: str, kept: list[_Found]) -> _Found | None:
    """The first phrase found (by position, the longest at it); a month read by its preposition
    (giving way) yields to any other phrase outside it ("notes from March … yesterday" asks
    about yesterday); two periods joined by nothing but and/or (a comma), either
    of them giving way, are none ("last March and last week", "Notizen aus März und gestern"):
    either window alone hides the other's notes."""
    if not kept:
        return None
    best = min(kept, key=lambda f: f[0])
    a, b = best[1].span()
    outside = [f for f in kept if f[1].end() <= a or f[1].start() >= b]
    if _month_joined_before(text, a) or any(
        (best[3] or f[3]) and _joined(text, best[1], f[1]) for f in outside
    ):
        return None
    if best[3]:  # a month read by its preposition gives way to any phrase outside it
        others = [f for f in outside if not f[3]]
        best = min(others, key=lambda f: f[0]) if others else best
    return best


# Characters before the matches of one pattern tried in a text, summed, before it is given up:
# reading a match looks at the text before it (where its clause and sentence begin), so a long
# text of look-alikes ("Stromrechnung von März bis Mai 2025. " again and again) took time by the
# square of its length. A count of tries dropped a real phrase after a few dozen look-alikes; this
# gives a pasted text of a few hundred sentences all its matches.
_SCAN_BUDGET = 1_000_000


def time_window(
    text: str,
    today: dt.date,
    week_start: int = 0,
    plain: Callable[[str, str], bool] | None = None,
    *,
    ahead: bool = False,
) -> tuple[str, Window | None, str | None]:
    """The first time phrase of ``text`` (by position; at one position the longest: "since last
    week" before "last week", "in November last year" before "last year") as a window of days;
    the text without it; the phrase. A question about the agenda (``asks_ahead``) reads the
    coming day or month and whole periods; any other ends its window at today and names no day
    to come. ``week_start`` is the weekday weeks begin on (0 Monday, 6 Sunday); ``plain`` tells
    whether a message asks only what happened in its phrase's period (see Reading.plain);
    ``ahead`` reads it as the agenda whatever the text says (a follow-up, "und am Wochenende?",
    of a question about plans)."""
    reading = Reading(ahead or asks_ahead(text), week_start, plain=plain)
    found: list[_Found] = []
    loose: list[tuple[int, int]] = []  # loose phrases kept as words: no phrase inside them counts
    held = {"month": _ANY_MONTH.search(text) is not None, "digit": _ANY_DIGIT.search(text) is not None}
    said = False  # any time phrase, read or not: a weekday alone is then words (see _weekday_alone)
    for pattern, window, need in _PHRASES:
        if need is not None and not held[need]:
            continue
        scanned = 0
        for m in pattern.finditer(text):
            if scanned > _SCAN_BUDGET:
                break  # a long text of many look-alikes: each try reads the text before it
            scanned += m.start()
            said = True
            try:
                days = window(today, m, reading)
            except _LoosePhraseError:
                loose.append(m.span())
                continue
            except FilterError:
                continue  # prose naming no day ("since 2026-02-30"): words, not a window
            if not reading.ahead:
                if not isinstance(days, _Whole):
                    days = (days[0], min(days[1], today))
                if days[0] > today and not isinstance(days, _Planned):
                    continue  # a day to come ("seit 2027-01-01 gilt …"): words, not a window
            if days[0] > days[1]:
                continue
            # the few characters before the phrase: from the text's start, a text of skipped
            # phrases ("the last week" again and again) took time by the square of its length
            if _DETERMINED.search(text, max(0, m.start() - _LOOKBEHIND), m.start()):
                continue  # "the last week of the project", "my last year at school": no period
            found.append(((m.start(), m.start() - m.end()), m, days, window in _GIVING_WAY))
            break  # this pattern's first phrase in the text is the one to compare
    kept = [f for f in found if not any(a <= f[1].start() and f[1].end() <= b for a, b in loose)]
    best = _chosen(text, kept)
    if best is None and not said:
        alone = _weekday_alone(text, today, reading)
        if alone is not None:
            best = ((0, 0), *alone, False)
    if best is None:
        return text, None, None
    _, m, days, _ = best
    rest = " ".join((text[: m.start()] + " " + text[m.end() :]).split())
    return rest, days, m.group(0)
