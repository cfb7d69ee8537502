"""Time phrases as date windows (pure): every period the parser knows, alone and after each form of
"since", with a fixed today; the rolling "in the last year" family; a year of something else; small
talk with a time word, which recall leaves alone."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from sidecar.search import day_calendar, day_phrases, day_since, days, query
from sidecar.search.query import split_filters

TODAY = dt.date(2026, 12, 2)  # a Wednesday
_TODAY = TODAY.isoformat()

# Each period phrase the parser knows, with the window it names on TODAY.
PERIODS = [
    ("in the last 3 days", "2026-11-30", _TODAY),
    ("in den letzten drei Tagen", "2026-11-30", _TODAY),
    ("the past 2 weeks", "2026-11-19", _TODAY),
    ("in den letzten 2 Wochen", "2026-11-19", _TODAY),
    ("in the last 3 months", "2026-09-03", _TODAY),
    ("in den letzten 12 Monaten", "2025-12-03", _TODAY),
    ("in the last year", "2025-12-03", _TODAY),
    ("in the past year", "2025-12-03", _TODAY),
    ("over the past week", "2026-11-26", _TODAY),
    ("in the last month", "2026-11-03", _TODAY),
    ("im letzten Jahr", "2025-01-01", "2025-12-31"),
    ("in der letzten Woche", "2026-11-23", "2026-11-29"),
    ("3 days ago", "2026-11-29", "2026-11-29"),
    ("vor drei Tagen", "2026-11-29", "2026-11-29"),
    ("2 weeks ago", "2026-11-16", "2026-11-22"),
    ("vor zwei Wochen", "2026-11-16", "2026-11-22"),
    ("a month ago", "2026-11-01", "2026-11-30"),
    ("vor einem Monat", "2026-11-01", "2026-11-30"),
    ("3 months ago", "2026-09-01", "2026-09-30"),
    ("a year ago", "2025-11-29", "2025-12-05"),  # the week around that day
    ("vor einem Jahr", "2025-11-29", "2025-12-05"),
    ("vor zwei Jahren", "2024-11-29", "2024-12-05"),
    ("heute vor einem Jahr", "2025-12-02", "2025-12-02"),  # that day
    ("today a year ago", "2025-12-02", "2025-12-02"),
    ("a year ago today", "2025-12-02", "2025-12-02"),
    ("vor drei Monaten", "2026-09-01", "2026-09-30"),
    ("Tuesday of last week", "2026-11-24", "2026-11-24"),
    ("Montag letzter Woche", "2026-11-23", "2026-11-23"),
    ("letzte Woche Dienstag", "2026-11-24", "2026-11-24"),
    ("Monday this week", "2026-11-30", "2026-11-30"),
    ("diese Woche am Montag", "2026-11-30", "2026-11-30"),
    ("the week before last", "2026-11-16", "2026-11-22"),
    ("vorletzter Woche", "2026-11-16", "2026-11-22"),
    ("this week", "2026-11-30", _TODAY),
    ("last week", "2026-11-23", "2026-11-29"),
    ("letzter Woche", "2026-11-23", "2026-11-29"),
    ("last weekend", "2026-11-28", "2026-11-29"),
    ("letztem Wochenende", "2026-11-28", "2026-11-29"),
    ("this month", "2026-12-01", _TODAY),
    ("last month", "2026-11-01", "2026-11-30"),
    ("last March", "2026-03-01", "2026-03-31"),
    ("letzten März", "2026-03-01", "2026-03-31"),
    ("this year", "2026-01-01", _TODAY),
    ("last year", "2025-01-01", "2025-12-31"),
    ("the day before yesterday", "2026-11-30", "2026-11-30"),
    ("vorgestern", "2026-11-30", "2026-11-30"),
    ("yesterday", "2026-12-01", "2026-12-01"),
    ("gestern", "2026-12-01", "2026-12-01"),
    ("today", _TODAY, _TODAY),
    ("heute", _TODAY, _TODAY),
    ("this morning", _TODAY, _TODAY),
    ("last Tuesday", "2026-12-01", "2026-12-01"),
    ("letzten Mittwoch", "2026-11-25", "2026-11-25"),  # today is a Wednesday: the one before
    ("over the weekend", "2026-11-28", "2026-11-29"),
    ("in November", "2026-11-01", "2026-11-30"),
    ("im Mai 2025", "2025-05-01", "2025-05-31"),
    ("on December 1", "2026-12-01", "2026-12-01"),
    ("on 1st December 2025", "2025-12-01", "2025-12-01"),
    ("am 1. Dezember", "2026-12-01", "2026-12-01"),
    ("on the 30th of November", "2026-11-30", "2026-11-30"),
    ("am 30.11", "2026-11-30", "2026-11-30"),
    ("am 30.11.2025", "2025-11-30", "2025-11-30"),
    ("on 2026-11-25", "2026-11-25", "2026-11-25"),
]
SINCE_FORMS = ["since {}", "seit {}", "seit dem {}", "from {} on"]


def test_the_table_holds_every_period_the_parser_knows() -> None:
    """Each period pattern is said by a phrase of the table (a new phrase gets its since forms
    checked too)."""
    for pattern, _ in day_phrases._PERIODS:
        rx = re.compile(pattern, re.IGNORECASE)
        assert any(rx.fullmatch(phrase) for phrase, _, _ in PERIODS), pattern


@pytest.mark.parametrize(("phrase", "since", "until"), PERIODS)
def test_each_period_alone(phrase: str, since: str, until: str) -> None:
    """The period phrase alone is its window."""
    rest, f = split_filters(phrase, TODAY)
    assert (f.since, f.until, f.phrase, rest) == (since, until, phrase, "")


@pytest.mark.parametrize("form", SINCE_FORMS)
@pytest.mark.parametrize(("phrase", "since", "until"), PERIODS)
def test_since_a_period_runs_from_its_start_to_today(form: str, phrase: str, since: str, until: str) -> None:
    """'since X' starts on X's first day and runs up to today: 'seit Montag letzter Woche' started
    on this week's Monday, 'since last weekend' and 'seit vorletzter Woche' ended with X."""
    said = form.format(phrase)
    rest, f = split_filters(f"garlic {said}", TODAY)
    assert (f.since, f.until, f.phrase, rest) == (since, _TODAY, said, "garlic"), said


@pytest.mark.parametrize(
    ("said", "since"),
    [
        ("since Monday", "2026-11-30"),
        ("seit Montag", "2026-11-30"),
        ("seit dem Montag", "2026-11-30"),
        ("from Monday on", "2026-11-30"),
        ("since Wednesday", _TODAY),
        ("since 2026-11-20", "2026-11-20"),
        ("seit dem 2026-11-20", "2026-11-20"),
        ("from 2026-11-20 onwards", "2026-11-20"),
        ("seit 3 Tagen", "2026-11-29"),  # a duration: for three days
        ("seit zwei Wochen", "2026-11-18"),
        # months and years are durations too (they were words), and in English as German write it
        ("seit einem Jahr", "2025-12-02"),
        ("seit 2 Jahren", "2024-12-02"),
        ("seit drei Monaten", "2026-09-02"),
        ("seit einem Monat", "2026-11-02"),
        ("seit einer Woche", "2026-11-25"),
        ("since a year", "2025-12-02"),
        ("since 2 months", "2026-10-02"),
        ("since one week", "2026-11-25"),
    ],
)
def test_since_a_day(said: str, since: str) -> None:
    """Points that are no period of their own: a weekday (its last one), a date, a duration."""
    rest, f = split_filters(f"garlic {said}", TODAY)
    assert (f.since, f.until, f.phrase, rest) == (since, _TODAY, said, "garlic"), said


@pytest.mark.parametrize(
    "said",
    [
        # a state that lasts, beside a question about something else
        "Ich wohne seit einem Jahr in Berlin, welcher Arzt war gut?",
        "Ich habe seit 3 Tagen Husten, was hilft?",
        "Ich bin seit zwei Wochen krank",
        "I live here since a year",
        # causal "since" before its verb
        "Since a year has twelve months, how many weeks are there?",
        "since a week is too short for Lyon, what did I note about garlic?",
        "What did I write since a year has passed?",
        # a duration that goes on: cut short at its first unit it was a shorter window
        "seit einem Jahr und drei Monaten",
        "seit 2 Jahren und einem halben Monat",
        "since a year and a half",
        "since 2 months and 3 weeks",
        # the English article in the German form
        "seit a Jahr",
        "seit an Jahr",
    ],
)
def test_a_duration_of_a_state_stays_words(said: str) -> None:
    """'seit einem Jahr', 'since a year' are a window only where they ask for that time's notes:
    a state's duration ('Ich wohne seit einem Jahr in Berlin, welcher Arzt war gut?') narrowed
    the question about a doctor to a year (recall listed the year's daily notes instead)."""
    rest, f = split_filters(said, TODAY)
    assert (f.since, f.phrase, rest) == (None, None, said)


@pytest.mark.parametrize(
    ("said", "since", "rest"),
    [
        ("Was habe ich seit einem Jahr notiert?", "2025-12-02", "Was habe ich notiert?"),
        ("What did I do since 2 months?", "2026-10-02", "What did I do ?"),
        ("und seit einem Jahr?", "2025-12-02", "und ?"),
        ("Knoblauch seit drei Tagen", "2026-11-29", "Knoblauch"),
        ("seit einem Jahr", "2025-12-02", ""),
    ],
)
def test_a_duration_asked_about_is_a_window(said: str, since: str, rest: str) -> None:
    """A question about what happened in it, the phrase alone or after keywords: its window."""
    got, f = split_filters(said, TODAY)
    assert (f.since, f.until, got) == (since, _TODAY, rest)


def test_from_without_on_is_of_the_period() -> None:
    """'notes from last week' are last week's notes, not those since."""
    rest, f = split_filters("daily notes from last week", TODAY)
    assert (f.since, f.until, rest) == ("2026-11-23", "2026-11-29", "daily notes from")


@pytest.mark.parametrize(
    "said",
    [
        "the last year of the project",
        "my last year at school",
        "in my last year of the Bachelor",
        "in the last year of my thesis",
        "in the last week before the move",
        "im letzten Monat der Schwangerschaft",
        "im letzten Jahr vor der Rente",
        "in der letzten Woche des Urlaubs",
        "the last 6 months of my thesis",
        "the last 5 years of the Roman Republic",
        "in the last 2 years of the war",
        "in den letzten 3 Monaten der Schwangerschaft",
        "in den letzten zwei Jahren des Studiums",
        "im letzten Jahr meines Studiums",
    ],
)
def test_a_last_year_of_something_stays_words(said: str) -> None:
    """A year (week, month) of something else is no period, with 'in' too."""
    rest, f = split_filters(said, TODAY)
    assert (f.since, f.phrase, rest) == (None, None, said)


@pytest.mark.parametrize(
    ("said", "since", "until"),
    [
        ("Wann habe ich im letzten Monat meine Mutter besucht?", "2026-11-01", "2026-11-30"),
        ("Ich habe in der letzten Woche unsere Wohnung gestrichen", "2026-11-23", "2026-11-29"),
        ("im letzten Jahr ihre Hochzeit", "2025-01-01", "2025-12-31"),
    ],
)
def test_an_object_after_im_letzten_leaves_the_period(said: str, since: str, until: str) -> None:
    """'meine', 'unsere', 'ihre' begin the sentence's object, not 'of my': only the genitive
    ('meines Studiums') makes a month of something else (they were words)."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, until), said


@pytest.mark.parametrize(
    ("said", "since"),
    [("Was habe ich die letzten 3 Monate gemacht?", "2026-09-03"), ("die letzten 2 Wochen", "2026-11-19")],
)
def test_die_letzten_n_is_the_rolling_window(said: str, since: str) -> None:
    """'die letzten 3 Monate', the common German form, is 'in den letzten 3 Monaten' (the 'die'
    before it made it words, as a determiner); 'meine letzten 3 Jahre' stays words."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, _TODAY), said
    assert split_filters("meine letzten 3 Jahre", TODAY)[1].since is None


@pytest.mark.parametrize(
    "said",
    [
        "past year review",
        "Past Year Review template",
        "past month view in the calendar plugin",
        "past week sprint retro",
        "this past year",
        "the past year review",
    ],
)
def test_past_without_its_preposition_is_words(said: str) -> None:
    """'past year' without 'in/over/during/within/for the' is as often a name ('past year review',
    'the past month view'): words (it was the last twelve months, and search answered with the
    period's notes instead of the note named so)."""
    rest, f = split_filters(said, TODAY)
    assert (f.since, f.phrase, rest) == (None, None, said)


@pytest.mark.parametrize(
    ("said", "since"),
    [
        ("what did I do the past week?", "2026-11-26"),
        ("the past month, what changed", "2026-11-03"),
        ("for the past year", "2025-12-03"),
        ("within the last month", "2026-11-03"),
        ("garlic throughout the past year", "2025-12-03"),
    ],
)
def test_the_past_week_ending_a_clause_or_after_its_preposition_is_the_period(said: str, since: str) -> None:
    """'the past week' as a time of its own, and 'for the past year', stay rolling windows."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, _TODAY), said


@pytest.mark.parametrize(
    ("said", "since", "until"),
    [
        ("notes from last week on Kubernetes", "2026-11-23", "2026-11-29"),
        ("meeting notes from last month on pricing", "2026-11-01", "2026-11-30"),
        ("notes from last week on Tuesday", "2026-11-24", "2026-11-24"),
        ("my notes from yesterday on the budget", "2026-12-01", "2026-12-01"),
        ("recurring meetings from Monday on Zoom", None, None),
        ("from Monday on, the garlic", "2026-11-30", _TODAY),
        ("from last week onwards garlic", "2026-11-23", _TODAY),
    ],
)
def test_from_a_period_on_a_topic_is_the_period(said: str, since: str | None, until: str | None) -> None:
    """'from X on' is 'since X' only when 'on' ends the clause ('onwards' always): 'on' before a
    word names a topic or a day ('notes from last week on Kubernetes' ran up to today)."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, until), said


