"""An inbox's keyword hits scored on the vault's scale (``Scorer``), from index statistics read
as Tantivy's BM25 takes them (``Counts``)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tantivy

from sidecar.stores.bm25_folder import Folder, engine

Terms = dict[tuple[str, str], float]  # (field, term) -> boost


def idf(docs: int, df: int) -> float:
    """Tantivy's BM25 idf."""
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


class Counts:
    """An index's statistics at one commit, as Tantivy's BM25 takes them: documents (the deleted
    ones of unmerged segments too) and, as asked, how many hold a term."""

    def __init__(self, schema: tantivy.Schema, searcher: tantivy.Searcher) -> None:
        self.searcher = searcher
        self.docs = _total_docs(schema, searcher)
        self._df: dict[tuple[str, str], int] = {}

    def df(self, field: str, term: str) -> int:
        found = self._df.get((field, term))
        if found is None:
            with engine("doc_freq"):
                found = int(self.searcher.doc_freq(field, term)) if self.docs else 0
            if len(self._df) < 50_000:
                self._df[field, term] = found
        return found


def _total_docs(schema: tantivy.Schema, searcher: tantivy.Searcher) -> int:
    """The document count Tantivy's BM25 uses (deleted documents of unmerged segments included,
    unlike ``num_docs``), read from the explanation of a live document's id: the binding has no
    other way to it."""
    if searcher.num_docs == 0:
        return 0
    with engine("statistics"):
        first = searcher.search(tantivy.Query.all_query(), limit=1, count=False).hits
        if not first:
            return int(searcher.num_docs)
        query = tantivy.Query.term_query(
            schema, "chunk_id", str(searcher.doc(first[0][1]).get_first("chunk_id"))
        )
        hits = searcher.search(query, limit=1, count=False).hits
        if not hits:
            return int(searcher.num_docs)
        found = _explained_docs(json.loads(query.explain(searcher, hits[0][1]).to_json()))
    return found or int(searcher.num_docs)


def _explained_docs(node: dict[str, Any]) -> int:
    if str(node.get("description", "")).startswith("N,"):
        return int(node.get("value", 0))
    for child in node.get("details") or ():
        found = _explained_docs(child)
        if found:
            return found
    return 0


class Scorer:
    """An inbox's hits on the vault's scale, with no other agent's memory in it.

    Every agent's memory has an index of its own, and no memory enters the statistics of the
    vault and the wiki: with every inbox in one index, an agent's own note scored differently
    when another agent's private notes held the query's words (a side channel: whether someone's
    memory holds a word). An inbox is searched in its own index with each term boosted by the
    ratio of its idf in the vault and the wiki to its idf in the inbox: a hit's score is then
    BM25 with the vault's word statistics and the inbox's own lengths (its tf part, relative to
    the inbox's average length), on the scale of a vault hit, from no data but the vault's and
    the agent's own."""

    def __init__(self) -> None:
        self._counts: dict[Path, Counts] = {}  # folder -> its statistics at the searcher's commit
        self._lock = threading.Lock()

    def counts(self, folder: Folder, searcher: tantivy.Searcher) -> Counts:
        with self._lock:
            cached = self._counts.get(folder.path)
            if cached is not None and cached.searcher is searcher:
                return cached
        fresh = Counts(folder.schema, searcher)
        with self._lock:
            self._counts[folder.path] = fresh
        return fresh

    def forget(self, folders: Iterable[Folder]) -> None:
        """A closed index's statistics dropped (they held its searcher, and its files mapped)."""
        with self._lock:
            for folder in folders:
                self._counts.pop(folder.path, None)

    @staticmethod
    def terms(own: Counts, vault: Counts, terms: Terms) -> Terms:
        """``terms`` reweighted for the inbox of ``own`` (the terms it does not hold left out)."""
        out: Terms = {}
        for (f, t), boost in terms.items():
            held = own.df(f, t)
            if held:
                # An empty vault counts as one document, as ``ideal_score`` takes it.
                out[f, t] = boost * idf(max(vault.docs, 1), vault.df(f, t)) / idf(own.docs, held)
        return out
