"""Health's word on the first sweep: "idle" (and "ready") only with every root's notes counted.

A client waits for ``index.first_sweep_done`` or ``index.phase == "idle"`` and then reads the
counts (the tests, the benchmarks, `sidecar serve` in a terminal). Real stores and a real server in this
process; the moments that matter are ordered with events, not sleeps.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.clients.foreground import Summary
from sidecar.daemon.indexing import IndexLoop
from tests.conftest import KEYWORD_ONLY, Harness
from tests.in_process import InProcessServer

WAIT_S = 30.0  # against a hang only: every wait below ends at an event


@pytest.fixture
def unswept(make_cfg: Any, vault: Path) -> Iterator[tuple[Harness, InProcessServer]]:
    """The small vault's stores, nothing indexed yet, served in this process (keyword only)."""
    h = Harness(make_cfg(vault), KEYWORD_ONLY)
    server = InProcessServer(h)
    try:
        yield h, server
    finally:
        try:
            server.close()
        finally:
            h.close()


def _index(server: InProcessServer) -> dict[str, Any]:
    index: dict[str, Any] = server.call("health")["index"]
    return index


@contextlib.contextmanager
def _counted_mid_batch(manifest: Any) -> Iterator[tuple[threading.Event, threading.Event, threading.Event]]:
    """The first batch written holds after its intent rows until a count of the notes was taken
    (``counted``); that count's caller (health) holds after it until the test sets ``swept``.
    Yields (marked, counted, swept); the manifest as it was after the block."""
    marked, counted, swept = threading.Event(), threading.Event(), threading.Event()
    real_mark, real_counts = manifest.mark, manifest.counts

    def mark(records: Any) -> None:  # the batch's intent rows written, its notes not yet
        real_mark(records)
        if not marked.is_set():
            marked.set()
            assert counted.wait(WAIT_S), "health did not count"

    def counts() -> dict[str, Any]:  # health's counts taken mid-batch; answered after the sweep
        got = real_counts()
        if marked.is_set() and not counted.is_set():
            counted.set()
            assert swept.wait(WAIT_S), "the sweep did not end"
        return got

    manifest.mark, manifest.counts = mark, counts
    try:
        yield marked, counted, swept
    finally:
        swept.set()
        manifest.mark, manifest.counts = real_mark, real_counts


def _asked_meanwhile(server: InProcessServer) -> tuple[threading.Thread, list[dict[str, Any]]]:
    """Health asked on a thread of its own: the thread and where its answer's index goes."""
    answer: list[dict[str, Any]] = []
    asking = threading.Thread(target=lambda: answer.append(_index(server)), name="health")
    asking.start()
    return asking, answer


def _health_mid_first_sweep(h: Harness, server: InProcessServer) -> dict[str, Any]:
    """Health asked while the first sweep writes its first batch, its counts taken mid-batch and
    answered after the sweep ended: that answer's index."""
    with _counted_mid_batch(h.stores.manifest) as (marked, counted, swept):
        sweep = threading.Thread(target=h.indexer.sweep, name="sweep")
        sweep.start()
        assert marked.wait(WAIT_S)
        asking, answer = _asked_meanwhile(server)
        assert counted.wait(WAIT_S)
        sweep.join(WAIT_S)
        act = h.indexer.activity
        assert not sweep.is_alive() and act.phase == "idle" and act.first_sweep_done
        swept.set()
        asking.join(WAIT_S)
    (idx,) = answer
    return idx


def test_health_read_while_the_first_sweep_ends_says_idle_only_over_its_notes(
    unswept: tuple[Harness, InProcessServer],
) -> None:
    """A health request that counts the notes mid-batch and is answered after the sweep ended
    says the sweep under way, not "idle" beside none of its notes (the counts read first, the
    phase after them: one run of the broken-notes test saw idle with 0 of 6 notes)."""
    h, server = unswept
    idx = _health_mid_first_sweep(h, server)
    assert idx["files"] == 0  # counted mid-batch: the moment under test
    assert (idx["phase"], idx["sweeps"], idx["state"]) == ("indexing", 0, "building"), idx
    after = _index(server)
    assert (after["phase"], after["sweeps"], after["state"], after["files"]) == ("idle", 1, "ready", 4)


def test_health_read_while_an_asked_sweep_ends_says_it_done_only_over_its_notes(
    unswept: tuple[Harness, InProcessServer],
) -> None:
    """`sidecar index` prints the counts of the health that says its request's sweep is done
    (``asked_done``): one that counted mid-batch and was answered after the sweep ended does
    not say it done beside none of its notes."""
    h, server = unswept
    stop, done = threading.Event(), threading.Event()
    tickets: list[int] = []

    def beat(_activity: Any) -> None:
        # The loop beats (the watchdog's wiring) at the top of each round, so after the round
        # that counted the asked sweep done.
        if tickets and loop.asked_done >= tickets[0]:
            done.set()

    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=stop, beat=beat)
    service = server.handlers.service
    service.asked_done = lambda: loop.asked_done  # as the daemon wires it
    running = threading.Thread(target=loop.run, name="indexer", daemon=True)
    running.start()
    try:
        with _counted_mid_batch(h.stores.manifest) as (marked, counted, swept):
            ticket = loop.request_sweep()
            tickets.append(ticket)
            assert marked.wait(WAIT_S)
            asking, answer = _asked_meanwhile(server)
            assert counted.wait(WAIT_S)
            assert done.wait(WAIT_S), "the asked sweep did not end"
            swept.set()
            asking.join(WAIT_S)
    finally:
        stop.set()
        running.join(WAIT_S)
    (idx,) = answer
    assert idx["files"] == 0  # counted mid-batch: the moment under test
    assert idx["asked_done"] < ticket, idx
    after = _index(server)
    assert after["asked_done"] == ticket and after["files"] == 4