def test_the_rolling_family_is_consistent() -> None:
    """'in the last year' is 'in the last 12 months' is 'in the past year', as 'in the last week'
    is 'in the last 7 days'; German 'im letzten Jahr' is 'letztes Jahr' (the calendar year)."""

    def window(said: str) -> tuple[str | None, str | None]:
        f = split_filters(said, TODAY)[1]
        return f.since, f.until

    assert window("in the last year") == window("in the last 12 months") == window("in the past year")
    assert window("in den letzten 12 Monaten") == window("in the last year")
    assert window("in the last week") == window("in the last 7 days") == window("in the past week")
    assert window("in the last month") == window("in the last 1 month")
    assert window("im letzten Jahr") == window("letztes Jahr")
    assert window("im letzten Monat") == window("letzten Monat")
    # A month back from the 31st is the shorter month's last day: the month after it is March.
    assert split_filters("in the last month", dt.date(2026, 3, 31))[1].since == "2026-03-01"


@pytest.mark.parametrize(
    ("today", "said", "since"),
    [
        (TODAY, "in the last week", "2026-11-26"),  # seven days, today the seventh
        (TODAY, "in the last 3 days", "2026-11-30"),
        (TODAY, "in den letzten 2 Wochen", "2026-11-19"),
        (dt.date(2026, 12, 5), "in the last month", "2026-11-06"),
        (dt.date(2027, 1, 1), "in the last month", "2026-12-02"),
        (dt.date(2026, 3, 31), "in the last 3 months", "2026-01-01"),
        (dt.date(2026, 12, 5), "in the past year", "2025-12-06"),  # 365 days
        (dt.date(2028, 2, 29), "in the past year", "2027-03-01"),  # 366 days, Feb 29 counted
    ],
)
def test_a_rolling_window_is_as_long_as_it_says(today: dt.date, said: str, since: str) -> None:
    """'in the last week' is seven days, today counted (it was eight: from last Wednesday to this
    one); the family as one: days, weeks, months and years end today and are that long."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (since, today.isoformat()), said


@pytest.mark.parametrize(
    ("message", "small_talk"),
    [
        ("have a nice day today", True),
        ("see you tomorrow", True),
        ("bis morgen", True),
        ("schönes Wochenende", True),
        ("good morning, how was your weekend?", True),
        ("Viel Spaß heute!", True),
        ("what did I do today?", False),  # about the person's own doings
        ("was habe ich gestern gemacht?", False),
        ("and yesterday?", False),  # a follow-up asks what the turn before asked
        ("weekend plans", False),  # a topic besides the time word
        ("thanks for the help today with the backup", False),
        ("Frohes neues Jahr", False),  # "frohes", "neues" are listed neither: left to recall's gates
        ("good luck", False),
        ("how are you today?", True),  # someone addressed
        ("gute Nacht, bis später", True),
        ("schönen Feierabend!", True),
        # a question about one's own agenda or day, addressing no one
        ("what do I have today?", False),
        ("do I have anything today?", False),
        ("what have I got tomorrow?", False),
        ("how was my weekend?", False),
        ("was habe ich morgen?", False),
        ("was war gestern?", False),
        ("what was yesterday?", False),
        # time words that may be a topic, with no greeting or wish ("schon" is not "schön")
        ("rest day", False),
        ("sleep tonight", False),
        ("day of the week", False),
        ("Feierabend", False),
        ("Monat", False),
        ("schon morgen?", False),
    ],
)
def test_small_talk_with_a_time_word(message: str, small_talk: bool) -> None:
    """Small talk is a message of time words and greetings or wishes alone; a topic, a question
    about one's own doings or a follow-up is not."""
    assert query.is_small_talk(message) is small_talk


@pytest.mark.parametrize(
    ("said", "since", "until"),
    [
        # a period's beginning is the period's first day
        ("since the beginning of last month", "2026-11-01", _TODAY),
        ("seit Anfang letzten Monats", "2026-11-01", _TODAY),
        ("seit Anfang des letzten Monats", "2026-11-01", _TODAY),
        ("since the start of the year", "2026-01-01", _TODAY),
        ("seit Anfang des Jahres", "2026-01-01", _TODAY),
        ("seit Jahresbeginn", "2026-01-01", _TODAY),
        ("seit Monatsanfang", "2026-12-01", _TODAY),
        ("seit Wochenbeginn", "2026-11-30", _TODAY),
        ("seit Anfang November", "2026-11-01", _TODAY),
        # German "ab": from then on
        ("ab letzter Woche", "2026-11-23", _TODAY),
        ("ab gestern", "2026-12-01", _TODAY),
        ("ab dem 2026-11-20", "2026-11-20", _TODAY),
        # since a named month or day
        ("since November", "2026-11-01", _TODAY),
        ("seit März", "2026-03-01", _TODAY),
        ("since December 1st", "2026-12-01", _TODAY),
        ("seit dem 30.11.", "2026-11-30", _TODAY),
        ("since last Monday", "2026-11-30", _TODAY),
        ("seit letztem Dienstag", "2026-12-01", _TODAY),
    ],
)
def test_since_a_beginning_a_named_month_or_day_and_ab(said: str, since: str, until: str) -> None:
    """'since the beginning of last month' ran over last month only, 'ab letzter Woche' was last
    week; 'since last Tuesday', month names and days by name were no phrase at all."""
    rest, f = split_filters(f"garlic {said}", TODAY)
    assert (f.since, f.until, f.phrase, rest) == (since, until, said, "garlic"), said


@pytest.mark.parametrize(
    "said",
    [
        "am 24. Dezember",  # a day to come this year: words, not last year's
        "im Januar 2027",
        "am 31. Februar",  # no such day
        "upgrade from 3.12.1 to 3.13",  # a version, not a day
        "Android ab 5.1.",  # a version too
        "the last Tuesday of the month",
        "last Friday of every month",
        "ab Montag",  # mostly the Monday to come
        "ab Januar gilt die neue Regel",  # and the January to come
        "ab dem 1. Dezember",
        "Rechnung vom 30.11.",  # a paper's date, not the note's
        "the invoice from December 1",
        "December 3 deadline",  # a day without on/am/vom may be one to come
        "November rain",
    ],
)
def test_days_and_months_that_name_no_past_day_stay_words(said: str) -> None:
    rest, f = split_filters(said, TODAY)
    assert (f.since, f.phrase, rest) == (None, None, said)


