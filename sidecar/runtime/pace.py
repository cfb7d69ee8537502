"""The pace of a long piece of work and how rough a time estimate from it is: one estimator for
the first sweep's notes and the backfill's vectors, whose figures `status` and `sidecar index`
turn into "about 3h 57m left". Imports nothing of the package.

A rate from the first step or two says little on a shared machine: the first vector estimate a
person saw on a 17,000-note vault was 13h 41m, later 3h 57m. So the rate is taken over the last
``window`` steps, and called rough until there are enough steps and seconds since the work began
(not in the window only: 32 quick batches of a sweep never added up to its 10 s) and the older half
of the window agrees with the newer half.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Settling:
    """When a pace counts as settled (see ``Pace.rough``), and when it is worth a figure at all."""

    steps: int = 4  # steps since the work began at least
    seconds: float = 120.0  # seconds of work since it began at least
    spread: float = 0.25  # the window's two halves' rates differ by at most this share of the faster one
    first_seconds: float = 0.0  # no rate at all before this many seconds of work since it began


# The backfill: batches of 256 chunks, seconds to minutes each; a rate from its first batch.
VECTORS = Settling()
# A sweep: batches of index.batchFiles notes, a second or so each; no figure for a quick one.
SWEEP = Settling(steps=8, seconds=30.0, first_seconds=10.0)


class Pace:
    """Units per second over the last ``window`` steps, each (units done, seconds it took); the
    steps of a piece of work follow each other, so their seconds since ``clear`` are the time
    since it began (a sweep's: since it began writing)."""

    def __init__(self, window: int = 8, settling: Settling = VECTORS) -> None:
        self.steps: deque[tuple[int, float]] = deque(maxlen=window)
        self.settling = settling
        self.count = 0  # steps since the work began
        self.elapsed = 0.0  # their seconds

    def add(self, units: int, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.steps.append((units, seconds))
        self.count += 1
        self.elapsed += seconds

    def clear(self) -> None:
        self.steps.clear()
        self.count, self.elapsed = 0, 0.0

    @property
    def rate(self) -> float | None:
        """Units per second over the window; None before any, or before ``first_seconds``."""
        # A copy: the work's thread adds steps while the health thread reads (a deque changed
        # while iterated raises).
        units, seconds = _sum(tuple(self.steps))
        if not units or seconds <= 0 or self.elapsed < self.settling.first_seconds:
            return None
        return units / seconds

    @property
    def rough(self) -> bool:
        """Whether an estimate from ``rate`` is still a rough one: too few steps or seconds since
        the work began, or the pace of the window's older half and of its newer half differ by
        more than ``spread``."""
        s = self.settling
        steps = tuple(self.steps)
        if self.count < s.steps or len(steps) < 2 or self.elapsed < s.seconds:
            return True
        half = len(steps) // 2
        old, new = _rate(steps[:half]), _rate(steps[half:])
        if old is None or new is None:
            return True
        return abs(old - new) > s.spread * max(old, new)


def _sum(steps: Iterable[tuple[int, float]]) -> tuple[int, float]:
    units, seconds = 0, 0.0
    for n, t in steps:
        units += n
        seconds += t
    return units, seconds


def _rate(steps: Sequence[tuple[int, float]]) -> float | None:
    units, seconds = _sum(steps)
    return units / seconds if units and seconds > 0 else None
