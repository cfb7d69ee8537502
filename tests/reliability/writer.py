"""An agent that writes memory notes without pause while its daemon is killed and restarted, and
remembers which writes the daemon acknowledged: the crash test's writer and bench/chaos.py's."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from tests.daemon_process import DaemonProcess


class AckedWriter:
    """Writes note ``n<k>`` with the rare token ``qk<k>z`` in a thread, as long as ``running``."""

    def __init__(self, daemon: DaemonProcess, agent: str) -> None:
        self.daemon = daemon
        self.agent = agent
        self.acked: dict[str, str] = {}  # slug -> the content the daemon acknowledged
        self.count = 0  # writes tried, over every run

    @staticmethod
    def token(slug: str) -> str:
        """The rare word that note ``slug`` holds (a search for it must find the note)."""
        return f"qk{slug[1:]}z"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Write while the block runs (the daemon may be starting, serving or killed meanwhile)."""
        stop = threading.Event()
        thread = threading.Thread(target=self._write_until, args=(stop,), name="acked-writer")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _write_until(self, stop: threading.Event) -> None:
        while not stop.is_set():
            slug = f"n{self.count}"
            content = f"# Note {self.count}\n\nCrash token {self.token(slug)}.\n"
            self.count += 1
            try:
                self.daemon.call("write", {"slug": slug, "content": content}, agent=self.agent)
            except Exception:  # not acknowledged: the daemon is starting or was killed
                stop.wait(0.05)
            else:
                self.acked[slug] = content

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
