"""Scheduled work: full sweeps and upkeep (APScheduler), the per-root tick and the watchdog ping.

The tick (about once a second; a few compares) asks the supervisor which roots are due (a retry
of an offline root, a poll of a network share) and runs the repair policy. Vector compaction, the
model retry, giving freed memory back and the trash prune run on APScheduler's interval jobs.

APScheduler computes due times from the wall clock, which steps (NTP, a restored VM snapshot) and
jumps over a suspend. So the tick and the watchdog ping run on threads paced by the monotonic
clock, and a third one compares the two clocks every second: after a step back it moves the jobs'
next runs back by the step (a job waits at most its interval), after a jump ahead (a resume) each
overdue job runs once at once (coalesced, no misfire limit), then on its interval.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.schedulers.background import BackgroundScheduler

from sidecar.config import Config
from sidecar.contracts.errors import StoreError, StoresClosedError
from sidecar.daemon.indexing import IndexLoop
from sidecar.daemon.repairs import RepairPolicy
from sidecar.index.repair import compact_bm25, compact_memory
from sidecar.index.vectoring import Vectoring
from sidecar.runtime import heap
from sidecar.vault.supervisor import Supervisor

log = logging.getLogger(__name__)

# A difference between wall-clock and monotonic progress beyond this is a step (or a suspend);
# NTP's slewing drifts by at most 0.5 ms per second.
CLOCK_STEP_S = 1.0
CLOCK_CHECK_S = 1.0
# A job that keeps failing is logged with its traceback once, then once per this many seconds.
_REPEAT_LOG_S = 600.0
_LONGEST_WAIT_S = 7 * 86_400.0  # a pacer's wait past which (or NaN) the pause is taken as a second
# The daily housekeeping's first run after a start: not during it (a daemon restarted every day
# would otherwise never run it; a model switch loads its previous model after the new one).
DAILY_FIRST_S = 600.0


class Schedule:
    """The APScheduler jobs plus the monotonic threads; ``start`` once, ``shutdown`` once."""

    def __init__(self, scheduler: BackgroundScheduler) -> None:
        self.scheduler = scheduler
        self.guard = ClockGuard(scheduler)
        self.stop = threading.Event()  # set by ``shutdown``: a job in progress ends at its next check
        self._pacers: list[Pacer] = [Pacer("clock", CLOCK_CHECK_S, self.guard.check, self.stop)]
        # Runs in progress of the jobs that write the stores (``tracked``), which the daemon's
        # stop waits for (``join``) before it closes them.
        self._busy: dict[str, int] = {}
        self._idle = threading.Condition()

    def tracked(self, name: str, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` as a job the stop waits for (``join``): left running, a keyword rewrite went on
        reading the manifest while the stop closed it, and died of a closed database. A run
        dispatched after the stop does not begin."""

        def run() -> None:
            with self._idle:
                if self.stop.is_set():
                    return
                self._busy[name] = self._busy.get(name, 0) + 1
            try:
                fn()
            finally:
                with self._idle:
                    self._busy[name] -= 1
                    if not self._busy[name]:
                        del self._busy[name]
                    self._idle.notify_all()

        return run

    def join(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` seconds (after ``shutdown``) for the tracked jobs' runs in
        progress to end (each ends at its next look at ``stop``); the names of those still
        running."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._idle:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            return sorted(self._busy)

    def every(self, name: str, seconds: float, fn: Callable[[], None]) -> None:
        self._pacers.append(Pacer(name, seconds, fn, self.stop))

    def run_soon(self, job_id: str) -> None:
        """Run an interval job now (on the scheduler's thread, never beside a run of itself); its
        next run is an interval after this one."""
        self.scheduler.modify_job(job_id, next_run_time=datetime.now(self.scheduler.timezone))

    def start(self) -> None:
        self.scheduler.start()
        for pacer in self._pacers:
            pacer.start()

    def shutdown(self) -> None:
        """Stops dispatching; a run in progress finishes on its own (as APScheduler's wait=False):
        the daemon's stop waits for those of the tracked jobs (``join``)."""
        self.stop.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)


class Pacer(threading.Thread):
    """Runs ``fn`` every ``seconds`` of monotonic time (after the previous run ends)."""

    def __init__(
        self,
        name: str,
        seconds: float,
        fn: Callable[[], None],
        stop: threading.Event,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(name=f"sched-{name}", daemon=True)
        self.job, self.seconds, self.fn, self.stop = name, seconds, fn, stop
        self.sleep = sleep or time.sleep  # tests stand in for the pause
        # Per part of a tick ("pause", "run"): error text, last logged, repeats. One slot for
        # both let the job's next success forget a pause failing every tick: a traceback a tick.
        self._failure: dict[str, tuple[str, float, int]] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            # time.sleep, not stop.wait: on macOS a timed lock wait (Python < 3.13) ends at a
            # wall-clock deadline, which a step back postpones by the step.
            try:
                self.sleep(self.seconds)
            except Exception as exc:
                # The pause itself failed: the thread ended for good with it (the tick's jobs
                # never ran again). Logged as a failed run is, then a wait of the stop event
                # instead, so a sleep failing each time neither ends the thread nor spins it.
                self._failed("pause", exc)
                self.stop.wait(self.seconds if 0 < self.seconds <= _LONGEST_WAIT_S else 1.0)
            else:
                self._failure.pop("pause", None)
            if self.stop.is_set():
                return
            try:
                self.fn()
            except Exception as exc:
                self._failed("run", exc)
            else:
                self._failure.pop("run", None)

    def _failed(self, part: str, exc: Exception) -> None:
        # The tick runs every second: a lasting fault is one traceback per ten minutes, not 86,400.
        now, text = time.monotonic(), repr(exc)
        last = self._failure.get(part)
        if last is not None and last[0] == text and now - last[1] < _REPEAT_LOG_S:
            self._failure[part] = (text, last[1], last[2] + 1)
            return
        repeats = last[2] if last is not None and last[0] == text else 0
        log.error(
            "scheduled_job_failed job=%s part=%s repeats=%d error=%s",
            self.job,
            part,
            repeats,
            text,
            exc_info=exc,
        )
        self._failure[part] = (text, now, 0)


class ClockGuard:
    """Notices wall-clock steps and suspends against the monotonic clock; re-aims the scheduler."""

    def __init__(self, scheduler: BackgroundScheduler) -> None:
        self.scheduler = scheduler
        offset = None
        while offset is None:
            offset = self._read()
        self._offset = offset
        self.jumps = 0  # steps and resumes seen: a job can tell it runs right after one

    @staticmethod
    def _read() -> float | None:
        """Wall minus monotonic; None if this thread was held up between the two readings."""
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        return None if after - before > 0.1 else wall - after

    def check(self) -> None:
        offset = self._read()
        if offset is None:
            return
        step, self._offset = offset - self._offset, offset
        if abs(step) < CLOCK_STEP_S:
            return
        self.jumps += 1
        if step < 0:
            log.warning("clock_jump seconds=%.1f (the wall clock was set back)", step)
        else:
            log.info("clock_jump seconds=+%.1f (a resume, or the wall clock was set forward)", step)
        self._realign(step)
        self.scheduler.wakeup()  # its wait was measured on the old clock

    def _realign(self, step: float) -> None:
        """After a step back each job keeps its place in its interval; a job overdue (a resume)
        runs once now and then a whole interval on (not at its old phase, which could be soon)."""
        now = datetime.fromtimestamp(time.time(), self.scheduler.timezone)
        for job in self.scheduler.get_jobs():
            if job.next_run_time is None:  # paused
                continue
            due = max(job.next_run_time + timedelta(seconds=min(step, 0.0)), now)
            interval = getattr(job.trigger, "interval", None)
            if isinstance(interval, timedelta):
                due = min(due, now + interval)
            if due != job.next_run_time:
                try:  # one job that cannot be moved must not leave the others at the old clock
                    job.modify(next_run_time=due)
                except Exception as exc:  # apscheduler raises what its job stores raise
                    log.warning("clock_realign_failed job=%s error=%r", job.id, exc)


def build_scheduler(
    cfg: Config,
    loop: IndexLoop,
    supervisor: Supervisor,
    policy: RepairPolicy,
    *,
    vectors: Vectoring,
    retry_embedder: Callable[[], None],
    notify: Callable[[], None] | None,
    daily: Callable[[], None] | None = None,
    also: Callable[[], None] | None = None,
) -> Schedule:
    """The schedule with every job added, not started. ``notify``: None without systemd;
    ``also``: a look of a few compares run on the tick (no thread of its own)."""
    # misfire_grace_time None: a run that came due during a suspend (or while the scheduler's
    # thread was held up) runs late instead of being dropped; coalesce makes that one run.
    defaults = {"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
    try:
        scheduler = BackgroundScheduler(daemon=True, job_defaults=defaults)
    except zoneinfo.ZoneInfoNotFoundError:
        # A TZ the time zone database does not know (a POSIX rule "<+0530>-5:30", a misspelled
        # name): the scheduler's zone lookup fails, and the daemon exited at every start. Its jobs
        # run on intervals, which no zone moves.
        log.warning("scheduler_zone_unknown tz=%r zone=UTC", os.environ.get("TZ"))
        scheduler = BackgroundScheduler(daemon=True, job_defaults=defaults, timezone=UTC)
    scheduler.add_listener(_log_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        logging.getLogger(name).addFilter(_RELOGGED)
    schedule = Schedule(scheduler)
    scheduler.add_job(loop.schedule_sweep, "interval", minutes=cfg.index.rescan_minutes, id="sweep")

    def tick() -> None:
        loop.sweep_roots(supervisor.due(poll_all=loop.polled()))
        policy.tick()
        if also is not None:
            also()

    every = min(1.0, cfg.watch.poll_seconds, cfg.watch.retry_base_seconds)  # due() is a few compares
    schedule.every("tick", every, tick)
    scheduler.add_job(
        lambda: optimize(vectors, schedule.stop, schedule.tracked),
        "interval",
        minutes=cfg.index.optimize_minutes,
        id="optimize",
    )
    scheduler.add_job(retry_embedder, "interval", minutes=cfg.embedder.retry_minutes, id="model-retry")
    # Native libraries free into malloc's arenas, which keep the pages: hand them back now and
    # then (a few milliseconds; 50-60 MB after loading the model, BENCHMARKS.md).
    scheduler.add_job(heap.trim, "interval", seconds=60, id="trim")
    if daily is not None:  # housekeeping: old texts in the inboxes' .trash, unused model copies
        first = datetime.fromtimestamp(time.time() + DAILY_FIRST_S, scheduler.timezone)
        # A run the stop waits for (``join``): it writes the manifest a step at a time and ends
        # at its next look at the stop; left running, its next step met the closed manifest.
        tracked = schedule.tracked("daily", daily)
        scheduler.add_job(tracked, "interval", hours=24, id="daily", next_run_time=first)
    if notify is not None:  # its own thread: a long repair in the tick must not delay it
        seconds = min(5.0, cfg.watchdog_usec / 2e6) if cfg.watchdog_usec else 5.0
        schedule.every("notify", seconds, notify)
    return schedule


def _log_event(event: JobEvent) -> None:
    """APScheduler's job events as our log lines (its own are dropped by ``_RELOGGED``)."""
    if event.code == EVENT_JOB_ERROR:
        exc: Any = getattr(event, "exception", None)
        log.error("scheduled_job_failed job=%s error=%r", event.job_id, exc, exc_info=exc)
    elif event.code == EVENT_JOB_MISSED:
        due = getattr(event, "scheduled_run_time", None)
        log.warning("scheduled_run_missed job=%s due=%s", event.job_id, due)
    else:  # the previous run still goes on (max_instances 1); the next due time is kept
        log.warning("scheduled_run_skipped job=%s reason=still_running", event.job_id)


class _Relogged(logging.Filter):
    """Drops APScheduler's lines that ``_log_event`` writes in our form."""

    _MESSAGES = (
        'Run time of job "%s" was missed by %s',
        'Execution of job "%s" skipped: maximum number of running instances reached (%d)',
        'Job "%s" raised an exception',
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in self._MESSAGES


_RELOGGED = _Relogged()


def optimize(
    vectors: Vectoring,
    stop: threading.Event | None = None,
    track: Callable[[str, Callable[[], None]], Callable[[], None]] | None = None,
) -> None:
    """Scheduled compaction of the vector tables (also done after every N writes), of the
    vault's keyword index (``compact_bm25``) and of each memory index (``compact_memory``) whose
    deleted documents weigh in its scores. ``stop``: the schedule's shutdown, which rolls a
    keyword rewrite back. ``track`` (``Schedule.tracked``) makes the keyword part alone a run the
    daemon's stop waits for: the vector tables' compaction does not look at the stop, and
    waiting for it took the stop's time from the other joins and left the stop not clean."""
    if stop is not None and stop.is_set():
        return  # dispatched as the daemon stops: nothing begun
    try:
        vectors.optimize()
    except StoreError as exc:
        log.error("optimize_failed error=%s", exc)
    vectors.stores.look_for_flags()  # hourly, off the request path (health's index.immutable)

    def keyword() -> None:
        try:
            try:
                compact_bm25(vectors.stores, stop)
            except StoresClosedError:
                raise  # the stop closed the stores: no failure (below)
            except StoreError as exc:
                log.error("bm25_compact_failed error=%s", exc)
            compact_memory(vectors.stores, stop)
        except (sqlite3.ProgrammingError, StoresClosedError) as exc:
            if stop is None or not stop.is_set():
                raise
            # Run on past the stop's bound (``Schedule.join``): the stores closed under it.
            # Nothing of a rewrite is committed before its end: the index is as it was.
            log.info("bm25_compact_stopped part=keyword reason=stores closed error=%s", exc)

    (keyword if track is None else track("optimize", keyword))()
