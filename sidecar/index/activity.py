"""What the indexer is doing now (``Activity``): the phase, the counts and the pace of a sweep,
for health, status and progress bars. Its own module because the daemon's health, watchdog and
index loop read it without the write path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.runtime.pace import SWEEP, Pace

# A sweep's pace is taken over this many batches of index.batchFiles notes (a few minutes' worth
# on a busy host: the pace of a folder of long notes does not stand for the vault).
SWEEP_PACE_BATCHES = 32


@dataclass
class Activity:
    """What the indexer is doing now, for health and progress bars."""

    # starting | scanning | indexing | embedding | idle; "starting" also after sweeps of file
    # events' paths or of some roots that ran before the first sweep of every root ended.
    phase: str = "starting"
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.monotonic)  # by ``clock``: a duration's start, no time of day
    sweeps: int = 0
    first_sweep_done: bool = False
    ready_once: bool = False
    scan_skipped: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)  # rule -> notes it leaves out
    # Notes this sweep found deleted or moved away, still indexed until its new notes are in, by
    # source (``vault``, ``wiki``, ``memory``).
    leaving: dict[str, int] = field(default_factory=dict)
    # Notes of this sweep read only to be cut again, their files unchanged (``Diff.recut``).
    recut: int = 0
    # Notes of this sweep's batches not read: their root went offline (a hung share) or their
    # read failed. Counted in ``done`` (their batch is), not in ``notes_read``.
    not_read: int = 0
    # Since when notes wait to be cut for the model's tokenizer (loaded or converted on a first
    # start; at most TOKENIZER_WAIT_S), by ``clock`` (a step of the wall clock made the wait
    # negative or hours long), else None: status says why "indexing 0/3" stands still.
    tokenizer_wait_since: float | None = None
    # Notes written per second over the sweep's last batches: status' estimate of its time left.
    pace: Pace = field(default_factory=lambda: Pace(SWEEP_PACE_BATCHES, SWEEP))
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # the pace's; tests pin it
    _step_at: float = 0.0  # when the last batch was counted

    def begin(self) -> None:
        """A sweep begins: counts and pace from nothing."""
        self.phase, self.done, self.total, self.started = "scanning", 0, 0, self.clock()
        self.leaving, self.recut, self.not_read = {}, 0, 0
        self.pace.clear()

    def ended(self) -> None:
        """A sweep ended, its counts written: ``idle``, or ``starting`` again while the first
        sweep of every root is still to come. Then this sweep's progress (of file events' paths
        or of some roots) is none of that sweep's: status said "starting 1/1 notes" of a vault
        of 34, so none is shown until that sweep counts its own. The phase is set last."""
        if not self.first_sweep_done:
            self.done, self.total, self.not_read = 0, 0, 0
            self.pace.clear()
        self.phase = "idle" if self.first_sweep_done else "starting"

    def indexing(self, total: int) -> None:
        """Its changes found: ``total`` to write, the pace counted from now."""
        self.phase, self.total = "indexing", total
        self._step_at = self.clock()

    def notes_read(self) -> int:
        """This sweep's notes done and read (``done`` without ``not_read``): a search's "N of M
        notes read so far" on a first index (it said "926 of 926" with 319 behind a hung note)."""
        return max(self.done - self.not_read, 0)

    def written(self, notes: int) -> None:
        """A batch of ``notes`` written: counted, with its time into the pace."""
        now = self.clock()
        self.done += notes
        self.pace.add(notes, now - self._step_at)
        self._step_at = now
