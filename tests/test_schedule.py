"""The schedule under a wall clock that steps (NTP, a restored VM) and jumps (suspend/resume).

The system clock is not touched: ``time.time`` and the ``datetime`` APScheduler reads are shifted
in-process, while ``time.monotonic`` goes on as it does across a real step (and a suspend, on
Linux and macOS)."""

from __future__ import annotations

import datetime as real_dt
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import apscheduler.executors.base
import apscheduler.schedulers.base
import apscheduler.triggers.interval
import pytest

from sidecar.config import load_config
from sidecar.daemon import schedule as schedule_module
from sidecar.daemon.schedule import build_scheduler
from sidecar.daemon.watchdog import Watchdog
from sidecar.runtime import heap


class WallClock:
    """Real time plus an offset that a test steps."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.real_time = time.time

    def time(self) -> float:
        return self.real_time() + self.offset


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> WallClock:
    clock = WallClock()

    class FakeDatetime(real_dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real_dt.datetime.fromtimestamp(clock.time(), tz)

    monkeypatch.setattr(time, "time", clock.time)
    for module in (apscheduler.schedulers.base, apscheduler.executors.base, apscheduler.triggers.interval):
        monkeypatch.setattr(module, "datetime", FakeDatetime)
    return clock


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Counter[str], Any]]:
    """Counts of every job's runs, and the schedule (sweeps every 6 s, watchdog ping every 0.5 s)."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def bump(name: str) -> Callable[..., None]:
        def run(*_args: Any) -> None:
            with lock:
                counts[name] += 1

        return run

    monkeypatch.setattr(heap, "trim", bump("trim"))
    cfg = load_config(
        flags={"home": str(tmp_path / "home"), "index.rescanMinutes": 0.1}, env={"WATCHDOG_USEC": "1000000"}
    )
    loop = SimpleNamespace(schedule_sweep=bump("sweep"), sweep_roots=lambda names: None, polled=lambda: False)
    schedule = build_scheduler(
        cfg,
        loop,  # type: ignore[arg-type]
        SimpleNamespace(due=lambda poll_all=False: []),  # type: ignore[arg-type]
        SimpleNamespace(tick=bump("tick")),  # type: ignore[arg-type]
        vectors=SimpleNamespace(  # type: ignore[arg-type]
            optimize=bump("optimize"),
            stores=SimpleNamespace(
                bm25=SimpleNamespace(deleted_docs=lambda: (0, 0)), look_for_flags=lambda: None
            ),
        ),
        retry_embedder=bump("model-retry"),
        notify=bump("notify"),
        daily=bump("daily"),
    )
    schedule.start()
    try:
        yield counts, schedule
    finally:
        schedule.shutdown()


def _wait(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _apscheduler_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("apscheduler") and r.levelno >= logging.WARNING]


def test_a_step_back_of_the_wall_clock_stops_nothing(wall: WallClock, runs: Any) -> None:
    """D5 (years.md): after the clock was set back 1 h the tick and the watchdog ping ran no more
    (systemd kills the daemon after WatchdogSec=120) and the sweeps waited for the hour. Now the
    tick and ping go on, and each job is due within its interval of the new time."""
    counts, schedule = runs
    assert _wait(lambda: counts["tick"] >= 1 and counts["notify"] >= 1, 3.0)
    wall.offset = -3600.0
    counts.clear()
    # Two ticks (1 s) and three pings (0.5 s) of the new time: waited for, not slept through.
    assert _wait(lambda: counts["tick"] >= 2 and counts["notify"] >= 3, 10.0), counts
    now = real_dt.datetime.fromtimestamp(wall.time(), real_dt.UTC)
    for job in schedule.scheduler.get_jobs():
        assert job.next_run_time - now <= job.trigger.interval, job.id
    # The first sweep (6 s after the start) comes at its time, not an hour later.
    assert _wait(lambda: counts["sweep"] == 1, 6.0), counts


