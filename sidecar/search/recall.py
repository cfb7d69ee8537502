"""``recall`` (auto-injection): the current message with the previous turns blended into the
query vector and into the keyword words, a stricter gate than search (small talk recalls nothing),
and the hits rendered as a context block within a token budget."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from sidecar.config import RecallConfig
from sidecar.contracts.wire import Hit, SearchResult
from sidecar.search.arms import Found
from sidecar.search.context import render_block
from sidecar.search.day_calendar import FilterError
from sidecar.search.fusion import Scale, Scored
from sidecar.search.looks import Reading
from sidecar.search.query import (
    Filters,
    QueryAnalysis,
    analyze,
    asks_about_self,
    asks_what_happened,
    is_small_talk,
    split_filters,
)
from sidecar.search.querywords import BmParts
from sidecar.search.ranking import Ranking
from sidecar.search.request import SearchRequest, with_filters
from sidecar.search.results import analysis_of, phrase_ignored, to_hit
from sidecar.search.retrieval import Retriever
from sidecar.search.tense import asks_ahead, ends_asked
from sidecar.search.words import WORD

# The candidates a preview lists below recall's gates (and past its limit), each.
_DROPPED_SHOWN = 10
# A wider look is taken only when a candidate of the last 1/_TAIL of an arm's list passes the
# gates (``_Gates.ran_out``).
_TAIL = 4


def recall(
    r: Retriever,
    message: str,
    history: Sequence[str],
    req: SearchRequest,
    count_tokens: Callable[[Sequence[str]], list[int]],
    *,
    explain: bool = False,
) -> SearchResult:
    """Hits for the current message (previous turns blended in) and the rendered context block;
    with ``explain`` (a preview) also the candidates the gates kept out, with their figures."""
    req = replace(req, pool=r.recall_cfg.candidates)  # recall's own pool, never the limit's
    try:
        text, inline = r.read_query(replace(req, query=message))
        windowed = with_filters(req, inline)
    except FilterError:
        # Recall reads what a person typed (a hook on every prompt): prose that reads like a
        # filter ("our CI runs on source:github now") is words, never an error that blocks it.
        text, inline, windowed = message, Filters(), req
    if inline.phrase and _alone(text) and _follows_an_agenda_question(history):
        # "und am Wochenende?" after "Was habe ich morgen vor?" asks about plans too: its phrase
        # is read as the agenda's ("und am Donnerstag?" the coming Thursday; a weekend, which
        # ahead is as often the one to come, its words). Read back it recalled last weekend's
        # daily note for a question about the dentist's appointment.
        try:
            text, inline = split_filters(
                message,
                r.today_of(req),
                window_given=bool(req.filters.since or req.filters.until),
                week_start=r.week_start(),
                ahead=True,
            )
            windowed = with_filters(req, inline)
        except FilterError:
            pass  # read as before (it was read once without an error)
    qa = analyze(text)
    follow_up = _follows_a_question_about_self(message, qa, history)
    if is_small_talk(message) and not follow_up:
        # "have a nice day today", "bis morgen", "how was your weekend?": small talk names no topic
        # of the person's notes, whatever the notes happen to say (a history neither).
        return SearchResult((), None, analysis_of(qa, windowed.filters), context="")
    result = _recall(r, text, history, windowed, count_tokens, explain=explain)
    if not inline.phrase:
        return result
    # "What did I do last week?": the period's notes are recalled after those the words found
    # there (see Retriever.search). Only notes whose name or properties give their day: recall
    # injects unasked, and a note merely edited in the window says nothing about the period
    # (a sync or a plugin that touches every file makes the whole vault "today").
    # A time phrase that was all the message said ("how are you today?", "bye for now") names
    # no topic: its word is not searched instead (it found a function reference for today()).
    # Otherwise a period is small talk's ("how's it going today?", "thanks, that's all for
    # today"), with or without a history; a question about its notes is still answered by its
    # words.
    alone = not history and not qa.content_words
    until = inline.until or windowed.filters.until
    # Listed only for a question about the person's own doings or notes, past or today: a
    # message that merely names a period ("I bought this laptop last year, how do I reset it?",
    # "should I deploy today?") injected the period's daily notes unasked.
    # A follow-up ("and yesterday?", "today?") asks what the turn it follows asked.
    # "Was war gestern?", "what happened on Saturday?" ask about that period's notes as well.
    about = asks_about_self(message) or asks_what_happened(message, text)
    asked = until is not None and (about or follow_up)
    dated = [n for n in r.dated_notes(windowed) if n.date] if asked else []
    if dated:
        # The period was asked about: the notes of it holding the message's words come first,
        # found as a search finds them ("was habe ich dieses Jahr zum Thema Budget gemacht?"),
        # also those recall's own gates keep out of an unasked injection; then the rest by date.
        if qa.content_words:
            words = r.search_text(replace(windowed, limit=2 * windowed.limit), text)
            seen = {(h.reference, h.lines) for h in result.hits}
            more = tuple(
                h for h in words.hits if h.bm25_score is not None and (h.reference, h.lines) not in seen
            )
            result = replace(result, hits=result.hits + more)
        listed = r.with_period(result, dated, windowed)
        budget = windowed.token_budget or r.recall_settings().token_budget
        block = render_block(listed.hits, budget, count_tokens, own=req.agent is not None)
        return replace(listed, context=block, dropped=_left_out(listed.hits, result.hits, result))
    if alone or (asked and result.hits):
        return result
    # The words are recalled from any day (see Retriever.search), the time phrase still not among
    # them. In a message a person typed it names when, not what: searched as a word, "today"
    # found today's daily note by its title ("have a nice day today").
    phrase = inline.phrase
    _, inline = split_filters(message, r.today_of(req), phrases=False)
    anyreq = with_filters(req, inline)
    anyday = _same_search(result, windowed, anyreq)
    if anyday is None:
        anyday = _recall(r, text, history, anyreq, count_tokens, explain=explain)
    if result.hits:
        # A period named but not asked about does not restrict: "My back hurts since Monday,
        # what helps?" recalled the daily notes of the pain alone, never the note on what helps a
        # back. Half the slots (rounded up) go to the words' hits of other days, as many as there
        # are, the rest to the period's; all in order of relevance (a week of daily notes filled
        # every slot when the period's hits came first).
        seen = {(h.reference, h.lines) for h in result.hits}
        more = tuple(h for h in anyday.hits if (h.reference, h.lines) not in seen)
        limit = windowed.limit
        period = result.hits[: limit - min(len(more), (limit + 1) // 2)]
        merged = period + more[: limit - len(period)]
        hits = tuple(sorted(merged, key=lambda h: h.relevance, reverse=True))
        budget = windowed.token_budget or r.recall_settings().token_budget
        block = render_block(hits, budget, count_tokens, own=req.agent is not None)
        # A preview names what this merge left out too, not the period's run alone.
        dropped = _left_out(hits, result.hits + more, result, anyday)
        return replace(result, hits=hits, context=block, dropped=dropped)
    # Nothing in the period. Why, truly: a period asked about whose window holds no dated note,
    # or a message that did not ask about its notes (the window may well hold some: they were
    # not listed unasked).
    return phrase_ignored(anyday, phrase, "noNote" if asked else "notAsked", windowed.filters)


def _same_search(result: SearchResult, ran: SearchRequest, wanted: SearchRequest) -> SearchResult | None:
    """``result`` (of ``ran``) as ``wanted``'s when the two differ only in what the analysis
    says of the time phrase: the phrase set no window (one given as a parameter wins over it),
    and the search of any day ran the very same search a second time. None when they differ."""
    phrase, given = wanted.filters.phrase, wanted.filters.given
    if replace(ran, filters=replace(ran.filters, phrase=phrase, given=given)) != wanted:
        return None
    if result.analysis is None:
        return None
    filters = replace(result.analysis.filters, time_phrase=phrase, window_given=given)
    return replace(result, analysis=replace(result.analysis, filters=filters))


def _left_out(hits: Sequence[Hit], offered: Sequence[Hit], *runs: SearchResult) -> tuple[Hit, ...]:
    """A preview's ``dropped`` for the hits a recall injects, made of several runs: the runs'
    own candidates below the gates, then those past the limit, among them the runs' hits the
    merge left out (``offered`` not in ``hits``); each once, none that is injected. Empty
    unless a preview (the runs' ``gates`` say so). It reported the period's run alone: hits it
    injected shown as dropped, hits the merge cut shown nowhere. A hit the merge cut is labelled
    ``limit`` first, whatever gate the other run held it back by: it passed the gates of the run
    that offered it (relevance is calibrated per run), and the slots are what left it out of the
    injection."""
    if all(run.gates is None for run in runs):
        return ()
    taken = {(h.reference, h.lines) for h in hits}
    cut = [replace(h, gate="limit") for h in offered if (h.reference, h.lines) not in taken]
    below: list[Hit] = []
    past: list[Hit] = []
    for h in [*cut, *(d for run in runs for d in run.dropped)]:
        key = (h.reference, h.lines)
        if key not in taken:
            taken.add(key)
            (past if h.gate == "limit" else below).append(h)
    return _best(below) + _best(past)


def _best(hits: list[Hit]) -> tuple[Hit, ...]:
    return tuple(sorted(hits, key=lambda h: h.relevance, reverse=True)[:_DROPPED_SHOWN])


def _recall(
    r: Retriever,
    text: str,
    history: Sequence[str],
    req: SearchRequest,
    count_tokens: Callable[[Sequence[str]], list[int]],
    *,
    explain: bool = False,
) -> SearchResult:
    rc = r.recall_settings()
    seen, qa, spelled = r.read_spelling(text, req.agent)
    turns = (
        [t[: rc.history_head_chars] for t in history[-rc.history_turns :] if t.strip()]
        if rc.history_turns
        else []
    )
    if not qa.content_words and not turns:
        return SearchResult((), None, analysis_of(qa, req.filters), context="")
    # One reading of the recall settings for the whole call: a reload meanwhile must not give
    # the vectors one history share and the keywords (or the analysis) another.
    vectors = _recall_vectors(r, rc, seen, qa, turns)
    rare, weight, relevant = r.shares(qa, req.agent)
    parts = _recall_parts(r, rc, qa, turns)
    read = Reading(seen, qa, tuple(rare), weight, relevant, spelled, vectors, parts)
    found, ranking = r.look(req, read)
    degraded = found.degraded
    floor = max(req.min_score, rc.score_floor)
    # The similarity gate keeps small talk out; a chunk holding a rare code of the message (a
    # ticket number, a host name: a rare word with a digit) was named, not guessed, and passes
    # it. Rare plain words do not ("haiku", "Danke" found a page each in the help vault).
    named = any(any(ch.isdigit() for ch in w) for w in rare)
    # How completely a chunk holds the message's own words (its share of their ideal BM25 score),
    # not everything the conversation said; no content words: the turns' words.
    # No parts: ideal 0, nothing passes.
    own = r.scale(parts[:1], stem=found.stem)
    # A model that does not read the message's language (MiniLM and German) finds some cosine for
    # any text, small talk included: there the keywords must match as clearly as well.
    gating = _Gates(r, rc, qa, rare, own, floor=floor, named=named, foreign=not r.reads(qa))
    # The pool holds fewer notes that pass the gates than asked, an arm had more, and the gates
    # did not end the hits before the pool did: wider looks' follow, as a search's do (the first
    # hits of a larger limit are the answer for k).
    looks = r.looked(req, (found, ranking), read, req.limit, shown=gating.passing, ran_out=gating.ran_out)
    kept, views = looks.hits, looks.views
    mask_secrets = r.cfg.mask_secrets
    dated = bool(req.filters.since or req.filters.until)

    def hit(s: Scored, why: str | None = None, look: int | None = None) -> Hit:
        c = s.candidate
        look = looks.wider.get(c.chunk_id, 0) if look is None else look
        h = to_hit(s, views[c.chunk_id], req.agent, mask_secrets=mask_secrets, dated=dated, look=look)
        if not explain:
            return h
        scale = looks.rankings[look].scale  # a look's figures are read on its own scale
        return replace(
            h,
            similarity=None if c.vec is None else round(scale.vec(c.vec), 4),
            keywords=None if c.bm25 is None else round(own.bm25(c.bm25, 0.0), 4),
            gate=why,
        )

    hits = tuple(hit(s) for s in kept[: req.limit])
    # A preview shows what the gates kept out, so they can be tuned: the best few candidates
    # below the gates, and those past the limit.
    below = [(s, g) for s, g in gating(found, ranking) if g is not None][:_DROPPED_SHOWN]  # each is masked
    dropped = (
        tuple(hit(s, g, 0) for s, g in below)
        + tuple(hit(s, "limit") for s in kept[req.limit : req.limit + _DROPPED_SHOWN])
        if explain
        else ()
    )
    analysis = replace(
        analysis_of(qa, req.filters, rare),
        history_turns=len(turns),
        # the turns' share of the query vector (all of it when the message has no words)
        history_share=(history_weight(rc, qa) if qa.words else 1.0) if turns else None,
        refers_back=qa.refers_back,
    )
    block = render_block(hits, req.token_budget or rc.token_budget, count_tokens, own=req.agent is not None)
    gates = {"scoreFloor": floor, "minSimilarity": rc.min_similarity} if explain else None
    return SearchResult(
        hits,
        degraded,
        analysis,
        context=block,
        pending_vectors=found.pending,
        pending_continuous=found.pending_continuous,
        left_to_switch=found.left_to_switch,
        dropped=dropped,
        gates=gates,
    )


class _Gates:
    """recall's gates over a look's candidates (the first look's, a wider one's): each candidate
    with the gate that keeps it out of the block (None: it passes), once per look."""

    def __init__(
        self,
        r: Retriever,
        rc: RecallConfig,
        qa: QueryAnalysis,
        rare: Sequence[str],
        own: Scale,
        *,
        floor: float,
        named: bool,
        foreign: bool,
    ) -> None:
        self._r, self._rc, self._qa, self._rare, self._own = r, rc, qa, rare, own
        self._floor, self._named, self._foreign = floor, named, foreign
        # by the look's ranking (kept, so its id stays its own)
        self._done: dict[int, tuple[Ranking, list[tuple[Scored, str | None]]]] = {}

    def __call__(self, found: Found, ranking: Ranking) -> list[tuple[Scored, str | None]]:
        """A look's candidates in its order, each with its gate."""
        done = self._done.get(id(ranking))
        if done is not None:
            return done[1]
        # Which of the message's own words each candidate holds, for the gate of a chunk without
        # a cosine to weigh (asked of the keyword index only then).
        covers = _Coverage(self._r, self._qa, ranking.ranked, self._rare)
        missing = found.degraded is not None
        gated = [(s, self._gate(s, ranking.scale, covers, missing)) for s in ranking.ranked]
        self._done[id(ranking)] = (ranking, gated)
        return gated

    def passing(self, found: Found, ranking: Ranking) -> list[Scored]:
        """A look's candidates that pass every gate, in its order."""
        return [s for s, g in self(found, ranking) if g is None]

    def ran_out(self, found: Found, ranking: Ranking, fetch: int) -> bool:
        """Whether an arm's pool, not the gates, ended the look's hits: a candidate among the
        last quarter of an arm's own list (its lowest cosines or keyword scores, ``_TAIL``)
        passes, in an arm that returned all ``fetch`` candidates it asked for. Else the gates cut
        each arm's tail, and a wider look's new candidates (each arm's below this pool's) would
        be cut as well: recall runs on every message, and a message of small talk (nothing
        passes) took the looks of 200 and 600 each time. An arm that returned fewer than it asked
        (a keyword arm matching a few notes) holds everything it can find: its tail passing says
        nothing of a wider look, and counting it made specific questions take both looks for
        nothing (~10x the time of a recall)."""
        passed = {c for s in self.passing(found, ranking) for c in (s.candidate.chunk_id, *s.folded)}
        arms = [[c for c, _ in found.keywords], *([c for c, _, _ in v] for v in found.vectors)]
        return any(
            c in passed
            for ids in arms
            if len(ids) >= fetch
            for c in ids[len(ids) - max(1, len(ids) // _TAIL) :]
        )

    def _gate(self, s: Scored, scale: Scale, covers: _Coverage, missing: bool) -> str | None:
        """The gate that keeps ``s`` out of the block, None when it passes; ``missing``: the
        look's vector arm did not answer."""
        rc, own = self._rc, self._own
        if self._named and "rareTerm" in s.boosts:  # named, not guessed: neither floor applies
            return None
        if s.relevance < self._floor:
            return "scoreFloor"
        bm = s.candidate.bm25
        if self._foreign and (bm is None or own.bm25(bm, 0.0) < rc.min_similarity):
            return "keywordShare"
        if s.candidate.vec is not None:
            similarity = scale.vec(s.candidate.vec)
            passes = similarity >= rc.min_similarity or _corroborated(s, similarity, own, covers)
        else:
            # No cosine to pass the gate with (its similarity shows as none): the vector arm did
            # not answer, or the chunk is not among its nearest, or has no vector yet (a first
            # index: the vector arm cannot see it). Missing, not zero: strong keyword evidence
            # alone passes (_on_keywords).
            passes = missing or _on_keywords(s, own, covers, embedded=s.candidate.embedded)
        return None if passes else "minSimilarity"


# A candidate whose cosine is just under recall.minSimilarity passes when the keywords say the
# same: nearly every word of the message in it, or a rare word of the message with most of them,
# and a cosine the model still counts as related. Either alone let small talk in: a keyword share
# of 1.0 alone admitted "please continue" and "Hallo zusammen!" (their one word is on some page;
# their cosine is at the unrelated floor or the chunk is not among the nearest at all), and a
# share of 0.7 at a cosine of 0.2 admitted "translate 'cat' into Spanish" (BENCHMARKS.md,
# twenty-eighth session). Calibrated figures: the same for every model.
_ALL_WORDS = (0.8, 0.2)  # (keyword share, similarity)
_RARE_WORD = (0.5, 0.05)
# Without a cosine to weigh, the keywords alone, by stricter rules on which of the message's words
# the chunk holds (_Coverage). A name the model cannot read (a rare word of the message whose
# cosine sits at the unrelated floor: "Ozturk", "Boskoop"), the message a question or bare words
# naming it and something more: the keyword share of _RARE_WORD, every rare word of the message
# in the chunk, more of its words held than missed and at most one missed, none of those a word no
# note holds. No vector yet (a first index: the vector arm cannot see the chunk): only the share
# of _ALL_WORDS and two or more of the message's words, at most one missing. Asking the same
# coverage of the corroborated pass above kept a few asides out but lost German questions written
# in words of their own (BENCHMARKS.md, twenty-ninth session).
_NAME_SHARE = _RARE_WORD[0]
_UNEMBEDDED_SHARE = _ALL_WORDS[0]


# Titles before a name ("Wer ist Herr Ozturk?"; the note says "Herrn"): they mark the word after
# them as a person's name and are no word a note must hold.
_HONORIFICS = frozenset({"herr", "herrn", "frau", "mr", "mrs", "ms", "dr", "prof"})
# A question: a sentence of the message ends in a question mark ("Boskoop?!", "Boskoop？",
# "Boskoop? Danke."), not one inside a word or an address ("?ref=1").
_QUESTION = re.compile(r"[?？](?=[\s!?！？\"'”’»)]|$)")


class _Coverage:
    """Which of a message's content words (distinct) each candidate holds; asked of the keyword
    index once per word, only when a gate needs it."""

    def __init__(self, r: Retriever, qa: QueryAnalysis, among: list[Scored], rare: Sequence[str]) -> None:
        self._r, self._among, self._lang = r, among, qa.language
        # Words with a letter: a number ("17 times 23") names no topic a page could hold.
        typed = list(dict.fromkeys(w.lower() for w in qa.content_words if any(c.isalpha() for c in w)))
        self.words = [w for w in typed if w not in _HONORIFICS]
        self._rare = {w.lower() for w in rare}
        # A question, or two or more bare words ("Unterhaching Satzung"): not a statement that
        # mentions a name in passing ("ich habe Speichersticks im Laden gekauft" shares two words
        # of a page), nor one word alone ("haiku", "Bookmarks" found a page each that holds it).
        bare = len(qa.words) == len(qa.content_words) and len(self.words) >= 2
        self.asks = bool(_QUESTION.search(qa.text)) or bare
        # The name and another word of the message ("Herr" counts): a name alone ("Boskoop?",
        # "Zimt?", "Ozturk Ozturk?") says nothing of what is asked about it and needs the cosine
        # the corroborated pass asks (_RARE_WORD).
        self.several = len(typed) >= 2
        self._held: dict[str, set[str]] | None = None
        self._held_of: dict[str, list[str]] = {}
        self._known: dict[str, bool] = {}

    def counts(self, chunk_id: str) -> tuple[int, int, int]:
        """(words held, words missing, rare words of the message held)."""
        held = self._held_by(chunk_id)
        return len(held), len(self.words) - len(held), sum(w in self._rare for w in held)

    def misses_rare(self, chunk_id: str) -> bool:
        """Whether a rare word of the message is not in the chunk: the message names something
        else ("What does `Ozturk.parse()` return?" found a page holding "parse" and "return")."""
        held = set(self._held_by(chunk_id))
        return any(w not in held for w in self.words if w in self._rare)

    def _held_by(self, chunk_id: str) -> list[str]:
        # Memoised per chunk: counts, misses_rare, most and misses_unknown each ask in turn.
        done = self._held_of.get(chunk_id)
        if done is not None:
            return done
        if self._held is None:
            r, among, lang = self._r, self._among, self._lang
            # As written ("Ozturk"), in the title, or in any form of the message's language
            # ("verbreitert"; "Ueberschriften" typed for "Überschriften").
            self._held = {w: r.holding([w], among, lang) for w in self.words}
        held = self._held_of[chunk_id] = [w for w, ids in self._held.items() if chunk_id in ids]
        return held

    def misses_unknown(self, chunk_id: str) -> bool:
        """Whether a word of the message the chunk lacks is in no note at all, in no form: the
        message is about something else that happens to sit next to a name of the notes
        ("Urlaub in Boskoop?", "Dust allergy?", "Schüco Aktie?"). Such a word adds nothing to
        the ideal keyword score, so the share alone stays high."""
        held = set(self._held_by(chunk_id))
        for w in self.words:
            if w in held:
                continue
            if w not in self._known:
                self._known[w] = self._r.in_notes(w, self._lang)
            if not self._known[w]:
                return True
        return False

    def most(self, chunk_id: str) -> bool:
        """The chunk holds the message's words but at most one, more of them than it misses: a
        question is mostly its topic's words; an aside holds one word of a page among words of
        its own ("ich habe Speichersticks im Laden gekauft", "my graph paper is out")."""
        held, missing, _ = self.counts(chunk_id)
        return held > missing and missing <= 1


def _on_keywords(s: Scored, own: Scale, covers: _Coverage, *, embedded: bool) -> bool:
    """A candidate without a cosine to weigh passes on its keywords alone (see _NAME_SHARE)."""
    bm = s.candidate.bm25
    if bm is None:
        return False
    share = own.bm25(bm, 0.0)
    cid = s.candidate.chunk_id
    # The figures of the message and the share first: the words held are asked of the keyword
    # index, once per word of the message, only for a candidate these leave in play.
    if not embedded:
        # No vector yet (a first index): only the stricter rule. The name rule is for a name the
        # model read and could not place; here the model has not read the chunk at all, and at
        # the name rule's share a real first index let asides in ("Wie viel ist auf meinen
        # Laufwerken noch frei?" found a page of a cipher tool).
        return share >= _UNEMBEDDED_SHARE and covers.counts(cid)[0] >= 2 and covers.most(cid)
    # "Wer ist Herr Ozturk?" (the note says "Herrn"): a name carries the question when the chunk
    # holds every name of it and more of the message's words than it misses. A tie let asides in
    # ("I watched Dust yesterday?", "Dust on my monitor?"), also with the name typed with a
    # capital: German nouns and a sentence's first word have one too.
    return (
        covers.asks
        and covers.several
        and share >= _NAME_SHARE
        and covers.counts(cid)[2] > 0
        and covers.most(cid)
        and not covers.misses_rare(cid)
        and not covers.misses_unknown(cid)
    )


def _corroborated(s: Scored, similarity: float, own: Scale, covers: _Coverage) -> bool:
    bm = s.candidate.bm25
    if bm is None:
        return False
    share = own.bm25(bm, 0.0)
    all_words = share >= _ALL_WORDS[0] and similarity >= _ALL_WORDS[1]
    rare_word = "rareTerm" in s.boosts and share >= _RARE_WORD[0] and similarity >= _RARE_WORD[1]
    if all_words or rare_word:
        return True
    # A name the model cannot read: its cosine says nothing either way.
    return _on_keywords(s, own, covers, embedded=True)


def history_weight(rc: RecallConfig, qa: QueryAnalysis) -> float:
    """The previous turns' share by the message's content-word class; a message that refers back
    ("what does it cost?") counts one class lower, because its own words alone name the wrong
    thing (the cost of anything at all)."""
    cls = qa.word_class
    if rc.follow_up_cues and qa.refers_back:
        cls = max(0, cls - 1)
    return (rc.history_weight_none, rc.history_weight_short, rc.history_weight_long)[cls]


def _recall_parts(r: Retriever, rc: RecallConfig, qa: QueryAnalysis, turns: list[str]) -> BmParts:
    """BM25 words of a recall: the message's, then the history's content words at the share the
    history has in the query vector (a follow-up without content words is all history); each in
    the forms the keyword arm should look for (``Retriever.keyword_words``)."""
    own = r.keyword_words(qa.content_words, qa.language)
    parts: BmParts = [(" ".join(own), 1.0)] if qa.content_words else []
    said = [analyze(t) for t in reversed(turns)]
    words = [w for a in said for w in r.keyword_words(a.content_words, a.language)]
    history = " ".join(list(dict.fromkeys(w.lower() for w in words))[: rc.history_words])
    if history:
        weight = history_weight(rc, qa)
        parts.append((history, 1.0 if not parts else weight))
    return parts


def _recall_vectors(
    r: Retriever, rc: RecallConfig, text: str, qa: QueryAnalysis, turns: list[str]
) -> list[np.ndarray[Any, Any]] | None:
    serving = r.stores.serving
    if serving is None:
        return None
    model = serving.model
    message = r.query_vector(model, text) if qa.words else None
    if not turns:
        return [message] if message is not None else None
    # Turns are what someone said, like the message: embedded as queries (e5 models tell the two
    # apart by prefix), newest last.
    history = np.mean([r.query_vector(model, t) for t in turns], axis=0)
    weight = history_weight(rc, qa)
    blended = history if message is None else (1 - weight) * message + weight * history
    blended = blended / max(float(np.linalg.norm(blended)), 1e-12)
    # A message with content words also runs alone; each query is fused on its own.
    return [blended, message] if message is not None and qa.content_words else [blended]


def _alone(rest: str) -> bool:
    """Whether a message's text beside its time phrase is at most a conjunction ("und ?")."""
    return all(w.lower() in ("and", "und", "or", "oder") for w in WORD.findall(rest))


def _follows_an_agenda_question(history: Sequence[str]) -> bool:
    """Whether the last turns asked about plans ("Was habe ich morgen vor?"): a follow-up's time
    phrase looks ahead as theirs did."""
    return any(asks_ahead(t) for t in history[-2:])


def _follows_a_question_about_self(message: str, qa: QueryAnalysis, history: Sequence[str]) -> bool:
    """A follow-up of a question about the person's own doings in the last turns: one that refers
    back ("and yesterday?") or a question of its time phrase alone ("today?", "heute?" after "what
    did I do yesterday?"), which alone would read as small talk. ``qa`` is the message without its
    time phrase."""
    if not any(asks_about_self(t) for t in history[-2:]):
        return False
    return qa.refers_back or (not qa.content_words and ends_asked(message))
