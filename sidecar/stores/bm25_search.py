"""The keyword index's reads, a mixin of ``Bm25Index``: searches of chunks and pages over the
vault's, the wiki's and the memory indexes, counts of a word, the umlaut readings of a query.
Its own module because a search only reads what the writes of ``bm25`` and the inboxes of
``bm25_inboxes`` keep; the state it reads is the index's own, made in ``Bm25Index.__init__``.

Queries are built from analysed terms with ``Query.term_query``: no user text ever reaches
Tantivy's query parser, so ``[[x]]``, ``"``, ``(``, ``AND``, ``foo:bar`` cannot raise or match
everything.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

import tantivy

from sidecar.contracts.errors import PassingFaultError, StoreError
from sidecar.contracts.wire import memory_agent
from sidecar.stores.bm25_folder import Folder, engine, look_memo
from sidecar.stores.bm25_inboxes import Bm25Inboxes, Pair
from sidecar.stores.bm25_scoring import Terms
from sidecar.stores.bm25_text import field_boosts, german_fold
from sidecar.stores.cjk import bigrams
from sidecar.stores.umlauts import UmlautWords

log = logging.getLogger(__name__)

# Every agent's memory in one more pair of indexes (``bm25/memory-all``), written beside the
# inboxes: a person's search (no agent scope) reads it alone instead of every inbox (300 inboxes
# cost 0.7-1.2 s a search and 640 threads for five minutes). Its name in ``failing`` has a dot,
# which no agent's name has. What it holds and when a search reads it: ``bm25``.
EVERYONE = ".all"
SHARED = ""  # the vault's and the wiki's index, as a search's ``read`` names it (no agent's name)
EVERYONE_DIR = "memory-all"

SearchFault = tuple[
    str, PassingFaultError
]  # a memory index a search could not read (EVERYONE or an agent), and why


def _passed(part: str, exc: PassingFaultError, faults: list[SearchFault] | None) -> None:
    """A memory index a search could not read for a fault that passes: no damage (not reported
    for repair), but its hits are missing, which the caller is told (``faults``) to say so. Was:
    logged alone, and the answer came back thinner with nothing in status or the answer."""
    log.warning(
        "keyword_search_failed part=%s error=%s", EVERYONE_DIR if part == EVERYONE else f"memory/{part}", exc
    )
    if faults is not None:
        faults.append((part, exc))


def _told(read: set[str] | None, part: str) -> None:
    """A search read ``part`` without a fault (see ``Bm25Index.search``'s ``read``)."""
    if read is not None:
        read.add(part)


def any_of(schema: tantivy.Schema, field: str, values: Iterable[str]) -> tantivy.Query:
    """The documents whose raw ``field`` is one of ``values``. A small set is a union of term
    queries, cheaper than Tantivy's ``term_set_query`` (which matches the set against the field's
    whole term dictionary in every segment): a page search restricted to 56 notes 0.20 against
    0.50 ms. The union's cost grows with each clause, so past ``_UNION_MOST`` values the term set
    is the cheaper one (18,000 documents, 2,400 ids: 3.7 ms against 24 ms as a union). Either
    way the score is not the set's: callers that keep a score wrap it in ``const_score_query``."""
    values = list(values)
    if len(values) > _UNION_MOST:
        return tantivy.Query.term_set_query(schema, field, values)
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, field, v)) for v in values]
    )


# Where a union of term queries stops being cheaper than a term set: measured between ~600 and
# ~2,400 ids depending on the index's size; set below the lower end.
_UNION_MOST = 400


