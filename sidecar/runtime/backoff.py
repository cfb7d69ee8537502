"""Retry delays as a declared policy (pure): growing, capped, jittered.

An unreachable root is retried after 30 s, 60 s, 120 s ... up to 10 min, each delay spread by
±20 % so that many daemons behind one NAS do not knock in step. Imports nothing of the project.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 30.0
    cap: float = 600.0
    jitter: float = 0.2

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 = first)."""
        raw = min(self.cap, self.base * 2 ** max(failures - 1, 0))
        return float(raw * (1 - self.jitter + 2 * self.jitter * rand()))
