"""Stores that fail under the running daemon, put right: BM25 refilled from the manifest, a
vector table read whole and, if it cannot be read, replaced: the rows that still read are
copied over, the rest embedded again.

No note is read to repair BM25 (the manifest holds every chunk's text); keyword search answers
while vectors are recomputed. When to repair is the daemon's policy, not this module's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Collection
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import DaemonRunningError, PassingFaultError, StoreError, StoresClosedError
from sidecar.contracts.wire import memory_agent
from sidecar.index import beside
from sidecar.index.beside import UPGRADE_AREA, refill_beside
from sidecar.index.bm25fill import bm25_doc, fill_bm25
from sidecar.index.migration import open_previous
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.model.embedder import Embedder, EmbedderSlot
from sidecar.runtime.atomic import atomic_write
from sidecar.runtime.steadyclock import steady_reading
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.bm25_folder import copy_room, folder_size, free_space
from sidecar.stores.bm25_search import EVERYONE, EVERYONE_DIR
from sidecar.stores.lifecycle import discard_vectors, move_aside, open_vectors, salvage_vectors
from sidecar.stores.vectors import VectorStore, table_name
from sidecar.stores.versions import BM25_LAYOUT

log = logging.getLogger(__name__)


# The vault's and the wiki's keyword index (``compact_bm25``) is rewritten in place at any
# deleted document while it holds at most this many live ones (chunks and pages, a vault of some
# 700 notes): a rewrite in its own writers costs about 1.5 ms a document on a loaded machine,
# every write waiting meanwhile, so a few seconds at most. A larger one is refilled beside once
# this share of its documents is deleted (``index.beside``: filled in a side folder while the old
# index answers and takes writes, the write lock held only for the notes written meanwhile and
# the swap). In place at each tenth it stalled a large vault's writes (an agent's memory write
# and recall too) for tens of seconds every few thousand edits, so a large one waited until half
# of it was deleted, its scores drifting all along.
_SHARED_SMALL = 2_000
_SHARED_SHARE = 0.2
# A memory index (``compact_memory``) is rewritten at any deleted document while it holds at
# most this many live ones (an agent's memory: a rewrite of its notes costs a fraction of a
# second), else once its deleted documents reach this share of its live ones (each rewrite costs
# what its live notes cost, the write lock held).
_MEMORY_SMALL = 2_000
_MEMORY_SHARE = 0.2
# A vector table is moved aside and embedded again at most this many times per run of the daemon:
# one that cannot be read again right after is not damaged by chance, and each rebuild costs the
# model run of every chunk whose vector cannot be read (hours with e5 on a large vault when none
# can) and a copy kept for a month.
MAX_VECTOR_REBUILDS = 2
# Seconds the agents with memory are kept by ``unsearchable_agents`` (one query of the manifest).
MEMORY_AGENTS_KEPT = 1.0
_clock = time.monotonic  # the clock of that, replaced by tests


def _age_clock() -> float:
    """The clock of the last compaction's age and of the back-off's next try: it counts the
    time a laptop sleeps (CLOCK_BOOTTIME; the monotonic clock stops in a suspend, so status
    said "1h ago" of a rewrite made before a night's sleep) and no step of the wall clock."""
    return steady_reading()[1]


# After a large vault's compaction gave way to the notes written meanwhile (its whole fill
# wasted: minutes and a second copy on the disk at 60,000 documents), the next runs that find it
# due skip it, more of them at each give-way in a row (1, 3, then 7: every 8th run, 8 hours with
# the hourly default, while the vault stays that busy). Tried at every run, a vault busy for a
# day filled a whole copy each hour for nothing.
BACKOFF_MAX_RUNS = 7
# The give-ways that wasted a whole fill (``beside.Ended``): the others changed the index itself
# (a rebuild, a repair), which the next run judges afresh.
_WASTED = frozenset({"behind", "count"})
# The manifest's meta row that keeps the back-off across restarts: a daemon restarted daily (a
# login's service start, an upgrade) on a vault that never calms down forgot it and filled a
# whole copy at the first due run of every start.
BACKOFF_META = "keyword_compaction_backoff"
# The file in the keyword index folder naming it for the back-off kept in the manifest
# (``_index_id``): a random id, written once.
INDEX_ID_FILE = "sidecar-index-id"
# The outcome of a small index's rewrite in place (``compact_shared``) after a large one's run (a
# large vault that shrank), said as the rewrite beside's "compacted" is (``_in_place_said``).
IN_PLACE = "compacted in place"
_DATA_FILE = re.compile(r"data/([0-9A-Za-z_-]+\.lance)")


def rebuild_bm25(stores: Stores, stop: threading.Event | None = None) -> None:
    """Refill Tantivy from the manifest: no file is read, no vector recomputed."""
    with stores.write_lock:
        fill_bm25(stores.bm25, stores.manifest, stop)
        done = not (stop is not None and stop.is_set())
    if done:
        _keep_backoff(stores, None)  # a new index, no deleted document: the back-off was of the old
    if done and stores.bm25.layout == BM25_LAYOUT:
        # An upgrade's refill in place that failed (a full disk) is done now: its problem went on
        # saying searches find no words until the next start.
        stores.problems.clear(UPGRADE_AREA)


def refill_inbox(stores: Stores, agent: str) -> None:
    """One agent's keyword index refilled from the manifest, the others left as they are
    (``EVERYONE``: the index of every agent's memory). The write lock is held from the read of
    the manifest to the commit: a note written meanwhile would be in neither (written into the
    old index, which the refill removes, after the read)."""
    if agent == EVERYONE:
        fill_everyone(stores)
        return
    with stores.write_lock:
        docs = [bm25_doc(v) for v in stores.manifest.chunks_under(f"memory/{agent}/")]
        stores.bm25.refill_inbox(agent, docs)


def fill_everyone(stores: Stores) -> None:
    """The index of every agent's memory refilled from the manifest (an install from before it,
    one moved aside, one whose counts disagree); a person's search reads the inboxes meanwhile.
    Memory is small beside the vault: seconds for thousands of notes."""
    started = time.monotonic()
    with stores.write_lock:
        docs = [bm25_doc(v) for v in stores.manifest.chunks_under("memory/")]
        stores.bm25.refill_everyone(docs)
    seconds = time.monotonic() - started
    log.info("index_rebuilt store=bm25 part=memory-all chunks=%d seconds=%.2f", len(docs), seconds)


def ready_inbox(stores: Stores, agent: str | None) -> None:
    """Before a search with ``agent``'s scope: its own keyword index, rebuilt from the manifest
    when it was removed as idle (``Bm25Index.remove_idle``), so that the agent finds all its
    memory scored from its own statistics; its use noted. A rebuild that fails (a full disk)
    leaves no index and reports the agent's in ``failing``: the search goes on without it and
    says so (as for a damaged one), the next search or the repair tries again."""
    if agent is None:
        return
    bm25 = stores.bm25
    held = stores.manifest.holds_memory_of
    bm25.note_use(agent)  # first: an idle removal after this leaves the index to this search
    if bm25.inbox_missing(agent, held):
        started = time.monotonic()
        with stores.write_lock:
            if stores.bm25.inbox_missing(agent, held):  # not rebuilt by another search meanwhile
                try:
                    refill_inbox(stores, agent)
                except StoreError as exc:
                    log.error("inbox_index_rebuild_failed agent=%s error=%s", agent, exc)
                    bm25.not_rebuilt(agent, exc)
                    return
                log.info(
                    "inbox_index_rebuilt agent=%s reason=used again seconds=%.2f",
                    agent,
                    time.monotonic() - started,
                )


def inboxes_before_write(stores: Stores, agents: Collection[str]) -> None:
    """Before notes of ``agents`` are written (the write lock held): while a person's search
    reads the agents' own indexes (``Bm25Index.everyone_gap``), an agent whose own one was
    removed as idle gets it back whole from the manifest. Made by the write, it held that note
    alone, and every search took it for all the agent's memory until the first sweep's check.
    Otherwise the write makes none: the pair of every agent's memory holds the note, and the
    agent's next search rebuilds its own index."""
    bm25 = stores.bm25
    if bm25.everyone_gap() is None:
        return
    for agent in sorted(agents):
        if bm25.inbox_missing(agent, stores.manifest.holds_memory_of):
            refill_inbox(stores, agent)
            log.info("inbox_index_rebuilt agent=%s reason=written before all memory was indexed", agent)


def memory_gap(stores: Stores) -> tuple[str, int] | None:
    """While a person's search reads the agents' own indexes instead of the one of every agent's
    memory: why (``Bm25Index.everyone_gap``) and how many agents with memory have no own index
    (removed as idle): their notes are found by no word until it reads it again. None otherwise."""
    why = stores.bm25.everyone_gap()
    if why is None:
        return None
    return why, unsearchable_agents(stores)


def unsearchable_agents(stores: Stores) -> int:
    """How many agents with memory have no own keyword index (removed as idle); see
    ``memory_gap``. The manifest's agents are read at most once a second (``MEMORY_AGENTS_KEPT``):
    health and every person's search ask while the index of all memory is not filled."""
    now = _clock()
    kept = stores.memory_agents
    if kept is None or not 0 <= now - kept[0] <= MEMORY_AGENTS_KEPT:
        kept = stores.memory_agents = (now, frozenset(stores.manifest.agents_with_memory()))
    return len(kept[1] - set(stores.bm25.agents()))


def remove_idle_inboxes(stores: Stores, days: int) -> None:
    """Agents' own keyword indexes unused for ``days`` removed (0: never); see ``remove_idle``."""
    if days > 0:
        stores.bm25.remove_idle(days * 86400.0)


def refill_new_bm25(stores: Stores, stop: threading.Event | None = None) -> None:
    """Before a first sweep: a keyword index that is new (an upgrade's new layout, one moved
    aside) while the manifest holds chunks is refilled from the manifest first. The sweep keeps
    unchanged chunks' keyword documents as they are, so until a check after the whole sweep those
    notes, memory included, were found by no word (9 minutes for 6,400 notes)."""
    bm25 = stores.bm25
    chunks = stores.manifest.indexed_shared_chunk_count()
    # The vault's and the wiki's index judged alone: counted with memory's, a filled index of all
    # memory, or the notes of agents whose own index was removed as idle, hid an emptied one, and
    # a person's search found no vault note by its words until the check after the whole sweep.
    # Under half, not none: a note written right after the start may have put its chunks in.
    if bm25.shared_counts()[0] * 2 >= chunks:
        if not bm25.umlauts.complete:
            learn_umlauts(stores)
        if _memory_all_short(stores) and not bm25.read_only:
            # Memory alone (seconds; the vault's index is left as it is): an install from before
            # the index of every agent's memory, one moved aside or emptied. The daemon answers
            # meanwhile, a person's search reading the agents' own indexes.
            fill_everyone(stores)
        return
    started = time.monotonic()
    rebuild_bm25(stores, stop)
    if stop is not None and stop.is_set():
        return  # rolled back: the next start refills
    log.info(
        "index_rebuilt store=bm25 reason=new keyword index chunks=%d seconds=%.2f",
        chunks,
        time.monotonic() - started,
    )


def _memory_all_short(stores: Stores) -> bool:
    """Whether the index of every agent's memory is to be filled at start: not filled yet, or
    holding under half of memory's chunks (emptied beside its mark of being filled)."""
    try:
        counts = stores.bm25.everyone_counts()
    except StoreError:
        return False  # unreadable: the check after the first sweep moves it aside and refills it
    if counts is None:
        return True
    return counts[0] * 2 < sum(c for c, _pages in stores.manifest.inbox_counts().values())


def learn_umlauts(stores: Stores) -> None:
    """A keyword index older than its list of umlaut words (``stores.umlauts``) teaches the list
    from the manifest: the index itself stays as it is and answers meanwhile."""
    started = time.monotonic()
    # Outside the write lock (a memory write waited for it, 1.8 s for 7,218 chunks on a loaded
    # machine): the list has its own lock, the manifest is read a page of notes at a time (a note
    # moved between two pages is missed or read twice: harmless here), and a note written
    # meanwhile teaches the list its words itself.
    stores.bm25.learn_umlauts(bm25_doc(v) for v in stores.manifest.all_chunks())
    log.info(
        "umlaut_words_learned words=%d seconds=%.2f", len(stores.bm25.umlauts), time.monotonic() - started
    )


def compact_bm25(stores: Stores, stop: threading.Event | None = None) -> bool:
    """Rewrite the vault's and the wiki's keyword index once its deleted documents weigh in its
    scores: Tantivy keeps a deleted document, and counts its words, until its segment is merged,
    which for a small vault or one that shrank never comes. They held the disk (18x after 5,000
    notes went) and moved every score away from a rebuild's, memory hits' too (scored on the
    vault's statistics): a few edits of one note put an agent's note second. A small index
    (``_SHARED_SMALL``) at any deleted document, in place (``Bm25Index.compact_shared``: only
    that pair, the memory indexes have their own ``compact_memory``; writers wait for its single
    commit); a larger one once a fifth of it is deleted, refilled beside (``_compact_beside``).
    Readers keep the old snapshot until the commit or the swap. A ``stop`` (the schedule's
    shutdown) rolls it back. Whether it was rewritten; a failure raises StoreError (the old index
    answers on, the next run tries again)."""
    deleted, total = stores.bm25.deleted_docs()
    live = total - deleted
    if not compaction_due(deleted, total):
        _keep_backoff(stores, None)  # dropped otherwise (a rebuild, merges): the next due begins anew
        return False
    if stores.bm25.read_only or stores.bm25.unavailable is not None:
        return False
    if live > _SHARED_SMALL:
        return _compact_beside(stores, stop, deleted, live)
    if _no_room(stores, "vault", (stores.bm25.path / "chunks", stores.bm25.path / "pages")):
        return False
    started = time.monotonic()
    with stores.write_lock:  # no note written between the manifest's read and the commit
        docs = (bm25_doc(v) for v in stores.manifest.all_chunks() if memory_agent(v.key) is None)
        rewritten = stores.bm25.compact_shared(docs, stop)
    if not rewritten:
        if stop is not None and stop.is_set():
            log.info("bm25_compact_stopped part=vault (rolled back: the index is as it was)")
        return False
    seconds = time.monotonic() - started
    log.info("bm25_compacted part=vault deleted=%d live=%d seconds=%.2f", deleted, live, seconds)
    _keep_backoff(stores, None)
    _in_place_said(stores, f"{deleted:,} deleted documents dropped, {live:,} live")
    return True


def _in_place_said(stores: Stores, reason: str) -> None:
    """What status says after a rewrite in place. After a large index's run (a rewrite beside
    on record, or its skip or give-way: a large vault that shrank), the rewrite in place is said
    instead: status went on saying "last rewritten beside" of an index rewritten since, its
    deleted documents counted from the wrong rewrite. Otherwise it is routine (every small vault,
    at any edit) and nothing is on record, as before: a line on every small vault's status read
    as a chore pending; the record of the shrink itself goes at the next routine rewrite."""
    last = stores.keyword_compaction_last
    if last is not None and last[0] != IN_PLACE and compaction_current(stores):
        _outcome(stores, IN_PLACE, reason)
    else:
        stores.keyword_compaction_last = None
        stores.keyword_compaction_of = None


def compaction_due(deleted: int, total: int) -> bool:
    """Whether the vault's keyword index, ``deleted`` of its ``total`` documents deleted, is due
    for a rewrite (``compact_bm25``): a small one at any deleted document, a large one once a
    fifth of it is deleted."""
    return deleted > 0 and (total - deleted <= _SHARED_SMALL or deleted >= _SHARED_SHARE * total)


def _compact_beside(stores: Stores, stop: threading.Event | None, deleted: int, live: int) -> bool:
    """A large index refilled whole from the manifest beside the one that answers, then swapped
    in (``beside.refill_beside``, as an upgrade's refill): in place its fill held the write lock
    for ~40 s at 27,000 documents, every watcher write and memory write waiting. The memory
    indexes are refilled with it (their deleted documents go too; an idle agent's index keeps
    its last use). Needs room for a second copy of the whole index (else left for a later run);
    skipped while an upgrade refills beside, while another refill beside holds the side folder,
    and while many notes wait to be cut again (``_recut_waiting``). A stop leaves the old index
    and no side folder. What came of it is kept for health (``Stores.keyword_compaction_last``)."""
    if no_room := _no_room(stores, "vault", (stores.bm25.path,)):
        _outcome(stores, "skipped", no_room)  # logged at debug: every run while it lasts
        return False
    if backing := _backed_off(stores):
        _skipped(stores, backing, "backoff")
        return False
    if cut := _recut_waiting(stores):
        _skipped(stores, cut, "recut")
        return False
    started = time.monotonic()
    why: list[str] = []

    def told(phase: str, done: int, total: int) -> None:
        stores.keyword_compaction = (phase, done, total)

    try:
        swapped = refill_beside(stores, stop, wait=False, progress=told, give_way=True, ended=why.append)
    except OSError as exc:  # a full disk: the old index answers on (or, lost, is said so)
        _outcome(stores, "failed", exc.strerror or str(exc))
        raise StoreError(f"the keyword index could not be refilled beside: {exc.strerror or exc}") from exc
    except StoreError as exc:
        _outcome(stores, "failed", str(exc))
        raise
    finally:
        stores.keyword_compaction = None
    if swapped is None:
        _given_up(stores, why[0] if why else "replaced")
        return False
    _keep_backoff(stores, None)
    _outcome(stores, "compacted", f"{deleted:,} deleted documents dropped, {live:,} live")
    log.info(
        "bm25_compacted part=vault way=beside deleted=%d live=%d written_meanwhile=%s seconds=%.2f "
        "lock_seconds=%.2f",
        deleted,
        live,
        "all" if swapped.everything else swapped.written_meanwhile,
        time.monotonic() - started,
        swapped.lock_seconds,
    )
    return True


def _backed_off(stores: Stores) -> str | None:
    """Why this run skips a due compaction to back off after it gave way (``BACKOFF_MAX_RUNS``),
    the skip counted; else None."""
    if (backoff := stores.keyword_backoff) is None or backoff[1] <= 0:
        return None
    if stores.keyword_backoff_of != _index_id(stores):  # replaced since (a repair, an upgrade's swap)
        _keep_backoff(stores, None)
        return None
    times, left = backoff
    _keep_backoff(stores, (times, left - 1))
    again = "the next run tries again" if left == 1 else f"{left - 1:,} more runs skip it"
    return (
        f"backing off after it gave way {_times(times)} in a row to the notes written meanwhile (a "
        f"busy vault: each try fills a whole copy); {again}"
    )


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n:,} times"


