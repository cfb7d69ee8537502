"""A wall-clock-like time that advances only with time that really passed (it cannot jump).

The wall clock steps: a bad NTP source, an RTC with a flat battery, a restored VM, a user trying a
date. Whatever measures a long wait by it (a held mass deletion, the age of a text in .trash)
then ends at once, and what it guards is lost. ``SteadyClock.now()`` starts from the wall clock
the first time a home is used and from then on counts only real elapsed time: while the daemon
runs, a clock that counts suspends but no steps (CLOCK_BOOTTIME on Linux, else the monotonic
clock, which on macOS stops in sleep: the wait then lasts longer, never shorter); across restarts
in one boot the same clock (the boot id says it is the same boot); across a reboot, nothing but
the wall clock knows, so its gap is believed up to ``GAP_CAP_S`` (a longer gap counts as that:
a week-long power-off then lengthens the waits, a step while off shortens them by a week at
most). Its reading is saved now and then in a small file, so a restart goes on from it.

Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

GAP_CAP_S = 7 * 86_400.0
SAVE_EVERY_S = 600.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_RUN = f"run:{uuid.uuid4().hex}"  # this process: its monotonic clock means nothing to another


def steady_reading() -> tuple[str, float]:
    """(what the reading is comparable with, the reading): the boot and CLOCK_BOOTTIME where
    the system has them, else this process and its monotonic clock."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        with contextlib.suppress(OSError, ValueError):
            boot = _BOOT_ID.read_text(encoding="ascii").strip()
            if boot:
                return f"boot:{boot}", time.clock_gettime(boottime)
    return _RUN, time.monotonic()


class SteadyClock:
    """``now()``: seconds since the epoch as the wall clock said when first used, advanced by
    real elapsed time only. ``path``: where its reading outlives the process (None: it does not).
    ``wall`` and ``steady`` are injectable for tests."""

    def __init__(
        self,
        path: Path | None,
        *,
        wall: Callable[[], float] = time.time,
        steady: Callable[[], tuple[str, float]] = steady_reading,
    ) -> None:
        self.path, self.wall, self.steady = path, wall, steady
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._warned: set[str] = set()
        epoch, reading = steady()
        saved = self._load()
        self.from_file = saved is not None
        self._base = self.wall() if saved is None else self._resumed(saved, epoch, reading)
        self._epoch, self._at, self._last = epoch, reading, self._base
        self._saved = reading
        self.save()

    def _resumed(self, saved: tuple[float, float, str, float], epoch: str, reading: float) -> float:
        """Where this run starts: the saved time plus what really passed since it was saved."""
        wall = self.wall()
        then, then_wall, then_epoch, then_reading = saved
        if then_epoch == epoch and reading >= then_reading:
            passed = reading - then_reading
        else:  # another boot: only the wall clock knows, believed up to the cap
            passed = min(max(wall - then_wall, 0.0), GAP_CAP_S)
        if abs((then + passed) - wall) >= 60:
            log.info(
                "steady_clock_resumed behind_wall_seconds=%.0f (waits count real time, not clock steps)",
                wall - (then + passed),
            )
        return then + passed

    def _load(self) -> tuple[float, float, str, float] | None:
        if self.path is None:
            return None
        try:
            return _parse(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None  # a home's first start (or a cleaned state folder: see ``floor``)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._warn_once("read", exc)
            return None

    def _warn_once(self, what: str, exc: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(
                "steady_clock_file_unusable op=%s path=%s error=%s (waits go on from the index's copy)",
                what, self.path, exc,
            )  # fmt: skip

    def record(self) -> str:
        """The reading as saved (also kept in the index's manifest: see ``floor``)."""
        current, reading = self._read()
        return json.dumps({"now": current, "wall": self.wall(), "epoch": self._epoch, "steady": reading})

    def floor(self, record: str | None) -> None:
        """Without a usable clock file, go on from ``record`` (a ``record()`` kept elsewhere)
        where it says less time passed: a lost, corrupt or unwritable file made a start read the
        wall clock, which may be far ahead of this clock, and a held mass deletion was applied
        at once. The earlier of the two only ever lengthens a wait."""
        if self.from_file:
            return
        try:
            saved = _parse(record) if record else None
        except (ValueError, KeyError, TypeError):
            saved = None
        if saved is None:
            return
        epoch, reading = self.steady()
        then = self._resumed(saved, epoch, reading)
        current, _ = self._read()
        if then >= current - 1.0:
            return
        log.warning("steady_clock_from_index behind_file_seconds=%.0f", current - then)
        with self._lock:
            self._base, self._epoch, self._at, self._last = then, epoch, reading, then
        self.save()

    def now(self) -> float:
        current, reading = self._read()
        if reading - self._saved >= SAVE_EVERY_S:
            self.save()
        return current

    def _read(self) -> tuple[float, float]:
        epoch, reading = self.steady()
        with self._lock:
            if epoch != self._epoch or reading < self._at:
                # The steady clock started anew (not within one boot): go on from the last time.
                self._base, self._epoch, self._at = self._last, epoch, reading
            self._last = self._base + (reading - self._at)
            return self._last, reading

    def behind_wall(self) -> float:
        """How far the wall clock is ahead of this clock (negative: behind), in seconds."""
        return self.wall() - self.now()

    def to_wall(self, ts: float) -> float:
        """A time of this clock as the wall clock reads it now (what a client compares with)."""
        return ts + self.behind_wall()

    def save(self) -> None:
        """Keep the reading for the next run; a full disk or a missing folder only loses the
        progress since the last save (the waits then last longer, never shorter)."""
        if self.path is None:
            return
        with self._save_lock:
            current, reading = self._read()
            self._saved = reading
            data = {"now": current, "wall": self.wall(), "epoch": self._epoch, "steady": reading}
            # A name of its own: two writers never share a half-written file.
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(data))
                    fh.flush()
                    os.fsync(fh.fileno())  # a crash leaves the old reading, not an empty file
                os.replace(tmp, self.path)
            except OSError as exc:
                self._warn_once("write", exc)
                with contextlib.suppress(OSError):
                    tmp.unlink()


def _parse(text: str) -> tuple[float, float, str, float]:
    data = json.loads(text)
    return float(data["now"]), float(data["wall"]), str(data["epoch"]), float(data["steady"])
