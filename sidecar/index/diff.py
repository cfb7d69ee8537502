"""What a sweep has to do: compare the roots (or the changed paths of file events) with the manifest.

A full sweep lists a root through the supervisor (bounded by its timeouts) and diffs it with the
manifest: notes to (re)index, keys gone, skip reasons. An unreadable folder is no evidence that its
notes are gone, and deletions pass the supervisor's mass-deletion guard, which counts only
notes not found elsewhere: every root of a sweep is listed before any root's deletions are
decided, so a note moved to another key (in any root) is told from a loss. Changed paths from file
events are looked at one by one (a stat each; a folder is walked and compared with its indexed
notes; a vanished path takes the notes below it too), never the rest of their root; a root that
changed as a whole, is offline, or loses many notes at once gets a full sweep.
The change finder is cut by what its parts do into mixins of ``ChangeFinder``: ``events`` (the
changed paths of file events), ``unreadable`` (what cannot be read), ``retries`` (the read
backoff), ``moves``, ``spellings`` and ``skips``; here the full listing and its guard.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from sidecar.config import Config
from sidecar.index.bursts import Bursts
from sidecar.index.events import EventPaths, _recent
from sidecar.index.moves import MoveFinder
from sidecar.index.problems import Problems
from sidecar.index.refused import RefusedInboxes
from sidecar.index.retries import ReadRetries, _Stamp
from sidecar.index.skips import SkipReport
from sidecar.index.spellings import CaseSpellings
from sidecar.index.unreadable import UnreadableNotes, kept_by
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import FileState
from sidecar.vault.homeguard import held
from sidecar.vault.sources import NoteFile, Root, Skipped, inbox_root, vault_roots
from sidecar.vault.supervisor import RootUnreachable, Supervisor
from sidecar.vault.swept_roots import roots

log = logging.getLogger(__name__)

_SETTLED = ("indexed", "skipped")


@dataclass
class Diff:
    """What one sweep found: notes to (re)index, keys to delete, skip reasons."""

    work: list[NoteFile] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    # Unchanged notes whose ctime, device or inode the manifest lacks: (key, mtime, size, ctime,
    # dev, ino, birth time).
    stamps: list[tuple[str, int, int, int, int, int, int]] = field(default_factory=list)
    # The notes a rule leaves out, where this sweep looked (links.set_excluded): a root listed
    # whole or a folder walked (a key prefix, ending in "/"), or one changed path (its key) ->
    # the excluded notes found there, {key: rule}.
    excluded: dict[str, dict[str, str]] = field(default_factory=dict)
    # Those that file events' paths found, with their stat: where a root this sweep lists in
    # full (the wiki, its folder moved into an excluded one of the vault) may find its notes.
    left_out: list[NoteFile] = field(default_factory=list)
    # (device, inode) of excluded files with other links: a hard-linked backup of indexed notes
    # (``Manifest.forget_ids``).
    linked: set[tuple[int, int]] = field(default_factory=set)
    # Moves found: the old key of a note -> its new key (``gone`` holds the old ones). The old
    # entry leaves once the new one is written, batch by batch: left to the sweep's end, a renamed
    # folder's every note was found twice for as long as the whole folder took to read.
    moves: dict[str, str] = field(default_factory=dict)
    # Notes in ``work`` only because the index marked them to be cut again (chunking settings, the
    # model or the chunker changed; ``Manifest.reread_all``): their files did not change.
    recut: int = 0


@dataclass
class _Listing:
    """A root as a full sweep listed it: its notes, its manifest entries, the keys not found."""

    root: Root
    notes: list[NoteFile]
    known: dict[str, FileState]
    missing: list[str]
    started: float
    excluded: list[NoteFile] = field(default_factory=list)  # notes there that a rule leaves out


class ChangeFinder(MoveFinder, CaseSpellings, SkipReport, EventPaths, UnreadableNotes, ReadRetries):
    """Finds what changed in the roots; remembers what it already reported and recent event deletions."""

    def __init__(
        self,
        cfg: Config,
        manifest: Manifest,
        supervisor: Supervisor,
        problems: Problems,
        excluded_by: Callable[[str], str | None],
    ) -> None:
        self.cfg = cfg
        self.manifest = manifest
        self.supervisor = supervisor
        self.problems = problems
        self.excluded_by = excluded_by
        self._unreadable: dict[str, str] = {}  # root name -> what cannot be read there
        self._listed_unreadable: dict[str, list[str]] = {}  # root name -> what its listing could not read
        self._causes: dict[str, str] = {}  # path -> why its listing or stat failed ("Input/output error")
        # Indexed notes whose read failed (no permission, I/O error), kept as they were, by (root
        # name, path): counted and named as unreadable until they are read, vanish or their root goes.
        self._unread_notes: dict[tuple[str, str], str] = {}
        # Notes not in the index because their read failed, by (root name, path): the manifest
        # keeps them as not read (``records.file_record``), every sweep reads them again, and
        # status names them until they read, vanish or their root goes.
        self._never_read: dict[tuple[str, str], str] = {}
        # Notes whose read failed, by (root name, path): (failures in a row, the full sweep it is
        # tried again at, its mtime and size then). A note that stays unreadable (an EIO, a file
        # of mode 000) was read, paid a read timeout and logged a warning at every sweep for good:
        # tried again after 1, 2, 4... full sweeps, up to about RETRY_MOST_HOURS; at once on a
        # file event or a change of its stat.
        # Their failures are kept in the manifest (``save_retries``): each restart began the
        # backoff anew and warned again.
        self._retry: dict[tuple[str, str], tuple[int, int, _Stamp]] = {}
        self.full_sweeps = 0  # full listings so far (``diff_roots``)
        self.retry_waiting = 0  # failed notes the last full sweep left for later
        self._event_deletions: dict[str, list[float]] = {}  # root name -> times of recent ones
        # Every deletion applied without a hold, by root (file events' and judgments'): counted
        # with the next judgment within EVENT_DELETION_WINDOW_S.
        self._deleted: dict[str, list[float]] = {}
        # The keys a mass hold holds, by root: an event naming them again (a folder walked) neither
        # waits nor sweeps for them (they were counted as waiting beside the hold).
        self._held: dict[str, set[str]] = {}
        # A root's deletions beyond the few applied at once wait for its file events to go quiet
        # and are judged whole (the index loop tells it the events, and asks for the sweeps).
        self.bursts = Bursts(cfg.index.mass_deletion_quiet_seconds)
        self._skips_named: set[tuple[str, str]] = set()  # (path, reason) already in the log
        # Files left out now, by (root name, path): full sweeps set a root's, events each path's.
        self._skips: dict[tuple[str, str], str] = {}
        self._too_long_named: list[str] = []  # the folders the last path_too_long line named
        self._skip_sizes: dict[tuple[str, str], int] = {}  # their bytes, of those too large
        self._retry_saved = self._load_retries()
        # The re-open of the notes kept unreadable before a rebuild's refusal (``_still_unread``):
        # one at a time, and none while the last one's thread still hangs on a share.
        self._reopening = threading.Lock()
        self._reopen_stuck: threading.Thread | None = None
        self._retry_all = False  # the sweep under way reads the notes waiting their turn too
        # Agents' inboxes refused now (a symlink, another user's folder) and the notes of each that
        # left the index since it was refused: said in a problem while it stays refused.
        self.refused = RefusedInboxes(cfg.agents_dir, problems, self.manifest)

    def skip_counts(self) -> dict[str, int]:
        """Files left out now, by reason (what `status` lists as skipped)."""
        out: dict[str, int] = {}
        for reason in self._skips.values():
            out[reason] = out.get(reason, 0) + 1
        if self._unread_notes:
            out["unreadable"] = out.get("unreadable", 0) + len(self._unread_notes)
        return out

    def keep_roots(self, names: Collection[str]) -> None:
        """Forget what is kept of roots no longer swept (an agent's inbox emptied or removed, a
        root taken out of the configuration): their skips were counted in status for as long as
        it ran, and an entry per agent that ever wrote stayed for good."""
        self._skips = {k: v for k, v in self._skips.items() if k[0] in names}
        self._event_deletions = {k: v for k, v in self._event_deletions.items() if k in names}
        self._deleted = {k: v for k, v in self._deleted.items() if k in names}
        self._held = {k: v for k, v in self._held.items() if k in names}
        self._unread_notes = {k: v for k, v in self._unread_notes.items() if k[0] in names}
        self._never_read = {k: v for k, v in self._never_read.items() if k[0] in names}
        self._retry = {k: v for k, v in self._retry.items() if k[0] in names}
        self._listed_unreadable = {k: v for k, v in self._listed_unreadable.items() if k in names}
        if any(k not in names for k in self._unreadable):
            self._unreadable = {k: v for k, v in self._unreadable.items() if k in names}
            self._report_unreadable()

    def roots(self) -> list[Root]:
        """The roots to sweep: those of ``swept_roots.roots`` (inboxes with notes), plus the inboxes
        of agents still in the index whose notes or folder are gone, until their entries are.
        While the home's agents folder is gone or replaced (its share unmounted), what is there
        is not listed: the indexed agents' inboxes are unreachable roots (nothing deleted)."""
        guard = self.supervisor.home
        if guard.record_error is None:
            self.problems.clear("home", subject="record")
        else:  # only a log line, it went unnoticed (a service sandbox that cannot write it)
            self.problems.report(
                "home",
                f"the home's identity cannot be recorded ({guard.record_error}): a restart while "
                "its share is not mounted would take the bare mount point for the home",
                subject="record",
            )
        why = guard.problem()
        if why is None:
            self.problems.clear("home")
            out = roots(self.cfg)
        else:
            self.problems.report("home", held(why))
            out = vault_roots(self.cfg)
        present = {r.agent for r in out if r.source == "memory"}
        indexed = set(self.manifest.memory_agents())
        out.extend(inbox_root(self.cfg, a) for a in sorted(indexed - present))
        if why is None:  # a refused inbox not listed while the home is away is not known gone
            self.forget_inboxes({r.name for r in out})
        return out

    def diff_roots(
        self,
        roots: Sequence[Root],
        diff: Diff,
        confirm: Collection[str] = (),
        excluded: dict[str, int] | None = None,
        *,
        retry_all: bool = False,
    ) -> None:
        """Scan the roots and add what changed and what is gone to ``diff``. ``retry_all``: the
        notes whose read failed are read now, also those waiting their turn (a sweep asked for).

        Every root is listed before any root's deletions are decided: a note moved from one root
        to another (the vault into its wiki) vanishes from the one and appears in the other, and
        the guard must know the new keys of all of them, whatever the order (``diff.work``
        already holds those that file events found). The vault is decided before its wiki,
        whose guard asks whether the vault around it is there."""
        self.full_sweeps += 1
        self.retry_waiting = 0
        self._retry_all = retry_all
        listings = [x for r in roots if (x := self._list(r, diff, excluded)) is not None]
        self.refused.tell()
        self.refused.save()
        alien: set[str] = set()  # roots whose folder is not the share now: no evidence of moves
        for listing in sorted(listings, key=lambda x: x.root.within is not None):
            if not self._decide(listing, listings, diff, listing.root.name in confirm, alien):
                alien.add(listing.root.name)

    def _list(self, root: Root, diff: Diff, excluded: dict[str, int] | None) -> _Listing | None:
        """List a root and compare it with the manifest (None: unreachable, marked offline)."""
        supervisor = self.supervisor
        status = supervisor.status(root)
        t0 = time.monotonic()  # the sweep's duration, which a step of the wall clock must not stretch
        try:
            found = supervisor.list_root(root)
        except RootUnreachable as exc:
            supervisor.unreachable(root, exc)
            status.waiting_deletions = 0  # nothing judged, nothing deleted: the retry looks again
            self.bursts.judged(root.name)
            return None
        notes = [f for f in found if isinstance(f, NoteFile)]
        prefix = root.key_of("x")[:-1]  # "vault/", "wiki/", "memory/<agent>/"
        known = self.manifest.file_states(prefix)
        notes, left_out = self._without_excluded(
            root, notes, known, diff, {} if excluded is None else excluded
        )
        diff.linked.update(n.shared for n in left_out if n.shared[1])
        skipped = [s for s in found if isinstance(s, Skipped)]
        self._skips = {k: v for k, v in self._skips.items() if k[0] != root.name}
        for s in skipped:
            diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
            self._skipped(root, s)
        status.seen, status.skipped = len(notes), len(skipped)
        seen = {n.key for n in notes}
        listed = {str(n.path) for n in notes}  # an unreadable note that vanished is no longer one
        self._unread_notes = {
            k: v for k, v in self._unread_notes.items() if k[0] != root.name or k[1] in listed
        }
        self._never_read = {k: v for k, v in self._never_read.items() if k[0] != root.name or k[1] in listed}
        self._retry = {k: v for k, v in self._retry.items() if k[0] != root.name or k[1] in listed}
        # An error reading a folder (or a file's stat) is no evidence that its notes are gone.
        kept = self._unreadable_prefixes(root, skipped)
        missing = [k for k in known if k not in seen and not kept_by(k, kept)]
        if root.source == "memory":
            self._inbox_refused(root, skipped, len(missing))
        return _Listing(root, notes, known, missing, t0, left_out)

    def _inbox_refused(self, root: Root, skipped: Sequence[Skipped], missing: int) -> None:
        """An agent's inbox that its scan refused (a symbolic link, another user's folder: its only
        skip is the inbox itself) is neither read nor served: its indexed notes leave the index
        (``missing``, a memory root is never held). Said as a problem (``diff_roots`` tells them
        once every root is listed, one per refused folder), not only counted among the skipped
        files: the agent's memory is no longer found. Cleared once the inbox is read."""
        why = next((s.reason for s in skipped if s.path == root.path), None)
        self.refused.listed(root.name, root.agent, why, missing)

    def forget_inboxes(self, names: Collection[str]) -> None:
        """The refused inboxes no longer among the roots ``names`` (removed): their problem goes."""
        self.refused.forget(names)
        self.refused.tell()

    def _decide(
        self, listing: _Listing, listings: Sequence[_Listing], diff: Diff, confirm: bool, alien: set[str]
    ) -> bool:
        """A listed root's deletions through the guard, and its work; False if what is there
        now is not the share (the root is left alone)."""
        supervisor = self.supervisor
        root, notes, known, missing = listing.root, listing.notes, listing.known, listing.missing
        moved: set[str] = set()
        away: set[str] = set()
        copies = 0
        # Deletions applied a moment ago by file events or an earlier judgment count with these
        # (one deletion in several bursts or batches is judged as one), unless confirmed.
        applied = len(_recent(self._deleted, root)) if missing and not confirm else 0
        # A root whose deletions and new notes still come (``index.bursts``; a held root is held
        # already: its retry judges it at once, or it was swept whole every second while busy).
        settling = (
            bool(missing)
            and not confirm
            and supervisor.status(root).hold_kind is None
            and self.bursts.busy(root.name)
        )
        # Moves are looked for whatever the count (and while the root settles): a folder renamed
        # is applied at once, each old entry with its new one. Looked for only where the guard
        # could hold, a rename of a tenth of a vault was none once the listing outlasted the
        # root's quiet time: every note read again, both copies found until the sweep's end.
        if missing:
            left_out = self._left_out(listings, alien, diff.left_out)
            moved, away = self._moves(listing, listings, alien, diff, left_out)
            copies = self._excluded_copies(listing, left_out, moved)
        was_held = supervisor.status(root).hold_kind is not None
        hold = supervisor.hold_deletions(
            root,
            len(known),
            len(missing),
            len(notes),
            confirm,
            moved=len(moved),
            moved_away=len(away),
            copies=copies,
            arrived=max(0, sum(1 for n in notes if n.key not in known) - (len(moved) - len(away))),
            applied=applied,
            settling=settling,
        )
        if hold == "wait":  # only the loss no move explains waits: the moves are applied below
            self._wait(root, set(missing) - moved, whole=True)
        else:
            self._judged(root, hold, len(missing))
        if hold == "mass":
            self._held[root.name] = set(missing) - moved
        else:
            self._held.pop(root.name, None)
        if hold is None:
            supervisor.mark_online(root)
            self._event_deletions.pop(root.name, None)  # judged: a few may go at once again
            if confirm or was_held:
                self._deleted.pop(root.name, None)  # a hold ended: no burst goes on
            else:  # moves are no loss: not counted with the next judgment
                lost = len(set(missing) - moved)
                self._deleted[root.name] = _recent(self._deleted, root) + [time.monotonic()] * lost
            diff.gone.extend(missing)
        elif hold in ("mass", "wait"):
            diff.gone.extend(k for k in missing if k in moved)  # moves are no loss: at once
        status = supervisor.status(root)
        status.last_sweep, status.last_sweep_seconds = time.time(), time.monotonic() - listing.started
        if hold == "wait" and status.offline and status.hold_kind != "mass":
            supervisor.mark_online(root)  # reachable and on its mount: only its deletions wait
        if hold not in (None, "mass", "wait"):
            return False  # what is there now is not the share: leave the root alone while it stays so
        waiting = self.retry_waiting
        self._add_work(notes, known, diff, full=True)
        if self.retry_waiting > waiting:
            log.info("unreadable_waiting root=%s count=%d", root.name, self.retry_waiting - waiting)
        return True

    def _add_work(
        self, notes: Sequence[NoteFile], known: dict[str, FileState], diff: Diff, *, full: bool = False
    ) -> None:
        """``full``: a full sweep's listing (a note whose read failed waits its turn there; a
        file event's look reads it at once)."""
        for n in notes:
            st = known.get(n.key)
            # No record: a rebuild emptied the index, which reads every note (one waiting its
            # turn was put back unread, and the rebuild said unfinished for hours).
            if full and st is not None and not self._retry_all and self._retry_later(n):
                self.retry_waiting += 1
                diff.unchanged += 1
            elif st is None or (st.mtime_ns, st.size) != (n.mtime_ns, n.size) or st.state not in _SETTLED:
                diff.work.append(n)
                # Marked to be cut again (size -1), its file unchanged; a failed read is marked
                # so too, but is no indexed note.
                if st is not None and st.size == -1 and st.mtime_ns == n.mtime_ns and st.state == "indexed":
                    diff.recut += 1
            elif (n.root.name, str(n.path)) in self._unread_notes or (
                n.root.name,
                str(n.path),
            ) in self._retry:
                # Kept as indexed after a failed read (in this process, or before a restart): tried
                # again until it reads (a folder made readable again changes no stat of its notes).
                diff.work.append(n)
            elif st.ctime_ns and n.ctime_ns and st.ctime_ns != n.ctime_ns:
                # Same size and mtime, yet changed (mtime set back by a tool, a clock too coarse
                # for two saves): read again; equal bytes only update the stat.
                diff.work.append(n)
            else:
                diff.unchanged += 1
                if (not st.ctime_ns and n.ctime_ns) or (st.dev, st.ino) != (n.dev, n.ino):
                    born = n.born()  # a statx, for these few only: none in a sweep of unchanged notes
                    diff.stamps.append((n.key, n.mtime_ns, n.size, n.ctime_ns, n.dev, n.ino, born))

    def _wait(self, root: Root, keys: Collection[str], whole: bool = False) -> None:
        """These deletions of the root wait for its events to go quiet (said once); ``whole``: a
        full sweep's, all that wait now."""
        st = self.supervisor.status(root)
        self.bursts.wait(root.name, keys, whole=whole)
        count = self.bursts.waiting(root.name)
        if not st.waiting_deletions:
            log.info(
                "deletions_waiting root=%s count=%d until=no deletion or new note for %.1fs",
                root.name, count, self.bursts.quiet_s,
            )  # fmt: skip
        st.waiting_deletions = count

    def _judged(self, root: Root, hold: str | None, count: int) -> None:
        """A full sweep judged the root's deletions: those that waited are said in the log."""
        self.bursts.judged(root.name)
        st = self.supervisor.status(root)
        if st.waiting_deletions:
            log.info("deletions_judged root=%s missing=%d hold=%s", root.name, count, hold or "-")
        st.waiting_deletions = 0

    def _without_excluded(
        self,
        root: Root,
        notes: list[NoteFile],
        states: dict[str, FileState],
        diff: Diff,
        counts: dict[str, int],
    ) -> tuple[list[NoteFile], list[NoteFile]]:
        """The notes kept, and those a rule leaves out; indexed ones of the latter are deleted at
        once (a rule is no vanished mount, so the mass-deletion guard does not hold them)."""
        if root.source == "memory":
            return notes, []
        kept: list[NoteFile] = []
        dropped: list[NoteFile] = []
        prefix = root.key_of("x")[:-1]
        # Kept as link targets (notes.links.set_excluded), whichever rule it is: Obsidian's
        # Excluded files hide a note from search, not from links; index.exclude is sidecar's own
        # word for the same and is treated alike (``get`` reads either by its path already; an
        # excluded note is named, never searched). Only what the walk of a root found: never a
        # path outside the vault or the wiki.
        left_out = diff.excluded.setdefault(prefix, {})
        for n in notes:
            rule = self.excluded_by(n.key)
            if rule is None:
                kept.append(n)
            else:
                counts[rule] = counts.get(rule, 0) + 1
                left_out[n.key] = rule
                dropped.append(n)
        for key in [k for k in states if k.startswith(prefix) and self.excluded_by(k) is not None]:
            diff.gone.append(key)
            del states[key]
        return kept, dropped