@pytest.mark.parametrize(
    ("said", "since", "until", "phrase"),
    [
        # a month with its year that notes are from
        ("notes from March 2025", "2025-03-01", "2025-03-31", "from March 2025"),
        ("Notizen von März 2025", "2025-03-01", "2025-03-31", "von März 2025"),
        ("Notizen vom März 2025", "2025-03-01", "2025-03-31", "vom März 2025"),
        ("Notizen aus dem März 2025", "2025-03-01", "2025-03-31", "aus dem März 2025"),
        # since it, German "ab" too (with its year it is no month to come)
        ("ab März 2025", "2025-03-01", _TODAY, "ab März 2025"),
        ("ab dem März 2025", "2025-03-01", _TODAY, "ab dem März 2025"),
        ("seit März 2025", "2025-03-01", _TODAY, "seit März 2025"),
        ("from March 2025 on", "2025-03-01", _TODAY, "from March 2025 on"),
        # notes from a month without its year: the last one, however long ago
        ("notes from March", "2026-03-01", "2026-03-31", "from March"),
        ("Notizen aus dem März", "2026-03-01", "2026-03-31", "aus dem März"),
        ("Notizen von Mai", "2026-05-01", "2026-05-31", "von Mai"),
        ("notes from may", "2026-05-01", "2026-05-31", "from may"),  # no verb after "notes from"
        ("Notizen vom Dezember", "2026-12-01", _TODAY, "vom Dezember"),
    ],
)
def test_a_month_with_its_year_or_notes_from_it_is_its_window(
    said: str, since: str, until: str, phrase: str
) -> None:
    """Notes from a month, with its year or without ('notes from March 2025', 'Notizen aus dem
    März 2025' were words: only 'in'/'im' read it), are of that month, without its year of the
    last one gone by; 'ab' a month with its year runs from it."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


def test_notes_from_a_month_are_of_the_last_one_however_long_ago() -> None:
    """'notes from March' asked in January is last March ('im März' then is the March to come)."""
    january = dt.date(2027, 1, 3)
    assert split_filters("notes from March", january)[1].since == "2026-03-01"
    assert split_filters("Notizen aus dem März", january)[1].since == "2026-03-01"
    assert split_filters("im März", january)[1].since is None


@pytest.mark.parametrize(
    "said",
    [
        # a month's name alone is words: a name, a verb, a topic
        "März",
        "Mai",
        "August",
        "Notes for August",
        "may I see the garden notes",
        "you may",
        "may 2026 be a good year",  # lowercase "may" the verb, even before a year
        "we march on",
        "March Madness",
        "notes from March Madness",
        "the invoice from March",  # a paper "from" a month: its date, as "from December 1"
        # a day's month: a paper's date (see the days after on/am/vom)
        "Rechnung vom 3. März 2025",
        "the 3rd of March 2025",
        "December 3, 2025",
        # months to come
        "März 2027",
        "my March 2025 notes",  # a possessive, as "my last year"
        # a month with its year and no preposition: mostly a label, its paper written after it
        "März 2025",
        "Stromrechnung März 2025",
        "Monatsbericht Stromrechnung März 2025",
        "March 2025 meeting notes",
        "Urlaub Mai 2025",
        "August 2025",
        "budget March, 2025",
        "aus dem März 2025",
        "from March 2025",
        "3rd March 2025",
        "Anna's March 2025 trip",
        "the March 2025 release of Obsidian",
        # two months in one clause compare or list them
        "März 2025 vs April 2025",
        "Stromrechnung März 2025 vs April 2025",
        "Compare March 2025 with April 2025",
        "März 2025 oder April 2025",
        "Januar/Februar 2025",
        "März, April 2025",
        "Unterschied März 2024 zu März 2025",
        "Q1: Januar 2025 Februar 2025 März 2025",
        "notes from March 2025 vs April 2025",
        "notes from March 2025 and from April 2025",
        "Notizen aus dem März 2025 oder April 2025",
        "ab Januar/Februar 2025",
        "ab März 2025 gilt der neue Stromtarif",  # a rule from then on, its note written before
    ],
)
def test_a_month_without_its_year_or_preposition_stays_words(said: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "since", "until", "phrase"),
    [
        (
            "Zur Stromrechnung März 2025: was habe ich letzte Woche dazu notiert?",
            "2026-11-23",
            "2026-11-29",
            "letzte Woche",
        ),
        (
            "Re the March 2025 invoice, what did I write about it yesterday?",
            "2026-12-01",
            "2026-12-01",
            "yesterday",
        ),
        (
            "Zu den Notizen aus dem März 2025: was habe ich gestern notiert?",
            "2026-12-01",
            "2026-12-01",
            "gestern",
        ),
        ("Notes from March 2025: what did I write last week?", "2026-11-23", "2026-11-29", "last week"),
        ("Ab März 2025 Stromrechnungen, was davon gestern?", "2026-12-01", "2026-12-01", "gestern"),
        ("Notizen vom letzten März: was habe ich gestern notiert?", "2026-12-01", "2026-12-01", "gestern"),
        ("Notes from last March: what did I write yesterday?", "2026-12-01", "2026-12-01", "yesterday"),
        ("Notizen aus März: was habe ich letzte Woche notiert?", "2026-11-23", "2026-11-29", "letzte Woche"),
        ("notes in March: what did I write last week?", "2026-11-23", "2026-11-29", "last week"),
        ("Notizen von März bis Mai: was habe ich gestern notiert?", "2026-12-01", "2026-12-01", "gestern"),
        ("Notes between March and May: what did I write yesterday?", "2026-12-01", "2026-12-01", "yesterday"),
    ],
)
def test_a_month_named_by_its_preposition_gives_way_to_another_time_phrase(
    said: str, since: str, until: str, phrase: str
) -> None:
    """A month that notes are from, or a label month with its year, gives way to the period asked
    about elsewhere in the message: it took the scope as the message's first time phrase."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    "said",
    [
        "What did I do last March and last week?",
        "Was habe ich letzten März und letzte Woche gemacht?",
        "What did I do last week and last March?",
        "Was habe ich letzte Woche und letzten März gemacht?",
        "Was habe ich von März bis Mai und letzte Woche gemacht?",
        "notes from March to May and yesterday",
        "Notizen aus März und gestern",
        "notes from March 2025 and yesterday",
        "Notizen vom letzten März oder gestern",
    ],
)
def test_two_periods_joined_in_one_clause_give_no_window(said: str) -> None:
    """A month, 'last March' or a range joined by and/und/oder to another period gave way to it
    inside the same clause: 'last March and last week' was last week, and half the question was
    answered from a window that hid the other half."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "since", "until", "phrase"),
    [
        # in one clause, not joined by and/or alone: it gives way as in another clause (the
        # month names the notes' topic, the other phrase the time asked about)
        ("notes from last March about last week", "2026-11-23", "2026-11-29", "last week"),
        (
            "What did I write about the trip from March to May last week?",
            "2026-11-23",
            "2026-11-29",
            "last week",
        ),
        ("What did I add to my notes from last March yesterday?", "2026-12-01", "2026-12-01", "yesterday"),
        ("Which notes from March did I edit today?", "2026-12-02", "2026-12-02", "today"),
        ("Was habe ich zu den Notizen vom März gestern ergänzt?", "2026-12-01", "2026-12-01", "gestern"),
        ("Was habe ich über letzten März gestern geschrieben?", "2026-12-01", "2026-12-01", "gestern"),
        ("Welche Notizen vom März habe ich heute geändert?", "2026-12-02", "2026-12-02", "heute"),
        (
            "Was habe ich über den Urlaub von März bis Mai gestern geschrieben?",
            "2026-12-01",
            "2026-12-01",
            "gestern",
        ),
        # a verb between the two periods: not joined, it gives way
        ("Was habe ich letzten März gemacht und letzte Woche?", "2026-11-23", "2026-11-29", "letzte Woche"),
        ("What did I do last March and then last week?", "2026-11-23", "2026-11-29", "last week"),
        # in another clause: it gives way
        ("Notizen aus März, was habe ich gestern notiert?", "2026-12-01", "2026-12-01", "gestern"),
        ("Last March, what did I write yesterday?", "2026-12-01", "2026-12-01", "yesterday"),
    ],
)
def test_a_month_gives_way_to_a_phrase_outside_it(said: str, since: str, until: str, phrase: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    ("today", "said", "since", "until", "phrase"),
    [
        # the last such month before this one, in both languages and with each lead
        (TODAY, "last March", "2026-03-01", "2026-03-31", "last March"),
        (TODAY, "notes from last March", "2026-03-01", "2026-03-31", "from last March"),
        (TODAY, "What did I write in last May?", "2026-05-01", "2026-05-31", "in last May"),
        (TODAY, "Notizen vom letzten März", "2026-03-01", "2026-03-31", "vom letzten März"),
        (TODAY, "im vergangenen März", "2026-03-01", "2026-03-31", "im vergangenen März"),
        (TODAY, "Was war letzten Mai?", "2026-05-01", "2026-05-31", "letzten Mai"),
        (TODAY, "aus dem vorigen August", "2026-08-01", "2026-08-31", "aus dem vorigen August"),
        # this month's name: a year ago, never the month in progress
        (TODAY, "last December", "2025-12-01", "2025-12-31", "last December"),
        (TODAY, "im letzten Dezember", "2025-12-01", "2025-12-31", "im letzten Dezember"),
        (dt.date(2027, 3, 15), "last March", "2026-03-01", "2026-03-31", "last March"),
        (dt.date(2027, 1, 3), "letzten Februar", "2026-02-01", "2026-02-28", "letzten Februar"),
        # since it
        (TODAY, "since last March", "2026-03-01", _TODAY, "since last March"),
        (TODAY, "seit letztem März", "2026-03-01", _TODAY, "seit letztem März"),
        (TODAY, "seit dem letzten März", "2026-03-01", _TODAY, "seit dem letzten März"),
    ],
)
def test_last_and_a_month_is_the_last_one_before_this_month(
    today: dt.date, said: str, since: str, until: str, phrase: str
) -> None:
    """'last March', 'Notizen vom letzten März', 'im vergangenen März' gave no window."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    "said",
    [
        "last may",  # the verb
        "the last March",  # a determiner: one of something
        "their last march to the sea",
        "Last March Madness",  # a title
        "last March of the regiment",
        "der letzte März der Pandemie",
        "last March and April",  # two months in a clause
        "letzten März oder April",
        "last March to May",  # a range's first month alone would hide the rest
        # a day or a weekend of it, not the whole month
        "last March 3",
        "last March 3rd",
        "last March weekend",
        "letzten März Wochenende",
        # the time before or after it, not the month
        "before last March",
        "after last March",
        "until last March",
        "vor letztem März",
        "nach letztem März",
        "bis letzten März",
        "bis zum letzten März",
    ],
)
def test_last_and_a_month_look_alikes_stay_words(said: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "since", "until", "phrase"),
    [
        ("letzten März 2024", "2024-03-01", "2024-03-31", "letzten März 2024"),
        ("Notizen vom letzten März 2025", "2025-03-01", "2025-03-31", "vom letzten März 2025"),
        ("last March 2025", "2025-03-01", "2025-03-31", "last March 2025"),
        ("notes from last March of 2024", "2024-03-01", "2024-03-31", "from last March of 2024"),
        (
            "im vergangenen März letzten Jahres",
            "2025-03-01",
            "2025-03-31",
            "im vergangenen März letzten Jahres",
        ),
        ("seit letztem März 2025", "2025-03-01", _TODAY, "seit letztem März 2025"),
    ],
)
def test_last_and_a_month_with_its_year_is_that_month(said: str, since: str, until: str, phrase: str) -> None:
    """A year after 'last March' was dropped: 'letzten März 2024' was March of this year."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    ("today", "said", "since", "until", "phrase"),
    [
        (TODAY, "Notizen aus März", "2026-03-01", "2026-03-31", "aus März"),
        (TODAY, "Notizen im März", "2026-03-01", "2026-03-31", "im März"),
        (TODAY, "Einträge aus Mai", "2026-05-01", "2026-05-31", "aus Mai"),
        (TODAY, "notes in March", "2026-03-01", "2026-03-31", "in March"),
        (TODAY, "entries during May", "2026-05-01", "2026-05-31", "during May"),
        (TODAY, "Notizen aus März 2025", "2025-03-01", "2025-03-31", "aus März 2025"),
        (TODAY, "notes in March 2025", "2025-03-01", "2025-03-31", "in March 2025"),
        # the last one however long ago ('im März' alone asked in January is the one to come)
        (dt.date(2027, 1, 3), "Notizen im März", "2026-03-01", "2026-03-31", "im März"),
        (dt.date(2027, 1, 3), "notes in March", "2026-03-01", "2026-03-31", "in March"),
        (dt.date(2027, 1, 3), "Notizen aus März", "2026-03-01", "2026-03-31", "aus März"),
        # this month: so far, as 'notes from December' and 'Notizen vom Dezember'
        (TODAY, "Notizen im Dezember", "2026-12-01", _TODAY, "im Dezember"),
        (TODAY, "notes in December", "2026-12-01", _TODAY, "in December"),
        (TODAY, "notes from December", "2026-12-01", _TODAY, "from December"),
    ],
)
def test_notes_in_or_aus_a_month_are_of_the_last_one(
    today: dt.date, said: str, since: str, until: str, phrase: str
) -> None:
    """'Notizen aus März', 'Notizen im März' (no article, no year) were no window or, asked in
    January, none: they are read as 'notes from March' is."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    "said",
    [
        "Notizen von Mai Thi",  # a name after the month
        "Notizen aus Mai Thi",
        "Notizen im Mai Thi Ordner",
        "notes from May Thi",
        "notes in may be lost",  # the verb
        "notes in March Madness",  # a title
        "Notizen im März oder April",  # two months in a clause
        "notes in March vs April",
    ],
)
def test_notes_in_or_aus_a_month_look_alikes_stay_words(said: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "since", "until", "phrase"),
    [
        # the agenda: the coming one, as "im Mai" alone in such a question
        ("Welche Einträge im Mai stehen an?", "2027-05-01", "2027-05-31", "im Mai"),
        ("Notizen im März, was habe ich vor?", "2027-03-01", "2027-03-31", "im März"),
        ("What's planned in my notes in May?", "2027-05-01", "2027-05-31", "in May"),
        ("What's on for entries in May?", "2027-05-01", "2027-05-31", "in May"),
        # a question in the present of doing: the month to come, no window but the agenda's
        ("Was mache ich mit den Notizen im März?", None, None, None),
        ("What am I doing with my notes in March?", None, None, None),
        # asked about what happened: the one gone by
        ("Was habe ich in den Notizen im März geschrieben?", "2026-03-01", "2026-03-31", "im März"),
    ],
)
def test_notes_in_a_month_asked_about_plans_are_the_coming_one(
    said: str, since: str | None, until: str | None, phrase: str | None
) -> None:
    """'Notizen im März', 'notes in March' read as notes from March (gone by) also in a question
    about plans: 'Welche Einträge im Mai stehen an?' was the May gone by, not the one to come."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    ("today", "said", "since", "until", "phrase"),
    [
        # still open or coming: read as "in May" is on its own, no year-old May
        (dt.date(2026, 3, 15), "Which entries in May are coming up?", None, None, None),
        (dt.date(2026, 3, 15), "Welche Einträge im Mai sind offen?", None, None, None),
        (dt.date(2026, 3, 15), "Which notes in May are still pending?", None, None, None),
        (dt.date(2026, 12, 7), "Which entries in May are coming up?", "2026-05-01", "2026-05-31", "in May"),
        (dt.date(2026, 12, 7), "Welche Einträge im Mai sind offen?", "2026-05-01", "2026-05-31", "im Mai"),
        # "aus" as "im" about plans: the coming one
        (dt.date(2026, 12, 7), "Notizen aus März, was steht an?", "2027-03-01", "2027-03-31", "aus März"),
        (dt.date(2026, 12, 7), "Notizen im März, was steht an?", "2027-03-01", "2027-03-31", "im März"),
        # not about plans: the month gone by, as before
        (
            dt.date(2026, 3, 15),
            "Welche Einträge im Mai habe ich geschrieben?",
            "2025-05-01",
            "2025-05-31",
            "im Mai",
        ),
    ],
)
def test_notes_in_a_month_still_open_keep_the_reading_of_in_a_month(
    today: dt.date, said: str, since: str | None, until: str | None, phrase: str | None
) -> None:
    f = split_filters(said, today)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), (said, f)


@pytest.mark.parametrize(
    "said",
    [
        # a comma list of months is one clause: no one month's window
        "Notizen aus März, April und Mai",
        "Notizen aus März 2025, April 2025",
        "Notizen im März, April und Mai",
        "Zeige mir die Notizen aus dem März, April",
        "notes from March, April and May",
        "notes in March, April and May",
        "Was habe ich im März, April und Mai gemacht?",
        "What did I do in March, April and May?",
    ],
)
def test_a_list_of_months_gives_no_window(said: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "phrase"),
    [
        # a comma before another word still ends the clause
        ("Notizen aus März, was habe ich da geschrieben?", "aus März"),
        ("In March, what did I do?", "In March"),
        ("Was habe ich im März gemacht, April war ruhig", "im März"),
    ],
)
def test_a_comma_before_no_month_still_ends_the_clause(said: str, phrase: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert f.phrase == phrase, (said, f)


@pytest.mark.parametrize(
    ("today", "said", "since", "until", "phrase"),
    [
        (TODAY, "notes from March to May", "2026-03-01", "2026-05-31", "from March to May"),
        (TODAY, "between March and May 2025", "2025-03-01", "2025-05-31", "between March and May 2025"),
        (TODAY, "Notizen von März bis Mai", "2026-03-01", "2026-05-31", "von März bis Mai"),
        (TODAY, "zwischen März und Mai", "2026-03-01", "2026-05-31", "zwischen März und Mai"),
        (TODAY, "Was habe ich März bis Mai 2025 gemacht?", "2025-03-01", "2025-05-31", "März bis Mai 2025"),
        (TODAY, "notes March–May", "2026-03-01", "2026-05-31", "March–May"),
        (TODAY, "Notizen März-Mai 2025", "2025-03-01", "2025-05-31", "März-Mai 2025"),
        (
            TODAY,
            "notes from March 2025 to May 2025",
            "2025-03-01",
            "2025-05-31",
            "from March 2025 to May 2025",
        ),
        (TODAY, "Notizen vom März bis zum Mai 2025", "2025-03-01", "2025-05-31", "vom März bis zum Mai 2025"),
        (TODAY, "in May 2025 to June 2025", "2025-05-01", "2025-06-30", "in May 2025 to June 2025"),
        # the first month's own year; else the last's holds for both, crossing the year's turn
        (TODAY, "notes from March 2025 to May", "2025-03-01", "2025-05-31", "from March 2025 to May"),
        (TODAY, "Notizen November 2024 bis Februar", "2024-11-01", "2025-02-28", "November 2024 bis Februar"),
        (TODAY, "Notizen November bis Februar 2025", "2024-11-01", "2025-02-28", "November bis Februar 2025"),
        # without a year the last range whose first month has begun (in progress: so far)
        (TODAY, "Notizen November bis Februar", "2026-11-01", _TODAY, "November bis Februar"),
        (TODAY, "notes from October to December", "2026-10-01", _TODAY, "from October to December"),
        (
            dt.date(2027, 1, 3),
            "zwischen Oktober und Dezember",
            "2026-10-01",
            "2026-12-31",
            "zwischen Oktober und Dezember",
        ),
        # where its clause asks for the notes, after note words, or as a request
        (TODAY, "Was habe ich von März bis Mai gemacht?", "2026-03-01", "2026-05-31", "von März bis Mai"),
        (TODAY, "What did I write from March to May?", "2026-03-01", "2026-05-31", "from March to May"),
        (TODAY, "Notizen März bis Mai 2025", "2025-03-01", "2025-05-31", "März bis Mai 2025"),
        (TODAY, "Zeig mir alles von März bis Mai", "2026-03-01", "2026-05-31", "von März bis Mai"),
        # at its clause's start, a subject pronoun next: a period said, as "since Monday" is
        (
            TODAY,
            "From March to May we lived in Spain, what did I write?",
            "2026-03-01",
            "2026-05-31",
            "From March to May",
        ),
        (
            TODAY,
            "From March to May I ran daily, which shoes?",
            "2026-03-01",
            "2026-05-31",
            "From March to May",
        ),
        # "between"/"zwischen" names a period wherever it stands, a keyword before it too
        (TODAY, "Ausgaben zwischen März und Mai", "2026-03-01", "2026-05-31", "zwischen März und Mai"),
        (TODAY, "expenses between March and May", "2026-03-01", "2026-05-31", "between March and May"),
        (
            TODAY,
            "Stimmung zwischen Oktober und Dezember",
            "2026-10-01",
            _TODAY,
            "zwischen Oktober und Dezember",
        ),
        (TODAY, "mood between October and December", "2026-10-01", _TODAY, "between October and December"),
        (
            TODAY,
            "Between March and May my back hurt, what helps?",
            "2026-03-01",
            "2026-05-31",
            "Between March and May",
        ),
        (
            TODAY,
            "Zwischen März und Mai tat mein Rücken weh, was hilft?",
            "2026-03-01",
            "2026-05-31",
            "Zwischen März und Mai",
        ),
        (
            TODAY,
            "Between March and May, what did I write?",
            "2026-03-01",
            "2026-05-31",
            "Between March and May",
        ),
        (
            TODAY,
            "Garten zwischen März und Mai 2025",
            "2025-03-01",
            "2025-05-31",
            "zwischen März und Mai 2025",
        ),
        # a thing compared over the range, asked with a verb or a noun: its window holds both months
        (
            TODAY,
            "difference in spending between March and May",
            "2026-03-01",
            "2026-05-31",
            "between March and May",
        ),
        (
            TODAY,
            "Unterschied der Ausgaben zwischen März und Mai",
            "2026-03-01",
            "2026-05-31",
            "zwischen März und Mai",
        ),
        (
            TODAY,
            "Vergleich der Ausgaben zwischen März und Mai",
            "2026-03-01",
            "2026-05-31",
            "zwischen März und Mai",
        ),
        (
            TODAY,
            "Compare my spending between March and May",
            "2026-03-01",
            "2026-05-31",
            "between March and May",
        ),
        (
            TODAY,
            "Compare the costs between March and May",
            "2026-03-01",
            "2026-05-31",
            "between March and May",
        ),
        (
            TODAY,
            "Vergleiche meine Ausgaben zwischen März und Mai",
            "2026-03-01",
            "2026-05-31",
            "zwischen März und Mai",
        ),
        (
            TODAY,
            "Meine Ausgaben zwischen März und Mai vergleichen",
            "2026-03-01",
            "2026-05-31",
            "zwischen März und Mai",
        ),
        # "während" reads it as "during" does
        (
            TODAY,
            "Was habe ich während März bis Mai gemacht?",
            "2026-03-01",
            "2026-05-31",
            "während März bis Mai",
        ),
        (TODAY, "What did I do during March to May?", "2026-03-01", "2026-05-31", "during March to May"),
        # the agenda: the coming one
        (TODAY, "Was habe ich von März bis Mai vor?", "2027-03-01", "2027-05-31", "von März bis Mai"),
    ],
)
def test_a_range_of_months_is_its_window(
    today: dt.date, said: str, since: str, until: str, phrase: str
) -> None:
    """Month ranges ('from March to May', 'von März bis Mai', 'März bis Mai 2025', 'March–May')
    were no window: the first month alone would hide the rest, so they were words."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until, f.phrase) == (since, until, phrase), said