def _recut_waiting(stores: Stores) -> str | None:
    """Why a large vault's compaction waits for the notes marked to be cut again (a model with
    another tokenizer, a new chunking, any ``reread_all``), else None. The sweep cuts them, hours
    on a network share, and each cut deletes their old documents: the index soon passed the
    share, and every run (hourly) filled a whole second index, only to give way to the notes cut
    meanwhile (more than a swap writes, ``beside.SWAP_NOTES``) or to see it deleted again by the
    cuts still to come. Only the notes the sweep can cut now count: those of a root offline (an
    unmounted share, deletions held) held the compaction back for as long as it stayed so. And it
    waits only while their number falls: notes whose read fails, or any not cut for another
    reason, are not waited for beyond one run."""
    by_root = stores.manifest.reread_waiting()
    away = set(stores.roots_away()) & set(by_root)
    waiting = sum(n for root, n in by_root.items() if root not in away)
    seen, stores.keyword_recut_seen = stores.keyword_recut_seen, None
    if waiting <= beside.SWAP_NOTES:
        return None
    if seen is not None and waiting >= seen:
        log.info(
            "bm25_compact_recut_stalled part=vault waiting=%d (no fewer than at the last run: "
            "compacted all the same)",
            waiting,
        )
        return None
    stores.keyword_recut_seen = waiting
    offline = sum(by_root[root] for root in away)
    aside = f"; {offline:,} more of {', '.join(sorted(away))} not read now, not waited for" if offline else ""
    return f"{waiting:,} notes wait to be cut again by the sweep{aside}"


