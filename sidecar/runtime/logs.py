"""Logging a service manager can live with: stderr only, one line per event, stable event names.

Under journald (``JOURNAL_STREAM`` set) lines carry no timestamp, journald adds its own, and
start with the syslog priority (``<3>`` error, ``<4>`` warning, ``<6>`` info, ``<7>`` debug), which
journald turns into the entry's priority (``journalctl -p err`` finds sidecar's errors).
"""

from __future__ import annotations

import logging
import sys

_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


class OneLineFormatter(logging.Formatter):
    """An event is one line: control characters in its message (a file name holding a newline,
    text from a note) are escaped, so no value can forge a line of its own. A traceback, added
    after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        if line.isprintable():
            return line
        return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)


class JournaldFormatter(OneLineFormatter):
    """``<N>`` in front of every line (of a traceback too: journald reads each line)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{_PRIORITY.get(record.levelno, 6)}>"
        return "\n".join(prefix + line for line in super().format(record).splitlines())


def setup(level: str = "info", *, journald: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if journald:
        handler.setFormatter(JournaldFormatter("%(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at warnings.
    # markdown_it: lines per block; watchfiles: "N changes detected" per batch (our watcher_changes)
    for noisy in ("apscheduler", "lancedb", "asyncio", "markdown_it", "watchfiles"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