@pytest.mark.parametrize(
    "said",
    [
        # a label: a bill, a report of those months, written after them
        "Stromrechnung März bis Mai 2025",
        "Stromrechnung von März bis Mai 2025",
        "von Januar bis März 2025 Kontoauszüge",  # a noun after it: a label
        "From March to May Reports",
        # any other word after a range opening its clause may begin a label's noun
        "From March to May 2025 bank statements",
        "from March to May invoices",
        "From January to March 2025 expenses report",
        "Von März bis Mai 2025 alle Kontoauszüge",
        "von März bis Mai die Stromrechnung",
        "From March to May the garden plan",
        "Reise, von März bis Mai in Spanien",
        "From March to May my expenses",
        "Von März bis Mai meine Kontoauszüge",
        "invoice from March to May",
        "Quartalsbericht März–Mai 2025",
        "the March–May 2025 report",
        "my March to May notes",
        # a verb, a name, a day, a range that ends before it begins, a third month
        "you may from March to May water the lawn daily",
        "from march to may",
        "zwischen März und Mai Thi",
        "zwischen Anna und Mai Thi",
        "von Mai Thi bis März",
        "vom 3. März bis Mai",
        "the 3rd of March to May",
        "from March to May 5",
        "Mai 2025 bis März 2025",
        "März bis Mai 2025 vs Juni",
        "between March and May or July",
        # alone, as a month with its year alone ("März 2025"): a title searched for, "Quartalsbericht
        # März–Mai 2025" written in June is found by its words
        "März–Mai 2025",
        "März bis Mai",
        "Januar bis März",
        "March–May",
        "from March to May",
        "von März bis Mai 2025",
        "vom März bis Mai",
        "November bis Februar",
        # two months compared
        "Unterschied zwischen März und Mai 2025",
        "difference between March 2025 and May 2025",
        "Vergleich zwischen März und Mai",
        "Compare between March and May",
        "Was ist der Unterschied zwischen März und Mai?",
    ],
)
def test_a_range_of_months_look_alikes_stay_words(said: str) -> None:
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


def test_a_range_of_months_alone_keeps_its_words_for_the_search() -> None:
    """'März–Mai 2025' alone was a window and its words were cut: a search for the report
    'Quartalsbericht März–Mai 2025', written in June, listed only notes dated in those months."""
    rest, f = split_filters("März–Mai 2025", TODAY)[:2]
    assert (f.since, f.phrase, rest) == (None, None, "März–Mai 2025")


@pytest.mark.parametrize(
    ("today", "said", "since", "until"),
    [
        # asked while it runs: the range begun, up to today (the notes just written are in it)
        (dt.date(2026, 1, 20), "Was habe ich von November bis Februar gemacht?", "2025-11-01", "2026-01-20"),
        (dt.date(2026, 1, 20), "notes from November to February", "2025-11-01", "2026-01-20"),
        (dt.date(2026, 3, 20), "Notizen von Februar bis Mai", "2026-02-01", "2026-03-20"),
        (dt.date(2026, 4, 20), "Notizen von März bis Mai", "2026-03-01", "2026-04-20"),
        (dt.date(2026, 4, 20), "What did I write between March and May?", "2026-03-01", "2026-04-20"),
        (TODAY, "Was habe ich von November bis Februar gemacht?", "2026-11-01", _TODAY),
        # its first month not begun this year: last year's
        (dt.date(2026, 1, 20), "Notizen von März bis Mai", "2025-03-01", "2025-05-31"),
        (dt.date(2026, 1, 20), "zwischen Oktober und Dezember", "2025-10-01", "2025-12-31"),
        # the single month the same day agrees: this one so far
        (dt.date(2026, 3, 15), "Notizen aus März", "2026-03-01", "2026-03-15"),
        (dt.date(2026, 3, 15), "notes from March", "2026-03-01", "2026-03-15"),
        (dt.date(2026, 4, 20), "Notizen aus April", "2026-04-01", "2026-04-20"),
    ],
)
def test_a_range_of_months_asked_while_it_runs_is_the_one_begun(
    today: dt.date, said: str, since: str, until: str
) -> None:
    """A range without its year was the last one whose last month had begun: asked in January,
    'von November bis Februar' was the one a year earlier, skipping the notes just written, and
    'Notizen von März bis Mai' asked in April last year's while 'Notizen aus März' was this one."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (since, until), said


def test_over_the_weekend_on_a_sunday_is_this_one() -> None:
    sunday = dt.date(2026, 12, 6)
    f = split_filters("over the weekend", sunday)[1]
    assert (f.since, f.until) == ("2026-12-05", "2026-12-06")


@pytest.mark.parametrize(
    ("today", "said", "since", "until"),
    [
        # a year said another way than digits
        (dt.date(2026, 12, 5), "what did I do in November last year", "2025-11-01", "2025-11-30"),
        (dt.date(2026, 12, 5), "im Mai letzten Jahres", "2025-05-01", "2025-05-31"),
        (dt.date(2026, 12, 5), "in March of last year", "2025-03-01", "2025-03-31"),
        (dt.date(2026, 12, 5), "in May of 2025", "2025-05-01", "2025-05-31"),
        (dt.date(2026, 12, 5), "im Mai '25", "2025-05-01", "2025-05-31"),
        (dt.date(2026, 12, 5), "on December 3rd last year", "2025-12-03", "2025-12-03"),
        # at the year's turn the month or day just gone
        (dt.date(2027, 1, 3), "im Dezember", "2026-12-01", "2026-12-31"),
        (dt.date(2027, 1, 3), "since November", "2026-11-01", "2027-01-03"),
        (dt.date(2027, 1, 3), "am 30.12.", "2026-12-30", "2026-12-30"),
        (dt.date(2027, 1, 3), "seit dem 30. Dezember", "2026-12-30", "2027-01-03"),
        # "since the end/middle of X" runs from X's first day (more days, never fewer)
        (dt.date(2026, 12, 5), "seit Ende letzten Monats", "2026-11-01", "2026-12-05"),
        (dt.date(2026, 12, 5), "since the middle of last month", "2026-11-01", "2026-12-05"),
        # a Turkish dotted capital or a long s folds to the name (a KeyError before)
        (dt.date(2026, 12, 5), "İN APRİL", "2026-04-01", "2026-04-30"),
        (dt.date(2026, 12, 5), "FRİDAY LAST WEEK", "2026-11-27", "2026-11-27"),
        (dt.date(2026, 12, 5), "in ſeptember", "2026-09-01", "2026-09-30"),
        # "last Tuesday in November" is no Tuesday before today; its month holds it
        (dt.date(2026, 12, 5), "last Tuesday in November", "2026-11-01", "2026-11-30"),
        # "I" after a month is no title
        (dt.date(2026, 12, 5), "in November I wrote about taxes", "2026-11-01", "2026-11-30"),
        # notes "from"/"vom" a day (a paper "vom" a day is its date: words)
        (dt.date(2026, 12, 5), "Notizen vom 3. Dezember", "2026-12-03", "2026-12-03"),
        (dt.date(2026, 12, 5), "Einträge vom 3.12.", "2026-12-03", "2026-12-03"),
        (dt.date(2026, 12, 5), "my notes from December 3", "2026-12-03", "2026-12-03"),
    ],
)
def test_named_months_and_days_by_the_year_said(today: dt.date, said: str, since: str, until: str) -> None:
    """A month's year said as 'last year' or '25 (it was this year's month, and won over the
    'last year' the sentence said); December asked in January is the one just gone."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (since, until), said


@pytest.mark.parametrize(
    ("today", "said"),
    [
        # "may" the verb
        (dt.date(2026, 12, 5), "sign in may fail with SSO"),
        (dt.date(2026, 12, 5), "running this on 10 may be slow"),
        # ranges: their first day alone would hide the rest
        (dt.date(2026, 12, 5), "from December 3 to 5"),
        (dt.date(2026, 12, 5), "on December 3-5"),
        (dt.date(2026, 12, 5), "am 3.12. bis 5.12."),
        (dt.date(2026, 12, 5), "Kontoauszug am 1.10. bis 31.10."),
        # titles and things of something
        (dt.date(2026, 12, 5), "guitar solo in November Rain"),
        (dt.date(2026, 12, 5), "scene in August Rush"),
        (dt.date(2026, 12, 5), "in March of the Penguins"),
        (dt.date(2026, 12, 5), "Last Friday Night lyrics"),
        (dt.date(2026, 12, 5), "letzten Dienstag vor Weihnachten"),
        (dt.date(2026, 12, 5), "every last Friday"),
        (dt.date(2026, 12, 5), "jeden letzten Freitag"),
        (dt.date(2026, 12, 5), "mein letzter Dienstag bei der Firma"),
        (dt.date(2026, 12, 5), "over the weekend of the wedding"),
        # a month to come, not just gone
        (dt.date(2027, 1, 3), "im Mai bin ich im Urlaub"),
        (dt.date(2027, 1, 3), "ab Januar"),
        (dt.date(2026, 12, 5), "since the beginning of the year 2025"),
    ],
)
def test_months_and_days_that_are_no_window(today: dt.date, said: str) -> None:
    f = split_filters(said, today)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


def test_a_range_leaves_the_phrase_after_it() -> None:
    """'vom 3.12.2025 bis heute' is no first-day window; 'heute' is found as before."""
    f = split_filters("vom 3.12.2025 bis heute", dt.date(2026, 12, 5))[1]
    assert (f.since, f.until) == ("2026-12-05", "2026-12-05")


@pytest.mark.parametrize(
    ("value", "day"),
    [("04.12.2026", "2026-12-04"), ("4.12.2026", "2026-12-04"), ("4.12.", "2026-12-04")],
)
def test_since_takes_a_german_date(value: str, day: str) -> None:
    """--since 04.12.2026 (a daily-note format German vaults use) was refused."""
    assert day_calendar.parse_day(value, TODAY, name="since").isoformat() == day


def test_a_german_date_that_is_no_day_is_refused() -> None:
    with pytest.raises(day_calendar.FilterError, match="not a valid date"):
        day_calendar.parse_day("31.02.2026", TODAY, name="since")


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("tomorrow", "2026-12-03"),
        ("morgen", "2026-12-03"),
        ("gestern", "2026-12-01"),
        ("Montag", "2026-11-30"),
    ],
)
def test_since_and_until_take_tomorrow_as_they_take_yesterday(value: str, day: str) -> None:
    """since:morgen / --since tomorrow were refused while since:gestern was accepted."""
    assert day_calendar.parse_day(value, TODAY, name="since").isoformat() == day
    _, f = split_filters(f"Arzttermin until:{value}", TODAY)
    assert f.until == day


