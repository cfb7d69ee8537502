"""An agent that writes memory notes without pause while its daemon is killed and restarted, and
remembers which writes the daemon acknowledged: the crash test's writer and bench/chaos.py's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from tests.daemon_process import DaemonProcess


class AckedWriter:
    """Writes note ``n<k>`` with the rare token ``qk<k>z`` in a thread, as long as ``running``."""

    def __init__(self, daemon: DaemonProcess, agent: str) -> None:
        self.daemon = daemon
        self.agent = agent
        self.acked: dict[str, str] = {}  # slug -> the content the daemon acknowledged
        self.count = 0  # writes tried, over every run
        # (sent, failed) monotonic times of each write the daemon did not acknowledge
        self.unanswered: list[tuple[float, float]] = []

    @staticmethod
    def token(slug: str) -> str:
        """The rare word that note ``slug`` holds (a search for it must find the note)."""
        return f"qk{slug[1:]}z"

    @contextlib.contextmanager
    def running(self) -> Iterator[threading.Event]:
        """Write while the block runs (the daemon may be starting, serving or killed meanwhile).
        The block gets an event set once a write of this block is acknowledged: a kill after it
        lands among writes the daemon serves, whatever a write costs on a busy machine (a kill
        timed from the start alone landed before the first answer, and nothing was tested)."""
        stop, answered = threading.Event(), threading.Event()
        thread = threading.Thread(target=self._write_until, args=(stop, answered), name="acked-writer")
        thread.start()
        try:
            yield answered
        finally:
            stop.set()
            thread.join()

    def _write_until(self, stop: threading.Event, answered: threading.Event) -> None:
        while not stop.is_set():
            slug = f"n{self.count}"
            content = f"# Note {self.count}\n\nCrash token {self.token(slug)}.\n"
            self.count += 1
            sent = time.monotonic()
            try:
                self.daemon.call("write", {"slug": slug, "content": content}, agent=self.agent)
            except Exception:  # not acknowledged: the daemon is starting or was killed
                self.unanswered.append((sent, time.monotonic()))
                stop.wait(0.05)
            else:
                self.acked[slug] = content
                answered.set()

    def in_flight(self, at: float) -> bool:
        """Whether a write was sent before ``at`` (monotonic) and failed after it: cut by a
        kill at ``at``, not acknowledged, and so not counted."""
        return any(sent < at < failed for sent, failed in self.unanswered)

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
