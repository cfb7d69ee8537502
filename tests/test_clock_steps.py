"""Steps of the wall clock end no wait early: .trash keeps its texts and a mass-deletion hold
lasts its time in real time (a step ahead emptied both at once); status words a step back."""

from __future__ import annotations

import os
import shutil
import time
import types
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients import cli_render
from sidecar.memory import inbox as inbox_mod
from sidecar.memory.inbox import Inboxes
from sidecar.runtime import steadyclock
from sidecar.runtime.steadyclock import SteadyClock
from tests.conftest import FakeEmbedder, Harness, write

_DAY = 86_400.0


class _Clocks:
    """A wall clock and a steady one (epoch, reading) the test moves by hand."""

    def __init__(self) -> None:
        self.wall_now = time.time()
        self.epoch, self.reading = "boot-1", 1000.0

    def wall(self) -> float:
        return self.wall_now

    def steady(self) -> tuple[str, float]:
        return self.epoch, self.reading

    def passes(self, seconds: float) -> None:
        """Real time passes: both clocks move."""
        self.wall_now += seconds
        self.reading += seconds


def test_a_forward_clock_step_does_not_empty_the_trash(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock stepped 100 days ahead: the prune removes no kept text (it removed every
    agent's previous versions at once); after 90 days of real time it does."""
    clocks = _Clocks()
    # The module's own clock reads the faked wall clock too (what the prune read before).
    fake_time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.time = clocks.wall
    monkeypatch.setattr(inbox_mod, "time", fake_time, raising=False)
    inboxes = Inboxes(make_cfg(vault, **{"memory.trashDays": 90}))
    inboxes.clock = SteadyClock(None, wall=clocks.wall, steady=clocks.steady)
    inboxes.write("claude", "recipe", "Omas Apfelkuchen: 3 Eier", None, must_exist=False)
    inboxes.write("claude", "recipe", "Omas Apfelkuchen v2: 4 Eier", None, must_exist=False)
    trash = inboxes.cfg.agents_dir / "claude" / "memory" / ".trash"
    assert len(list(trash.iterdir())) == 1
    clocks.wall_now += 100 * _DAY  # a step: no real time passed
    clocks.passes(60)
    assert inboxes.prune_trash() == 0
    assert len(list(trash.iterdir())) == 1
    clocks.wall_now -= 100 * _DAY  # corrected back
    clocks.passes(91 * _DAY)
    assert inboxes.prune_trash() == 1
    assert list(trash.iterdir()) == []


def test_the_steady_clock_counts_real_time_across_restarts(tmp_path: Path) -> None:
    """Saved and resumed: a restart in the same boot counts the steady clock's progress, a
    reboot believes the wall clock's gap up to a week; a step while running is never counted."""
    clocks = _Clocks()
    path = tmp_path / "state" / "clock.json"
    first = SteadyClock(path, wall=clocks.wall, steady=clocks.steady)
    start = first.now()
    assert start == pytest.approx(clocks.wall_now)
    clocks.wall_now += 30 * _DAY  # a step ahead while running
    clocks.passes(3600)
    assert first.now() == pytest.approx(start + 3600)
    assert first.to_wall(start) == pytest.approx(clocks.wall_now - 3600)
    first.save()
    clocks.passes(600)  # stopped, same boot
    second = SteadyClock(path, wall=clocks.wall, steady=clocks.steady)
    assert second.now() == pytest.approx(start + 4200)
    clocks.epoch, clocks.reading = "boot-2", 5.0  # a reboot, the wall clock 200 days on
    clocks.wall_now += 200 * _DAY
    third = SteadyClock(path, wall=clocks.wall, steady=clocks.steady)
    assert third.now() == pytest.approx(start + 4200 + steadyclock.GAP_CAP_S)
    clocks.epoch = "boot-3"
    clocks.wall_now -= 400 * _DAY  # a reboot with the clock far behind: nothing counted
    fourth = SteadyClock(path, wall=clocks.wall, steady=clocks.steady)
    assert fourth.now() == pytest.approx(third.now())


def _notes(folder: Path, n: int) -> None:
    for i in range(n):
        write(folder / f"n{i}.md", f"# Note {i}\n\nText about topic {i}.\n")


def test_a_forward_clock_step_does_not_release_a_mass_deletion_hold(make_cfg: Any, vault: Path) -> None:
    """A wiki deleted inside a present vault is held as a mass deletion; the wall clock stepping
    7 h ahead does not apply it (it did within seconds); 6 h of real time does. Status shows the
    hold's start and end on the wall clock, never ahead of now after a step back."""
    _notes(vault / "wiki/Notes", 6)
    h = Harness(make_cfg(vault), FakeEmbedder())
    wall, steady = [1_000_000.0], [1_000_000.0]
    h.supervisor.clock = lambda: wall[0]
    h.supervisor.hold_clock = lambda: steady[0]
    try:
        h.sweep()
        shutil.rmtree(vault / "wiki")
        h.sweep()
        st = h.supervisor.roots["wiki"]
        assert st.hold_kind == "mass"
        wall[0] += 7 * 3600  # a step: no real time passed
        steady[0] += 30
        h.sweep()
        assert st.hold_kind == "mass"
        assert h.stores.manifest.file_states("wiki/")
        wall[0] -= 100 * _DAY  # then set far back
        hold = next(r for r in h.supervisor.describe(lambda _p: True) if r["name"] == "wiki")["hold"]
        assert hold["since"] <= wall[0]
        assert hold["applies_at"] == pytest.approx(wall[0] - 30 - 60 + 360 * 60, abs=120)
        steady[0] += 360 * 60
        h.sweep()
        assert st.hold_kind is None
        assert not h.stores.manifest.file_states("wiki/")
    finally:
        h.close()


def test_status_words_times_after_the_clock_went_back() -> None:
    """A time ahead of the client's clock (it was set back since) prints no negative age."""
    text = cli_render._ago(time.time() + 8_639_985)
    assert "-" not in text
    assert "clock" in text


def test_the_daily_prune_ages_trash_on_a_laptop_that_suspends_every_night(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every resume from suspend is a `clock_jump` to the schedule's guard; the daily run after
    one skipped pruning by age, so on a laptop closed each night .trash never aged out. Uses the
    real ClockGuard; a suspend is the monotonic clock standing still while the wall clock moves."""
    import datetime as dt

    from sidecar.daemon import schedule
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.schedule import ClockGuard

    cfg = make_cfg(vault, **{"memory.trashDays": 30})
    daemon = Daemon(cfg)
    inboxes = Inboxes(cfg)
    inboxes.write("claude", "n", "first", None, must_exist=False)
    inboxes.write("claude", "n", "second", None, must_exist=False)  # "first" kept
    trash = cfg.agents_dir / "claude" / "memory" / ".trash"
    assert len(list(trash.iterdir())) == 1
    clocks = _Clocks()  # 200 days pass, untouched (a kept text's ctime cannot be set back)
    inboxes.clock = SteadyClock(None, wall=clocks.wall, steady=clocks.steady)
    clocks.passes(200 * _DAY)
    suspended = [0.0]
    real_mono = time.monotonic
    fake = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake.monotonic = lambda: real_mono() - suspended[0]
    monkeypatch.setattr(schedule, "time", fake)
    sched = types.SimpleNamespace(wakeup=lambda: None, get_jobs=list, timezone=dt.UTC)
    guard = ClockGuard(sched)  # type: ignore[arg-type]
    daemon._scheduler = types.SimpleNamespace(guard=guard)  # type: ignore[assignment]
    daemon._inboxes = inboxes
    for _night in range(3):
        suspended[0] += 8 * 3600  # lid closed overnight: the monotonic clock stood still 8 h
        guard.check()  # the 1 s pacer notices the resume
        daemon._daily()
    assert guard.jumps == 3
    assert list(trash.iterdir()) == []


def test_a_lost_clock_file_does_not_release_a_held_mass_deletion(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady clock lags the wall clock (a step ahead); the clock file is then lost (a
    cleaned state folder, a crash): the next start read the wall clock and applied a held mass
    deletion at once. The index keeps a copy of the reading with the hold: the hold goes on."""
    from sidecar.daemon import compose
    from sidecar.vault.homeguard import clock_path

    clocks = _Clocks()
    monkeypatch.setattr(
        compose, "SteadyClock", lambda path: SteadyClock(path, wall=clocks.wall, steady=clocks.steady)
    )
    _notes(vault / "wiki/Notes", 6)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        shutil.rmtree(vault / "wiki")
        h.sweep()
        assert h.supervisor.roots["wiki"].hold_kind == "mass"
        clocks.wall_now += 5 * _DAY  # a step: the steady clock now lags by 5 days
        clocks.passes(60)
        h.sweep()
        assert h.supervisor.roots["wiki"].hold_kind == "mass"
    finally:
        h.close()
    path = clock_path(cfg)
    assert path is not None and path.exists()
    path.unlink()
    clocks.passes(60)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert h.supervisor.roots["wiki"].hold_kind == "mass"
        assert h.stores.manifest.file_states("wiki/")
        clocks.passes(360 * 60)
        h.sweep()
        assert h.supervisor.roots["wiki"].hold_kind is None
        assert not h.stores.manifest.file_states("wiki/")
    finally:
        h.close()


def test_an_unwritable_clock_file_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A clock file that cannot be written (it was silently at debug level) is said once."""
    (tmp_path / "state").write_text("a file where the folder should be")
    clock = SteadyClock(tmp_path / "state" / "clock.json")
    clock.save()
    clock.save()
    said = [r for r in caplog.records if r.getMessage().startswith("steady_clock_file_unusable op=write")]
    assert len(said) == 1


def test_the_daily_housekeeping_tidies_model_copies_once_the_models_are_settled(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """The daily run removes prepared model copies no daemon used for 30 days (sidecar.model.
    prepared), but not while a model loads: a switch loads the previous model, whose copy serves
    meanwhile, only after the new one. Its first run comes 10 minutes after the start (a daemon
    restarted every day never reached the first run 24 h on: ``test_schedule``)."""
    from sidecar.daemon.lifecycle import Daemon

    cfg = make_cfg(vault, **{"embedder.cacheDir": str(tmp_path / "cache")})
    cfg.prepared_dir.mkdir(parents=True)
    old = cfg.prepared_dir / "0123456789ab-p1-ort1.20.0.onnx"
    old.write_bytes(b"x")
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    daemon = Daemon(cfg)
    daemon.slot.set_loading()
    daemon._daily()
    assert old.exists()
    daemon.slot.set_failed("disabled by configuration", state="off")
    daemon._daily()
    assert not old.exists()


def test_the_daily_housekeeping_removes_copies_moved_aside_30_days_ago(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies of stores moved aside were removed only at a start, while status and doctor said
    "removed after 30 days": a service running for months kept a vector table's copy until its
    next restart. The daily run removes those past the 30 days (not a younger one), by the same
    clock as .trash: a forward step of the wall clock ages none."""
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.stores.aside import aside_name

    clocks = _Clocks()
    cfg = make_cfg(vault)
    cfg.index_dir.mkdir(parents=True, exist_ok=True)
    month = time.strftime("%Y%m%d-%H%M%S", time.localtime(clocks.wall_now - 31 * _DAY))
    old = cfg.index_dir / f"vectors.broken-{month}-123456"
    (old / "chunks.lance").mkdir(parents=True)
    (old / "chunks.lance" / "data").write_bytes(b"x" * 1024)
    old_newer = cfg.index_dir / f"manifest.sqlite.newer-{month}-7"
    old_newer.write_bytes(b"x")
    young = aside_name(cfg.index_dir / "bm25")
    young.mkdir()
    daemon = Daemon(cfg)
    # The parts' clock alone is read here: a stand-in for them (the manifest's give-back aside).
    daemon.parts = types.SimpleNamespace(clock=SteadyClock(None, wall=clocks.wall, steady=clocks.steady))  # type: ignore[assignment]
    monkeypatch.setattr(daemon, "_give_back_manifest", lambda: None)
    clocks.wall_now += 40 * _DAY  # a step ahead: no real time passed, nothing more ages
    daemon._daily()
    assert not old.exists() and not old_newer.exists()
    assert young.exists()
    clocks.passes(31 * _DAY)
    daemon._daily()
    assert not young.exists()


def test_a_sweep_across_a_wall_clock_step_logs_its_real_duration(
    harness: Harness, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's duration was measured by the wall clock: one that ran while the clock stepped 3
    days ahead (an NTP step, a resume) logged ``sweep_done … seconds=259221.94``, and the root's
    ``last_sweep_seconds`` alike. Here each reading of the wall clock steps it 3 days."""
    import logging

    from sidecar.index import diff as diff_mod
    from sidecar.index import indexer as indexer_mod

    real_time = time.time
    steps = [0.0]

    def stepping() -> float:
        steps[0] += 3 * _DAY
        return real_time() + steps[0]

    fake_time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.time = stepping
    monkeypatch.setattr(indexer_mod, "time", fake_time)
    monkeypatch.setattr(diff_mod, "time", fake_time)
    write(vault / "Garden.md", "# Garden\n\nCucumbers this year.\n")
    caplog.set_level(logging.DEBUG, logger="sidecar")
    harness.indexer.sweep()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sweep_done")]
    seconds = float(line.split("seconds=")[1].split()[0])
    assert 0 <= seconds < 3600, line
    took = harness.supervisor.status(harness.supervisor.roots["vault"]).last_sweep_seconds
    assert took is not None and 0 <= took < 3600


def test_uptime_and_the_tokenizer_wait_count_by_the_steady_clock(
    in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """health's ``uptime_seconds`` and ``tokenizer_wait_seconds`` were differences of wall-clock
    readings: the wall clock stepped back an hour made the uptime negative (ahead, days long).
    Both count by the steady clock now, which a step does not move."""
    service = in_process.handlers.service
    service.started += 3600  # the wall clock stepped back an hour since the start
    service.started_steady, service.steady = 500.0, lambda: 542.0
    activity = in_process.harness.indexer.activity
    steady = [1000.0]
    activity.clock = lambda: steady[0]
    seen: list[float | None] = []
    indexer = in_process.harness.indexer
    monkeypatch.setattr(indexer.slot, "counter", lambda: None)  # the tokenizer not loaded yet

    def wait(_timeout: float) -> bool:
        seen.append(activity.tokenizer_wait_since)
        steady[0] += 7.0
        health = in_process.call("health")
        seen.append(health["index"]["tokenizer_wait_seconds"])
        seen.append(health["uptime_seconds"])
        return True

    monkeypatch.setattr(indexer.slot, "wait_countable", wait)
    indexer._waited_for_tokenizer = False
    indexer._count_tokens(["a few words"])
    assert seen == [1000.0, 7.0, 42.0]


def test_health_while_switching_to_writable_keeps_the_uptime_by_the_steady_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the index is reopened for writing, health repeats its last answer with the uptime
    brought up to date: from ``started`` by the wall clock, so a step back made it negative. Now
    that answer's uptime plus the steady clock's time since."""
    from sidecar.contracts.protocol import Request
    from sidecar.daemon import readonly

    steady = [200.0]
    fake_time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.monotonic = lambda: steady[0]
    monkeypatch.setattr(readonly, "time", fake_time)
    last = {"started": time.time() + 3600, "uptime_seconds": 10.0, "problems": {}}  # a step back
    switching = readonly.SwitchingHealth(last)
    steady[0] += 5.0
    assert switching.dispatch(Request("health"))["uptime_seconds"] == 15.0


_DAILY_STEPS = ["prune trash", "tidy models", "remove old copies", "give back"]


@pytest.mark.parametrize("during", _DAILY_STEPS[:-1])
def test_a_stop_during_a_step_of_the_daily_housekeeping_begins_no_other(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, during: str
) -> None:
    """A stop asked while one of the daily housekeeping's steps runs ends it as that step ends:
    the stop waits for the job (``test_schedule``), and each later step (the model copies'
    tidy, the old copies' removal, the manifest's give-back) would be waited for too."""
    from sidecar.daemon import lifecycle
    from sidecar.daemon.lifecycle import Daemon

    daemon = Daemon(make_cfg(vault))
    steps: list[str] = []

    def step(name: str) -> Any:
        def run(*_: Any) -> None:
            steps.append(name)
            if name == during:
                daemon.stop.set()

        return run

    daemon._inboxes = types.SimpleNamespace(prune_trash=step("prune trash"))  # type: ignore[assignment]
    monkeypatch.setattr(lifecycle.prepared, "tidy", step("tidy models"))
    monkeypatch.setattr(daemon, "_models_settled", lambda: True)
    monkeypatch.setattr(daemon, "_remove_old_copies", step("remove old copies"))
    monkeypatch.setattr(daemon, "_give_back_manifest", step("give back"))
    daemon._daily()
    assert steps == _DAILY_STEPS[: _DAILY_STEPS.index(during) + 1]


def test_the_daily_housekeeping_ends_between_the_manifests_writes_at_a_stop(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop waits for the daily housekeeping (``test_schedule``), which ends at its next
    look at the stop: between two of the manifest's writes (each committed alone), and before
    a step not begun; it went on writing a manifest the stop was closing."""
    from sidecar.daemon.lifecycle import Daemon

    daemon = Daemon(make_cfg(vault))
    steps: list[str] = []

    class Manifest:
        def store_embed_heads(self, between: Any) -> int:
            steps.append("split 1")
            daemon.stop.set()  # the stop comes during the first batch
            between()
            steps.append("split 2")
            return 0

        def give_back(self, between: Any) -> int:
            steps.append("give back")
            return 0

    daemon.parts = types.SimpleNamespace(  # type: ignore[assignment]
        stores=types.SimpleNamespace(manifest=Manifest()), clock=SteadyClock(None)
    )
    removed: list[int] = []
    monkeypatch.setattr(daemon, "_remove_old_copies", lambda: removed.append(1))
    with caplog.at_level("INFO"):
        daemon._daily()
    assert steps == ["split 1"]
    assert "manifest_give_back_stopped" in caplog.text and "manifest_give_back_failed" not in caplog.text
    daemon._daily()  # stopped before it begins a step: nothing more is done
    assert steps == ["split 1"] and removed == [1]