def test_a_value_that_is_no_day_names_the_german_words_too() -> None:
    """The error listed only English words (today, yesterday) though German ones are read."""
    with pytest.raises(day_calendar.FilterError) as caught:
        day_calendar.parse_day("übermorgen", TODAY, name="since")
    for word in ("heute", "gestern", "morgen", "Montag", "tomorrow"):
        assert word in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("said", "phrase", "rest"),
    [
        # the first phrase by position scopes the search, whether it counts from today or not
        ("what did I note on November 12 about the meeting yesterday", "on November 12", "meeting yesterday"),
        ("Am 3. März schrieb ich über das Treffen von gestern", "Am 3. März", "Treffen von gestern"),
        ("Notizen vom 3. März zum Treffen heute", "vom 3. März", "Treffen heute"),
        ("was habe ich gestern über die Reise im November notiert?", "gestern", "Reise im November"),
        ("was habe ich heute zum Meeting letzte Woche notiert?", "heute", "Meeting letzte Woche"),
        ("im November über den Termin am 3. März", "im November", "am 3. März"),
        # at one position the longest
        ("what did I do in November last year", "in November last year", "what did I do"),
    ],
)
def test_the_first_phrase_scopes_the_search(said: str, phrase: str, rest: str) -> None:
    """A phrase counting from today won over a named day before it: "what did I note on November
    12 about the meeting yesterday" read yesterday, though November 12 is when it was noted."""
    text, f = split_filters(said, TODAY)
    assert f.phrase == phrase and rest in text, (said, f, text)


@pytest.mark.parametrize(
    ("said", "since", "until"),
    [
        # the agenda: the coming day or month, a period to its end
        ("Was steht am 3. März an?", "2027-03-03", "2027-03-03"),
        ("what's on March 3rd?", "2027-03-03", "2027-03-03"),
        ("Was habe ich im März vor?", "2027-03-01", "2027-03-31"),
        ("was steht am 3.3. an", "2027-03-03", "2027-03-03"),
        ("Was steht diese Woche an?", "2026-11-30", "2026-12-06"),
        ("what's planned this month?", "2026-12-01", "2026-12-31"),
        ("Was steht im Dezember an?", "2026-12-01", "2026-12-31"),
        ("Was steht am 5. Dezember an?", "2026-12-05", "2026-12-05"),  # this year's, still to come
        # the past: as before
        ("Was hatte ich am 3. März geplant?", "2026-03-03", "2026-03-03"),
        ("was habe ich am 3. März gemacht?", "2026-03-03", "2026-03-03"),
        ("What was on March 3rd?", "2026-03-03", "2026-03-03"),
        ("Meeting with Will on March 3rd", "2026-03-03", "2026-03-03"),  # a name, no future
        ("what did I do this week", "2026-11-30", _TODAY),
        ("Was habe ich vor 3 Tagen gemacht", "2026-11-29", "2026-11-29"),
        ("Anna sagte, was am 3. März ansteht", "2026-03-03", "2026-03-03"),  # reported
        ("was steht Freitag diese Woche an?", "2026-12-04", "2026-12-04"),  # a day to come
    ],
)
def test_an_agenda_question_reads_the_coming_day(said: str, since: str, until: str) -> None:
    """ "Was steht am 3. März an?" asked in December read the March 3rd gone by, and "this week"
    ended today: a question about what is to come reads the coming day, month or whole period."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, until), said


@pytest.mark.parametrize(
    ("said", "monday", "sunday"),
    [
        ("this week", ("2026-11-30", _TODAY), ("2026-11-29", _TODAY)),
        ("last week", ("2026-11-23", "2026-11-29"), ("2026-11-22", "2026-11-28")),
        ("2 weeks ago", ("2026-11-16", "2026-11-22"), ("2026-11-15", "2026-11-21")),
        ("letzte Woche Dienstag", ("2026-11-24", "2026-11-24"), ("2026-11-24", "2026-11-24")),
        ("Sunday of last week", ("2026-11-29", "2026-11-29"), ("2026-11-22", "2026-11-22")),
        ("since the start of the week", ("2026-11-30", _TODAY), ("2026-11-29", _TODAY)),
        ("last weekend", ("2026-11-28", "2026-11-29"), ("2026-11-28", "2026-11-29")),  # Sat and Sun
    ],
)
def test_weeks_begin_on_the_vaults_week_start(
    said: str, monday: tuple[str, str], sunday: tuple[str, str]
) -> None:
    """Weeks began on Monday whatever the vault's calendar says; a Sunday start moves them."""
    for start, window in ((0, monday), (6, sunday)):
        f = split_filters(said, TODAY, week_start=start)[1]
        assert (f.since, f.until) == window, (said, start)


@pytest.mark.parametrize(
    ("settings", "system", "start"),
    [
        ({"weekStart": "sunday"}, "de_DE.UTF-8", 6),
        ({"weekStart": "Saturday"}, None, 5),
        ({"weekStart": "locale", "localeOverride": "en-us"}, None, 6),
        ({"weekStart": "locale", "localeOverride": "de"}, "en_US.UTF-8", 0),
        ({"weekStart": "locale", "localeOverride": "system-default"}, None, 0),
        ({}, None, 0),
        (["sunday"], None, 0),
        # Saturday-start locales, as Moment.js has them
        ({"weekStart": "locale", "localeOverride": "ar"}, None, 5),
        ({"weekStart": "locale", "localeOverride": "fa"}, None, 5),
        ({"localeOverride": "ar-ly"}, None, 5),
        ({"weekStart": "locale", "localeOverride": "ar-sa"}, None, 6),
        ({"weekStart": "locale", "localeOverride": "de-xx"}, None, 0),  # its language's
        ({"weekStart": "locale", "localeOverride": "xx"}, "en_US.UTF-8", 0),  # unknown: Monday
        # the system's locale for "system-default" (and for the plugin's defaults)
        ({"weekStart": "locale", "localeOverride": "system-default"}, "en_US.UTF-8", 6),
        ({"weekStart": "locale", "localeOverride": "system-default"}, "en_GB.UTF-8", 0),
        ({"weekStart": "locale", "localeOverride": "system-default"}, "fa_IR", 5),
        ({"weekStart": "locale"}, "he_IL.UTF-8", 6),
        ({}, "en_US.UTF-8", 6),
        ({}, "C.UTF-8", 0),
        ({}, "POSIX", 0),
        ({"weekStart": "locale", "localeOverride": "system-default"}, "tlh_XX", 0),  # unknown
    ],
)
def test_the_week_start_obsidian_records(settings: object, system: str | None, start: int) -> None:
    """The Calendar plugin's weekStart, or its locale's: Saturday locales (ar, fa) were read as
    Monday, and "system-default" as Monday on a US English system whose plugin begins on Sunday."""
    from sidecar.vault.weekstart import week_start_in

    assert week_start_in(settings, system)[0] == start


@pytest.mark.parametrize(
    ("env", "locale"),
    [
        ({"LANG": "en_US.UTF-8"}, "en_US.UTF-8"),
        # the language, not the date format: LC_TIME=en_GB with LANG=en_US is a US English Obsidian
        ({"LANG": "en_US.UTF-8", "LC_TIME": "de_DE.UTF-8"}, "en_US.UTF-8"),
        ({"LANG": "en_US.UTF-8", "LC_TIME": "en_GB.UTF-8"}, "en_US.UTF-8"),
        ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "de_DE.UTF-8"}, "de_DE.UTF-8"),
        ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "de_DE.UTF-8", "LC_ALL": "fa_IR"}, "fa_IR"),
        ({"LANG": "en_US.UTF-8", "LANGUAGE": "de_DE:de:en"}, "de_DE"),
        ({"LANG": "de_DE.UTF-8", "LANGUAGE": ""}, "de_DE.UTF-8"),
        ({"LANG": ""}, None),
        ({}, None),
    ],
)
def test_the_system_locale_is_read_as_electron_picks_its_language(
    env: dict[str, str], locale: str | None, tmp_path: Path
) -> None:
    """The configuration reads the system's language as Obsidian (Electron) does on Linux:
    LANGUAGE, LC_ALL, LC_MESSAGES, LANG; LC_TIME (the date format) was read before LANG. The week
    start reads no environment of its own."""
    from sidecar.config import load_config

    cfg = load_config(env={"HOME": str(tmp_path), **env}, read_file=False)
    assert cfg.system_locale == locale


