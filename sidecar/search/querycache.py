"""What a search asks the model about a query, kept per model: the query's vector (an agent
repeats a query; recall embeds the same message and turns again on every call) and the word
pieces of its words (the rare-word check asks about the same words over and over).

Everything is kept for one model object only: when the serving model changes (a migration took
over, a reload loaded another model) the cache starts empty, so a vector of another model is
never served. The model is held by a weak reference: the cache does not keep an old model alive.
Imports ``model.embedder`` (the protocol only).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from sidecar.model.embedder import Embedder

MAX_PIECE_WORDS = 65_536  # words whose piece count is kept (a few MB at most)


class QueryCache:
    """Query vectors (at most ``size``, least recently used dropped; 0: none kept) and word-piece
    counts of one model."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._owner: weakref.ref[Any] | None = None
        self._vectors: OrderedDict[str, np.ndarray[Any, Any]] = OrderedDict()
        self._pieces: dict[str, int] = {}
        self.hits = 0
        self.misses = 0

    def _adopt(self, model: Embedder) -> bool:
        """Caller holds the lock. Start over for another model; False if it cannot be referenced."""
        owner = self._owner() if self._owner is not None else None
        if owner is model:
            return True
        self._vectors.clear()
        self._pieces.clear()
        try:
            self._owner = weakref.ref(model)
        except TypeError:  # an object without weak references: keep nothing for it
            self._owner = None
            return False
        return True

    def vector(self, model: Embedder, text: str) -> np.ndarray[Any, Any]:
        """``model.embed_query(text)``, from the cache when this model embedded the text lately."""
        if self.size <= 0:
            return model.embed_query(text)
        with self._lock:
            cached = self._vectors.get(text) if self._adopt(model) else None
            if cached is not None:
                self._vectors.move_to_end(text)
                self.hits += 1
                return cached
        vector = np.array(model.embed_query(text), dtype=np.float32)
        vector.setflags(write=False)  # shared between searches: nobody may change it in place
        with self._lock:
            self.misses += 1
            if self._adopt(model) and self._owner is not None:
                self._vectors[text] = vector
                self._vectors.move_to_end(text)
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return vector

    def pieces(self, model: Embedder, words: Sequence[str]) -> list[int]:
        """``model.count_tokens(words)``, counting only the words not seen before."""
        with self._lock:
            mine = self._pieces if self._adopt(model) else {}
            known = {w: mine[w] for w in words if w in mine}
        todo = [w for w in dict.fromkeys(words) if w not in known]
        if todo:
            fresh = dict(zip(todo, model.count_tokens(todo), strict=True))
            known.update(fresh)
            with self._lock:
                if self._adopt(model) and self._owner is not None:
                    if len(self._pieces) + len(fresh) > MAX_PIECE_WORDS:
                        self._pieces.clear()
                    self._pieces.update(fresh)
        return [known[w] for w in words]
