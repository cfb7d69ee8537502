"""How long a long sweep or backfill still takes, as status and `sidecar index` say it: the sweep's
notes per second and the time left, a rough estimate said to be rough while the pace settles (a
first vector estimate of 13h 41m was 3h 57m later). Clocks are injected, nothing is timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.clients import cli_admin
from sidecar.clients.cli_render import render_status
from sidecar.daemon.health_op import _sweep_pace
from sidecar.runtime.pace import SWEEP, VECTORS, Pace
from tests.conftest import FakeEmbedder, Harness, write


def test_a_pace_is_rough_until_enough_steps_agree() -> None:
    """Rough with few steps or seconds; settled once both halves of the window agree; rough again
    when the pace changes (a host that got busy)."""
    pace = Pace(8, VECTORS)
    assert pace.rate is None and pace.rough
    pace.add(256, 60.0)
    assert pace.rate == 256 / 60 and pace.rough  # one batch: a figure, but a rough one
    for _ in range(3):
        pace.add(256, 60.0)
    assert not pace.rough
    for _ in range(4):
        pace.add(256, 180.0)  # three times slower now
    assert pace.rough
    for _ in range(4):
        pace.add(256, 180.0)
    assert not pace.rough and pace.rate == 256 / 180


def test_a_sweep_has_no_pace_in_its_first_seconds() -> None:
    pace = Pace(32, SWEEP)
    pace.add(128, 4.0)
    assert pace.rate is None  # a quick sweep never shows a figure
    pace.add(128, 6.0)
    assert pace.rate == 25.6


def test_a_quick_sweeps_pace_counts_from_its_beginning() -> None:
    """32 batches of 0.25 s never added up to the 10 s before a figure, nor the 30 s to settle: a
    sweep of many quick batches showed no pace for as long as it ran. The seconds since it began
    count."""
    pace = Pace(32, SWEEP)
    for _ in range(100):
        pace.add(2, 0.25)
    assert pace.rate == 8.0  # 25 s since it began
    assert pace.rough  # not 30 s yet
    for _ in range(40):
        pace.add(2, 0.25)
    assert not pace.rough  # 35 s, each half of the window at 8 a second


def test_a_pace_read_while_a_step_is_added() -> None:
    """The health thread reads the pace while the work's thread adds a step: reading a deque that
    changes meanwhile raised "deque mutated during iteration". A step is added part-way through
    each read here (by a trace hook, at a line of the read's summing)."""
    import sys

    from sidecar.runtime import pace as pace_mod

    pace = Pace(8, VECTORS)
    for _ in range(8):
        pace.add(256, 30.0)
    added: list[int] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and len(added) < 6:  # in the summing's loop too
            added.append(1)
            pace.add(256, 30.0)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code is pace_mod._sum.__code__ else None

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        rate = pace.rate
        rough = pace.rough
    finally:
        sys.settrace(before)
    assert added and rate == 256 / 30 and not rough


def test_a_sweep_reports_its_pace_in_health(make_cfg: Any, tmp_path: Path) -> None:
    """Each batch of a sweep counts into its pace by the activity's clock: health's progress has
    the notes per second once there are ten seconds of work, rough while few batches."""
    vault = tmp_path / "v"
    for i in range(12):
        write(vault / f"n{i}.md", f"# Note {i}\n\nWords of note {i}.\n")
    h = Harness(make_cfg(vault, **{"index.batchFiles": 2}), FakeEmbedder())
    try:
        now = [0.0]

        def clock() -> float:
            now[0] += 2.5  # each look at the clock: 2.5 s later
            return now[0]

        h.indexer.activity.clock = clock
        seen: list[dict[str, Any]] = []
        h.indexer.sweep(progress=lambda act: seen.append(_sweep_pace(act)))
        assert seen[0] == {"notes_per_second": None, "rough": None}  # 2.5 s of work: no figure
        assert seen[-1] == {"notes_per_second": 0.8, "rough": True}  # 2 notes per 2.5 s, 6 batches
        assert _sweep_pace(h.indexer.activity)["notes_per_second"] is None  # idle: no pace
    finally:
        h.close()


def _health(progress: dict[str, Any], **index: Any) -> dict[str, Any]:
    return {
        "version": "x", "started": 0, "pid": 1, "socket": "s", "home": "h", "vault": None,
        "index": {"state": "building", "phase": "indexing", "progress": progress, "files": 11520,
                  "chunks": 900, "by_source": {}, "skipped": {}, "pending_vectors": 0, **index},
        "embedder": {"state": "ok", "model": "m", "origin": "o"},
        "vectors": {}, "roots": [],
    }  # fmt: skip


def test_status_says_the_sweeps_pace_and_time_left() -> None:
    """It said "indexing 11,520/17,162 notes" alone: 5 minutes could not be told from 5 hours."""
    rough = _health({"done": 11520, "total": 17162, "notes_per_second": 42.4, "rough": True})
    assert (
        "Index: building (indexing 11,520/17,162 notes, 42 a second, about 2m 13s left "
        "(a rough estimate: the pace is still settling))" in render_status(rough)
    )
    settled = _health({"done": 11520, "total": 17162, "notes_per_second": 42.4, "rough": False})
    assert "Index: building (indexing 11,520/17,162 notes, 42 a second, about 2m 13s left)" in render_status(
        settled
    )
    early = _health({"done": 128, "total": 17162, "notes_per_second": None, "rough": None})
    assert "Index: building (indexing 128/17,162 notes)" in render_status(early)


def test_status_says_a_slow_sweeps_pace_in_two_digits() -> None:
    """A sweep of a note every half minute read "0.0 a second"; a rate that small is not rounded
    away in health either (no figure, no time left)."""
    from sidecar.index.activity import Activity

    slow = _health({"done": 120, "total": 17162, "notes_per_second": 0.034, "rough": False})
    assert "(indexing 120/17,162 notes, 0.034 a second, about 139h 13m left)" in render_status(slow)
    some = _health({"done": 120, "total": 17162, "notes_per_second": 4.24, "rough": False})
    assert "(indexing 120/17,162 notes, 4.2 a second, about 1h 6m left)" in render_status(some)
    act = Activity(phase="indexing")
    act.pace.add(1, 250.0)  # a note in 250 s
    assert _sweep_pace(act)["notes_per_second"] == 0.004


def test_status_says_a_first_vector_estimate_is_rough() -> None:
    health = _health(
        {"done": 0, "total": 0},
        phase="idle",
        state="building",
        pending_vectors=179286,
        embed_rate_chunks_per_second=3.64,
        embed_rate_rough=True,
    )
    assert (
        "179,286 chunks waiting for vectors, about 13h 40m left (a rough estimate: the pace is still "
        "settling)" in render_status(health)
    )
    health["index"]["embed_rate_rough"] = False
    assert "179,286 chunks waiting for vectors, about 13h 40m left; keyword" in render_status(health)


class _Bar:
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, line: str) -> None:
        self.said.append(line)

    def update(self, *_a: Any) -> None:
        pass