@pytest.mark.parametrize(
    ("said", "today", "since", "until"),
    [
        # words that may look ahead are no agenda question: the past reading, as before
        ("notes on the planned migration in November", TODAY, "2026-11-01", "2026-11-30"),
        ("Anna said she will call in November", TODAY, "2026-11-01", "2026-11-30"),
        ("Anna sagte, sie werde im November anrufen", TODAY, "2026-11-01", "2026-11-30"),
        ("Wie werde ich die Datei im November los?", TODAY, "2026-11-01", "2026-11-30"),
        ("Was habe ich im März geplant?", TODAY, "2026-03-01", "2026-03-31"),
        ("notes about the will in March", TODAY, "2026-03-01", "2026-03-31"),
        ("what will Bob present on May 3?", TODAY, "2026-05-03", "2026-05-03"),
        ("what will I do this week?", TODAY, "2026-11-30", _TODAY),
        # a day or month just gone by stays the recent one
        ("what's due on November 30?", dt.date(2026, 12, 5), "2026-11-30", "2026-11-30"),
        ("what's on November 30?", dt.date(2026, 12, 5), "2026-11-30", "2026-11-30"),
        ("Was habe ich im Dezember geplant?", dt.date(2027, 1, 1), "2026-12-01", "2026-12-31"),
        ("was steht am 31. Dezember an?", dt.date(2027, 1, 1), "2026-12-31", "2026-12-31"),
        ("Was habe ich im Dezember vor?", dt.date(2027, 1, 1), "2026-12-01", "2026-12-31"),
        # since: never ahead
        ("Was habe ich seit März geplant?", TODAY, "2026-03-01", _TODAY),
        ("Was habe ich seit März vor?", TODAY, "2026-03-01", _TODAY),
        ("Was steht seit dem 3.3. an?", TODAY, "2026-03-03", _TODAY),
        # a plain agenda question still reads the coming one
        ("was steht am 3. März an?", dt.date(2026, 12, 5), "2027-03-03", "2027-03-03"),
    ],
)
def test_only_a_plain_agenda_question_reads_ahead(said: str, today: dt.date, since: str, until: str) -> None:
    """ "will", "planned", "werde", "geplant" read a named month a year ahead ("notes on the planned
    migration in November" asked in December was November 2027); an agenda question moved a day
    just gone by a year ahead ("what's on November 30?" asked December 5th); "seit März" in an
    agenda question was no window."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (since, until), said


@pytest.mark.parametrize(
    ("said", "today", "since"),
    [
        # a past form, a plain question about what happened, or the phrase alone: the last one
        ("Was war am Donnerstag?", TODAY, "2026-11-26"),
        ("am Donnerstag", TODAY, "2026-11-26"),
        ("what happened on Thursday", TODAY, "2026-11-26"),
        ("on Thursday", TODAY, "2026-11-26"),
        ("und am Donnerstag?", TODAY, "2026-11-26"),
        ("Was ist am Donnerstag passiert?", TODAY, "2026-11-26"),
        ("what did I do on Tuesday?", TODAY, "2026-12-01"),
        ("was habe ich am Mittwoch gemacht?", TODAY, "2026-11-25"),  # today is no "am Mittwoch"
        ("Wie war das Meeting am Montag?", TODAY, "2026-11-30"),
        # the perfect with "haben" (its participle last), "sein" with a verb of going, English past
        ("Was hat der Arzt am Montag gesagt?", TODAY, "2026-11-30"),
        ("Wen habe ich am Montag angerufen?", TODAY, "2026-11-30"),
        ("Was hat Anna am Freitag erzählt?", TODAY, "2026-11-27"),
        ("Welche Bücher habe ich am Samstag gelesen?", TODAY, "2026-11-28"),
        ("Wohin bin ich am Sonntag gefahren?", TODAY, "2026-11-29"),
        ("what the doctor said on Monday", TODAY, "2026-11-30"),
        ("what Anna told me on Friday", TODAY, "2026-11-27"),
        # notes from a weekday: one gone by, whatever the question
        ("Notizen vom Montag", TODAY, "2026-11-30"),
        ("what's in my notes from Monday?", TODAY, "2026-11-30"),
        # the agenda: the coming one
        ("Was steht am Donnerstag an?", TODAY, "2026-12-03"),
        ("what's on Thursday?", TODAY, "2026-12-03"),
        ("Was steht am Mittwoch an?", TODAY, "2026-12-09"),
        ("what do I have on Monday?", TODAY, "2026-12-07"),
        # with its week, as before
        ("am Donnerstag letzter Woche", TODAY, "2026-11-26"),
    ],
)
def test_a_weekday_after_on_or_am_is_the_nearest_one(said: str, today: dt.date, since: str) -> None:
    """'Was war am Donnerstag?', 'what happened on Thursday' were no time phrase (only 'letzten
    Donnerstag' was): the days just gone by were searched as words and their daily notes missed."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (since, since), (said, f)


@pytest.mark.parametrize(
    "said",
    [
        "Meeting am Donnerstag",  # no tense: a day to come as often as one gone by
        "don't deploy on Friday",
        "Anna sagte, das Treffen ist am Donnerstag",  # reported speech
        "Anna said the call is on Thursday",
        "Was habe ich am Montag vor?",  # "vorhaben": the plan
        "Was hat er am Montag gegen 10 Uhr?",
        "Welche Gebühren habe ich am Montag?",  # a noun, not a participle
        "was habe ich am montag zu erledigen?",
        "Was ist am Montag geplant?",  # "sein" with a plan
        "Anna told me the call's on Thursday",
        "was wird am Donnerstag besprochen?",  # a future
        "what needs to be done on Friday? I wrote it down",
        "am Donnerstag vor Ostern war ich im Garten",  # a Thursday of something
        "what did I do on Thursday of that week",
        "was war am Freitag-Termin?",  # in a word
        "what happened on Friday.md",
        "what happened on Friday Night Lights",  # a title
        "what happened on Thursdays",
        "the donnerstag script on Mondays failed",
        "Wer war Robinsons Freitag?",  # a name, no am
        "Was war am Donnerstag, 3.12.?",  # its date after it: the date is the day
        "what did I do on Thursday, December 3",
    ],
)
def test_a_weekday_that_names_no_day_gone_by_stays_words(said: str) -> None:
    """A weekday with no tense, in reported speech, with a future, of something, in a word or a
    title, or with its date after it is no window."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "day"),
    [
        ("what did I do on 2026-11-25", "2026-11-25"),
        ("Was war am 2026-11-25?", "2026-11-25"),
        ("notes from 2026-11-25", "2026-11-25"),
        ("Notizen vom 2026-11-25", "2026-11-25"),
        ("what's planned on 2027-01-05?", "2027-01-05"),  # a day written out is that day
        ("on 2026-11-25 to 2026-11-27", None),  # a range: words
        ("am 2026-13-45", None),  # no day
        ("2026-11-25", None),  # alone: the daily note's name, found by its words
    ],
)
def test_an_iso_day_after_on_am_or_notes_from_is_that_day(said: str, day: str | None) -> None:
    """The default daily-note name and how agents write days: "what did I do on 2026-11-25" was
    words, and recall injected another day's note."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (day, day), (said, f)


@pytest.mark.parametrize(
    ("said", "today", "day"),
    [
        ("What's on the note from December 1", dt.date(2027, 1, 15), "2026-12-01"),
        ("what is on the note from December 1?", dt.date(2027, 1, 15), "2026-12-01"),
        ("Was steht in der Notiz vom 1. Dezember?", dt.date(2027, 1, 15), "2026-12-01"),
        ("what's in my notes from November 1", dt.date(2027, 1, 15), "2026-11-01"),
        ("Einträge vom 1.11.", dt.date(2027, 1, 15), "2026-11-01"),
        ("what's on my notes from March 3?", TODAY, "2026-03-03"),
        # "on" and "am" as before: a day to come stays words unless the agenda asks
        ("what's on March 3?", TODAY, "2027-03-03"),
    ],
)
def test_notes_from_a_day_are_of_a_day_gone_by(said: str, today: dt.date, day: str) -> None:
    """'What's on the note from December 1' opened as an agenda question does and read the
    December 1 to come; notes from a day long gone (November 1 asked in January) were words."""
    f = split_filters(said, today)[1]
    assert (f.since, f.until) == (day, day), (said, f)


@pytest.mark.parametrize(
    ("said", "since", "until"),
    [
        ("What did I do on Monday two weeks ago?", "2026-11-16", "2026-11-22"),
        ("What did I do on Monday a week ago?", "2026-11-23", "2026-11-29"),
        ("What happened on Friday last month?", "2026-11-01", "2026-11-30"),
        ("Was war am Freitag vorletzte Woche?", "2026-11-16", "2026-11-22"),
        ("Was war am Montag letzten Monat?", "2026-11-01", "2026-11-30"),
        ("Was war am Montag letztes Jahr?", "2025-01-01", "2025-12-31"),
        ("What did we decide on Monday last year?", "2025-01-01", "2025-12-31"),
        ("What did I write on Tuesday yesterday?", "2026-12-01", "2026-12-01"),
    ],
)
def test_a_weekday_beside_another_time_phrase_leaves_it_the_period(said: str, since: str, until: str) -> None:
    """'on Monday two weeks ago' read the last Monday alone (the phrase that starts first won): a
    weekday alone is read only as the message's one time phrase."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (since, until), (said, f)


@pytest.mark.parametrize(
    "said",
    [
        # ranges and lists: the first day alone hid the others
        "notes from Monday to Friday",
        "Notizen vom Montag bis Mittwoch",
        "Einträge vom Montag bis Freitag",
        "What did I do on Monday through Wednesday?",
        "What did I do on Monday to Wednesday?",
        "Was habe ich am Montag bis Mittwoch gemacht?",
        "Was habe ich am Montag und Dienstag gemacht?",
        "Was habe ich am Montag oder Dienstag notiert?",
        "What did I write on Monday or Tuesday?",
        "What did I write on Monday/Tuesday?",
        "What did I write on Monday, Tuesday and Wednesday?",
        "What did I write on Monday, Tue and Wed?",
        "What did we do on Friday and Saturday?",
        "What did we do on Friday & Saturday?",
        "What did we do on Friday and at the weekend?",
        # the past form is another clause's: the weekday is the event's, the note came before
        "Where did I write that the dentist is on Friday?",
        "Wo hatte ich notiert, dass der Zahnarzt am Freitag ist?",
        "Where did I note whether the call is on Monday?",
        "Hatte ich notiert, was wir am Sonntag kochen?",
        "Did I write down what to bring on Saturday?",
        "What did I buy for the party on Saturday?",
        "Was hatte ich für die Party am Samstag eingekauft?",
        "What did I plan for the meeting on Friday?",
        "Which restaurant did we book for dinner on Friday?",
        "What was due on Friday?",
        "What happened to the weekly report that is due on Friday?",
        "What was the cron schedule? It runs on Monday",
        # quotes, code and titles
        'Where did I write "call back on Monday"?',
        "Where did I write 'see you on Monday'?",
        'Wo hatte ich "bis am Montag" geschrieben?',
        'What did I write about "Never on Sunday"?',
        "What did I note about the film Never on Sunday?",
        'Was habe ich über "Am Sonntag bist du tot" geschrieben?',
        "What did I write about the cron expression `on Monday`?",
        # habits, the present, a place or a time in the day said beside it
        "What did we decide on Monday mornings?",
        "Which books did I read on Sunday mornings?",
        "What did we decide on Monday? We meet on Mondays.",
        "Was passiert am Freitag?",
        "Was passiert am Freitag beim Team-Event?",
        "Was war am Montag im Urlaub?",
        "What did I do on Monday during the holidays?",
    ],
)
def test_a_weekday_in_a_range_a_list_a_quote_or_another_clause_stays_words(said: str) -> None:
    """Ranges and lists of weekdays read their first day only; a past form anywhere in the message
    ("Where did I write that the dentist is on Friday?"), a quote or a title read the last weekday
    and hid the note asked for. As on main: words."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "day"),
    [
        ("Was ist am Freitag passiert?", "2026-11-27"),
        ("What did we decide on Friday?", "2026-11-27"),
        ("What did we talk about on Friday?", "2026-11-27"),
        ("Wo hatte ich notiert, was am Freitag war?", "2026-11-27"),
        ("When did we meet on Monday?", "2026-11-30"),
        ("Was war am Montag beim Kunden?", "2026-11-30"),
        ("Notizen vom Montag", "2026-11-30"),
    ],
)
def test_a_weekday_with_a_past_form_in_its_own_clause_is_the_last_one(said: str, day: str) -> None:
    """The narrow rule still reads the plain questions: the past form in the weekday's clause."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until) == (day, day), (said, f)


def test_weekday_heavy_text_is_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each "am Montag" without a tense rescanned the whole text (4,000 characters took 60 ms, 50 kB
    6 s): the weekday rule looks at a text once, whatever its number of weekdays."""
    calls = []
    alone = days.phrase_alone
    for module in (days, day_phrases, day_since):  # each module that asks it
        monkeypatch.setattr(module, "phrase_alone", lambda m: calls.append(m) or alone(m))
    for text in ("Meeting am Montag. " * 200, "Meeting on Friday, " * 200 + "what did I do on Monday?"):
        assert days.time_window(text, TODAY)[1] is None
        assert len(calls) <= 1
        calls.clear()


@pytest.mark.parametrize(
    ("message", "asks"),
    [
        ("Was war gestern?", True),
        ("What happened yesterday?", True),
        ("Was war am Samstag?", True),
        ("Was war vor 11 Tagen?", True),
        ("Was ist am Samstag passiert?", True),
        ("what was on Saturday?", True),
        ("What happened last week?", True),
        ("what happened last week?", True),
        ("Was ist gestern passiert?", True),
        ("Was war denn gestern?", True),
        ("What has happened on Saturday?", True),
        # something of its own, in stop words too: its words answer it
        ("What was that yesterday?", False),
        ("What was it like yesterday?", False),
        ("was war das denn gestern?", False),
        ("what was that about yesterday?", False),
        # English, not German "was"
        ("Was that what happened yesterday?", False),
        ("Was happened yesterday?", False),
        ("what was the weather yesterday?", False),
        ("Was war das Ergebnis gestern?", False),
        # someone addressed, a modal, no question, no question word first
        ("what happened to you yesterday?", False),
        ("was war bei dir gestern los?", False),
        ("what should have happened yesterday?", False),
        ("was war gestern", False),
        ("yesterday was fun?", False),
        # "what's up": small talk, not a question about the notes
        ("Was ist heute los?", False),
        ("What's going on today?", False),
        ("What's happening today?", False),
    ],
)
def test_a_question_about_what_happened_in_a_period(message: str, asks: bool) -> None:
    """'Was war gestern?', 'What happened yesterday?' ask about that period's notes as 'what did I
    do yesterday?' does (recall listed nothing and said no note had that date); small talk and a
    question about something of its own do not."""
    text, f = split_filters(message, TODAY)
    assert f.phrase is not None, message
    assert query.asks_what_happened(message, text) is asks
    if asks:
        assert not query.is_small_talk(message)


def test_no_off_topic_message_asks_what_happened() -> None:
    """The off-topic benchmarks' messages (recall must inject nothing for them) ask about no
    period's notes: the new reading lists nothing for any of them."""
    bench = Path(__file__).parent.parent / "bench"
    lines = [
        line.strip()
        for name in sorted(bench.glob("offtopic*.txt"))
        for line in name.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(lines) > 500
    for line in lines:
        text, _ = split_filters(line, TODAY)
        assert not query.asks_what_happened(line, text), line


@pytest.mark.parametrize(
    ("said", "window"),
    [
        ("Was war am Wochenende?", ("2026-11-28", "2026-11-29")),
        ("Was habe ich am Wochenende gemacht?", ("2026-11-28", "2026-11-29")),
        ("Was habe ich übers Wochenende geschrieben?", ("2026-11-28", "2026-11-29")),
        ("What did I do on the weekend?", ("2026-11-28", "2026-11-29")),
        ("What happened at the weekend?", ("2026-11-28", "2026-11-29")),
        # no past form, the agenda, a habit, a list: words, as before
        # a follow-up of the weekend alone, asked: as "und am Donnerstag?" is the last Thursday
        ("und am Wochenende?", ("2026-11-28", "2026-11-29")),
        ("Am Wochenende?", ("2026-11-28", "2026-11-29")),
        ("and on the weekend?", ("2026-11-28", "2026-11-29")),
        # asked however it ends: "?!" and "??" as "?" and " ?" (it was words)
        ("und am Wochenende?!", ("2026-11-28", "2026-11-29")),
        ("und am Wochenende ?", ("2026-11-28", "2026-11-29")),
        ("und am Wochenende??", ("2026-11-28", "2026-11-29")),
        ("Was machst du am Wochenende?", None),
        ("Was steht am Wochenende an?", None),
        ("Ausflug am Wochenende", None),
        ("am Wochenende", None),
        ("und am Wochenende", None),
        ("am Wochenende schlafe ich aus", None),
        ("What did we do on Friday and at the weekend?", None),
    ],
)
def test_the_weekend_in_a_past_question_is_the_last_one(said: str, window: tuple[str, str] | None) -> None:
    """'Was war am Wochenende?' was words (recall listed nothing) while 'over the weekend' was the
    weekend just gone: with a past form in its clause it is that weekend too."""
    rest, f = split_filters(said, TODAY)
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)
    if window is None:
        assert rest == said


@pytest.mark.parametrize(
    ("said", "today", "day"),
    [
        # asked before that day this year: the last one, last year's (it was words past a month)
        ("Was war am 24.12.?", TODAY, "2025-12-24"),
        ("Was habe ich am 24.12. gemacht?", TODAY, "2025-12-24"),
        ("What did I do on December 24?", TODAY, "2025-12-24"),
        # asked after it: this year's, also months on
        ("Was war am 24.12.?", dt.date(2026, 12, 30), "2026-12-24"),
        ("Was war am 24.12.?", dt.date(2027, 3, 10), "2026-12-24"),
        # the agenda stays the coming one, a day with no tense a month's grace (else words)
        ("Was steht am 24.12. an?", TODAY, "2026-12-24"),
        ("Was steht am 24.12. an?", dt.date(2027, 3, 10), "2027-12-24"),
        ("Geschenke am 24.12.", TODAY, None),
        ("Geschenke am 24.12.", dt.date(2026, 12, 30), "2026-12-24"),
    ],
)
def test_a_day_in_a_past_question_is_the_last_one(said: str, today: dt.date, day: str | None) -> None:
    """A day with no year in a past question is the last one however long ago, as a day notes
    are "from" is; the agenda's reading and a tenseless day's stay as they were."""
    f = split_filters(said, today)[1]
    assert ((f.since, f.until) if f.phrase else None) == ((day, day) if day else None), (said, today, f)


