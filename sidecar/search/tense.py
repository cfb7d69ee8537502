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


# A question about the month to come, in the month's own clause: opened by "what"/"was", in the
# future ("What will happen in March?", "Was wird im März passieren?"), in the present of
# happening ("Was passiert im März", "What's happening in March?", "Was ist im März los?") or of
# one's doing or planning ("Was machen wir im März?", "What do we do in March?", "What is the team
# doing in March?"). Asked in December, read back they listed last March's notes. Not a habit
# ("Was macht man im März im Garten?", "What happens to garlic in March?", "What do I usually do in
# March?"), not a clause with a past form ("Was ist im März passiert?", "What was happening in
# March?"), and not another clause's question ("Photos from Lyon in January, what am I doing with
# them?", "Wie viel macht die Stromrechnung im Januar?": the month is the one gone by).
_WHAT_OPENS = re.compile(r"\W*(?:(?:and|und)\s+)?(?:what|was)\b", re.IGNORECASE)
_COMING = re.compile(
    r"\b(?:will|wird|werden|happens|passier(?:t|en)|geschieht)\b|['’]ll\b"
    r"|\b(?:mach|tu|plan)(?:e|en|st|t|n)?\s+(?:ich|wir|du|ihr)\b"
    r"|\bist\b.*\blos\b"
    r"|(?:\b(?:am|are|is)|['’](?:s|re|m))\s+(?:\w+\s+){0,2}(?:happening|doing|planning)\b"
    r"|\bdo\s+(?:i|we|you|they)\s+(?:\w+\s+)?do\b",
    re.IGNORECASE,
)
_HABIT = re.compile(
    r"\b(?:man|usually|normally|typically|always|often|every|jede[snm]?|gewöhnlich|normalerweise"
    r"|meistens|immer)\b|\bhappens\s+to\b",
    re.IGNORECASE,
)
_CLAUSE_STOP = re.compile(r"[.!?;,\n]")


def _own_clause_span(m: re.Match[str]) -> tuple[int, int]:
    """The phrase's own clause: from the punctuation before it to the one after it."""
    text = m.string
    begin = max((e.end() for e in _CLAUSE_STOP.finditer(text, 0, m.start())), default=0)
    end = _CLAUSE_STOP.search(text, m.end())
    return begin, end.start() if end else len(text)


def _own_clause(m: re.Match[str]) -> str:
    begin, end = _own_clause_span(m)
    return m.string[begin:end]


def asks_coming(m: re.Match[str]) -> bool:
    """Whether the month's own clause asks about the month to come (see _COMING)."""
    clause = _own_clause(m)
    return (
        _WHAT_OPENS.match(clause) is not None
        and _COMING.search(clause) is not None
        and _HABIT.search(clause) is None
        and not _past_form(clause)
        and _PAST.search(clause) is None
    )


# "today"/"heute" said of the present at large, not of this day: after "noch"/"still" ("Gibt es
# noch heute Disketten?", "is it still today the best way"), after people in general ("people
# today", "die Leute heute", "was nutzt man heute"), or in a how-to question of a method anyone
# uses, "how" and a verb of a generic subject ("how do people today sync their vault", "how to
# back up a vault today", "wie macht man heute Backups"). Not a question about one's own day: "I"
# or "my" in its clause ("Wie fühle ich mich heute?", "How do I plan my day today?", "Habe ich
# noch heute Termine?"), nor "heute noch", which is "before the day ends" ("Was ist heute noch zu
# tun?", "Was kommt heute noch?"), as "still … today" is in English ("What is still open
# today?"). A window of today that hides the answer costs the search little only when no note is
# dated today; a daily note is, so only these plain forms are read as the present at large.
_STILL = re.compile(r"\b(?:noch|still)\s+$", re.IGNORECASE)
_PEOPLE_BEFORE = re.compile(
    r"\b(?:people|folks|kids|everyone|everybody|man|leute|menschen|kinder|jugendliche)\s+$",
    re.IGNORECASE,
)
_HOW_TO = re.compile(
    r"\W*(?:(?:and|und|but|aber|so|also)\s+)?(?:how\s+(?:to\b|(?:do|does|can|could|should|would|will)\s+"
    r"(?:you|one|people|folks|anyone|someone)\b)|wie\s+\w+\s+(?:man|jemand|leute|du|ihr)\b)",
    re.IGNORECASE,
)
_OWN = re.compile(
    r"\b(?:i|me|my|mine|myself|we|us|our|ich|mich|mir|mein\w*|wir|uns|unser\w*)\b|['’]m\b", re.IGNORECASE
)


