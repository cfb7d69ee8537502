"""The daemon: startup -> serve -> shutdown (`sidecar index` when no daemon runs: ``oneshot``).

startup: lock the index, bind the socket, build the parts (the composition root), finish
interrupted deletions, start the model loader, the indexer thread (first sweep, then scheduled
sweeps), the vector backfill, the watcher and the scheduler. serve: the socket server until
SIGTERM/SIGINT (SIGHUP reloads the configuration, or stops a daemon run in a terminal: the
terminal closing sends it; the reload itself: ``reloading``); the signal handlers are removed
again when it returns. shutdown: stop the threads with a bound, flush the stores, then (even if
that failed) remove the socket and release the lock. A start with the index's disk full serves
read-only until there is room, then switches to writable: ``readonly_start``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sidecar.config import Config
from sidecar.contracts.errors import (
    DaemonRunningError,
    DiskFullError,
    ExitCode,
    PermissionDeniedError,
    SharedSocketError,
    StorageError,
    StoreError,
    StoresClosedError,
    foreign_socket,
    shared_socket,
)
from sidecar.daemon.backfill import Backfill
from sidecar.daemon.compose import (
    Dispatcher,
    Parts,
    build,
    build_handlers,
    build_server,
    build_watcher,
)
from sidecar.daemon.handlers import Handlers, ServiceState
from sidecar.daemon.indexing import IndexLoop
from sidecar.daemon.process import (
    START_USEC,
    WAIT_EXTEND_USEC,
    IndexLock,
    load_embedder,
    lock_waiting_for_index_run,
    make_private,
    raise_fd_limit,
    record_counting,
)
from sidecar.daemon.readonly import Dispatch, InboxOnly, ReadOnly, Stopping
from sidecar.daemon.readonly_start import ReadOnlyStart
from sidecar.daemon.reloading import ConfigReload, ModelRetries
from sidecar.daemon.repairs import RepairPolicy
from sidecar.daemon.schedule import Schedule, build_scheduler
from sidecar.daemon.server import Server, StopClock, bind_socket, holder_health
from sidecar.daemon.watchdog import Watchdog, status_line
from sidecar.index.migration import serving_model
from sidecar.index.vectoring import Stores
from sidecar.memory.counting import BoundedCounts
from sidecar.memory.inbox import Inboxes
from sidecar.model import prepared
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime import lockstate
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.lockstate import SERVING, STARTING, STOPPED, STOPPING
from sidecar.runtime.notify import Notifier, under_service_manager
from sidecar.runtime.peer import socket_peer
from sidecar.runtime.release import build_id
from sidecar.search.retrieval import Retriever
from sidecar.search.wordlist import warm as warm_word_list
from sidecar.stores.aside import remove_old_moved_aside
from sidecar.stores.frozen import FrozenShmError
from sidecar.stores.space import disk_full_at
from sidecar.stores.vectors import warm as warm_vector_library
from sidecar.vault.homeguard import HomeGuard, held
from sidecar.vault.sources import Root
from sidecar.vault.timeout import folder_look
from sidecar.vault.watcher import Watcher

# The errors of a home that may become usable by itself (a share not mounted yet: the bare
# mount point refuses, or the path is not there; a stale or lost share), waited for under
# systemd; any other (a read-only home, a file where a folder belongs) exits 5 at once.
HOME_MAY_COME = frozenset(
    {errno.EACCES, errno.ENOENT, errno.ESTALE, errno.ENOTCONN, errno.EHOSTDOWN, errno.ETIMEDOUT, errno.EIO}
)
HOME_POLL_S = 2.0
# The wait ends after this long with exit 5, and the unit restarts it 10 s later: it waits in
# rounds of this length until the home can be used or it is stopped (a start this long never
# reaches the start limit). One round: `systemctl start` (a notify unit's start waits for READY)
# returns after it, not hung for good on a permission mistake.
HOME_WAIT_MOST_S = 600.0
# How often the home of a daemon answering on the socket is asked again where the platform names
# no pid (the holder may have changed unseen).
HOLDER_ASK_S = 60.0

log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 10.0
# How long the stop waits for the watcher while a call on a share is known to hang.
_HUNG_JOIN_S = 1.0


class _StopAsked(BaseException):
    """A SIGTERM during the start (``Daemon._stop_in_start``); a BaseException, as KeyboardInterrupt
    is, so that no ``except Exception`` of the start takes it for a failure of its own."""


class Daemon(ConfigReload, ReadOnlyStart):
    """One daemon per index: ``run`` = startup, serve until a signal, shutdown."""

    def __init__(
        self,
        cfg: Config,
        reload_config: Callable[[], Config] | None = None,
        *,
        hangup_stops: bool = False,
    ) -> None:
        self.cfg = cfg
        # The build of the code this process imported, read from the files now: asked first later
        # (after a wait of hours for another daemon, a slow start), it digested the files an
        # upgrade had put there meanwhile, and the daemon running the old code called itself new.
        build_id()
        self.reload_config = reload_config
        # In a terminal SIGHUP means the terminal went away (a daemon that took it as a reload
        # outlived its closed window and held the index against the next start); a service
        # manager sends it to reload (systemd's ExecReload), as `sidecar reload` asks by socket.
        self.hangup_stops = hangup_stops
        self.notifier = Notifier(cfg.notify_socket)
        self.watchdog = Watchdog(cfg, self.notifier)
        self.stop = threading.Event()
        self.slot = EmbedderSlot()
        self.started = time.time()
        self.started_steady = time.monotonic()  # the uptime's (see ServiceState)
        self._threads: list[threading.Thread] = []
        # The start's look at the vault that did not answer (its thread still in the stat, and
        # since when): the supervisor built next marks the vault hanging by it.
        self._start_hung: tuple[threading.Thread, float] | None = None
        self._lock: IndexLock | None = None
        self._listener: Any = None
        self._scheduler: Schedule | None = None
        self._retriever: Retriever | None = None
        self.parts: Parts | None = None
        self._read_only_parts: Parts | None = None  # serving while the index's disk is full
        # A failed start's writable stores, kept for the read-only handlers when their commits could
        # not be written back into the manifest's file (``_let_go``).
        self._kept: Parts | None = None
        self._refusal: ReadOnly | None = None
        # Serving read-only since the start (its disk full) until the switch to writable is over.
        self._read_only = False
        # A reload asked meanwhile: its file's reloadable settings are carried into the
        # configuration the switch builds the parts from (built from the start's, they undid it),
        # then the reload is answered in the log and status as any other.
        self._reload_waits = False
        self._read_stamp: tuple[int, int, int] | None = None  # the file as the last reload read it
        self._recheck: tuple[tuple[int, int, int] | None, float] | None = None  # (stamp, until)
        # Held by a switch to writable (and a read-only reopen): the stop waits for it before it
        # closes the stores and releases the index lock.
        self._switching = threading.Lock()
        # The threads of the writable parts stop on it (and on a stop): a switch that fails after
        # starting them stops them without stopping the daemon.
        self._work_stop = threading.Event()
        # Closes the stores of a failed switch once its threads still running end (``_close_after``).
        self._closing: threading.Thread | None = None
        self._closing_for: tuple[list[str], float] = ([], 0.0)  # its threads' names, since (monotonic)
        self._said_closing = self._said_stuck = False
        # The read-only state last logged at ERROR/WARNING (a failed switch is tried every few
        # seconds: each try logged both again); None once writable.
        self._said_read_only: str | None = None
        self._said_still: str | None = None
        self._said_refused: str | None = None  # the last index_read_only_refused logged at ERROR
        self._dispatch: Dispatch | None = None
        self._inboxes: Inboxes | None = None
        # The inboxes of the cannot-read state (``_refusing``), one for the daemon's life.
        self._inbox_only: InboxOnly | None = None
        # health's inbox counts: one per daemon, not per handler build (a failed switch rebuilds
        # them every few seconds; each new one started one more stuck count and forgot the last).
        self._counts = BoundedCounts()
        self.loop: IndexLoop | None = None
        self.watcher: Watcher | None = None
        # Reloads one at a time, each reading the file inside: two SIGHUPs close together ran in
        # parallel threads and the one finishing last won, with an older file's values.
        self._reload_lock = threading.Lock()
        self._model_retries = ModelRetries()
        # A worker still ran (in native code) when the stop gave up waiting (``stuck``); the stop
        # kept the index lock past the stores' close, a vector write may still land: the process
        # exits at once after it (``lock_kept``, ``exiting``).
        self.stuck = self.lock_kept = False
        self.stopped = threading.Event()  # set once the stop closed the stores (``_close_stores``)
        self._exit: Callable[[int], Any] = exit_now  # a forced stop's (tests record it)
        self.stop_clock = StopClock()  # one deadline for every wait of the stop, the server's too
        self._said_stopping = False
        self._hangup_deferred = False  # a SIGHUP came before ``serve`` took it: reloaded then
        # A stop signal during the lock take is held (``_stop_waits``) until the daemon knows the
        # lock it took (``_stops_held_back``), except in a wait between tries (``_pausing``).
        # Plain flags: a handler that takes a lock (Event.set) can deadlock the thread it interrupts.
        self._stops_held = self._pausing = self._stop_waits = False
        self._sleep: Callable[[float], None] = time.sleep  # the wait for the home's (tests: a clock)
        self._clock: Callable[[], float] = time.monotonic
        self._asked_holder: tuple[str, float, dict[str, Any] | None] | None = None

    def run(self) -> None:
        """Serve until a signal; raises typed errors for the CLI to map to exit codes."""
        raise_fd_limit()
        self._defer_hangups()
        try:
            self._run()
        except _StopAsked:  # a stop asked before the start served: done as any stop (exit 0)
            log.info("daemon_stop_in_start a stop signal came before the daemon served")
            if not self.stopped.is_set():  # it came before the start's steps (``_run``'s finally)
                self._exit_on_second_signal()
                if self._lock is None:
                    self.stopped.set()  # nothing taken, nothing to close
                else:
                    self.shutdown()

    def _run(self) -> None:
        self._stop_in_start()
        make_private(self.cfg)
        send = self.notifier.send if self.notifier.enabled else None
        if send is None and under_service_manager(None):
            # A launchd agent has no notify socket: it waits as under systemd, said in its log
            # only (exiting 4, it was started again every 30 s, a line each time, for days).
            send = _unheard
        said = False
        waited_from = self._clock()
        while True:
            try:
                # The lock first: a refused start changes nothing. Under systemd a `sidecar
                # index` run or another daemon holding the index or socket is waited for (exit 4
                # is not restarted there).
                with self._stops_held_back():
                    self._lock = lock_waiting_for_index_run(
                        self.cfg, send, self._pause, check=self._socket_free, clock=self._clock
                    )
                self._make_agents_folder()  # the lock first: a second daemon records nothing
                break
            except OSError as exc:  # a read-only or immutable home, a file where a folder belongs
                where = exc.filename or self.cfg.home
                unusable = StoreError(
                    f"the home {self.cfg.home} cannot be used: {where}: {exc.strerror or exc} "
                    "(it must be a folder this user can write)"
                )
                if self._lock is not None:
                    self._lock.release()
                    self._lock = None
                if send is None or exc.errno not in HOME_MAY_COME:
                    raise unusable from exc
                if self._clock() - waited_from >= HOME_WAIT_MOST_S:
                    log.warning("home_wait_over seconds=%.0f", HOME_WAIT_MOST_S)
                    raise unusable from exc
            # Under systemd a home on a share not mounted yet (or a stale handle) is waited for
            # in the process: restarted (exit 5), the unit was left failed after 20 starts.
            if not said:
                log.warning("home_wait %s", unusable)
                said = True
            send(f"STATUS=waiting: {unusable}", f"EXTEND_TIMEOUT_USEC={WAIT_EXTEND_USEC}", "WATCHDOG=1")
            self._sleep(HOME_POLL_S)
        if said and send is not None:
            log.info("home_usable the home %s can be used now", self.cfg.home)
            send("STATUS=starting", f"EXTEND_TIMEOUT_USEC={START_USEC}", "WATCHDOG=1")
        try:
            server = self.startup()
            asyncio.run(self.serve(server))
        finally:
            self._exit_on_second_signal()
            self.shutdown()

    def _defer_hangups(self) -> None:
        """A SIGHUP before ``serve`` takes it (a reload while the start waits for an index run,
        or during the start) is kept and done once the daemon serves: by its default action it
        ended the process, a clean exit systemd does not restart. In a terminal it still stops."""
        if self.hangup_stops or threading.current_thread() is not threading.main_thread():
            return

        def deferred(_signum: int, _frame: Any) -> None:
            self._hangup_deferred = True  # no logging here: the main thread may hold its lock

        signal.signal(signal.SIGHUP, deferred)

    def _stop_in_start(self) -> None:
        """A SIGTERM (what a service manager's stop or restart sends) before ``serve`` takes it
        stops the start as a Ctrl-C does: the stores closed and the lock file said ``stopping``
        then ``stopped`` (``shutdown``). By its default action it killed the process, leaving a
        record that said ``starting`` for a daemon gone: clients waiting on it saw a stale lock
        while the next daemon started. Installed before the lock is taken, so before the record
        first says starting."""
        if threading.current_thread() is not threading.main_thread():
            return

        def asked(_signum: int, _frame: Any) -> None:
            if self._stops_held and not self._pausing:  # the lock being taken: stopped once held
                self._stop_waits = True
                return
            raise _StopAsked  # no logging here: the main thread may hold its lock

        signal.signal(signal.SIGTERM, asked)

    @contextlib.contextmanager
    def _stops_held_back(self) -> Iterator[None]:
        """The lock take, a stop signal held until it is over: one landing between the lock
        file's first write (``starting``) and ``self._lock`` killed the start with nothing to
        say ``stopped``, and clients read a stale lock of a daemon "killed or crashed". A stop in
        a wait between tries (``_pause``: nothing held then) ends it at once, so a wait for a
        `sidecar index` run or another daemon still stops. A Ctrl-C (SIGINT) likewise, for the
        take only (its KeyboardInterrupt left the record ``starting``); its own handler after."""
        interrupt = self._hold_interrupts()
        self._stops_held, self._stop_waits = True, False
        try:
            yield
        finally:
            self._stops_held = False
            if interrupt is not None:
                signal.signal(signal.SIGINT, interrupt)
            if self._stop_waits:
                raise _StopAsked  # the lock, if taken, is known now: the stop writes stopping, stopped

    def _hold_interrupts(self) -> Any:
        """SIGINT handled as the start's SIGTERM is (``_stop_in_start``); the handler it had
        (None off the main thread, where no handler can be set, and when SIGINT is ignored)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            # Ignored by who started it (a background job of a shell, a launcher): stays so, and
            # a SIGINT during the take does not stop the daemon.
            return None
        return signal.signal(signal.SIGINT, signal.getsignal(signal.SIGTERM))

    def _pause(self, seconds: float) -> None:
        """A wait between tries of the lock (the last one refused: nothing is held)."""
        # Marked first, then looked: a signal just before the mark was only noted (``_stop_waits``)
        # and the 2 s wait ran out before the stop; one after it raises in the handler.
        self._pausing = True
        try:
            if self._stop_waits:  # asked during the refused try, or just now
                raise _StopAsked
            self._sleep(seconds)
        finally:
            self._pausing = False

    def _exit_on_second_signal(self) -> None:
        """A Ctrl-C (or SIGTERM) during the stop ends the process at once, the index left as a
        crash leaves it: as KeyboardInterrupt it broke off the joins, and the stores were closed and
        marked clean while the workers still ran."""
        if threading.current_thread() is not threading.main_thread():
            return

        def forced(signum: int, _frame: Any) -> None:
            log.warning("shutdown_forced signal=%s: exiting without closing the index", signum)
            self._exit(int(ExitCode.STOP_ABANDONED))

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, forced)

    def _socket_free(self) -> None:
        """Refuse the start when another daemon answers on the socket (one serving another home
        on it): checked before the lock is taken and again right after it (``lock_and_tighten``),
        before the home is tightened or recorded, so that the refused start changes nothing, not
        even the lock file (``bind_socket`` checks again when it binds)."""
        # No exists() first: on a socket folder another user owns it raises PermissionError, read
        # as "the home cannot be used" (exit 5); ``socket_holder`` says no daemon answers there
        # and ``bind_socket`` then names the folder (exit 3).
        path = self.cfg.socket_path
        peer = socket_peer(path)
        if peer is None:
            return
        holder, uid = peer
        file = str(self.cfg.source_file) if self.cfg.source_file else None
        if uid is not None and uid != os.getuid():
            # Another user's process (one path in two users' configurations) never serves this
            # user's home: refused as a shared socket, not waited for as a daemon of this home.
            what, todo = foreign_socket(str(path), holder, uid, file)
            raise SharedSocketError(f"{what}; {todo}")
        said = self._lock_says(holder)
        if said is not None:  # this home's daemon, starting or stopping: it answers nothing now
            raise DaemonRunningError(f"another sidecar daemon ({holder}) is {said} on {path}")
        theirs = self._holder_health(holder)
        if theirs is not None and theirs.get("home") not in (None, str(self.cfg.home)):
            what, todo = shared_socket(str(path), theirs, str(self.cfg.home), file)
            raise SharedSocketError(f"{what}; {todo}")
        # who, for a wait's STATUS= and the person reading it
        raise DaemonRunningError(f"another sidecar daemon is already serving {path} ({holder})")

    def _lock_says(self, holder: str) -> str | None:
        """The phase this home's lock file gives for the daemon ``holder`` on the socket (``pid
        N``) when it is starting or stopping (its socket is bound but answers nothing), else None."""
        view = lockstate.look(self.cfg.index_dir / ".lock")
        if view is None or view.moving is None or f"pid {view.record.pid}" != holder:
            return None
        return view.record.phase_words()

    def _holder_health(self, holder: str) -> dict[str, Any] | None:
        """The health of the daemon answering on the socket, asked once per holder (a wait for a
        person's `sidecar serve` of this home lasts days: health every 2 s cost it work), again
        after HOLDER_ASK_S where the platform names no pid. No answer is asked again at the next
        check: a daemon binds its socket before its stores are open and answers only then (kept,
        another home's daemon starting with this one at boot was waited for for good)."""
        now = self._clock()
        asked = self._asked_holder
        if (
            asked is None
            or asked[0] != holder
            or asked[2] is None
            or (holder == "a process" and now - asked[1] >= HOLDER_ASK_S)
        ):
            asked = self._asked_holder = (holder, now, holder_health(self.cfg.socket_path))
        return asked[2]

    def _make_agents_folder(self) -> None:
        """Make ``agents/`` unless the recorded home is not there (its share unmounted: the
        folder there is its bare mount point, no place for an agent's memory)."""
        guard = HomeGuard(self.cfg)
        why = guard.problem()
        if why is not None:
            log.error("home_changed %s", held(why))
            return
        self.cfg.agents_dir.mkdir(parents=True, exist_ok=True)
        guard.remember()  # the first start: recorded now

    # --- startup -------------------------------------------------------------------------------

    def startup(self) -> Server:
        """Bind the socket, build the parts, start the threads; the server to run."""
        cfg = self.cfg
        self._phase(STARTING, "opening the index")
        self._listener = bind_socket(cfg.socket_path)
        # The vector library loads beside the first sweep: nothing before the model needs it.
        # Keyword-only it is not loaded at all (BENCHMARKS.md: what that saves at each start).
        if cfg.embedder.enabled:
            self._start_thread("vector-library", warm_vector_library)
        languages = {x.strip().lower() for x in cfg.embedder.languages.split(",")}
        if cfg.embedder.enabled and languages & {"all", "de"}:
            # The German word list compounds are split by, opened before the first search asks
            # (built once, in a child, the first time); only a model that reads German asks (BM25
            # alone or an English model never opens or builds it). Not joined at a stop: it writes
            # nothing here, and the child's file is written whole or not at all.
            lists = threading.Thread(target=warm_word_list, args=(cfg.prepared_dir,), daemon=True)
            lists.name = "word-list"
            lists.start()
        log.info("daemon_starting socket=%s home=%s vault=%s", cfg.socket_path, cfg.home, cfg.vault.path)
        if cfg.vault.path is None:
            log.warning("no_vault configured: only agent memory is indexed")
        else:
            self._look_at_vault(cfg.vault.path)
        handlers: Dispatcher
        try:
            if disk_full_at(cfg.index_dir) and (cfg.index_dir / "manifest.sqlite").exists():
                # Asked first: a writable open that fails for want of space leaves a -wal and -shm
                raise DiskFullError(
                    f"the disk of {cfg.index_dir} is full: nothing was moved aside; free some space "
                    "and the daemon starts again"
                )
            handlers = self._start_parts()
        except (DiskFullError, PermissionDeniedError) as exc:
            # The index may not be written (no space, or no permission: nothing was moved aside):
            # searches answer from it as it is until it may be written again.
            handlers = self._start_read_only(exc)
        self._dispatch = Dispatch(handlers)
        server = build_server(cfg, self._dispatch)
        server.stop_clock = self.stop_clock
        return server

    def _look_at_vault(self, vault: Path) -> None:
        """Whether the vault is there, said at once (bounded by probeTimeoutSeconds); one that
        does not answer is kept for the supervisor (``_hand_start_hang``)."""
        since = time.monotonic()
        there, why, stuck = folder_look(vault, self.cfg.watch.probe_timeout_seconds)
        self._start_hung = (stuck, since) if stuck is not None else None
        if not there:
            log.warning(
                "watcher_retry root=vault reason=%s is not reachable%s", vault, f" ({why})" if why else ""
            )

    def _hand_start_hang(self, parts: Parts) -> None:
        """The start's look at the vault still in its stat: the vault hangs (status says so, the
        first sweep is told at once and retried with its backoff; no second call is started
        into it, and nothing of it leaves the index)."""
        hung, self._start_hung = self._start_hung, None
        vault = self.cfg.vault.path
        if hung is not None and hung[0].is_alive() and vault is not None:
            root = Root("vault", vault, exclude=self.cfg.vault.wiki_subfolder)
            parts.supervisor.hangs(root, hung[0], hung[1])

    def _start_parts(self) -> Handlers:
        """Build the parts over the stores opened for writing, start the threads and the
        scheduler, ask for the first sweep; the handlers over them. On any failure what was
        started is stopped again, and the stores are closed (a switch to writable is tried again
        in this process), or kept for the read-only handlers (``_let_go``)."""
        parts = self.parts = build(self.cfg, self.slot, beat=self.watchdog.indexer_alive)
        work = self._work_stop = threading.Event()
        first = len(self._threads)
        try:
            return self._start_work(parts, work)
        except BaseException:
            self.parts = None
            self._stop_work(parts, work, self._threads[first:])
            # One still running stays listed (the stop waits for it and reports it), and its stores
            # are not kept for the read-only handlers: it went on writing through them. Nor are
            # they closed under it: a thread of their own closes them once it ends.
            stragglers = [t for t in self._threads[first:] if t.is_alive()]
            self._threads[first:] = stragglers
            if stragglers:
                self._close_after(parts, stragglers)
            else:
                self._kept = self._let_go(parts)
            raise

    def _close_after(self, parts: Parts, stragglers: list[threading.Thread]) -> None:
        """Close the stores of a failed switch once the threads still using them end. Closed
        under them (the close waited 10 s), a statement of theirs could keep the closed connection
        alive with the write lock, and every later switch failed ("database is locked"); a switch
        waits for this (``_switch_to_writable``), as the stop does (the thread is listed)."""

        def close() -> None:
            for t in stragglers:
                t.join()
            try:
                parts.stores.close()
            except (StoreError, sqlite3.Error, OSError) as exc:
                log.warning("index_close_failed error=%s", exc)
            log.info("switch_stores_closed (the threads of the failed switch ended)")

        self._start_thread("switch-close", close)
        self._closing = self._threads[-1]
        self._closing_for = ([t.name for t in stragglers], time.monotonic())
        self._said_stuck = False

    def _start_work(self, parts: Parts, work: threading.Event) -> Handlers:
        cfg = self.cfg
        self._hand_start_hang(parts)
        beat = self.watchdog.indexer_alive
        indexer, problems, vectors = parts.indexer, parts.problems, parts.vectors
        self._phase(STARTING, "catching up with what changed while it was stopped")
        for step in (
            indexer.finish_interrupted,
            # Notes the rules leave out now (a configuration edited while the daemon was stopped, or
            # a reload asked while read-only, Obsidian's settings edited meanwhile) leave before the
            # first sweep writes: its deletions come after all its writes, and they stayed
            # searchable through it. Cheap: the keys are matched, no note is read.
            indexer.remove_excluded_at_start,
            indexer.reparse_if_chunking_changed,
            indexer.reread_if_written_elsewhere,
            indexer.reread_canvases_if_read_differently,
            indexer.reread_drawings_if_read_differently,
            indexer.reread_link_aliases_if_read_differently,
            indexer.reread_property_names_if_read_differently,
        ):
            self._unless_stopping()  # a switch to writable can take minutes: a stop ends it early
            step()
        self._unless_stopping()
        parts.stores.look_for_flags()  # health's index.immutable reads it (and each written file)
        loop = self.loop = IndexLoop(cfg, indexer, self.slot, problems, stop=work, beat=beat)
        watcher = self.watcher = build_watcher(cfg, loop.changed, work, parts.supervisor)
        loop.on_lost, loop.watched = watcher.events_lost, lambda: [str(p) for p in watcher.covered()]
        watcher.on_partial = loop.watch_partial
        watcher.on_left_out = loop.watch_left_out
        handlers = self._handlers(parts, loop, watcher)
        backfill = Backfill(
            cfg,
            self.slot,
            vectors,
            parts.repair,
            problems=problems,
            activity=indexer.activity,
            stop=work,
        )
        self._start_thread("embedder-load", self._load_embedder)
        self._start_thread("indexer", loop.run)
        self._start_thread("vectors", backfill.run)
        self._start_thread("watcher", watcher.run)
        manifest = parts.stores.manifest
        lock = self._lock
        policy = RepairPolicy(
            parts.repair, problems, manifest, self.slot, keep_lock=lock.keep if lock is not None else None
        )

        def status() -> str:
            return status_line(indexer.activity, parts.supervisor, manifest, self.slot.state, vectors)

        notify = (lambda: self.watchdog.notify(status)) if self.notifier.enabled else None
        scheduler = self._scheduler = build_scheduler(
            cfg,
            loop,
            parts.supervisor,
            policy,
            vectors=vectors,
            retry_embedder=self._retry_embedder,
            notify=notify,
            daily=self._daily,
            also=self._recheck_config,
        )
        scheduler.start()
        loop.schedule_sweep()
        return handlers

    def _unless_stopping(self) -> None:
        if self.stop.is_set():
            raise StorageError("the daemon is stopping")

    def _stop_work(self, parts: Parts, work: threading.Event, threads: list[threading.Thread]) -> None:
        """Stop what a failed start of the parts started: its scheduler, and its threads (told to
        stop, waited for with a bound). Left running, a writable indexer wrote beside the
        read-only handlers, and its stores stayed open beside theirs."""
        work.set()
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown()
        parts.vectors.stop_builds()
        for t in threads:
            t.join(_JOIN_TIMEOUT)
            if t.is_alive():
                log.warning("switch_cleanup_timeout thread=%s (its stores are closed once it ends)", t.name)
        self.loop = self.watcher = None
        self._inboxes = None

    def _let_go(self, parts: Parts) -> Parts | None:
        """Close the writable stores of a failed start; or keep them open (returned) when what
        they committed cannot be written back into the manifest's file (its disk filled again):
        the read-only open refused a write-ahead log holding commits (it reads one now only
        through the -shm a writer leaves), and every request, health included, was refused until
        space was freed. The read-only handlers then read through this writer (the index lock
        keeps every other one away). Neither while a thread of the failed start still runs on
        them (``_close_after``)."""
        try:
            if parts.stores.manifest.written_back():
                parts.stores.close()
                return None
        except FrozenShmError as exc:  # its log cannot be written back while the flag stays
            log.warning(
                "index_kept_open reason=immutable (%s); read-only answers read through the writable "
                "connection",
                exc,
            )
            return parts
        except (StoreError, sqlite3.Error, OSError) as exc:
            log.warning("index_close_failed error=%s", exc)
            return None
        log.warning(
            "index_kept_open reason=the manifest's write-ahead log could not be written into the file "
            "(disk full); read-only answers read through the writable connection"
        )
        return parts

    def _handlers(self, parts: Parts, loop: IndexLoop, watcher: Watcher) -> Handlers:
        cfg = self.cfg
        # Its folder made by run, with the home's other checks; kept as the supervisor saw it.
        inboxes = Inboxes(cfg, home=parts.supervisor.home, clock=parts.clock)
        inboxes.clean_temp()  # a write killed mid-way leaves its temp file; none runs yet
        inboxes.prune_trash()
        self._inboxes = inboxes
        service = ServiceState(
            self.started,
            loop.depth,
            loop.request_sweep,
            watcher.covered,
            self.reload,
            loop.catching_up,
            lambda: loop.asked_done,
            loop.rebuilding,
            loop.rebuild_queued,
            started_steady=self.started_steady,
        )
        handlers = build_handlers(cfg, parts, self.slot, service, inboxes, counts=self._counts)
        self._retriever = handlers.retriever
        return handlers

    def _start_thread(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        log.debug("thread_started name=%s", name)  # which threads a start runs, for the tests
        t.start()
        self._threads.append(t)

    # --- serve ---------------------------------------------------------------------------------

    async def serve(self, server: Server) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if self.hangup_stops:
            loop.add_signal_handler(signal.SIGHUP, _hung_up, stop)
        else:
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, self._reload_quietly))
            if self._hangup_deferred:
                log.info("config_reload_deferred a SIGHUP came during the start: reading the file now")
                loop.run_in_executor(None, self._reload_quietly)
        beat = asyncio.create_task(self.watchdog.beat())
        # Said when the stop begins: the server drains the requests taken up before it returns.
        stopping = asyncio.create_task(stop.wait())
        stopping.add_done_callback(lambda _task: self._say_stopping())
        try:
            log.info("daemon_ready socket=%s", self.cfg.socket_path)
            self._phase(SERVING)
            self.notifier.send("READY=1", "STATUS=serving; first sweep starting")
            await server.serve(self._listener, stop)
        finally:
            beat.cancel()
            stopping.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self._say_stopping()

    def _phase(self, phase: str, step: str | None = None) -> None:
        """Say the phase in the index lock file (``IndexLock.phase``), for the clients that find
        no answer on the socket: a start opening its stores, a stop closing them."""
        if self._lock is not None and not (phase == STARTING and self._lock.said in (SERVING, STOPPING)):
            # (a switch to writable while serving runs the start's steps again: still serving)
            self._lock.phase(phase, step)

    def _say_stopping(self) -> None:
        if not self._said_stopping:
            self._said_stopping = True
            self._phase(STOPPING)
            self.stop_clock.begin()
            self.notifier.send("STOPPING=1", "STATUS=stopping")
            log.info("daemon_stopping")
            if self._dispatch is not None:
                self._dispatch.close_if_held(Stopping())

    def _daily(self) -> None:
        """The daily housekeeping, a job the stop waits for (``Schedule.tracked``): it looks at
        the stop between its steps and between the manifest's short writes, and ends there (each
        step leaves what it touched whole: a file of .trash removed or not, a model copy renamed
        away before it is removed, the manifest's writes each a transaction of its own)."""
        # No skip after a clock jump: every resume from suspend counts as one, so on a laptop the
        # daily run would never age .trash. The prune's "now" is the earlier of the wall and the
        # steady clock, which a forward step does not move: a step ages nothing anyway.
        if self._inboxes is not None:
            self._inboxes.prune_trash()
        if self._stopping():
            return
        # The loaded models' prepared copies marked used again, those no daemon used for a month
        # removed. Not while a model loads or its vectors are not attached yet: a switch loads
        # the previous model (whose copy serves meanwhile) only after the new one.
        if self._models_settled():
            prepared.tidy(self.cfg.prepared_dir)
        else:
            log.info("model_cache_tidy_skipped reason=a model is loading; tried again tomorrow")
        if self._stopping():
            return
        self._remove_old_copies()
        if self._stopping():
            return
        self._give_back_manifest()

    def _stopping(self) -> bool:
        """Whether the daemon stops (the housekeeping ends at its next step)."""
        return self.stop.is_set() or self._work_stop.is_set()

    def _between_steps(self) -> None:
        """Between two of the manifest's short writes: searches served first; at a stop, the
        housekeeping ends here (the write before is committed, the next not begun)."""
        FOREGROUND.yield_to(0.5)
        if self._stopping():
            raise _HousekeepingStoppedError

    def _remove_old_copies(self) -> None:
        """Copies of stores moved aside (damaged, a newer release's, a gone model's vectors)
        older than ``KEEP_MOVED_ASIDE_DAYS``, as at a start: a service running for months kept
        them until its next restart. None is open: a store moved aside is never opened again.
        Their age counts like .trash's: a forward step of the wall clock ages nothing."""
        parts = self.parts
        clock = parts.clock if parts is not None else None
        now = min(clock.wall(), clock.now()) if clock is not None else None
        remove_old_moved_aside(self.cfg.index_dir, now)

    def _give_back_manifest(self) -> None:
        """The manifest's free pages back to the disk (``Manifest.give_back``): a step at a time,
        searches in flight served between steps. Rows still holding their model text whole
        (put back from a rebuild's copy, or left by a start short of room) are split first
        (``Manifest.store_embed_heads``), a batch at a time."""
        parts = self.parts
        if parts is None:
            return
        try:
            parts.stores.manifest.store_embed_heads(between=self._between_steps)
            parts.stores.manifest.give_back(between=self._between_steps)
        except _HousekeepingStoppedError:
            log.info("manifest_give_back_stopped reason=the daemon stops (the rest is done tomorrow)")
        except StoresClosedError:  # the stop closed the index under it: no failure, nothing lost
            log.info(
                "manifest_give_back_stopped reason=the index closed for the stop (the rest is done tomorrow)"
            )
        except sqlite3.Error as exc:  # a full disk, a busy file: the next day tries again
            log.warning("manifest_give_back_failed error=%s", exc)

    def _models_settled(self) -> bool:
        if self.slot.state in ("idle", "loading"):
            return False
        parts = self.parts
        return self.slot.model is None or (parts is not None and parts.vectors.stores.serving is not None)

    def _load_embedder(self) -> None:
        """The configured model; if it fails, the model of the index's serving table stands in."""
        cfg, parts = self.cfg, self.parts
        if parts is None:
            return
        vectors = parts.vectors
        load_embedder(cfg, self.slot, lambda: serving_model(cfg, vectors), parts.problems)
        record_counting(cfg, self.slot, parts.indexer)

    def _retry_embedder(self) -> None:
        # Also while a fallback answers: the configured model is what the user asked for. Again
        # when a reload asked meanwhile: its run_soon was skipped, this job was running.
        again = True
        while again:
            number = self._model_retries.begin()
            try:
                if self._model_wanted():
                    log.info("embedder_retry")
                    self._load_embedder()
            finally:  # a reload waiting for a retry started after it asked answers now
                again = self._model_retries.end(number)

    def _model_wanted(self) -> bool:
        """The configured model is not the one answering (it failed; or another stands in)."""
        return (self.slot.state == "failed" or self.slot.fallback is not None) and self.cfg.embedder.enabled

    # --- shutdown ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the threads (bounded), remove the socket, then flush and close the stores and
        release the lock, once no write runs any more (the server drained the requests with a
        bound: a write that outlasted it was answered ``timeout`` and runs on, so they wait for it;
        a read still running is not waited for). Every wait gets what is left of ``stop_clock``."""
        self.stop.set()
        self._phase(STOPPING)  # a start that failed stops here too
        if self.parts is not None:  # the indexer's wait for a share's call ends now, not at its deadline
            self.parts.supervisor.stopping.set()
        self.stop_clock.begin()  # a failed start stops here: its waits are bounded alike
        dispatch = self._dispatch
        if dispatch is not None:  # held requests answered now, not after the joins
            dispatch.close(Stopping())
        # A switch to writable opens stores under the index lock: waited for (it stops between its
        # steps). One still running after the wait keeps the lock until the process exits: released,
        # another daemon could open the index while this one still wrote it.
        idle = self._switching.acquire(timeout=self.stop_clock.left(_JOIN_TIMEOUT))
        # Marked clean only once the joins succeed: an error (or a Ctrl-C) in them leaves workers
        # running, and the next start must catch up as after a crash.
        stuck = True
        try:
            if not idle:
                self.stuck = True
                log.warning(
                    "shutdown_timeout thread=space-watch (switching to writable): the index stays "
                    "locked until this process exits"
                )
                return
            self._work_stop.set()
            if self._scheduler is not None:
                self._scheduler.shutdown()
            stuck = self._join_workers()
            self.stuck = self.stuck or stuck
        finally:
            if self._listener is not None:
                self._listener.close()
                with contextlib.suppress(FileNotFoundError):
                    self.cfg.socket_path.unlink()
            finish = functools.partial(self._close_stores, idle=idle, stuck=stuck)
            if dispatch is not None and dispatch.after_running(functools.partial(_logged, finish)):
                log.warning(
                    "shutdown_waits_for_requests: the stores are closed and the index released "
                    "once the writes still running end"
                )
            else:  # the dispatch refuses from now on: no request can start on the stores
                finish()

    def _close_stores(self, *, idle: bool, stuck: bool) -> None:
        """Flush and close the stores, release the index: no write or worker uses them now (a
        read still running fails quietly ``busy``: see ``Dispatch.stores_closing``)."""
        if self._dispatch is not None:
            self._dispatch.stores_closing()
        asked: list[Stores] = []  # the stores whose close began: each says if a vector write may land
        try:
            parts = self.parts
            if idle and parts is not None:
                if not stuck:
                    with contextlib.suppress(StoreError, sqlite3.Error):
                        parts.vectors.mark_clean()
                asked.append(parts.stores)
                parts.stores.close(stopping=True, left=self.stop_clock.left)
                parts.clock.save()
            for other in (self._read_only_parts, self._kept):
                if idle and other is not None:
                    asked.append(other.stores)
                    other.stores.close(stopping=True, left=self.stop_clock.left)
        finally:
            # Read from the stores, not from the close's return: a keyword index's or manifest's
            # close that raised (a failing disk) lost that, and the lock was let go with a vector
            # write still under way.
            if any(not stores.vectors_settled for stores in asked):
                # Released, another daemon could open the index while this one's write lands.
                log.warning(
                    "shutdown_timeout vectors=still being written: the index stays locked until "
                    "this process exits"
                )
                self._keep_lock_to_exit()
            elif self._lock is not None and idle:
                self._lock.release()
            if idle:  # whoever takes it next sees the stop and opens nothing
                self._switching.release()
            log.info("daemon_stopped")
            self.stopped.set()

    def _keep_lock_to_exit(self) -> None:
        """The lock kept until the process exits: its record says so while it runs (clients read
        a stop), and ``stopped`` as it exits (``exiting``): a clean stop is not read as a crash."""
        self.lock_kept = True
        self._phase(STOPPING, "a vector write under way: the index is let go as the process exits")

    def exiting(self) -> None:
        """The process exits next (``cmd_serve``): a lock kept past the stores' close says
        ``stopped`` now, and the exit lets it go (a service manager's restart takes it then)."""
        if self.lock_kept:
            self._phase(STOPPED)

    def requests_left(self) -> int:
        """Requests still running after the stop (reads it did not wait for, hung on a share)."""
        return self._dispatch.running() if self._dispatch is not None else 0

    def wait_stopped(self) -> bool:
        """Whether the stores were closed, waiting for writes still running as long as the stop's
        bound leaves (False: the process exits without closing them, as after a crash)."""
        if self.stopped.wait(self.stop_clock.left(_JOIN_TIMEOUT)):
            return True
        log.warning(
            "shutdown_timeout requests=still running: exiting without closing the index (it is "
            "left as a crash leaves it; the next start catches up)"
        )
        return False

    def _join_workers(self) -> bool:
        """Wait for the worker threads (an index build's child is ended first: the embedding
        thread waits on it); True if one did not finish in time."""
        parts = self.parts
        if parts is not None:
            parts.vectors.stop_builds()
        stuck = False
        if self._scheduler is not None:
            # A scheduled rewrite of the keyword index rolls back at its next look at the stop;
            # the stores are closed after it (closed under it, it died of a closed database).
            # One still running past the bound is left: nothing it did is committed, except a
            # keyword refill beside already in its renames (the next start's settle ends them). A
            # refill beside does not wait for its step under way: that ends in its own thread, and
            # a side folder the exit cuts short is removed by the next start's settle.
            left = self._scheduler.join(self.stop_clock.left(_JOIN_TIMEOUT))
            if left:
                stuck = True
                log.warning("shutdown_timeout thread=scheduler jobs=%s", ",".join(left))
        for t in self._threads:
            # Asked at its turn: the indexer's join before it ends a wait for the share at the
            # stop, and a call that hangs is known once that wait ended.
            hung = parts.supervisor.hung_call() if parts is not None and t.name == "watcher" else None
            if t.name == "watcher" and hung is not None:
                # Its walk of the share is in the kernel until the share answers (a walk is no
                # bounded call); it writes nothing, so it is not waited for (the stop took
                # _JOIN_TIMEOUT for it, beside the indexer's, of the unit's TimeoutStopSec).
                t.join(min(self.stop_clock.left(_JOIN_TIMEOUT), _HUNG_JOIN_S))
                if t.is_alive():
                    self.stuck = True  # the process leaves with os._exit
                    log.warning("shutdown_timeout thread=%s hung_share=%s", t.name, hung)
                continue
            t.join(self.stop_clock.left(_JOIN_TIMEOUT))
            if t.is_alive():
                stuck = True
                log.warning("shutdown_timeout thread=%s", t.name)
        return stuck


class _HousekeepingStoppedError(Exception):
    """The daemon stops: the housekeeping ends between two of the manifest's writes."""


def _unheard(*_lines: str) -> None:
    """The notices of a service manager that takes none (launchd)."""


def exit_now(code: int) -> None:
    """Leave the process at once, the logs flushed (no interpreter exit: it would wait on a worker
    still running, or tear down under one inside native code)."""
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)


def _logged(finish: Callable[[], None]) -> None:
    """``finish`` run by the last request's thread: a failure is logged, not handed to the request."""
    try:
        finish()
    except Exception:
        log.exception("shutdown_close_failed")


def _hung_up(stop: asyncio.Event) -> None:
    log.info("daemon_hangup its terminal closed: stopping (`sidecar reload` re-reads the configuration)")
    stop.set()
