"""Tense (pure): whether a question speaks of what happened or of what is to come, so that a weekday
or a date in it names the last one or the coming one ("Was war am Donnerstag?", "Was hat der Arzt am
Montag gesagt?" against "Was steht am Donnerstag an?"). The weekday's own clause is read for a past
form, a future or a duty; the whole question for the agenda. Imports nothing of the project but
``words``."""

from __future__ import annotations

import re

from sidecar.search.words import WORD


def phrase_alone(m: re.Match[str]) -> bool:
    """Whether the phrase is the whole message, a conjunction aside ("und am Donnerstag?")."""
    around = WORD.findall(m.string[: m.start()] + " " + m.string[m.end() :])
    return all(w.lower() in ("and", "und", "or", "oder") for w in around)


_ASKED_END = re.compile(r"\?[?!\s]*$")


def ends_asked(text: str) -> bool:
    """Whether ``text`` ends as a question: "?", also "?!", "??" or "? " (and "und am Wochenende
    ?!" is asked as "und am Wochenende?" is)."""
    return _ASKED_END.search(text) is not None


# Where a weekday's clause begins and ends: punctuation, or a word that opens a clause of its own.
# After a conjunction ("Where did I write that the dentist is on Friday?", "Wo hatte ich notiert,
# dass der Zahnarzt am Freitag ist?") the past form is the writing, the weekday the event's: words.
_SUBORDINATE = (
    "dass",
    "daß",
    "that",
    "ob",
    "whether",
    "if",
    "weil",
    "because",
    "als",
    "wenn",
    "when",
    "while",
)
_CLAUSE_EDGE = re.compile(
    r"[.!?;:,()\[\]\n]|\b(?:" + "|".join(_SUBORDINATE) + r"|what|which|where|who|was|wo|wann|wer|"
    r"welche[rnms]?|wie|how)\b",
    re.IGNORECASE,
)
# Past forms in the weekday's own clause ("passiert" only beside "ist"/"sind": "Was passiert am
# Freitag?" is the Friday to come).
_DONE = re.compile(
    r"\b(?:did|were|had|wrote|written|happened|worked|decided|talked|met|hatte\w*|war(?:en|st)?"
    r"|wurde\w*|gab|gemacht|getan|geschrieben|notiert|gearbeitet|erledigt|geschehen"
    r"|entschieden|besprochen|gesprochen|beschlossen)\b|\bwas\s+(?:planned|scheduled|on|there|it|i|the|my|our)\b",
    re.IGNORECASE,
)
_HAPPENED_DE = (re.compile(r"\bpassiert\b", re.IGNORECASE), re.compile(r"\b(?:ist|sind)\b", re.IGNORECASE))
# English past forms a question about what someone said or did uses ("what the doctor said on
# Monday"); "read" and "left" are left out ("what's left on Friday" is a day to come).
_DONE_EN = re.compile(
    r"\b(?:said|told|sent|asked|called|saw|went|got|made|bought|paid|spent|heard|found|lost|forgot"
    r"|mentioned|agreed|promised|suggested|recommended|learned|learnt|ate|gave|took)\b",
    re.IGNORECASE,
)
_NOW_EN = re.compile(r"\b(?:is|are)\b|'s\b|'re\b", re.IGNORECASE)
# German perfect with "haben": a form of it anywhere in the clause and a past participle as its
# last word, where German puts it ("Was hat der Arzt am Montag gesagt?", "Wen habe ich am Montag
# angerufen?"); lower case only, so a noun that looks like one ("Gebühren") is none. With "sein",
# only verbs of moving or staying ("ist ... geplant" is the plan to come).
_HAVE_DE = re.compile(r"\b(?:hab(?:e|en|t)?|hat|hast)\b", re.IGNORECASE)
_PARTICIPLE_DE = re.compile(
    r"(?:(?:an|auf|aus|ein|mit|vor|zu|nach|ab|weg|zurück|los|fest|her|hin|um)?ge[a-zäöüß]{3,}(?:t|en)"
    r"|(?:be|er|ver|zer|ent|emp|miss)[a-zäöüß]{3,}t)"
)
_BEEN_DE = re.compile(
    r"\b(?:bin|bist|ist|sind|seid)\b.*\b(?:gewesen|gegangen|gefahren|gekommen|geflogen|gelaufen"
    r"|geblieben|angekommen|abgereist|umgezogen|aufgestanden|eingeschlafen|gestorben)\b",
    re.IGNORECASE,
)
# A future or a duty anywhere: "was wird am Donnerstag besprochen?", "what was due on Friday?".
_TO_COME = re.compile(
    r"\b(?:will|shall|gonna|going\s+to|needs?|due|wird|werden|werde|wirst|muss|müssen|soll|sollen|fällig)\b",
    re.IGNORECASE,
)
# A thing the weekday belongs to, after a preposition: "for the party on Saturday", "für die Party
# am Samstag", "about the film Never on Sunday" (the buying or writing came before that day).
_OF_A_THING = re.compile(r"\b(?:for|für|fürs|about|über|zum|zur|to)\s+(?:[\w-]+\s+){1,3}$", re.IGNORECASE)


def _past_form(clause: str) -> bool:
    """Whether ``clause`` says something happened: a past form (see _DONE), "passiert" beside
    "ist", an English past not followed by a present (reported speech), German perfect."""
    if _DONE.search(clause) or _BEEN_DE.search(clause) or all(p.search(clause) for p in _HAPPENED_DE):
        return True
    said = _DONE_EN.search(clause)
    if said and not _NOW_EN.search(clause, said.end()):  # "said the call is on Thursday": reported
        return True
    words = WORD.findall(clause)
    return bool(words) and bool(_HAVE_DE.search(clause)) and bool(_PARTICIPLE_DE.fullmatch(words[-1]))


