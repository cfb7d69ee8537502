"""Time phrases that name a day or a period (pure): the table of periods ("last week", "vor 2
Wochen", "in the last 3 days", "last March", "in March", "am 4.12."), the weekdays said alone
("am Donnerstag"), and where a phrase's clause ends and which month names stand in it (two months
in one clause are no window). Imports ``day_calendar``, ``tense`` and ``words``."""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import re
from dataclasses import dataclass, replace

from sidecar.search.day_calendar import (
    _ISO_DAY,
    _LAST_DE,
    _LAST_EN,
    _LAST_MONTH,
    _LAST_WEEK,
    _LAST_YEAR,
    _MONTH,
    _NO_RANGE,
    _NO_TITLE,
    _NUM,
    _OF_SOMETHING,
    _ON_WD,
    _THIS_WEEK,
    _TODAY,
    _UNITS_DE,
    _UNITS_EN,
    _WD,
    _YEAR_OF,
    FilterError,
    Phrase,
    PhraseWindow,
    Reading,
    Window,
    _month,
    _month_end,
    _month_number,
    _months_back,
    _named_day,
    _named_month,
    _num,
    _one,
    _rolling,
    _week,
    _weekday_number,
    _weekday_of_week,
    _year,
    _year_of,
    parse_day,
)
from sidecar.search.tense import (
    asks_coming,
    clause_says_done,
    phrase_alone,
    says_nowadays,
)

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
