"""What the index's manifest keeps of each root, for the supervisor (``Supervisor``, built on
this and on ``SupervisorBase``, which keeps the slow mark of a share: meta rows ``slow:<root>``,
kept across runs): each root's mount state, and the mass-deletion guard that judges a root's
deletions by it (a hold until the wall-clock hold ends or the user confirms). Moved out of
``supervisor``.

Imports: config, contracts, vault."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Collection
from typing import Any, TypeVar

from sidecar.contracts.errors import StoreError
from sidecar.contracts.wire import hold_advice
from sidecar.vault.root_status import Identity, _duration, _hold_of, _memo_of, _moved
from sidecar.vault.sources import Root
from sidecar.vault.supervisor_base import SLOW_META, SupervisorBase
from sidecar.vault.timeout import NoAnswer

# Its log lines keep the logger of the module they came from (``supervisor``): users grep by it.
log = logging.getLogger("sidecar.vault.supervisor")

T = TypeVar("T")

CLOCK_META = "steady_clock"

# Below this many indexed notes a root is too small for the mass-deletion guard to mean anything.
MASS_DELETION_MIN_FILES = 4
# Why a root's deletions are held; only "mass" is ever applied by the clock.
HOLD_WHY = {
    "unmounted": "is not on the mount it was on any more (share unmounted?)",
    "device": "is on a different device than before (another share or disk mounted here?)",
    "empty": "is empty or missing although {known} of its notes are indexed (unmounted? moved?)",
    "mass": "lost {missing} of {known} indexed notes in one burst of deletions",
}


class Remembered(SupervisorBase):
    """The slow marks, mount states and deletion holds of the roots, kept in ``meta``."""

    def keep_memory_roots(self, names: Collection[str]) -> None:
        """Forget the status of each agent inbox not in ``names`` (the roots now): emptied or
        removed, it is no root until a note comes, and a status kept for every agent that ever
        wrote grew health and `status` by a line each, for good. Its remembered mount state
        (meta row ``root:memory/<agent>``) goes too: a memory root is never held by the guard,
        and a row kept per agent name ever used grew the manifest for good; the first call also
        drops the rows of inboxes retired before this start. One whose call still hangs is kept,
        so no second call is started on it."""
        with self._lock:
            gone = [
                name
                for name, st in self.roots.items()
                if name.startswith("memory/") and name not in names and st.hanging is None
            ]
            for name in gone:
                del self.roots[name]
            kept = set(names) | {n for n, st in self.roots.items() if st.hanging is not None}
        for name in gone:
            log.info("root_retired root=%s reason=no notes in the inbox or the index", name)
        self._forget_rows(gone, kept)

    def _forget_rows(self, gone: Collection[str], kept: Collection[str]) -> None:
        if self.meta is None:
            return
        rows = {f"{prefix}{name}" for name in gone for prefix in ("root:", SLOW_META)}
        try:
            if not self._meta_swept:
                for prefix in ("root:", SLOW_META):
                    names = self.meta.meta_names(f"{prefix}memory/")
                    rows.update(r for r in names if r[len(prefix) :] not in kept)
            if rows:
                self.meta.delete_meta(sorted(rows))
            self._meta_swept = True
        except (sqlite3.Error, StoreError, OSError) as exc:  # bookkeeping: tried again next sweep
            log.warning("root_meta_forget_failed rows=%d error=%s", len(rows), exc)
            self._meta_swept = False

    def _remember(self, root: Root, value: dict[str, Any]) -> None:
        if self.meta is not None and value != self._remembered(root):
            self.meta.set_meta(f"root:{root.name}", json.dumps(value, sort_keys=True))

    def _reconfigured(self, root: Root, before: Any) -> bool | None:
        """Whether the configuration names another folder than the one swept before: the two
        differ by their real paths too (a vault named through a symlink is spelled either way,
        as the symlink when the share answered slowly at start). The folder named now is asked
        as a probe of the root (``_probe``): one that times out marks the root hanging. The
        folder remembered may lie on a share the root has left (a vault moved off a dead NAS):
        its look is bounded on its own and marks nothing, one stuck thread for it at most (the
        next sweep is told at once while it is still in), and None says it did not answer.
        Raises NoAnswer when the folder named now does not (the deletions wait)."""
        now = root.path
        if not isinstance(before, str) or before == str(now):
            return False
        real_now = self._probe(root, "realpath", lambda: os.path.realpath(now))
        timeout = self.cfg.watch.probe_timeout_seconds
        try:
            real_before = self.probes.ask(
                ("realpath-remembered", before),
                lambda: os.path.realpath(before),
                timeout,
                root.name,
                self.beat,
            )
        except NoAnswer:
            return None
        return real_before != real_now

    def _folder_judged(
        self, root: Root, memo: dict[str, Any], present: int, lost: int
    ) -> tuple[bool, dict[str, Any]] | None:
        """Whether the configuration names another folder than the one swept before
        (``_reconfigured``), and what is remembered of the root to judge its deletions by; None
        when its ``lost`` notes wait: the root hangs now (marked so), no evidence of anything."""
        try:
            reconfigured = present > 0 and self._reconfigured(root, memo.get("path"))
        except NoAnswer:
            return None if lost > 0 else (False, memo)
        if reconfigured is not None:
            return reconfigured, memo
        # The folder named now answered, the one swept before does not (a vault moved off a dead
        # NAS whose mount hangs): whether they are one folder cannot be told, so what was
        # remembered of the old one (its mount, its device) says nothing of this one, which is
        # judged as a folder never swept before (emptied or a mass loss: still held) and
        # remembered from now on. Waiting for the old mount held its deletions for as long as
        # it hung (the path was remembered only after a sweep with nothing to judge).
        log.warning(
            "root_former_folder_silent root=%s from=%s to=%s missing=%d: judged as a new folder",
            root.name, memo.get("path"), root.path, lost,
        )  # fmt: skip
        ident = self.status(root).identity
        memo = {**(_memo_of(ident, root) if ident is not None else {}), **_hold_of(memo)}
        self._remember(root, memo)
        return False, memo

    def hold_deletions(
        self,
        root: Root,
        known: int,
        missing: int,
        present: int,
        confirmed: bool,
        *,
        moved: int = 0,
        moved_away: int = 0,
        copies: int = 0,
        arrived: int = 0,
        applied: int = 0,
        settling: bool = False,
    ) -> str | None:
        """Why this sweep must not delete (``unmounted``, ``device``, ``empty``, ``mass``,
        ``wait``), or None.

        ``mass`` still lets the sweep index the notes that are there; the others leave the root
        alone entirely (what is there is not the share). The hold's start is remembered across
        restarts; a mass deletion is applied once it has lasted ``massDeletionHoldMinutes``.
        ``moved`` of the ``missing`` notes turned up under other keys in the same sweep: moves,
        no loss, so they count neither toward ``empty`` nor toward ``mass``. They say nothing
        about the mount, though: a root that is not on the mount it was holds them all.
        ``moved_away`` of those left the root (into an excluded folder, into another root): a
        mass loss is judged against the notes that stay (``known`` less them), as it would be had
        the move been seen on its own first; moves within the root stay among its notes.
        ``copies`` of the held notes have a look-alike in an excluded folder (said, no evidence).
        ``arrived`` notes are new in the root (no move's new half): a branch switch that moves and
        edits its notes brings as many as it takes, and is no loss; they count among the notes
        that stay. ``applied`` deletions of the same burst left the index already (file events
        apply a few at once): they count as lost and as known, not as held. ``settling``: the
        root's deletions and new notes are still coming (``index.bursts``): a loss the guard
        would apply or hold as ``mass`` waits (``wait``) to be judged whole (the moves are applied
        at once: a folder renamed is no loss); the other kinds hold at once.
        """
        applied = applied if missing > moved else 0  # only beside a loss now
        lost = missing - moved + applied
        indexed = known - moved_away + applied  # what the root held, as the message counts it
        staying = indexed + arrived
        st = self.status(root)
        ident = st.identity
        memo = self._remembered(root)
        now = self.hold_clock()
        kind: str | None = None
        judged = self._folder_judged(root, memo, present, missing - moved)
        if judged is None:
            return "wait"  # the root hangs now (marked so): its deletions wait for a sweep that can tell
        reconfigured, memo = judged
        if confirmed or root.source == "memory" or reconfigured:
            if confirmed and memo.get("hold"):
                log.warning(
                    "mass_deletion_confirmed root=%s missing=%d of %d by=user", root.name, missing, known
                )
            elif reconfigured and missing:
                # The configuration names another folder now: the notes of the old one go (a
                # share that is not mounted is told by the same path, not by a new one).
                log.warning(
                    "root_path_changed root=%s from=%s to=%s deleted=%d",
                    root.name, memo.get("path"), root.path, missing,
                )  # fmt: skip
        else:
            kind = self._kind(root, memo, ident, (known, missing, present), lost=lost, staying=staying)
        if settling and kind in (None, "mass") and missing > moved:
            return "wait"  # judged once the root went quiet: only the moves are applied now
        if kind is None:
            if ident is not None:
                self._remember(root, _memo_of(ident, root))
            st.hold_kind = st.hold_since = None
            return None
        since = memo.get("hold", {}).get("since") if memo.get("hold", {}).get("kind") == kind else None
        since = float(since) if isinstance(since, (int, float)) else now
        # A start remembered ahead of now (a time saved by an older version on a wall clock
        # that was ahead): counted from now, not held until then.
        since = min(since, now)
        if kind == "mass" and now - since >= self.cfg.index.mass_deletion_hold_minutes * 60:
            log.warning(
                "mass_deletion_confirmed root=%s missing=%d of %d by=hold held_minutes=%.1f",
                root.name, missing, known, (now - since) / 60,
            )  # fmt: skip
            if ident is not None:
                self._remember(root, _memo_of(ident, root))
            st.hold_kind = st.hold_since = None
            return None
        self._remember(root, {**memo, "hold": {"kind": kind, "since": since}})
        if self.meta is not None and self.hold_record is not None:
            self.meta.set_meta(CLOCK_META, self.hold_record())
        held = lost - applied if kind == "mass" else missing  # a mass hold applies the moves at once
        st.held_deletions, st.hold_kind, st.hold_since = held, kind, since
        why = HOLD_WHY[kind].format(
            missing=lost if kind == "mass" else held, known=indexed if kind == "mass" else known
        )
        if kind == "mass":
            left = self.cfg.index.mass_deletion_hold_minutes * 60 - (now - since)
            then = f"applied in {_duration(left)} unless they come back"
            if copies:
                # A copy is no move (a backup looks the same): the user may know it for one.
                why += (
                    f" ({copies} of them have a copy with the same time and size in an excluded "
                    "folder: moved there by copying, or a backup?)"
                )
        else:
            then = "held while it stays so"
        advice = hold_advice(kind, f"`sidecar index --confirm-deletions {root.name}`")
        self.mark_offline(root, f"{root.path} {why}; {held} deletions {then} ({advice})")
        return kind

    def _kind(
        self,
        root: Root,
        memo: dict[str, Any],
        ident: Identity | None,
        counts: tuple[int, int, int],
        *,
        lost: int,
        staying: int,
    ) -> str | None:
        """The kind of hold a sweep's deletions call for (``hold_deletions``), or None;
        ``counts``: the notes known, missing and present."""
        known, missing, present = counts
        share = self.cfg.index.mass_deletion_share
        if missing and ident is not None and _moved(memo, ident):
            return "unmounted"
        if (
            missing
            and ident is not None
            and "dev" in memo
            and memo["dev"] != ident.dev
            and (present == 0 or missing / max(known, 1) > share)
        ):
            return "device"
        if known >= MASS_DELETION_MIN_FILES and present == 0 and lost and not self._inside_vault(root):
            # An empty folder where notes were is what an unmounted share looks like; not when
            # all its notes went elsewhere in the vault, nor for a wiki emptied inside a vault
            # that is there (its share is the vault's): a loss there is a mass deletion like any
            # other. Some notes moved and the rest lost: still empty, held whole.
            return "empty"
        if staying >= MASS_DELETION_MIN_FILES and lost / staying > share:
            return "mass"
        return None

    def _inside_vault(self, root: Root) -> bool:
        """Whether this root is a folder inside a vault that is there: the vault answers, is not
        empty, is on the mount it was on, and is not held as unmounted or empty itself. Asked
        with the probe timeout; no answer counts as not there."""
        if root.within is None:
            return False
        with self._lock:
            outer = next((s for s in self.roots.values() if s.path == str(root.within)), None)
        if outer is not None and (outer.hanging is not None or (outer.offline and outer.hold_kind != "mass")):
            return False
        try:
            return self.ask_vault_not_there() is False
        except (NoAnswer, OSError):
            return False

    def ask_vault_not_there(self) -> bool:
        """``vault_not_there`` asked with the probe timeout, one probe at a time (its answer
        shared by those asking meanwhile); one that times out marks the vault hanging. Raises
        NoAnswer."""
        vault = self.cfg.vault.path
        if vault is None:
            return True
        root = Root("vault", vault, exclude=self.cfg.vault.wiki_subfolder)
        return self._probe(root, "not-there", self.vault_not_there)