def test_index_says_how_long_it_waits_for_vectors(monkeypatch: Any) -> None:
    """`sidecar index` waited hours for vectors saying only how many: the time left comes once the
    daemon has a pace, then every VECTOR_ETA_EVERY_S."""
    now = [0.0]

    class FakeTime:
        @staticmethod
        def monotonic() -> float:
            return now[0]

        @staticmethod
        def sleep(seconds: float) -> None:
            now[0] += 100.0  # each poll: 100 s later

    monkeypatch.setattr(cli_admin, "time", FakeTime)
    answers = [
        {"pending_vectors": 7200, "embed_rate_chunks_per_second": None},
        {"pending_vectors": 7000, "embed_rate_chunks_per_second": 2.0, "embed_rate_rough": True},
        *({"pending_vectors": 7000 - 200 * i, "embed_rate_chunks_per_second": 2.0} for i in range(1, 8)),
        {"pending_vectors": 0},
    ]
    healths = [
        {"index": {"chunks": 9000, **a}, "embedder": {"state": "ok"}, "problems": {"active": []}}
        for a in answers
    ]

    class Client:
        def call(self, op: str) -> dict[str, Any]:
            return healths.pop(0)

    bar = _Bar()
    cli_admin._wait_for_vectors(Client(), bar, healths.pop(0), asked=0.0)  # type: ignore[arg-type]
    assert bar.said[0].startswith("computing the vectors of 7,200 chunks, so that")
    assert bar.said[1] == (
        "vectors: 7,000 chunks still to compute, about 58m 20s left (a rough estimate: the pace is "
        "still settling)"
    )
    assert bar.said[2:] == ["vectors: 5,800 chunks still to compute, about 48m 20s left"]  # 600 s later


def test_serve_says_its_first_vector_estimate_is_rough() -> None:
    """`sidecar serve`'s "vectors: … left" line is rough while the daemon's pace is."""
    from sidecar.clients.foreground import Summary

    clock = iter(float(t) for t in range(0, 10_000, 70))
    s = Summary(clock=lambda: next(clock))

    def health(pending: int, rough: bool) -> dict[str, Any]:
        h = _health(
            {"done": 10, "total": 10},
            phase="embedding",
            sweeps=1,
            pending_vectors=pending,
            first_sweep_done=True,
        )
        h["index"].update(chunks=1000, embed_rate_chunks_per_second=2.0, embed_rate_rough=rough)
        h["vectors"] = {"serving": "t"}
        return h

    said = [*s.lines(health(1000, True)), *s.lines(health(900, True)), *s.lines(health(800, False))]
    said += s.lines(health(700, False))
    vectors = [line for line in said if line.startswith("vectors:") and "left" in line]
    assert vectors[0].endswith("left (a rough estimate: the pace is still settling)"), vectors
    assert vectors[-1].endswith("left"), vectors