def test_a_year_ago_is_the_week_around_that_day() -> None:
    """'vor einem Jahr' / 'a year ago' was words (or would have been a whole calendar year): the
    seven days centred on that day, whatever its weekday; a leap day a year on is February 28th's."""
    for said in ("Was habe ich vor einem Jahr gemacht?", "What did I do a year ago?"):
        f = split_filters(said, TODAY)[1]
        assert (f.since, f.until) == ("2025-11-29", "2025-12-05"), said
    f = split_filters("a year ago", dt.date(2028, 2, 29))[1]
    assert (f.since, f.until) == ("2027-02-25", "2027-03-03")
    # the words of a plain search stay words
    for plain in ("Urlaub Ende Dezember", "budget next year"):
        rest, f = split_filters(plain, TODAY)
        assert (rest, f.phrase) == (plain, None)


@pytest.mark.parametrize(
    ("said", "window"),
    [
        # beside a word of its own, "vor einem Jahr" is said loosely: words (a week hid the note)
        ("Wärmepumpe vor einem Jahr", None),
        ("Welche Wärmepumpe habe ich vor einem Jahr gekauft?", None),
        ("vor 5 Jahren Umzug", None),
        ("What did I buy a year ago for the garden?", None),
        # asking only what happened then: the week about that day
        ("Was war vor einem Jahr?", ("2025-11-29", "2025-12-05")),
        ("Was ist vor einem Jahr passiert?", ("2025-11-29", "2025-12-05")),
        ("Was war vor 5 Jahren?", ("2021-11-29", "2021-12-05")),
        # "heute vor einem Jahr", "a year ago today": that very day, on the same terms
        ("Was war heute vor einem Jahr?", ("2025-12-02", "2025-12-02")),
        ("heute vor einem Jahr", ("2025-12-02", "2025-12-02")),
        ("What happened a year ago today?", ("2025-12-02", "2025-12-02")),
        ("What did I do today a year ago?", ("2025-12-02", "2025-12-02")),
        ("Wärmepumpe heute vor einem Jahr", None),  # nor is it today
        ("Rechnung a year ago today", None),
    ],
)
def test_a_year_back_only_in_a_question_about_what_happened(
    said: str, window: tuple[str, str] | None
) -> None:
    """A year back is read as its days only when the message asks what happened then and nothing
    else; otherwise the phrase and any word of time inside it are words."""
    rest, f = split_filters(said, TODAY)
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)
    if window is None:
        assert rest == said


@pytest.mark.parametrize(
    ("said", "window"),
    [
        # another time phrase or a year says which weekend: that phrase is read, the weekend words
        ("Wie war das Wetter am Wochenende in Berlin letztes Jahr?", ("2025-01-01", "2025-12-31")),
        ("Was war am Wochenende 2025?", None),
        ("What did I do on the weekend in May 2025?", ("2025-05-01", "2025-05-31")),
        # the weekend's clause is no question about what happened: words, in German as in English
        ("Ich war am Wochenende krank, was hilft gegen Husten?", None),
        ("I was sick on the weekend, what helps against a cough?", None),
        ("Am Wochenende war ich krank.", None),
        # a question about it still is the weekend gone
        ("Und was war am Wochenende?", ("2026-11-28", "2026-11-29")),
        ("Habe ich am Wochenende Sport gemacht?", ("2026-11-28", "2026-11-29")),
    ],
)
def test_the_weekend_gives_way_to_a_closer_phrase_and_needs_a_question(
    said: str, window: tuple[str, str] | None
) -> None:
    """'am Wochenende … letztes Jahr' was this week's weekend with 'letztes Jahr' left as words,
    and 'Ich war am Wochenende krank, was hilft gegen Husten?' limited the hits to the weekend."""
    rest, f = split_filters(said, TODAY)
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)
    if window is None:
        assert rest == said


_YEAR_BACK = ("2025-12-02", _TODAY)
_LAST_WEEK = ("2026-11-23", "2026-11-29")


@pytest.mark.parametrize(
    ("said", "window"),
    [
        # a question about what was written in a period: "about <thing>" before the duration
        # names the topic, not a thing the duration belongs to
        ("What did I write about garlic since a year?", _YEAR_BACK),
        ("Was habe ich über Knoblauch seit einem Jahr geschrieben?", _YEAR_BACK),
        ("Was habe ich seit einem Jahr über Knoblauch geschrieben?", _YEAR_BACK),
        ("What did I note about the budget since 2 months?", ("2026-10-02", _TODAY)),
        ("Was habe ich zum Budget seit drei Monaten notiert?", ("2026-09-02", _TODAY)),
        ("Welche Notizen habe ich seit Montag über Lyon geschrieben?", ("2026-11-30", _TODAY)),
        # what happened, with a topic beside it: the period and the words
        ("what happened with the budget last week?", _LAST_WEEK),
        ("Was ist letzte Woche mit dem Budget passiert?", _LAST_WEEK),
        ("Was ist seit einem Jahr passiert?", _YEAR_BACK),
        ("What happened since a year?", _YEAR_BACK),
        ("Was hat sich seit letzter Woche geändert?", ("2026-11-23", _TODAY)),
        ("What has changed since last week?", ("2026-11-23", _TODAY)),
        # keywords and requests
        ("Knoblauch seit drei Tagen", ("2026-11-29", _TODAY)),
        ("garlic since 2 weeks", ("2026-11-18", _TODAY)),
        ("Budget Meeting seit einem Monat", ("2026-11-02", _TODAY)),
        ("Show me my notes since last week", ("2026-11-23", _TODAY)),
        ("Zeig mir meine Notizen seit Montag", ("2026-11-30", _TODAY)),
        ("I need my notes since Monday", ("2026-11-30", _TODAY)),
        ("Ich suche alles seit letzter Woche zum Budget", ("2026-11-23", _TODAY)),
        # a state stated, with a noun or a pronoun for its subject: words
        ("Knoblauch wächst seit einem Jahr", None),
        ("Tomaten blühen seit einer Woche", None),
        ("Der Server läuft seit 2 Wochen", None),
        ("Ich bin seit gestern krank, was hilft?", None),
        ("I have been sick since Monday, what helps?", None),
        ("Ich wohne seit März in Berlin, welcher Arzt war gut?", None),
        ("Since last week I feel tired, is it the flu?", None),
        ("Das Projekt läuft seit März gut", None),
        ("Seit Montag regnet es, was soll ich anziehen?", None),
        # a month in a question in the present of happening or doing is the one to come: no
        # window of the one gone by (the agenda's plain words read the coming one)
        ("Was passiert im März?", None),
        ("What happens in March?", None),
        ("Was mache ich im März?", None),
        ("What am I doing in March?", None),
        ("Was ist im März passiert?", ("2026-03-01", "2026-03-31")),
        ("What did I do in March?", ("2026-03-01", "2026-03-31")),
        ("Was steht im März an?", ("2027-03-01", "2027-03-31")),
        # a period to come is no window of days gone by
        ("Was habe ich nächsten Monat vor?", None),
        ("What do I have planned next month?", None),
    ],
)
def test_a_period_asked_about_or_a_state_stated(said: str, window: tuple[str, str] | None) -> None:
    """A message asking what happened or was written in a period reads its window; one stating how
    long a state lasts, or asking about a month to come, keeps its words. 'What did I write about
    garlic since a year?' was words (the duration taken for the garlic's), 'Knoblauch wächst seit
    einem Jahr' and 'Ich bin seit gestern krank, was hilft?' were windows (a state's duration),
    'Was passiert im März?' asked in December the March gone by (recall listed its notes)."""
    rest, f = split_filters(said, TODAY)
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)
    if window is None:
        assert rest == said


@pytest.mark.parametrize(
    ("said", "word"),
    [
        ("what happened with the budget last week?", "budget"),
        ("Was ist letzte Woche mit dem Budget passiert?", "budget"),
    ],
)
def test_what_happened_with_a_topic_is_the_period_and_the_topic(said: str, word: str) -> None:
    """'what happened with the budget last week?' is last week's window, and 'budget' is still
    searched in it."""
    rest, f = split_filters(said, TODAY)
    assert (f.since, f.until) == _LAST_WEEK
    assert word in [w.lower() for w in query.analyze(rest).content_words]


_SINCE_MONDAY = ("2026-11-30", _TODAY)
_MARCH_GONE = ("2026-03-01", "2026-03-31")


@pytest.mark.parametrize(
    ("said", "window"),
    [
        # keywords, whatever their case, and requests keep a duration's window
        ("Meeting notes since 2 weeks", ("2026-11-18", _TODAY)),
        ("Project kickoff since a month", ("2026-11-02", _TODAY)),
        ("Notizen zum neuen Projekt seit einem Monat", ("2026-11-02", _TODAY)),
        ("Budget meeting seit einem Monat", ("2026-11-02", _TODAY)),
        ("Notes about garlic since a year", _YEAR_BACK),
        ("Anything new since a week?", ("2026-11-25", _TODAY)),
        ("Show me my notes since a week", ("2026-11-25", _TODAY)),
        ("I need my notes since a week", ("2026-11-25", _TODAY)),
        ("Ich brauche meine Notizen seit einer Woche", ("2026-11-25", _TODAY)),
        # English is not read by its capitals: a noun subject stays keywords
        ("Garlic grows since a year", _YEAR_BACK),
        ("The heating is broken since a week", ("2026-11-25", _TODAY)),
        ("The heating is broken since Monday, what should I do?", _SINCE_MONDAY),
        ("My back hurts since Monday, what helps?", _SINCE_MONDAY),
        # one's own doings, in a relative clause or a perfect, ask for the notes
        ("Everything I've read since Monday", _SINCE_MONDAY),
        ("Alles, was ich seit Montag gelesen habe", _SINCE_MONDAY),
        ("Bücher, die ich seit Januar gelesen habe", ("2026-01-01", _TODAY)),
        ("Stuff I cooked since last week", ("2026-11-23", _TODAY)),
        ("I haven't slept since Monday, what helps?", _SINCE_MONDAY),
        ("I have been tracking my sleep since Monday", _SINCE_MONDAY),
        ("He has been working on the budget since March", ("2026-03-01", _TODAY)),
        # a request or a question about one's doings anywhere in the message
        ("I've been tracking my sleep since Monday, how did it go?", _SINCE_MONDAY),
        ("Ich lese seit Montag Dune, was habe ich dazu notiert?", _SINCE_MONDAY),
        ("Mir geht es seit Montag schlecht. Was habe ich gegessen?", _SINCE_MONDAY),
        ("Ich bin seit gestern krank. Zeig mir meine Notizen.", ("2026-12-01", _TODAY)),
        ("User says: I have been sick since Monday. Find related notes.", _SINCE_MONDAY),
        # German keywords: a noun and a word that is no verb
        ("Mein Gewicht morgens seit Januar", ("2026-01-01", _TODAY)),
        ("Die Rechnungen offen seit März", ("2026-03-01", _TODAY)),
        ("Das Budget aktuell seit März", ("2026-03-01", _TODAY)),
        ("Die Kosten insgesamt seit Januar", ("2026-01-01", _TODAY)),
        ("Heizung kaputt seit 3 Tagen", ("2026-11-29", _TODAY)),
        # a state stated: a German noun and its verb, a subject pronoun
        ("Knoblauch wächst seit März", None),
        ("Die Heizung ist seit Montag kaputt, was tun?", None),
        ("Anna ist seit Montag krank, was hilft?", None),
        ("Mir ist seit gestern schlecht, was hilft?", None),
        ("Ich habe seit gestern Fieber, was hilft?", None),
        # a month: the one to come only where its own clause asks about it
        ("What will happen in March?", None),
        ("Was wird im März passieren?", None),
        ("Was machen wir im März?", None),
        ("Was tun wir im März?", None),
        ("What do we do in March?", None),
        ("What is the team doing in March?", None),
        ("Was ist im März los?", None),
        ("Was passiert im März", None),
        ("What's happening in March", None),
        ("Was passiert im März? Ich muss planen.", None),
        ("Was mache ich im März, wenn Anna da ist?", None),
        ("Photos from Lyon in January, what am I doing with them?", ("2026-01-01", "2026-01-31")),
        ("Im Januar in Lyon gewesen, was mache ich jetzt mit den Fotos?", ("2026-01-01", "2026-01-31")),
        ("Wie viel macht die Stromrechnung im Januar?", ("2026-01-01", "2026-01-31")),
        ("What happens to garlic in March?", _MARCH_GONE),
        ("Was macht man im März im Garten?", _MARCH_GONE),
        ("What do I usually do in March?", _MARCH_GONE),
        ("What were we doing in March?", _MARCH_GONE),
    ],
)
def test_a_state_needs_clear_words_and_a_month_to_come_its_own_clause(
    said: str, window: tuple[str, str] | None
) -> None:
    """Time words read as a state (no window) only on clear words in the phrase's own clause, and a
    month as the one to come only where its own clause asks about it. Sentence-case keywords
    ('Meeting notes since 2 weeks'), requests, relative clauses ('Alles, was ich seit Montag
    gelesen habe') and German keywords ('Mein Gewicht morgens seit Januar') had lost their
    window; 'What will happen in March?' listed the March gone by; 'Photos from Lyon in January,
    what am I doing with them?' lost its January."""
    rest, f = split_filters(said, TODAY)
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)
    if window is None:
        assert rest == said