def test_jobs_due_during_a_suspend_run_once_after_the_resume(
    wall: WallClock, runs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """D5: a run that came due while the machine slept was dropped ('Run time of job ... was
    missed', misfire_grace_time 1 s): a laptop asleep at the daily job's hour never pruned the trash
    by age. Now each overdue job runs once (coalesced), promptly, and then on its interval."""
    caplog.set_level(logging.INFO)
    counts, schedule = runs
    assert _wait(lambda: counts["tick"] >= 1, 3.0)
    wall.offset = 25 * 3600.0  # asleep for 25 h: the monotonic clock did not move meanwhile
    jobs = ("daily", "sweep", "optimize", "model-retry", "trim")
    assert _wait(lambda: all(counts[j] for j in jobs), 3.0), counts
    time.sleep(0.5)
    assert {j: counts[j] for j in jobs} == dict.fromkeys(jobs, 1)  # once each, no burst (sweep: 6 s)
    now = real_dt.datetime.fromtimestamp(wall.time(), real_dt.UTC)
    assert schedule.scheduler.get_job("daily").next_run_time - now > real_dt.timedelta(hours=23)
    assert not _apscheduler_lines(caplog)
    assert any(r.getMessage().startswith("clock_jump seconds=+") for r in caplog.records)


def test_apscheduler_job_failures_are_logged_in_our_form(caplog: pytest.LogCaptureFixture, runs: Any) -> None:
    _, schedule = runs

    def boom() -> None:
        raise OSError("disk on fire")

    schedule.scheduler.add_job(boom, id="boom")  # runs once, now
    assert _wait(lambda: any("scheduled_job_failed" in r.getMessage() for r in caplog.records), 3.0)
    ours = [r for r in caplog.records if r.getMessage().startswith("scheduled_job_failed job=boom")]
    assert len(ours) == 1 and ours[0].exc_info is not None
    assert not _apscheduler_lines(caplog)


def test_a_failing_tick_keeps_running_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    from sidecar.daemon.schedule import Pacer  # new with the monotonic driver

    calls = []

    def fail() -> None:
        calls.append(1)
        raise RuntimeError("same fault")

    stop = threading.Event()
    pacer = Pacer("tick", 0.01, fail, stop)
    pacer.start()
    assert _wait(lambda: len(calls) >= 20, 3.0)
    stop.set()
    pacer.join(1.0)
    failed = [r for r in caplog.records if r.name == schedule_module.__name__]
    assert len(failed) == 1 and "scheduled_job_failed job=tick" in failed[0].getMessage()


def test_a_pacer_whose_own_sleep_fails_logs_it_and_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pacer's pause raising (not its job) ended the thread for good: the clock check and
    every tick after it never ran again. It is logged as a failed run and the ticks go on."""
    from sidecar.daemon.schedule import Pacer

    stop = threading.Event()
    calls: list[int] = []
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            raise OSError("interrupted pause")

    def tick() -> None:
        calls.append(1)
        if len(calls) == 2:
            stop.set()

    fake_time = SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.sleep = sleep
    monkeypatch.setattr(schedule_module, "time", fake_time)
    Pacer("clock", 0.001, tick, stop).run()  # in this thread: returns once stopped
    assert calls == [1, 1] and len(pauses) == 2
    failed = [r.getMessage() for r in caplog.records if r.name == schedule_module.__name__]
    assert (
        len(failed) == 1
        and "scheduled_job_failed job=clock" in failed[0]
        and "interrupted pause" in failed[0]
    )


def test_a_pacer_whose_sleep_fails_each_tick_logs_it_once_per_ten_minutes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause that fails every tick while the job succeeds: the job's success reset the one
    repeat limiter both shared, so each tick logged a full traceback (86,400 a day for the
    clock pacer). The pause's failure is limited on its own: one traceback, then a count of
    the repeats every ten minutes."""
    from sidecar.daemon.schedule import Pacer

    stop = threading.Event()
    calls: list[int] = []
    mono = [1000.0]

    def sleep(_seconds: float) -> None:
        raise ValueError("sleep length must be non-negative")

    def tick() -> None:
        calls.append(1)
        mono[0] += 61.0  # each tick a minute on (steady clock)
        if len(calls) == 20:
            stop.set()

    fake_time = SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.monotonic = lambda: mono[0]
    monkeypatch.setattr(schedule_module, "time", fake_time)
    Pacer("clock", 0.001, tick, stop, sleep=sleep).run()
    assert len(calls) == 20
    failed = [r for r in caplog.records if r.name == schedule_module.__name__]
    assert [r.getMessage().split(" error=")[0] for r in failed] == [
        "scheduled_job_failed job=clock part=pause repeats=0",
        "scheduled_job_failed job=clock part=pause repeats=9",
    ]
    assert failed[0].exc_info is not None


def test_watchdog_pings_even_if_the_status_line_fails(tmp_path: Path) -> None:
    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={"WATCHDOG_USEC": "1000000"})
    sent: list[str] = []
    notifier = SimpleNamespace(enabled=True, send=sent.append)
    dog = Watchdog(cfg, notifier)  # type: ignore[arg-type]

    def status() -> str:
        raise OSError("database is locked")

    dog.notify(status)
    assert sent == ["WATCHDOG=1"]


