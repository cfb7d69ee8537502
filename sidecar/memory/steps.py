"""A memory change's calls into its inbox, told one by one to what bounds the change
(``inbox_bounded``): each call (a fsync, a rename, a listing's answer) is waited for on its own,
not their sum, so a slow share that answers each call in time is not taken for a hung one.
Outside a bounded change, ``step`` does nothing.

Imports: nothing of the project."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

_local = threading.local()


def step() -> None:
    """The next call of the change under way begins: its wait starts again."""
    hook: Callable[[], None] | None = getattr(_local, "hook", None)
    if hook is not None:
        hook()


@contextlib.contextmanager
def told(hook: Callable[[], None]) -> Iterator[None]:
    """``hook`` called at each ``step`` of this thread while the block runs."""
    before = getattr(_local, "hook", None)
    _local.hook = hook
    try:
        yield
    finally:
        _local.hook = before