@pytest.mark.parametrize(
    ("said", "since"),
    [
        ("Seit Januar erledigten Aufgaben", "2026-01-01"),
        ("Seit Januar bezahlten Rechnungen", "2026-01-01"),
        ("seit März offenen Tickets", "2026-03-01"),
        ("Die Ausgaben gesamt seit Januar pro Monat", "2026-01-01"),
        ("Der Umsatz getrennt seit Januar nach Kunde", "2026-01-01"),
        ("Ausgaben zusammen seit Januar für Lebensmittel", "2026-01-01"),
        ("Stromverbrauch gemessen seit März im Keller", "2026-03-01"),
        ("Gewicht gemessen seit Januar täglich", "2026-01-01"),
        ("Die Kosten gestiegen seit Januar um 10 Prozent", "2026-01-01"),
        ("seit Montag offen Bugs", "2026-11-30"),
        ("Seit Januar mit Anna", "2026-01-01"),
        ("seit März mit der Bahn zur Arbeit", "2026-03-01"),
        ("seit Januar gegen die Grippe", "2026-01-01"),
        ("seit Januar zwischen Anna und Tom", "2026-01-01"),
        ("seit März dort die Tomaten", "2026-03-01"),
        ("Seit Montag wegen der Heizung", "2026-11-30"),
        ("since January about Kubernetes", "2026-01-01"),
        ("since January about Project Alpha", "2026-01-01"),
        ("since March without Anna", "2026-03-01"),
        ("since Monday between Anna and Tom", "2026-11-30"),
    ],
)
def test_keywords_with_a_participle_an_adjective_or_a_preposition_keep_their_window(
    said: str, since: str
) -> None:
    """Keyword searches whose phrase is followed by a participle, an adjective or a preposition
    ending as a German finite verb ('erledigten', 'gemessen', 'mit', 'about') ask for the period's
    notes: reading any word ending in -t or -n as a verb took their window away."""
    _, f = split_filters(said, dt.date(2026, 12, 6))
    assert (f.since, f.until) == (since, "2026-12-06"), (said, f)


class _CountingScans:
    """A compiled pattern that counts its scans of a text (finditer calls)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scans = 0

    def finditer(self, *args: object) -> object:
        self.scans += 1
        return self.pattern.finditer(*args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.pattern, name)


@pytest.mark.parametrize(
    "unit",
    ["Notizen aus März ", "Notizen von Oktober bis Mai und Juni, ", "notes in July or August "],
)
def test_a_long_message_scans_its_month_names_once(unit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each month phrase that failed as one of two months in its clause scanned the clause's
    month names again: 'Notizen aus März ' * 2000 took by the square of its length (seconds).
    The names are found once per text, whatever the number of phrases in it."""
    counting = _CountingScans(day_phrases._ANY_NAMED_MONTH)
    monkeypatch.setattr(day_phrases, "_ANY_NAMED_MONTH", counting)
    text = unit * 150
    assert days.time_window(text, TODAY)[1] is None
    assert counting.scans <= 1, counting.scans


def test_a_long_message_of_look_alikes_reads_a_bounded_number_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each range read as a label looked at its clause from the text's start: 'Stromrechnung
    März bis Mai. ' * 2000 took seconds. A pattern's matches are tried while the characters
    before them, summed, stay under a bound (each try's cost), and a period after a hundred
    look-alikes is still read."""
    calls = 0
    clause_asks = days.clause_asks

    def counting(m: re.Match[str]) -> bool:
        nonlocal calls
        calls += 1
        return clause_asks(m)

    for module in (days, day_since):  # each module that asks it
        monkeypatch.setattr(module, "clause_asks", counting)
    assert days.time_window("Stromrechnung März bis Mai. " * 2000, TODAY)[1] is None
    # the characters scanned before the tries stay under the bound: a few hundred, not 2000
    assert 0 < calls < 400, calls
    said = "Stromrechnung März bis Mai. " * 5 + "Was habe ich von März bis Mai gemacht?"
    assert days.time_window(said, TODAY)[1] == (dt.date(2026, 3, 1), dt.date(2026, 5, 31))


@pytest.mark.parametrize(
    ("said", "phrase"),
    [
        (
            "Stromrechnung von März bis Mai 2025. " * 100 + "Was habe ich von Juni bis Juli 2025 gemacht?",
            "von Juni bis Juli 2025",
        ),
        (
            "Unterschied zwischen März und Mai. " * 100 + "Was habe ich zwischen Juni und Juli 2025 gemacht?",
            "zwischen Juni und Juli 2025",
        ),
        ("Before last March I was sad. " * 100 + "What did I do last March?", "last March"),
    ],
)
def test_a_period_after_many_look_alikes_is_read(said: str, phrase: str) -> None:
    """A pattern's matches were tried 32 times per text: a real period after 32 look-alikes of
    the same pattern (a pasted text, an agent's context) was dropped."""
    assert days.time_window(said, dt.date(2026, 12, 7))[2] == phrase


_DEC_TO_FEB_GONE = ("2025-12-01", "2026-02-28")
_DEC_TO_FEB_BEGUN = ("2026-12-01", "2027-02-28")


@pytest.mark.parametrize(
    ("today", "said", "window"),
    [
        # begun this month, asked about the past or with no tense: the last one whole
        (dt.date(2026, 12, 7), "Was habe ich von Dezember bis Februar gemacht?", _DEC_TO_FEB_GONE),
        (dt.date(2026, 12, 7), "What did I do from December to February?", _DEC_TO_FEB_GONE),
        (dt.date(2026, 12, 7), "notes from December to February", _DEC_TO_FEB_GONE),
        (dt.date(2026, 12, 7), "Notizen zwischen Dezember und Februar", _DEC_TO_FEB_GONE),
        (dt.date(2026, 3, 15), "Notizen von März bis Mai", ("2025-03-01", "2025-05-31")),
        (dt.date(2026, 3, 15), "What did I write between March and May?", ("2025-03-01", "2025-05-31")),
        # asked about the agenda: the coming one, whole
        (dt.date(2026, 12, 7), "Was habe ich von Dezember bis Februar vor?", _DEC_TO_FEB_BEGUN),
        # asked in the present of doing: the one begun, whole, also past the year's turn
        (dt.date(2026, 12, 7), "What am I doing from December to February?", _DEC_TO_FEB_BEGUN),
        (dt.date(2026, 12, 7), "Was mache ich von Dezember bis Februar?", _DEC_TO_FEB_BEGUN),
        (dt.date(2027, 1, 5), "What am I doing from December to February?", _DEC_TO_FEB_BEGUN),
        (dt.date(2027, 1, 5), "Was mache ich von Dezember bis Februar?", _DEC_TO_FEB_BEGUN),
        # a month in: the one begun, up to today, as before
        (dt.date(2027, 1, 5), "Was habe ich von Dezember bis Februar gemacht?", ("2026-12-01", "2027-01-05")),
        # in the present of doing, none begun: no window, as "Was mache ich im März?" is none
        (dt.date(2026, 12, 7), "What am I doing from March to May?", None),
    ],
)
def test_a_range_begun_this_month_is_the_one_a_person_means(
    today: dt.date, said: str, window: tuple[str, str] | None
) -> None:
    """'von Dezember bis Februar' asked on December 7th was December 1st to 7th: a range whose
    first month had just begun covered only its days so far, for a question about the past and
    one about what one does alike."""
    f = split_filters(said, today)[1]
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)


@pytest.mark.parametrize(
    ("today", "said", "window"),
    [
        (
            dt.date(2026, 12, 7),
            "What do I have to do between January and March?",
            ("2027-01-01", "2027-03-31"),
        ),
        (
            dt.date(2026, 12, 7),
            "Was muss ich zwischen Januar und März erledigen?",
            ("2027-01-01", "2027-03-31"),
        ),
        (
            dt.date(2026, 12, 7),
            "Welche Termine habe ich zwischen Januar und März?",
            ("2027-01-01", "2027-03-31"),
        ),
        (dt.date(2026, 12, 7), "What meetings do I have between December and February?", _DEC_TO_FEB_BEGUN),
        (dt.date(2026, 12, 7), "Welche Termine habe ich von Dezember bis Februar?", _DEC_TO_FEB_BEGUN),
        (dt.date(2026, 12, 7), "What do I have to do from December to February?", _DEC_TO_FEB_BEGUN),
        # a past form: the range gone by, as before
        (
            dt.date(2026, 12, 7),
            "Welche Termine hatte ich zwischen Januar und März?",
            ("2026-01-01", "2026-03-31"),
        ),
        (
            dt.date(2026, 12, 7),
            "What meetings did I have between January and March?",
            ("2026-01-01", "2026-03-31"),
        ),
    ],
)
def test_a_range_asked_about_ones_duties_is_the_coming_one(
    today: dt.date, said: str, window: tuple[str, str] | None
) -> None:
    """'What do I have to do between January and March?' asked in December was last January to
    March, 'What meetings do I have between December and February?' December 1st to 7th, and the
    from/von form none: a question about one's duties or appointments asks about the coming range."""
    f = split_filters(said, today)[1]
    assert ((f.since, f.until) if f.phrase else None) == window, (said, f)


@pytest.mark.parametrize(
    "said",
    [
        "Kann man heute noch Faxe senden?",
        "Gibt es noch heute Disketten?",
        "Was nutzt man heute für Backups?",
        "Wie macht man heute Backups?",
        "Wie synchronisiert man heute einen Vault?",
        "how do people today sync their vault",
        "How do you sync a vault today?",
        "How to back up a vault today",
        "What do people today use for backups?",
        "Do kids today still use floppy disks?",
        "Is it still today the best way to sync?",
    ],
)
def test_today_said_of_the_present_at_large_stays_words(said: str) -> None:
    """'heute'/'today' in a how-to question of a generic subject, after 'noch'/'still' or after
    people in general, in a question, was a window of today: the notes that answer 'Wie macht man
    heute Backups?', written any day, were hidden."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.phrase) == (None, None), (said, f)


@pytest.mark.parametrize(
    ("said", "phrase"),
    [
        ("Was habe ich heute gemacht?", "heute"),
        ("Wie habe ich heute geschlafen?", "heute"),
        ("How did I sleep today?", "today"),
        ("Was muss ich heute noch erledigen?", "heute"),
        ("What do I still need to do today?", "today"),
        ("Was steht heute noch an?", "heute"),
        ("Was mache ich heute noch?", "heute"),
        ("Wie sieht mein Tag heute aus?", "heute"),
        ("How many steps did I walk today?", "today"),
        ("Notizen von heute", "heute"),
        ("Finde alle heute geänderten Dateien", "heute"),  # "alle": all of them, not everyone
        ("heute?", "heute"),
        ("seit heute", "seit heute"),
        # "heute noch" is "before the day ends", as "still … today" is
        ("Habe ich heute noch Termine?", "heute"),
        ("Do I still have meetings today?", "today"),
        ("Was ist heute noch zu tun?", "heute"),
        ("What is still to do today?", "today"),
        ("Was kommt heute noch?", "heute"),
        ("What else is still coming today?", "today"),
        ("Welche Aufgaben habe ich heute noch?", "heute"),
        ("Which tasks are still open today?", "today"),
        ("heute noch offen", "heute"),
        ("Ist Fax heute noch üblich?", "heute"),  # a question, but no how-to, no people: the day's
        # a how-to question of one's own day ("I", "my"): the day's, not the present at large
        ("Wie fühle ich mich heute?", "heute"),
        ("How do I feel today?", "today"),
        ("Wie plane ich heute meinen Tag?", "heute"),
        ("How do I plan my day today?", "today"),
        ("How do I get everything done today?", "today"),
        ("Wie kriege ich heute alles erledigt?", "heute"),
        ("Wie kann ich mich heute entspannen?", "heute"),
        ("How can I relax today?", "today"),
        ("wie finde ich heute noch alte Dateien", "heute"),
        ("How do I sync my vault today?", "today"),
        # keywords with people beside: no question, the day's
        ("Meeting with people today", "today"),
        ("Leute heute Meeting", "heute"),
    ],
)
def test_today_tied_to_the_day_is_its_window(said: str, phrase: str) -> None:
    """A past form, a plan or a duty in its clause, a word of one's own ('ich', 'my'), or no
    how-to question of a generic subject, ties 'heute'/'today' to this day. 'heute noch' ('Habe ich
    heute noch Termine?') and a how-to of one's own day ('How do I plan my day today?') were
    words, where 'Do I still have meetings today?' was this day."""
    f = split_filters(said, TODAY)[1]
    assert (f.since, f.until, f.phrase) == (_TODAY, _TODAY, phrase), (said, f)


@pytest.mark.parametrize(
    ("said", "phrase"),
    [
        # a month's name with no preposition nor "last" before "and" is a person's
        ("Was habe ich mit Mai und gestern besprochen?", "gestern"),
        ("What did I talk about with April and yesterday?", "yesterday"),
        ("Termine mit Mai und gestern", "gestern"),
        # a month after a preposition or "last" joined to a period: no window
        ("Notizen aus März und gestern", None),
        ("notes from March and yesterday", None),
        ("im vergangenen März und gestern", None),
        ("Notizen aus dem März und gestern", None),
    ],
)
def test_only_a_month_after_its_lead_is_a_period_joined_by_and(said: str, phrase: str | None) -> None:
    """'Mai'/'April' as a person before 'und' was taken for a period joined to the next one, and
    'mit Mai und gestern' had no window."""
    assert days.time_window(said, dt.date(2026, 12, 7))[2] == phrase
