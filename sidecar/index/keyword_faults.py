"""How a keyword search's failure is said, one way for a search's and a memory write's duplicate
check: reported for the repair when its index is damaged (``keyword_damage``), and no file
handles left said in status while a part of the index that a search reads keeps failing for it
(``handles_seen``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sidecar.contracts.errors import (
    IndexNotOpenError,
    PassingFaultError,
    StoreError,
    engine_message,
    is_out_of_handles,
)
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Stores
from sidecar.stores.bm25_search import EVERYONE, SHARED

# The subject of keyword_search's problem for a search that failed for want of file handles:
# shown in status, left alone by the repair (which reads the problem without a subject: the
# files are whole), cleared once each part of the index that failed for it was read again.
NO_HANDLES = "file handles"

_handles_lock = threading.Lock()  # searches on several threads tell what they read


def keyword_damage(problems: Problems, exc: StoreError, damage: str) -> None:
    """A keyword search that failed, in the vault's index, the page index or a memory index:
    reported for the repair (as ``damage``) unless its index is lost (problem keyword_index) or
    the fault passes (no file handles left, a share's hiccup: the repair moved a whole index aside
    for it)."""
    if not isinstance(exc, (IndexNotOpenError, PassingFaultError)):
        problems.report("keyword_search", damage)


def handles_seen(
    stores: Stores,
    kind: str,
    read: Iterable[str],
    failed: Iterable[tuple[str, BaseException]],
) -> None:
    """After a keyword search of the ``kind`` indexes (``chunks``, ``pages``): the parts it read
    (``SHARED``, ``EVERYONE``, an agent: ``Bm25Index.search``'s ``read``) and those that failed,
    and why. No file handles left is said in status (problem keyword_search, subject
    ``NO_HANDLES``) until each part that failed for it was read again; all agents' memory read
    counts for every agent's own index, and a part no longer there (an agent's own index
    removed) as read. Was: said nowhere (keyword search could stay dead for as long as the
    shortage lasted), then cleared by any search that worked, one of the vault alone, or a
    request's chunk search before its page search failed again: the line came and went."""
    state = stores.keyword_no_handles
    done = set(read)
    with _handles_lock:
        for name in list(state):
            part, of = name.rsplit("/", 1)
            # All agents' memory read stands for each agent's own index: a person's search reads
            # it in their place (a failed one's fallback read them), and never reads them again.
            if of == kind and (part in done or (EVERYONE in done and part != SHARED)):
                del state[name]
        for part, exc in failed:
            if is_out_of_handles(exc):
                state[f"{part}/{kind}"] = engine_message(exc)
        if state:
            agents = set(stores.bm25.agents())
            for name in list(state):
                part = name.rsplit("/", 1)[0]
                if part not in (SHARED, EVERYONE) and part not in agents:
                    del state[name]
        if not state:
            stores.problems.clear("keyword_search", subject=NO_HANDLES)
            return
        stores.problems.report(
            "keyword_search",
            f"keyword search fails: no file handles left ({next(iter(state.values()))}); the daemon "
            "keeps answering by meaning",
            subject=NO_HANDLES,
        )