# The words of a refill beside's reason for returning None (``beside.Ended``): what health says.
_GIVEN_UP = {
    "busy": "another refill of the keyword index beside runs (an upgrade's, or a stopped one still ending)",
    "rebuild": "the index was rebuilt meanwhile",
    "behind": "more notes were written meanwhile than a swap writes while writes wait",
    "count": "the new index did not hold what the manifest holds",
    "replaced": "the index was repaired meanwhile",
}


def _given_up(stores: Stores, why: str) -> None:
    if why == "busy":  # the side folder is another refill's: nothing begun
        _skipped(stores, _GIVEN_UP[why], why)
    elif why == "stop":
        _outcome(stores, "stopped", "the daemon stopped")
        log.info(
            "bm25_compact_stopped part=vault way=beside (the old index answers; the side folder is "
            "removed as the step under way ends)"
        )
    else:  # logged by ``beside`` (``bm25_refill_gave_way``, ``bm25_refill_count_mismatch``)
        _outcome(stores, "gave way", _GIVEN_UP.get(why, why))
        if why in _WASTED:
            times = (stores.keyword_backoff or (0, 0))[0] + 1
            runs = min(2**times - 1, BACKOFF_MAX_RUNS)
            _keep_backoff(stores, (times, runs))
            log.info(
                "bm25_compact_backoff part=vault gave_way=%d skip_runs=%d (the next %s that find it "
                "due skip it)",
                times,
                runs,
                "run" if runs == 1 else f"{runs} runs",
            )