def says_nowadays(m: re.Match[str]) -> bool:
    """Whether "today"/"heute" (the whole match) is said of the present at large (see _STILL,
    _PEOPLE_BEFORE, _HOW_TO), with no past form, plan or duty in its clause to tie it to this day
    ("Wie habe ich heute geschlafen?", "Was muss ich heute noch erledigen?"), no word of one's own
    (see _OWN), in a question."""
    text = m.string
    begin, end = _own_clause_span(m)
    clause = text[begin:end]
    if _TO_COME.search(text) or _past_form(clause) or _PAST.search(clause):
        return False
    if asks_coming(m) or _OWN.search(clause) or not clause_asks(m):
        return False  # (keywords "Leute heute Meeting", "Meeting with people today" are the day's)
    return (
        _STILL.search(text[max(begin, m.start() - 8) : m.start()]) is not None
        or _PEOPLE_BEFORE.search(text[max(begin, m.start() - 16) : m.start()]) is not None
        or _HOW_TO.match(text, begin) is not None
    )


# A question about one's duties or appointments, in the phrase's own clause, in the present: "What
# do I have to do between January and March?", "Was muss ich zwischen Januar und März erledigen?",
# "Welche Termine habe ich zwischen Januar und März?", "What meetings do I have between December and
# February?". Their period is the coming one, as the agenda's; read back they listed last year's.
# Not with a past form ("Welche Termine hatte ich …", "What meetings did I have …").
_PLANS = re.compile(
    r"\b(?:(?:have|has)\s+to|need\s+to|to\s+do|zu\s+tun|muss|musst|müssen|erledigen"
    r"|termine?|meetings?|appointments?|aufgaben|tasks?|todos?|to-dos?|deadlines?)\b",
    re.IGNORECASE,
)


def asks_plans(m: re.Match[str]) -> bool:
    """Whether the phrase's own clause asks about one's duties or appointments (see _PLANS)."""
    clause = _own_clause(m)
    return (
        clause_asks(m)
        and _PLANS.search(clause) is not None
        and _OWN.search(clause) is not None
        and not _past_form(clause)
        and _PAST.search(m.string) is None
    )


# A past form a statement can hide: German perfect with its participle anywhere in the clause
# ("was ich seit Montag gelesen habe"), English perfect ("Everything I've read", "I haven't slept",
# "I've been tracking", not "have been sick", "have a"), an English past after its subject ("Stuff
# I cooked", "we discussed").
_PERFECT_EN = re.compile(
    r"(?:\b(?:have|has|had)(?:n['’]t)?|['’]ve)(?:\s+(?:not|never|just|already|only|really))?"
    r"\s+(?!(?:been|a|an|the|my|your|his|her|our|their|no|some|any|to|this|that|it)\b)[a-z]+",
    re.IGNORECASE,
)
# "have been doing" is a doing going on, its notes asked for ("I've been tracking my sleep since
# Monday"); "have been sick" is a state.
_BEEN_DOING = re.compile(
    r"(?:\b(?:have|has)(?:n['’]t)?|['’]ve)(?:\s+(?:not|never|just|already))?\s+been\s+[a-z]+ing\b",
    re.IGNORECASE,
)
_PAST_AFTER_SUBJECT = re.compile(
    r"\b(?:i|we|you|he|she|they)\s+(?:\w+ly\s+|just\s+|already\s+)?"
    r"(?:[a-z]+ed|read|wrote|saw|ate|ran|sent|bought|got|made|did|went|met|heard|found|took)\b",
    re.IGNORECASE,
)


def says_done(text: str) -> bool:
    """Whether any clause of ``text`` has a past form (see _past_form, _PAST and the forms above):
    a statement beside it, or in it, speaks of what was done, and asks for the notes of then."""
    for clause in _CLAUSE_STOP.split(text):
        words = WORD.findall(clause)
        if _past_form(clause) or _PAST.search(clause) or _PERFECT_EN.search(clause):
            return True
        if _PAST_AFTER_SUBJECT.search(clause) or _BEEN_DOING.search(clause):
            return True
        if _HAVE_DE.search(clause) and any(_PARTICIPLE_DE.fullmatch(w) for w in words):
            return True
    return False
