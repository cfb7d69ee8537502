"""The roots' state in words and records, for the supervisor (``Supervisor``, built on this
and on ``SupervisorBase``): each root for health and status (``describe``: its mode, a call that
still hangs, its hold), the call a share hangs on (``hung_call``) and the roots whose look still
hangs (``hung_looks``).
Moved out of ``supervisor``.

Imports: vault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sidecar.vault.root_status import _still_hangs
from sidecar.vault.supervisor_base import SupervisorBase


class RootReport(SupervisorBase):
    """Health's and status's records of the roots, read from their statuses."""

    def hung_looks(self) -> list[tuple[str, str, str]]:
        """Each root with a call still in its share: (root name, its folder, that call), for
        read-only mode's status to name the agents whose changes are refused meanwhile."""
        with self._lock:
            held = list(self.roots.values())
        return sorted((st.name, st.path, st.hung_on or "its look") for st in held if st.hanging is not None)

    def hung_call(self) -> str | None:
        """A call on a share indexing waits for now, or one given up on that still hangs (a
        thread blocked in the kernel until the share answers), in words; None when none is known."""
        waiting = self.waiting
        if waiting is not None:
            return f"{waiting[0]} ({waiting[3]} {waiting[1]})"
        with self._lock:
            statuses = list(self.roots.values())
        hung = next((st for st in statuses if st.hanging is not None), None)
        return None if hung is None else f"{hung.name} ({hung.hung_on or 'a call'})"

    def describe(self, watched: Callable[[str], bool]) -> list[dict[str, Any]]:
        now = self.clock()
        out = []
        with self._lock:
            statuses = list(self.roots.values())
        for st in statuses:
            # A call on the root that still hangs (a probe's too, before any sweep marked the
            # root offline) is said as it is now: the root is not read until it answers.
            hangs = not st.offline and st.hanging is not None
            mode = (
                # A mass deletion held: the folder is there and followed, only deletions wait.
                ("held" if st.hold_kind == "mass" else "offline")
                if st.offline or hangs
                else ("polling" if st.network or not watched(st.path) else "events")
            )
            out.append(
                {
                    "name": st.name,
                    "path": st.path,
                    "mode": mode,
                    "error": _still_hangs(st) if hangs else st.error,
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
                    "absent": st.absent,
                    "slow": st.slow,
                    "files_skipped": st.skipped,
                    "held_deletions": st.held_deletions,
                    "waiting_deletions": st.waiting_deletions,
                    "hold": None
                    if st.hold_kind is None
                    else {
                        "kind": st.hold_kind,
                        "since": None if st.hold_since is None else self._as_wall(st.hold_since),
                        "applies_at": self.applies_at(st),
                        "confirm": f"sidecar index --confirm-deletions {st.name}",
                    },
                    "unreadable": st.unreadable[:20],
                    "look_waiting": self._look_waiting(st),
                }
            )
        return out