def _keep_backoff(stores: Stores, backoff: tuple[int, int] | None) -> None:
    """The back-off as it is now, kept in memory and in the manifest (``BACKOFF_META``, one
    transaction: a crash leaves the old row or the new one). A write that fails (a full disk) is
    logged and leaves the one in memory: the next start then goes on from the last one written."""
    if backoff == stores.keyword_backoff:
        return  # every run that finds nothing due: nothing written
    stores.keyword_backoff = backoff
    stores.keyword_backoff_of = None if backoff is None else _index_id(stores, make=True)
    try:
        if backoff is None:
            stores.manifest.delete_meta([BACKOFF_META])
        else:
            value = {"gave_way": backoff[0], "runs_to_skip": backoff[1], "index": stores.keyword_backoff_of}
            stores.manifest.set_meta(BACKOFF_META, json.dumps(value, sort_keys=True))
    except (sqlite3.Error, StoreError, OSError) as exc:
        log.warning("bm25_compact_backoff_unsaved error=%s (a restart goes on from the last one kept)", exc)


def _index_id(stores: Stores, *, make: bool = False) -> str | None:
    """The keyword index the back-off is about: a random id written once into its folder
    (``INDEX_ID_FILE``), so it goes with the folder through a copy, a restore or a remount (its
    device and inode numbers do not), and a folder made anew (a repair, a swap beside) has none
    until a back-off is kept for it; a refill in place ends the back-off itself (``rebuild_bm25``).
    ``make``: written when missing. None when it is missing or cannot be read or written (then no
    record matches it)."""
    path = stores.bm25.path / INDEX_ID_FILE
    try:
        found = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        found = ""
    except (OSError, ValueError):
        return None
    if found or not make:
        return found or None
    made = secrets.token_hex(16)
    try:
        atomic_write(path, made.encode("ascii"), make_folder=False)
    except OSError as exc:
        log.warning("bm25_index_id_unsaved error=%s (a back-off kept now ends at the next start)", exc)
        return None
    return made


