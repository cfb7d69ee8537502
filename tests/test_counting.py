"""health's bounded inbox counts (``BoundedCounts``): per agent, bounded in threads and memory."""

from __future__ import annotations

import threading
from typing import Any

from sidecar.memory import counting
from sidecar.memory.counting import BoundedCounts


def _counting(earlier: set[threading.Thread]) -> int:
    """The count threads started since ``earlier`` that still run (other tests' may end late)."""
    return sum(1 for t in set(threading.enumerate()) - earlier if t.name == "inbox-count")


def _figure(notes: int) -> dict[str, Any]:
    return {"notes": notes, "bytes": 0}


def test_a_hung_inbox_does_not_make_other_agents_counts_stale() -> None:
    """While agent A's count hung, every other agent's health answered its old figure (or null)
    as "the inbox did not answer (hung share?)", their own inboxes fine. Counts are one at a
    time per agent: another agent's is counted anew."""
    counts, release, earlier = BoundedCounts(), threading.Event(), set(threading.enumerate())

    def count(agent: str) -> dict[str, Any]:
        if agent == "a":
            release.wait(60)
        return _figure(len(agent))

    try:
        assert counts.usage("ops", count, 30) == _figure(3)
        assert counts.usage("a", count, 0.05) is None  # hangs: not counted before
        assert counts.usage("ops", count, 30) == _figure(3)  # fresh, not stale
        assert counts.usage("other", count, 30) == _figure(5)
        assert counts.usage("a", count, 30) is None  # at once: its count still hangs
        assert _counting(earlier) == 1
    finally:
        release.set()


def test_a_short_wait_is_said_with_its_decimal() -> None:
    """A wait under a second (``watch.probeTimeoutSeconds`` may be 0.1) read "within 0 s"."""
    counts, release, calls = BoundedCounts(), threading.Event(), []

    def count(agent: str) -> dict[str, Any]:
        calls.append(agent)
        if len(calls) > 1:
            release.wait(60)
        return _figure(1)

    try:
        assert counts.usage("a", count, 30) == _figure(1)
        stale = counts.usage("a", count, 0.3)
        assert stale is not None and "within 0.3 s" in stale["stale"] and "counted_at" in stale
    finally:
        release.set()


def test_counts_of_hung_inboxes_are_bounded_in_all(monkeypatch: Any) -> None:
    """Each agent's inbox can hang (a share each): at most ``MAX_RUNNING`` counts run."""
    monkeypatch.setattr(counting, "MAX_RUNNING", 2)
    counts, release, earlier = BoundedCounts(), threading.Event(), set(threading.enumerate())

    def count(agent: str) -> dict[str, Any]:
        release.wait(60)
        return _figure(1)

    try:
        for agent in ("a", "b", "c", "d"):
            assert counts.usage(agent, count, 0.01) is None
        assert _counting(earlier) == 2
    finally:
        release.set()


def test_the_last_figures_kept_are_bounded() -> None:
    """Every agent name that ever asked health kept its figure for good (agents named per
    session: megabytes); the most recent ``keep`` are kept."""
    counts = BoundedCounts(keep=3)
    for i in range(10):
        counts.usage(f"agent{i}", lambda agent: _figure(1), 30)
    assert list(counts._last) == ["agent7", "agent8", "agent9"]
