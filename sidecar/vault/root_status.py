"""The state the supervisor keeps of each root (``RootStatus``: reachable or not, a call that
still hangs, a share learnt slow, held deletions), what a root folder is (``Identity``), the
errors a root's look ends in, and the small helpers that record and word a hang. Moved out of
``supervisor`` (which re-exports what its callers import from it).

Imports: vault (sources, timeout)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.vault.sources import Asking, Root
from sidecar.vault.timeout import NoAnswer


class MetaStore(Protocol):
    def get_meta(self, name: str) -> str | None: ...
    def set_meta(self, name: str, value: str) -> None: ...
    def meta_names(self, prefix: str) -> list[str]: ...
    def delete_meta(self, names: Collection[str]) -> None: ...


@dataclass(frozen=True)
class Identity:
    """What a root folder is: a mount point of its own or not, its device, and the mount point
    it lies on (None when the mount table is unknown)."""

    mount: bool
    dev: int
    under: str | None = None


def _moved(memo: dict[str, Any], ident: Identity) -> bool:
    """Whether a root is not on the mount it was on: it was a mount point and is not any more,
    or it now lies on another mount point (a folder under an unmounted share's mount point: what
    is there is the disk's stale copy below it, not the share)."""
    was_under = memo.get("under")
    return (bool(memo.get("mount")) and not ident.mount) or (
        was_under is not None and ident.under is not None and was_under != ident.under
    )


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
    waiting_deletions: int = 0  # deletions seen while the root's file events still come (index.bursts)
    hold_kind: str | None = None  # unmounted | device | empty | mass
    hold_since: float | None = None
    unreadable: list[str] = field(default_factory=list)  # folders/files kept because unreadable
    identity: Identity | None = None  # as seen by the last listing
    absent: bool = False  # the folder is not there inside a reachable parent (a wiki not made yet)
    hung_on: str | None = None  # the call that hangs, when one does ("reading a.md", "listing b")
    # A listing or stat of this root answered, but only after watch.probeTimeoutSeconds (a slow
    # share, not a hung one): its scans are bounded by watch.scanTimeoutSeconds as a whole, not
    # per call, until one ends with every call quicker (given up per call, it was never indexed).
    slow: bool = False
    _stuck: threading.Thread | None = field(default=None, repr=False)
    # The scan given up on at one call, and that call: the hang is over once the call answered
    # (the scan then ends at its next call: ``Asking.abandon``).
    _asking: Asking | None = field(default=None, repr=False)
    _given_up: tuple[str, str, float] | None = field(default=None, repr=False)
    # That call was given up on after probeTimeoutSeconds: answering after all, it shows a slow
    # share (given up on under the whole-scan bound, it showed a hung one).
    _learn: bool = field(default=False, repr=False)
    # The slow mark as set here but not yet in the index (its write failed, a locked or full
    # disk): written at the root's next scan, or a run after this one would not know it.
    _mark_unsaved: bool = field(default=False, repr=False)
    _mark_text: str | None = field(default=None, repr=False)  # the row's JSON (None: no mark)
    _mark_failed: bool = field(default=False, repr=False)  # its last write failed (logged once)
    # The scans and looks of this root under way now (each one's ``Asking``: its call and since
    # when), for a look started beside them to see one that already waits past its bound.
    _under_way: set[Asking] = field(default_factory=set, repr=False)
    # A request's look ended at its cap (``LookCut``) whose call is still in the share: the next
    # request's look is refused at once while it is (one thread per root, not one per write).
    _cut: tuple[threading.Thread, Asking] | None = field(default=None, repr=False)
    # Other scans given up on while a hang was recorded, each still in its call (its thread, its
    # Asking, that call, and what it is): the root hangs on one of them once the recorded one's
    # call answered (``hanging``), whichever answers first.
    _also: list[tuple[threading.Thread, Asking | None, tuple[str, str, float] | None, str | None]] = field(
        default_factory=list, repr=False
    )

    def cut_look(self) -> tuple[threading.Thread, Asking] | None:
        """The request's look cut at its cap that is still in its call, if any."""
        cut = self._cut
        if cut is not None and (not cut[0].is_alive() or cut[1].now is None):
            self._cut = cut = None  # it answered: the next look asks the share again
        return cut

    @property
    def hanging(self) -> threading.Thread | None:
        """The call on this root that still hangs (a hung share), if any."""
        stuck = self._stuck
        # The call given up on answered: not hung (its scan stops at its next call)...
        if (
            stuck is not None
            and stuck.is_alive()
            and (self._asking is None or self._asking.now is self._given_up)
        ):
            return stuck
        # ...unless another scan's call given up on meanwhile is still in: the root hangs on it.
        still = [h for h in self._also if h[0].is_alive() and (h[1] is None or h[1].now is h[2])]
        self._also = still[1:]
        if not still:
            return None
        self._stuck, self._asking, self._given_up, self.hung_on = still[0]
        return self._stuck


class RootUnreachable(Exception):  # noqa: N818 - a state of the world, not a bug
    pass


class StopCut(RootUnreachable):
    """A wait for a share's call ended because the daemon stops: no outage (``Supervisor.unreachable``
    logs it as a stop and leaves the root's state alone)."""


class LookCut(RootUnreachable):
    """A request's look at a share learnt slow (or long) ended at its cap (``Supervisor.looked``):
    the share is not hung and nothing is marked; the request is refused with nothing done."""


class WalkHung(NoAnswer):
    """A watch's walk given up on at a call; ``agent``: the agent's folder of the agents folder
    that call lay in (None: the folder itself, or the vault)."""

    def __init__(self, message: str, stuck: threading.Thread | None, agent: str | None) -> None:
        super().__init__(message, stuck)
        self.agent = agent


def _memo_of(ident: Identity, root: Root) -> dict[str, Any]:
    """What is remembered of a root: its folder, and its mount state (the mount point it lies
    on, where known)."""
    memo: dict[str, Any] = {"path": str(root.path), "mount": ident.mount, "dev": ident.dev}
    if ident.under is not None:
        memo["under"] = ident.under
    return memo


def _hold_of(memo: dict[str, Any]) -> dict[str, Any]:
    """The hold a root's remembered state carries, if any (kept when the rest is replaced)."""
    return {"hold": memo["hold"]} if isinstance(memo.get("hold"), dict) else {}


# The stop of a wait that the daemon's stop does not cut (``looked``'s ``through_stop``).
_NEVER = threading.Event()


def _not_waited_for(root: Root, stopping: threading.Event) -> None:
    """RootUnreachable when a wait for ``root`` ended because the daemon stops (no hang said)."""
    if stopping.is_set():
        raise StopCut(f"{root.path}: not waited for, the daemon stops")


def _after(seconds: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(seconds, fn)
    timer.daemon = True
    timer.start()


def _waiting_on(call: str, path: str, seconds: float, by: str) -> dict[str, Any]:
    return {"call": call, "path": path, "seconds": round(seconds, 1), "by": by}


def _record_hang(st: RootStatus, stuck: threading.Thread, asking: Asking) -> str | None:
    """A scan of the root given up on at ``asking``'s call, ``stuck`` still in it: the root hangs
    until that call answers. A hang another scan recorded meanwhile whose call is still in is
    kept, and this one is kept beside it (``RootStatus._also``): replaced by this one, the root
    was said healthy once this call answered while the other still hung; dropped, once the other
    answered first. What this call is ("looking up a.md"), for its own refusal."""
    now = asking.now
    # ("writing", "moving to .trash": a memory change's own call, said as it is)
    what = None if now is None else (f"looking up {now[1]}" if now[0] == "stat" else f"{now[0]} {now[1]}")
    if st.hanging is not None:
        st._also.append((stuck, asking if now is not None else None, now, what))
        return what
    st._stuck = stuck  # still in the call: none started beside it (the stop's join knows it)
    # (no call named: the whole past its bound; an earlier scan's record is not this one's)
    st.hung_on, st._asking, st._given_up = what, (asking if now is not None else None), now
    return what


def _still_hangs(st: RootStatus) -> str:
    """Why a root is not asked again: a call on it still hangs (and what it was: reading a note,
    listing a folder)."""
    on = f" ({st.hung_on})" if st.hung_on else ""
    return f"an earlier call on {st.path}{on} still hangs (hung share?)"


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"
