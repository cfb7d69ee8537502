"""The readable rows of a damaged table, found by reading row ranges: pure, over a ``read``.

A vector table whose data file was truncated fails every whole read, but its other data files
read: each file (a Lance fragment) holds a contiguous run of the table's row offsets. Ranges are
read a batch at a time; a batch that fails is halved until the first unreadable row is found,
then the unreadable run is crossed by probes at growing steps and its end found by halving
(a fragment of a million rows costs about forty failed reads, not a million). Rows between two
failed probes are not read: they are counted lost and embedded again (a file damaged only in
part may lose a few readable rows that way, never keep an unread one). Imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Salvage(Generic[T]):
    """What a walk over ``count`` rows read: the batches in order and the unreadable runs."""

    count: int
    read: Callable[[int, int], T | None]  # rows [lo, hi) or None when any of them cannot be read
    batch: int = 5000
    lost: list[tuple[int, int]] = field(default_factory=list)  # [lo, hi) runs not kept
    reads: int = 0

    def batches(self) -> Iterator[T]:
        pos, size = 0, self.batch
        while pos < self.count:
            end = min(pos + size, self.count)
            got = self._read(pos, end)
            if got is not None:
                yield got
                pos, size = end, min(size * 2, self.batch)
            elif size > 1:
                size = max(1, (end - pos) // 2)
            else:
                pos, size = self._cross(pos), 1

    @property
    def lost_rows(self) -> int:
        return sum(hi - lo for lo, hi in self.lost)

    def _read(self, lo: int, hi: int) -> T | None:
        self.reads += 1
        return self.read(lo, hi)

    def _cross(self, bad: int) -> int:
        """Row ``bad`` cannot be read: the first readable row after its run (or ``count``)."""
        last_bad, step = bad, 1
        good = min(bad + step, self.count)  # a readable row, or the table's end
        while good < self.count and self._read(good, good + 1) is None:
            last_bad, step = good, step * 2
            good = min(last_bad + step, self.count)
        while good - last_bad > 1:  # the run's end lies in (last_bad, good]
            mid = (last_bad + good) // 2
            if self._read(mid, mid + 1) is None:
                last_bad = mid
            else:
                good = mid
        self.lost.append((bad, good))
        return good
