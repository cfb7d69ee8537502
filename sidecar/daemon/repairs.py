"""The repair policy: when a failing store is put right, and how often at most.

Searches report what fails on ``problems``; the scheduled tick looks here. A damaged keyword index
is rebuilt at once (at most once a minute; an agent's inbox index alone when only it fails); a
vector table after a failed vector search with a working model, once the check (it reads every
vector, so at most every ten minutes) finds it unreadable: a failure without damage costs one
check and replaces nothing; a table rebuilt twice in one run that cannot be read again is left as
it is, reported (``Repair.repair_vectors``). A manifest file deleted or replaced under the running daemon is
reported.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable

from sidecar.contracts.errors import EmbedderError, StoreError, engine_message
from sidecar.index.problems import Problems
from sidecar.index.repair import Repair
from sidecar.index.upgrade import reopen_bm25
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime.backoff import Backoff
from sidecar.search.keyword_gaps import INBOX_FAILURE
from sidecar.stores.bm25 import NOT_OPEN
from sidecar.stores.bm25_folder import engine_failure, low_disk
from sidecar.stores.manifest import Manifest

log = logging.getLogger(__name__)

BM25_REPAIR_EVERY_S = 60.0
# Vector searches failing this many times in a row make the table worth checking. The check is the
# evidence: waiting for three left a table damaged while stopped broken until the third search.
VECTOR_REPAIR_AFTER_FAILURES = 1
VECTOR_REPAIR_EVERY_S = 600.0
# Free bytes on the home's disk that count as room again for memory writes (a note and its index).
ROOM_FOR_WRITES = 16 << 20
# Refills of a keyword index whose commits got stuck (``Bm25Index.stuck``) within this window past
# which it is not moved aside again until a commit of it works or the daemon restarts: a leftover
# that comes back after each refill (a share that refuses every removal) had a whole index moved
# aside and refilled every minute, for good.
MAX_STUCK_REFILLS = 3
STUCK_WINDOW_S = 3600.0
STUCK_SUBJECT = "stuck"  # the keyword_index problem of an index left stuck
REPAIR_SUBJECT = "repair"  # the keyword_index problem of a repair that failed


class RepairPolicy:
    def __init__(
        self,
        repair: Repair,
        problems: Problems,
        manifest: Manifest,
        slot: EmbedderSlot,
        keep_lock: Callable[[], tuple[str, str] | None] | None = None,
    ) -> None:
        self.repair = repair
        self.keep_lock = keep_lock
        self.problems = problems
        self.manifest = manifest
        self.slot = slot
        self._bm25_repaired = -1e9
        self._vectors_repaired = -1e9
        # A lost keyword index opened again (``reopen_keyword_index``): tries failed in a row,
        # and when the next is due.
        self._reopen_policy = Backoff(base=1.0, cap=repair.cfg.watch.fault_retry_max_seconds, jitter=0.0)
        self._reopen_failures = 0
        self._reopen_at = 0.0
        self._stuck_refills: list[float] = []  # when a stuck index was refilled (monotonic)
        self._stuck_stopped = False  # no refill for being stuck until a commit works (a restart)

    def tick(self) -> None:
        self.check_manifest()
        self.check_lock()
        self.check_disk_room()
        self.reopen_keyword_index()
        self.repair_keyword_index()
        self.repair_vector_table()

    def reopen_keyword_index(self) -> None:
        """No keyword index is open (an upgrade's swap undone, or its refill in place, and the
        open after it failed too: too many open files): opened again, with a growing wait between
        tries (the index update's fault policy: 1 s doubling up to ``watch.faultRetryMaxSeconds``),
        until it opens. Until then searches and writes fail saying so (problem keyword_index)."""
        bm25 = self.repair.stores.bm25
        if bm25.unavailable is None:
            self._reopen_failures = 0
            return
        now = time.monotonic()
        if now < self._reopen_at:
            return
        try:
            reopen_bm25(self.repair.stores)
        except (StoreError, OSError, sqlite3.Error) as exc:  # the manifest read for a refill too
            self._reopen_failures += 1
            delay = self._reopen_policy.delay(self._reopen_failures)
            self._reopen_at = now + delay
            log.error("bm25_reopen_failed error=%s retry_in=%.0fs", exc, delay)
            return
        self._reopen_failures = 0
        self.problems.clear("keyword_index", subject=REPAIR_SUBJECT)  # a failed rebuild's: open again

    def repair_keyword_index(self) -> None:
        """Searches found the BM25 index damaged, or its commits fail for good on a file that
        cannot be removed (``Bm25Index.stuck``): rebuild it in place (at most once a minute);
        only the agents' inbox indexes that fail when the vault's own index answers. Not while no
        index is open (``reopen_keyword_index``): its files are whole, moving them aside is no cure."""
        bm25 = self.repair.stores.bm25
        if bm25.unavailable is not None:
            return
        if bm25.stuck is not None:
            # Its commits keep failing on a file that cannot be removed: no write is taken until
            # it is made anew, whatever the searches say.
            self._repair_stuck(bm25.stuck)
            return
        if self._stuck_stopped:  # a commit of it worked (the file removed): refilled when stuck again
            log.info("bm25_repair_resumed")
            self._stuck_stopped, self._stuck_refills = False, []
        self.problems.clear("keyword_index", subject=STUCK_SUBJECT)  # it takes commits again
        failing = self.problems.active_in("keyword_search")
        broken = dict(self.repair.stores.bm25.failing)
        if failing is None and broken:
            # An inbox moved aside by a write's commit: no search has said so yet.
            name, why = min(broken.items())
            self.problems.report("keyword_search", f"{INBOX_FAILURE}{name}: {why}")
            failing = self.problems.active_in("keyword_search")
        if failing is not None and NOT_OPEN in str(failing["error"]):
            # A search that met the lost index and said so after the reopen: the index it failed
            # on is whole and open again; moved aside, it was rebuilt for nothing.
            self.problems.clear("keyword_search")
            return
        if failing is None:
            # Nothing fails (an inbox whose rebuild failed was rebuilt by a search with its scope
            # since): a failed repair's line goes, or it stayed for as long as the daemon ran.
            self.problems.clear("keyword_index", subject=REPAIR_SUBJECT)
            return
        error = str(failing["error"])
        inboxes = {name.split("/", 1)[0] for name in dict(self.repair.stores.bm25.failing)}
        if not (error.startswith(INBOX_FAILURE) and inboxes):
            self._repair_whole(error)
            return
        if time.monotonic() - self._bm25_repaired < BM25_REPAIR_EVERY_S:
            return
        self._bm25_repaired = time.monotonic()
        self._keyword_repair(lambda: self.repair.repair_inboxes(inboxes, error), "tried again in a minute")

    def _repair_stuck(self, reason: str) -> None:
        """A stuck keyword index refilled (``_repair_whole``); after ``MAX_STUCK_REFILLS`` refills
        within ``STUCK_WINDOW_S`` that each got stuck again, not refilled again until a commit of
        it works (the file removed by hand, the share back: ``Bm25Index.stuck`` cleared) or the
        daemon restarts: left as it is (it answers searches from what it holds; its commits
        fail), and status says what to do. Was a rolling limit: three more refills each hour,
        for good, where status said it was not rebuilt again. A refill that failed is no refill
        that got stuck again: not counted."""
        if not self._stuck_stopped:
            now = time.monotonic()
            self._stuck_refills = [t for t in self._stuck_refills if now - t < STUCK_WINDOW_S]
            if len(self._stuck_refills) >= MAX_STUCK_REFILLS:
                self._stuck_stopped = True
                log.error("bm25_repair_stopped refills=%d reason=%s", len(self._stuck_refills), reason)
        if self._stuck_stopped:
            self.problems.report(
                "keyword_index",
                f"the keyword index got stuck again after {MAX_STUCK_REFILLS} rebuilds within the hour "
                f"({reason}); it is not rebuilt again until a commit of it works or the daemon "
                "restarts: searches answer from what it holds, changed notes are not found by their "
                "words. Check that the index folder's disk lets files be removed (permissions, a "
                "share's state), then restart the daemon",
                subject=STUCK_SUBJECT,
            )
            return
        if self._repair_whole(reason):
            self._stuck_refills.append(time.monotonic())

    def _repair_whole(self, reason: str) -> bool:
        """The whole keyword index moved aside and refilled (at most once a minute); whether it
        was (not deferred, not failed)."""
        if time.monotonic() - self._bm25_repaired < BM25_REPAIR_EVERY_S:
            return False
        free = low_disk(self.repair.stores.bm25.path)
        if free is not None:  # a refill on a disk this full fails half-way: tried once there is room
            log.warning("bm25_repair_deferred reason=low_disk free=%d", free)
            return False
        self._bm25_repaired = time.monotonic()
        # A rebuild that failed leaves the index lost (``Repair.repair_bm25``): opened again in
        # place by ``reopen_keyword_index``, not in a minute.
        return self._keyword_repair(
            lambda: self.repair.repair_bm25(reason),
            "keyword searches and writes fail until it is opened again in place and refilled, tried "
            f"by itself after 1 s, 2 s, … up to {self.repair.cfg.watch.fault_retry_max_seconds:.0f} s",
        )

    def _keyword_repair(self, repair: Callable[[], None], retry: str) -> bool:
        """Run a keyword repair; whether it worked. Its failure is logged and said in status
        (with ``retry``: what happens next), the tick going on. Beside our errors and the manifest's,
        Tantivy's own (its binding's ValueError, a RuntimeError, a Rust panic, which is no
        Exception: ``engine_failure``) escaped: the tick's other repairs were skipped, and a
        panic ended the tick's thread (no sweep, no repair) for the rest of the run."""
        try:
            repair()
        except BaseException as exc:
            if not isinstance(exc, (StoreError, OSError, sqlite3.Error)) and not engine_failure(exc):
                raise
            # Not ours (Tantivy's, the manifest's): where it came from is in the traceback.
            log.error("bm25_repair_failed error=%s", exc, exc_info=not isinstance(exc, StoreError))
            self.problems.report(
                "keyword_index",
                f"the keyword index could not be rebuilt ({engine_message(exc)}); {retry}",
                subject=REPAIR_SUBJECT,
            )
            return False
        self.problems.clear("keyword_index", subject=REPAIR_SUBJECT)
        return True

    def repair_vector_table(self) -> None:
        """Vector searches keep failing with a working model: check the table, replace it if it
        cannot be read (at most every ten minutes: the check reads every vector)."""
        failing = self.problems.active_in("vector_search")
        if (
            failing is None
            or failing["count"] < VECTOR_REPAIR_AFTER_FAILURES
            or self.slot.state != "ok"
            or time.monotonic() - self._vectors_repaired < VECTOR_REPAIR_EVERY_S
            or self.repair.gave_up is not None  # rebuilt twice already: said so, left to a restart
        ):
            return
        self._vectors_repaired = time.monotonic()
        try:
            self.repair.repair_vectors(failing["error"])
        except (StoreError, EmbedderError, OSError) as exc:  # the retiring model failing to load
            log.error("vector_repair_failed error=%s", exc)

    def check_disk_room(self) -> None:
        """Memory writes failed for a full disk: the problem goes once the home's disk has room
        again (an agent that failed may never write again to clear it)."""
        if self.problems.active_in("memory_write") is None:
            return
        try:
            free = shutil.disk_usage(self.repair.cfg.home).free
        except OSError:
            return
        if free >= ROOM_FOR_WRITES:
            self.problems.clear("memory_write")

    def check_lock(self) -> None:
        """The home's index lock is still this daemon's (made again if it was removed)."""
        found = self.keep_lock() if self.keep_lock is not None else None
        if found is None:
            self.problems.clear("home", subject="index")  # its index folder is back
        elif found[0] == "home":
            self.problems.report("home", found[1], subject="index")
        else:
            self.problems.report(*found)

    def check_manifest(self) -> None:
        """sqlite keeps writing to a deleted or replaced file: say so instead of losing work silently."""
        path = self.manifest.path
        try:
            same = os.stat(path).st_ino == self.manifest.inode
        except OSError:
            same = False
        if same:  # back (the home's share mounted again): the advice to restart no longer holds
            self.problems.clear("stores", subject="manifest")
        else:
            self.problems.report(
                "stores",
                f"{path} was deleted or replaced while running; restart the daemon to rebuild the "
                "index from the notes (searches still answer from the open copy)",
                subject="manifest",
            )
