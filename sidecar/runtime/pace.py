"""The pace of a long piece of work and how rough a time estimate from it is: one estimator for
the first sweep's notes and the backfill's vectors, whose figures `status` and `sidecar index`
turn into "about 3h 57m left". Imports nothing of the package.

A rate from the first step or two says little on a shared machine: the first vector estimate a
person saw on a 17,000-note vault was 13h 41m, later 3h 57m. So the rate is taken over the last
``window`` steps, and called rough until there are enough of them, over enough seconds, and the
older half of the window agrees with the newer half.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Settling:
    """When a pace counts as settled (see ``Pace.rough``), and when it is worth a figure at all."""

    steps: int = 4  # steps in the window at least
    seconds: float = 120.0  # seconds of work in it at least
    spread: float = 0.25  # the two halves' rates differ by at most this share of the faster one
    first_seconds: float = 0.0  # no rate at all before this many seconds of work


# The backfill: batches of 256 chunks, seconds to minutes each; a rate from its first batch.
VECTORS = Settling()
# A sweep: batches of index.batchFiles notes, a second or so each; no figure for a quick one.
SWEEP = Settling(steps=8, seconds=30.0, first_seconds=10.0)


class Pace:
    """Units per second over the last ``window`` steps, each (units done, seconds it took)."""

    def __init__(self, window: int = 8, settling: Settling = VECTORS) -> None:
        self.steps: deque[tuple[int, float]] = deque(maxlen=window)
        self.settling = settling

    def add(self, units: int, seconds: float) -> None:
        self.steps.append((units, max(seconds, 0.0)))

    def clear(self) -> None:
        self.steps.clear()

    @property
    def rate(self) -> float | None:
        """Units per second over the window; None before any, or before ``first_seconds``."""
        units, seconds = _sum(self.steps)
        if not units or seconds <= 0 or seconds < self.settling.first_seconds:
            return None
        return units / seconds

    @property
    def rough(self) -> bool:
        """Whether an estimate from ``rate`` is still a rough one: too few steps or seconds, or
        the pace of the window's older half and of its newer half differ by more than ``spread``."""
        s = self.settling
        steps = list(self.steps)
        if len(steps) < s.steps or _sum(steps)[1] < s.seconds:
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


def _rate(steps: list[tuple[int, float]]) -> float | None:
    units, seconds = _sum(steps)
    return units / seconds if units and seconds > 0 else None
