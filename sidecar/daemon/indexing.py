"""The indexer thread: sweep requests in, one sweep at a time, a storage fault retried soon.

Requests (a start, the schedule, the index op, file events with their paths) queue as jobs; a
burst is merged into one sweep. A sweep that fails (disk full, read-only) is retried with the
backoff policy, capped low (``watch.faultRetryMaxSeconds``): notes saved meanwhile must be
searchable seconds after the fault clears. A retry needs only the paths the failed sweep
scanned but did not write. A note that changes again right after it was indexed is indexed at
most every few times what that cost (``sidecar.daemon.hot``), after the other notes' changes. A
scheduled or asked-for sweep that finds notes no file event told has the watch built again
(``Watcher.events_lost``).
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace

from sidecar.config import Config
from sidecar.contracts.errors import StorageError, StoreError, UnreadableError
from sidecar.daemon.hot import HOT_MAX_S, HotNotes
from sidecar.index.activity import Activity
from sidecar.index.bursts import Bursts
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime import heap
from sidecar.runtime.backoff import Backoff
from sidecar.stores.space import fault_words
from sidecar.vault.notenames import is_note_name
from sidecar.vault.sources import Root, vault_roots
from sidecar.vault.watch_filter import obsidian_setting

log = logging.getLogger(__name__)

# A note changed this shortly before a sweep began may have its file event still on the way.
_IN_FLIGHT_S = 5.0
# Fewer notes than this changed in all are no catch-up to tell of (``catchingUp``): a note or a few
# being saved are indexed within a second, and a hot note held (``sidecar.daemon.hot``) is no
# bulk change at all; the wording about old paths still found was on all the time a person typed.
CATCHING_UP_MIN = 10
# Paths told by file events kept between two checks for lost events, at most (then one check is
# skipped rather than the memory grow without end).
_REPORTED_MAX = 200_000
LOST_AREA = "watch"
WATCH_LIMIT = "limit"
WATCH_LEFT_OUT = "left out"  # folders the watch goes around while a call in them hangs
REBUILD_AREA = "rebuild"
# The subject of a rebuild refused at its turn ("not rebuilt: ..."): its own entry, so the put-back
# of an earlier rebuild, read by the same sweep, neither clears nor replaces it.
REFUSED = "refused"  # the subject of the watch's problem of running out of inotify watches
# How long a rebuild refused at its turn is checked after each whole sweep (``_refusal_passed``),
# in whole sweeps of ``index.rescanMinutes``: a cause that stays needs no check for ever.
REFUSAL_CHECK_HOURS = 24.0


@dataclass(frozen=True)
class Job:
    """A sweep request; bursts are merged into one."""

    rebuild: bool = False
    roots: frozenset[str] | None = None  # None: every root
    confirm: frozenset[str] = frozenset()  # roots whose mass deletion the user confirmed
    paths: frozenset[str] = frozenset()  # changed files or folders (file events): only these
    # A scheduled or asked-for sweep: what it finds in a watched root, events should have told
    # (merged with any other request it is not: a watch restart or a settings change finds changes).
    audit: bool = False
    restarted: bool = False  # the watch was (re)started: this sweep catches up with it
    # File events and nothing else (``IndexLoop.changed``, held ones coming due): their paths are
    # told. A failed sweep's leftover paths have the same shape and are not.
    told: bool = False
    # The number of the latest `index` request this sweep answers (``IndexLoop.request_sweep``;
    # 0: none): health says which ones are done, and `sidecar index` waits for its own.
    ticket: int = 0
    # Asked for by the `index` op: the notes whose read failed are read now, not at their turn
    # (through a running daemon, `sidecar index` is the way to try a note whose share healed).
    asked: bool = False

    def merge(self, other: Job) -> Job:
        roots = None if self.roots is None or other.roots is None else self.roots | other.roots
        paths = frozenset() if roots is None else self.paths | other.paths
        # File events leave an audit standing (``IndexLoop._next`` counts their paths as told for
        # its check). Taken as any other request, a scheduled sweep merged with the events queued
        # meanwhile checked nothing, and in a vault saved to all the time (an agent writing its
        # memory) lost events were never found.
        audit = (self.audit or self.events_only) and (other.audit or other.events_only)
        return Job(
            self.rebuild or other.rebuild,
            roots,
            self.confirm | other.confirm,
            paths,
            audit and (self.audit or other.audit),
            self.restarted or other.restarted,
            self.told and other.told,
            max(self.ticket, other.ticket),
            self.asked or other.asked,
        )

    @property
    def events_only(self) -> bool:
        """File events and nothing else: these paths, no root walked."""
        return (
            self.told
            and self.roots == frozenset()
            and not (self.rebuild or self.confirm or self.restarted or self.audit)
        )


class IndexLoop:
    """Runs jobs on the indexer until ``stop`` is set."""

    def __init__(
        self,
        cfg: Config,
        indexer: Indexer,
        slot: EmbedderSlot,
        problems: Problems,
        *,
        stop: threading.Event,
        beat: Callable[[Activity | None], None],
        hot: HotNotes | None = None,
    ) -> None:
        self.cfg = cfg
        self.indexer = indexer
        self.slot = slot
        self.problems = problems
        self.stop = stop
        self.beat = beat
        self.jobs: queue.Queue[Job] = queue.Queue()
        # A storage fault is retried often, not after a backoff of minutes.
        self.retry = Backoff(base=1.0, cap=cfg.watch.fault_retry_max_seconds, jitter=0.0)
        self._last_crash = ""  # the last unexpected failure: its traceback is logged once
        # A long sweep takes the file events queued meanwhile between its batches (a note saved
        # during a first sweep of 40,000 notes waited two minutes for it to end).
        indexer.hot_paths = self.take_paths
        indexer.hot_back = self.changed
        self.hot = hot or HotNotes()
        indexer.on_indexed = self.hot.indexed
        indexer.on_cleared = self.hot.cleared
        indexer.stores.continuous = self.hot.continuous  # said apart in answers and status
        # Told when a sweep finds notes no file event reported (the watcher: build the watch again).
        self.on_lost: Callable[[str], None] | None = None
        self.watched: Callable[[], list[str]] = list  # the folders the watch covers now
        self._reported: set[str] = set()  # paths file events told since the last check
        self._lost = False  # the watch was restarted for lost events: status says so until caught up
        self._partial = False  # the watch covers only part of the folders: every root is polled
        self._tops: list[tuple[str, Root]] | None = None  # the vault's roots by path, longest first
        # The sweep under way and the notes the sweeps of this catch-up applied (``catching_up``),
        # read together by the handlers' threads.
        self._progress = threading.Lock()
        self._running: Job | None = None
        self._applied = 0
        # Requests numbered by ``request_sweep``: the last given, the last whose sweep ended, and
        # the last that asked for a rebuild (under ``_progress``).
        self._tickets = 0
        self.asked_done = 0
        self._rebuild_ticket = 0
        self._rebuild_begun = 0  # the last ticket of a rebuild that emptied the index (it runs)
        # The confirmations of a rebuild refused at its turn for a cause that passes (a share
        # offline, an unreadable folder or note, a refused inbox, a hold): None when there is none.
        self._refused_for: frozenset[str] | None = None
        self._refusal_checks = 0  # whole sweeps that checked it since

    def watch_partial(self, why: str | None) -> None:
        """The watcher's word on its coverage (``Watcher.partial``): while it covers only part of
        the folders, status says why and every root is polled like a share's (``polled``)."""
        self._partial = why is not None
        if why is None:
            self.problems.clear(LOST_AREA, subject=WATCH_LIMIT)
        else:
            self.problems.report(LOST_AREA, why, subject=WATCH_LIMIT)

    def watch_left_out(self, why: str | None) -> None:
        """The watcher's word on folders it went around (``Watcher.left_out_why``: a call in
        them hangs): status says the watch is partial while it does."""
        if why is None:
            self.problems.clear(LOST_AREA, subject=WATCH_LEFT_OUT)
        else:
            self.problems.report(LOST_AREA, why, subject=WATCH_LEFT_OUT)

    def polled(self) -> bool:
        """Whether every root is polled (the watch covers only part of the folders)."""
        return self._partial

    def depth(self) -> int:
        """Requests waiting, held events of hot notes included (health's queue depth)."""
        return self.jobs.qsize() + len(self.hot.held())

    def catching_up(self) -> tuple[int, int, int] | None:
        """(notes applied, notes known, those of them only cut again) while a bulk of file changes
        waits or is being applied (a branch switch, a synced folder): the paths of file events
        queued, a sweep's notes to index and to remove once it found them, counted since the
        catch-up began (nothing pending before it), so ``done`` grows over a switch's several
        sweeps; None once nothing waits, or while fewer than ``CATCHING_UP_MIN`` notes make the
        whole catch-up. A branch switch's answers held old and new paths for seconds and looked
        complete. The third: the notes of the sweep under way read only to be cut again, their
        files unchanged (chunking settings changed): no note moved, and the answers say what
        does happen."""
        with self._progress:
            running, applied = self._running, self._applied
            with self.jobs.mutex:
                queued = [p for job in self.jobs.queue for p in job.paths]
            act = self.indexer.activity
            # Deletions waiting for their root's events to go quiet (``index.bursts``) are pending
            # too, each once: a later batch of an `rm -r` names notes that wait already (it said
            # "5,000 of 7,928 applied" for a deletion of 5,000).
            bursts = self.indexer.changes.bursts
            queued = self._not_waiting(queued, bursts)
            pending = self._notes_of(queued, self.hot.quiet(queued)) + bursts.waiting()
            done, recut = applied, 0
            if running is not None and act.phase == "indexing":
                done += act.done
                pending += max(0, act.total - act.done)
                recut = act.recut
            elif running is not None and act.phase == "scanning":
                pending += self._notes_of(running.paths)  # being looked at (a full sweep may find none)
        total = done + pending
        return (done, total, recut) if pending and total >= CATCHING_UP_MIN else None

    def _not_waiting(self, paths: list[str], bursts: Bursts) -> list[str]:
        """``paths`` but those of notes whose deletion waits already (by their key). Only note
        names are keys (a folder or file ``x`` beside a deleted ``x.md`` is none); asked on every
        answer, so no copy of every waiting key and the roots' prefixes taken once."""
        if not paths or not bursts.waiting():
            return paths
        if self._tops is None:  # the loop's configuration stays what it was built with
            roots = sorted(vault_roots(self.cfg), key=lambda r: len(str(r.path)), reverse=True)
            self._tops = [(str(r.path).rstrip("/") + "/", r) for r in roots]
        keys: dict[str, str] = {}
        for p in paths:
            found = next(((top, r) for top, r in self._tops if p.startswith(top)), None)
            if found is not None and is_note_name(p.rsplit("/", 1)[-1], found[1].source):
                keys[p] = found[1].key_of(p[len(found[0]) :])
        waiting = bursts.among(keys.values())
        return [p for p in paths if keys.get(p) not in waiting]

    def _notes_of(self, paths: Collection[str], hot: Collection[str] = ()) -> int:
        """How many of these paths are neither ``hot`` nor in the agents' inboxes (a memory write
        indexes its note before it answers, and its own event would flag the answers after it)."""
        inboxes = str(self.cfg.agents_dir).rstrip("/") + "/"
        return sum(1 for p in set(paths) if not p.startswith(inboxes) and p not in hot)

    def take_paths(self) -> frozenset[str]:
        """The paths of the queued file-event jobs, taken off the queue; other jobs stay."""
        taken: list[Job] = []
        while True:
            try:
                taken.append(self.jobs.get_nowait())
            except queue.Empty:
                break
        paths: set[str] = set()
        for job in taken:
            if job.roots == frozenset() and job.paths and not job.rebuild and not job.confirm:
                paths |= job.paths
            else:
                self.jobs.put(job)
        return self.hot.hold(paths)

    def changed(self, paths: set[str], gone: frozenset[str] = frozenset()) -> None:
        """File events: look at the changed paths only; none (a watch restarted): every root.
        A note deleted or renamed away is never held (``gone``): a hot note's deletion must not
        wait its quiet time, a search would show it for up to a minute."""
        self.hot.release(gone)
        self._told(paths)
        settings = {p for p in paths if obsidian_setting(p, self.cfg.vault.path)}
        if settings:
            # Excluded files or the daily notes' format changed in Obsidian: a sweep of every
            # root applies them now (they waited for the next periodic sweep, ten minutes).
            log.info("obsidian_settings_changed files=%d", len(settings))
            paths = paths - settings
            self.jobs.put(Job())
            # What Obsidian now excludes leaves at once (the sweep would read it at its start,
            # after a sweep under way had written it); the sweep still applies the rest.
            try:
                self.indexer.reread_obsidian_rules()
            except Exception as exc:  # the watcher's thread must not end: the sweep queued removes them
                log.error("excluded_notes_removal_failed error=%s; the sweep queued removes them", exc)
        if paths:
            self.jobs.put(Job(roots=frozenset(), paths=frozenset(paths), told=True))
        elif not settings:
            self.jobs.put(Job(restarted=True))

    def _told(self, paths: Iterable[str]) -> None:
        """Paths file events told, for the next check for lost events (bounded)."""
        if len(self._reported) < _REPORTED_MAX:
            self._reported.update(paths)

    def request_sweep(
        self,
        rebuild: bool = False,
        roots: frozenset[str] | None = None,
        confirm: frozenset[str] = frozenset(),
        audit: bool = True,
    ) -> int:
        """A sweep the `index` op asks for; ``audit``: one whose finds in a watched folder are
        file events that were lost. Returns the request's number: ``asked_done`` reaches it once
        a sweep that took the request has ended."""
        with self._progress:  # queued in the order of their numbers (put under the same lock)
            self._tickets += 1
            ticket = self._tickets
            if rebuild:
                self._rebuild_ticket = ticket
            asked = Job(rebuild, roots, confirm, audit=audit and not rebuild, ticket=ticket, asked=True)
            self.jobs.put(asked)
        return ticket

    def schedule_sweep(self, audit: bool = True) -> None:
        """A sweep of the daemon's own (the schedule, the start, a reload's new exclusions): not
        numbered, ``asked_done`` counts the `index` requests (what a client's ticket numbers)."""
        self.jobs.put(Job(audit=audit))

    def rebuilding(self) -> bool:
        """Whether a rebuild was asked and its sweep has not ended (queued, or the index emptied
        and being read again: status says so, not "0 notes" and "every chunk has a vector")."""
        with self._progress:
            return self._rebuild_ticket > self.asked_done

    def rebuild_queued(self) -> bool:
        """Whether a rebuild was asked and waits in the queue (behind the sweep under way, whose
        progress is not the rebuild's); false once it emptied the index, and through its retries."""
        with self._progress:
            return self._rebuild_ticket > max(self.asked_done, self._rebuild_begun)

    def sweep_roots(self, names: list[str]) -> None:
        """Roots whose retry or poll is due; skipped while other work waits (it sweeps them too)."""
        if names and self.jobs.empty():
            self.jobs.put(Job(roots=frozenset(names)))

    def run(self) -> None:
        # Chunk sizes are counted with the model's tokenizer; the indexer reads and parses notes
        # while it loads and waits for it only to cut them (Indexer._count_tokens).
        failures = 0
        while not self.stop.is_set():
            self.beat(None)
            self.indexer.summary.flush()
            if self._links_due():
                failures, moved = self._reread_links(failures)
                if moved:
                    continue
                # No batch moved on (a read that hangs): wait for the next job as when nothing
                # is due, never round again at once (that loop wrote the manifest thousands of
                # times a second).
            job = self._next()
            if job is None:
                continue
            try:
                self._run(job)
                failures, self._last_crash = 0, ""
            except Exception as exc:  # e.g. sqlite "disk is full": keep serving, retry soon
                failures += 1
                self._failed(job, exc, self.retry.delay(failures))
        self.indexer.summary.flush(final=True)

    def _links_due(self) -> bool:
        """Whether a batch of the link pass runs now: after a start's first sweep, while no
        sweep is asked for (a sweep waits a batch at most) and no root is away."""
        indexer = self.indexer
        return (
            indexer.links_due()
            and indexer.activity.first_sweep_done
            and self.jobs.empty()
            and self.hot.wait(1.0) > 0  # no held note due now
            and self.indexer.changes.bursts.next_in(1.0) > 0  # no deletions due to be judged now
        )

    def _reread_links(self, failures: int) -> tuple[int, bool]:
        """One batch of the link pass; a failure (disk full) is retried as a sweep's is. The
        failures counted, and whether the pass moved on."""
        mark = self.problems.mark()
        try:
            moved = self.indexer.reread_links()
        except Exception as exc:
            failures += 1
            delay = self.retry.delay(failures)
            log.error("links_reread_failed error=%s retry_in=%.0fs", exc, delay)
            self.problems.report("index", f"reading links again failed: {exc} (retrying in {delay:.0f} s)")
            self.stop.wait(delay)
            return failures, True
        if failures:
            self.problems.clear("index", since=mark)
        return 0, moved

    def _next(self) -> Job | None:
        """The next sweep: the queued requests (a burst merged into one) without the events of
        hot notes, which are held; held notes whose time came once nothing else waits (or once
        they are late by ``HOT_MAX_S``: a stream of other edits must not hold them for good)."""
        bursts = self.indexer.changes.bursts
        try:
            job = self.jobs.get(timeout=bursts.next_in(self.hot.wait(0.5)))
        except queue.Empty:
            return self._due()
        merged = [job]
        while not self.jobs.empty():  # coalesce a burst of requests into one sweep
            merged.append(self.jobs.get_nowait())
            job = job.merge(merged[-1])
        judge = bursts.due()  # roots whose deletions waited for quiet: listed whole now
        if judge:
            job = job.merge(Job(roots=frozenset(judge)))
        if job.paths:
            job = replace(job, paths=self.hot.hold(job.paths))
        if job.roots == frozenset() and not (job.paths or job.rebuild or job.confirm):
            return self._due() if self.jobs.empty() else None  # only held events
        late = self.hot.due(late=HOT_MAX_S)
        if late:
            merged.append(Job(roots=frozenset(), paths=late, told=True))
            job = job.merge(merged[-1])
        if job.audit:
            # The events merged in are told for this sweep's check: a check that ran while they
            # waited (the sweep before, whose listing came before them) had let go of them.
            self._told(p for j in merged if j.told for p in j.paths)
        return job

    def _due(self) -> Job | None:
        """Held notes whose time came, and (nothing else waits here) those whose file settled; roots
        whose deletions waited for their events to go quiet (a full sweep of each judges them)."""
        due = self.hot.due() | self.hot.settled()
        judge = frozenset(self.indexer.changes.bursts.due())
        if not (due or judge):
            return None
        return Job(roots=judge, paths=due)

    def _run(self, job: Job) -> None:
        indexer = self.indexer
        # A refusal said before this sweep: its cause may be gone by its end (not one said now,
        # which `index --rebuild` is to report: its own sweep drops a refused inbox's notes).
        refused_before, refused_now = self._refused_for is not None, False
        if job.rebuild:
            try:
                # The request's check again: since it, a share may have gone offline, a folder
                # become unreadable or a mass deletion been held (by the sweep it waited behind);
                # the rebuild would then run against what it cannot read or drop held notes.
                indexer.refuse_rebuild(job.confirm)
                indexer.clear(lambda: self._begun(job.ticket))
            except (StorageError, UnreadableError) as exc:
                # Nothing was emptied (no room for the rebuild's copy: the disk filled since the
                # request's check; a share offline, an unreadable folder or a hold). Said, and the
                # sweep runs without the rebuild (retried as a failed sweep, it failed every few
                # seconds, and every sweep merged into it). A clear that failed after the manifest
                # was emptied raises other errors: the rebuild has begun then (``_begun``), and is
                # retried as its sweep.
                log.error("rebuild_refused error=%s", exc)
                self.problems.report(REBUILD_AREA, str(exc), subject=REFUSED)
                self._refused_for = job.confirm if isinstance(exc, UnreadableError) else None
                self._refusal_checks = 0
                refused_now = True
                job = replace(job, rebuild=False)
        audit = job.audit and not job.paths and indexer.activity.first_sweep_done
        began = time.time()
        mark = self.problems.mark()
        with self._progress:
            self._running = job
        try:
            summary = indexer.sweep(
                only=job.roots,
                stop=self.stop,
                confirm_deletions=job.confirm,
                progress=self.beat,
                paths=job.paths,
                retry_all=job.asked,
            )
        finally:
            self._swept()
        if job.ticket and not (self.stop.is_set() or self.indexer.leftover is not None):
            with self._progress:  # a sweep cut short is none: the retry carries the ticket
                self.asked_done = max(self.asked_done, job.ticket)
        if summary.get("changed", 0) > 100:
            heap.trim()  # parsing a large batch leaves freed pages behind
        self.problems.clear("index", since=mark)
        if job.restarted and job.roots is None and self._lost:
            self._lost = False
            log.info("watch_caught_up changed=%d", summary.get("changed", 0))
            self.problems.clear(LOST_AREA)
        if audit:
            self._check_lost(began)
        if (
            refused_before
            and not refused_now
            and self._refused_for is not None
            and job.roots is None
            and not job.paths
            and not self.stop.is_set()
        ):
            self._refusal_passed(self._refused_for)

    def _refusal_passed(self, confirm: frozenset[str]) -> None:
        """A rebuild refused at its turn for a cause that passes: once a whole sweep leaves none
        of it (the request's check passes now: the share back, the folders read), the refusal
        leaves the PROBLEM lines (was: said until a rebuild ran or a restart, its cause gone);
        kept under Recovered, as the rebuild still is to be asked again. A disk without room
        for the rebuild's copy stays said until then (no sweep frees it). The check opens no
        note (what the sweep just recorded stands: a hung share held the index thread each
        time) and asks no root judged away; a failing one says its cause now. Checked for
        about REFUSAL_CHECK_HOURS of whole sweeps, then no more: under Recovered, not run."""
        self._refusal_checks += 1
        try:
            self.indexer.refuse_rebuild(confirm, recorded=True)
        except (StorageError, UnreadableError) as exc:
            said = self.problems.active_in(REBUILD_AREA, subject=REFUSED)
            if said is None:
                self._refused_for = None  # cleared meanwhile (a rebuild began)
                return
            if said["error"] != str(exc):  # another cause replaced it: the one to act on now
                self.problems.report(REBUILD_AREA, str(exc), subject=REFUSED)
            most = max(1, int(REFUSAL_CHECK_HOURS * 60 / self.cfg.index.rescan_minutes))
            if self._refusal_checks < most:
                return
            self._refused_for = None
            log.info("rebuild_refusal_dropped checks=%d reason=no longer checked, ask it again", most)
            self.problems.report(
                REBUILD_AREA,
                f"{exc} The rebuild was not run and is no longer checked: ask it again.",
                subject=REFUSED,
            )
            self.problems.clear(REBUILD_AREA, subject=REFUSED)
            return
        self._refused_for = None
        log.info("rebuild_refusal_passed reason=its cause is gone; ask the rebuild again")
        self.problems.clear(REBUILD_AREA, subject=REFUSED)

    def _begun(self, ticket: int) -> None:
        """A rebuild emptied the index (its copy kept): it runs, and a retry reads on."""
        with self._progress:
            self._rebuild_begun = max(self._rebuild_begun, ticket)
        self._refused_for = None
        self.problems.clear(REBUILD_AREA, subject=REFUSED)  # an earlier refusal: this one runs

    def _swept(self) -> None:
        """A sweep ended: its notes count as applied while more changes wait (the catch-up goes
        on); with none queued it is over, and the next change begins a new one (held events of a
        hot note are none: a note saved over and over would keep one catch-up going for good)."""
        with self._progress:
            act = self.indexer.activity
            self._applied += act.done if act.phase != "scanning" else 0
            self._running = None
            with self.jobs.mutex:
                queued = [p for job in self.jobs.queue for p in job.paths]
            if (
                not self._notes_of(queued, self.hot.quiet(queued))
                and not self.indexer.changes.bursts.waiting()
            ):
                self._applied = 0

    def _check_lost(self, began: float) -> None:
        """After a scheduled or asked-for sweep: notes it found new or changed in a folder the
        watch covers, that no file event told and not changed just now, mean events were lost
        (the kernel's queue overflowed in a burst: watchfiles passes no sign of it on) and a
        folder made then may have no watch at all: the watch is built again and a sweep follows."""
        reported, self._reported = self._reported, set()
        if len(reported) >= _REPORTED_MAX or self.on_lost is None:
            return
        tops = [w.rstrip("/") + "/" for w in self.watched()]
        before = int((began - _IN_FLIGHT_S) * 1e9)
        held = self.hot.held()
        missed = [
            path
            for path, mtime_ns in self.indexer.found_by_listing
            if mtime_ns < before
            and path not in held
            and any(path.startswith(t) for t in tops)
            and not _told(path, reported)
        ]
        if not missed:
            return
        why = f"a sweep found notes no file event told ({len(missed)}, e.g. {missed[0]})"
        self._lost = True
        self.problems.report(
            LOST_AREA,
            f"file events were lost: {why}; the watch is started again and a full sweep catches up",
        )
        self.on_lost(why)

    def _failed(self, job: Job, exc: Exception, delay: float) -> None:
        if isinstance(exc, (StoreError, OSError, sqlite3.Error)):
            why = fault_words(exc, self.indexer.stores.manifest.path)
            log.error(
                "sweep_failed error=%s retry_in=%.0fs", why if why == str(exc) else f"{why} ({exc})", delay
            )
        else:  # unexpected: keep the traceback, once per kind (retried every few seconds, the
            # same 25-line traceback filled the journal at 24,000 lines an hour)
            why = f"{type(exc).__name__}: {exc}"
            again = why == self._last_crash
            self._last_crash = why
            log.error(
                "sweep_crashed error=%s retry_in=%.0fs%s",
                why,
                delay,
                " (as before)" if again else "",
                exc_info=None if again else exc,
            )
        self.problems.report("index", f"updating the index failed: {why} (retrying in {delay:.0f} s)")
        self.stop.wait(delay)
        with self._progress:
            emptied = job.rebuild and 0 < job.ticket <= self._rebuild_begun
        if emptied:
            # The rebuild emptied the index and keeps its copy: the retry reads on (emptied again,
            # the notes read meanwhile were read once more, and on a disk without room for the
            # second copy the rebuild ended as refused, half done, saying nothing was changed).
            job = replace(job, rebuild=False)
        leftover = self.indexer.leftover
        # The first sweep is retried whole (its unchanged notes cost a stat): finished as a list of
        # leftover paths, it never counted as done, and status said "building" until the next
        # scheduled sweep.
        if leftover is not None and not job.rebuild and self.indexer.activity.first_sweep_done:
            # Roots handed over to be judged and not judged yet are swept again with it: as paths
            # only, they said "waiting" until the next scheduled sweep.
            judge = self.indexer.changes.bursts.judging()
            job = Job(roots=judge, confirm=job.confirm, paths=leftover, ticket=job.ticket)
        self.jobs.put(job)


def _told(path: str, reported: set[str]) -> bool:
    """Whether a file event named ``path`` or a folder it lies in (a new folder is walked)."""
    while True:
        if path in reported:
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
