"""Helpers for the tests of hung and slow shares: the supervisor's clock set ahead, a listing
that hangs until the test lets it go, an inbox learnt slow, scans held on one call."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.vault import supervisor_base as supervisor_module
from sidecar.vault.sources import Asking, Root, asked
from sidecar.vault.supervisor import RootUnreachable, Supervisor


class SupervisorClock:
    """The supervisor module's clock, ``ahead`` seconds ahead of the real one once set."""

    def __init__(self) -> None:
        self.ahead = 0.0
        self.asked = 0  # how often the clock was read: the waiter reads it at each of its ticks
        self._read = threading.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        with self._read:
            self.asked += 1
            self._read.notify_all()
        return time.monotonic() + self.ahead

    def past(self, seconds: float) -> None:
        """A call of a slow share taking ``seconds``, by this clock: it is set ahead, and the
        call (the caller's thread) goes on once the clock was read three times since: the
        runner's waiter reads it three times a tick (the tick's length, the deadline, the
        call's bound), so the call was judged that long whatever read came first (after one
        read, the tick's length, the call answered before it was judged). No real wait of that
        length."""
        with self._read:
            self.ahead += seconds
            since = self.asked
            assert self._read.wait_for(lambda: self.asked >= since + 3, 20), "nobody read the clock"


def inbox_of(cfg: Any, agent: str = "ada") -> tuple[Path, Root]:
    """``agent``'s inbox folder, made, and its root."""
    folder = cfg.agents_dir / agent / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    return folder, Root("memory", folder, agent=agent)


def slow_inbox(
    make_cfg: Any,
    vault: Path,
    monkeypatch: pytest.MonkeyPatch,
    probe: float,
    agent: str = "ada",
    *,
    slow: bool = True,
) -> tuple[SupervisorClock, Supervisor, Root]:
    """A supervisor on a clock the test sets ahead (``watch.probeTimeoutSeconds`` ``probe``, a
    scan bounded by 600 s) and ``agent``'s inbox, learnt slow unless ``slow`` is false (then the
    supervisor is not told of it at all)."""
    clock = SupervisorClock()
    monkeypatch.setattr(supervisor_module, "time", clock)
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": probe, "watch.scanTimeoutSeconds": 600})
    sup = Supervisor(cfg)
    _, root = inbox_of(cfg, agent)
    if slow:
        sup.status(root).slow = True
    return clock, sup, root


@contextlib.contextmanager
def scan_waiting(
    sup: Supervisor, root: Root, clock: SupervisorClock, seconds: float
) -> Iterator[threading.Event]:
    """A sweep of ``root`` waiting on its listing of ``.`` for ``seconds`` by ``clock`` (set ahead),
    until the block ends; yields the event that lets it answer."""
    release, waiting = threading.Event(), threading.Event()

    def sweep(asking: Asking) -> int:
        with asked(asking, "listing", "."):
            clock.ahead = seconds
            waiting.set()
            release.wait(20)
        return 1

    scan = threading.Thread(target=lambda: sup.bounded(root, sweep), daemon=True)
    scan.start()
    try:
        assert waiting.wait(10)
        yield release
    finally:
        release.set()
    scan.join(10)


def held_scans(
    sup: Supervisor, root: Root, first: threading.Event, second: threading.Event
) -> dict[str, str]:
    """Two scans of ``root``, each held on the stat of its own note (``a.md`` until ``first``,
    ``b.md`` until ``second``), the second started while the first's call is under its bound;
    returns once both were given up on, with the refusal each met, by its note."""
    errors: dict[str, str] = {}

    entered = {name: threading.Event() for name in ("a.md", "b.md")}

    def held(name: str, gate: threading.Event) -> threading.Thread:
        def fn(asking: Asking) -> int:
            with asked(asking, "stat", name):
                entered[name].set()
                gate.wait(20)
            return 1

        def run() -> None:
            try:
                sup.bounded(root, fn)
            except RootUnreachable as exc:
                errors[name] = str(exc)

        return threading.Thread(target=run, daemon=True)

    a, b = held("a.md", first), held("b.md", second)
    a.start()
    assert entered["a.md"].wait(10)
    b.start()  # the second starts while the first's call is in, under its bound
    a.join(10)
    b.join(10)
    return errors


def read_only(cfg: Any, stop: threading.Event | None = None) -> tuple[Any, Any]:
    """Read-only mode's handlers (the index cannot be read, the inboxes still can), their looks
    ended at ``stop`` when given: the rule (``ReadOnly``, status's words) and the handlers."""
    from sidecar.daemon.readonly import InboxOnly, ReadOnly, Refusing, folder_looks

    looks = folder_looks(cfg, stop)
    rule = ReadOnly(cfg.index_dir, cfg.index_dir / "manifest.sqlite", cfg.agents_dir, looks)
    only = InboxOnly(cfg, rule.inboxes_writable, time.time(), looks)
    return rule, Refusing("the index cannot be read: bm25 locked", only)


def hang_listing(monkeypatch: pytest.MonkeyPatch, folder: Path, release: threading.Event) -> list[str]:
    """``os.scandir`` of ``folder`` waits for ``release`` (a share whose listing of it stalls: an
    SMB/NFS readdir); every other call answers. The names of the threads that asked it, in order."""
    real = os.scandir
    threads: list[str] = []

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == folder:
            threads.append(threading.current_thread().name)
            release.wait(20)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return threads
