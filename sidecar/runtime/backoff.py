"""Retry delays as a declared policy (pure): growing, capped, jittered; one policy for every retry.

An unreachable root is retried after 30 s, 60 s, 120 s ... up to 10 min, each delay spread by
±20 % so that many daemons behind one NAS do not knock in step; a failed watch and a failed
sweep use the same policy with their own base and cap. ``set_testing(True)`` makes every delay
zero, so that a test of a retry does not wait for it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_testing = False


def set_testing(on: bool) -> None:
    """Test mode: every delay is 0 (the retries still happen, in order, without the waits)."""
    global _testing
    _testing = on


def is_testing() -> bool:
    return _testing


@contextmanager
def testing() -> Iterator[None]:
    """Test mode for the duration of a ``with`` block."""
    before = _testing
    set_testing(True)
    try:
        yield
    finally:
        set_testing(before)


@dataclass(frozen=True)
class Backoff:
    base: float = 30.0
    cap: float = 600.0
    jitter: float = 0.2

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 = first)."""
        if _testing:
            return 0.0
        raw = min(self.cap, self.base * 2 ** max(failures - 1, 0))
        return float(raw * (1 - self.jitter + 2 * self.jitter * rand()))
