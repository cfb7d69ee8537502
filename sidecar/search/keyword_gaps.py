"""What a search says when a keyword index fails or may miss notes: the answer's notes (an
agent's memory not read, an inbox index being rebuilt, the index of every agent's memory not
filled yet) and the keyword problem reported to status and cleared again; and one note's keyword
scores as a search reads them (``why``). The search itself is ``retrieval``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sidecar.contracts.errors import StoreError, engine_message
from sidecar.contracts.plainerror import plain_error
from sidecar.index.keyword_faults import handles_seen, keyword_damage
from sidecar.index.problems import Problems
from sidecar.index.repair import unsearchable_agents
from sidecar.index.vectoring import Stores
from sidecar.search.querywords import BmParts
from sidecar.search.request import SearchRequest
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.bm25_search import EVERYONE, SHARED, SearchFault

log = logging.getLogger(__name__)


PAGE_FAILURE = "page index: "  # how a failing page search is reported (keyword_search)
INBOX_FAILURE = "the keyword index of memory/"  # how an agent's failing inbox index is reported


def _missed(stores: Stores, faults: Sequence[SearchFault]) -> list[SearchFault]:
    """The memory indexes of ``faults`` (``Bm25Index.search``'s) whose notes a keyword search may
    have missed. When every agent's memory could not be read, the agents' own indexes were read
    instead (one that failed is a fault of its own): it missed notes only while some agents have
    none (removed as unused). Was: named whenever it failed, so the answer said all agents'
    memory may be missing, and status that keyword search fails, although every agent's own
    index had answered."""
    if any(part == EVERYONE for part, _ in faults) and unsearchable_agents(stores) == 0:
        return [fault for fault in faults if fault[0] != EVERYONE]
    return list(faults)


def _keyword_read(
    stores: Stores, kind: str, faults: Sequence[SearchFault], seen: set[str]
) -> list[SearchFault]:
    """After a keyword search of the ``kind`` indexes that answered: the memory indexes it missed
    (``_missed``); what it read and what failed for want of file handles told to status
    (``handles_seen``), every agent's memory counted as read when each agent's own index answered
    in its place."""
    missed = _missed(stores, faults)
    covered = set(seen)
    if any(part == EVERYONE for part, _ in faults) and not any(part == EVERYONE for part, _ in missed):
        covered.add(EVERYONE)
    handles_seen(stores, kind, covered, missed)
    return missed


def _memory_unread(stores: Stores, faults: Sequence[SearchFault]) -> str | None:
    """What the answer says of the memory indexes a keyword search could not read for a fault
    that passes (``_missed``): their notes may be missing from it. An answer without them read
    as complete."""
    said = []
    own = {part: exc for part, exc in faults if part != EVERYONE}
    if own:
        names = ", ".join(f"memory/{agent}" for agent in sorted(own))
        said.append(
            f"keyword search of {names} failed ({engine_message(next(iter(own.values())))}): its "
            "notes may be missing from this answer"
        )
    everyone = next((exc for part, exc in faults if part == EVERYONE), None)
    if everyone is not None:
        agents = unsearchable_agents(stores)
        said.append(
            f"keyword search of all agents' memory failed ({engine_message(everyone)}): the memory of "
            f"{agents} agent{'' if agents == 1 else 's'} whose own index was removed as unused "
            "(memory.indexIdleDays) may be missing from this answer"
        )
    return "; ".join(said) or None


def note_keyword_scores(
    stores: Stores,
    words: BmParts,
    limit: int,
    agent: str | None,
    *,
    key: str,
    stem: str | None,
    pages: bool = False,
) -> tuple[dict[str, float], str | None]:
    """One note's keyword scores (``key``'s chunks, or with ``pages`` its whole note) as the
    search of ``agent`` reads them (``why``), and what the answer says of the faults met, as a
    search says them: an index that cannot be read gives no score (vector results only), a
    memory index that failed may miss notes; reported in status alike (damage for the repair,
    no file handles left). A failing page index is said in status alone, as by a search. Was:
    ``why`` failed with the index's error, or showed no keyword score and said nothing."""
    bm25 = stores.bm25
    kind = "pages" if pages else "chunks"
    faults: list[SearchFault] = []
    seen: set[str] = set()
    try:
        search = bm25.search_pages if pages else bm25.search
        found = search(words, limit, agent_scope=agent, key=key, stem=stem, faults=faults, read=seen)
    except StoreError as exc:
        log.warning("keyword_search_failed part=%s error=%s", kind, exc)
        keyword_damage(stores.problems, exc, f"{PAGE_FAILURE}{exc}" if pages else str(exc))
        handles_seen(stores, kind, seen, [(SHARED, exc), *faults])
        return {}, None if pages else f"keyword search failed ({plain_error(str(exc))}); vector results only"
    missed = _keyword_read(stores, kind, faults, seen)
    return dict(found), None if pages else _memory_unread(stores, missed)


