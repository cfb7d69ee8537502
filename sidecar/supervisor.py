"""Root supervision: is a root reachable, local or on a share, and when to look at it again.

An unreachable share is not an empty share (DESIGN.md invariant 4): a root that is missing,
fails with I/O errors, hangs past a timeout, or suddenly lost most of its notes goes ``offline``;
nothing of it is deleted, it is retried with growing jittered delays and comes back by itself.
Listing a root runs in a helper thread with a timeout, so a hanging NFS mount never blocks the
other roots. Imports sources, mounts, backoff, config.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sidecar.backoff import Backoff
from sidecar.config import Config
from sidecar.mounts import fs_type_of, is_network, read_mounts
from sidecar.sources import NoteFile, Root, Skipped, scan

log = logging.getLogger(__name__)

T = TypeVar("T")

# Below this many indexed notes a root is too small for the mass-deletion guard to mean anything.
MASS_DELETION_MIN_FILES = 4
# The suspicious state must be seen by this many sweeps in a row before deletions are applied.
CONFIRMING_SWEEPS = 3


@dataclass
class RootStatus:
    name: str
    path: str
    offline: bool = False
    error: str | None = None
    fs_type: str | None = None
    network: bool = False
    failures: int = 0
    next_retry: float | None = None
    last_sweep: float | None = None
    last_sweep_seconds: float | None = None
    seen: int = 0
    skipped: int = 0
    held_deletions: int = 0
    suspect_sweeps: int = 0
    _stuck: threading.Thread | None = field(default=None, repr=False)


class RootUnreachable(Exception):  # noqa: N818 - a state of the world, not a bug
    pass


def run_with_timeout(
    fn: Callable[[], T], timeout: float, name: str
) -> tuple[T | None, threading.Thread | None]:
    """Run ``fn`` in a daemon thread; (result, None), or (None, the stuck thread) after ``timeout``.

    A thread blocked in a hung NFS call cannot be killed; it is left behind and reported so that
    no second one is started for the same root while it hangs.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
    thread.start()
    if not done.wait(timeout):
        return None, thread
    if "error" in box:
        raise box["error"]
    return box["value"], None


class Supervisor:
    """Status, probing, backoff and the mass-deletion guard for every root."""

    def __init__(self, cfg: Config, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.clock = clock
        self.backoff = Backoff(cfg.watch.retry_base_seconds, cfg.watch.retry_max_seconds)
        self.roots: dict[str, RootStatus] = {}
        self._lock = threading.Lock()

    def status(self, root: Root) -> RootStatus:
        with self._lock:
            return self.roots.setdefault(root.name, RootStatus(root.name, str(root.path)))

    def classify(self, roots: list[Root]) -> None:
        """Record each root's filesystem type (network shares are polled)."""
        mounts = read_mounts(self.cfg.watch.mount_table)
        for root in roots:
            st = self.status(root)
            st.fs_type = fs_type_of(root.path, mounts) if mounts else None
            st.network = is_network(st.fs_type)

    def list_root(self, root: Root) -> list[NoteFile | Skipped]:
        """Probe, then scan a root, each bounded by its timeout; RootUnreachable when it cannot be read."""
        st = self.status(root)
        if st._stuck is not None and st._stuck.is_alive():
            raise RootUnreachable(f"an earlier listing of {root.path} is still hanging")
        st._stuck = None
        try:
            _, stuck = run_with_timeout(lambda: _probe(root), self.cfg.watch.probe_timeout_seconds, root.name)
            if stuck is None:
                found, stuck = run_with_timeout(
                    lambda: list(scan(root, self.cfg.index.max_file_bytes)),
                    self.cfg.watch.scan_timeout_seconds,
                    root.name,
                )
        except FileNotFoundError:
            if root.source == "vault" or (root.source == "wiki" and not root.path.parent.is_dir()):
                raise RootUnreachable(f"{root.path} does not exist or is not mounted") from None
            # A wiki subfolder or an inbox that does not exist (any more) inside a reachable parent
            # is simply empty; the mass-deletion guard still protects the wiki.
            return []
        except OSError as exc:
            raise RootUnreachable(f"cannot read {root.path}: {exc.strerror or exc}") from exc
        if stuck is not None:
            st._stuck = stuck
            raise RootUnreachable(f"{root.path} did not answer within its timeout (hung share?)")
        assert found is not None
        return found

    def mark_offline(self, root: Root, why: str) -> None:
        st = self.status(root)
        st.failures += 1
        delay = self.backoff.delay(st.failures)
        st.next_retry = self.clock() + delay
        if not st.offline or st.error != why:
            log.warning("watcher_retry root=%s reason=%s retry_in=%.0fs", root.name, why, delay)
        st.offline, st.error = True, why

    def mark_online(self, root: Root) -> None:
        st = self.status(root)
        if st.offline:
            log.info("watcher_recovered root=%s after=%d failures", root.name, st.failures)
        st.offline, st.error, st.failures, st.next_retry, st.held_deletions = False, None, 0, None, 0

    def hold_deletions(self, root: Root, known: int, missing: int, present: int, confirmed: bool) -> bool:
        """True when this sweep must not delete: the root looks unmounted rather than edited."""
        st = self.status(root)
        if confirmed or root.source == "memory" or known < MASS_DELETION_MIN_FILES:
            st.suspect_sweeps = 0
            return False
        suspicious = present == 0 or missing / known > self.cfg.index.mass_deletion_share
        if not suspicious:
            st.suspect_sweeps = 0
            return False
        st.suspect_sweeps += 1
        if st.suspect_sweeps >= CONFIRMING_SWEEPS:  # the state held across two more sweeps: it is real
            st.suspect_sweeps = 0
            log.warning("mass_deletion_confirmed root=%s missing=%d of %d", root.name, missing, known)
            return False
        st.held_deletions = missing
        self.mark_offline(
            root,
            f"{missing} of {known} indexed notes vanished at once; deletions held until confirmed "
            f"(or `sidecar index --confirm-deletions {root.name}`)",
        )
        return True

    def due(self, now: float | None = None) -> list[str]:
        """Roots to sweep now: offline ones whose retry is due, network ones whose poll is due."""
        now = self.clock() if now is None else now
        out = []
        with self._lock:
            for st in self.roots.values():
                if st.offline:
                    if st.next_retry is not None and st.next_retry <= now:
                        out.append(st.name)
                elif st.network and (
                    st.last_sweep is None or now - st.last_sweep >= self.cfg.watch.poll_seconds
                ):
                    out.append(st.name)
        return out

    def describe(self, watched: Callable[[str], bool]) -> list[dict[str, Any]]:
        now = self.clock()
        out = []
        with self._lock:
            statuses = list(self.roots.values())
        for st in statuses:
            mode = (
                "offline" if st.offline else ("polling" if st.network or not watched(st.path) else "events")
            )
            out.append(
                {
                    "name": st.name,
                    "path": st.path,
                    "mode": mode,
                    "error": st.error,
                    "fs_type": st.fs_type,
                    "next_retry_seconds": None
                    if st.next_retry is None
                    else round(max(st.next_retry - now, 0), 1),
                    "failures": st.failures,
                    "last_sweep": st.last_sweep,
                    "last_sweep_seconds": None
                    if st.last_sweep_seconds is None
                    else round(st.last_sweep_seconds, 3),
                    "files_seen": st.seen,
                    "files_skipped": st.skipped,
                    "held_deletions": st.held_deletions,
                }
            )
        return out


def _probe(root: Root) -> None:
    """Cheap reachability check: the folder answers a stat and a listing."""
    os.stat(root.path)
    with os.scandir(root.path) as it:
        next(it, None)
