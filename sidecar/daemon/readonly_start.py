"""The read-only start, a mixin of ``Daemon``: when the index's disk is full the stores cannot be
opened for writing, so the daemon serves search, recall and get from the index opened for reading
only and refuses what writes (``readonly.ReadOnly``); a thread watches the disk and, once it has
room, switches to writable (the stores opened anew, the normal work started by ``lifecycle``),
read-only again when that fails. Its own module because it is a second way to start beside
``lifecycle``'s normal one; the state it works on is the daemon's own, made in ``Daemon.__init__``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sidecar.config import Config
from sidecar.contracts.errors import (
    DiskFullError,
    PermissionDeniedError,
    SidecarError,
    StoreError,
    StoreNewerError,
    is_permission_denied,
    says_damage,
)
from sidecar.contracts.protocol import Request
from sidecar.daemon.compose import Dispatcher, Parts, build_handlers, build_read_only
from sidecar.daemon.handlers import Handlers, ServiceState
from sidecar.daemon.process import IndexLock
from sidecar.daemon.readonly import (
    Dispatch,
    InboxOnly,
    ReadOnly,
    Refusing,
    SwitchingHealth,
    folder_looks,
    unreadable_words,
)
from sidecar.daemon.reloading import RELOAD_WAITS
from sidecar.daemon.watchdog import Watchdog
from sidecar.memory.counting import BoundedCounts
from sidecar.memory.inbox import Inboxes
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime.notify import Notifier
from sidecar.search.retrieval import Retriever
from sidecar.stores.frozen import FrozenShmError
from sidecar.stores.space import disk_full_at

log = logging.getLogger(__name__)

# How long a thread of a failed switch may keep the next switch waiting before status says to
# restart: only a restart ends a thread stuck for good (a read of a hard-hung share, a native call).
_CLOSING_STUCK_S = 180.0


class ReadOnlyStart:
    """The read-only start of a ``Daemon`` (which sets the state below) and its switch to writable."""

    cfg: Config
    stop: threading.Event
    started: float
    started_steady: float
    watchdog: Watchdog
    notifier: Notifier
    _kept: Parts | None
    _refusal: ReadOnly | None
    _inbox_only: InboxOnly | None
    _read_only: bool
    _read_only_parts: Parts | None
    _reload_waits: bool
    _reload_lock: threading.Lock
    _counts: BoundedCounts
    _retriever: Retriever | None
    _dispatch: Dispatch | None
    _switching: threading.Lock
    _closing: threading.Thread | None
    _lock: IndexLock | None
    _closing_for: tuple[list[str], float]
    _said_closing: bool
    _said_stuck: bool
    _said_read_only: str | None
    _said_still: str | None
    _said_refused: str | None

    if TYPE_CHECKING:  # the daemon's own (``Daemon``, ``ConfigReload``)

        def _start_parts(self) -> Handlers: ...

        def _start_thread(self, name: str, target: Callable[[], None]) -> None: ...

        def reload(self) -> dict[str, Any]: ...

        def _carry_waiting_reload(self) -> None: ...

        def _reload_quietly(self) -> None: ...

    def _start_read_only(self, full: DiskFullError | PermissionDeniedError) -> Dispatcher:
        """The stores cannot be opened for writing because the index's disk is full, or this
        process may not write its folder (``PermissionDeniedError``: a mode, an immutable file, a
        share's rights): serve search, recall and get from the index as it is, opened for reading
        only, and refuse what writes (``ReadOnly``); a thread watches the disk and starts the
        daemon's normal work once it may be written (``_wait_for_space``). ``full`` is raised
        again when the index cannot be read that way (the daemon exits 5, as before), unless
        that too is for want of permission (a folder or a file of the index this user may not
        read, an immutable keyword index Tantivy cannot lock): the daemon then serves, refusing
        every request with that permission denied and what to do, and starts by itself once the
        index may be written (a restart would change nothing; exiting 5 left no word in status)."""
        self._read_only = True
        failed = str(full) if isinstance(full, PermissionDeniedError) else None
        handlers: Dispatcher
        try:
            handlers = self._read_only_handlers(failed)
        except StoreNewerError:
            raise  # a newer version's index: refused (exit 3) whatever the disk's space
        except (StoreError, sqlite3.Error, OSError) as exc:
            log.error("index_read_only_refused error=%s", exc)
            if says_damage(exc) or not (is_permission_denied(exc) or is_permission_denied(full)):
                raise full from exc
            handlers = self._refusing(unreadable_words(exc))
        self._start_thread("space-watch", self._wait_for_space)
        return handlers

    def _refusing(self, why: str) -> Refusing:
        """Every request refused with ``why``, but memory writes saved where the inbox may be
        written (``Refusing``)."""
        cfg = self.cfg
        if self._inbox_only is None:  # one for the daemon's life (its note locks, its problems)
            # One stuck thread per inbox (its list's or room check's) and one for the agents folder.
            looks = folder_looks(cfg, self.stop)
            rule = ReadOnly(cfg.index_dir, cfg.index_dir / "manifest.sqlite", cfg.agents_dir, looks)
            self._inbox_only = InboxOnly(cfg, rule.inboxes_writable, self.started, looks)
        return Refusing(why, self._inbox_only)

    def _read_only_handlers(self, failed: str | None = None) -> Handlers:
        """The handlers over the index opened read-only, refusing what writes; ``failed``: why the
        last switch to writable failed, when it was not the disk's space."""
        cfg = self.cfg
        # A slot of its own: the daemon's stays fresh for the resume, whose indexer waits for the
        # model's tokenizer (a "failed" slot let its catch-up sweep cut notes by a word estimate).
        slot = EmbedderSlot()
        if cfg.embedder.enabled:
            slot.set_failed("not loaded while the index cannot be written (keyword search meanwhile)")
        else:
            slot.set_failed("disabled by configuration (embedder.enabled: false)", state="off")
        kept, self._kept = self._kept, None
        parts = kept if kept is not None else build_read_only(cfg, slot)
        try:
            self._read_only_parts = parts
            parts.indexer.activity.first_sweep_done = True  # the index as it was: nothing is read now
            # The earlier read-only spell's looks: a thread it left in a hung share is still known.
            looks = self._refusal.looks if self._refusal is not None else folder_looks(cfg, self.stop)
            manifest_path = parts.stores.manifest.path
            refusal = self._refusal = ReadOnly(cfg.index_dir, manifest_path, cfg.agents_dir, looks)
            refusal.failed = failed
            refusal.waiting = self._switch_waits
            manifest = parts.stores.manifest
            refusal.needs = 0 if manifest.read_only else manifest.write_back_needs()
            # Kept writable stores: a memory write would go through their writable indexer, onto
            # the full disk (and wait a minute for a tokenizer never loaded): refused instead.
            refusal.kept = kept is not None
            parts.problems.report("index", refusal.message(), since=refusal.since)
            if self._reload_waits:  # the problems of a failed switch's parts are new ones
                parts.problems.report("config", RELOAD_WAITS)
            self._log_read_only(refusal)
            service = ServiceState(self.started, lambda: 0, lambda *_a: None, list, self.reload)
            service.started_steady = self.started_steady
            inboxes = Inboxes(cfg, home=parts.supervisor.home, clock=parts.clock)
            handlers = build_handlers(cfg, parts, slot, service, inboxes, counts=self._counts)
            self._retriever = handlers.retriever
            refusal.wrap(handlers, parts.problems)
        except BaseException:
            # A state the next try starts from: kept stores stay kept (the only connection that
            # reads their write-ahead log), read-only ones are closed.
            self._read_only_parts = None
            if kept is not None:
                self._kept = kept
            else:
                with contextlib.suppress(Exception):
                    parts.stores.close()
            raise
        return handlers

    def _log_read_only(self, refusal: ReadOnly) -> None:
        """``index_read_only`` at ERROR once per reason, not at every failed switch."""
        reason = refusal.reason()
        level = logging.ERROR if reason != self._said_read_only else logging.DEBUG
        self._said_read_only = reason
        log.log(level, "index_read_only %s", refusal.message())

    def _wait_for_space(self) -> None:
        """Ask the disk (statvfs, then a small written probe) with growing waits (1 s doubling up
        to ``watch.faultRetryMaxSeconds``, and below the systemd watchdog's interval: this thread
        feeds it meanwhile; jittered); once it has room, start the normal work (its first sweep
        catches up) and hand the socket's requests to it."""
        cap = min(self.cfg.watch.fault_retry_max_seconds, self._feed_every())
        wait = min(1.0, cap)
        while not self.stop.wait(wait * random.uniform(0.8, 1.2)):
            wait = min(wait * 2, cap)
            try:
                if self._space_check():
                    log.warning("index_writable_again the disk has room: indexing resumes (catch-up sweep)")
                    break
            except Exception:  # an unforeseen failure ended this thread: read-only (or refusing) for good
                log.exception("space_check_failed (tried again at the next check)")
        else:
            return  # the daemon stops
        self._writable_now()

    def _writable_now(self) -> None:
        """After the switch: reloads are applied again, and one asked while read-only (its
        settings already carried into the parts) is answered: what changed, what needs a
        restart, or why the file was refused."""
        with self._reload_lock:
            self._read_only = False
            waits, self._reload_waits = self._reload_waits, False
        if self._lock is not None:
            # A lock taken on an immutable index could not write its file, which still named the
            # daemon before this one (status, a second serve): it names this one now.
            self._lock.rewrite()
        if waits:
            log.info("config_reload_applied_now reason=asked while the index was read-only")
            try:
                self._reload_quietly()
            except Exception:  # the daemon runs on with the settings carried
                log.exception("reload_failed after the switch to writable")

    def _space_check(self) -> bool:
        """One check of the disk: whether the daemon is writable now."""
        self._feed_watchdog()
        self._note_stuck()
        if disk_full_at(self.cfg.index_dir):
            with self._unless_stopped() as going_on:
                if going_on:
                    self._still_full()
            return False
        return self._switch_to_writable()

    def _still_full(self) -> None:
        ro, refusal = self._read_only_parts, self._refusal
        if ro is None and self._dispatch is not None:  # a failed switch left it unreadable
            self._dispatch.release(self._read_only_again())
        elif ro is not None and refusal is not None:
            refusal.failed = None  # the disk is full (again): that is the reason now
            ro.problems.report("index", refusal.message(), since=refusal.since)

    @contextlib.contextmanager
    def _unless_stopped(self) -> Iterator[bool]:
        """Whether the block may open stores: the daemon does not stop, and a stop waits for the
        block (``_switching``) before it closes the stores and releases the index lock. A switch
        that went on after a stop opened stores with the lock released and re-armed the requests."""
        if not self._switching.acquire(blocking=False):
            yield False
            return
        try:
            yield not self.stop.is_set()
        finally:
            self._switching.release()

    def _feed_every(self) -> float:
        """How often the read-only daemon's own threads feed systemd's watchdog (seconds)."""
        usec = self.cfg.watchdog_usec
        return min(5.0, usec / 1e6 / 4) if usec else 5.0

    def _feed_watchdog(self) -> None:
        self.watchdog.indexer_alive()
        if self.notifier.enabled:
            self.watchdog.notify(lambda: "read-only: the disk holding the index is full")

    def _switch_to_writable(self) -> bool:
        """Open the stores for writing and hand the requests to the normal handlers; False (read-only
        again) when that fails. An immutable SQLite reader reads garbage once a writer changes the
        file (the writable open may vacuum and checkpoint it), and the read-only keyword readers
        keep the segments a merge deletes: both are closed before the writable open, with the
        requests held meanwhile (none reads through them then; health answers from a snapshot)."""
        dispatch = self._dispatch
        if dispatch is None:  # the space check began before the server was built: the next tick
            return False
        with self._unless_stopped() as going_on:
            if not going_on or self._still_closing() or self._write_back_waits():
                return False
            if not dispatch.hold(interim=self._switching_health(dispatch)):
                log.warning(
                    "index_switch_deferred reason=a request on the read-only index did not end; tried again"
                )
                return False
            try:
                self._close_read_only()  # kept writable stores (``_let_go``) write back at close
                self._carry_waiting_reload()
                with self._watchdog_fed():  # finishing an interrupted batch or a re-cut can take minutes
                    handlers = self._start_parts()
            except Exception as exc:  # tried again at the next tick
                if self.stop.is_set():
                    return False  # the stop (waiting for this) closes what is open
                # Any failure: one of another type (no thread could be started) killed the space
                # check with every request held for good.
                name = "index_read_only_still" if isinstance(exc, DiskFullError) else "index_writable_failed"
                said = f"{name} error={exc}"
                log.log(
                    logging.WARNING if said != self._said_still else logging.DEBUG,
                    "%s; serving read-only",
                    said,
                )
                self._said_still = said
                failed = None if isinstance(exc, DiskFullError) else str(exc)
                again: Dispatcher = self._refusing("the index cannot be read now; the daemon tries again")
                try:
                    again = self._read_only_again(failed)
                finally:  # never left held: every request waited and was refused, for good
                    dispatch.release(again)
                return False
            dispatch.release(handlers)  # a no-op once the daemon stops: it refuses from then on
            self._said_read_only = self._said_still = self._said_refused = None
            return True

    def _still_closing(self) -> bool:
        """Whether a thread of the last failed switch still runs on its stores (said once): a
        writable open beside them would be a second writer of the same files."""
        closing = self._closing
        if closing is None or not closing.is_alive():
            self._said_closing = False
            return False
        if not self._said_closing:
            log.warning(
                "index_switch_deferred reason=a thread of the failed switch still runs; "
                "tried again once it ends"
            )
        self._said_closing = True
        self._report_read_only()  # the disk has room: the waiting is the reason now
        return True

    def _switch_waits(self) -> str | None:
        """Why the switch to writable waits for a thread of a failed one, or None (``ReadOnly``)."""
        closing = self._closing
        if closing is None or not closing.is_alive():
            return None
        names, since = self._closing_for
        waited = time.monotonic() - since
        text = (
            f"a thread of a previous attempt to switch to writable ({', '.join(names) or 'switch'}) "
            "is still running, and the switch waits for it to end"
        )
        if waited >= _CLOSING_STUCK_S:
            return f"{text} (for {waited / 60:.0f} min; restart the daemon: only a restart ends it)"
        return f"{text} (restart the daemon if this lasts)"

    def _note_stuck(self) -> None:
        """Past ``_CLOSING_STUCK_S`` a thread of a failed switch that still runs is a problem of
        its own in status, with the restart it needs (logged once: ``index_switch_stuck``)."""
        waits, ro = self._switch_waits(), self._read_only_parts
        stuck = waits is not None and time.monotonic() - self._closing_for[1] >= _CLOSING_STUCK_S
        if stuck and not self._said_stuck:
            log.error("index_switch_stuck threads=%s; restart the daemon", ",".join(self._closing_for[0]))
        self._said_stuck = stuck
        if ro is not None:
            if stuck and waits is not None:  # status: "PROBLEM (restart needed): …"
                ro.problems.report("restart", waits, subject="switch")
            else:
                ro.problems.clear("restart", subject="switch")

    def _write_back_waits(self) -> bool:
        """Whether kept writable stores' log cannot be written back yet (too little room): the
        switch is not tried (it held the requests and rebuilt the read-only handlers only to
        fail), and status says how much space it needs."""
        parts, refusal = self._read_only_parts, self._refusal
        if parts is None or refusal is None or parts.stores.manifest.read_only:
            return False
        refusal.needs = parts.stores.manifest.write_back_needs()
        self._report_read_only()
        return refusal.needs > 0

    def _report_read_only(self) -> None:
        """The index's problem said anew (the reason or the free space changed)."""
        ro, refusal = self._read_only_parts, self._refusal
        if ro is not None and refusal is not None:
            ro.problems.report("index", refusal.message(), since=refusal.since)

    def _switching_health(self, dispatch: Dispatch) -> SwitchingHealth | None:
        """What answers health during the switch: the read-only handlers' last answer with the
        switch as the index's problem (``sidecar status`` gave up after 10 s of a held health)."""
        try:
            health = dispatch.dispatch(Request("health"))
        except (SidecarError, sqlite3.Error, OSError) as exc:
            log.debug("switch_health_snapshot_failed error=%s", exc)
            return None
        return SwitchingHealth(health)

    def _read_only_again(self, failed: str | None = None) -> Handlers | Refusing:
        """The read-only handlers after a failed switch (the index opened anew: what the failed
        writable open wrote is read), or a refusal of every request until the next try."""
        try:
            return self._read_only_handlers(failed)
        except Exception as exc:  # any kind: one outside these ended the space check (retried)
            if not isinstance(exc, (StoreError, sqlite3.Error, OSError)):
                log.exception("index_read_only_failed")
            # At ERROR once per error, not at each try (every few seconds while it lasts).
            level = logging.ERROR if str(exc) != self._said_refused else logging.DEBUG
            self._said_refused = str(exc)
            log.log(level, "index_read_only_refused error=%s (requests are refused until the next try)", exc)
            if is_permission_denied(exc) and not says_damage(exc):
                return self._refusing(unreadable_words(exc))
            return self._refusing(f"the index cannot be read now ({exc}); the daemon tries again")

    def _close_read_only(self) -> None:
        """Close the read-only stores before the writable open; kept writable ones (``_let_go``)
        only once their write-ahead log is written back into the file (DiskFullError, and they
        stay kept, if not: closed without it, the read-only open refused that log and every
        request was refused until more space than the log's size was freed)."""
        parts, self._read_only_parts = self._read_only_parts, None
        if parts is None:
            parts, self._kept = self._kept, None  # a failed reopen left them kept
        if parts is None:
            return
        manifest = parts.stores.manifest
        try:
            back = manifest.read_only or manifest.written_back()
        except FrozenShmError:  # not the disk's space: the immutable -shm, said in its own words
            self._kept = parts
            raise
        if not back:
            self._kept = parts
            raise DiskFullError(
                f"the write-ahead log of {manifest.path} cannot be written back into the file yet "
                "(not enough space)"
            )
        parts.stores.close()
        # The read-only handlers form a cycle (``ReadOnly.wrap``): collected now, their Tantivy
        # readers unmap the segments (the space of those a merge deletes returns at once).
        gc.collect()

    @contextlib.contextmanager
    def _watchdog_fed(self) -> Iterator[None]:
        """Keep systemd's watchdog fed from another thread while the block runs (the scheduler,
        which feeds it normally, starts only at the block's end)."""
        done = threading.Event()

        def feed() -> None:
            while not done.wait(self._feed_every()):
                self._feed_watchdog()

        feeder = threading.Thread(target=feed, name="watchdog-feed", daemon=True)
        feeder.start()
        try:
            yield
        finally:
            done.set()
            feeder.join()