@pytest.mark.parametrize(
    "first",
    [
        pytest.param({"only": frozenset(), "paths": ["Garden.md"]}, id="file-event-paths"),
        pytest.param({"only": frozenset({"wiki"})}, id="one-root"),
    ],
)
def test_a_sweep_of_paths_or_some_roots_before_the_first_whole_one_is_not_the_first(
    unswept: tuple[Harness, InProcessServer], vault: Path, first: dict[str, Any]
) -> None:
    """A sweep of file events' paths, or of some roots (a share's poll), that runs before the
    start's sweep of every root leaves the other notes unread: health says "starting" and
    "building", not "idle" and "ready", until a sweep of every root ends (which then does the
    first sweep's own work: the links resolved, the keyword index checked)."""
    h, server = unswept
    paths = [str(vault / p) for p in first.get("paths", ())]
    h.indexer.sweep(only=first["only"], paths=paths)
    idx = _index(server)
    assert idx["sweeps"] == 1 and idx["files"] < 4
    assert (idx["phase"], idx["state"]) == ("starting", "building"), idx
    assert not h.indexer.activity.first_sweep_done
    h.indexer.sweep()
    idx = _index(server)
    assert (idx["phase"], idx["state"], idx["files"], idx["sweeps"]) == ("idle", "ready", 4, 2)
    assert h.indexer.activity.first_sweep_done and not h.indexer.writer.defer_links


@contextlib.contextmanager
def _held_after_mark(manifest: Any) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The next batch written holds after its intent rows until the test sets ``go``.
    Yields (marked, go); the manifest as it was after the block."""
    marked, go = threading.Event(), threading.Event()
    real_mark = manifest.mark

    def mark(records: Any) -> None:
        real_mark(records)
        if not marked.is_set():
            marked.set()
            assert go.wait(WAIT_S), "the test did not let the batch go"

    manifest.mark = mark
    try:
        yield marked, go
    finally:
        go.set()
        manifest.mark = real_mark


def _index_line(health: dict[str, Any]) -> str:
    return next(line for line in render_status(health).splitlines() if line.startswith("Index:"))


def test_while_the_first_whole_sweep_runs_after_a_sweep_of_paths_health_says_it_is_not_done(
    unswept: tuple[Harness, InProcessServer], vault: Path
) -> None:
    """A sweep of a file event's path ended before the start's sweep of every root: while that
    sweep runs (``sweeps`` already 1, phase ``indexing``) health says the first sweep is not
    done, `sidecar serve` says no "keyword search ready" (it said "ready: 1 notes" of 4, once
    and never the real count), and neither status nor the summary shows the path sweep's
    progress as the build's (status said "building (starting 1/1 notes)")."""
    h, server = unswept
    summary = Summary(clock=lambda: 0.0)
    h.indexer.sweep(only=frozenset(), paths=[str(vault / "Garden.md")])
    health = server.call("health")
    idx = health["index"]
    assert (idx["phase"], idx["sweeps"], idx["files"], idx["first_sweep_done"]) == ("starting", 1, 1, False)
    assert (idx["progress"]["done"], idx["progress"]["total"]) == (0, 0), idx["progress"]
    assert "1/1" not in _index_line(health)
    said = summary.lines(health)
    with _held_after_mark(h.stores.manifest) as (marked, go):
        sweep = threading.Thread(target=h.indexer.sweep, name="sweep")
        sweep.start()
        assert marked.wait(WAIT_S)
        health = server.call("health")
        idx = health["index"]
        assert (idx["phase"], idx["sweeps"], idx["first_sweep_done"]) == ("indexing", 1, False), idx
        said += summary.lines(health)
        go.set()
        sweep.join(WAIT_S)
    assert not sweep.is_alive()
    text = "\n".join(said)
    assert "keyword search ready" not in text, text
    assert "reading 1 notes" not in text and "reading 3 notes" in text, text  # Garden.md is read
    health = server.call("health")
    assert (health["index"]["phase"], health["index"]["first_sweep_done"]) == ("idle", True)
    assert "keyword search ready: 4 notes" in "\n".join(summary.lines(health))


def test_health_says_the_first_sweep_done_after_the_first_whole_sweep(
    unswept: tuple[Harness, InProcessServer],
) -> None:
    """``first_sweep_done`` is false before any sweep and during the first, true after it, and
    read before the counts: true only beside every note it wrote."""
    h, server = unswept
    assert _index(server)["first_sweep_done"] is False
    idx = _health_mid_first_sweep(h, server)
    assert (idx["files"], idx["first_sweep_done"]) == (0, False), idx
    after = _index(server)
    assert (after["files"], after["first_sweep_done"]) == (4, True)
