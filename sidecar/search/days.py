"""Days (pure): the time phrases of a question ("last week", "seit Montag", "am 4.12.") read as
a window of days. ``time_window`` finds a text's first phrase among the tables of ``day_phrases``
(periods, days, weekdays alone) and ``day_since`` (since a point, a duration up to today) and of
this module (the months notes are from, ranges of months, the weekend just gone). Imports nothing
of the project but ``words``, ``tense`` and the ``day_*`` modules (``day_calendar``, ``day_phrases``,
``day_since``)."""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import re
from collections.abc import Callable

from sidecar.search.day_calendar import (
    _MONTH,
    _NO_RANGE,
    _NO_TITLE,
    _OF_SOMETHING,
    _WD,
    _YEAR_OF,
    FilterError,
    Phrase,
    PhraseWindow,
    Reading,
    Window,
    _month_end,
    _month_number,
    _named_month,
    _Planned,
    _Whole,
    _year_of,
)
from sidecar.search.day_phrases import (
    _DAY_FORMS,
    _NOTES_FROM,
    _NUMERIC_DAY,
    _PERIODS,
    _WEEKDAY_DAYS,
    _gone,
    _last_named_month,
    _LoosePhraseError,
    _marks,
    _numeric_day,
    _one_month_in_its_clause,
    _weekend,
)
from sidecar.search.day_since import (
    _AB,
    _AB_MONTH,
    _ASKS_FOR,
    _SINCE_FORMS,
    _SINCE_ONLY,
    _clause,
    _for,
    _since,
    _unless_a_state,
)
from sidecar.search.tense import (
    asks_ahead,
    asks_coming,
    asks_plans,
    clause_asks,
    clause_says_done,
    ends_asked,
    phrase_alone,
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
# today; "November bis Februar" asked in January November of last year up to today), but not one
# begun this month: its few days are no range anyone asks about, so the last one whole ("What did
# I do from December to February?", "notes from December to February" asked on December 7th:
# December to February a year before, not December 1st to 7th). Asked about the agenda, the
# coming one; asked in the present of doing ("What am I doing from December to February?", "Was
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
        else:  # the last one begun (time_window ends one in progress at today), not this month
            first_year = t.year if first_number < t.month else t.year - 1
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
