"""The one runner of bounded work (``timeout.run_with_timeout``): each call of the work waited for
on its own, not their sum, whether the work tells its calls through its ``Asking`` (a scan, a
watch's walk, a request's look) or by ``step()`` deep in code that has none (a memory change's
fsync and rename); one call held past its bound is given up on. The slow calls are stand-ins:
the clock is set ahead and the call goes on once the waiter has read it; nothing is timed."""

from __future__ import annotations

import threading

import pytest

from sidecar.vault import sources as sources_module
from sidecar.vault import timeout as timeout_module
from sidecar.vault.sources import Asking, asked
from sidecar.vault.timeout import run_with_timeout, step
from tests.share_hangs import SupervisorClock


def _clock(monkeypatch: pytest.MonkeyPatch) -> SupervisorClock:
    """One clock for the waiter and for the calls' start, set ahead by the test."""
    clock = SupervisorClock()
    monkeypatch.setattr(timeout_module, "time", clock)
    monkeypatch.setattr(sources_module, "time", clock)
    return clock


def test_work_whose_calls_each_answer_in_time_is_waited_for_past_their_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change's calls told by ``step()`` (no ``Asking`` at hand), each 0.3 s against a bound
    of 1 s, five of them: the work ends and its answer comes (bounded as a sum, it was given up
    on at the fourth)."""
    clock = _clock(monkeypatch)
    asking = Asking()

    def change() -> str:
        with asked(asking, "writing", "plan.md"):
            for _ in range(5):
                step()  # the next call (a fsync, a rename) begins
                clock.past(0.3)  # it answers 0.3 s later, judged so by the waiter
        return "written"

    value, stuck = run_with_timeout(change, 600, "t", calls=asking, per_call=1.0)
    assert (value, stuck) == ("written", None)
    assert clock.ahead == pytest.approx(1.5)


def test_work_one_of_whose_calls_does_not_answer_is_given_up_on_and_left_in_its_call() -> None:
    """One call held past the per-call bound: the wait ends with the thread still in the call
    (for the caller to mark the root hanging), not after the whole deadline; let go, that
    thread ends, and ``step`` in it never ends the work (a change given up on runs to its end)."""
    asking = Asking()
    release, ended = threading.Event(), threading.Event()

    def work() -> None:
        with asked(asking, "listing", "."):
            release.wait(30)
            step()  # after the waiter left: no error, the work goes on
        ended.set()

    try:
        value, stuck = run_with_timeout(work, 600, "t", calls=asking, per_call=0.2)
        assert value is None and stuck is not None and stuck.is_alive()
        assert asking.now is not None and asking.now[:2] == ("listing", ".")
    finally:
        release.set()
    assert ended.wait(20)


def test_step_outside_bounded_work_does_nothing() -> None:
    """``step`` in a thread that runs no bounded work (a memory change in a test, a tool): no
    error, nothing told."""
    step()
    value, stuck = run_with_timeout(lambda: (step(), 3)[1], 5, "t")  # bounded, without calls
    assert (value, stuck) == (3, None)