def _inbox_failure_reported(bm25: Bm25Index, problems: Problems) -> bool:
    """Report an agent's failing inbox index (``Bm25Index.failing``) as the keyword problem, so
    that the repair refills the index; whether one was. A search that never reads it must not
    clear it (another agent's cleared it before the repair looked)."""
    failing = dict(bm25.failing)  # a copy: searches on other threads change it
    if not failing:
        return False
    name, error = min(failing.items())
    problems.report("keyword_search", f"{INBOX_FAILURE}{name}: {error}")
    return True


def _inboxes_failing(bm25: Bm25Index, req: SearchRequest) -> str | None:
    """What the answer says of the agents' inbox indexes in its scope that failed (moved aside or
    unreadable, refilled in the background): their notes may be missing from it. An empty or
    thin answer with no word of it read as "nothing relevant"."""
    if req.sources is not None and "memory" not in req.sources:
        return None
    agents = sorted({name.split("/", 1)[0] for name in dict(bm25.failing)})
    if req.agent is not None:
        agents = [a for a in agents if a == req.agent]
    if not agents:
        return None
    names = ", ".join("all agents' memory" if a == EVERYONE else f"memory/{a}" for a in agents)
    return (
        f"the keyword index of {names} is damaged and is being rebuilt from the notes in the "
        "background: its notes may be missing from this answer"
    )


def _memory_unindexed(stores: Stores, req: SearchRequest) -> str | None:
    """What a person's answer says while it reads the agents' own keyword indexes instead of the
    one of every agent's memory (not filled yet, or read-only) and some agents have none (removed
    as idle): their notes are found by no word, which an empty or thin answer did not say. Its
    damage is said by ``_inboxes_failing``. An agent's own search rebuilds its index first, but
    not while the index is read-only: then its own answer says its memory is not found."""
    if req.sources is not None and "memory" not in req.sources:
        return None
    if req.agent is not None:
        return _own_memory_unindexed(stores, req.agent)
    why = stores.bm25.everyone_gap()
    if why is None or why == "damaged":  # the agents not counted: said otherwise
        return None
    agents = unsearchable_agents(stores)
    if agents == 0:
        return None
    state = "cannot be filled while the index is read-only" if why == "read-only" else "is being filled"
    return (
        f"the keyword index of all agents' memory {state}: the memory of {agents} agent"
        f"{'' if agents == 1 else 's'} (their own index removed as unused, memory.indexIdleDays) "
        "is not found by its words until then"
    )


def _own_memory_unindexed(stores: Stores, agent: str) -> str | None:
    """What an agent's answer says when its own keyword index was removed as idle and cannot be
    rebuilt (the index is read-only, ``Bm25Index.inbox_missing``): its search read no index of
    its memory and found none of it by its words, and nothing said so."""
    bm25 = stores.bm25
    if not bm25.read_only or agent in bm25.agents() or not stores.manifest.holds_memory_of(agent):
        return None
    return (
        "your memory's keyword index was removed as unused (memory.indexIdleDays) and cannot be "
        "rebuilt while the index is read-only: your memory is not found by its words until the "
        "index can be written again"
    )


def _joined(*notes: str | None) -> str | None:
    said = [n for n in notes if n]
    return "; ".join(said) if said else None


def _page_failure_active(problems: Problems) -> bool:
    """Whether the keyword-search problem now reported is the page index's."""
    active = problems.active_in("keyword_search")
    return active is not None and str(active.get("error", "")).startswith(PAGE_FAILURE)
