"""An agent that writes memory notes without pause while its daemon is killed and restarted, and
remembers which writes the daemon acknowledged: the crash test's writer and bench/chaos.py's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.daemon_process import DaemonProcess


@dataclass
class Write:
    """One write call: monotonic times it was sent and ended (None while in flight)."""

    slug: str
    sent: float
    ended: float | None = None
    acked: bool = False


class Round:
    """The writes of one ``running`` block, in order, and a way to wait for the k-th to start."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.changed = threading.Condition()

    def started(self, k: int, timeout: float) -> Write | None:
        """Write number ``k`` of this block once it has been sent (None after ``timeout``)."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.writes) > k, timeout)
            return self.writes[k] if len(self.writes) > k else None

    def cut_at(self, at: float) -> Write | None:
        """The write a kill at ``at`` cut short: sent before it, never acknowledged."""
        return next((w for w in self.writes if w.sent < at and not w.acked and (w.ended or at) >= at), None)

    def since_ack(self, at: float) -> float | None:
        """Seconds from the last acknowledgement before ``at`` to ``at`` (None: none before)."""
        ends = [w.ended for w in self.writes if w.acked and w.ended is not None and w.ended <= at]
        return at - max(ends) if ends else None


class AckedWriter:
    """Writes note ``n<k>`` with the rare token ``qk<k>z`` in a thread, as long as ``running``."""

    def __init__(self, daemon: DaemonProcess, agent: str) -> None:
        self.daemon = daemon
        self.agent = agent
        self.acked: dict[str, str] = {}  # slug -> the content the daemon acknowledged
        self.count = 0  # writes tried, over every run
        self.last_took = 1.0  # seconds the last acknowledged write took (a guess before the first)

    @staticmethod
    def token(slug: str) -> str:
        """The rare word that note ``slug`` holds (a search for it must find the note)."""
        return f"qk{slug[1:]}z"

    @contextlib.contextmanager
    def running(self) -> Iterator[Round]:
        """Write while the block runs (the daemon may be starting, serving or killed meanwhile);
        the block gets the round's writes as they are sent, answered or cut."""
        stop, writes = threading.Event(), Round()
        thread = threading.Thread(target=self._write_until, args=(stop, writes), name="acked-writer")
        thread.start()
        try:
            yield writes
        finally:
            stop.set()
            thread.join()

    def _write_until(self, stop: threading.Event, writes: Round) -> None:
        while not stop.is_set():
            slug = f"n{self.count}"
            content = f"# Note {self.count}\n\nCrash token {self.token(slug)}.\n"
            self.count += 1
            w = Write(slug, time.monotonic())
            with writes.changed:
                writes.writes.append(w)
                writes.changed.notify_all()
            try:
                self.daemon.call("write", {"slug": slug, "content": content}, agent=self.agent)
            except Exception:  # not acknowledged: the daemon is starting or was killed
                w.ended = time.monotonic()
                stop.wait(0.05)
            else:
                w.ended = time.monotonic()
                w.acked = True
                self.acked[slug] = content
                self.last_took = w.ended - w.sent

    def damaged(self) -> tuple[set[str], set[str]]:
        """Acknowledged notes that are missing from the inbox, and those whose text changed."""
        inbox = self.daemon.home / "agents" / self.agent / "memory"
        lost: set[str] = set()
        changed: set[str] = set()
        for slug, content in self.acked.items():
            path = inbox / f"{slug}.md"
            if not path.exists():
                lost.add(slug)
            elif content.split("\n\n", 1)[1] not in path.read_text(encoding="utf-8"):
                changed.add(slug)
        return lost, changed
