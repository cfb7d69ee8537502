"""The inbox count ``health`` reports, bounded in time: health answers while an inbox hangs.

Counting an inbox opens its folders and reads each note's size; on a share that stopped answering
that blocks as long as the share does (for good on a hard NFS mount). health has a lane of two
threads: two such counts took both, and ``sidecar status`` gave up while searches were answered.
Each count runs in a thread of its own (a stuck one cannot be killed), one at a time per agent: a
caller waits for its count ``wait`` seconds at most, then answers the figure last counted for that
agent (or None), saying why. While an agent's count is known to hang, its callers answer at once
and no other count of that inbox is started; at most ``MAX_RUNNING`` counts run in all (each
inbox can be on a share of its own). One instance per daemon: a new one per handler build (each
failed switch to writable, every few seconds) started one more stuck thread at each, and forgot
the last figures. Imports nothing of the project.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Count = Callable[[str], dict[str, Any] | None]
MAX_RUNNING = 8  # count threads at once, stuck ones included (agents whose inboxes hang)
KEEP = 1000  # last figures kept, the agents that asked most recently (agents named per session)


@dataclass
class _Running:
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)
    value: dict[str, Any] | None = None
    error: BaseException | None = None
    hung: bool = False  # a caller's wait ran out: later callers answer at once


class BoundedCounts:
    """``usage(agent, count, wait)``: the count within ``wait`` seconds, or the last figure
    counted, marked as such."""

    def __init__(self, clock: Callable[[], float] = time.time, keep: int = KEEP) -> None:
        self._clock, self._keep = clock, keep
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}  # removed by the count's own thread at its end
        self._last: OrderedDict[str, tuple[dict[str, Any], float]] = OrderedDict()

    def usage(self, agent: str, count: Count, wait: float) -> dict[str, Any] | None:
        with self._lock:
            run = self._running.get(agent)
            if run is not None and run.hung:
                why = "an earlier count of this inbox has not answered yet (hung share?)"
                return self._earlier(agent, why)
            if run is None:
                if len(self._running) >= MAX_RUNNING:
                    why = f"not counted: {len(self._running)} other inboxes' counts have not answered yet"
                    return self._earlier(agent, why)
                run = self._running[agent] = _Running()
                run.thread = threading.Thread(
                    target=self._run, args=(agent, count, run), name="inbox-count", daemon=True
                )
                try:
                    run.thread.start()
                except BaseException:  # no thread to be had (a task limit): nothing runs for it
                    del self._running[agent]
                    raise
        if not run.done.wait(wait):
            run.hung = True
            return self._earlier(agent, f"the inbox did not answer within {wait:.1f} s (hung share?)")
        if run.error is not None:
            raise run.error
        return run.value

    def _run(self, agent: str, count: Count, run: _Running) -> None:
        try:
            run.value = value = count(agent)
            if value is not None:  # also a count that came after its caller stopped waiting
                with self._lock:
                    self._last[agent] = (value, self._clock())
                    self._last.move_to_end(agent)
                    while len(self._last) > self._keep:
                        self._last.popitem(last=False)
        except BaseException as exc:  # raised again in the caller's thread
            run.error = exc
        finally:
            with self._lock:
                self._running.pop(agent, None)
            run.done.set()

    def _earlier(self, agent: str, why: str) -> dict[str, Any] | None:
        """The figure last counted for ``agent``, with when and why it is not a new one."""
        last = self._last.get(agent)
        if last is None:
            return None
        return {**last[0], "counted_at": last[1], "stale": why}