def remembered_backoff(stores: Stores) -> None:
    """At a start: the back-off the last run kept (``_keep_backoff``). A row that cannot be read
    as one (damaged, or written otherwise by a later version) is logged and ignored: the first
    due run then tries the rewrite, as before the back-off was kept."""
    try:
        raw = stores.manifest.get_meta(BACKOFF_META)
    except (sqlite3.Error, StoreError) as exc:
        log.warning("bm25_compact_backoff_unread error=%s (the first due run tries the rewrite)", exc)
        return
    if raw is None:
        return
    try:
        value = json.loads(raw)
        times, runs, about = value["gave_way"], value["runs_to_skip"], value["index"]
        if not all(type(n) is int for n in (times, runs)) or times < 1 or not 0 <= runs <= BACKOFF_MAX_RUNS:
            raise ValueError("not a back-off")
        if not isinstance(about, str):
            raise ValueError("not a back-off")
    except (ValueError, TypeError, KeyError) as exc:
        log.warning(
            "bm25_compact_backoff_ignored value=%.80r error=%s (a damaged record: the first due run "
            "tries the rewrite)",
            raw,
            exc,
        )
        with contextlib.suppress(sqlite3.Error, StoreError, OSError):  # read-only: said at each start
            stores.manifest.delete_meta([BACKOFF_META])
        return
    if about != (now := _index_id(stores)):
        # Of a keyword index replaced since (a repair, an upgrade's refill beside; one by a
        # version that kept no back-off, or a folder without an id): the index live now starts
        # fresh. Nothing is wrong with the record, so said at info.
        log.info(
            "bm25_compact_backoff_ignored reason=about another keyword index (%s, now %s): the first "
            "due run tries the rewrite",
            about,
            now or "no id",
        )
        with contextlib.suppress(sqlite3.Error, StoreError, OSError):
            stores.manifest.delete_meta([BACKOFF_META])
        return
    stores.keyword_backoff, stores.keyword_backoff_of = (times, runs), about
    log.info("bm25_compact_backoff_resumed gave_way=%d runs_to_skip=%d", times, runs)


def _skipped(stores: Stores, reason: str, event: str) -> None:
    """A due compaction of a large vault not begun: logged (a run every hour otherwise said
    nothing of why the deleted documents stayed) and kept for health."""
    log.info("bm25_compact_skipped part=vault reason=%s (%s; tried again at the next run)", event, reason)
    _outcome(stores, "skipped", reason)


def _outcome(stores: Stores, outcome: str, reason: str) -> None:
    stores.keyword_compaction_last = (outcome, reason, time.time())
    stores.keyword_compaction_of = (stores.bm25, stores.bm25.refills, _age_clock())


def compaction_current(stores: Stores) -> bool:
    """Whether the last compaction's outcome is about the index live now: not when a rebuild, a
    repair or an upgrade's swap replaced or refilled it since (their index has no deleted
    documents of its own; said of it, \"last rewritten 3 weeks ago\" described an index gone)."""
    about = stores.keyword_compaction_of
    return about is not None and about[0] is stores.bm25 and about[1] == stores.bm25.refills


def _no_room(stores: Stores, part: str, folders: tuple[Path, ...]) -> str | None:
    """Why a keyword rewrite of ``folders`` is not to be tried now (logged at debug), else None: while
    an upgrade refills the index beside (it counted on the disk's room, and the old index is
    about to go), or while the disk has less free than a second copy of them needs
    (``copy_room``, as the upgrade's refill beside judges it). The rewrite writes the whole
    copy before its commit: the check of two writer flushes let it take the disk's last space
    from other programs, fail at the commit, and do so again every run."""
    if stores.upgrading:
        log.debug("bm25_compact_skipped part=%s reason=upgrading", part)
        return "the keyword index is being upgraded"
    free = free_space(stores.bm25.path)
    needed = copy_room(sum(folder_size(f) for f in folders))
    if free is not None and free < needed:
        log.debug(
            "bm25_compact_skipped part=%s reason=low disk free_mb=%d needed_mb=%d",
            part,
            free // 2**20,
            needed // 2**20,
        )
        return f"the disk has {free // 2**20:,} MB free of the {needed // 2**20:,} MB a copy needs"
    return None


