"""BM25 over chunk text with Tantivy: the keyword arm. One writer (this process), readers reload.

Queries are built from analysed terms with ``Query.term_query``: no user text ever reaches
Tantivy's query parser, so ``[[x]]``, ``"``, ``(``, ``AND``, ``foo:bar`` cannot raise or match
everything. Imports ``errors`` and ``cjk``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import shutil
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy

from sidecar.contracts.errors import DaemonRunningError, StoreError, StoreOutdatedError
from sidecar.stores.cjk import bigrams

log = logging.getLogger(__name__)

# The names are part of the index's schema: text prepared differently (CJK bigrams since 0.4, the
# file name in the title field since chunker 6) gets new names, so an index written the old way no
# longer opens and is refilled from the manifest.
ANALYZER = "sidecar_text_2"
ANALYZER_EN = "sidecar_en_2"
ANALYZER_DE = "sidecar_de_2"
# A chunk's heading path is part of its body: a heading word is one more occurrence, saturating
# with the body's own (BM25F's idea). Scored as a field of its own, a short heading path got a
# high idf and nearly no length penalty, and a generic word there outweighed the body (keyword arm
# on the German set MRR 0.45 -> 0.54, SciFact nDCG 0.62 -> 0.66; BENCHMARKS.md, twelfth session).
# The note's title and aliases stay a field of their own, counted once beside the body.
# The body is indexed three times: as written (folded), English-stemmed and German-stemmed, so a
# note matches in its own language without detecting it. The exact form counts most unless the
# query's language is known: then that language's stemmed copy does (``field_boosts``).
FIELD_BOOSTS = {"title": 1.0, "body": 1.0, "body_en": 0.5, "body_de": 0.5}


def field_boosts(stem: str | None = None) -> dict[str, float]:
    """The field weights; with ``stem`` (a query's language) the body as written and the body
    stemmed in that language swap weights: a word's other forms in the query's language count
    as much as its exact form."""
    boosts = dict(FIELD_BOOSTS)
    if stem and f"body_{stem}" in boosts:
        boosts["body"], boosts[f"body_{stem}"] = boosts[f"body_{stem}"], boosts["body"]
    return boosts


FIELD_ANALYZER = {"title": ANALYZER, "body": ANALYZER, "body_en": ANALYZER_EN, "body_de": ANALYZER_DE}
_WRITER_HEAP = 64_000_000
_LOW_DISK = 2 * _WRITER_HEAP  # less free than two writer flushes: a failed write likely met a full disk
# str.replace per letter: str.translate looks every character up in a dict, 75 times slower on
# a note's text, and the German field folds every chunk and page of a sweep.
_UMLAUT = (("ä", "a"), ("ö", "o"), ("ü", "u"), ("Ä", "a"), ("Ö", "o"), ("Ü", "u"), ("ß", "ss"))
_DIGRAPH = re.compile(r"(?<=[a-z])([aou])e", re.IGNORECASE)


def _engine_failure(exc: BaseException) -> bool:
    """Tantivy's errors on damaged files: raised ones, and its panics, which pyo3 turns into a
    ``PanicException`` that derives from BaseException (an ``except Exception`` lets it through)."""
    return isinstance(exc, (ValueError, OSError, RuntimeError)) or type(exc).__name__ == "PanicException"


@contextlib.contextmanager
def _engine(what: str) -> Iterator[None]:
    """Tantivy's failures (raised or panicking) as a StoreError naming ``what`` was done."""
    try:
        yield
    except StoreError:
        raise
    except BaseException as exc:
        if not _engine_failure(exc):
            raise
        raise StoreError(f"BM25 {what} failed: {exc}") from exc


def _disk_hint(path: Path) -> str:
    """What a failed write most likely met, when the disk says so: Tantivy's own message after a
    worker died ("an index writer was killed") no longer names the full disk."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return ""
    return f" (only {free / 1e6:.1f} MB free on the index's disk: full?)" if free < _LOW_DISK else ""


def german_fold(text: str) -> str:
    """Kündigung, Kuendigung and Kundigung meet as kundigung; Straße and Strasse as strasse."""
    for letter, plain in _UMLAUT:
        if letter in text:
            text = text.replace(letter, plain)
    return _DIGRAPH.sub(r"\1", text)


def text_analyzer(stem: str | None = None) -> tantivy.TextAnalyzer:
    """Unicode words, lowercased, accents folded (Straße -> strasse), optionally stemmed."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(r"[\w]+"))
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if stem:
        builder = builder.filter(tantivy.Filter.stemmer(stem))
    return builder.build()


_ANALYZERS = {ANALYZER: None, ANALYZER_EN: "english", ANALYZER_DE: "german"}


def _schema() -> tantivy.Schema:
    # Only term queries are ever run: no positions (the .pos files were a fifth of the index and
    # their pages stayed mapped); the filter fields need neither positions nor frequencies.
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("key", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("source", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("agent", stored=False, tokenizer_name="raw", index_option="basic")
    for name in FIELD_BOOSTS:
        sb.add_text_field(name, stored=False, tokenizer_name=FIELD_ANALYZER[name], index_option="freq")
    return sb.build()


@dataclass(frozen=True)
class Bm25Doc:
    chunk_id: str
    key: str
    source: str
    agent: str
    title: str  # the note's title and aliases
    headings: str  # the chunk's heading path, indexed as part of the body
    body: str

    @classmethod
    def of(
        cls,
        chunk_id: str,
        key: str,
        source: str,
        agent: str,
        *,
        title: str,
        aliases: Sequence[str],
        headings: Sequence[str],
        body: str,
    ) -> Bm25Doc:
        """One chunk's document, the same whether written from a note or refilled from the manifest.
        Its title field holds the note's title, its file name when a ``title`` property differs
        (the name Obsidian shows everywhere: a web clipping's "Rezept Linsensuppe" was not found
        by "Linsensuppe") and its aliases."""
        name = key.rsplit("/", 1)[-1]
        names = [title] if name.casefold() == title.casefold() else [title, name]
        return cls(chunk_id, key, source, agent, " ".join([*names, *aliases]), " ".join(headings), body)


REOPEN_EVERY = 500  # commits between openings anew of a keyword index (see _Folder._reopen)


class _Folder:
    """One Tantivy index in one folder: its writer and its current searcher."""

    def __init__(self, path: Path, schema: tantivy.Schema) -> None:
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder belongs: moved aside like a damaged store
            raise StoreError(f"BM25 index {path} cannot be made: {exc.strerror or exc}") from exc
        self.schema = schema
        self.commits = 0
        try:
            self.index, self.writer, self.searcher = self._open()
        except BaseException as exc:
            if not _engine_failure(exc):
                raise
            if "schema does not match" in str(exc):
                raise StoreOutdatedError(f"BM25 index {path} has the fields of another version") from exc
            if "LockBusy" in str(exc):
                # Another process writes this index (a daemon whose lock file was removed): in
                # use, not damaged. Moved aside as broken, the running daemon's index was lost.
                raise DaemonRunningError(
                    f"the keyword index {path} is in use by another process (another sidecar daemon "
                    "on this home?); not opened"
                ) from exc
            raise StoreError(f"BM25 index {path} cannot be opened: {exc}") from exc

    def _open(self) -> tuple[tantivy.Index, tantivy.IndexWriter, tantivy.Searcher]:
        index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
        for name, stem in _ANALYZERS.items():
            index.register_tokenizer(name, text_analyzer(stem))
        writer = index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        index.reload()
        return index, writer, index.searcher()

    def _reopen(self) -> None:
        """The index opened anew: Tantivy's directory keeps the path of every segment file it
        ever opened, deleted ones too (about 1 KB a commit, never given back: a note written to
        every second cost 250 MB a day); a fresh one holds only the live files'. Searches keep
        the searcher they hold; the new one is swapped in whole."""
        try:
            with _engine("reopen"):
                self.writer.wait_merging_threads()  # ends the writer: releases the index lock
                index, writer, searcher = self._open()
        except StoreError as exc:
            log.warning("bm25_reopen_failed path=%s error=%s", self.path, exc)
            self.recover_writer()  # a writer on the index as it was
            return
        self.index, self.writer, self.searcher = index, writer, searcher

    def recover_writer(self) -> None:
        """After a failed commit: drop the uncommitted documents (the manifest still marks those
        notes as being indexed, so the next sweep redoes them) and keep a usable writer."""
        try:
            with _engine("rollback"):
                self.writer.rollback()
            return
        except StoreError as exc:
            log.warning("bm25_writer_reset reason=%s", exc)
        with contextlib.suppress(StoreError), _engine("merge wait"):
            self.writer.wait_merging_threads()  # releases the index lock
        try:
            with _engine("writer"):
                self.writer = self.index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        except StoreError as exc:
            log.error("bm25_writer_unavailable error=%s", exc)

    def commit(self) -> None:
        try:
            with _engine("commit"):  # disk full, read-only folder, damaged segments
                self.writer.commit()
        except StoreError:
            self.recover_writer()
            raise
        with _engine("reload"):
            self.index.reload()
            self.searcher = self.index.searcher()
        self.commits += 1
        if self.commits % REOPEN_EVERY == 0:
            self._reopen()

    def close(self) -> None:
        try:
            with _engine("close"):
                self.writer.wait_merging_threads()
        except StoreError as exc:  # a failed writer: nothing more to flush
            log.debug("bm25_close %s", exc)


class Bm25Index:
    """BM25 over chunks and over whole notes (pages), one Tantivy index each in ``chunks/`` and
    ``pages/`` of one folder; ``add``/``delete_key`` then ``commit`` make changes visible.

    Hits are chunks, but a note's words are spread over its chunks: a page holding every word of
    a question in different sections matches it better than any of its chunks does. The page
    index scores that (``search_pages``), and fusion hands it to the page's chunks.
    """

    def __init__(self, path: Path) -> None:
        self.path = path  # made by its two parts' folders (with their guard)
        if (path / "meta.json").exists():  # one index in the folder itself: before pages
            raise StoreOutdatedError(f"BM25 index {path} has no page index")
        self.schema = _schema()
        self.analyzers = {name: text_analyzer(stem) for name, stem in _ANALYZERS.items()}
        self._lock = threading.Lock()
        self._closed = False
        self._chunks = _Folder(path / "chunks", self.schema)
        self._pages = _Folder(path / "pages", self.schema)

    @property
    def _searcher(self) -> tantivy.Searcher:
        return self._chunks.searcher

    def analyze(self, text: str, field: str = "body") -> list[str]:
        """Terms of ``text`` as the field indexes them (CJK runs as bigrams, see ``stores.cjk``)."""
        name = FIELD_ANALYZER[field]
        text = bigrams(text)
        return list(self.analyzers[name].analyze(german_fold(text) if name == ANALYZER_DE else text))

    def add(self, docs: Iterable[Bm25Doc]) -> None:
        """Chunks, grouped by note: each note's chunks also make its page (all of a note's chunks
        come in one call, after ``delete_key``)."""
        pages: dict[str, tuple[Bm25Doc, list[str]]] = {}  # note key -> (its first chunk, bodies)
        with self._lock, self._writing("write"):
            for d in docs:
                body = f"{d.headings}\n{d.body}" if d.headings else d.body
                self._chunks.writer.add_document(self._document(d.chunk_id, d, body))
                pages.setdefault(d.key, (d, []))[1].append(body)
            for key, (first, bodies) in pages.items():
                self._pages.writer.add_document(self._document(key, first, "\n".join(bodies)))

    def replace_note(
        self, key: str, docs: Sequence[Bm25Doc], held: Collection[str] = (), stale: Collection[str] = ()
    ) -> None:
        """One note's chunks (all of them, in order) in place of what the index holds of it, and
        its page. ``held``: chunk ids whose documents the index holds as they are (left alone:
        a line appended to a note of 2,000 chunks re-added all of them, most of a second);
        ``stale``: the note's other chunk ids in the index, removed. Without ``held`` every chunk
        of the note is replaced."""
        with self._lock, self._writing("write"):
            if held:
                for chunk_id in stale:
                    self._chunks.writer.delete_documents_by_term("chunk_id", chunk_id)
            else:
                self._chunks.writer.delete_documents_by_term("key", key)
            self._pages.writer.delete_documents_by_term("key", key)
            bodies = []
            for d in docs:
                body = f"{d.headings}\n{d.body}" if d.headings else d.body
                if d.chunk_id not in held:
                    self._chunks.writer.add_document(self._document(d.chunk_id, d, body))
                bodies.append(body)
            if docs:  # the page is the whole note: rewritten whenever any chunk changed
                self._pages.writer.add_document(self._document(key, docs[0], "\n".join(bodies)))

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A change to both writers; a failure leaves both usable again. A writer whose worker
        thread died (a segment flush that hit a full disk) refuses every later document ("an
        index writer was killed"): without a new one the index never recovered, however much
        space was freed. What was not committed is redone by the next sweep."""
        try:
            with _engine(what):
                yield
        except StoreError as exc:
            self._chunks.recover_writer()
            self._pages.recover_writer()
            raise StoreError(f"{exc}{_disk_hint(self.path)}") from exc

    @staticmethod
    def _document(doc_id: str, d: Bm25Doc, body: str) -> tantivy.Document:
        body = bigrams(body)
        return tantivy.Document(
            chunk_id=doc_id,
            key=d.key,
            source=d.source,
            agent=d.agent,
            title=bigrams(d.title),
            body=body,
            body_en=body,
            body_de=german_fold(body),
        )

    def delete_key(self, key: str) -> None:
        with self._lock, self._writing("delete"):
            self._chunks.writer.delete_documents_by_term("key", key)
            self._pages.writer.delete_documents_by_term("key", key)

    def delete_all(self) -> None:
        with self._lock, self._writing("delete"):
            self._chunks.writer.delete_all_documents()
            self._pages.writer.delete_all_documents()

    def rollback(self) -> None:
        """Drop what was written since the last commit (a refill cut short by a stop)."""
        with self._lock:
            self._chunks.recover_writer()
            self._pages.recover_writer()

    def commit(self) -> None:
        with self._lock:
            try:
                self._chunks.commit()
                self._pages.commit()
            except StoreError as exc:
                self._pages.recover_writer()
                raise StoreError(f"{exc}{_disk_hint(self.path)}") from exc

    def all_ids(self) -> set[str]:
        """Every chunk id in the index (for consistency checks)."""
        searcher = self._searcher
        n = searcher.num_docs
        if n == 0:
            return set()
        with _engine("read"):
            hits = searcher.search(tantivy.Query.all_query(), limit=n, count=False).hits
            return {str(searcher.doc(address).get_first("chunk_id")) for _score, address in hits}

    def doc_freq(self, word: str, *, pages: bool = False) -> int:
        """Chunks (with ``pages``: notes) whose body holds ``word`` (its rarest term when the
        analyzer splits it). Counted by a query, not read from the term dictionary, which still
        counts the chunks of edited notes until their segment is merged."""
        searcher = self._pages.searcher if pages else self._searcher
        with _engine("count"):
            counts = [
                searcher.search(tantivy.Query.term_query(self.schema, "body", t), limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
                for t in dict.fromkeys(self.analyze(word))
            ]
        return int(min(counts, default=0))

    def holding(self, words: Sequence[str], among: Sequence[str]) -> set[str]:
        """Those of the chunks ``among`` whose body as written holds one of ``words`` (every term
        of it, when the analyzer splits a word): the chunks ``doc_freq`` counts, not those that
        match only a stemmed form."""
        schema = self.schema
        per_word = []
        for word in words:
            terms = list(dict.fromkeys(self.analyze(word)))
            if terms:
                per_word.append(
                    tantivy.Query.boolean_query(
                        [(tantivy.Occur.Must, tantivy.Query.term_query(schema, "body", t)) for t in terms]
                    )
                )
        if not per_word or not among:
            return set()
        any_word = tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_word])
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, any_word),
                (tantivy.Occur.Must, tantivy.Query.term_set_query(schema, "chunk_id", list(among))),
            ]
        )
        searcher = self._searcher
        with _engine("search"):
            result = searcher.search(query, limit=len(among), count=False)
            return {str(searcher.doc(address).get_first("chunk_id")) for _score, address in result.hits}

    def num_docs(self) -> int:
        return int(self._searcher.num_docs)

    def num_pages(self) -> int:
        return int(self._pages.searcher.num_docs)

    def deleted_docs(self) -> tuple[int, int]:
        """(deleted, all) documents of both indexes as their segments keep them: Tantivy drops a
        deleted document only when its segment is merged, and a segment of a vault that shrank is
        not merged again (its deleted notes kept the disk and counted in the word statistics)."""
        deleted = total = 0
        for folder in (self._chunks, self._pages):
            try:
                segments = json.loads((folder.path / "meta.json").read_text(encoding="utf-8"))["segments"]
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: judged again next time
            for seg in segments:
                total += int(seg.get("max_doc", 0))
                deleted += int((seg.get("deletes") or {}).get("num_deleted_docs", 0))
        return deleted, total

    def search(
        self,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
        *,
        key: str | None = None,
        stem: str | None = None,
    ) -> list[tuple[str, float]]:
        """(chunk_id, bm25 score) for chunks matching any word of ``text``, best first (of one note
        when ``key`` is given).

        ``text`` is a string or (text, weight) parts (a follow-up's history words count less than
        the message's). It is analysed per field (never parsed as query syntax); ``sources``
        restricts to those sources; ``agent_scope`` limits memory to one agent's inbox (vault and
        wiki stay). Restrictions score nothing: a hit's score is its text's match alone, the same
        with or without them.
        """
        return self._search(
            self._chunks, text, limit, sources=sources, agent_scope=agent_scope, key=key, stem=stem
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
    ) -> list[tuple[str, float]]:
        """(note key, bm25 score) for whole notes (only the one ``key``, or only ``keys``), as
        ``search`` scores chunks."""
        return self._search(
            self._pages,
            text,
            limit,
            sources=sources,
            agent_scope=agent_scope,
            key=key,
            keys=keys,
            stem=stem,
        )

    def _search(
        self,
        folder: _Folder,
        text: str | Sequence[tuple[str, float]],
        limit: int,
        *,
        sources: Sequence[str] | None,
        agent_scope: str | None,
        key: str | None,
        keys: Sequence[str] | None = None,
        stem: str | None = None,
    ) -> list[tuple[str, float]]:
        schema = self.schema
        parts = [(text, 1.0)] if isinstance(text, str) else list(text)
        terms: dict[tuple[str, str], float] = {}
        boosts = field_boosts(stem)
        for part, weight in parts:
            for f, boost in boosts.items():
                for t in self.analyze(part, f):
                    terms[f, t] = max(terms.get((f, t), 0.0), boost * weight)
            # A title is folded as written (ü -> u) and not German-stemmed: 'Kuendigung' meets a
            # title 'Kündigung' through its German folding, as it meets the word in a body.
            for t in self.analyze(german_fold(part), "title"):
                terms["title", t] = max(terms.get(("title", t), 0.0), boosts["title"] * weight)
        if not terms:
            return []
        should = [
            (tantivy.Occur.Should, tantivy.Query.boost_query(tantivy.Query.term_query(schema, f, t), boost))
            for (f, t), boost in terms.items()
        ]
        clauses = [(tantivy.Occur.Must, tantivy.Query.boolean_query(should))]
        restrict: list[tantivy.Query] = []
        if sources:
            restrict.append(tantivy.Query.term_set_query(schema, "source", list(sources)))
        if key is not None:
            restrict.append(tantivy.Query.term_query(schema, "key", key))
        if keys is not None:
            restrict.append(tantivy.Query.term_set_query(schema, "key", list(keys)))
        if agent_scope is not None:
            restrict.append(
                tantivy.Query.boolean_query(
                    [
                        (
                            tantivy.Occur.Should,
                            tantivy.Query.term_set_query(schema, "source", ["vault", "wiki"]),
                        ),
                        (tantivy.Occur.Should, tantivy.Query.term_query(schema, "agent", agent_scope)),
                    ]
                )
            )
        clauses += [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in restrict]
        query = tantivy.Query.boolean_query(clauses)
        searcher = folder.searcher
        with _engine("search"):  # damaged segment files
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
        n = max(int(searcher.num_docs), 1)
        total = 0.0
        boosts = field_boosts(stem)
        for f in ("body", "body_en", "body_de"):
            for t in dict.fromkeys(self.analyze(text, f)):
                try:
                    with _engine("doc_freq"):
                        df = int(searcher.doc_freq(f, t))
                except StoreError:
                    df = 0
                total += boosts[f] * math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        return total

    def close(self) -> None:
        """Wait for background merges and release the writer locks; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._chunks.close()
            self._pages.close()