def clause_says_done(m: re.Match[str], *, of_a_thing: bool = True) -> bool:
    """Whether the weekday's own clause has a past form (see _DONE), no future or duty is said,
    and the clause is no subordinate one (see _SUBORDINATE) nor the weekday a thing's. A duration
    ("since a year") belongs to no thing (``of_a_thing`` False): "What did I write about garlic
    since a year?" asks about the writing of that year, as "the party on Saturday" does not."""
    text = m.string
    if _TO_COME.search(text):
        return False
    begin, opener = 0, ""
    for edge in _CLAUSE_EDGE.finditer(text, 0, m.start()):
        begin, opener = edge.start(), edge.group(0).lower()
    sentence = max(text.rfind(c, 0, begin) for c in ".!?;\n") + 1
    if opener in _SUBORDINATE and WORD.search(text, sentence, begin):
        return False  # a conjunction inside the sentence, not the question's first word
    after = _CLAUSE_EDGE.search(text, m.end())
    clause = text[begin : after.start() if after else len(text)]
    if of_a_thing and _OF_A_THING.search(text[max(begin, m.start() - 60) : m.start()]):
        return False
    return _past_form(clause)


_QUESTION_WORDS = re.compile(r"what|which|where|who|was|wo|wann|wer|welche[rnms]?|wie|how", re.IGNORECASE)


def clause_asks(m: re.Match[str]) -> bool:
    """Whether the phrase's own clause is a question: opened by a question word that begins its
    sentence ("Was habe ich am Wochenende gemacht?", "What did I do on the weekend?"), or ended by
    a question mark ("Und was war am Wochenende?"). Not "I was sick on the weekend, what helps?":
    English "was" inside a sentence is no question word, and a comma ends the clause."""
    text = m.string
    begin, opener = 0, ""
    for edge in _CLAUSE_EDGE.finditer(text, 0, m.start()):
        begin, opener = edge.start(), edge.group(0)
    sentence = max(text.rfind(c, 0, begin) for c in ".!?;\n") + 1
    if _QUESTION_WORDS.fullmatch(opener) and not WORD.search(text, sentence, begin):
        return True
    after = _CLAUSE_EDGE.search(text, m.end())
    return after is not None and after.group(0) == "?"


# A question about the agenda: a named day or month in it is the coming one, a period runs to its
# end ("Was steht am 3. März an?", "was habe ich im Januar vor?", "what's on March 3rd?", "what
# is planned this week?"). Only questions that say so plainly: German separable verbs that end
# their clause ("steht … an", "habe … vor"), English questions opening with "what's on", "what's
# planned", "what do I have on". Words that merely may look ahead ("will", "planned", "werde",
# "geplant", "going to") keep the past reading: "notes on the planned migration in November",
# "Anna said she will call in November", "Wie werde ich die Datei im November los?", "Was habe
# ich im März geplant?" ask about notes already written. A past form or reported speech in the
# text keeps the past reading too ("was hatte ich am 3. März geplant?", "Anna sagte, was am 3.
# März ansteht").
_AGENDA = re.compile(
    r"\bsteh(?:e|st|t|en)\b(?:[^.?!;]|(?<=\d)\.)*\ban\s*(?:[?.!;]|$)"
    r"|\b(?:hab(?:e|en)?|hast|hat|habt)\b(?:[^.?!;]|(?<=\d)\.)*\bvor\s*(?:[?.!;]|$)"
    r"|^\W*what(?:'s|’s|\s+is)\s+(?:on|planned)\b"
    r"|^\W*what\s+do\s+(?:i|we)\s+have\s+(?:on|planned)\b",
    re.IGNORECASE,
)
_PAST = re.compile(
    # (German "was" is "what": English "was" only before what it says of the past)
    r"\b(?:did|were|had|wrote|happened|said|told|asked|hatte\w*|war(?:en|st)?|wurde\w*|gemacht"
    r"|notiert|geschrieben|gesagt|sagte\w*|meinte\w*|erzählte\w*|fragte\w*|schrieb\w*)\b"
    r"|\bwas\s+(?:planned|scheduled|on|due|there|it|i)\b",
    re.IGNORECASE,
)


def asks_ahead(text: str) -> bool:
    """Whether ``text`` asks about the agenda (see _AGENDA)."""
    return _AGENDA.search(text) is not None and _PAST.search(text) is None


# A question in the present of happening or doing: "Was passiert im März?", "Was mache ich im
# März?", "What happens in March?", "What am I doing in March?". A month it names is not one gone
# by (asked in December, read back they listed last March's notes); "Was ist im März passiert?"
# (perfect) and "What was happening in March?" are. Not the agenda's plain words (a weekday
# beside them, "Was passiert am Freitag?", stays words as any tenseless weekday does).
_COMING = re.compile(
    r"\b(?:passier(?:t|en)|geschieht|mach(?:e|st|t)|tu(?:e|st|t)|happens)\b"
    r"|(?:\b(?:am|are|is)|'s|’s|'re|’re|'m|’m)\s+(?:\w+\s+)?(?:happening|doing)\b",
    re.IGNORECASE,
)
_PERFECT_DE = re.compile(r"\b(?:ist|sind|bin|bist|seid)\b", re.IGNORECASE)


def asks_coming(text: str) -> bool:
    """Whether ``text`` is a question in the present of happening or doing (see _COMING), with no
    past form in it."""
    return (
        ends_asked(text)
        and _COMING.search(text) is not None
        and _PERFECT_DE.search(text) is None
        and _PAST.search(text) is None
    )