def test_a_job_that_cannot_be_moved_leaves_the_others_realigned(
    wall: WallClock, runs: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job whose move fails after a clock step is logged; the others are still re-aimed (an
    error there left every later job at the old clock)."""
    from apscheduler.job import Job

    counts, schedule = runs
    real_modify = Job.modify

    def modify(self: Job, **changes: Any) -> None:
        if self.id == "daily":
            raise RuntimeError("a job store that fails")
        real_modify(self, **changes)

    monkeypatch.setattr(Job, "modify", modify)
    assert _wait(lambda: counts["tick"] >= 1, 3.0)
    wall.offset = -3600.0
    assert _wait(lambda: "clock_realign_failed job=daily" in caplog.text, 5.0)
    now = real_dt.datetime.fromtimestamp(wall.time(), real_dt.UTC)
    for job in schedule.scheduler.get_jobs():
        if job.id != "daily":
            assert job.next_run_time - now <= job.trigger.interval, job.id


def test_the_daily_housekeeping_first_runs_ten_minutes_after_the_start(runs: Any) -> None:
    """Not 24 h after the start: a daemon restarted every day (a laptop) never got to it, and its
    prepared model copies were never tidied (sidecar.model.prepared)."""
    _, schedule = runs
    now = real_dt.datetime.now(real_dt.UTC)
    due = schedule.scheduler.get_job("daily").next_run_time - now
    assert real_dt.timedelta(minutes=9) < due <= real_dt.timedelta(minutes=10)


def test_the_daily_job_gives_the_manifests_free_pages_back_and_outlives_its_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler's daily job is the daemon's housekeeping, which gives the manifest's free
    pages back (``Manifest.give_back``, its steps yielding to searches). A failure of it is
    logged and nothing else: the schedule and the job go on, and the next run tries again."""
    import sqlite3

    from sidecar.daemon.lifecycle import Daemon
    from sidecar.runtime.steadyclock import SteadyClock
    from sidecar.stores.manifest import Manifest

    caplog.set_level(logging.INFO)
    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={})
    daemon = Daemon(cfg)
    manifest = Manifest(tmp_path / "m.sqlite")
    real = manifest.give_back
    ran = threading.Semaphore(0)
    fault: list[BaseException] = []
    betweens: list[Any] = []

    def give_back(between: Callable[[], object] = lambda: None) -> int:
        betweens.append(between)
        if fault:
            raise fault.pop()
        return real(between)

    manifest.give_back = give_back  # type: ignore[method-assign]
    daemon.parts = SimpleNamespace(  # type: ignore[assignment]
        stores=SimpleNamespace(manifest=manifest), clock=SteadyClock(None)
    )
    nothing = SimpleNamespace(schedule_sweep=lambda: None, sweep_roots=lambda _: None, polled=lambda: False)
    schedule = build_scheduler(
        cfg,
        nothing,  # type: ignore[arg-type]
        SimpleNamespace(due=lambda poll_all=False: []),  # type: ignore[arg-type]
        SimpleNamespace(tick=lambda: None),  # type: ignore[arg-type]
        vectors=SimpleNamespace(),  # type: ignore[arg-type]
        retry_embedder=lambda: None,
        notify=None,
        daily=daemon._daily,
    )
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED

    def ended(event: Any) -> None:  # the run ended (a run still going skips the next one)
        if event.job_id == "daily":
            ran.release()

    schedule.scheduler.add_listener(ended, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    schedule.start()
    try:
        job = schedule.scheduler.get_job("daily")

        def run_now() -> None:
            job.modify(next_run_time=real_dt.datetime.now(schedule.scheduler.timezone))
            assert ran.acquire(timeout=30)

        run_now()
        assert len(betweens) == 1 and callable(betweens[0])  # searches get their turn between steps
        for exc in (sqlite3.OperationalError("disk I/O error"), RuntimeError("unforeseen")):
            fault.append(exc)
            run_now()
        assert "scheduled_job_failed job=daily error=RuntimeError('unforeseen')" in caplog.text
        assert "manifest_give_back_failed error=disk I/O error" in caplog.text
        assert schedule.scheduler.running
        due = schedule.scheduler.get_job("daily").next_run_time - real_dt.datetime.now(real_dt.UTC)
        assert due > real_dt.timedelta(hours=23)  # tried again the next day
        run_now()  # and runs again
        assert len(betweens) == 4
    finally:
        schedule.shutdown()
        manifest.close()


@pytest.mark.parametrize("zone", ["<+0530>-5:30", "Europe/Berln"])
def test_a_time_zone_the_database_does_not_know_runs_the_schedule_in_utc(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, zone: str
) -> None:
    """TZ a POSIX rule or a misspelled name (glibc reads it its own way): the scheduler's zone
    lookup raised ZoneInfoNotFoundError, and `sidecar serve` exited at every start (a service
    restarted every 5 s for ever). Its jobs run on intervals: in UTC, said once in the log."""
    import tzlocal.unix

    monkeypatch.setenv("TZ", zone)
    monkeypatch.setattr(tzlocal.unix, "_cache_tz", None)  # tzlocal keeps the first zone it found
    caplog.set_level(logging.WARNING, logger="sidecar.daemon.schedule")
    nothing = SimpleNamespace(schedule_sweep=lambda: None, sweep_roots=lambda _: None, polled=lambda: False)
    schedule = build_scheduler(
        load_config(flags={"home": "/nonexistent"}, env={}),
        nothing,  # type: ignore[arg-type]
        SimpleNamespace(due=lambda poll_all=False: []),  # type: ignore[arg-type]
        SimpleNamespace(tick=lambda: None),  # type: ignore[arg-type]
        vectors=SimpleNamespace(),  # type: ignore[arg-type]
        retry_embedder=lambda: None,
        notify=None,
        daily=lambda: None,
    )
    assert schedule.scheduler.timezone == real_dt.UTC
    assert f"scheduler_zone_unknown tz={zone!r} zone=UTC" in caplog.text
    schedule.start()
    schedule.shutdown()


def test_serve_runs_with_a_time_zone_the_database_does_not_know(tmp_path: Path) -> None:
    """A plain `sidecar serve` under such a TZ answers (it exited with status 1 at its start)."""
    from tests.daemon_process import DaemonProcess

    d = DaemonProcess(tmp_path / "home", None, keyword_only=True, env={"TZ": "<+0530>-5:30"})
    try:
        d.start()
        assert d.health()["index"]["state"] == "ready"
    finally:
        d.kill()
    assert "scheduler_zone_unknown" in d.log.read_text()


def _running_job(schedule: Any) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A tracked ``optimize`` run in progress (on its own thread, as the scheduler's pool runs
    it): it ends at the stop (a rewrite's rollback) or once released."""
    began, release = threading.Event(), threading.Event()

    def work() -> None:
        began.set()
        while not (schedule.stop.is_set() or release.is_set()):
            release.wait(0.01)

    job = threading.Thread(target=schedule.tracked("optimize", work), daemon=True)
    job.start()
    assert began.wait(5)
    return job, began, release


def test_the_stop_waits_for_a_running_optimize_before_the_stores_close(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's stop joins a scheduled optimize in progress (its keyword rewrite rolls back
    at the stop) before it closes the stores: it went on reading the manifest as the stores
    closed and died of a closed database. One still running past the stop's bound is logged
    and left (not marked clean: the next start checks as after a crash)."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from sidecar.daemon import lifecycle
    from sidecar.daemon.schedule import Schedule

    daemon = lifecycle.Daemon(make_cfg(vault))
    daemon.parts = SimpleNamespace(vectors=SimpleNamespace(stop_builds=lambda: None))  # type: ignore[assignment]
    schedule = daemon._scheduler = Schedule(BackgroundScheduler())
    job, _began, _release = _running_job(schedule)
    daemon.stop_clock.begin()
    schedule.shutdown()
    assert daemon._join_workers() is False
    assert not job.is_alive()  # ended (rolled back) before the join returned
    assert schedule.join(0) == []
    # A run dispatched after the stop does not begin.
    ran: list[int] = []
    schedule.tracked("optimize", lambda: ran.append(1))()
    assert ran == []
    # Past the bound: logged, left, the stop not marked clean.
    monkeypatch.setattr(lifecycle, "_JOIN_TIMEOUT", 0.0)
    daemon = lifecycle.Daemon(make_cfg(vault))
    daemon.parts = SimpleNamespace(vectors=SimpleNamespace(stop_builds=lambda: None))  # type: ignore[assignment]
    schedule = daemon._scheduler = Schedule(BackgroundScheduler())
    monkeypatch.setattr(schedule, "stop", threading.Event())  # a run that does not look at it
    job, _began, release = _running_job(schedule)
    daemon.stop_clock.begin()
    try:
        with caplog.at_level("WARNING"):
            assert daemon._join_workers() is True
        assert "shutdown_timeout thread=scheduler jobs=optimize" in caplog.text
    finally:
        release.set()
        job.join(5)
    assert schedule.join(5) == []


def test_the_stop_waits_for_the_keyword_part_of_optimize_only() -> None:
    """The stop's join waits for the keyword rewrites (they roll back at the stop), not for the
    vector tables' compaction, which does not look at the stop: waiting for it spent the stop's
    time bound there, logged a timeout and left the stop not clean."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from sidecar.daemon.schedule import Schedule, optimize

    schedule = Schedule(BackgroundScheduler())
    in_vectors, in_keyword, release, vectors_done = (threading.Event() for _ in range(4))

    def vectors_optimize() -> None:
        in_vectors.set()
        assert vectors_done.wait(5)

    def deleted_docs() -> tuple[int, int]:  # the keyword part's first look
        in_keyword.set()
        assert release.wait(5)
        return 0, 0

    bm25 = SimpleNamespace(deleted_docs=deleted_docs, read_only=True, unavailable=None)
    vectors = SimpleNamespace(
        optimize=vectors_optimize,
        stores=SimpleNamespace(
            bm25=bm25,
            upgrading=False,
            look_for_flags=lambda: None,
            keyword_backoff=None,
            keyword_backoff_of=None,
        ),
    )
    job = threading.Thread(
        target=lambda: optimize(vectors, schedule.stop, schedule.tracked),  # type: ignore[arg-type]
        daemon=True,
    )
    job.start()
    try:
        assert in_vectors.wait(5)
        assert schedule.join(0) == []  # the vector tables' compaction: not waited for
        vectors_done.set()
        assert in_keyword.wait(5)
        assert schedule.join(0) == ["optimize"]  # the keyword part: waited for
    finally:
        vectors_done.set()
        release.set()
        job.join(5)
    assert schedule.join(5) == []


def test_the_stop_waits_for_the_daily_housekeeping_in_progress(tmp_path: Path) -> None:
    """The daily housekeeping writes the manifest a step at a time: the stop waits for a run in
    progress (``join``) before the stores close; it was not tracked, and its next step met the
    closed manifest. A run dispatched after the stop does not begin."""
    began, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def daily() -> None:
        ran.append(1)
        began.set()
        release.wait(5)

    nothing = SimpleNamespace(schedule_sweep=lambda: None, sweep_roots=lambda _: None, polled=lambda: False)
    schedule = build_scheduler(
        load_config(flags={"home": str(tmp_path / "home")}, env={}),
        nothing,  # type: ignore[arg-type]
        SimpleNamespace(due=lambda poll_all=False: []),  # type: ignore[arg-type]
        SimpleNamespace(tick=lambda: None),  # type: ignore[arg-type]
        vectors=SimpleNamespace(),  # type: ignore[arg-type]
        retry_embedder=lambda: None,
        notify=None,
        daily=daily,
    )
    job = schedule.scheduler.get_job("daily")
    run = threading.Thread(target=job.func, daemon=True)  # as the scheduler's pool runs it
    run.start()
    assert began.wait(5)
    schedule.shutdown()
    assert schedule.join(0) == ["daily"]  # the stop's join sees it running
    release.set()
    run.join(5)
    assert schedule.join(0) == []
    job.func()  # dispatched after the stop: not begun
    assert ran == [1]
