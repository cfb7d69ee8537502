"""The progress bar ``sidecar index`` draws on stderr while the index is built. A thin client's:
no engine.
"""

from __future__ import annotations

import os
from typing import TextIO

from sidecar.clients.foreground import duration


class Progress:
    """A one-line progress bar on stderr when it is a terminal; silent otherwise. It fits the
    terminal's width (a line longer than that wraps, and each update left a broken line)."""

    def __init__(self, stream: TextIO) -> None:
        from sidecar.clients.foreground import Eta

        self.stream = stream
        self.enabled = stream.isatty()
        self.phase = ""
        self.eta = Eta()

    def update(self, phase: str, done: int, total: int) -> None:
        from sidecar.clients.foreground import Eta

        if not self.enabled or total <= 0:
            return
        if phase != self.phase:  # each phase has its own pace
            self.phase, self.eta = phase, Eta()
        share = min(done / total, 1.0)
        left = self.eta.update(done, total)  # a moving average: steady although counts move in steps
        eta = f" ETA {duration(left)}" if left is not None and share < 1 else ""
        room = self._columns() - 1  # the last column would wrap at once on some terminals
        count = f"{done:,}/{total:,}{eta}"
        label = f"{phase:<10}"
        width = max(0, min(30, room - len(label) - len(count) - 4))
        filled = int(share * width)
        bar = f" [{'#' * filled}{'.' * (width - filled)}]" if width >= 5 else ""
        line = f"{label}{bar} {count}"[:room]
        self.stream.write(f"\r{line:<{room}}")
        self.stream.flush()

    def say(self, message: str) -> None:
        """A line of its own (also when stderr is no terminal); the bar is drawn again by the next
        update."""
        self.done(message)

    def done(self, message: str) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (self._columns() - 1) + "\r")
        self.stream.write(message + "\n")
        self.stream.flush()

    def _columns(self) -> int:
        try:
            return max(20, os.get_terminal_size(self.stream.fileno()).columns)
        except (OSError, ValueError):
            return 80
