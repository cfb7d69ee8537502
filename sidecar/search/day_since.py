"""Time phrases of "since" (pure): since a point ("since Monday", "seit dem 3. Dezember", "ab März
2025"), a duration up to today ("seit 3 Tagen", "since a year"), and whether the clause around
such a phrase states a state ("Ich bin seit gestern krank") rather than asking for the period's
notes. Imports ``day_calendar``, ``day_phrases`` and ``tense``."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable

from sidecar.search.day_calendar import (
    _ISO_DAY,
    _MONTH,
    _NO_RANGE,
    _NUM,
    _OF_SOMETHING,
    _ROLLING_START,
    _UNITS_DE,
    _UNITS_EN,
    _WD,
    _YEAR_OF,
    _YEAR_SAID,
    FilterError,
    Phrase,
    PhraseWindow,
    Reading,
    Window,
    _last_weekday,
    _month,
    _named_month,
    _num,
    _week,
    _weekday_number,
    _year,
    parse_day,
)
from sidecar.search.day_phrases import (
    _DAY_FORMS,
    _NUMERIC_DAY,
    _LoosePhraseError,
    _numeric_day,
    _one_month_in_its_clause,
)
from sidecar.search.tense import (
    clause_asks,
    clause_says_done,
    ends_asked,
    phrase_alone,
    says_done,
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
