"""Logging a service manager can live with: stderr only, one line per event, stable event names.

Under journald (``JOURNAL_STREAM`` set) lines carry no timestamp, journald adds its own.
"""

from __future__ import annotations

import logging
import sys


def setup(level: str = "info", *, journald: bool = False) -> None:
    fmt = (
        "%(levelname)s %(name)s %(message)s" if journald else "%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at warnings.
    for noisy in ("apscheduler", "lancedb", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
