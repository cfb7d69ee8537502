"""What every part of the supervisor (``Supervisor``) stands on: the state it keeps of the
roots (their statuses, the shared probes, the stop, the lock), and the calls its parts make of
one another (a root's status, a probe of its folder and the hang it may mark, a call's bound,
the slow mark kept in the manifest, a root marked offline). The parts (``Remembered``,
``RootReport``, ``WatchLooks``) are built on it, so each call is checked against the one method
it reaches. Moved out of ``supervisor``.

Imports: config, contracts, runtime, vault."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sidecar.config import Config
from sidecar.contracts.errors import StoreError
from sidecar.runtime.backoff import Backoff
from sidecar.vault.homeguard import HomeGuard
from sidecar.vault.mounts import mount_of
from sidecar.vault.root_status import (
    Identity,
    MetaStore,
    RootStatus,
    _after,
    _moved,
    _still_hangs,
    _waiting_on,
)
from sidecar.vault.sources import Root
from sidecar.vault.timeout import NoAnswer, SharedProbes

# Its log lines keep the logger of the module they came from (``supervisor``): users grep by it.
log = logging.getLogger("sidecar.vault.supervisor")

T = TypeVar("T")

# Meta rows ``slow:<root>``: the root is a slow share (``RootStatus.slow``), kept across runs.
SLOW_META = "slow:"


def identity_of(path: Path, mounts: list[tuple[str, str]] | None = None) -> Identity:
    st = os.stat(path)
    found = mount_of(path, mounts) if mounts else None
    # Asked of the real path: a root named through a symlink is a mount point if its target is.
    return Identity(os.path.ismount(os.path.realpath(path)), st.st_dev, found[0] if found else None)


class SupervisorBase:
    """The roots' state and the calls the supervisor's parts make of one another."""

    def __init__(
        self,
        cfg: Config,
        clock: Callable[[], float] = time.time,
        meta: MetaStore | None = None,
        beat: Callable[[], None] | None = None,
        hold_clock: Callable[[], float] | None = None,
        *,
        hold_record: Callable[[], str] | None = None,
        judge_after: Callable[[float, Callable[[], None]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        # Runs a judge of a call given up on early once its seconds have passed (``read_hangs``):
        # a timer thread of its own; tests fire it by hand.
        self.judge_after = judge_after or _after
        self.clock = clock
        # What a mass-deletion hold's length is measured on: the daemon passes a clock that
        # counts only real elapsed time (a step of the wall clock ended a 6 h hold at once).
        self.hold_clock = hold_clock or clock
        self.meta = meta  # where each root's mount state and hold survive a restart
        # The hold clock's reading, kept with the holds (meta row ``CLOCK_META``): a lost clock
        # file must not make the next start count a hold from the wall clock.
        self.hold_record = hold_record
        self.backoff = Backoff(cfg.watch.retry_base_seconds, cfg.watch.retry_max_seconds)
        self.roots: dict[str, RootStatus] = {}
        self.beat = beat  # the indexer's heartbeat, during long waits
        # The probes of a root's folder outside its scans (is the vault there? may an event's
        # deletions go ahead?): one at a time per question, its answer shared, none started while
        # the last one still hangs (each call left a thread behind on a hung share).
        self.probes = SharedProbes()
        self.mounts: list[tuple[str, str]] = []  # the mount table, as read by the last classify
        # Every mount point these tables named since the start: a folder of a root that was one
        # (a bind mount of a folder the root also holds, which keeps device and inode numbers)
        # and is no longer is an unmounted folder, not notes moved (``index.moves``).
        self.mount_points_seen: set[str] = set()
        # The call (the read of a note, a listing, a stat) indexing waits for longer than a second
        # now: (root name, relative path, since ``time.monotonic()``, call), for `status` and
        # `sidecar index` to say what indexing waits for.
        self.waiting: tuple[str, str, float, str] | None = None  # root, path, since, call
        # ``waiting`` is a call already given up on, waited for to learn whether the share is
        # only slow (``await_given_up``).
        self.learning = False
        # Set by the daemon's stop: a wait for a share's call ends at once (the stop waited the
        # call's whole deadline, up to scanTimeoutSeconds, in its join of the indexer).
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        # Calls given up on sooner than probeTimeoutSeconds, to be judged then (``read_hangs``).
        self._judging: set[threading.Thread] = set()
        # The watch's walk of a folder given up on, by folder, while it is still in its call.
        self._walks: dict[str, threading.Thread] = {}
        self._meta_swept = False  # the rows of inboxes retired before this start are gone
        # The home's agents folder as first seen: gone or replaced (the home's share unmounted),
        # every inbox is unreachable, as an unmounted vault is (nothing of it deleted).
        self.home = HomeGuard(cfg)

    def _now(self) -> float:
        """The monotonic clock every part of the supervisor reads (``time`` of this module: the
        one a test sets ahead)."""
        return time.monotonic()

    def status(self, root: Root) -> RootStatus:
        with self._lock:
            st = self.roots.get(root.name)
        if st is not None:
            return st
        fresh = self._new_status(root)
        with self._lock:
            return self.roots.setdefault(root.name, fresh)

    def _new_status(self, root: Root) -> RootStatus:
        # Slow as an earlier run found it: a `sidecar index` of its own, or a daemon restarted,
        # starts with the whole-scan bound (given up per call, it gave up at the same listing).
        return RootStatus(root.name, str(root.path), slow=self._slow_remembered(root.name))

    def stuck_within(self, root: Root) -> threading.Thread | None:
        """The call still hanging on the folder this root lies in (the wiki's vault), if any."""
        if root.within is None:
            return None
        with self._lock:
            outer = next((s for s in self.roots.values() if s.path == str(root.within)), None)
        return outer.hanging if outer is not None else None

    def _bound(self, st: RootStatus) -> float:
        """How long one call on the root is waited for: a slow share's as long as a whole scan."""
        watch = self.cfg.watch
        return watch.scan_timeout_seconds if st.slow else watch.probe_timeout_seconds

    def hangs(self, root: Root, stuck: threading.Thread, since: float) -> None:
        """A look-up of the root's folder outside its scans (its type, whether it is there or
        empty) given up on after its deadline: the root hangs, the one rule for every such probe.
        No call on it is asked while that one is in (each would wait its timeout and leave a
        thread), status says so while it does (``describe``: offline, "still hangs"), and should
        it answer, the share is learnt slow as from a scan's call (``_gave_up``)."""
        self._hung(self.status(root), stuck, since)

    def _hung(self, st: RootStatus, stuck: threading.Thread, since: float) -> None:
        if st.hanging is not None:
            return  # already said, with the call that hangs
        st._stuck, st.hung_on = stuck, "looking up ."
        st._asking, st._given_up = None, ("stat", ".", since)
        self._gave_up(st, slow=st.slow)
        log.error(
            "probe_hung root=%s timeout=%gs: no call on it is asked until it answers",
            st.name,
            self._bound(st),
        )

    def _gave_up(self, st: RootStatus, *, slow: bool) -> None:
        """A call on the root was given up on (``st._given_up``). Under probeTimeoutSeconds it
        is learnt from should it answer; under the whole-scan bound the share is hung, not slow:
        its mark goes (the next run, or the next start, waits probeTimeoutSeconds again, not
        scanTimeoutSeconds on each root that hangs)."""
        given = st._given_up is not None and not self.stopping.is_set()
        st._learn = given and not slow
        if given and slow:
            self._set_slow(st, False, None)
            log.warning(
                "share_hung root=%s call=%s scan_timeout=%.0fs: not slow but hung; its calls are "
                "given up on after probeTimeoutSeconds again",
                st.name,
                st.hung_on,
                self.cfg.watch.scan_timeout_seconds,
            )

    def _probe(
        self,
        root: Root,
        question: str,
        fn: Callable[[], T],
        *,
        beat: bool = True,
        patience: float | None = None,
    ) -> T:
        """``fn``, a look-up of ``root``'s folder, waited for as one call of its scans is
        (``_bound``: a share learnt slow as long as a whole scan): one at a time per question, its
        answer shared (``SharedProbes``); NoAnswer at once while a call on the root, or on the
        folder it lies in, still hangs; one that times out marks the root hanging (``hangs``).
        ``patience``: a shorter wait of the caller's own (the watcher's thread, which carries
        every root's events): given up on sooner than the root's bound, it marks nothing (a slow
        share is no hung one)."""
        if (st := self.status(root)).hanging is not None:
            raise NoAnswer(_still_hangs(st), st.hanging)
        if (outer := self.stuck_within(root)) is not None:
            raise NoAnswer(f"an earlier call on {root.within} still hangs (hung share?)", outer)
        since = time.monotonic()
        bound = self._bound(st)
        wait = bound if patience is None else min(patience, bound)
        # (``beat``: asked by the indexer, whose heartbeat the wait keeps; not by the watcher)
        alive = self.beat if beat else None
        try:
            return self.probes.ask((question, root.name), fn, wait, root.name, alive)
        except NoAnswer as exc:
            if exc.stuck is not None and exc.stuck.is_alive() and wait >= bound:
                self.hangs(root, exc.stuck, since)
            raise

    def mark_offline(self, root: Root, why: str) -> None:
        st = self.status(root)
        now = self.clock()
        if st.offline and st.next_retry is not None and now < st.next_retry:
            # A sweep before the retry was due (a file event, a user's index): the same schedule,
            # whatever it says now (a hung root says "did not answer", then "still hangs").
            if st.error != why:
                log.info("root_offline root=%s reason=%s", root.name, why)
            st.error = why
            return
        st.failures += 1
        delay = self.backoff.delay(st.failures)
        st.next_retry = now + delay
        if not st.offline or st.error != why:
            log.warning("watcher_retry root=%s reason=%s retry_in=%.0fs", root.name, why, delay)
        st.offline, st.error = True, why

    def vault_not_there(self) -> bool:
        """Whether the vault folder is missing, empty, unmounted or another device than before
        (what it holds then is not the vault: its settings are not read). Not bounded: call it
        with a timeout."""
        return self.cfg.vault.path is not None and self._vault_not_there()

    def _vault_not_there(self) -> bool:
        """The wiki's folder is missing: is the vault around it missing, empty or unmounted too
        (then the wiki is unreachable, however few notes it has)?"""
        vault = self.cfg.vault.path
        if vault is None:
            return True
        try:
            with os.scandir(vault) as it:
                if next(it, None) is None:
                    return True
            ident = identity_of(vault, self.mounts)
        except OSError:
            return True
        memo = self._remembered(Root("vault", vault))
        return _moved(memo, ident) or memo.get("dev", ident.dev) != ident.dev

    def _look_waiting(self, st: RootStatus) -> dict[str, Any] | None:
        """A call on the root that makes a request's look refused as slow (``_not_beside``) and
        is not a hang said (a request's look cut at its cap, still in its call; a scan's call
        waiting longer than a look may take, on a share learnt slow): what it waits on and how
        long, for status to say why a write is refused. Not from probeTimeoutSeconds on: status
        said looks were refused while they were still started."""
        cut = st.cut_look()
        now = cut[1].now if cut is not None else None
        if now is not None:
            return _waiting_on(now[0], now[1], time.monotonic() - now[2], "look")
        late = self._waits_on(st, self.look_cap())
        return None if late is None else _waiting_on(*late, "scan")

    def _waits_on(self, st: RootStatus, bound: float) -> tuple[str, str, float] | None:
        """The call of a scan or look of the root under way that has waited ``bound`` seconds or
        more (call, path, seconds), if any."""
        now_ = time.monotonic()
        with self._lock:
            calls = [a.now for a in st._under_way]
        late = [(c, r, now_ - since) for c, r, since in (n for n in calls if n is not None)]
        longest = max(late, key=lambda c: c[2], default=None)
        return longest if longest is not None and longest[2] >= bound else None

    def look_cap(self) -> float:
        """How long a request's look (``looked``) may take as a whole: a quarter of
        server.requestTimeoutSeconds (30 s at its default of 120 s), and never past
        watch.scanTimeoutSeconds. A quarter: the answer then comes before the CLI's own wait
        (60 s by default) ends, with the rest of the request's time left for its duplicate check
        and the write itself; a slow share waited for longer held both write workers and every
        agent's writes behind them."""
        return min(self.cfg.server.request_timeout_seconds / 4, self.cfg.watch.scan_timeout_seconds)

    def _slow_remembered(self, name: str) -> bool:
        if self.meta is None:
            return False
        try:
            return self.meta.get_meta(f"{SLOW_META}{name}") is not None
        except (sqlite3.Error, StoreError, OSError):
            return False

    def _set_slow(self, st: RootStatus, slow: bool, call: str | None) -> None:
        """The root is slow (or not any more): remembered in the manifest (meta row
        ``slow:<root>``: since when, the call that was late) for the runs after this one."""
        if st.slow == slow:
            return
        st.slow = slow
        st._mark_text = json.dumps({"since": self.clock(), "call": call}, sort_keys=True) if slow else None
        st._mark_unsaved = True
        self._save_slow(st)

    def _save_slow(self, st: RootStatus) -> None:
        """Write the root's slow mark as this run knows it, if it is not in the index yet (set
        now, or its write failed before: retried at each scan of the root until it is written)."""
        if self.meta is None or not st._mark_unsaved:
            return
        row = f"{SLOW_META}{st.name}"
        try:
            if st._mark_text is not None:
                self.meta.set_meta(row, st._mark_text)
            else:
                self.meta.delete_meta([row])
        except (sqlite3.Error, StoreError, OSError) as exc:  # bookkeeping: this run still knows
            if not st._mark_failed:  # a disk that stays full: said once, not at each scan
                log.warning("root_meta_failed row=%s error=%s retry=at the root's next scan", row, exc)
            st._mark_failed = True
            return
        if st._mark_failed:
            log.info("root_meta_saved row=%s (after failed writes)", row)
        st._mark_unsaved = st._mark_failed = False

    def _remembered(self, root: Root) -> dict[str, Any]:
        if self.meta is None:
            return {}
        try:
            raw = self.meta.get_meta(f"root:{root.name}")
            value = json.loads(raw) if raw else {}
        except ValueError:
            value = {}
        return value if isinstance(value, dict) else {}

    def applies_at(self, st: RootStatus) -> float | None:
        """When a mass hold ends, as the wall clock reads it now (held time is real time)."""
        if st.hold_kind != "mass" or st.hold_since is None:
            return None
        return self._as_wall(st.hold_since) + self.cfg.index.mass_deletion_hold_minutes * 60

    def _as_wall(self, ts: float) -> float:
        """A time of the hold clock as the wall clock reads it now (clients compare with theirs)."""
        return self.clock() - max(self.hold_clock() - ts, 0.0)
