"""The inbox count ``health`` reports, bounded in time: health answers while an inbox hangs.

Counting an inbox opens its folders and reads each note's size; on a share that stopped answering
that blocks as long as the share does (for good on a hard NFS mount). health has a lane of two
threads: two such counts took both, and ``sidecar status`` gave up while searches were answered.
Counts run one at a time, each in a thread of its own (a stuck one cannot be killed): a caller
waits for its count ``wait`` seconds at most, then answers the figure last counted for that agent
(or None), saying why. While a count is known to hang, callers answer at once and none is started:
one stuck thread, never one per call. Imports nothing of the project.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

Count = Callable[[str], dict[str, Any] | None]


class BoundedCounts:
    """``count(agent)`` within ``wait`` seconds, or the last figure counted, marked as such."""

    def __init__(self, count: Count, wait: float, clock: Callable[[], float] = time.time) -> None:
        self._count, self.wait, self._clock = count, wait, clock
        self._turn = threading.Lock()  # held by the one count running (released by its thread)
        self._hung: threading.Thread | None = None  # a count that overran its wait and still runs
        self._last: dict[str, tuple[dict[str, Any], float]] = {}

    def usage(self, agent: str) -> dict[str, Any] | None:
        hung = self._hung
        if hung is not None and hung.is_alive():
            return self._earlier(agent, "an earlier count of an inbox has not answered yet (hung share?)")
        deadline = time.monotonic() + self.wait
        if not self._turn.acquire(timeout=self.wait):
            return self._earlier(agent, f"the inbox was not counted within {self.wait:.0f} s (busy)")
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = value = self._count(agent)
                if value is not None:  # also a count that came after its caller stopped waiting
                    self._last[agent] = (value, self._clock())
            except BaseException as exc:  # raised again in the caller's thread
                box["error"] = exc
            finally:
                self._turn.release()
                done.set()

        thread = threading.Thread(target=run, name="inbox-count", daemon=True)
        thread.start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            self._hung = thread
            return self._earlier(agent, f"the inbox did not answer within {self.wait:.0f} s (hung share?)")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    def _earlier(self, agent: str, why: str) -> dict[str, Any] | None:
        """The figure last counted for ``agent``, with when and why it is not a new one."""
        last = self._last.get(agent)
        if last is None:
            return None
        return {**last[0], "counted_at": last[1], "stale": why}