class Bm25Search(Bm25Inboxes):
    """The reads of a ``Bm25Index`` (which sets the state below): ``search`` and ``search_pages``
    (an agent's memory scored on the vault's scale, ``bm25_scoring``), ``doc_freq``, ``holding``,
    ``ideal_score``, ``umlaut_readings``."""

    schema: tantivy.Schema
    analyzers: dict[str, tantivy.TextAnalyzer]
    _field_analyzer: dict[str, str]
    _chunks: Folder
    _pages: Folder
    _everyone: Pair | None
    everyone_ready: bool
    umlauts: UmlautWords
    _successor: Bm25Search | None

    if TYPE_CHECKING:  # the index's own (``Bm25Index``)

        @property
        def _searcher(self) -> tantivy.Searcher: ...

    def analyze(self, text: str, field: str = "body") -> list[str]:
        """Terms of ``text`` as the field indexes them (CJK runs as bigrams, see ``stores.cjk``)."""
        analyzer = self.analyzers[self._field_analyzer[field]]
        memo = look_memo()
        # Within a search (``one_look``) the same words are analysed for several counts: once.
        # Kept with the analyzer itself: an id names it only while it is alive.
        key = ("analyze", id(analyzer), field == "body_de", text)
        cached = memo.get(key) if memo is not None else None
        if isinstance(cached, tuple) and cached[0] is analyzer:
            return list(cached[1])
        folded = bigrams(text)
        terms = analyzer.analyze(german_fold(folded) if field == "body_de" else folded)
        if memo is not None:
            memo[key] = (analyzer, tuple(terms))
        return list(terms)

    def doc_freq(
        self, word: str, *, pages: bool = False, agent: str | None = None, field: str = "body"
    ) -> int:
        """Chunks (with ``pages``: notes) of the vault and the wiki, and of ``agent``'s own memory,
        whose body holds ``word`` (its rarest term when the analyzer splits it). Counted by a
        query, not read from the term dictionary, which still counts the chunks of edited notes
        until their segment is merged. ``field``: the title, or a stemmed body, instead."""
        searchers = [self._pages.searcher if pages else self._searcher]
        own = self._inbox(agent) if agent is not None else None
        if own is not None:
            searchers.append(own[1].searcher if pages else own[0].searcher)
        with engine("count"):
            counts = [self._term_count(searchers, field, t) for t in dict.fromkeys(self.analyze(word, field))]
        return int(min(counts, default=0))

    def _term_count(self, searchers: Sequence[tantivy.Searcher], field: str, term: str) -> int:
        """The documents of ``searchers`` holding ``term`` in ``field``; within a search
        (``one_look``) counted once per searchers: a word's forms and fields repeat the same
        terms (up to five counts per content word), and the look pins each searcher: unchanged
        while it lasts (kept with the count: an id names a searcher only while it is alive)."""
        memo = look_memo()
        key = ("count", field, term, *map(id, searchers))
        cached = memo.get(key) if memo is not None else None
        if isinstance(cached, tuple) and all(a is b for a, b in zip(cached[0], searchers, strict=True)):
            return int(cached[1])
        count = sum(
            s.search(tantivy.Query.term_query(self.schema, field, term), limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
            for s in searchers
        )
        if memo is not None:
            memo[key] = (tuple(searchers), count)
        return int(count)

    def held_with(
        self, word: str, others: Sequence[str], *, pages: bool = False, agent: str | None = None
    ) -> list[int]:
        """Per word of ``others``: the chunks (with ``pages``: notes) whose body as written holds
        both ``word`` and it, counted as ``doc_freq`` counts (the vault, the wiki and ``agent``'s
        own memory). Few notes hold a rare word, so each count is a small intersection."""
        terms = list(dict.fromkeys(self.analyze(word)))
        if not terms:
            return [0] * len(others)
        searchers = [self._pages.searcher if pages else self._searcher]
        own = self._inbox(agent) if agent is not None else None
        if own is not None:
            searchers.append(own[1].searcher if pages else own[0].searcher)
        schema = self.schema
        out = []
        with engine("count"):
            for other in others:
                found = list(dict.fromkeys(self.analyze(other)))
                if not found:
                    out.append(0)
                    continue
                both = [*terms, *found]
                query = tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, tantivy.Query.term_query(schema, "body", t)) for t in both]
                )
                out.append(sum(s.search(query, limit=1, count=True).count for s in searchers))  # type: ignore[attr-defined]  # missing from the stubs
        return out

    def holding(
        self, words: Sequence[str], among: Sequence[str], agents: Collection[str] = (), field: str = "body"
    ) -> set[str]:
        """Those of the chunks ``among`` whose body as written holds one of ``words`` (every term
        of it, when the analyzer splits a word): the chunks ``doc_freq`` counts, not those that
        match only a stemmed form. ``agents``: the inboxes the memory chunks among them are of
        (no other is asked). ``field``: the title, or a stemmed body (``body_de``: any form of
        the word), instead."""
        schema = self.schema
        per_word = []
        for word in words:
            terms = list(dict.fromkeys(self.analyze(word, field)))
            if terms:
                per_word.append(
                    tantivy.Query.boolean_query(
                        [(tantivy.Occur.Must, tantivy.Query.term_query(schema, field, t)) for t in terms]
                    )
                )
        if not per_word or not among:
            return set()
        any_word = tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_word])
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, any_word),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(any_of(schema, "chunk_id", among), 0.0)),
            ]
        )
        folders = [(self._chunks, query)]
        if agents and self._everyone is not None and self.everyone_ready:
            # Whether a chunk holds a word is the chunk's alone: one index answers for every agent
            # named (no agent's own index opened).
            named = tantivy.Query.const_score_query(any_of(schema, "agent", sorted(agents)), 0.0)
            folders.append(
                (
                    self._everyone[0],
                    tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, named)]),
                )
            )
            agents = ()
        for agent in sorted(agents):
            pair = self._inbox(agent)
            if pair is not None:
                folders.append((pair[0], query))
        out: set[str] = set()
        for folder, asked in folders:
            searcher = folder.searcher
            if searcher.num_docs == 0:
                continue
            with engine("search"):
                result = searcher.search(asked, limit=len(among), count=False)
                out.update(
                    str(searcher.doc(address).get_first("chunk_id")) for _score, address in result.hits
                )
        return out

    def search(
        self,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
        *,
        key: str | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        """(chunk_id, bm25 score) for chunks matching any word of ``text``, best first (of one note
        when ``key`` is given).

        ``text`` is a string or (text, weight) parts (a follow-up's history words count less than
        the message's). It is analysed per field (never parsed as query syntax); ``sources``
        restricts to those sources; ``agent_scope`` limits memory to one agent's inbox (vault and
        wiki stay). Restrictions score nothing: a hit's score is its text's match alone, the same
        with or without them. ``faults``: told each memory index that could not be read for a
        fault that passes (no file handles left, a share's hiccup): its hits are missing, the
        others' are returned. Every agent's memory (``EVERYONE``) that cannot be read has the
        agents' own indexes read in its place (each one that fails told as well): only the
        agents without one (removed as unused) are missed. ``read``: told each index read
        without a fault (``SHARED``, ``EVERYONE``, an agent), whether it matched or not.
        """
        if self._successor is not None:  # a search that took this index before the swap
            return self._successor.search(
                text, limit, sources, agent_scope, key=key, stem=stem, faults=faults, read=read
            )
        return self._search(
            False,
            text,
            limit,
            sources=sources,
            agent_scope=agent_scope,
            key=key,
            stem=stem,
            faults=faults,
            read=read,
        )

    def search_pages(
        self,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
        *,
        key: str | None = None,
        keys: Sequence[str] | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        """(note key, bm25 score) for whole notes (only the one ``key``, or only ``keys``), as
        ``search`` scores chunks."""
        if self._successor is not None:
            return self._successor.search_pages(
                text, limit, sources, agent_scope, key=key, keys=keys, stem=stem, faults=faults, read=read
            )
        return self._search(
            True,
            text,
            limit,
            sources=sources,
            agent_scope=agent_scope,
            key=key,
            keys=keys,
            stem=stem,
            faults=faults,
            read=read,
        )

    def umlaut_readings(self, words: Iterable[str], agent: str | None = None) -> dict[str, str]:
        """The notes' umlaut words that ``words`` transcribe ("Kuendigung" -> "kündigung",
        "Uebersicht" -> "übersicht"), by the word lowercased, for a search beside the words as
        typed: only the German field folds ue into u, weighted half unless the query was taken for
        German (a word or two is not), so "Kuendigung" scored a third of "Kündigung" and fell
        under recall's floor.
        A word is read when the notes write it with the umlaut (``umlauts``): asked of the index
        alone, which folds umlauts, "poet" read as "pot", "aerial" as "arial" and "neuen" as
        "neun", which no note writes as "pöt", "ärial" or "neün". It is not read when a title or
        a text searched (the vault's, the wiki's, ``agent``'s memory) writes it as typed: then
        the typed spelling is the notes' own too ("Uebersicht.md", "Queue", a memory's
        "Kuendigung"), and a passing mention of the umlaut word, matched in every field, would
        outrank the note named so. No count is asked of the umlaut word: a deleted note's word,
        kept in the list until a refill, finds nothing."""
        if not len(self.umlauts):
            return {}
        out: dict[str, str] = {}
        for word in {w.lower() for w in words}:  # each distinct word asked once
            written = self.umlauts.written_with_umlaut(word)
            if written is not None and not self._written_as_typed(word, agent):
                out[word] = written
        return out

    def _written_as_typed(self, word: str, agent: str | None) -> bool:
        """Whether a chunk's title or text (of the vault and the wiki, and of ``agent``'s memory)
        holds ``word`` as written (the title's and body's analyzer folds ü but not ue)."""
        searchers = [self._searcher]
        own = self._inbox(agent) if agent is not None else None
        if own is not None:
            searchers.append(own[0].searcher)
        terms = dict.fromkeys(self.analyze(word))
        with engine("count"):
            return any(
                s.search(tantivy.Query.term_query(self.schema, f, t), limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
                for s in searchers
                for f in ("title", "body")
                for t in terms
            )

    def _terms(self, text: str | Sequence[tuple[str, float]], stem: str | None) -> Terms:
        parts = [(text, 1.0)] if isinstance(text, str) else list(text)
        terms: Terms = {}
        boosts = field_boosts(stem)
        for part, weight in parts:
            for f, boost in boosts.items():
                for t in self.analyze(part, f):
                    terms[f, t] = max(terms.get((f, t), 0.0), boost * weight)
            # A title is folded as written (ü -> u) and not German-stemmed: 'Kuendigung' meets a
            # title 'Kündigung' through its German folding, as it meets the word in a body.
            for t in self.analyze(german_fold(part), "title"):
                terms["title", t] = max(terms.get(("title", t), 0.0), boosts["title"] * weight)
        return terms

    def _search(
        self,
        pages: bool,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        *,
        sources: Sequence[str] | None,
        agent_scope: str | None,
        key: str | None,
        keys: Sequence[str] | None = None,
        stem: str | None = None,
        faults: list[SearchFault] | None = None,
        read: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        self._usable()
        terms = self._terms(text, stem)
        if not terms or limit <= 0:
            return []
        shared_folder = self._pages if pages else self._chunks
        # Which notes' keys go where: a vault or wiki key to the shared index, a memory key to
        # its agent's inbox (of the agents in scope).
        in_scope = [agent_scope] if agent_scope is not None else self.agents()
        want_shared = sources is None or any(s != "memory" for s in sources)
        want_memory = sources is None or "memory" in sources
        shared_keys: Sequence[str] | None = keys
        inbox_keys: dict[str, list[str] | None] = dict.fromkeys(in_scope) if want_memory else {}
        if key is not None or keys is not None:
            wanted = [key] if key is not None else list(keys or ())
            shared_keys = [k for k in wanted if memory_agent(k) is None]
            want_shared = want_shared and bool(shared_keys)
            per_agent: dict[str, list[str]] = {}
            for k in wanted:
                owner = memory_agent(k)
                if owner is not None and owner in inbox_keys:
                    per_agent.setdefault(owner, []).append(k)
            inbox_keys = dict(per_agent)
        found: list[tuple[str, float]] = []
        shared = shared_folder.searcher
        if agent_scope is None and want_memory and self._everyone is not None and self.everyone_ready:
            # A person's search: every agent's memory from one index, no inbox opened.
            wanted_keys = None
            if key is not None or keys is not None:
                wanted_keys = [k for k in ([key] if key is not None else keys or ()) if memory_agent(k)]
            try:
                found += self._everyone_hits(
                    pages,
                    terms=terms,
                    limit=limit,
                    keys=wanted_keys,
                    shared_folder=shared_folder,
                    shared=shared,
                )
                self.failing.pop(f"{EVERYONE}/{'pages' if pages else 'chunks'}", None)
                inbox_keys = {}
                _told(read, EVERYONE)
            except PassingFaultError as exc:  # no handles left, a full disk: no damage, not repaired
                _passed(EVERYONE, exc, faults)
            except StoreError as exc:  # read the inboxes instead; reported until the repair
                log.warning("keyword_search_failed part=%s error=%s", EVERYONE_DIR, exc)
                self.failing[f"{EVERYONE}/{'pages' if pages else 'chunks'}"] = str(exc)
        self._hold_open(len(inbox_keys))  # a person's search: the inboxes it opens stay a while
        if want_shared:
            found += self._query(
                shared,
                terms,
                limit,
                sources=None if sources is None else [s for s in sources if s != "memory"],
                keys=shared_keys,
            )
            _told(read, SHARED)
        for agent, agent_keys in inbox_keys.items():
            try:
                found += self._inbox_hits(
                    agent,
                    pages=pages,
                    terms=terms,
                    limit=limit,
                    keys=agent_keys,
                    shared_folder=shared_folder,
                    shared=shared,
                )
                _told(read, agent)
            except PassingFaultError as exc:  # not made yet for want of space (or handles): no damage
                _passed(agent, exc, faults)
            except StoreError as exc:
                # One agent's damaged index: its hits are missing, no one else's search fails;
                # reported (``failing``) until a search of it succeeds or the repair rebuilds it.
                log.warning("keyword_search_failed inbox=%s error=%s", agent, exc)
                self.failing[f"{agent}/{'pages' if pages else 'chunks'}"] = str(exc)
        found.sort(key=lambda hit: -hit[1])
        return found[:limit]

    def _everyone_hits(
        self,
        pages: bool,
        *,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """Every agent's memory hits from the pair that holds it all, its terms reweighted to the
        vault's statistics as an inbox's are (``Scorer``): the idf is the vault's, the length
        normalisation that of all memory (an inbox's was its own agent's). A person sees all
        memory: the statistics of all of it tell a person nothing new."""
        assert self._everyone is not None
        if keys == []:
            return []
        folder = self._everyone[1] if pages else self._everyone[0]
        return self._on_vault_scale(
            folder, terms=terms, limit=limit, keys=keys, shared_folder=shared_folder, shared=shared
        )

    def _inbox_hits(
        self,
        agent: str,
        *,
        pages: bool,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """An agent's hits from its own index, on the vault's scale (``_on_vault_scale``)."""
        pair = self._inbox(agent)
        if pair is None:
            return []
        folder = pair[1] if pages else pair[0]
        if folder.searcher.num_docs == 0:
            return []
        hits = self._on_vault_scale(
            folder, terms=terms, limit=limit, keys=keys, shared_folder=shared_folder, shared=shared
        )
        self.failing.pop(f"{agent}/{'pages' if pages else 'chunks'}", None)
        if self._open.get(agent) is not pair:  # opened for this search alone (see ``_inbox``)
            self._scorer.forget(pair)
        return hits

    def _on_vault_scale(
        self,
        folder: Folder,
        *,
        terms: Terms,
        limit: int,
        keys: Sequence[str] | None,
        shared_folder: Folder,
        shared: tantivy.Searcher,
    ) -> list[tuple[str, float]]:
        """Hits of a memory index (an inbox's, or all memory's), its terms reweighted to the
        vault's statistics (``Scorer``); one searcher of each index for the statistics and the
        search (a commit between two reads mixed an old count with a new index: a score nine
        times too high). An index that matched nothing is checked for damage."""
        searcher = folder.searcher
        if searcher.num_docs == 0:
            return []
        weighted = self._scorer.terms(
            self._scorer.counts(folder, searcher), self._scorer.counts(shared_folder, shared), terms
        )
        hits = self._query(searcher, weighted, limit, sources=None, keys=keys) if weighted else []
        if not hits:
            self._check_files(folder)
        return hits

    def _check_files(self, folder: Folder) -> None:
        """An inbox that holds notes and matched nothing: StoreError if a file of it was damaged
        under the running daemon (it answers nothing, without an error). Skipped while a write
        holds the index (a search does not wait for one; the next search checks)."""
        if not self._lock.try_free():
            return
        try:
            why = folder.damage()
        finally:
            self._lock.release()
        if why is not None:
            raise StoreError(f"BM25 index {folder.path} is damaged: {why}")

    def _restricted(
        self, terms: Terms, sources: Sequence[str] | None, keys: Sequence[str] | None
    ) -> tantivy.Query:
        schema = self.schema
        should = [
            (tantivy.Occur.Should, tantivy.Query.boost_query(tantivy.Query.term_query(schema, f, t), boost))
            for (f, t), boost in terms.items()
        ]
        clauses = [(tantivy.Occur.Must, tantivy.Query.boolean_query(should))]
        restrict: list[tantivy.Query] = []
        if sources is not None:
            restrict.append(any_of(schema, "source", sources))
        if keys is not None:
            restrict.append(any_of(schema, "key", keys))
        # Restrictions score nothing: a hit's score is its text's match alone.
        clauses += [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in restrict]
        return tantivy.Query.boolean_query(clauses)

    def _query(
        self,
        searcher: tantivy.Searcher,
        terms: Terms,
        limit: int,
        *,
        sources: Sequence[str] | None,
        keys: Sequence[str] | None,
    ) -> list[tuple[str, float]]:
        query = self._restricted(terms, sources, keys)
        with engine("search"):  # damaged segment files
            result = searcher.search(query, limit=limit, count=False)
            return [
                (str(searcher.doc(address).get_first("chunk_id")), float(score))
                for score, address in result.hits
            ]

    def ideal_score(self, text: str, *, pages: bool = False, stem: str | None = None) -> float:
        """What a chunk (a page) scores that holds every word of ``text`` once, at average length,
        in its body (each word's idf once per copy of the body, at that copy's weight: see
        ``field_boosts``).
        Dividing by it puts BM25 on a scale that means the same for every query: 1 is "all of it,
        once", a match of the rarest of three words counts more than one of the commonest. Words
        the index has never seen count fully (a query about something absent is not a good match)."""
        searcher = (self._pages if pages else self._chunks).searcher
        # Within a search (``one_look``) once: its scale is asked while the query embeds (``arms``)
        # and again by each ranking of the same words (kept with the searcher, as a count is).
        memo = look_memo()
        key = ("ideal", text, pages, stem, id(searcher))
        cached = memo.get(key) if memo is not None else None
        if isinstance(cached, tuple) and cached[0] is searcher:
            return float(cached[1])
        n = max(int(searcher.num_docs), 1)
        total = 0.0
        boosts = field_boosts(stem)
        for f in ("body", "body_en", "body_de"):
            for t in dict.fromkeys(self.analyze(text, f)):
                try:
                    with engine("doc_freq"):
                        df = int(searcher.doc_freq(f, t))
                except StoreError:
                    df = 0
                total += boosts[f] * math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        if memo is not None:
            memo[key] = (searcher, total)
        return total
