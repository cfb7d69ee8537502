"""Query analysis (pure): content words versus filler words of German and English.

Filler words are removed from the BM25 query; the number of content words picks the fusion
weights (a one- or two-word query leans on BM25); chronicle questions (months, years, "when",
"changed", "geändert") keep change logs from being demoted; inline filters (``tag:``, ``path:``,
``since:``, ``until:``, ``source:``) are split off and validated, and time phrases ("last week",
"seit Montag", read in ``days``) become a date window.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import dataclass, replace

from sidecar.notes.markdown import filter_tag
from sidecar.search.day_calendar import FilterError, parse_day
from sidecar.search.days import time_window
from sidecar.search.tense import ends_asked
from sidecar.search.words import WORD, fold, kinds_file, words_file

# Filler words: articles, pronouns, auxiliaries and the chat frame around a question ("kannst du
# mir sagen", "ok thanks", "do you know"). Words that are also command or feature names (sort,
# kill, right, wrong) stay content words.
STOPWORDS_EN = words_file("stopwords-en.txt")
STOPWORDS_DE = words_file("stopwords-de.txt")
STOPWORDS = STOPWORDS_EN | STOPWORDS_DE


_FOLDED_STOPWORDS = frozenset(fold(w) for w in STOPWORDS)
MONTHS = words_file("months.txt")
CHRONICLE_WORDS = words_file("chronicle.txt")  # about when something happened or changed
_YEAR = re.compile(r"^(19|20)\d\d$")
_ISO_MONTH = re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])(-\d\d)?\b")
# A filter is a key with its value right after the colon (``tag:garten``). A key followed by a
# space is one only when the next word is surely a value of that key (``since: 2026-09-01``,
# ``tag: #garten``): a colon is common in prose ("Source: Wikipedia", "PATH: /usr/bin
# not found", "Until: further notice"), which is searched as its words. A key at the end of the
# text ("tag:") is searched as its word, and the answer says so. (The spaced value is looked at,
# not taken: "source: tag:garten" leaves the tag filter to be read.)
_FILTER = re.compile(
    r"(?<!\S)(tag|path|since|until|source):(?:(\"[^\"]*\"|\S+)|\s+(?=(\"[^\"]*\"|\S+))|\s*$)", re.IGNORECASE
)


SOURCE_NAMES = ("vault", "wiki", "memory")


MAX_TAGS = 20  # tags a filter may name (inline or as the parameter)


@dataclass(frozen=True)
class Filters:
    """Restrictions a query can carry inline (``tag:garten path:projekte/ since:2026-09-01``)."""

    tags: tuple[str, ...] = ()
    path_prefix: str | None = None
    since: str | None = None  # ISO date, inclusive, compared with the note's date
    until: str | None = None
    sources: tuple[str, ...] = ()
    phrase: str | None = None  # the time phrase that set since/until ("last week")
    given: bool = False  # a window given as such won over the phrase: since/until are not its
    no_value: tuple[str, ...] = ()  # keys at the end of the text, no value: searched as words

    def merged(self, other: Filters) -> Filters:
        return Filters(
            tuple(dict.fromkeys(self.tags + other.tags)),
            other.path_prefix or self.path_prefix,
            other.since or self.since,
            other.until or self.until,
            tuple(dict.fromkeys(self.sources + other.sources)),
            other.phrase or self.phrase,
            other.given or self.given,
            tuple(dict.fromkeys(self.no_value + other.no_value)),
        )

    @property
    def active(self) -> bool:
        return bool(self.tags or self.path_prefix or self.since or self.until)


def split_filters(
    text: str,
    today: dt.date | None = None,
    *,
    phrases: bool = True,
    window_given: bool = False,
    week_start: int = 0,
    ahead: bool = False,
) -> tuple[str, Filters]:
    """Strip inline filters and a time phrase from the text that is ranked; return both.

    A filter value that cannot be honoured raises FilterError naming it, rather than filtering
    everything or nothing. ``today`` is the local day (tests pass a fixed one); ``phrases=False``
    leaves time phrases in the text. A window given as such (``window_given``: the since/until
    parameters; or an inline ``since:`` or ``until:``) wins over a time phrase: the phrase is
    stripped as the time it names, and sets nothing (a window of one end from each, as it was,
    was neither what the phrase nor what the filter said; kept as words, "last week" diluted the
    query's other words). ``ahead`` reads the time phrase as the agenda's whatever the text says
    (a follow-up of a question about plans, see time_window).
    """
    day = today or dt.date.today()
    tags: list[str] = []
    sources: list[str] = []
    found: dict[str, str] = {}
    no_value: list[str] = []
    kept: list[str] = []  # the text outside the filters
    at = 0
    for m in _FILTER.finditer(text):
        name = m.group(1).lower()
        if m.group(2) is None and m.group(3) is None:
            no_value.append(name)  # "tag:" at the end: searched as the word, the answer says so
            continue
        value = (m.group(2) if m.group(2) is not None else m.group(3)).strip('"')
        if m.group(3) is not None and not _spaced_value(name, value, day):
            continue  # prose with a colon ("Source: Wikipedia"): its words
        kept.append(text[at : m.start()])
        at = m.end(2) if m.group(2) is not None else m.end(3)
        _take(name, value, tags, sources, found)
    kept.append(text[at:])
    rest = " ".join(" ".join(kept).split())
    since = parse_day(found["since"], day, name="since").isoformat() if "since" in found else None
    until = parse_day(found["until"], day, name="until", end=True).isoformat() if "until" in found else None
    phrase = None
    if phrases:
        rest, window, phrase = time_window(rest, day, week_start, asks_only_when, ahead=ahead)
        # A given window wins; the phrase still says the period's notes were asked for (listed
        # over the given window: "what did I do last week?" with since/until answered nothing).
        given = window_given or since is not None or until is not None
        if window is not None and not given:
            since, until = window[0].isoformat(), window[1].isoformat()
    else:
        given = False
    if since and until and since > until:
        raise FilterError(f"the date window is empty: since {since} is after until {until}")
    return rest, Filters(
        tuple(dict.fromkeys(tags)),
        found.get("path"),
        since,
        until,
        tuple(sources),
        phrase,
        given=given and phrase is not None,
        no_value=tuple(dict.fromkeys(no_value)),
    )


def _take(name: str, value: str, tags: list[str], sources: list[str], found: dict[str, str]) -> None:
    """One inline filter's value, checked, into ``tags``, ``sources`` or ``found``."""
    if not value:
        raise FilterError(f"{name}: needs a value")
    if name == "tag":
        # "#project/" as the tag pane shows a parent: the tag and those below it
        parts = [filter_tag(t) for t in value.split(",")]
        if not all(parts):
            raise FilterError(f"tag:{value} has an empty tag; write tag:a,b")
        tags.extend(parts)
        if len(tags) > MAX_TAGS:  # as the 'tag' parameter: each tag is a test per candidate
            raise FilterError(f"tag: takes at most {MAX_TAGS} tags")
    elif name == "source":
        for s in value.lower().split(","):
            if s not in SOURCE_NAMES:
                raise FilterError(f"source:{s} is not a source: use {', '.join(SOURCE_NAMES)}")
            sources.append(s)
    elif name in found:
        raise FilterError(f"{name}: is given twice")
    else:
        found[name] = value


_SPACED_DAY = re.compile(r"(19|20)\d\d-\d\d-\d\d")
_SPACED_TAG = re.compile(r"#[\w/-]+")


def _spaced_value(name: str, value: str, today: dt.date) -> bool:
    """Whether ``value``, a space after ``name:``, is surely that key's value: an ISO day for
    since/until, a ``#tag`` (with its hash: "tag: project-x" may be prose as well). A weekday or a
    source's name is not ("Since: Monday the build fails", "source: memory leak in the parser"),
    nor a path ("PATH: /usr/bin not found"): prose, searched as its words."""
    if name in ("since", "until"):
        if _SPACED_DAY.fullmatch(value) is None:
            return False
        try:
            parse_day(value, today, name=name)
        except FilterError:
            return False  # "since: 2026-02-30": no day, so not surely a filter
        return True
    if name == "tag":
        return all(_SPACED_TAG.fullmatch(p) and not p[1:].isdigit() for p in value.split(","))
    return False


def with_window(filters: Filters, since: str | None, until: str | None) -> Filters:
    return replace(filters, since=since, until=until)


@dataclass(frozen=True)
class QueryAnalysis:
    text: str
    words: tuple[str, ...]
    content_words: tuple[str, ...]
    chronicle: bool = False  # about when/what changed: logs are not demoted
    language: str | None = None  # "de" or "en" when the words say so
    refers_back: bool = False  # continues an earlier turn ("and how often?", "geht das auch?")

    @property
    def word_class(self) -> int:
        """0, 1 (one or two content words) or 2 (three or more)."""
        n = len(self.content_words)
        return 0 if n == 0 else (1 if n <= 2 else 2)


def is_stopword(word: str) -> bool:
    return word.lower() in STOPWORDS or fold(word) in _FOLDED_STOPWORDS


def is_chronicle(text: str, words: tuple[str, ...]) -> bool:
    """Month names (de/en), years, ``2026-09``, and words like changed / when / geändert / wann."""
    if _ISO_MONTH.search(text):
        return True
    return any(
        w.lower() in MONTHS or w.lower() in CHRONICLE_WORDS or fold(w) in CHRONICLE_WORDS or _YEAR.match(w)
        for w in words
    )


_ONLY_DE = STOPWORDS_DE - STOPWORDS_EN
_ONLY_EN = STOPWORDS_EN - STOPWORDS_DE


def language(text: str, words: tuple[str, ...]) -> str | None:
    """``de`` or ``en`` by filler words and German letters; None when undecided."""
    lower = [w.lower() for w in words]
    de = sum(w in _ONLY_DE for w in lower) + (2 if re.search(r"[äöüß]", text, re.IGNORECASE) else 0)
    en = sum(w in _ONLY_EN for w in lower)
    return "de" if de > en else ("en" if en > de else None)


_OPENERS = words_file("followup-openers.txt")
_REFS = words_file("followup-refs.txt")


def refers_back(words: tuple[str, ...]) -> bool:
    """Whether a message continues an earlier turn: it opens with a conjunction ("and", "und",
    "aber"), or a word pointing back ("it", "them", "too", "seine", "dort", "auch") comes before
    its first content word ("what does it cost?", "geht das auch offline?") or ends a message of
    at most two content words ("how do I fold them?"). Later in a longer message such a word
    belongs to the message's own topic ("jump to a file by typing its name", "damit ein Upgrade es
    nicht anfasst"). German "das" counts as a pronoun when no capitalised word follows it (not "das
    Datumsformat"), "sie" when written in lower case ("Sie" is the polite "you")."""
    if not words:
        return False
    if words[0].lower() in _OPENERS:
        return True
    content = [i for i, w in enumerate(words) if not is_stopword(w) and w.lower() not in _REFS]
    first = content[0] if content else len(words)
    last = len(words) - 1
    for i, w in enumerate(words):
        low = w.lower()
        pointing = (
            low in _REFS
            or (w == "sie" and i > 0)
            or (low == "das" and (i == last or not words[i + 1][:1].isupper()))
        )
        if pointing and (i < first or (i == last and len(content) <= 2)):
            return True
    return False


_PERSONS = kinds_file("self-questions.txt")


def _doings(text: str, words: list[str]) -> bool:
    """A past form, "have"/"got" (one's agenda: "what do I have today?", as German "habe"), or the
    notes. English "was" counts in an English message only: German "was" is "what"."""
    if any(w in _PERSONS["past"] or w in _PERSONS["notes"] for w in words):
        return True
    return "was" in words and language(text, tuple(words)) != "de"


def _asked(text: str, words: list[str]) -> bool:
    """A question (a question mark, or a question word first) or a request ("show me …")."""
    return ends_asked(text) or words[0] in _PERSONS["question"] or words[0] in _PERSONS["request"]


def _addressed(tokens: list[str], words: list[str]) -> bool:
    """Someone addressed: "you", "dein", or formal "Sie"/"Ihnen" inside a sentence."""
    return any(w in _PERSONS["second"] for w in words) or any(w in _FORMAL_YOU for w in tokens[1:])


# Where a sentence ends: ".", "!", "?", ";" or ":" before a space, or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\s*\n\s*")
# Someone else's words in a message: quoted speech, and lines pasted as a diff, a quote, a list
# or a table ("- show me my notes", "> what did I miss?").
_QUOTED = re.compile(r'"[^"\n]*"|„[^“”"\n]*[“”"]|“[^”\n]*”|«[^»\n]*»|»[^«\n]*«')
_PASTED = re.compile(r"^[ \t]*[-+>*|]")


def _own_sentences(text: str) -> list[str]:
    """The sentences of a message that are the person's own: quoted speech ('He asked me: "What
    did I miss?"') and pasted lines (a diff's "- show me my notes") left out."""
    lines = [line for line in _QUOTED.sub(" ", text).splitlines() if not _PASTED.match(line)]
    return [s for s in _SENTENCE_END.split("\n".join(lines).strip()) if s]


def asks_about_self(text: str) -> bool:
    """Whether a message asks about the person's own doings or notes ("what did I do last week?",
    "was habe ich heute gemacht?", "what do I have tomorrow?", "show me my notes of yesterday"):
    a question or a request, in the first person, about what was done, one's agenda or the notes,
    with no modal ("should I deploy today?" asks what to do) and addressing no one ("how was your
    weekend?", "wie war dein Tag heute?", "was meinen Sie?" are small talk; so, to be safe, is
    "can you tell me what I did today?"). The message as a whole, or any one of its sentences:
    a request need not open the message ("Ich bin seit gestern krank. Zeig mir meine Notizen."),
    nor lose to a modal or a "you" in a later one ("What did I do yesterday? Should I worry?").
    The first sentence counts alone only as a question or a request of its own: "When I paste a
    screenshot into a note, … Can I …?" opens with a clause of the question that follows."""
    if _asks_about_self(text):
        return True
    sentences = _own_sentences(text)
    if len(sentences) < 2:
        return False
    return _opens_asked(sentences[0]) or any(_asks_about_self(s) for s in sentences[1:])


def _opens_asked(sentence: str) -> bool:
    """Whether a message's first sentence asks about the person's doings on its own: it ends
    with a question mark or opens with a request word ("show me …", "zeig mir …")."""
    words = [w.lower() for w in WORD.findall(_CLITIC.sub("", sentence))]
    asked = bool(words) and (ends_asked(sentence) or words[0] in _PERSONS["request"])
    return asked and _asks_about_self(sentence)


def _asks_about_self(text: str) -> bool:
    """``asks_about_self`` of one text read whole."""
    tokens = WORD.findall(_CLITIC.sub("", text))
    words = [w.lower() for w in tokens]
    if not words or _addressed(tokens, words) or any(w in _PERSONS["modal"] for w in words):
        return False
    return _asked(text, words) and _doings(text, words) and any(w in _PERSONS["first"] for w in words)


def asks_what_happened(text: str, rest: str) -> bool:
    """Whether a message asks what happened in the period it names ("was war gestern?", "what
    happened on Saturday?", "was ist am Samstag passiert?", "what was on Saturday?"): a question
    opened by "what"/"was", and, beside its time phrase (``rest``: the message without it), no
    word at all but a verb of happening or being in the question's language and, in German, a
    particle ("was war denn gestern?"). Like a question about one's own doings it asks about the
    notes of that period; one about something of its own ("what was the weather yesterday?",
    "what was that yesterday?", "was war das denn gestern?") is answered by its words, and
    "Was that what happened yesterday?" is no German question."""
    if not ends_asked(text):
        return False
    words = [w.lower() for w in WORD.findall(_CLITIC.sub("", rest))]
    if not words or words[0] not in ("what", "was"):
        return False
    verbs, allowed = (
        (_PERSONS["event-en"], _PERSONS["event-en"])
        if words[0] == "what"
        else (_PERSONS["event-de"], _PERSONS["event-de"] | _PERSONS["particle-de"])
    )
    return any(w in verbs for w in words[1:]) and all(w in allowed for w in words[1:])


def asks_only_when(text: str, rest: str) -> bool:
    """Whether a message asks only what happened in the period of its time phrase: a question
    about what happened ("Was war vor einem Jahr?", "What happened a year ago today?"), or no
    content word beside the phrase (``rest``: the text without it) and the phrase alone or a
    question about one's own doings ("What did I do a year ago?"). "Welche Wärmepumpe habe ich
    vor einem Jahr gekauft?" asks about a heat pump."""
    if asks_what_happened(text, rest):
        return True
    words = WORD.findall(_CLITIC.sub("", rest))
    return all(is_stopword(w) for w in words) and (not words or asks_about_self(text))


_SMALL_TALK = kinds_file("small-talk.txt")


def is_small_talk(text: str) -> bool:
    """Whether a message is small talk with a time word ("have a nice day today", "see you
    tomorrow", "schönes Wochenende", "good morning, how was your weekend?"): each content word a
    word of time or of greetings and wishes, one of time among them, and a greeting or wish among
    all its words or someone addressed ("how are you today?"); not a follow-up ("and yesterday?"
    asks what the turn before asked) nor a question about a day or one's own doings that
    addresses no one ("what was yesterday?", "how was my weekend?", "was war gestern?"). Such a
    message names no topic of the person's notes: its time word found today's daily note by the
    word "today" in it. Time words alone ("rest day", "day of the week", "Feierabend") may be a
    topic: without a greeting they are left to recall's gates."""
    text = unicodedata.normalize("NFC", text)
    tokens = WORD.findall(_CLITIC.sub("", text))
    words = [w.lower() for w in tokens]
    content = [w.lower() for w in tokens if not is_stopword(w)]
    if not content or refers_back(tuple(tokens)):
        return False
    addressed = _addressed(tokens, words)
    if not addressed and _asked(text, words) and _doings(text, words):
        return False
    time, courtesy = _SMALL_TALK["time"], _SMALL_TALK["courtesy"]
    if not all(w in time or w in courtesy for w in content) or not any(w in time for w in content):
        return False
    return addressed or any(w in courtesy for w in words)


_FORMAL_YOU = frozenset({"Sie", "Ihnen", "Ihr", "Ihre", "Ihren", "Ihrem", "Ihrer", "Ihres"})


# "karl's", "don't", "geht's": the clitic is not a word of its own (it was the content word "s").
_CLITIC = re.compile(r"(?<=\w)['’](?:s|t|re|ve|ll|d|m)\b", re.IGNORECASE)


def analyze(text: str) -> QueryAnalysis:
    text = unicodedata.normalize("NFC", text)
    words = tuple(WORD.findall(_CLITIC.sub("", text)))
    content = tuple(w for w in words if not is_stopword(w))
    return QueryAnalysis(
        text, words, content, is_chronicle(text, words), language(text, words), refers_back(words)
    )


# Inflection endings a word may carry, and those its other forms take (regular forms only: the
# index says which of them are words, see Retriever.keyword_words).
_ENDINGS = {
    "de": ("en", "em", "er", "es", "st", "e", "n", "s", "t"),
    "en": ("ing", "ed", "es", "s", "e"),
}
_FORM_ENDINGS = {
    "de": ("", "e", "en", "n", "t", "st", "et", "te", "ten", "er", "es"),
    "en": ("", "e", "s", "es", "ed", "ing"),
}


# German verb particles a split verb leaves at its clause's end ("Wie richte ich Sync ein?").
PARTICLES_DE = words_file("separable-particles-de.txt")
# A clause ends at its punctuation or where a conjunction begins the next one.
_CLAUSE_END = re.compile(r"[.?!;:,]|\b(?:und|oder|aber|sondern|denn|dann)\b", re.IGNORECASE)
# A main clause's verb is its first or second part, and a part may be two words ("Wie genau
# richte ich ... ein?").
_VERB_PLACES = 3


@dataclass(frozen=True)
class SplitClause:
    """A German clause that ends with verb particles: the words that may be its verb, and the
    particles that may belong to it ("wieder her", then "her"), the most first."""

    verbs: tuple[str, ...]
    particles: tuple[tuple[str, ...], ...]


def split_clauses(text: str) -> tuple[SplitClause, ...]:
    """The clauses of ``text`` that end with a German verb particle: "Wie richte ich Obsidian
    Sync ein?" -> verbs (Wie, richte, ich), particles (ein,). Which word and particle make a verb
    ("einrichten") only the notes can say (``Retriever.separated``)."""
    out = []
    for clause in _CLAUSE_END.split(text):
        words = WORD.findall(_CLITIC.sub("", clause))
        ending = 0
        while ending < min(2, len(words) - 1) and words[-1 - ending].lower() in PARTICLES_DE:
            ending += 1
        if not ending:
            continue
        particles = tuple(tuple(words[len(words) - k :]) for k in range(ending, 0, -1))
        places = words[: min(_VERB_PLACES, len(words) - ending)]
        verbs = tuple(w for w in places if w.lower() not in PARTICLES_DE)
        if verbs:
            out.append(SplitClause(verbs, particles))
    return tuple(out)


def word_forms(word: str, lang: str) -> tuple[str, ...]:
    """Regular inflected forms of ``word`` in ``lang`` ("de" or "en"), the word itself first:
    "sichere" -> sichern, sichert, gesichert, ... Some are no words; none is a stopword. The
    bare base ("sicher" of "sichere") is left out: another word (an adjective) as often as not."""
    return tuple(f for f in _forms(word, lang)[1] if not is_stopword(f))


def a_form_of(other: str, word: str, lang: str) -> bool:
    """Whether ``other`` is ``word`` in another regular form or its base ("zeig", "zeige" of
    "zeigen"; not "sich" of "sichere")."""
    bases, forms = _forms(word, lang)
    return other.lower() in {*bases, *forms}


def _forms(word: str, lang: str) -> tuple[list[str], list[str]]:
    """The bases of ``word`` (less one inflection ending) and its regular forms, itself first."""
    w = word.lower()
    endings = _ENDINGS.get(lang)
    if endings is None:
        return [], [w]
    bases = [w[: -len(e)] for e in endings if w.endswith(e) and len(w) - len(e) >= 3]
    # "getting" -> "gett" -> "get"
    bases += [b[:-1] for b in bases if lang == "en" and len(b) > 3 and b[-1] == b[-2]]
    forms = [w] + [b + e for b in [w, *bases] for e in _FORM_ENDINGS[lang] if e]
    if lang == "de":
        forms += [f"ge{b}t" for b in bases]
    return bases, list(dict.fromkeys(forms))
