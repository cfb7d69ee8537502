"""What is wrong right now, in words a person can act on: health and ``sidecar status`` show it.

One entry per area (``index``, ``embedding``, ``embedder``, ``keyword_search``, ``vector_search``,
``memory_write``, ``memory_audit``, ``stores``, ``obsidian_settings``, ``home``, ...), or per subject
of an area (an agent's inbox in ``memory_write``); an area is reported when it fails and cleared
when it works again, so a fault that went away leaves only a line under
``recent``. Thread-safe; imports nothing from sidecar.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Problems:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._active: dict[tuple[str, str], dict[str, Any]] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=20)
        self._reports = 0  # reports so far: what ``mark`` hands out
        self._last: dict[tuple[str, str], int] = {}  # the number of each active problem's latest report

    def report(self, area: str, error: str, *, subject: str = "", since: float | None = None) -> None:
        """``subject``: what in the area failed (an agent's inbox): one entry each, so one
        inbox's failure neither hides nor clears another's. ``since``: when it began, if before
        now (the index's last write, for one that could not be opened for writing)."""
        now = self._clock()
        with self._lock:
            self._reports += 1
            self._last[(area, subject)] = self._reports
            item = self._active.get((area, subject))
            if item is None:
                self._active[(area, subject)] = {
                    "area": area, "error": error, "since": now if since is None else since,
                    "last": now, "count": 1,
                    **({"subject": subject} if subject else {}),
                }  # fmt: skip
                log.warning(
                    "problem area=%s%s error=%s", area, f" subject={subject}" if subject else "", error
                )
            else:
                item.update(error=error, last=now, count=item["count"] + 1)

    def mark(self) -> int:
        """Where the reports stand now: handed to ``clear`` by work that began here."""
        with self._lock:
            return self._reports

    def clear(self, area: str, *, subject: str = "", since: int | None = None) -> None:
        """``since``: a ``mark`` taken when the work that went well began; a failure reported
        after it (another thread's, meanwhile) stays. A sweep that began before a memory write
        failed on a full disk cleared that failure as it ended, in the same millisecond."""
        with self._lock:
            if since is not None and self._last.get((area, subject), 0) > since:
                return
            item = self._active.pop((area, subject), None)
            self._last.pop((area, subject), None)
            if item is None:
                return
            item["cleared"] = self._clock()
            self._recent.append(item)
        log.info(
            "problem_cleared area=%s%s after=%.1fs",
            area,
            f" subject={subject}" if subject else "",
            item["cleared"] - item["since"],
        )

    def note(self, area: str, what: str, *, subject: str = "") -> None:
        """Something that went wrong and was already repaired (a corrupt store rebuilt at start);
        ``subject``: which (the store), so two repairs at one start are two lines in status."""
        now = self._clock()
        with self._lock:
            self._recent.append(
                {"area": area, "error": what, "since": now, "cleared": now, "count": 1}
                | ({"subject": subject} if subject else {})
            )

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(v) for v in self._active.values()]

    def active_in(self, area: str, *, subject: str = "") -> dict[str, Any] | None:
        """The active problem of ``area`` (and ``subject``; a copy), or None."""
        with self._lock:
            item = self._active.get((area, subject))
            return dict(item) if item is not None else None

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "active": [dict(v) for v in self._active.values()],
                "recent": [dict(v) for v in self._recent],
            }