def compact_memory(stores: Stores, stop: threading.Event | None = None) -> list[str]:
    """Rewrite each memory index (an agent's own, the one of every agent's memory) whose deleted
    documents weigh in its scores, in place (``Bm25Index.compact_memory``): Tantivy counts a
    deleted document and its words in BM25 until its segment is merged, so a long-used agent's
    index ranked its notes differently from a rebuild of the same notes. Judged by each index's
    own deleted documents (a vault edit rewrites none); the write lock is held for one index at
    a time. A failure is logged and tried again by the next run; a ``stop`` ends it. The memory
    indexes rewritten, as the log names them."""
    done: list[str] = []
    if stores.bm25.read_only or stores.bm25.unavailable is not None:
        return done  # nothing can be written (a full disk, a lost index): no failure logged hourly
    wanted = _memory_wanted(stores)
    for name, (gone, held) in stores.bm25.memory_deleted_docs().items():
        live = held - gone
        # An index that holds other notes than the manifest's (a drift) is rewritten from it
        # even with nothing deleted: skipped, it kept the drift until a restart's check.
        differs = live != wanted.get(name, 0)
        # Its deleted documents too few to rewrite it for (then only a drift does).
        only_drift = gone == 0 or (live > _MEMORY_SMALL and gone < _MEMORY_SHARE * live)
        if only_drift and not differs:
            continue
        if stop is not None and stop.is_set():
            break
        part = EVERYONE_DIR if name == EVERYONE else f"memory/{name}"
        if _no_room(stores, part, (stores.bm25.path / part,)):
            continue
        started = time.monotonic()
        prefix = "memory/" if name == EVERYONE else f"memory/{name}/"
        try:
            with stores.write_lock:  # no note written between the manifest's read and the commit
                docs = [bm25_doc(v) for v in stores.manifest.chunks_under(prefix)]
                # Chosen for its counts alone: left as it is when, under the lock, they agree
                # after all (a write committed between the two reads), as no rewrite is needed.
                rewritten = stores.bm25.compact_memory(name, docs, stop, drift_only=only_drift)
        except StoresClosedError:
            raise  # the stop closed the stores: the rest waits for the next run, no failure
        except (StoreError, DaemonRunningError) as exc:  # a full disk: the old index stays whole,
            log.error("bm25_compact_failed part=%s error=%s", part, exc)  # the next run tries again
            continue
        if rewritten:
            seconds = time.monotonic() - started
            log.info("bm25_compacted part=%s deleted=%d live=%d seconds=%.2f", part, gone, live, seconds)
            done.append(part)
        elif stop is not None and stop.is_set():
            log.info("bm25_compact_stopped part=%s (rolled back: the index is as it was)", part)
    return done


def _memory_wanted(stores: Stores) -> dict[str, int]:
    """The documents (chunks and pages) each memory index must hold as the manifest says: each
    agent's own, and all memory for the index of every agent's memory (``EVERYONE``)."""
    counts = stores.manifest.inbox_counts()
    out = {agent: chunks + pages for agent, (chunks, pages) in counts.items()}
    out[EVERYONE] = sum(out.values())
    return out


def check_bm25(stores: Stores, stop: threading.Event | None = None) -> None:
    """After the first sweep, BM25 must hold exactly the manifest's chunks and pages; else
    rebuild it (a stop ends the rebuild: the next start checks again). When the vault's own
    index agrees with its notes, only the inboxes that disagree with theirs are refilled (one
    damaged inbox refilled the whole index)."""
    if stop is not None and stop.is_set():
        return
    expected = stores.manifest.indexed_chunk_count()
    actual = stores.bm25.num_docs()
    pages, have_pages = stores.manifest.indexed_page_count(), stores.bm25.num_pages()
    # The inboxes are checked each on its own, also when the totals agree: they are counted in
    # no total once the index of every agent's memory holds it all.
    if _refill_inboxes(stores, expected, pages):
        return
    if actual == expected and have_pages != pages:
        log.warning(
            "index_rebuilt store=bm25 reason=page count mismatch expected=%d actual=%d", pages, have_pages
        )
        rebuild_bm25(stores, stop)
    elif (actual, have_pages) == (expected, pages):
        # The totals agree while the vault's own index does not (memory makes up the difference).
        log.warning("index_rebuilt store=bm25 reason=count mismatch of the vault's and the wiki's index")
        rebuild_bm25(stores, stop)
    elif expected != actual:
        # A new (upgraded or moved-aside) index is expected to be empty: refilling it is routine.
        level = logging.INFO if actual == 0 else logging.WARNING
        log.log(
            level,
            "index_rebuilt store=bm25 reason=count mismatch expected=%d actual=%d",
            expected,
            actual,
        )
        rebuild_bm25(stores, stop)


def _refill_inboxes(stores: Stores, chunks: int, pages: int) -> bool:
    """Refill the inboxes whose counts differ from the manifest's, if the vault's index holds
    what it must (``chunks`` and ``pages``: all the manifest holds); False when it does not."""
    wanted = stores.manifest.inbox_counts()
    have = stores.bm25.inbox_counts()
    memory = (sum(c for c, _ in wanted.values()), sum(p for _, p in wanted.values()))
    shared = (chunks - memory[0], pages - memory[1])
    if stores.bm25.shared_counts() != shared:
        return False
    everyone = stores.bm25.everyone_counts()
    if everyone is not None and everyone != memory:  # a crash between its commit and an inbox's
        log.warning(
            "index_rebuilt store=bm25 part=memory-all reason=count mismatch expected=%s actual=%s",
            memory, everyone,
        )  # fmt: skip
        fill_everyone(stores)
    elif everyone is not None and stores.bm25.everyone_behind():  # an older version wrote memory
        log.warning("index_rebuilt store=bm25 part=memory-all reason=inboxes written after it")
        fill_everyone(stores)
    # An agent without an index of its own (removed as idle) is no disagreement: a search with
    # its scope rebuilds it. Until the index of all memory is filled, each inbox counts.
    # One moved aside as damaged (``inbox_counts``) is refilled now, as before.
    aside = {a for a in stores.bm25.failing if "/" not in a and a in wanted}
    agents = have.keys() | aside if everyone is not None else wanted.keys() | have.keys()
    apart = sorted(a for a in agents if wanted.get(a, (0, 0)) != have.get(a, (0, 0)))
    for agent in apart:
        refill_inbox(stores, agent)
        log.warning(
            "index_rebuilt store=bm25 inbox=%s reason=count mismatch expected=%s actual=%s",
            agent, wanted.get(agent, (0, 0)), have.get(agent, (0, 0)),
        )  # fmt: skip
    return True


