"""Root supervision: is a root reachable, local or on a share, and when to look at it again.

An unreachable share is not an empty share: a root that is missing, fails with I/O errors or
hangs past a timeout goes ``offline``; so does one that was a mount point and is not any more,
whose device changed while its notes vanished, or that is empty although notes of it are indexed
(and none of them turned up under another key; a wiki inside a vault that is there is no share
of its own), for as long as that holds. Nothing of an offline root is deleted; it is retried
with growing jittered delays and comes back by itself. A mass deletion on the same, non-empty
mount is applied only after a wall-clock hold (``index.massDeletionHoldMinutes``) or on the
user's confirmation, never because some sweeps saw it; notes moved to another key are no loss
and do not count. Each root's mount state (mount point of its own, device) is remembered in the
manifest, so a restart while the share is away still knows. Listing a root runs in a helper
thread with a timeout, so a hanging NFS mount never blocks the other roots; the waiting thread
beats the watchdog while the timeout runs.

Its parts (``WatchLooks``, ``RootReport``, ``Remembered``) are built on ``SupervisorBase``, which
holds the roots' state and the calls they make of one another (and the one monotonic clock they
read, ``SupervisorBase._now``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sidecar.vault import supervisor_base as base
from sidecar.vault.mounts import fs_type_of, is_network, read_mounts
from sidecar.vault.remembered import Remembered
from sidecar.vault.root_report import RootReport
from sidecar.vault.root_status import (
    _NEVER,
    Identity,
    LookCut,
    RootStatus,
    RootUnreachable,
    StopCut,
    _duration,
    _moved,
    _not_waited_for,
    _record_hang,
    _still_hangs,
)
from sidecar.vault.sources import Asking, NoteFile, Root, Skipped, asked, inbox_root, scan, vault_roots
from sidecar.vault.timeout import NoAnswer, run_with_timeout
from sidecar.vault.watch_looks import WatchLooks

log = logging.getLogger(__name__)

# What callers import from here, its moved parts included (``root_status``).
__all__ = [
    "Identity",
    "LookCut",
    "RootStatus",
    "RootUnreachable",
    "StopCut",
    "Supervisor",
]

T = TypeVar("T")


class Supervisor(WatchLooks, RootReport, Remembered):
    """Status, probing, backoff and the mass-deletion guard for every root."""

    def classify(self, roots: list[Root]) -> None:
        """Record each root's filesystem type (network shares are polled). Finding it resolves
        the root's path, which a hung share never answers: asked with the probe timeout, and a
        root whose call hangs is left to ``list_root``, which reports it unreachable."""
        if not roots:
            return
        mounts = self.mounts = read_mounts(self.cfg.watch.mount_table)
        self.mount_points_seen.update(p.rstrip("/") or "/" for p, _ in mounts)
        # The vault before the wiki inside it: when the vault hangs, so does its wiki, which is
        # then not asked again (each ask of a hung share costs a full probe timeout).
        for root in sorted(roots, key=lambda r: r.within is not None):
            st = self.status(root)
            outer = self.stuck_within(root)
            if outer is not None:
                st._stuck = outer
            if not mounts or st.hanging is not None or self.stopping.is_set():
                continue
            since = self._now()
            try:
                found, stuck = run_with_timeout(
                    functools.partial(fs_type_of, root.path, mounts),
                    self._bound(st),
                    root.name,
                    self.beat,
                    self.stopping.is_set,
                )
            except OSError:
                continue  # list_root says why
            if stuck is not None:
                self.hangs(root, stuck, since)
                continue
            st.fs_type = found
            st.network = is_network(st.fs_type)

    def home_problem(self, root: Root) -> str | None:
        """Why an inbox is unreachable because the home or its agents folder is gone or replaced."""
        if root.source != "memory":
            return None
        why = self.home.problem()
        return f"{why}; nothing of it is deleted while it stays so" if why is not None else None

    def bounded(self, root: Root, fn: Callable[[Asking], T]) -> T:
        """Run file-system work on ``root`` (``fn``, told of each call by the ``Asking`` it gets)
        as a scan is: each listing or stat bounded by the probe timeout (the whole by the scan
        timeout on a slow share); RootUnreachable if it hangs."""
        if (why := self.home_problem(root)) is not None:
            raise RootUnreachable(why)
        st = self._fresh(root)
        try:
            return self._asked(root, st, fn, whole=False)
        except OSError as exc:
            raise RootUnreachable(f"cannot read {root.path}: {exc.strerror or exc}") from exc

    def looked(self, root: Root, fn: Callable[[Asking], T], *, through_stop: bool = False) -> T:
        """A request's look at a root (``fn``, told of each call by the ``Asking`` it gets: a
        memory change's look at its inbox, a list's look-ups of unindexed files), each call
        waited for as a scan's are: probeTimeoutSeconds each, not their sum (a slow share of
        many files answers each in time); a share learnt slow, as long as a whole scan. One that
        does not answer marks the root hanging (status says so; should it answer late, it is
        learnt slow and waited for next time). RootUnreachable then, and at once while a call on
        it still hangs; what ``fn`` raises otherwise (no home check, no OSError rewritten).

        The whole look ends at ``look_cap`` (LookCut: the share is slow, not hung; nothing is
        marked), so a request on a share learnt slow is answered before the request's own
        timeout and not after its client stopped waiting. It is the request's wait, not the
        indexer's: no heartbeat for the indexer (a wedged indexer would stay hidden from the
        watchdog) and the "waiting on" status, which tells what indexing waits for, untouched;
        StopCut once the daemon stops.

        A root no sweep has listed yet (a new agent's inbox at its first write) is looked at under
        a status of its own, kept only when the look marked it (hanging, slow, learning): status
        lists the roots the indexing knows, not every inbox a request touched.

        ``through_stop``: a memory change's own calls, neither refused nor cut by the stop (the
        stop waits for a change under way, which ends within these bounds anyway: cut, a change
        its client had been answered ``timeout`` for was dropped though its share answered)."""
        stop = _NEVER if through_stop else self.stopping
        with self._lock:
            known = root.name in self.roots
        if known:
            st = self._fresh(root, stop)
            self._not_beside(root, st)
            return self._asked(root, st, fn, whole=False, request=True, stop=stop)
        _not_waited_for(root, stop)
        st = self._new_status(root)
        try:
            return self._asked(root, st, fn, whole=False, request=True, stop=stop)
        finally:
            # A look cut at its cap on a root not slow is not kept (its thread ends at its next
            # quick call): kept, a never-swept inbox was listed by status as "not listed yet".
            if st._stuck is not None or st.slow or st._learn:
                with self._lock:
                    self.roots.setdefault(root.name, st)

    def _not_beside(self, root: Root, st: RootStatus) -> None:
        """LookCut at once, with no thread started into the share, while a request's earlier look
        cut at its cap is still in its call, or while a scan of the root under way (a sweep of a
        share learnt slow waits as long as its whole scan may) has waited on one call longer than
        this look may take: each write's look left one more thread in the share until its call
        answered, and was cut at the same cap anyway."""
        if (cut := st.cut_look()) is not None and (now := cut[1].now) is not None:
            waited = self._now() - now[2]
            log.warning("look_refused root=%s call=%s %s waited=%.0fs", root.name, now[0], now[1], waited)
            raise LookCut(
                f"{root.path} is slow: an earlier request's look at it ({now[0]} {now[1]}) has waited "
                f"{_duration(waited)} and not answered yet, so none is started beside it"
            )
        if (late := self._waits_on(st, self.look_cap())) is not None:
            call, rel, waited = late
            log.warning("look_refused root=%s call=%s %s waited=%.0fs (a scan)", root.name, call, rel, waited)
            raise LookCut(
                f"{root.path} is slow: its scan under way has waited {_duration(waited)} on {call} {rel}, "
                "longer than a request's look may take, so none is started beside it"
            )

    def _fresh(self, root: Root, stop: threading.Event | None = None) -> RootStatus:
        """The root's status before a new scan: RootUnreachable while a call on it still hangs; a
        scan given up on at a call that answered since makes the root slow."""
        _not_waited_for(root, stop or self.stopping)  # a stop: no new call, and no hang said
        st = self.status(root)
        if st.hanging is not None:
            raise RootUnreachable(_still_hangs(st))
        if st._learn:  # the call given up on answered by itself: slow, not hung
            self._learnt_slow(st)
        # (What is reset here are hangs whose calls answered: one still in raised above, each
        # scan's given up on, whichever was recorded first: ``_record_hang``.)
        st._stuck, st.hung_on, st._asking, st._given_up, st._also = None, None, None, None, []
        return st

    def _learnt_slow(self, st: RootStatus) -> None:
        """A call given up on after probeTimeoutSeconds answered after all: the share is slow."""
        st._learn = False
        self._set_slow(st, True, st.hung_on)
        log.warning(
            "share_slow root=%s call=%s probe_timeout=%.1fs: its scans wait up to scanTimeoutSeconds",
            st.name,
            st.hung_on,
            self.cfg.watch.probe_timeout_seconds,
        )

    def still_hangs(self, name: str) -> NoAnswer | None:
        """NoAnswer (to raise) while a call on the root ``name`` still hangs, else None: a
        request's look at one of its notes is not started beside it."""
        with self._lock:
            st = self.roots.get(name)
        if st is not None and (stuck := st.hanging) is not None:
            return NoAnswer(_still_hangs(st), stuck)
        # A hang of the folder the root lies in (the vault around the wiki, on the same share)
        # counts for it too: its notes are not looked at beside it.
        root = next((r for r in vault_roots(self.cfg) if r.name == name), None)
        if root is not None and (outer := self.stuck_within(root)) is not None:
            why = f"an earlier call on {root.within} (around {root.path}) still hangs (hung share?)"
            return NoAnswer(why, outer)
        return None

    def read_hangs(self, name: str, what: str, stuck: threading.Thread, since: float | None = None) -> None:
        """A request's look at one of the root's notes (``what``: "reading <note>") given up on
        after probeTimeoutSeconds: the root hangs as when a sweep's read does (``read``), so
        status says so and no call on it is asked until it answers. One given up on sooner (a
        request's own shorter budget: a get's anchors; ``since``: when it began) is judged once
        probeTimeoutSeconds have passed since then, should it still be in its call: a slow read
        is no hung share."""
        timeout = self.cfg.watch.probe_timeout_seconds
        left = 0.0 if since is None else since + timeout - self._now()
        if left > 0:
            with self._lock:  # one judge per stuck call (each get meeting it asks again)
                judged = (st := self.roots.get(name)) is not None and st.hanging is stuck
                asked = judged or stuck in self._judging or not stuck.is_alive()
                if not asked:
                    self._judging.add(stuck)
            if not asked:  # a timer of its own, not a thread in the share
                self.judge_after(left, functools.partial(self._judge, name, what, stuck))
            return
        with self._lock:
            st = self.roots.get(name)
        if st is None and name.startswith("memory/"):
            # An inbox no sweep has scanned yet (written since the last, or retired as gone):
            # its status is made here, or the hang was said nowhere.
            st = self.status(inbox_root(self.cfg, name.removeprefix("memory/")))
        if st is None or st.hanging is not None or not stuck.is_alive():
            return
        st._stuck, st.hung_on, st._asking, st._given_up = stuck, what, None, None
        log.error("read_hung root=%s call=%s timeout=%gs", name, what, timeout)

    def _judge(self, name: str, what: str, stuck: threading.Thread) -> None:
        with self._lock:
            self._judging.discard(stuck)
        self.read_hangs(name, what, stuck)

    def _asked(
        self,
        root: Root,
        st: RootStatus,
        fn: Callable[[Asking], T],
        *,
        whole: bool,
        request: bool = False,
        stop: threading.Event | None = None,
    ) -> T:
        """``fn`` with an ``Asking``: given up once one call has not answered for the probe
        timeout (the whole after the scan timeout on a slow root), naming the call. Only a
        ``whole`` scan of the root ends its being slow (a file event's look asks a few calls).
        A ``request``'s look (``looked``) ends at ``look_cap`` as a whole, and neither beats for
        the indexer nor says what indexing waits for."""
        timeout = self.cfg.watch.probe_timeout_seconds
        stopping = stop or self.stopping
        asking = Asking()
        slow = st.slow
        started = self._now()
        cap = self.look_cap() if request else None

        def beat() -> None:  # once a second: say the listing or stat the scan waits on (past a second)
            now = asking.now
            self.waiting = (root.name, now[1], now[2], now[0]) if now and self._now() - now[2] >= 1 else None
            if self.beat is not None:
                self.beat()

        def call_hung() -> bool:  # one call past the probe timeout: given up on, as a hung read is
            now = asking.now
            return not slow and now is not None and self._now() - now[2] >= timeout

        def cut() -> bool:  # a request's look past its cap
            return cap is not None and self._now() - started >= cap

        def hung() -> bool:
            return stopping.is_set() or cut()

        with self._lock:
            st._under_way.add(asking)
        try:
            value, stuck = run_with_timeout(
                lambda: fn(asking),
                self.cfg.watch.scan_timeout_seconds,
                root.name,
                None if request else beat,
                hung,
                calls=asking,
                per_call=None if slow else timeout,  # a slow share's: the whole scan's bound
            )
        finally:
            with self._lock:
                st._under_way.discard(asking)
            if not request:
                self.waiting = None
        if stuck is not None and cap is not None and not stopping.is_set() and not call_hung() and cut():
            # Slow, not hung: nothing marked. The call under way ends when the share answers,
            # and the look stops at its next call; till then the next request's look is refused
            # at once (``_not_beside``), and status says what it waits on.
            asking.abandon()
            st._cut = (stuck, asking)
            now = asking.now
            on = f" ({now[0]} {now[1]})" if now else ""
            log.warning("look_cut root=%s%s cap=%gs: a request's look at a slow share", root.name, on, cap)
            raise LookCut(
                f"{root.path} is slow: the look at it{on} did not end within {cap:g} s (a quarter of "
                "server.requestTimeoutSeconds, so that the request is answered before its client stops "
                "waiting)"
            )
        if stuck is None:
            late = asking.longest >= timeout
            if st.slow and whole and not late:
                log.info("share_quick root=%s: every call of a whole scan answered in time", root.name)
            # A whole scan with every call quicker: given up per call again.
            self._set_slow(st, late or (st.slow and not whole), "a listing or stat")
            return value  # type: ignore[return-value]  # fn's own result
        asking.abandon()  # it stops at its next call once this one answers
        now = asking.now
        hung_on = _record_hang(st, stuck, asking)
        _not_waited_for(root, stopping)
        self._gave_up(st, slow=slow)
        if now is None or slow:  # the whole scan past scanTimeoutSeconds
            on = f" ({hung_on})" if hung_on else ""
            log.error("scan_hung root=%s%s", root.name, f" call={now[0]} path={now[1]}" if now else "")
            raise RootUnreachable(
                f"{root.path}{on} did not answer within its timeout, watch.scanTimeoutSeconds (hung share?)"
                + (
                    "; not only slow: its calls are given up on after watch.probeTimeoutSeconds again"
                    if slow
                    else ""
                )
            )
        log.error("scan_hung root=%s call=%s path=%s timeout=%gs", root.name, now[0], now[1], timeout)
        raise RootUnreachable(
            f"{hung_on} in {root.path} did not answer within {timeout:g} s (hung share?); "
            "notes of this root are not read until it answers (should it answer late, a slow "
            "share: this is remembered, and its calls are then waited for up to "
            "watch.scanTimeoutSeconds, by the daemon and by `sidecar index`)"
        )

    def read(self, root: Root, rel: str, fn: Callable[[], T]) -> T:
        """Read one note of ``root`` (``fn``, its relative path ``rel``) with the probe timeout,
        as ``get`` reads one: RootUnreachable when it does not answer, and at once while an
        earlier call on the root (or on the vault around a wiki) still hangs, so a share that
        hangs on open/read costs one timeout and leaves one stuck thread per root, not one per
        note. The caller marks the root offline; it is retried like a listing that hangs.
        Raises what ``fn`` raises."""
        _not_waited_for(root, self.stopping)  # a stop: not the wiki offline for the vault's cut read
        st = self.status(root)
        if st.hanging is not None:
            raise RootUnreachable(_still_hangs(st))
        outer = self.stuck_within(root)
        if outer is not None:
            raise RootUnreachable(f"{root.within} (around {root.path}) still hangs (hung share?)")
        timeout = self.cfg.watch.probe_timeout_seconds
        since = self._now()

        def beat() -> None:  # called once a second while the read waits: say what it waits for
            self.waiting = (root.name, rel, since, "read")
            if self.beat is not None:
                self.beat()

        try:
            value, stuck = run_with_timeout(fn, timeout, root.name, beat, self.stopping.is_set)
        finally:
            self.waiting = None
        if stuck is not None:
            # This read is what hangs now (an earlier scan given up on no longer says whether the
            # root's call answered: ``hanging``).
            st._stuck, st.hung_on, st._asking, st._given_up = stuck, f"reading {rel}", None, None
            _not_waited_for(root, self.stopping)
            log.error("read_hung root=%s path=%s timeout=%gs", root.name, rel, timeout)
            raise RootUnreachable(
                f"reading {rel} in {root.path} did not answer within {timeout:g} s (hung share?); "
                "notes of this root are not read until it answers"
            )
        return value  # type: ignore[return-value]  # fn's own result

    def list_root(self, root: Root) -> list[NoteFile | Skipped]:
        """Probe, then scan a root, each bounded by its timeout; RootUnreachable when it cannot be read."""
        if (why := self.home_problem(root)) is not None:
            raise RootUnreachable(why)
        failed = self.status(root)._mark_unsaved  # at an earlier scan (one learnt now is written now)
        st = self._fresh(root)
        if failed:  # retried at each scan of the root until written, not at each event batch
            self._save_slow(st)
        max_bytes = self.cfg.index.max_file_bytes

        def listing(asking: Asking) -> tuple[Identity, list[NoteFile | Skipped]]:
            # The probe is a look-up of the root, bounded and learnt from as the scan's calls are
            # (the first stat of an automounted share is often its slowest call).
            with asked(asking, "stat", "."):
                ident = _probe(root, self.mounts)
            return ident, list(scan(root, max_bytes, asking=asking))

        try:
            ident, found = self._asked(root, st, listing, whole=True)
            st.identity, st.absent = ident, False
            return found
        except FileNotFoundError:
            if root.source == "vault" or (root.source == "wiki" and self._vault_not_there()):
                raise RootUnreachable(f"{root.path} does not exist or is not mounted") from None
            # A wiki subfolder or an inbox that does not exist (any more) inside a reachable parent
            # is simply empty; the mass-deletion guard still protects the wiki.
            st.identity, st.absent = None, True
            return []
        except OSError as exc:
            raise RootUnreachable(f"cannot read {root.path}: {exc.strerror or exc}") from exc

    def unreachable(self, root: Root, exc: RootUnreachable) -> None:
        """A root could not be read: offline with ``exc``'s reason, unless the wait was only cut
        short by the daemon's stop (a stop is not an outage: nothing said, saved or retried)."""
        if isinstance(exc, StopCut):
            log.info("share_wait_stopped root=%s: the daemon stops", root.name)
            return
        self.mark_offline(root, str(exc))

    def mark_online(self, root: Root) -> None:
        st = self.status(root)
        if st.offline:
            log.info("watcher_recovered root=%s after=%d failures", root.name, st.failures)
        st.offline, st.error, st.failures, st.next_retry = False, None, 0, None
        st.held_deletions, st.hold_kind, st.hold_since = 0, None, None

    # --- the mass-deletion guard -------------------------------------------------------------

    def deletable(self, root: Root) -> bool:
        """Deletions seen by file events may go ahead: the root is online, on the mount it was
        on, and not empty (else a full sweep of it decides, through the guard)."""
        if root.source == "memory":
            return self.home.problem() is None
        if self.status(root).offline:
            return False

        def look() -> tuple[Identity, bool]:
            ident = base.identity_of(root.path, self.mounts)
            with os.scandir(root.path) as it:
                return ident, next(it, None) is None

        try:
            ident, empty = self._probe(root, "deletable", look)
        except (NoAnswer, OSError):
            return False
        memo = self._remembered(root)
        return not (empty or _moved(memo, ident) or memo.get("dev", ident.dev) != ident.dev)

    def due(self, now: float | None = None, *, poll_all: bool = False) -> list[str]:
        """Roots to sweep now: offline ones whose retry is due, network ones whose poll is due
        (every root's with ``poll_all``: file events cover only part of the folders)."""
        now = self.clock() if now is None else now
        out = []
        with self._lock:
            for st in self.roots.values():
                if st.offline:
                    if st.next_retry is not None and st.next_retry <= now:
                        out.append(st.name)
                elif (st.network or poll_all) and (
                    st.last_sweep is None or now - st.last_sweep >= self.cfg.watch.poll_seconds
                ):
                    out.append(st.name)
        return out

    def await_given_up(self) -> list[str]:
        """For a run with no later sweep (`sidecar index` alone): wait for each listing or stat
        given up on to answer after all, up to scanTimeoutSeconds from its start, saying so (a
        run of its own never learned that a share is only slow, and gave up at the same listing
        every run). The roots whose call answered: slow, to be swept again in this run."""
        answered: list[str] = []
        with self._lock:
            statuses = list(self.roots.values())
        for st in statuses:
            given, stuck = st._given_up, st._stuck
            if not st._learn or given is None or stuck is None:
                continue
            call, rel, since = given
            deadline = since + self.cfg.watch.scan_timeout_seconds
            self.learning = True
            try:  # (a call that answered while the rest was done is learnt from at once)
                while st.hanging is not None and not self.stopping.is_set():
                    left = deadline - self._now()
                    if left <= 0:
                        break
                    self.waiting = (st.name, rel, since, call)
                    if self.beat is not None:
                        self.beat()
                    stuck.join(min(1.0, left))
            finally:
                self.waiting, self.learning = None, False
            if st.hanging is None and st._learn:
                self._learnt_slow(st)  # remembered now: a run cut short after this knows it too
                answered.append(st.name)
        return answered

    def describe_waiting(self) -> dict[str, Any] | None:
        """The call indexing waits for now (past a second): the read of a note, the listing of a
        folder or the stat (``call``: read, listing, stat) of an entry, and for how long."""
        waiting = self.waiting
        if waiting is None:
            return None
        name, rel, since, call = waiting
        st = self.roots.get(name)
        slow = call != "read" and st is not None and st.slow
        learning = self.learning
        watch = self.cfg.watch
        return {
            "root": name,
            "path": rel,
            "call": call,
            "seconds": round(self._now() - since, 1),
            # A slow root's listings and stats wait as long as its whole scan may take.
            "timeout_seconds": watch.scan_timeout_seconds
            if slow or learning
            else watch.probe_timeout_seconds,
            "slow": slow,
            "learning": learning,
        }


def _probe(root: Root, mounts: list[tuple[str, str]] | None = None) -> Identity:
    """Cheap reachability check: the folder answers a stat and a listing; what it is."""
    ident = base.identity_of(root.path, mounts)
    with os.scandir(root.path) as it:
        next(it, None)
    return ident