class Repair:
    """Replaces a failing keyword index or vector table with a sound one."""

    def __init__(
        self, cfg: Config, stores: Stores, vectors: Vectoring, slot: EmbedderSlot, problems: Problems
    ) -> None:
        self.cfg = cfg
        self.stores = stores
        self.vectors = vectors
        self.slot = slot
        self.problems = problems
        # Vector tables rebuilt by this run: name -> [(when, why), ...].
        self.rebuilt: dict[str, list[tuple[float, str]]] = {}
        self.gave_up: str | None = None  # a table left as it is after MAX_VECTOR_REBUILDS
        # The serving table's handle this repair read whole and attached: a switch that cannot
        # begin, tried again, does not read it again while no search fails on it.
        self._sound: VectorStore | None = None
        remembered_backoff(stores)

    def repair_bm25(self, reason: str) -> None:
        """A keyword index that fails under the running daemon: move it aside and refill a fresh
        one from the manifest (seconds even for large vaults; no note is read)."""
        stores = self.stores
        with stores.write_lock:
            old = stores.bm25
            with contextlib.suppress(StoreError, ValueError, OSError, RuntimeError):
                old.close()
            fresh = None
            try:
                aside = move_aside(old.path)
                # Filled before it serves: swapped in empty, it answered searches with nothing
                # for as long as the refill took (an empty success, read as "nothing relevant").
                fresh = Bm25Index(old.path)
                fill_bm25(fresh, stores.manifest)
            except BaseException as exc:
                # The half-filled one closed (its writer lock released); the stores hold the old
                # one marked lost, which the policy opens again in place and refills with a
                # growing wait, moving nothing aside meanwhile. Was: the stores held the closed
                # old index, and each minute another repair moved a copy aside.
                if fresh is not None:
                    with contextlib.suppress(StoreError, ValueError, OSError, RuntimeError):
                        fresh.close()
                old.lost(f"its rebuild failed: {exc}")
                raise
            stores.bm25 = fresh
        log.error("index_rebuilt store=bm25 reason=%s moved_to=%s", reason, aside)
        _keep_backoff(stores, None)  # of the index moved aside: the fresh one starts anew
        self.problems.note(
            "stores", f"the keyword index failed ({reason}); moved aside and rebuilt", subject="bm25"
        )
        self.problems.clear("keyword_search")
        self.problems.clear(UPGRADE_AREA)  # an upgrade's failed refill in place: this one is whole

    def repair_inboxes(self, agents: Collection[str], reason: str) -> None:
        """Agents' inbox indexes that fail under the running daemon, while the vault's answers:
        each moved aside and refilled from the manifest, the rest of the index left alone."""
        for agent in sorted(agents):
            refill_inbox(self.stores, agent)
            log.error("index_rebuilt store=bm25 inbox=%s reason=%s", agent, reason)
        self.problems.note(
            "stores",
            f"an agent's keyword index failed ({reason}); moved aside and rebuilt",
            subject="inboxes",
        )
        self.problems.clear("keyword_search")

    def repair_vectors(self, reason: str) -> bool:
        """Vector searches keep failing (or the table could not be attached): open it afresh and
        read it whole; if it reads, serve the fresh handle, else move it aside and embed again into
        a new table (keyword search answers meanwhile). True if vectors are recomputed. Left to a
        restart during a model switch, where two tables share the folder."""
        stores, problems = self.stores, self.problems
        serving = stores.serving
        model = serving.model if serving is not None else self.slot.model
        if model is None or stores.building is not None:
            return False
        configured = self.slot.model
        if (
            serving is not None
            and serving.store is self._sound
            and not serving.store.closed
            and configured is not None
            and configured is not model
            and self.problems.active_in("vector_search") is None
        ):
            # A switch that cannot begin, tried again (every 5 s up to 5 min): the serving table
            # was read whole at its first try and no search failed on it since. Read whole again
            # under the write lock at each try, it held every write back (seconds at 100 k).
            with contextlib.suppress(PassingFaultError):  # the switch's attach reports it
                self._check_next(configured)
            return False
        if serving is None:
            # Nothing attached yet (a start): the table the manifest names is repaired, with its
            # own model. The configured model's table was, when a switch to it was due: it
            # served empty, and the retiring table, every vector, was dropped as unused.
            model = self._named_model(model)
        with stores.write_lock:
            if serving is not None:
                serving.store.stop_build()
            store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, problems)
            try:
                store.verify()
                rebuilt = False
            except PassingFaultError:
                raise  # no damage: nothing to replace
            except StoreError as exc:
                why = f"could not be read ({exc}; searches: {reason})"
                if not self._may_rebuild(store.name, str(exc)):
                    return False
                if serving is not None:
                    # No write through the old handle from now on (it waits for one that runs):
                    # it would land in the new table at the same path (``Vectoring._store``).
                    serving.store.close()
                aside = discard_vectors(store.path, store.name, why, problems)
                store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, problems)
                if aside is not None:  # the rows of the files that still read: not embedded again
                    salvage_vectors(aside, store, model.pooling)
                self.rebuilt.setdefault(store.name, []).append((time.time(), str(exc)))
                rebuilt = True
            # The configured model loaded and is another (a switch to it begins next: the repair
            # ran at its attach, or before its table could be made): the chunks left to the new
            # model stay so. Released, the retiring model embedded them all first.
            switching = configured is not None and configured is not model
            self.vectors.attach(store, model, switching=switching)
            self._sound = store
            if serving is not None and serving.store is not store:
                serving.store.close()  # the fresh handle serves; the old one writes no more
            if switching and configured is not None:
                # A full disk is no damage: the switch's attach reports it and tries again.
                with contextlib.suppress(PassingFaultError):
                    self._check_next(configured)
        problems.clear("vector_search")
        log.warning("vectors_repaired table=%s recomputed=%s", store.name, rebuilt)
        return rebuilt

    def _named_model(self, configured: Embedder) -> Embedder:
        """The model of the table the manifest's vector flags belong to, when that table is
        another model's (a switch from it is due or under way) and the model still loads;
        else ``configured``. One that fails to load now raises (tried again later)."""
        table = self.vectors.serving_table()
        if not table or table == table_name(configured.model_id, configured.dim, configured.pooling):
            return configured
        previous = open_previous(self.cfg, table)
        if previous is None:  # its model is gone: the switch recomputes the vectors anyway
            return configured
        previous[0].close()  # opened again below, read whole
        return previous[1]

    def _check_next(self, model: Embedder) -> None:
        """The table a switch to ``model`` builds, read whole; one that cannot be read is moved
        aside and made afresh with the rows that still read. Its attach failed on it, each retry
        the same way (only the serving table was checked): the switch never began, and nothing
        was embedded meanwhile, not even the notes written since."""
        store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, self.problems)
        try:
            store.verify()
            self.problems.clear("vectors", subject=store.name)  # read whole again: not stuck
            return
        except PassingFaultError:
            raise
        except StoreError as exc:
            if not self._may_rebuild(store.name, str(exc), serving=False):
                return
            store.close()
            aside = discard_vectors(store.path, store.name, f"could not be read ({exc})", self.problems)
            store = open_vectors(self.cfg, model.model_id, model.dim, model.pooling, self.problems)
            if aside is not None:  # the rows of the files that still read: not embedded again
                salvage_vectors(aside, store, model.pooling)
            self.rebuilt.setdefault(store.name, []).append((time.time(), str(exc)))
            log.warning("vectors_repaired table=%s recomputed=True (the switch's table)", store.name)
        finally:
            store.close()  # the switch's attach opens it (a write through this handle would fail)

    def _may_rebuild(self, table: str, error: str, *, serving: bool = True) -> bool:
        """Whether a table that cannot be read is moved aside and embedded again: not a third
        time in one run (five copies in 40 minutes, each a full re-embed, were seen when a
        rebuilt table broke again at once). A second rebuild says why, as far as it is known.
        ``serving``: the table answers searches (not the one a switch builds, while the
        retiring table serves: vector search does not fail, and the serving one is still
        repaired when it fails)."""
        before = self.rebuilt.get(table, [])
        if not before:
            return True
        last_at, _ = before[-1]
        when = time.strftime("%H:%M:%S", time.localtime(last_at))
        cause = _stale_files(error, self.cfg.index_dir, table)
        because = (
            f"its versions name data files of the table moved aside at {when} ({cause}): written "
            "through the old table's handle"
            if cause
            else f"the error now: {error}"
        )
        if len(before) >= MAX_VECTOR_REBUILDS and not serving:
            log.error("vectors_repair_stopped table=%s rebuilds=%d reason=%s", table, len(before), because)
            self.problems.report(
                "vectors",
                f"the vector table {table} that a model switch builds was rebuilt {len(before)} times "
                f"since the daemon started (last at {when}) and cannot be read again ({because}); it is "
                "not moved aside again. The switch waits until the daemon restarts (the serving table "
                "answers searches meanwhile); if it breaks again after a restart, check the disk with "
                "`sidecar doctor` and report it",
                subject=table,
            )
            return False
        if len(before) >= MAX_VECTOR_REBUILDS:
            self.gave_up = table
            msg = (
                f"the vector table {table} was rebuilt {len(before)} times since the daemon started "
                f"(last at {when}) and cannot be read again ({because}); it is not moved aside again "
                "(each rebuild embeds anew what cannot be read). Vector search fails until the daemon "
                "restarts (keyword results only); if it breaks again after a restart, check the disk with "
                "`sidecar doctor` and report it"
            )
            log.error("vectors_repair_stopped table=%s rebuilds=%d reason=%s", table, len(before), because)
            self.problems.report("vectors", msg)
            return False
        log.error(
            "vectors_rebuilt_again table=%s previous=%s reason=the table rebuilt then cannot be read: %s",
            table,
            when,
            because,
        )
        self.problems.note(
            "stores",
            f"the vector table {table}, rebuilt at {when}, could not be read again ({because}); "
            "moved aside a second time and re-embedding; a third time it is left as it is",
            subject="vectors",
        )
        return True


def _stale_files(error: str, index_dir: Path, table: str) -> str | None:
    """When ``error`` names a data file of ``table`` that is missing but lies in a copy moved
    aside: that copy's name (the new table was written through the old one's handle)."""
    for name in _DATA_FILE.findall(error):
        for aside in sorted(index_dir.glob(f"vectors.broken-*/{table}.lance/data/{name}")):
            return f"{name} is in {aside.parents[2].name}"
    return None
